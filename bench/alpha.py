"""Alpha-check benchmark: 500 k rows x 81 features, 5 horizons, 3 folds, both models (goal: <= 3 min
on 2 CPU cores), next to a bare LightGBM fit on the same rows as the reference.

    .venv/bin/python bench/alpha.py [--events 250000] [--sessions 2] [--features 81]

The rows are the synthetic market's snapshot rows (planted alpha 1.0); the first ``--features``
columns of the snapshot stack are used (market, ofi, part of tlob), as a stand-in for the 81-wide
snapshot stack of the old system. Prints a table, writes bench/results/alpha.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import lightgbm as lgb
import numpy as np

from foxhunt.alpha.check import run_alpha, targets
from foxhunt.config.loader import load_config
from foxhunt.data.config import SynthConfig
from foxhunt.data.synth import write_synthetic
from foxhunt.dataset.build import get_or_build

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from run import hardware  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=250_000)
    ap.add_argument("--sessions", type=int, default=2)
    ap.add_argument("--features", type=int, default=81)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "alpha.json")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="foxhunt-bench-alpha-"))
    write_synthetic(
        SynthConfig(seed=5, sessions=args.sessions, events_per_session=args.events, alpha=1.0), tmp / "m"
    )
    cfg = load_config("smoke", overrides=["data.row_unit=snapshot"])
    t0 = time.perf_counter()
    cache = get_or_build([tmp / "m"], cfg, tmp / "c")
    t_cache = time.perf_counter() - t0
    meta = dict(cache.meta, columns=cache.columns[: args.features])
    narrow = dataclasses.replace(cache, meta=meta)
    horizons = (5, 20, 50, 200, 500)
    t0 = time.perf_counter()
    result = run_alpha(narrow, cfg.alpha, cfg.folds, horizons, cfg.run.seed)
    t_alpha = time.perf_counter() - t0
    # Reference: one bare LightGBM fit (same rows, first fold's training rows, horizon 50).
    x = narrow.features()
    y, usable = targets(narrow.column("close"), narrow.column("segment_start").astype(bool), 50)
    rows = np.flatnonzero(usable)[: int(usable.sum() * 0.6)]
    t0 = time.perf_counter()
    lgb.train(
        {"objective": "binary", "num_threads": 2, "verbose": -1, "max_bin": 63, "num_leaves": 31},
        lgb.Dataset(x[rows], y[rows]),
        num_boost_round=100,
    )
    t_ref = time.perf_counter() - t0
    fits = 2 * len(horizons) * len(result.fold_summaries)
    table = [
        ("feature cache build (snapshot rows)", len(x), t_cache),
        (
            f"alpha check: {len(horizons)} horizons x {len(result.fold_summaries)} folds x 2 models",
            len(x),
            t_alpha,
        ),
        ("reference: one bare lightgbm.train, 100 trees", len(rows), t_ref),
    ]
    print(f"{'step':<60} {'rows':>10} {'seconds':>9}")
    for name, n, t in table:
        print(f"{name:<60} {n:>10,} {t:>9.1f}")
    print(
        f"alpha check: {t_alpha:.1f} s for {fits} fits on {len(x):,} rows x {args.features} features "
        f"(goal <= 180 s; ratio goal/actual {180 / t_alpha:.2f}); verdict {result.verdict}; "
        f"best {result.best()}; hardware: {hardware()['cpu']}, {hardware()['cores']} cores"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "hardware": hardware(),
                "rows": len(x),
                "features": args.features,
                "horizons": horizons,
                "folds": len(result.fold_summaries),
                "seconds_cache": t_cache,
                "seconds_alpha": t_alpha,
                "seconds_reference_single_lgbm": t_ref,
                "goal_seconds": 180,
                "verdict": result.verdict,
            },
            indent=2,
        )
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
