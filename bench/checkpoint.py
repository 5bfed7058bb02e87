"""Checkpoint benchmark: how long an epoch's checkpoint holds training up, written now or in the
background, at a profile's replay size.

    .venv/bin/python bench/checkpoint.py [--profile localdev] [--device cpu|cuda] [--epochs 3]
                                         [--capacity N] [--out bench/results/checkpoint.json]

Each epoch of ``foxhunt train`` saves the fold's ring entry and ``last`` (a byte copy of it) with the
agent's whole training state, the full replay buffer included, and ``best`` (the policy alone) when
the selection Sharpe improves: at the default DQN agent's 1-2 M transitions (the localdev profile's,
and the DQN production profile's until 2026-12-07) a checkpoint is about 1-2 GB. This script builds
that state (the profile's agent on ``--device``, its replay buffer filled with random transitions;
``--capacity`` sets another replay size) and times, per epoch, the caller's wait for
``CheckpointStore.save_best`` + ``save_epoch`` (what training waits for) under
``Writes.NOW`` (the reference: hash, write and fsync before returning) and ``Writes.BACKGROUND``
(what ``train`` uses: a copy into host buffers the store reuses from save to save, pinned and
asynchronous from a CUDA state, then a writer thread; ``foxhunt.policy.snapshot``), and the
background writer's own time until its files are on disk (``wait``). (Before this benchmark ``best``
held the whole state: three full writes an epoch where ``best`` improved.) Between saves a stand-in
"epoch" of ``--epoch-s`` seconds of work runs (sleep), as training would, so the background write
overlaps it.

Of the caller's wait, "for earlier writes" is the part spent waiting for the writer to finish earlier
saves (at most ``MAX_PENDING`` are held: where writing an epoch's checkpoint takes longer than the
epoch, training waits for it); the rest is building the state dicts (the replay's is a clone of its
filled slots) and copying them to host memory. The first epoch's wait includes allocating the host
buffers; the background row counts the host buffers the store allocated over all epochs (the rest
were reused).
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
from foxhunt.policy.checkpoint import CheckpointContents
from foxhunt.policy.store import CheckpointStore
from foxhunt.policy.writer import MAX_PENDING, Writes

REPO = Path(__file__).resolve().parents[1]


class _Clean:
    may_be_best = True


def _agent(profile: str, device: torch.device, capacity: int | None) -> Agent:
    cfg = load_config(profile=profile)
    agent = Agent(cfg.agent, cfg.env.branches, device=device, seed=cfg.run.seed, replay_capacity=capacity)
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
        policy=agent.policy.state_dict(),
        branches=agent.branches,
        training={"agent": agent.state_dict()["training"]} if training else None,
        meta={"epoch": epoch, "history": list(range(epoch))},
    )


def _waited(store: CheckpointStore) -> float:
    """Seconds waiting for the writes a save would wait for before copying (none under NOW)."""
    t0 = time.perf_counter()
    store.wait(keep=MAX_PENDING - 1)
    return time.perf_counter() - t0


def _time(agent: Agent, root: Path, writes: Writes, epochs: int, epoch_s: float) -> dict[str, float]:
    store = CheckpointStore(root, ring=2, writes=writes)
    blocked, waited = [], []
    for epoch in range(epochs):
        time.sleep(epoch_s)  # the epoch's own work, which a background write overlaps
        t0 = time.perf_counter()
        # as train saves them: best holds the policy alone, the ring entry and last the whole state;
        # each save first waits for all but MAX_PENDING - 1 earlier writes, timed apart here
        wait_s = _waited(store)
        store.best.save(0, epoch, _contents(agent, epoch, False), metric=float(epoch), verdict=_Clean())
        wait_s += _waited(store)
        store.save_epoch(0, epoch, _contents(agent, epoch, True))
        blocked.append(time.perf_counter() - t0)
        waited.append(wait_s)
    t0 = time.perf_counter()
    store.close()
    drain = time.perf_counter() - t0
    size = store.paths.last(0).stat().st_size
    return {
        "blocked_s": sum(blocked[1:]) / max(len(blocked) - 1, 1),
        "waited_s": sum(waited[1:]) / max(len(waited) - 1, 1),  # of blocked_s: for earlier writes
        "first_s": blocked[0],
        "drain_s": drain,
        "bytes": size,
        "host_buffers": store.writer.pool.allocations,  # 0 under NOW (no copy)
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="localdev")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--epoch-s", type=float, default=3.0, help="seconds of stand-in epoch work between saves")
    ap.add_argument("--capacity", type=int, default=None, help="replay transitions (default: the profile's)")
    ap.add_argument("--dir", default=None, help="where the checkpoints go (default: a temporary folder)")
    ap.add_argument("--out", default=str(REPO / "bench/results/checkpoint.json"))
    args = ap.parse_args()
    device = torch.device(args.device)
    t0 = time.perf_counter()
    agent = _agent(args.profile, device, args.capacity)
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
    head = (
        "training waits / epoch (s)",
        "for earlier writes (s)",
        "first epoch (s)",
        "last write drains (s)",
    )
    print(f"{'writes':<12}{head[0]:>28}{head[1]:>24}{head[2]:>18}{head[3]:>24}{'host buffers':>14}")
    for name, r in rows.items():
        print(
            f"{name:<12}{r['blocked_s']:>28.3f}{r['waited_s']:>24.3f}{r['first_s']:>18.3f}{r['drain_s']:>24.3f}"
            f"{r['host_buffers']:>14}"
        )
    ratio = rows["now"]["blocked_s"] / max(rows["background"]["blocked_s"], 1e-9)
    print(f"background / now: training waits {ratio:.1f}x less per epoch")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "profile": args.profile,
                "device": str(device),
                "capacity": agent.replay.capacity,
                "gb": gb,
                "rows": rows,
                "ratio": ratio,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
