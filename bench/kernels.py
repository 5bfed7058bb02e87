"""Kernel benchmark for issue 16 part 4: the exploring forward in float32 against TF32, and the C51
projection in its dense form against the scatter form the learner runs.

    python3 bench/kernels.py [--envs 16384] [--batch 16384] [--iters 20] [--repeats 3] [--no-compile]
                             [--out bench/results/kernels_h200.json | $OUT]

Rows (ms per call, the median of ``--repeats`` rounds of ``--iters`` calls, device synchronised):

* **exploring policy**: ``Agent.policy(states, Mode.EXPLORE)`` of the production network (1.37 M
  parameters) at ``--envs`` states, eager and replayed as a CUDA graph (as the collection step runs
  it), float32 and inside :func:`foxhunt.agent.collect.tf32_matmuls`; the forward's FLOPs over the
  time give the achieved rate.
* **C51 projection + cross-entropy** at ``--batch`` rows and the production atom count, per branch
  (softmax of target logits, projection onto the support, cross-entropy of online logits against
  it): Dopamine's dense ``B·K²`` form against :func:`foxhunt.agent.distributional.project_c51`'s
  scatter form, eager and ``torch.compile``-d (the learner compiles its loss at large batches).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from foxhunt.agent.actor import Mode
from foxhunt.agent.agent import Agent
from foxhunt.agent.collect import tf32_matmuls
from foxhunt.agent.config import AgentConfig
from foxhunt.agent.distributional import c51_cross_entropy, project_c51, support
from foxhunt.domain.actions import BranchConfig
from foxhunt.features.layout import STATE_LAYOUT

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from learner import graphed, sync, timed  # noqa: E402


def dense_projection(probs_BK: Tensor, r_B: Tensor, d_B: Tensor, z_K: Tensor) -> Tensor:
    """Dopamine's dense form of C51 Eq. 7 (the form ``project_c51`` replaced)."""
    delta_z = z_K[1] - z_K[0]
    target_BK = (r_B[:, None] + d_B[:, None] * z_K[None, :]).clamp(z_K[0], z_K[-1])
    weight_BKK = (1.0 - (target_BK[:, None, :] - z_K[None, :, None]).abs() / delta_z).clamp(0.0, 1.0)
    return (weight_BKK * probs_BK[:, None, :]).sum(-1)


def forward_flops(agent: Agent, states: Tensor) -> float:
    """FLOPs of one network forward on ``states`` (torch's FLOP counter: 2 per multiply-add)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        agent.policy.net(states)
    return float(counter.get_total_flops())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--envs", type=int, default=16_384)
    ap.add_argument("--batch", type=int, default=16_384)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true", help="skip the compiled projection rows")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    out = args.out or REPO / "bench" / "results" / f"kernels_{'h200' if cuda else 'cpu'}.json"
    if out.suffix != ".json":  # a folder (the device tool's $OUT)
        out = out / "kernels.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"torch": torch.__version__, "device": str(device), "rows": []}
    if cuda:
        doc["gpu"] = torch.cuda.get_device_name(device)

    def row(name: str, fn: Callable[[], object], **extra: Any) -> dict:
        r = {"name": name, **timed(fn, device, args.iters, args.repeats), **extra}
        doc["rows"].append(r)
        out.write_text(json.dumps(doc, indent=2))
        tail = "".join(f"  {k} {v:.3g}" for k, v in extra.items() if isinstance(v, float))
        print(f"{name:<52} {r['ms']:>9.3f} ms{tail}", flush=True)
        return r

    # --- the exploring forward --------------------------------------------------------------------
    agent = Agent(AgentConfig(), BranchConfig(), device=device, seed=0, replay_capacity=16)
    gen = torch.Generator(device=device).manual_seed(1)
    states = torch.randn(args.envs, STATE_LAYOUT.width, generator=gen, device=device)
    flops = forward_flops(agent, states)
    doc["forward_gflop"] = flops / 1e9

    def explore() -> object:
        return agent.policy(states, Mode.EXPLORE)

    def explore_tf32() -> object:
        with tf32_matmuls():
            return agent.policy(states, Mode.EXPLORE)

    for name, fn in (("float32", explore), ("TF32", explore_tf32)):
        r = row(f"exploring policy, {args.envs:,} envs, {name}", fn)
        r["tflop_per_s"] = flops / (r["ms"] / 1e3) / 1e12
        if cuda:
            agent.gen = torch.Generator(device=device).manual_seed(2)
            try:
                replay = graphed(fn, generators=[agent.gen])
                g = row(f"exploring policy, {args.envs:,} envs, {name}, CUDA graph", replay)
                g["tflop_per_s"] = flops / (g["ms"] / 1e3) / 1e12
            except RuntimeError as err:
                doc.setdefault("notes", []).append(f"{name} graph: {err}"[:300])
    print(f"forward {doc['forward_gflop']:.1f} GFLOP per step", flush=True)

    # --- the C51 projection -----------------------------------------------------------------------
    atoms = agent.cfg.network.atoms
    z = support(torch.tensor(5.0, device=device), atoms)
    b = args.batch
    target_logits = torch.randn(b, atoms, generator=gen, device=device)
    online_logits = torch.randn(b, atoms, generator=gen, device=device)
    r = torch.randn(b, generator=gen, device=device)
    d = torch.full((b,), 0.97, device=device)

    def loss_of(project: Callable[..., Tensor]) -> Callable[[], Tensor]:
        def fn() -> Tensor:
            m = project(torch.softmax(target_logits, -1), r, d, z)
            return c51_cross_entropy(online_logits, m)

        return fn

    same = loss_of(dense_projection)()
    doc["scatter_vs_dense_max_abs"] = float((loss_of(project_c51)() - same).abs().max())
    for name, project in (("dense", dense_projection), ("scatter", project_c51)):
        fn = loss_of(project)
        row(f"C51 projection + CE, {b:,} x {atoms} atoms, {name}", fn)
        if not args.no_compile:
            t0 = time.perf_counter()
            compiled = torch.compile(fn, fullgraph=True, dynamic=False)
            compiled()
            sync(device)
            row(f"C51 projection + CE, {name}, compiled", compiled, compile_s=time.perf_counter() - t0)
    print(f"scatter - dense, max |CE difference|: {doc['scatter_vs_dense_max_abs']:.2e}")
    out.write_text(json.dumps(doc, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
