"""Checkpoint benchmark: how long an epoch's checkpoint holds training up, written now or in the
background, at a profile's replay size.

    .venv/bin/python bench/checkpoint.py [--profile production] [--device cpu|cuda] [--epochs 3]
                                         [--out bench/results/checkpoint.json]

Each epoch of ``foxhunt train`` saves the fold's ring entry and ``last`` (a byte copy of it) with the
agent's whole training state, the full replay buffer included, and ``best`` (the policy alone) when
the selection Sharpe improves:
at the production and gpu profiles' 1-2 M transitions a checkpoint is about 1-2 GB. This script
builds that state (the profile's agent on ``--device``, its replay buffer filled with random
transitions) and times, per epoch, the caller's wait for ``CheckpointStore.save_best`` +
``save_epoch`` (what training waits for) under ``Writes.NOW`` (the reference: hash, write and fsync
before returning) and ``Writes.BACKGROUND`` (what ``train`` uses: a host copy, then a writer thread),
and the background writer's own time until its files are on disk (``wait``). (Before this benchmark
``best`` held the whole state: three full writes an epoch where ``best`` improved.) Between saves a
stand-in "epoch" of ``--epoch-s`` seconds of work runs (sleep), as training would, so the
background write overlaps it.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import torch

from foxhunt.agent.agent import Agent
from foxhunt.config.loader import load_config
from foxhunt.train.checkpoint import CheckpointContents, CheckpointStore, Writes

REPO = Path(__file__).resolve().parents[1]


class _Clean:
    may_be_best = True


def _agent(profile: str, device: torch.device) -> Agent:
    cfg = load_config(profile=profile)
    agent = Agent(cfg.agent, cfg.env.branches, device=device, seed=cfg.run.seed)
    replay = agent.replay
    n, chunk = replay.capacity, 1 << 16
    for lo in range(0, n, chunk):  # fill every slot: a checkpoint holds the filled slots only
        size = min(chunk, n - lo)
        batch = {
            k: torch.rand(size, *shape, device=device).to(dtype)
            for k, (shape, dtype) in replay.fields.items()
        }
        replay.add(batch)
    return agent


def _contents(agent: Agent, epoch: int, training: bool) -> CheckpointContents:
    return CheckpointContents(
        policy=agent.policy_state_dict(),
        branches=agent.branches,
        training={"agent": agent.training_state_dict()} if training else None,
        meta={"epoch": epoch, "history": list(range(epoch))},
    )


def _time(agent: Agent, root: Path, writes: Writes, epochs: int, epoch_s: float) -> dict[str, float]:
    store = CheckpointStore(root, ring=2, writes=writes)
    blocked = []
    for epoch in range(epochs):
        time.sleep(epoch_s)  # the epoch's own work, which a background write overlaps
        t0 = time.perf_counter()
        # as train saves them: best holds the policy alone, the ring entry and last the whole state
        store.save_best(0, epoch, _contents(agent, epoch, False), metric=float(epoch), verdict=_Clean())
        store.save_epoch(0, epoch, _contents(agent, epoch, True))
        blocked.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    store.close()
    drain = time.perf_counter() - t0
    size = store.last_path(0).stat().st_size
    return {
        "blocked_s": sum(blocked[1:]) / max(len(blocked) - 1, 1),
        "first_s": blocked[0],
        "drain_s": drain,
        "bytes": size,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="production")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--epoch-s", type=float, default=3.0, help="seconds of stand-in epoch work between saves")
    ap.add_argument("--dir", default=None, help="where the checkpoints go (default: a temporary folder)")
    ap.add_argument("--out", default=str(REPO / "bench/results/checkpoint.json"))
    args = ap.parse_args()
    device = torch.device(args.device)
    t0 = time.perf_counter()
    agent = _agent(args.profile, device)
    build_s = time.perf_counter() - t0
    rows = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for writes in (Writes.NOW, Writes.BACKGROUND):
            rows[writes.value] = _time(agent, Path(tmp) / writes.value, writes, args.epochs, args.epoch_s)
    gb = rows["now"]["bytes"] / 1e9
    print(
        f"checkpoint of profile {args.profile}: {gb:.2f} GB ({agent.replay.capacity:,} transitions), "
        f"device {device}, {platform.processor() or platform.machine()}; state built in {build_s:.1f} s"
    )
    head = ("training waits / epoch (s)", "first epoch (s)", "last write drains (s)")
    print(f"{'writes':<12}{head[0]:>28}{head[1]:>18}{head[2]:>24}")
    for name, r in rows.items():
        print(f"{name:<12}{r['blocked_s']:>28.3f}{r['first_s']:>18.3f}{r['drain_s']:>24.3f}")
    ratio = rows["now"]["blocked_s"] / max(rows["background"]["blocked_s"], 1e-9)
    print(f"background / now: training waits {ratio:.1f}x less per epoch")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"profile": args.profile, "device": str(device), "gb": gb, "rows": rows, "ratio": ratio}, indent=2
        )
        + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
