"""Where collection's time goes: the exploring policy's forward at the training batch, kernel by kernel,
beside a plain MLP of the same matmul FLOPs (the floor a dense network of that size reaches).

    python3 bench/policy_kernels.py [--envs 16384] [--out bench/results/policy_kernels.json]

Collection (``foxhunt.agent.collect``) spends almost all of a step in this forward (the env step is
~0.15 ms of ~3 ms at 16 k envs on the H200, issue 16), so its kernels bound the collection goal
(2e7 env-steps/s = 0.82 ms a step at 16 k envs). Rows, in one process, TF32 matmuls as collection
runs them (``tf32_matmuls``):

* ``foxhunt explore``: ``Agent.policy(obs, Mode.EXPLORE)`` (noise draws, C51 + IQN heads, Thompson
  draws, conviction), eager, replayed as a CUDA graph, and with the forward and E[Q] compiled
  (``Actor.compile``) and replayed as a CUDA graph: the path training takes from
  ``COMPILE_MIN_BATCH`` episodes (compile seconds reported apart);
* ``plain MLP``: ``Linear``/ReLU layers whose matmul FLOPs equal the forward's (counted by
  ``torch.utils.flop_counter``), replayed as a CUDA graph: the dense-network reference.

Then the forward's kernels from ``torch.profiler`` (no graph, so each kernel shows): total kernel
time, count, the matmul share and its TFLOP/s, and the top kernels. The graph time minus the kernel
sum is launch and gap time; the non-matmul kernels are memory-bound elementwise and reduction work.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from foxhunt.agent.actor import Mode
from foxhunt.agent.agent import Agent
from foxhunt.agent.collect import tf32_matmuls
from foxhunt.agent.config import AgentConfig
from foxhunt.domain.actions import BranchConfig
from foxhunt.features.layout import STATE_LAYOUT

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from learner import graphed, timed  # noqa: E402
from run import hardware  # noqa: E402

_GEMM = ("gemm", "sm90_xmma", "cutlass", "cublas", "matmul", "addmm")


def plain_mlp(width: int, flops_per_row: float, hidden: int, device: torch.device) -> torch.nn.Module:
    """A ReLU MLP ``width -> hidden -> ... -> hidden`` with about ``flops_per_row`` matmul FLOPs a row."""
    first = 2 * width * hidden
    layers = max(0, round((flops_per_row - first) / (2 * hidden * hidden)))
    mods: list[torch.nn.Module] = [torch.nn.Linear(width, hidden), torch.nn.ReLU()]
    for _ in range(layers):
        mods += [torch.nn.Linear(hidden, hidden), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods).to(device)


def kernels(fn, device: torch.device, calls: int = 5) -> list[dict[str, object]]:
    """Each CUDA kernel's device time per call of ``fn`` (no graph, so every kernel shows)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(2):
        fn()
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize(device)
    rows = [
        {"kernel": e.key[:100], "calls": e.count / calls, "us": e.device_time_total / calls}
        for e in prof.key_averages()
        if e.device_time_total > 0
    ]
    rows.sort(key=lambda r: -float(r["us"]))  # type: ignore[arg-type]
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=16_384)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "policy_kernels.json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("policy_kernels: needs a CUDA device (the profile is of GPU kernels)")
        return 2
    device = torch.device("cuda")
    agent = Agent(AgentConfig(), BranchConfig(), device=device, seed=0, replay_capacity=1 << 16)
    obs = torch.randn(args.envs, STATE_LAYOUT.width, device=device)
    explore = lambda: agent.policy(obs, Mode.EXPLORE)  # noqa: E731
    params = agent.policy.net.param_count()
    report: dict[str, object] = {"hardware": hardware(), "envs": args.envs, "params": params}
    with tf32_matmuls():
        with FlopCounterMode(display=False) as counter:
            explore()
        flops = float(counter.get_total_flops())
        mlp = plain_mlp(STATE_LAYOUT.width, flops / args.envs, 512, device)
        eager_ms = timed(explore, device, 20, 3)["ms"]
        graph_ms = timed(graphed(explore, generators=[agent.gen]), device, 50, 3)["ms"]
        with torch.no_grad():
            mlp_ms = timed(graphed(lambda: mlp(obs)), device, 50, 3)["ms"]
        rows = kernels(explore, device)
        # the path training takes at these batches: the forward and E[Q] compiled (Actor.compile)
        agent.policy.compile()
        t0 = time.perf_counter()
        explore()
        torch.cuda.synchronize(device)
        compile_s = time.perf_counter() - t0
        compiled_ms = timed(graphed(explore, generators=[agent.gen]), device, 50, 3)["ms"]
        compiled_rows = kernels(explore, device)
    total_us = sum(float(r["us"]) for r in rows)  # type: ignore[misc]
    gemm = [r for r in rows if any(g in str(r["kernel"]).lower() for g in _GEMM)]
    gemm_us = sum(float(r["us"]) for r in gemm)  # type: ignore[misc]
    n_kernels = sum(float(r["calls"]) for r in rows)  # type: ignore[misc]
    report |= {
        "matmul_flops": flops,
        "explore_eager_ms": eager_ms,
        "explore_graph_ms": graph_ms,
        "plain_mlp_graph_ms": mlp_ms,
        "kernel_us": total_us,
        "kernels_per_call": n_kernels,
        "gemm_us": gemm_us,
        "gemm_tflops": flops / (gemm_us * 1e-6) / 1e12 if gemm_us else None,
        "kernels": rows[:40],
        "explore_compiled_graph_ms": compiled_ms,
        "compile_s": compile_s,
        "compiled_kernel_us": sum(float(r["us"]) for r in compiled_rows),  # type: ignore[misc]
        "compiled_kernels_per_call": sum(float(r["calls"]) for r in compiled_rows),  # type: ignore[misc]
        "compiled_kernels": compiled_rows[:40],
    }
    steps = lambda ms: args.envs / (ms * 1e-3)  # noqa: E731
    print(f"exploring forward at {args.envs:,} envs, {agent.policy.net.param_count():,} parameters, "
          f"{flops / 1e9:.1f} GFLOP of matmuls (TF32)")
    print(f"{'path':<34} {'ms':>8} {'env-steps/s':>13}")
    for name, ms in (
        ("foxhunt explore, eager", eager_ms),
        ("foxhunt explore, CUDA graph", graph_ms),
        ("compiled forward, CUDA graph", compiled_ms),
        ("plain MLP, same FLOPs, CUDA graph", mlp_ms),
    ):
        print(f"{name:<34} {ms:>8.3f} {steps(ms):>13.3e}")
    print(f"kernels: {n_kernels:.0f} a call, {total_us:.0f} us of kernel time; matmuls {gemm_us:.0f} us "
          f"({report['gemm_tflops'] or 0:.1f} TFLOP/s), the rest {total_us - gemm_us:.0f} us; "
          f"graph time - kernel time = {graph_ms * 1e3 - total_us:.0f} us of launch gaps")
    for r in rows[:15]:
        print(f"{float(r['us']):>9.1f} us  x{float(r['calls']):<5.0f} {r['kernel']}")
    c_us, c_n = report["compiled_kernel_us"], report["compiled_kernels_per_call"]
    print(f"compiled forward (compile {compile_s:.1f} s): {c_n:.0f} kernels a call, {c_us:.0f} us of kernels")
    for r in compiled_rows[:12]:
        print(f"{float(r['us']):>9.1f} us  x{float(r['calls']):<5.0f} {r['kernel']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
