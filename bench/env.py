"""Environment-step benchmark: env-steps/s with random actions, foxhunt's full batched step
(sizing, costs, queue-aware limit fills, plan, stops, rewards, and the next state assembled through
the layout) beside a straightforward vectorised NumPy implementation of a minimal futures step (one
core) on the same market rows.

    .venv/bin/python bench/env.py [--envs 16384,262144,1048576] [--modes eager,graph,compiled]
                                  [--steps 50] [--device cpu|cuda] [--dtype float64|float32]

Modes: ``eager`` (``TradingEnv.step``); ``graph`` (the eager step replayed as a CUDA graph,
``foxhunt.env.graph.GraphedStep``); ``compiled`` (``torch.compile(fullgraph=True)`` of the in-place
step and state assembly, replayed as a CUDA graph on CUDA, plain on CPU). ``setup_s`` is the
warm-up and capture time, for ``compiled`` the compile time (the first size compiles static
shapes, the next one recompiles with a dynamic batch size, later sizes reuse it).

The NumPy reference is the calibration step of issue 5: gather a 128-float feature row, decode the
action, cost, mark to market, reset at the window's end. Goals on one H200 (issue 5): >= 2e8
env-steps/s at 16 k envs and >= 1e9 at 1 M. ``floor`` is the memory-traffic bound: the bytes one
env-step must move (the state read and written once, the ring buffer read and one slot written, the
result and the next state written, the feature row read) over the device-to-device copy bandwidth
measured here (CUDA only).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import fields
from pathlib import Path

import numpy as np
import torch
from torch._inductor import metrics

from foxhunt.domain.actions import ActionCodec
from foxhunt.env.config import EnvConfig
from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.market import MarketTensors, state_feature_columns

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from run import hardware  # noqa: E402

ROWS = 200_000


def synthetic_market(device: str, dtype: torch.dtype = torch.float64) -> MarketTensors:
    """A random-walk book: one-tick spread, touch sizes 1-20, a low at the bid on a third of the rows."""
    rng = np.random.default_rng(0)
    mid = 5000 + np.cumsum(rng.integers(-1, 2, ROWS)) * 0.25
    cols = state_feature_columns()

    def t(a, dt=dtype):
        return torch.as_tensor(a, dtype=dt, device=device)

    low = np.where(rng.random(ROWS) < 1 / 3, mid - 0.125, mid)
    return MarketTensors(
        features=t(rng.normal(size=(ROWS, len(cols))), torch.float32),
        mid=t(mid),
        high=t(mid + 0.25),
        low=t(low),
        bid=t(mid - 0.125),
        ask=t(mid + 0.125),
        vol=t(np.full(ROWS, 1e-4)),
        segment=t(np.zeros(ROWS), torch.int64),
        feature_columns=cols,
        bid_size=t(rng.integers(1, 21, ROWS).astype(np.float64)),
        ask_size=t(rng.integers(1, 21, ROWS).astype(np.float64)),
        volume=t(rng.integers(0, 30, ROWS).astype(np.float64)),
    )


def numpy_reference(n: int, steps: int, mid: np.ndarray, feats: np.ndarray, episode: int) -> float:
    """Minimal futures step, vectorised over n envs in NumPy (one core)."""
    rng = np.random.default_rng(1)
    row = rng.integers(0, ROWS - episode - 1, n)
    start = row.copy()
    pos = np.zeros(n)
    equity = np.full(n, 250_000.0)
    fracs = np.array([0.25, 0.5, 1.0])
    t0 = time.perf_counter()
    for _ in range(steps):
        obs = feats[row]  # gather the feature row
        a = rng.integers(0, 108, n)
        d, m = a // 27, (a // 9) % 3
        target = np.where(d == 0, -1.0, np.where(d == 2, 1.0, 0.0)) * fracs[m] * 10
        target = np.where(d == 1, pos, target)
        trade = target - pos
        cost = np.abs(trade) * (2.25 + 0.125 * 50)
        pnl = target * (mid[row + 1] - mid[row]) * 50
        equity += pnl - cost + 0 * obs[:, 0]
        pos = target
        row = row + 1
        done = row - start >= episode
        row = np.where(done, start, row)
        pos = np.where(done, 0.0, pos)
    return n * steps / (time.perf_counter() - t0)


def step_bytes(env: TradingEnv, obs: torch.Tensor, result: StepResult) -> int:
    """Fewest bytes one env-step moves: state read + written (ring: read, one slot written), the
    result and the next state written, the feature row and the actions read."""
    s = env._state()
    n = s.row.shape[0]
    total = 0
    for t in s.tensors():
        per_env = t.element_size() * t.numel() // n
        total += per_env + (t.element_size() if t is s.risk.returns_ring else per_env)
    for f in fields(result):
        x = getattr(result, f.name)  # a tensor, or a tuple of them (the step's ClosedTrades)
        for t in x if isinstance(x, tuple) else (x,):
            total += t.element_size() * t.numel() // n
    feats = env.market.features
    return total + obs.element_size() * obs.shape[1] + feats.element_size() * feats.shape[1] + 4 * 8


def copy_bandwidth() -> float:
    """Device-to-device copy, bytes read + written per second (median of 10)."""
    src = torch.empty(2**28, dtype=torch.float64, device="cuda").normal_()
    dst = torch.empty_like(src)
    times = []
    for _ in range(12):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return 2 * src.numel() * 8 / float(np.median(times[2:]))


def make_stepper(env: TradingEnv, mode: str, device: str, dynamic: bool = False):
    """``(step(actions) -> obs-or-None, setup seconds)`` for one mode."""
    from foxhunt.env.graph import GraphedStep, compiled_advance, own_storage

    if mode == "eager":
        return (lambda a: env.step(a)[0]), 0.0
    if device == "cuda":
        g = GraphedStep(env, compile=mode == "compiled", observe=True, dynamic_batch=dynamic)
        return (lambda a: (g.step(a), g.obs)[1]), g.compile_seconds
    if mode == "graph":
        raise SystemExit("mode 'graph' needs --device cuda")
    fn = compiled_advance()
    own_storage(env)
    hold = torch.zeros(env.state.row.shape[0], 4, dtype=torch.int64)
    hold[:, 0] = 1
    t0 = time.perf_counter()
    fn(env, env.state, hold, True)  # compiles
    return (lambda a: fn(env, env.state, a, True)[1]), time.perf_counter() - t0


def profile_step(step, pool: list[torch.Tensor], n: int) -> list[dict[str, object]]:
    """The kernels of the timed compiled step (the same env and compiled graph, replayed as a CUDA
    graph: CUPTI reports a replayed graph's kernels one by one), by device time over 5 steps. Profiling
    the row's own stepper compiles nothing: a second env would be a second compile (minutes at 1 M)."""
    from torch.profiler import ProfilerActivity, profile

    sync("cuda")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for k in range(5):
            step(pool[k % len(pool)])
        sync("cuda")
    rows = [
        {"kernel": e.key[:90], "calls": e.count, "us_per_step": e.device_time_total / 5}
        for e in prof.key_averages()
        if e.device_time_total > 0
    ]
    rows.sort(key=lambda r: -float(r["us_per_step"]))  # type: ignore[arg-type]
    total = sum(float(r["us_per_step"]) for r in rows)  # type: ignore[misc]
    if not rows:
        print("\nthe profiler reported no kernels of the replayed graph (CUPTI without graph tracing)")
    print(f"\ncompiled step at {n:,} envs: {total:.0f} us of kernels per step, {len(rows)} kernels")
    for r in rows[:15]:
        print(f"{r['us_per_step']:>9.1f} us  x{r['calls']:<3} {r['kernel']}", flush=True)
    return rows


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", default=None, help="comma-separated env counts (default by device)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--modes", default=None, help="eager,graph,compiled (default: all the device has)")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"], help="prices and money")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "env.json")
    ap.add_argument("--profile", action="store_true", help="CUDA: the compiled step's top kernels")
    ap.add_argument("--dynamic", action="store_true", help="compile once for every N (dynamic batch size)")
    args = ap.parse_args()
    cuda = args.device == "cuda"
    envs = args.envs or ("16384,262144,1048576" if cuda else "16384,65536")
    modes = (args.modes or ("eager,graph,compiled" if cuda else "eager,compiled")).split(",")
    torch.manual_seed(0)
    market = synthetic_market(args.device, getattr(torch, args.dtype))
    cfg = EnvConfig(episode_rows=256)
    mid_np = market.mid.cpu().numpy()
    feats_np = np.random.default_rng(0).normal(size=(ROWS, 128)).astype(np.float32)
    hw = hardware() | {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__}
    bandwidth = copy_bandwidth() if cuda else None
    report = {"hardware": hw, "dtype": args.dtype, "copy_bandwidth_Bps": bandwidth, "rows": []}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sizes = ActionCodec(cfg.branches).sizes
    counts = [int(x) for x in envs.split(",")]
    refs = {n: numpy_reference(n, 10, mid_np, feats_np, cfg.episode_rows) for n in counts}
    for mode in modes:  # mode by mode: a slow compile cannot cost the other modes' numbers
        for n in counts:
            gen = torch.Generator(device=args.device).manual_seed(0)
            starts = torch.randint(0, ROWS - cfg.episode_rows - 1, (n,), generator=gen, device=args.device)
            scale = torch.tensor(sizes, device=args.device)
            pool = [(torch.rand(n, 4, generator=gen, device=args.device) * scale).long() for _ in range(4)]
            env = TradingEnv(market, cfg)
            env.reset(starts)
            kernels = metrics.generated_kernel_count
            step, setup = make_stepper(env, mode, args.device, args.dynamic)
            for k in range(3):
                obs = step(pool[k % len(pool)])
            sync(args.device)
            t0 = time.perf_counter()
            for k in range(args.steps):
                obs = step(pool[k % len(pool)])
            sync(args.device)
            rate = n * args.steps / (time.perf_counter() - t0)
            row = {"envs": n, "mode": mode, "steps_per_s": rate, "setup_s": setup}
            row |= {"numpy_steps_per_s": refs[n], "ratio": rate / refs[n]}
            row["kernels_generated"] = metrics.generated_kernel_count - kernels
            if args.profile and cuda and mode == "compiled" and n == max(counts):
                # Before the eager step below: it steps the env outside the captured graph, whose
                # replays would then read rows the graph's own episode bookkeeping never reset.
                report["profile"] = profile_step(step, pool, n)
            if bandwidth is not None:
                nbytes = step_bytes(env, obs, env.step(pool[0])[1])
                row |= {"bytes_per_step": nbytes, "floor_steps_per_s": bandwidth / nbytes}
            report["rows"].append(row)
            args.out.write_text(json.dumps(report, indent=2))  # partial results survive a timeout
            print(f"{n:>9,} {mode:>9} {rate:>11.3e} steps/s  setup {setup:6.1f} s", flush=True)
            del env, step, obs
            if cuda:
                torch.cuda.empty_cache()
    head = f"{'envs':>9} {'mode':>9} {'env-steps/s':>12} {'setup s':>8} {'numpy 1 core':>13} {'ratio':>8}"
    print(f"\n{head} {'floor':>10}")
    for r in report["rows"]:
        floor = f"{r['floor_steps_per_s']:.2e}" if "floor_steps_per_s" in r else "-"
        print(
            f"{r['envs']:>9,} {r['mode']:>9} {r['steps_per_s']:>12.3e} {r['setup_s']:>8.1f} "
            f"{r['numpy_steps_per_s']:>13.3e} {r['ratio']:>8.1f} {floor:>10}"
        )
    bw = f", copy bandwidth {bandwidth / 1e12:.2f} TB/s" if bandwidth else ""
    print(f"device {hw['device']}, dtype {args.dtype}{bw}; torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
