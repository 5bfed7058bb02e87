"""Backtest benchmark: P recorded policies x R bars evaluated at once (goal on one H200: 1,000 policies
x 100 k bars in <= 10 s for issue 5, tightened to <= 2 s by issue 16),
beside the same evaluation of one policy in a loop.

    .venv/bin/python bench/backtest.py [--policies 1000] [--rows 100000] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from foxhunt.backtest.evaluate import evaluate_many
from foxhunt.domain.actions import ActionCodec
from foxhunt.env.config import EnvConfig

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import env as env_bench  # noqa: E402
from run import hardware  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--episode-rows", type=int, default=4096)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "backtest.json")
    args = ap.parse_args()
    env_bench.ROWS = args.rows + 1
    market = env_bench.synthetic_market(args.device)
    cfg = EnvConfig(episode_rows=args.episode_rows)
    gen = torch.Generator(device=args.device).manual_seed(0)
    codec = ActionCodec(cfg.branches)
    sizes = torch.tensor(codec.sizes, device=args.device)
    acts = (
        torch.rand(args.policies, args.rows, len(codec.sizes), generator=gen, device=args.device) * sizes
    ).to(torch.int8)

    def run(p: int) -> float:
        if args.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = evaluate_many(market, cfg, 0, args.rows, acts[:p])
        float(out["net_pnl"].sum())  # one read-back at the end
        return time.perf_counter() - t0

    # Warm-up at both batch shapes: each shape's first call compiles (from COMPILE_MIN_BATCH policies)
    # and captures its step, paid once per process; reported apart from the steady runs.
    first_all = run(args.policies)
    run(1)
    t_one = run(1)
    t_all = run(args.policies)
    print(f"first call at {args.policies} policies (compile + capture + run): {first_all:.2f} s")
    steps = args.policies * (args.rows - 1)
    print(f"{'run':<42} {'seconds':>9} {'env-steps/s':>14}")
    print(f"{'1 policy':<42} {t_one:>9.2f} {(args.rows - 1) / t_one:>14,.0f}")
    print(f"{f'{args.policies} policies together':<42} {t_all:>9.2f} {steps / t_all:>14,.0f}")
    print(
        f"{args.policies} x {args.rows:,} bars in {t_all:.2f} s (goal <= 2 s on an H200); "
        f"vs {args.policies} single runs ~{t_one * args.policies:.0f} s: x{t_one * args.policies / t_all:.0f}"
    )
    hw = hardware() | {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu"}
    print(f"hardware: {hw}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "hardware": hw,
                "policies": args.policies,
                "rows": args.rows,
                "seconds": t_all,
                "seconds_one_policy": t_one,
                "seconds_first_call": first_all,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
