"""The alpha verdict's power bound: the forecast test's z with the planted carrier itself as the forecast.

    nice -n 10 .venv/bin/python bench/alpha_oracle.py --none 0 --alpha2 16 --smoke 0 --seed0 9100 --jobs 2

The markets are bench/alpha_power.py's (same seeds, the smoke profile at 3 sessions x 30k events,
30 s bars, horizons 5/20/60, 3 purged walk-forward folds). On each, the oracle forecast is the
simulator's own probability of an up move, ``p_t = clip(1/2 + alpha S_t, 0.02, 0.98)``, with ``S_t``
the planted carrier (the level-1 imbalance EMA over ``synth.alpha_horizon_events`` events) at the
row's last event: the feature pipeline's ``ofi.l1_imbalance_ema_slow`` column built with its horizon
set to the carrier's (the column's own definition, so the carrier is recomputed from the market's
events, as :func:`foxhunt.data.synth.alpha_signal` does). Its z is the verdict's test
(:func:`foxhunt.alpha.metrics.forecast_terms`, centred at 1/2) on the same valid validation rows the
check pools. No model fitted on ~5,000 rows can do better on average, so where the oracle's z is
often below the verdict's critical value (about 2.4 for 9 tests) the power target is bounded by
the data, and where it is far above, by the models. On no-signal markets (alpha 0) the carrier
with alpha 1 is scored the same way: a forecast that carries nothing, as a check that its z is
centred. Prints one line per market and a table; writes ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from alpha_power import KINDS, SEED_OFFSET, _config  # noqa: E402

CARRIER_COLUMN = "ofi.l1_imbalance_ema_slow"


def oracle_z(kind: str, seed: int, events: int, sessions: int) -> dict[str, Any]:
    """One market's oracle z per horizon, on the validation rows the alpha check pools."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    import numpy as np

    from foxhunt.alpha.metrics import forecast_terms, forecast_test_from_terms, mid_increments
    from foxhunt.data.synth import write_synthetic
    from foxhunt.dataset.build import get_or_build
    from foxhunt.validation.folds import purged_walk_forward
    from foxhunt.validation.labels import direction_labels

    base = _config(kind, seed, events, sessions)
    horizon_events = base.synth.alpha_horizon_events
    cfg = _config(
        kind, seed, events, sessions, (f"features.ofi.imbalance_slow_horizon_events={horizon_events}",)
    )
    with tempfile.TemporaryDirectory(prefix="foxhunt-alpha-oracle-") as tmp:
        write_synthetic(cfg.synth, Path(tmp) / "m")
        cache = get_or_build([Path(tmp) / "m"], cfg, Path(tmp) / "c")
        carrier = np.asarray(cache.column(CARRIER_COLUMN), np.float64)
        close = cache.column("close").astype(np.float64)
        seg = cache.column("segment_start").astype(bool)
    horizons = tuple(cfg.alpha.horizons)
    folds = purged_walk_forward(len(close), cfg.folds, max(horizons))
    dx = mid_increments(close, seg)
    strength = cfg.synth.alpha if cfg.synth.alpha > 0 else 1.0
    z = {}
    for k in horizons:
        valid = direction_labels(close, seg, (k,))[1][:, 0]
        rows = np.concatenate([f.validation[valid[f.validation]] for f in folds])
        p = np.clip(0.5 + strength * carrier[rows], 0.02, 0.98)
        z[k] = forecast_test_from_terms(forecast_terms(rows, p, np.full(len(rows), 0.5), dx, k)).z
    return {"kind": kind, "seed": seed, "alpha": cfg.synth.alpha, "z": z}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--none", type=int, default=0, help="No-signal markets (synth.alpha=0).")
    ap.add_argument("--alpha2", type=int, default=16, help="Planted alpha-2 markets.")
    ap.add_argument("--smoke", type=int, default=0, help="Planted markets at the smoke profile's alpha.")
    ap.add_argument("--events", type=int, default=30_000, help="Book events per session.")
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--seed0", type=int, default=9100, help="First no-signal seed (planted: +1000, +2000).")
    ap.add_argument("--jobs", type=int, default=1, help="Markets at a time.")
    ap.add_argument("--critical", type=float, default=2.4, help="The verdict's critical z, for the table.")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "alpha_oracle.json")
    args = ap.parse_args()
    counts = {"none": args.none, "alpha2": args.alpha2, "smoke": args.smoke}
    jobs = [(kind, args.seed0 + SEED_OFFSET[kind] + i) for kind in KINDS for i in range(counts[kind])]
    rows = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(oracle_z, k, s, args.events, args.sessions) for k, s in jobs]
        for fut in as_completed(futures):
            row = fut.result()
            rows.append(row)
            zs = ", ".join(f"{k}: {z:.2f}" for k, z in row["z"].items())
            print(f"{row['kind']:<7} seed {row['seed']}: oracle z {zs}", flush=True)
    import numpy as np

    table = []
    print(f"{'markets':<8} {'n':>3}  {'mean z at 5 / 20 / 60':>24}  {'smallest':>20}  best z >= critical")
    for kind in KINDS:
        sub = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["seed"])
        if not sub:
            continue
        z = np.array([list(r["z"].values()) for r in sub])
        above = int((z.max(axis=1) >= args.critical).sum())
        table.append(
            {
                "kind": kind,
                "markets": len(sub),
                "mean": z.mean(0).tolist(),
                "min": z.min(0).tolist(),
                "above": above,
            }
        )
        mean = " / ".join(f"{v:.2f}" for v in z.mean(0))
        low = " / ".join(f"{v:.2f}" for v in z.min(0))
        print(f"{kind:<8} {len(sub):>3}  {mean:>24}  {low:>20}  {above} of {len(sub)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    body = {"argv": sys.argv[1:], "critical": args.critical, "table": table, "markets": rows}
    args.out.write_text(json.dumps(body, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
