"""Operators and milliseconds of one eager env step, per module (the kernel launches a CUDA graph of
the eager step replays, and what a small-batch step is bound by).

    .venv/bin/python bench/env_ops.py [--envs 16384] [--repeats 15] [--dtype float64|float32] [--no-ledger]
                                      [--json out]

``ops``: the non-view ATen operators one ``TradingEnv.step`` dispatches (state assembly included),
counted by a ``TorchDispatchMode`` and attributed to the innermost ``foxhunt/env`` (or
``validation``) module on the Python stack. ``ms``: the median wall time of ``repeats`` steps on
one thread, random actions, ``bench/env.py``'s synthetic book.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from foxhunt.domain.actions import ActionCodec
from foxhunt.env.config import EnvConfig
from foxhunt.env.core import TradingEnv

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from env import ROWS, synthetic_market  # noqa: E402


class OpCounter(TorchDispatchMode):
    """Counts non-view operators by the innermost foxhunt module on the stack."""

    def __init__(self) -> None:
        super().__init__()
        self.by_module: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if not func.is_view:
            frame = sys._getframe(1)
            name = "other"
            while frame is not None:
                path = frame.f_code.co_filename
                if "/foxhunt/" in path and not path.endswith("_python_dispatch.py"):
                    name = path.rsplit("/foxhunt/", 1)[1].removesuffix(".py")
                    break
                frame = frame.f_back
            self.by_module[name] += 1
        return func(*args, **(kwargs or {}))


def measure(n: int, repeats: int, dtype: torch.dtype, ledger: bool = True) -> dict[str, object]:
    cfg = EnvConfig()
    env = TradingEnv(synthetic_market("cpu", dtype), cfg)
    gen = torch.Generator().manual_seed(0)
    env.reset(torch.randint(0, ROWS - cfg.episode_rows - 2, (n,), generator=gen))
    sizes = ActionCodec(cfg.branches).sizes

    def actions() -> torch.Tensor:
        return torch.stack([torch.randint(0, k, (n,), generator=gen) for k in sizes], dim=1)

    for _ in range(3):  # warm-up: every branch's first call
        env.step(actions())
    with OpCounter() as counter:
        env.step(actions(), ledger=ledger)
    times = []
    for _ in range(repeats):
        a = actions()
        t0 = time.perf_counter()
        env.step(a, ledger=ledger)
        times.append(time.perf_counter() - t0)
    by_module = dict(counter.by_module.most_common())
    ms = 1e3 * statistics.median(times)
    return {"envs": n, "ledger": ledger, "ops": sum(by_module.values()), "by_module": by_module, "ms": ms}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=16_384)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--no-ledger", action="store_true", help="the lean step (StepResult.lean)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = measure(args.envs, args.repeats, getattr(torch, args.dtype), ledger=not args.no_ledger)
    lean = " lean" if args.no_ledger else ""
    print(f"{args.dtype}{lean} {out['envs']} envs: {out['ops']} ops/step, {out['ms']:.2f} ms/step (median)")
    for name, count in out["by_module"].items():  # type: ignore[union-attr]
        print(f"  {name:28s} {count}")
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
