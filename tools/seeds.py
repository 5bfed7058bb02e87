"""Train one profile over several seeds on an existing feature cache; one JSON line per seed.

The seed spread of the walk-forward validation net PnL is what tells a learned edge from a lucky
initialisation (README, known limits). Each line holds the per-fold validation net PnL, trades and
Sharpe, and the long baseline's PnL (or ``stopped``: the anomaly guard's diagnosis); the last line
is the mean over the seeds that finished and the count of stopped ones.

    python tools/seeds.py runs/main/cache --seeds 7,8,9 --out runs/seeds [--jobs 3] [--set k=v ...]

``--jobs N`` trains N seeds at once in separate processes (one per core: the smoke profile uses one
thread per run); each seed's result is the same as alone, and the lines come in seed order.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from foxhunt.config.loader import load_config
from foxhunt.features.cache import open_cache
from foxhunt.train.guard import AnomalyError
from foxhunt.train.run import train


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache", type=Path, help="a feature cache file or the folder holding one")
    ap.add_argument("--seeds", default="7,8,9", help="comma-separated run seeds")
    ap.add_argument("--out", type=Path, required=True, help="folder for one training run per seed")
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--set", action="append", default=[], dest="sets", help="config override (repeatable)")
    ap.add_argument("--jobs", type=int, default=1, help="seeds trained at once, one process each")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    jobs = [(args.cache, args.profile, args.sets, seed, args.out) for seed in seeds]
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            rows = pool.map(_one_seed, *zip(*jobs, strict=True))
            totals = [_report(row) for row in rows]
    else:
        totals = [_report(_one_seed(*job)) for job in jobs]
    done = [t for t in totals if t is not None]
    mean = round(sum(done) / len(done), 2) if done else None
    print(json.dumps({"mean_total": mean, "stopped": len(totals) - len(done), "sets": args.sets}))


def _one_seed(cache_path: Path, profile: str, sets: list[str], seed: int, out: Path) -> dict:
    cache = open_cache(cache_path if cache_path.is_file() else next(cache_path.glob("*.arrow")))
    cfg = load_config(profile=profile, overrides=[*sets, f"run.seed={seed}"])
    t0 = time.perf_counter()
    try:
        folds = train(cache, cfg, out / f"seed{seed}", log=lambda _: None)
    except AnomalyError as err:  # one seed's stopped run is a result, not the end of the study
        return {"seed": seed, "stopped": str(err), "seconds": round(time.perf_counter() - t0, 1)}
    total = sum(f["net_pnl"] for f in folds)
    return {
        "seed": seed,
        "net_pnl": [round(f["net_pnl"], 2) for f in folds],
        "total": round(total, 2),
        "trades": [f["trades"] for f in folds],
        "sharpe": [round(f["sharpe_annual"], 2) for f in folds],
        "long": [round(f["baselines"]["long"]["net_pnl"], 2) for f in folds],
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _report(row: dict) -> float | None:
    print(json.dumps(row), flush=True)
    return row.get("total")


if __name__ == "__main__":
    main()
