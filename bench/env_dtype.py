"""The env's float32 money error: the same recorded random policy stepped in float64 and in float32.

    .venv/bin/python bench/env_dtype.py [--envs 128] [--steps 100000] [--json out.json]

Both environments step the same long episodes (``episode_rows`` = the run) of ``bench/env.py``'s
synthetic ES book with the same actions (one seeded draw per step). Reported, per env at the end:

- ``accumulator``: the float32 env's equity against the float64 sum of its own per-step net PnL
  (the error of keeping equity in float32, whatever the decisions);
- ``vs_float64``: the float32 env's equity against the float64 env's (every source of error:
  rounding in the step's arithmetic, and decisions that differ because of it);
- ``diverged``: envs whose fills ever differed from the float64 env's (a rounding that moved a
  target across a contract boundary or a barrier test);

each as the max and mean absolute $ error and relative to the env's traded notional
(sum of |contracts| x fill price x point value over the run).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from foxhunt.domain.actions import ActionCodec
from foxhunt.env.config import EnvConfig
from foxhunt.env.core import TradingEnv

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from env import ROWS, synthetic_market  # noqa: E402


def compare(n: int, steps: int, seed: int = 0, every: int = 0) -> dict[str, float]:
    """Step ``n`` envs for ``steps`` rows in both dtypes; the error summary (module docstring), also
    printed every ``every`` steps (0: only at the end)."""
    cfg = EnvConfig().model_copy(update={"episode_rows": steps + 1})
    envs = {dt: TradingEnv(synthetic_market("cpu", dt), cfg) for dt in (torch.float64, torch.float32)}
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, ROWS - steps - 2, (n,), generator=gen)
    for env in envs.values():
        env.reset(starts)
    sizes = ActionCodec(cfg.branches).sizes
    own_net = torch.zeros(n, dtype=torch.float64)  # the float32 env's per-step net, summed in float64
    notional = torch.zeros(n, dtype=torch.float64)
    diverged = torch.zeros(n, dtype=torch.bool)
    point_value = envs[torch.float64].market.instrument.point_value
    t0 = time.perf_counter()
    out: dict[str, float] = {}
    for step in range(1, steps + 1):
        actions = torch.stack([torch.randint(0, k, (n,), generator=gen) for k in sizes], dim=1)
        res = {dt: env.transition(env.state, actions) for dt, env in envs.items()}
        for dt, (new, _) in res.items():
            envs[dt].state = new
        r64, r32 = res[torch.float64][1], res[torch.float32][1]
        own_net += r32.net.double()
        notional += (r64.fills.abs() * r64.fill_price).sum(dim=1) * point_value
        diverged |= (r64.fills - r32.fills.double()).abs().amax(dim=1) > 0.5
        if step == steps or (every and step % every == 0):
            eq64 = envs[torch.float64].state.account.equity
            eq32 = envs[torch.float32].state.account.equity.double()
            out = summary(n, step, time.perf_counter() - t0, cfg.contract.initial_capital, eq64, eq32,
                          own_net, notional, diverged)
            print(json.dumps(out), flush=True)
    return out


def summary(
    n: int,
    steps: int,
    seconds: float,
    capital: float,
    eq64: torch.Tensor,
    eq32: torch.Tensor,
    own_net: torch.Tensor,
    notional: torch.Tensor,
    diverged: torch.Tensor,
) -> dict[str, float]:
    acc = (eq32 - (capital + own_net)).abs()
    total = (eq32 - eq64).abs()
    rel = total / notional.clamp(min=1.0)
    same = ~diverged
    nan = float("nan")
    return {
        "envs": n,
        "steps": steps,
        "seconds": seconds,
        "notional_mean": notional.mean().item(),
        "pnl64_abs_mean": (eq64 - capital).abs().mean().item(),
        "accumulator_max": acc.max().item(),
        "accumulator_mean": acc.mean().item(),
        "accumulator_rel_notional_max": (acc / notional.clamp(min=1.0)).max().item(),
        "vs_float64_max": total.max().item(),
        "vs_float64_mean": total.mean().item(),
        "vs_float64_rel_notional_max": rel.max().item(),
        "diverged_envs": int(diverged.sum()),
        "undiverged_vs_float64_max": total[same].max().item() if bool(same.any()) else nan,
        "undiverged_rel_notional_max": rel[same].max().item() if bool(same.any()) else nan,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=128)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--every", type=int, default=0, help="also print the summary every this many steps")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = compare(args.envs, args.steps, every=args.every)
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
