"""Environment-step benchmark: env-steps/s with random actions, foxhunt's full batched step
(state assembly, sizing, costs, plan, stops, rewards) beside a straightforward vectorised NumPy
implementation of a minimal futures step (one core) on the same market rows.

    .venv/bin/python bench/env.py [--envs 16384,262144] [--steps 20] [--device cpu|cuda]

The NumPy reference is the calibration step of issue 5: gather a 128-float feature row, decode the
action, cost, mark to market, reset at the window's end. Goals on one H200 (issue 5): >= 2e8
env-steps/s at 16 k envs and >= 1e9 at 1 M; this script reports what it measures, eager PyTorch.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from foxhunt.env.config import EnvConfig
from foxhunt.env.core import TradingEnv
from foxhunt.env.market import MarketTensors, state_feature_columns

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from run import hardware  # noqa: E402

ROWS = 200_000


def synthetic_market(device: str) -> MarketTensors:
    rng = np.random.default_rng(0)
    mid = 5000 + np.cumsum(rng.integers(-1, 2, ROWS)) * 0.25
    cols = state_feature_columns()

    def t(a, dt=torch.float64):
        return torch.as_tensor(a, dtype=dt, device=device)

    return MarketTensors(
        features=t(rng.normal(size=(ROWS, len(cols))), torch.float32),
        mid=t(mid),
        high=t(mid + 0.25),
        low=t(mid - 0.25),
        bid=t(mid - 0.125),
        ask=t(mid + 0.125),
        vol=t(np.full(ROWS, 1e-4)),
        segment=t(np.zeros(ROWS), torch.int64),
        feature_columns=cols,
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", default="16384,262144")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--compile", action="store_true", help="torch.compile the transition (Inductor)")
    ap.add_argument("--cuda-graph", action="store_true", help="replay the step as a captured CUDA graph")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "env.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    market = synthetic_market(args.device)
    cfg = EnvConfig(episode_rows=256)
    mid_np = market.mid.cpu().numpy()
    feats_np = np.random.default_rng(0).normal(size=(ROWS, 128)).astype(np.float32)
    rows = []
    for n in (int(x) for x in args.envs.split(",")):
        env = TradingEnv(market, cfg)
        if args.compile:
            env._transition = torch.compile(env._transition, fullgraph=True, dynamic=False)  # type: ignore[method-assign]
        gen = torch.Generator(device=args.device).manual_seed(0)
        starts = torch.randint(0, ROWS - cfg.episode_rows - 1, (n,), generator=gen, device=args.device)
        env.reset(starts)
        sizes = torch.tensor(env.codec.sizes, device=args.device)

        graphed = None
        if args.cuda_graph:
            from foxhunt.env.graph import GraphedStep

            graphed = GraphedStep(env)

        def one_step(env=env, gen=gen, sizes=sizes, n=n, graphed=graphed):
            a = (torch.rand(n, 4, generator=gen, device=args.device) * sizes).to(torch.int64)
            return graphed.step(a) if graphed is not None else env.step(a)

        one_step()  # warm-up (and compilation)
        one_step()
        if args.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            one_step()
        if args.device == "cuda":
            torch.cuda.synchronize()
        fox = n * args.steps / (time.perf_counter() - t0)
        ref = numpy_reference(n, max(args.steps // 2, 2), mid_np, feats_np, cfg.episode_rows)
        rows.append({"envs": n, "foxhunt_steps_per_s": fox, "numpy_steps_per_s": ref, "ratio": fox / ref})
    head = f"{'envs':>9} {'foxhunt env-steps/s':>20} {'numpy ref (1 core)':>19} {'ratio':>7}"
    print(f"{head}   device {args.device}")
    for r in rows:
        fox, ref = r["foxhunt_steps_per_s"], r["numpy_steps_per_s"]
        print(f"{r['envs']:>9,} {fox:>20,.0f} {ref:>19,.0f} {r['ratio']:>7.2f}")
    hw = hardware() | {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu"}
    print(f"hardware: {hw}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    mode = "compiled" if args.compile else "cuda-graph" if args.cuda_graph else "eager"
    args.out.write_text(json.dumps({"hardware": hw, "rows": rows, "mode": mode}, indent=2))
    print(f"mode: {mode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
