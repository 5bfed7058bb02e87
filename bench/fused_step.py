"""The fused env step (issue 57 item 1, ``foxhunt.env.fused``) beside the eager and compiled steps, in
one run on one device: env-steps/s and the memory floor.

    python3 bench/fused_step.py [--envs 16384,1048576] [--steps 50] [--warmup 3] [--dtype float64|float32]
                                [--ledger]
                                [--modes eager,compiled,compiled_graph,fused,fused_graph]
                                [--profile] [--out $OUT/fused_step.json]

Modes (each the in-place step with the next observation assembled, without the trade ledger unless
``--ledger``, on bench/env.py's synthetic random-walk book with touch sizes and volume, the default
``[env]`` but 256-row episodes, random actions from a pool of four):

* ``eager``: ``TradingEnv.step`` (hundreds of kernels a step);
* ``compiled``: ``foxhunt.env.graph.compiled_advance`` (Inductor), called eagerly;
* ``compiled_graph``: the same replayed as a CUDA graph (``GraphedStep(compile=True)``: what AUTO runs
  from ``COMPILE_MIN_BATCH`` episodes);
* ``fused``: ``foxhunt.env.fused.fused_advance``, one Triton kernel launched from Python;
* ``fused_graph``: that launch replayed as a CUDA graph (what ``StepMode.FUSED`` runs).

``--blocks 128x4,64x2,256x8`` times the fused modes at each launch shape (episodes a program x warps;
``foxhunt.env.fused.BLOCK``, ``NUM_WARPS``), labelled ``mode@shape``.

Timing: ``--steps`` steps after ``--warmup`` warm-up steps (3), between two ``torch.cuda.Event``
records (on ``--device cpu``, a check that the script runs, the host's clock), with no host
synchronisation inside the timed loop. The CVaR ring (``sizing.cvar_window``,
100 by default) fills only after that many steps of an episode: before, no return is evicted and the
fused step never scans a ring row again; ``--warmup 110`` times the steady state of a long episode
(about ``K / W`` of the rows rescanned a step, nearly every program running the scan loop).
``floor`` is the memory bound: the bytes one env-step must move (bench/env.py's ``step_bytes``: the
state read and written once, the ring row read and one slot written, the result and the next
observation written, the feature row read) over the device-to-device copy bandwidth measured here;
``of floor`` is the rate's share of it; ``kept floor`` the same bound where the CVaR tail is kept
between steps as the fused step keeps it (one ring slot and the kept tail moved instead of the ring
row read whole). The issue's targets (one H100 or H200): >= 5e8 env-steps/s at 16 k envs, >= 1e9 at
1 M (within 1.4x of the floor). Prints a table, writes JSON (``--out``) after every row.

``--profile``: after each row, ``torch.profiler`` over 5 more steps of the same stepper
(bench/floors.py): the top kernels with their time, the kernels a step, and the step's floors: launch
(its kernels times one replayed graph node, measured here) and memory (``floor`` above; the fused
modes' the ``kept floor``), with the measured time's multiple of the larger.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from foxhunt.domain.actions import BRANCHES, ActionCodec, Direction
from foxhunt.env.config import EnvConfig
from foxhunt.env.core import TradingEnv
from foxhunt.env.fused import triton_next_pow2

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import floors  # noqa: E402
from env import ROWS, copy_bandwidth, step_bytes, synthetic_market  # noqa: E402

MODES = ("eager", "compiled", "compiled_graph", "fused", "fused_graph")


def captured(
    env: TradingEnv, fn: Callable[..., object], ledger: bool
) -> tuple[Callable[[Tensor], Tensor], float]:
    """``fn`` (an ``advance``) captured as a CUDA graph over ``env``'s state, as GraphedStep does:
    warm-up on a side stream, the state restored, one step captured. Returns ``(step, setup s)``."""
    from foxhunt.env.graph import own_storage

    state = own_storage(env)
    n = state.row.shape[0]
    actions = torch.zeros(n, len(BRANCHES), dtype=torch.int64, device=env.device)
    actions[:, BRANCHES.index("direction")] = int(Direction.HOLD)
    snapshot = [t.clone() for t in state.tensors()]
    t0 = time.perf_counter()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(env, state, actions, True, ledger=ledger)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _, obs = fn(env, state, actions, True, ledger=ledger)
    for dst, src in zip(state.tensors(), snapshot, strict=True):
        dst.copy_(src)
    torch.cuda.synchronize()

    def step(a: Tensor) -> Tensor:
        actions.copy_(a)
        graph.replay()
        return obs  # type: ignore[return-value]

    return step, time.perf_counter() - t0


def stepper(env: TradingEnv, mode: str, ledger: bool) -> tuple[Callable[[Tensor], Tensor], float]:
    """``(step(actions) -> obs, setup seconds)`` for one mode."""
    from foxhunt.env.graph import GraphedStep, compiled_advance, own_storage

    if mode == "eager":
        return (lambda a: env.step(a, ledger=ledger)[0]), 0.0
    if mode == "compiled_graph":
        g = GraphedStep(env, compile=True, observe=True, ledger=ledger)
        return (lambda a: (g.step(a), g.obs)[1]), g.compile_seconds
    if mode == "fused_graph":
        from foxhunt.env.fused import fused_advance

        return captured(env, fused_advance, ledger)
    if mode == "compiled":
        fn = compiled_advance()
    elif mode == "fused":
        from foxhunt.env.fused import fused_advance as fn
    else:
        raise SystemExit(f"unknown mode {mode}: one of {', '.join(MODES)}")
    state = own_storage(env)
    hold = torch.zeros(state.row.shape[0], len(BRANCHES), dtype=torch.int64, device=env.device)
    hold[:, BRANCHES.index("direction")] = int(Direction.HOLD)
    t0 = time.perf_counter()
    fn(env, state, hold, True, ledger=ledger)  # compiles
    _sync(env.device.type)
    return (lambda a: fn(env, state, a, True, ledger=ledger)[1]), time.perf_counter() - t0


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", default="16384,1048576", help="comma-separated env counts")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {','.join(MODES)}")
    ap.add_argument("--steps", type=int, default=50, help="timed steps (after the warm-up steps)")
    ap.add_argument(
        "--warmup", type=int, default=3, help="untimed steps first (110: the CVaR ring full, evicting)"
    )
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"], help="prices and money")
    ap.add_argument("--ledger", action="store_true", help="with the trade ledger in the result")
    ap.add_argument(
        "--blocks",
        default="128x4",
        help="the fused modes' launch shapes, comma-separated BLOCKxWARPS (episodes x warps a program)",
    )
    ap.add_argument("--profile", action="store_true", help="profile 5 more steps a row (bench/floors.py)")
    ap.add_argument(
        "--device",
        default="cuda",
        help="cpu: a check that the script runs (modes eager, compiled, fused: Triton's interpreter)",
    )
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "fused_step.json")
    args = ap.parse_args()
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench/fused_step.py times CUDA kernels: it needs a CUDA device (or --device cpu)")
    market = synthetic_market(device, getattr(torch, args.dtype))
    cfg = EnvConfig(episode_rows=256)
    extra = 5 if args.profile else 0  # the profiled steps
    if args.warmup + args.steps + extra + 1 > cfg.episode_rows:
        raise SystemExit(
            f"--warmup + --steps {args.warmup + args.steps} (+ {extra} profiled): the episodes are "
            f"{cfg.episode_rows} rows"
        )
    card = floors.card(device) if args.profile or device != "cuda" else {}
    bandwidth = copy_bandwidth() if device == "cuda" else card["bandwidth"]
    launch_s = card.get("launch_s", 0.0)
    report: dict[str, object] = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "dtype": args.dtype,
        "ledger": args.ledger,
        "warmup": args.warmup,
        "copy_bandwidth_Bps": bandwidth,
        "graph_node_s": launch_s,
        "rows": [],
    }
    rows: list[dict[str, object]] = report["rows"]  # type: ignore[assignment]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sizes = ActionCodec(cfg.branches).sizes
    counts = [int(x) for x in args.envs.split(",")]
    from foxhunt.env import fused

    runs = []
    for mode in args.modes.split(","):
        shapes = args.blocks.split(",") if mode.startswith("fused") else [None]
        runs += [(mode, shape) for shape in shapes]
    for n in counts:
        for mode, shape in runs:
            label = mode if shape is None or args.blocks == "128x4" else f"{mode}@{shape}"
            if shape is not None:
                block, warps = (int(x) for x in shape.split("x"))
                fused.BLOCK, fused.NUM_WARPS = block, warps
            gen = torch.Generator(device=device).manual_seed(0)
            starts = torch.randint(0, ROWS - cfg.episode_rows - 1, (n,), generator=gen, device=device)
            scale = torch.tensor(sizes, device=device)
            pool = [(torch.rand(n, 4, generator=gen, device=device) * scale).long() for _ in range(4)]
            env = TradingEnv(market, cfg)
            env.reset(starts)
            step, setup = stepper(env, mode, args.ledger)
            for k in range(args.warmup):
                obs = step(pool[k % len(pool)])
            _sync(device)
            begin = torch.cuda.Event(enable_timing=True) if device == "cuda" else None
            t0 = time.perf_counter()
            if begin is not None:
                begin.record()
            for k in range(args.steps):  # no host synchronisation inside
                obs = step(pool[k % len(pool)])
            if begin is not None:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                end.synchronize()
                seconds = begin.elapsed_time(end) / 1e3
            else:
                seconds = time.perf_counter() - t0
            rate = n * args.steps / seconds
            # Sized on a twin env: an eager step of the timed env would replace its state under a
            # captured graph that still steps (and, under --profile, replays) the old one.
            twin = TradingEnv(market, cfg)
            twin.reset(starts)
            nbytes = step_bytes(twin, obs, twin.step(pool[0], ledger=args.ledger)[1])
            del twin
            floor = bandwidth / nbytes
            # The fused step keeps the CVaR tail instead of reading the ring row whole: its own floor
            # reads one ring slot and the kept tail (KP values, its count and last return) and writes them.
            ring = env._state().risk.returns_ring
            size, width = ring.element_size(), ring.shape[1]
            kept = (
                triton_next_pow2(max(1, math.ceil((1 - cfg.sizing.cvar_confidence) * width - 1e-3))) + 2
            ) * 8
            kept_floor = bandwidth / (nbytes - (width - 1) * size + 2 * kept)
            row = {
                "envs": n,
                "mode": label,
                "steps_per_s": rate,
                "us_per_step": seconds / args.steps * 1e6,
                "setup_s": setup,
                "bytes_per_env_step": nbytes,
                "floor_steps_per_s": floor,
                "of_floor": rate / floor,
                "kept_tail_floor_steps_per_s": kept_floor,
            }
            print(f"{n:>9,} {label:>15} {rate:>11.3e} env-steps/s  setup {setup:6.1f} s", flush=True)
            if args.profile:
                prof = floors.kernel_profile(
                    lambda s=step, p=pool: [s(p[k % len(p)]) for k in range(extra)], extra, device
                )
                kept_bytes = nbytes - (width - 1) * size + 2 * kept  # the fused step keeps the tail
                floor = floors.floors(
                    prof,
                    n,
                    row["us_per_step"],
                    launch_s=launch_s,
                    bytes_per_env_step=kept_bytes if mode.startswith("fused") else nbytes,
                    bandwidth=bandwidth,
                )
                floors.print_profile(f"{label} at {n:,} envs", prof, floor)
                prof["kernels"] = prof["kernels"][:30]  # type: ignore[index]
                row["profile"], row["floors"] = prof, floor
            rows.append(row)
            args.out.write_text(json.dumps(report, indent=2))  # partial results survive a timeout
            del env, step, obs, pool
            if device == "cuda":
                torch.cuda.empty_cache()
    print(f"\n{'envs':>9} {'mode':>15} {'env-steps/s':>12} {'us/step':>9} {'setup s':>8} {'B/env-step':>10} "
          f"{'floor':>10} {'of floor':>8} {'kept floor':>10}")  # fmt: skip
    for r in rows:
        print(
            f"{r['envs']:>9,} {r['mode']:>15} {r['steps_per_s']:>12.3e} {r['us_per_step']:>9.1f} "
            f"{r['setup_s']:>8.1f} {r['bytes_per_env_step']:>10} {r['floor_steps_per_s']:>10.2e} "
            f"{r['of_floor']:>8.2f} {r['kept_tail_floor_steps_per_s']:>10.2e}"
        )
    print(
        f"device {report['device']}, dtype {args.dtype}, ledger {args.ledger}, warm-up {args.warmup}, "
        f"copy bandwidth {bandwidth / 1e12:.2f} TB/s; torch {torch.__version__}; JSON {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
