"""Do the library statistics change foxhunt's numbers? The alpha verdict's numbers of one code version
(run this script under each version's source and compare), the cost of scikit-learn's AUC and
log-loss against the batched statistics, and what scikit-learn's RobustScaler would change in the
normaliser (it is an IQR scaler; foxhunt's is a MAD scaler over the non-zero values).

    PYTHONPATH=src .venv/bin/python bench/stats_agreement.py --out bench/results/stats-new.json
    PYTHONPATH=OLD/src .venv/bin/python bench/stats_agreement.py --out bench/results/stats-old.json
    .venv/bin/python bench/stats_agreement.py --compare bench/results/stats-{old,new}.json

The market is the synthetic one with planted alpha (1.0, seed 33, 2 sessions x 15k events, snapshot
rows), checked at horizons 20 and 200 with the test suite's fast alpha settings (300 bootstrap
replicates). ``--compare`` prints the largest difference of every number of the two results. The
timings are the best of 5 calls of this version's ``auc``, ``log_loss`` and ``binned_auc``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.alpha.test_check import FAST  # noqa: E402  (the test suite's fast alpha settings)


def _numbers(obj: Any, path: str = "") -> dict[str, float]:
    """Every number of a JSON tree by its path (bools and strings left out)."""
    out: dict[str, float] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_numbers(v, f"{path}.{k}"))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.update(_numbers(v, f"{path}[{i}]"))
    elif isinstance(obj, int | float) and not isinstance(obj, bool):
        out[path] = float(obj)
    return out


def compare(a_path: Path, b_path: Path) -> int:
    a = _numbers(json.loads(a_path.read_text())["alpha"])
    b = _numbers(json.loads(b_path.read_text())["alpha"])
    common = sorted(set(a) & set(b))
    diffs = [
        (abs(a[k] - b[k]), k)
        for k in common
        if not (math.isnan(a[k]) and math.isnan(b[k])) and a[k] != b[k]
    ]
    print(f"{len(common)} numbers in both ({len(set(a) ^ set(b))} in one only); {len(diffs)} differ")
    for d, k in sorted(diffs, reverse=True)[:15]:
        print(f"  {d:.3e}  {k}  {a[k]!r} -> {b[k]!r}")
    return 0


def _timed(fn: Any, *args: Any, repeats: int = 5) -> float:
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t)
    return best


def scaler_difference(cache: Any, cfg: Any) -> dict[str, Any]:
    """foxhunt's fold scalers against scikit-learn's RobustScaler (unit_variance: IQR / 1.349, the
    Gaussian standard deviation as 1.4826 MAD is) fitted on the same training rows."""
    from sklearn.preprocessing import RobustScaler as SkRobustScaler

    from foxhunt.validation.folds import make_folds
    from foxhunt.validation.normalise import apply

    x = cache.features()
    folds = make_folds(x, cache.columns, cfg.folds, int(cache.meta["label_span"]))
    ratios, changed = [], []
    for fd in folds:
        train = x[fd.fold.train]
        sk = SkRobustScaler(unit_variance=True).fit(train)
        sk_scale = np.where(sk.scale_ > 0, sk.scale_, 1.0)
        ratios.append(np.log(sk_scale / fd.scaler.scale))
        ours = apply(fd.scaler, x)
        theirs = np.clip((x - sk.center_) / sk_scale, -fd.scaler.clip, fd.scaler.clip).astype(np.float32)
        changed.append(float(np.mean(ours != theirs)))
    r = np.abs(np.concatenate(ratios))
    return {
        "folds": len(folds),
        "columns": len(cache.columns),
        "median_abs_log_scale_ratio": float(np.median(r)),
        "max_abs_log_scale_ratio": float(np.max(r)),
        "columns_scale_off_by_over_10pct": int(np.sum(r > math.log(1.1))),
        "share_of_normalised_values_that_differ": float(np.mean(changed)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="JSON of this code version's numbers")
    ap.add_argument("--compare", type=Path, nargs=2, metavar=("OLD", "NEW"))
    ap.add_argument("--jobs", type=int, default=1, help="unused: one market, one process")
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        ap.error("--out or --compare is required")

    from foxhunt.alpha import metrics
    from foxhunt.alpha.check import run_alpha
    from foxhunt.config.loader import load_config
    from foxhunt.data.config import SynthConfig
    from foxhunt.data.synth import write_synthetic
    from foxhunt.dataset.build import get_or_build

    cfg = load_config("smoke", overrides=FAST)
    with tempfile.TemporaryDirectory() as tmp:
        market = Path(tmp) / "m"
        write_synthetic(SynthConfig(seed=33, sessions=2, events_per_session=15_000, alpha=1.0), market)
        cache = get_or_build([market], cfg, Path(tmp) / "c")
        result = run_alpha(cache, cfg.alpha, cfg.folds, (20, 200), cfg.run.seed)
        scaler = scaler_difference(cache, cfg)

    rng = np.random.default_rng(0)
    timings = []
    for n in (10_000, 600_000):
        y = rng.integers(0, 2, n)
        p = 1 / (1 + np.exp(-(0.2 * y + rng.normal(size=n))))
        timings.append(
            {
                "rows": n,
                "auc_s": _timed(metrics.auc, y, p),
                "log_loss_s": _timed(metrics.log_loss, y, p),
                "binned_auc_s": _timed(metrics.binned_auc, y, p),
            }
        )
    body = {"alpha": result.to_dict(), "scaler_vs_sklearn": scaler, "timings": timings}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(body, indent=2, default=float))
    print(f"verdict: {result.verdict}")
    print("rows      auc (s)  log_loss (s)  binned_auc (s)")
    for t in timings:
        print(f"{t['rows']:>8}  {t['auc_s']:7.3f}  {t['log_loss_s']:12.3f}  {t['binned_auc_s']:14.3f}")
    print("sklearn RobustScaler vs foxhunt's scaler:", json.dumps(scaler))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
