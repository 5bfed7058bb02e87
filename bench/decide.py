"""The served decision side in a loop of calls alone: p50 per call of the env step and the greedy
forward (foxhunt.serve.decide.Decider) at one episode, per path (eager, compiled, aot).

A fresh network (the smoke profile's agent) on a hand-made market of ROWS rows, an episode reset
every EPISODE steps (untimed), one thread. The first calls (compile, or the library's build or load)
are reported apart. ``--pin CORE`` runs on that core only.

    PYTHONPATH=src python bench/decide.py --pin 1 --paths compiled aot
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import torch  # noqa: E402

from foxhunt import api  # noqa: E402
from foxhunt.agent.agent import Agent  # noqa: E402
from foxhunt.env.core import TradingEnv  # noqa: E402
from foxhunt.env.market import MarketTensors, state_feature_columns  # noqa: E402
from foxhunt.serve.config import DecidePath  # noqa: E402
from foxhunt.serve.decide import Decider  # noqa: E402

ROWS, EPISODE = 400, 50


def market() -> MarketTensors:
    """A zig-zag market with touch sizes and volume, random normalised features."""
    g = torch.Generator().manual_seed(0)
    mid = torch.tensor([5000.0 + 0.25 * ((i * 7) % 11) for i in range(ROWS)], dtype=torch.float64)
    columns = state_feature_columns()
    sizes = torch.tensor([float(1 + (i * 5) % 9) for i in range(ROWS)], dtype=torch.float64)
    return MarketTensors(
        features=torch.randn(ROWS, len(columns), generator=g),
        mid=mid,
        high=mid + 0.25,
        low=mid - 0.25,
        bid=mid - 0.125,
        ask=mid + 0.125,
        vol=torch.full_like(mid, 1e-4),
        segment=torch.zeros(ROWS, dtype=torch.int64),
        feature_columns=columns,
        bid_size=sizes,
        ask_size=sizes,
        volume=torch.tensor([float((i * 3) % 7) for i in range(ROWS)], dtype=torch.float64),
    )


def loop(path: DecidePath, calls: int) -> dict:
    cfg = api.config("smoke")
    env = TradingEnv(market(), cfg.env)
    agent = Agent(cfg.agent, cfg.env.branches, seed=3, replay_capacity=16)
    decider = Decider(agent, path)

    def episode(start: int) -> None:
        env.reset(torch.tensor([start]))
        env.state = dataclasses.replace(env.state, end=torch.tensor([10**6]), done=torch.tensor([False]))

    episode(10)
    t0 = time.perf_counter()
    pending = decider.decide(env)
    first_decide = time.perf_counter() - t0
    t0 = time.perf_counter()
    decider.step(env, pending)
    first_step = time.perf_counter() - t0
    steps, decides = [], []
    for i in range(calls):
        if i % EPISODE == 0:
            episode(10 + i % (ROWS - EPISODE - 20))
        t0 = time.perf_counter()
        pending = decider.decide(env)
        t1 = time.perf_counter()
        decider.step(env, pending)
        t2 = time.perf_counter()
        decides.append(t1 - t0)
        steps.append(t2 - t1)
    return {
        "step_us_p50": statistics.median(steps) * 1e6,
        "decide_us_p50": statistics.median(decides) * 1e6,
        "first_step_s": first_step,
        "first_decide_s": first_decide,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paths", nargs="+", type=DecidePath, default=[DecidePath.COMPILED, DecidePath.AOT])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--pin", type=int, help="run on this CPU core only")
    ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "decide.json")
    args = ap.parse_args(argv)
    if args.pin is not None:
        os.sched_setaffinity(0, {args.pin})
    torch.set_num_threads(1)
    got = {p.value: loop(p, args.calls) for p in args.paths}
    print(f"{'path':10}{'step p50 us':>13}{'forward p50 us':>16}{'first step s':>14}{'first fwd s':>13}")
    for name, r in got.items():
        print(
            f"{name:10}{r['step_us_p50']:>13,.0f}{r['decide_us_p50']:>16,.0f}"
            f"{r['first_step_s']:>14,.2f}{r['first_decide_s']:>13,.2f}"
        )
    body = {"paths": got, "calls": args.calls, "load_average": os.getloadavg()}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(body, indent=2))
    return body


if __name__ == "__main__":
    main()
