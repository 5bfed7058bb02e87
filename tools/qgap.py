"""Does the agent learn a known signal? Trains one fold and, after every epoch, correlates the greedy
direction gap Q(Long) - Q(Short) with one state feature over the fold's validation rows.

A research probe (README, known limits): validation PnL is too noisy over a few sessions to tell
learning from luck, while this correlation moves within an epoch. Training records the same
correlation with the planted signal's carrier every epoch on a synthetic market
(``q/direction_gap_corr`` in TensorBoard, the report's diagnostics); this probe takes any column and
adds the greedy action shares. Each row is read from a flat
portfolio at the validation row (an episode reset there), with the greedy network (no noise).

    .venv/bin/python tools/qgap.py runs/main/cache ofi.book_pressure --fold 2 --seed 8 \\
        [--profile smoke] [--set k=v]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch

from foxhunt.config.loader import load_config
from foxhunt.domain.actions import Direction
from foxhunt.features.cache_file import open_cache
from foxhunt.policy.store import CheckpointStore
from foxhunt.train.diagnostics import direction_q, gap_correlation
from foxhunt.train.run import FoldTrainer
from foxhunt.validation.folds import make_folds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache", type=Path, help="a feature cache file or the folder holding one")
    ap.add_argument("column", help="state feature column carrying the signal, e.g. ofi.book_pressure")
    ap.add_argument("--fold", type=int, default=-1, help="fold index (default: the last)")
    ap.add_argument("--seed", type=int, default=None, help="run seed (default: the profile's)")
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--set", action="append", default=[], dest="sets", help="config override (repeatable)")
    args = ap.parse_args()
    sets = [*args.sets, *([f"run.seed={args.seed}"] if args.seed is not None else [])]
    cfg = load_config(profile=args.profile, overrides=sets)
    torch.use_deterministic_algorithms(True, warn_only=True)
    if cfg.run.threads > 0:
        torch.set_num_threads(cfg.run.threads)
    cache = open_cache(args.cache if args.cache.is_file() else next(args.cache.glob("*.arrow")))
    fd = make_folds(cache.features(), cache.columns, cfg.folds, int(cache.meta["label_span"]))[args.fold]
    store = CheckpointStore(Path(tempfile.mkdtemp(prefix="qgap-")), ring=1)
    trainer = FoldTrainer(cache, fd, cfg, torch.device("cpu"), store, log=lambda _: None)
    rows = torch.arange(fd.fold.validation_start, fd.fold.validation_end - 1)
    x = trainer.market.features[rows, trainer.market.feature_columns.index(args.column)].numpy()
    names = [d.name[0] for d in Direction][: cfg.env.branches.direction]
    print(f"fold {fd.fold.index}, seed {cfg.run.seed}, {len(rows)} validation rows, feature {args.column}")
    print("epoch  corr(gap, x)  sd(gap)  mean(gap)  sel net PnL  trades  greedy " + "/".join(names))
    for epoch in range(-1, cfg.train.epochs):
        pnl, trades = 0.0, 0
        if epoch >= 0:
            trainer.epoch = epoch
            val = trainer.run_epoch()["select"]  # the epoch's selection-period backtest
            if val is None:  # train.selection = last: no selection period, nothing backtested
                pnl, trades = float("nan"), 0
            else:
                pnl, trades = float(val["net_pnl"]), int(val["trades"])
        q = direction_q(trainer.agent, trainer.market, trainer.cfg.env, rows)
        gap = q[:, int(Direction.LONG)] - q[:, int(Direction.SHORT)]
        corr = gap_correlation(gap, x)  # what training records each epoch (q/direction_gap_corr)
        shares = np.bincount(q.argmax(1), minlength=q.shape[1]) / len(q)
        print(
            f"{epoch:5d}  {corr:+12.3f}  {gap.std():7.4f}  {gap.mean():+9.4f}  {pnl:11.2f}  {trades:6d}  "
            + " ".join(f"{s:.2f}" for s in shares)
        )


if __name__ == "__main__":
    main()
