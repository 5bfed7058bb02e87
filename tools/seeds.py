"""Train one profile over several seeds on an existing feature cache; one JSON line per seed.

``foxhunt seeds`` is the command (it builds the cache from ``--data`` or the embedded synthetic
market, and writes seeds.json and seeds.png); this probe runs the same :func:`train_one_seed` on a
cache built before, so a study can reuse one cache across settings. Each line holds the per-fold
validation net PnL, trades, Sharpe and the baselines' net PnL (or ``stopped``: the anomaly guard's
diagnosis); the last line is the capture's mean and 95% interval over the seeds that finished and
the seeds' committee (their agents' mean E[Q] deciding, per fold: ``foxhunt.tune.seeds.committee_result``).

    .venv/bin/python tools/seeds.py runs/main/cache --seeds 7,8,9 --out runs/seeds [--jobs 3] [--set k=v ...]

``--jobs N`` trains N seeds at once in separate processes (one per core: the smoke profile uses one
thread per run); each seed's result is the same as alone, and the lines come in seed order.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from foxhunt.backtest.reference import planted_column
from foxhunt.config.loader import load_config
from foxhunt.dataset.leaks import cache_sources
from foxhunt.errors import FoxhuntError, FrontDoor, front_door
from foxhunt.features.cache_file import open_cache
from foxhunt.tune.seeds import committee_result, run_seeds, seed_folder, summarise_seeds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache", type=Path, help="a feature cache file or the folder holding one")
    ap.add_argument("--seeds", default="7,8,9", help="comma-separated run seeds")
    ap.add_argument("--out", type=Path, required=True, help="folder for one training run per seed")
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--set", action="append", default=[], dest="sets", help="config override (repeatable)")
    ap.add_argument("--jobs", type=int, default=1, help="seeds trained at once, one process each")
    args = ap.parse_args()
    cfg = load_config(profile=args.profile, overrides=args.sets)
    path = args.cache if args.cache.is_file() else next(args.cache.glob("*.arrow"))
    seeds = [int(s) for s in args.seeds.split(",")]
    # the planted signal's column when the cache was built from a synthetic market (its synth.json)
    try:
        planted = planted_column(cache_sources(open_cache(path), path))
    except FoxhuntError:  # the sources moved: the direction-gap diagnostic is n/a
        planted = None
    results = run_seeds(cfg, path, seeds, args.out, workers=args.jobs, planted=planted)
    for r in results:
        print(json.dumps(r.to_dict()), flush=True)
    runs = [seed_folder(args.out, r.seed) for r in results if not r.stopped]
    committee = committee_result(path, cfg, runs)
    body = summarise_seeds(results, reference=None, committee=committee)
    line = {"capture": body["capture"], "beats_flat": body["beats_flat"], "sets": args.sets}
    print(json.dumps(line | {"committee": body["committee"]}))


if __name__ == "__main__":
    with front_door(FrontDoor.CLI):  # a script of options (--set ...): its errors' fixes name them
        main()

