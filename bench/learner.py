"""Learner benchmark: foxhunt's full learner update beside a bare forward+backward+Adam step.

    .venv/bin/python bench/learner.py [--device cpu|cuda] [--profile smoke] [--batch N]
                                      [--iters 20] [--repeats 3] [--[no-]compile] [--no-graph]
                                      [--no-profiler] [--no-tf32]
                                      [--out bench/results/learner_h200.json | $OUT]

Rows (ms per update, the median of ``--repeats`` rounds of ``--iters`` updates, host clock around
each round with the device synchronised; updates/s = 1000 / ms):

* **full update**: ``Agent.learn(1, batch)``: prioritised replay sample, double-Q n-step targets
  from the online and Polyak target networks (``Learner._targets``), PopArt, every loss, backward,
  the two clipped gradient norms, Adam, Polyak, the priority update and the signal EMAs.
* **bare, foxhunt net**: the same network (a copy) on the same batch: forward, a simple loss over
  every output (the sum of each output's mean square), backward, Adam (same settings).
* **bare, seed-shape net**: the calibration network of the seed system (issue 6 §5), built here
  from plain ``nn.Module`` s: a 128->256->256 trunk MLP, 8 experts 256->64->256 mixed by a softmax
  gate, a value head and four 51-atom advantage branches (foxhunt's 4 x 3 x 3 x 3 actions; head
  hidden width 240 brings the count to 846 k, the seed system's ~847 k). The seed system took 7.7 ms
  per bare update on the H200 in eager PyTorch.

Then the full update's time split by stage: device events (host timers on CPU) recorded at the entry
and exit of ``replay.sample``, ``Learner._target_values_fn``, ``PopArt.update``, ``Learner._losses_fn``,
``Tensor.backward``,
``clip_grad_norm_``, ``Adam.step``, ``SoftUpdate.step`` and ``replay.update_priorities``; the gaps
between them are named by what runs there (noise reset, forward + losses, statistics, signals).
On CUDA also: a PyTorch-profiler pass (kernels per update, share of the wall time the GPU is busy,
the top kernels), TF32 matmuls and CUDA graphs: the whole learner step as ``Agent.learn`` replays
it (:class:`~foxhunt.agent.graph.GraphedLearn`: replay sampling and the priority write inside the
graph), first of the eager kernels, then (``--compile``, the default) compiled first as ``train`` runs
it at large batches (:meth:`Learner.compile`; compile seconds reported apart, and the compiled
update's own profile and stage breakdown), the two bare steps captured likewise, and a check that
the graphed update computes what the eager one does (NoisyNet off, same state, same batches:
relative differences of priorities and parameters).

The issue's goal: full <= 1.5 x bare (same network). Where the graphs were captured, the last lines
explain the graphed gap by kernel counts (``launch_floor``): the full update's and the bare step's
kernels per update and each graph's time per kernel. Equal times per kernel mean the update is bound
by how many small kernels it runs one after another, not by its arithmetic.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from foxhunt.agent.agent import Agent, UpdateMode
from foxhunt.agent.config import AgentConfig, NetworkConfig
from foxhunt.agent.graph import GraphedLearn, capture
from foxhunt.agent.graph import GraphedUpdate as PackageGraphedUpdate
from foxhunt.agent.learner import Batch
from foxhunt.agent.stats import q_key
from foxhunt.config.loader import load_config
from foxhunt.domain.actions import BRANCHES, ActionCodec, BranchConfig

REPO = Path(__file__).resolve().parents[1]
SEED_SYSTEM_BARE_MS = 7.7  # issue 6 §5: the seed-shape network's bare update on the H200, eager
GOAL_RATIO = 1.5


# --- the seed system's network (calibration) -----------------------------------------------------


class SeedNet(nn.Module):
    """128 -> 256 -> 256 trunk, 8 gated experts 256 -> 64 -> 256, dueling value + 4 C51 branches."""

    def __init__(
        self,
        width: int = 128,
        hidden: int = 256,
        experts: int = 8,
        expert_hidden: int = 64,
        head_hidden: int = 240,
        atoms: int = 51,
        branches: tuple[int, ...] = ActionCodec(BranchConfig()).sizes,
    ) -> None:
        super().__init__()
        self.atoms, self.branches = atoms, branches
        self.trunk = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.gate = nn.Linear(hidden, experts)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(hidden, expert_hidden), nn.ReLU(), nn.Linear(expert_hidden, hidden))
            for _ in range(experts)
        )

        def head(out: int) -> nn.Module:
            return nn.Sequential(nn.Linear(hidden, head_hidden), nn.ReLU(), nn.Linear(head_hidden, out))

        self.value = head(atoms)
        self.advantage = nn.ModuleList(head(n * atoms) for n in branches)

    def forward(self, x_BW: Tensor) -> list[Tensor]:
        h_BH = self.trunk(x_BW)
        gate_BE = torch.softmax(self.gate(h_BH), dim=-1)
        experts_BEH = torch.stack([e(h_BH) for e in self.experts], dim=1)
        h_BH = (gate_BE[..., None] * experts_BEH).sum(1)
        v_B1K = self.value(h_BH).view(-1, 1, self.atoms)
        outs = []
        for n, adv in zip(self.branches, self.advantage, strict=True):
            a_BAK = adv(h_BH).view(-1, n, self.atoms)
            outs.append(F.log_softmax(v_B1K + a_BAK - a_BAK.mean(1, keepdim=True), dim=-1))
        return outs


# --- helpers ----------------------------------------------------------------------------------------


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def tensors_of(out: Any) -> Iterator[Tensor]:
    """Every tensor in a network output (NetOut, its BranchOuts, lists)."""
    if isinstance(out, Tensor):
        yield out
    elif isinstance(out, (list, tuple)):
        for x in out:
            yield from tensors_of(x)
    elif hasattr(out, "__dataclass_fields__"):
        for name in out.__dataclass_fields__:
            yield from tensors_of(getattr(out, name))


def simple_loss(out: Any) -> Tensor:
    """The bare step's loss: the sum over outputs of each output's mean square."""
    return sum((t.float().square().mean() for t in tensors_of(out)), torch.zeros((), device=_dev(out)))


def _dev(out: Any) -> torch.device:
    return next(tensors_of(out)).device


def make_adam(net: nn.Module, lr: float, device: torch.device) -> torch.optim.Adam:
    """Adam as the learner builds it (fused; capturable on CUDA; eps 1e-6)."""
    cuda = device.type == "cuda"
    return torch.optim.Adam(net.parameters(), lr=lr, capturable=cuda, fused=True, eps=1e-6)


def bare_step(net: nn.Module, opt: torch.optim.Optimizer, x: Tensor) -> Callable[[], None]:
    def step() -> None:
        loss = simple_loss(net(x))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def timed(fn: Callable[[], Any], device: torch.device, iters: int, repeats: int, warmup: int = 2) -> dict:
    """Median (and spread) of ``repeats`` rounds of ``iters`` calls, ms per call, device synchronised."""
    for _ in range(warmup):
        fn()
    rounds = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync(device)
        rounds.append((time.perf_counter() - t0) * 1e3 / iters)
    ms = statistics.median(rounds)
    return {"ms": ms, "per_s": 1e3 / ms, "ms_min": min(rounds), "ms_max": max(rounds)}


def fill_replay(agent: Agent, device: torch.device, gen: torch.Generator) -> None:
    """Fill the replay to capacity with random transitions (aux targets NaN on a tenth of the rows)."""
    rb, chunk = agent.replay, 1 << 16
    sizes = torch.tensor(agent.policy.sizes, device=device)
    width = rb.fields["state"][0][0]
    gamma_n = agent.cfg.learn.gamma**agent.cfg.learn.n_step
    for start in range(0, rb.capacity, chunk):
        n = min(chunk, rb.capacity - start)

        def rnd(*shape: int) -> Tensor:
            return torch.randn(*shape, generator=gen, device=device)

        aux = torch.stack(
            [
                rnd(n),
                (rnd(n) > 0).float(),
                torch.randint(0, 3, (n,), generator=gen, device=device).float(),
            ],
            dim=1,
        )
        aux[rnd(n) > 1.28] = float("nan")
        done = torch.rand(n, generator=gen, device=device) < 0.01
        rb.add(
            {
                "state": rnd(n, width),
                "action": (torch.rand(n, len(sizes), generator=gen, device=device) * sizes).long(),
                "reward": 0.01 * rnd(n),
                "discount": torch.where(done, 0.0, gamma_n).to(torch.float32),
                "next_state": rnd(n, width),
                "aux": aux,
            }
        )


# --- the stage breakdown ----------------------------------------------------------------------------


class Timeline:
    """Marks on the device timeline (CUDA events) or the host clock at the entry and exit of wrapped calls."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.marks: list[tuple[str, Any]] = []
        self._undo: list[Callable[[], None]] = []

    def mark(self, name: str) -> None:
        if self.device.type == "cuda":
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append((name, ev))
        else:
            self.marks.append((name, time.perf_counter()))

    def wrap(self, obj: Any, attr: str, name: str) -> None:
        orig = getattr(obj, attr)
        had_own = attr in vars(obj) if not isinstance(obj, type) else True

        def wrapper(*a: Any, **k: Any) -> Any:
            self.mark(f"{name}>")
            result = orig(*a, **k)
            self.mark(f"<{name}")
            return result

        setattr(obj, attr, wrapper)

        def undo() -> None:
            if had_own:
                setattr(obj, attr, orig)
            else:
                delattr(obj, attr)

        self._undo.append(undo)

    def unwrap(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def segments(self) -> list[tuple[str, str, float]]:
        """(from mark, to mark, ms) between consecutive marks."""
        out = []
        for (a, ta), (b, tb) in zip(self.marks, self.marks[1:], strict=False):
            ms = ta.elapsed_time(tb) if self.device.type == "cuda" else (tb - ta) * 1e3
            out.append((a, b, ms))
        return out


# What runs between two marks, when it is not one wrapped call.
GAPS = {
    ("update>", "targets>"): "noise reset (train mode, NoisyNet draws)",
    ("<targets", "popart>"): "support growth",
    ("<popart", "losses>"): "support z",
    ("<losses", "backward>"): "zero_grad",
    ("<polyak", "<update"): "statistics dict",
    ("<priority", "iter"): "signal EMA (q_abs)",
    ("<sample", "update>"): "batch assembly",
}
STAGES = {
    "sample": "replay.sample",
    "targets": "targets (_target_values: online + target nets on s')",
    "popart": "PopArt update (rescale heads)",
    "losses": "projection + forward + losses (_losses: online net on s)",
    "backward": "backward",
    "clip": "clip_grad_norm_ (x2)",
    "adam": "Adam step",
    "polyak": "Polyak (foreach lerp)",
    "priority": "priority update (priority index)",
}


def breakdown(agent: Agent, batch: int, device: torch.device, iters: int) -> tuple[list[dict], float]:
    """Per-stage ms of the full update (mean over ``iters``) and the total ms of the marked updates."""
    tl = Timeline(device)
    learner = agent.learner
    tl.wrap(agent.replay, "sample", "sample")
    tl.wrap(learner, "update", "update")
    tl.wrap(learner, "_target_values_fn", "targets")
    tl.wrap(learner.popart, "update", "popart")
    tl.wrap(learner, "_losses_fn", "losses")
    tl.wrap(torch.Tensor, "backward", "backward")
    tl.wrap(torch.nn.utils, "clip_grad_norm_", "clip")
    tl.wrap(learner.opt, "step", "adam")
    tl.wrap(learner.soft_update, "step", "polyak")
    tl.wrap(agent.replay, "update_priorities", "priority")
    try:
        agent.learn(2, batch)  # warm the wrappers
        sync(device)
        tl.marks.clear()
        for _ in range(iters):
            tl.mark("iter")
            agent.learn(1, batch)
        tl.mark("iter")
        sync(device)
    finally:
        tl.unwrap()
    acc: dict[str, float] = {}
    total = 0.0
    for a, b, ms in tl.segments():
        total += ms
        if a.endswith(">") and b == "<" + a[:-1]:
            name = STAGES.get(a[:-1], a[:-1])
        else:
            name = GAPS.get((a, b), f"other ({a} .. {b})")
        acc[name] = acc.get(name, 0.0) + ms
    rows = [{"stage": k, "ms": v / iters, "share": v / total} for k, v in acc.items()]
    order = list(STAGES.values()) + list(GAPS.values())
    rows.sort(key=lambda r: order.index(r["stage"]) if r["stage"] in order else len(order))
    return rows, total / iters


def profile_update(agent: Agent, batch: int, n: int = 5) -> dict:
    """Kernels per update, the GPU's busy share of the wall time, and the top kernels (PyTorch profiler)."""
    return profile_kernels(lambda: agent.learn(1, batch), n)


def profile_kernels(fn: Callable[[], Any], n: int = 5) -> dict:
    """Kernels per call of ``fn`` (eager), the GPU's busy share of the wall time, the top kernels."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    kernels, busy_us = 0, 0.0
    per_kernel: dict[str, list[float]] = {}
    for ev in prof.events():
        if getattr(ev, "is_user_annotation", False):  # e.g. the GPU range of Optimizer.step, not a kernel
            continue
        if str(getattr(ev, "device_type", "")).endswith("CUDA"):
            dur = float(getattr(ev, "device_time", 0.0) or 0.0)
            kernels += 1
            busy_us += dur
            stat = per_kernel.setdefault(ev.name, [0, 0.0])
            stat[0] += 1
            stat[1] += dur
    top = sorted(per_kernel.items(), key=lambda kv: -kv[1][1])[:12]
    return {
        "kernels_per_update": kernels / n,
        "gpu_busy_ms_per_update": busy_us / 1e3 / n,
        "wall_ms_per_update": wall * 1e3 / n,
        "gpu_busy_share": busy_us / 1e6 / wall,
        "top_kernels": [
            {"kernel": k[:90], "calls_per_update": c / n, "ms_per_update": us / 1e3 / n} for k, (c, us) in top
        ],
    }


def launch_floor(prof: dict, bare_net: nn.Module, bare_opt: Any, x: Tensor, full: dict, bare: dict) -> dict:
    """The graphed full / bare gap explained by kernel counts: each replayed graph's time per kernel.

    At equal time per kernel the ratio of kernel counts is the ratio of graph times: the update is
    bound by how many small kernels it runs one after another (launch latency inside the graph), not
    by its arithmetic. Kernel counts from the eager profiler pass (a graph replays the same kernels).
    """
    bare_prof = profile_kernels(bare_step(bare_net, bare_opt, x))
    k_full = float(prof["kernels_per_update"])
    k_bare = float(bare_prof["kernels_per_update"])
    return {
        "kernels_full": k_full,
        "kernels_bare": k_bare,
        "kernel_ratio": k_full / max(k_bare, 1.0),
        "us_per_kernel_full": 1e3 * full["ms"] / max(k_full, 1.0),
        "us_per_kernel_bare": 1e3 * bare["ms"] / max(k_bare, 1.0),
        "graph_ratio": full["ms"] / bare["ms"],
    }


def learn_graph(agent: Agent, batch: int, compile: bool) -> GraphedLearn:
    """What ``Agent.learn`` replays on CUDA: the whole step (replay sample, update, priority write,
    ``q_abs`` EMA) as one graph, here with the compile choice made explicit."""
    return GraphedLearn(lambda: agent._learn_step(batch), agent.learner, batch, [agent.gen], compile=compile)


class GraphedUpdate(PackageGraphedUpdate):
    """The package's graphed update alone (:mod:`foxhunt.agent.graph`) with the sampling outside
    the graph: replay sampling, the priority update and the ``q_abs`` EMA eager around each replay
    (``bench/epoch.py --graph-learn`` and :func:`check_graph`)."""

    def __init__(
        self, agent: Agent, batch: int, first: Batch | None = None, warmup: int = 3, compile: bool = False
    ) -> None:
        self.agent = agent
        if first is None:
            data, _, w = agent.replay.sample(batch, agent.gen)
            first = Batch(weight=w, **data)
        super().__init__(agent.learner, first, warmup, compile=compile)
        self.q_abs_key = q_key(BRANCHES[0], "spread")

    def load(self, batch: Batch) -> None:
        for f in Batch.__dataclass_fields__:
            getattr(self.static, f).copy_(getattr(batch, f))

    def learn(self, updates: int, batch_size: int) -> None:
        agent = self.agent
        for _ in range(updates):
            data, idx, w = agent.replay.sample(batch_size, agent.gen)
            self.update(Batch(weight=w, **data))
            agent.replay.update_priorities(idx, self.priority)
            agent.policy.signals.ema("q_abs", self.stats[self.q_abs_key].abs() + 1e-3)


def graphed(
    step: Callable[[], object], warmup: int = 3, generators: Sequence[torch.Generator] = ()
) -> Callable[[], None]:
    """``step`` (a bare training step) captured as one CUDA graph (:func:`foxhunt.agent.graph.capture`);
    returns the replay. Custom generators it draws from go in ``generators``."""
    graph, _ = capture(step, warmup, generators)
    return graph.replay


def _snapshot(agent: Agent) -> dict[str, Any]:
    learner = agent.learner
    return {
        "net": {k: v.clone() for k, v in learner.net.state_dict().items()},
        "target": {k: v.clone() for k, v in learner.target.state_dict().items()},
        "popart": {k: v.clone() for k, v in learner.popart.state_dict().items()},
        "opt": [{k: v.clone() for k, v in learner.opt.state[p].items()} for p in learner.net.parameters()],
        "signals": agent.policy.signals.state_dict(),
    }


def _restore(agent: Agent, snap: dict[str, Any]) -> None:
    """In place (``copy_``), so the captured graph keeps pointing at the same tensors."""
    learner = agent.learner
    learner.net.load_state_dict(snap["net"])
    learner.target.load_state_dict(snap["target"])
    learner.popart.load_state_dict(snap["popart"])
    for p, state in zip(learner.net.parameters(), snap["opt"], strict=True):
        for k, v in state.items():
            learner.opt.state[p][k].copy_(v)
    agent.policy.signals.load_state_dict(snap["signals"])


def check_graph(device: torch.device, batch: int, steps: int = 3, compile: bool = False) -> dict[str, float]:
    """The graphed update against the eager one from the same state on the same batches.

    NoisyNet off (``noisy_sigma = 0``) so that nothing random differs; two agents built with the
    same seed; one eager update each (Adam's state exists), then agent B is captured (its warm-up
    updates undone in place) and both take ``steps`` more updates. Relative L2 differences of the
    priorities (worst step), of the parameters and of the total loss at the end.
    """
    cfg = AgentConfig(network=NetworkConfig(noisy_sigma=0.0))
    a = Agent(cfg, BranchConfig(), device=device, seed=0, replay_capacity=1 << 16)
    a.update_mode = UpdateMode.EAGER
    b = Agent(cfg, BranchConfig(), device=device, seed=0, replay_capacity=16)
    fill_replay(a, device, torch.Generator(device=device).manual_seed(5))
    batches = []
    for _ in range(steps + 1):
        data, _, w = a.replay.sample(batch, a.gen)
        batches.append(Batch(weight=w, **data))
    a.learner.update(batches[0])
    b.learner.update(batches[0])
    snap = _snapshot(b)
    g = GraphedUpdate(b, batch, first=batches[0], compile=compile)
    _restore(b, snap)

    def rel(x: Tensor, y: Tensor) -> float:
        return float((x.double() - y.double()).norm() / y.double().norm().clamp_min(1e-30))

    worst = 0.0
    loss_a = loss_b = torch.zeros(())
    for bt in batches[1:]:
        pa, sa = a.learner.update(bt)
        g.load(bt)
        g.graph.replay()
        worst = max(worst, rel(g.priority, pa))
        loss_a, loss_b = sa["loss/total"], g.stats["loss/total"]
    params = max(rel(q, p) for p, q in zip(a.policy.net.parameters(), b.policy.net.parameters(), strict=True))
    return {
        "priority_rel_diff_max": worst,
        "param_rel_diff_max": params,
        "loss_eager": float(loss_a),
        "loss_graph": float(loss_b),
        "steps": steps,
    }


# --- main -------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument(
        "--profile",
        default=None,
        help="agent sizes of this profile (default: the default DQN sizes on CUDA, smoke on CPU)",
    )
    ap.add_argument("--batch", type=int, default=None, help="default: 16384 on CUDA, 256 on CPU")
    ap.add_argument("--capacity", type=int, default=None, help="replay capacity (default: the profile's)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads)")
    ap.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also the compiled + captured update (Learner.compile, as train runs it at large batches)",
    )
    ap.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph captures")
    ap.add_argument("--no-profiler", action="store_true", help="skip the PyTorch-profiler pass")
    ap.add_argument("--no-tf32", action="store_true", help="skip the TF32 rows")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if args.threads:
        torch.set_num_threads(args.threads)
    profile = args.profile or ("production" if cuda else "smoke")
    # The profile's network and its action branches (smoke: the direction branch alone, 4 x 1 x 1 x 1).
    full_cfg = None if profile == "production" else load_config(profile=profile)
    cfg = AgentConfig() if full_cfg is None else full_cfg.agent
    branches = BranchConfig() if full_cfg is None else full_cfg.env.branches
    batch = args.batch or (16_384 if cuda else 256)
    out = args.out or REPO / "bench" / "results" / f"learner_{'h200' if cuda else 'cpu'}.json"
    if out.suffix != ".json":  # a folder (the device tool's $OUT)
        out = out / f"learner_{device.type}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    hw: dict[str, Any] = {
        "torch": torch.__version__,
        "device": str(device),
        "cpu_threads": torch.get_num_threads(),
    }
    if cuda:
        hw["gpu"] = torch.cuda.get_device_name(device)
    doc: dict[str, Any] = {"hardware": hw, "profile": profile, "batch": batch, "rows": [], "notes": []}
    doc["branches"] = list(ActionCodec(branches).sizes)

    def save() -> None:
        out.write_text(json.dumps(doc, indent=2))

    def row(name: str, r: dict, **extra: Any) -> dict:
        entry = {"name": name, **r, **extra}
        doc["rows"].append(entry)
        save()
        print(
            f"  {name:<44} {r['ms']:>9.3f} ms  {r['per_s']:>9.1f} /s   (spread {r['ms_min']:.3f}"
            f"-{r['ms_max']:.3f}){'  ' + extra['note'] if 'note' in extra else ''}",
            flush=True,
        )
        return entry

    t_setup = time.perf_counter()
    agent = Agent(cfg, branches, device=device, seed=0, replay_capacity=args.capacity)
    agent.update_mode = UpdateMode.EAGER  # the eager rows; the graph rows use GraphedUpdate below
    gen = torch.Generator(device=device).manual_seed(1)
    fill_replay(agent, device, gen)
    sync(device)
    doc["params"] = {"foxhunt": agent.policy.net.param_count(), "replay_capacity": agent.replay.capacity}
    print(
        f"profile {profile}  batch {batch:,}  replay {agent.replay.capacity:,}  foxhunt params "
        f"{agent.policy.net.param_count():,}  {hw}  (setup {time.perf_counter() - t_setup:.1f} s)",
        flush=True,
    )

    def full() -> None:
        agent.learn(1, batch)

    it, rep = args.iters, args.repeats
    full_eager = row("full update (Agent.learn, eager)", timed(full, device, it, rep))

    # the same network, bare, on one replay batch
    data, _, _ = agent.replay.sample(batch, agent.gen)
    x = data["state"]
    bare_net = copy.deepcopy(agent.policy.net)
    bare_opt = make_adam(bare_net, cfg.learn.lr, device)
    bare_eager = row(
        "bare fwd+bwd+Adam, foxhunt net", timed(bare_step(bare_net, bare_opt, x), device, it, rep)
    )

    seed = SeedNet().to(device)
    doc["params"]["seed_shape"] = sum(p.numel() for p in seed.parameters())
    seed_opt = make_adam(seed, cfg.learn.lr, device)
    xs = torch.randn(batch, 128, generator=gen, device=device)
    seed_eager = row(
        f"bare, seed-shape net ({doc['params']['seed_shape'] / 1e3:.0f} k)",
        timed(bare_step(seed, seed_opt, xs), device, it, rep),
        note=f"seed system: {SEED_SYSTEM_BARE_MS} ms on H200" if cuda else "",
    )
    doc["ratio_full_over_bare"] = full_eager["ms"] / bare_eager["ms"]
    doc["ratio_bare_over_seed"] = bare_eager["ms"] / seed_eager["ms"]
    save()

    print("breakdown of the full update (device events)" if cuda else "breakdown (host timer)", flush=True)
    stages, marked = breakdown(agent, batch, device, it)
    doc["breakdown"] = {"marked_ms_per_update": marked, "stages": stages}
    save()
    for s in stages:
        print(f"  {s['stage']:<62} {s['ms']:>8.3f} ms  {100 * s['share']:>5.1f}%")
    print(f"  {'total (marked updates)':<62} {marked:>8.3f} ms", flush=True)

    if cuda and not args.no_profiler:
        try:
            doc["profiler"] = profile_update(agent, batch)
            p = doc["profiler"]
            print(
                f"profiler: {p['kernels_per_update']:.0f} kernels/update, "
                f"GPU busy {p['gpu_busy_ms_per_update']:.2f} of {p['wall_ms_per_update']:.2f} ms "
                f"({100 * p['gpu_busy_share']:.0f}%)",
                flush=True,
            )
            for k in p["top_kernels"][:8]:
                print(f"    {k['ms_per_update']:>7.3f} ms  x{k['calls_per_update']:<5.0f} {k['kernel'][:70]}")
        except Exception as err:  # the profiler is a help, not the benchmark
            doc["notes"].append(f"profiler failed: {type(err).__name__}: {err}")
        save()

    if cuda and not args.no_tf32:  # TF32 matmuls (not foxhunt's default): what one switch would give
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        row("full update, TF32 matmuls", timed(full, device, it, rep))
        row("bare, foxhunt net, TF32", timed(bare_step(bare_net, bare_opt, x), device, it, rep))
        row("bare, seed-shape net, TF32", timed(bare_step(seed, seed_opt, xs), device, it, rep))
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    if cuda and not args.no_graph:
        try:
            t0 = time.perf_counter()
            g = learn_graph(agent, batch, compile=False)
            sync(device)
            capture_s = time.perf_counter() - t0
            graph_eager = row(
                "full update, CUDA graph (eager kernels)",
                timed(g.update, device, it, rep),
                capture_s=capture_s,
                note=f"capture {capture_s:.1f} s",
            )
            bare_graph = row(
                "bare, foxhunt net, CUDA graph",
                timed(graphed(bare_step(bare_net, bare_opt, x)), device, it, rep),
            )
            row(
                "bare, seed-shape net, CUDA graph",
                timed(graphed(bare_step(seed, seed_opt, xs)), device, it, rep),
            )
            doc["ratio_graph_eager_over_graph_bare"] = graph_eager["ms"] / bare_graph["ms"]
            del g
            if args.compile:  # what train runs at batch >= COMPILE_MIN_BATCH: compiled, then captured
                t0 = time.perf_counter()
                g = learn_graph(agent, batch, compile=True)
                sync(device)
                compile_s = time.perf_counter() - t0
                full_graph = row(
                    "full update, compiled + CUDA graph",
                    timed(g.update, device, it, rep),
                    compile_s=compile_s,
                    note=f"compile + capture {compile_s:.1f} s",
                )
                doc["compile_s"] = compile_s
                doc["profiler_compiled"] = profile_update(agent, batch)  # the compiled kernels, eager calls
                p = doc["profiler_compiled"]
                print(
                    f"profiler, compiled update: {p['kernels_per_update']:.0f} kernels/update, GPU busy "
                    f"{p['gpu_busy_ms_per_update']:.2f} ms",
                    flush=True,
                )
                for k in p["top_kernels"][:12]:
                    calls, ms = k["calls_per_update"], k["ms_per_update"]
                    print(f"    {ms:>7.3f} ms  x{calls:<5.0f} {k['kernel'][:70]}")
                print("breakdown of the compiled update (device events, eager calls)", flush=True)
                stages, marked = breakdown(agent, batch, device, it)
                doc["breakdown_compiled"] = {"marked_ms_per_update": marked, "stages": stages}
                for s_ in stages:
                    print(f"  {s_['stage']:<62} {s_['ms']:>8.3f} ms  {100 * s_['share']:>5.1f}%")
            else:
                full_graph = graph_eager
            doc["ratio_graph_full_over_graph_bare"] = full_graph["ms"] / bare_graph["ms"]
            doc["graph_check"] = check_graph(device, batch, compile=bool(args.compile))
            print(f"graph vs eager (NoisyNet off): {doc['graph_check']}", flush=True)
        except Exception as err:
            doc["notes"].append(f"CUDA graph failed: {type(err).__name__}: {str(err)[:400]}")
            print(doc["notes"][-1], flush=True)
            traceback.print_exc()
        save()
        prof = doc.get("profiler_compiled", doc.get("profiler"))
        if prof is not None and "ratio_graph_full_over_graph_bare" in doc:
            try:  # the profile that explains the graphed gap (kernel counts)
                doc["launch_floor"] = launch_floor(prof, bare_net, bare_opt, x, full_graph, bare_graph)
            except Exception as err:  # a help, not the benchmark
                doc["notes"].append(f"launch-floor profile failed: {type(err).__name__}: {err}")
            save()

    print()
    print(
        f"{'':<44} {'ms/update':>10} {'updates/s':>10}   device {device}, batch {batch:,}, profile {profile}"
    )
    for r in doc["rows"]:
        print(f"{r['name']:<44} {r['ms']:>10.3f} {r['per_s']:>10.1f}")
    print(
        f"full / bare (same net): {doc['ratio_full_over_bare']:.2f}x (goal <= {GOAL_RATIO}x); "
        f"bare foxhunt / bare seed-shape: {doc['ratio_bare_over_seed']:.2f}x; params {doc['params']}"
    )
    if "ratio_graph_eager_over_graph_bare" in doc:
        print(f"CUDA graphs, eager-kernel update / bare: {doc['ratio_graph_eager_over_graph_bare']:.2f}x")
    if "ratio_graph_full_over_graph_bare" in doc:
        print(
            f"CUDA graphs, full (as train runs it) / bare: {doc['ratio_graph_full_over_graph_bare']:.2f}x "
            f"(goal <= {GOAL_RATIO}x); compile {doc.get('compile_s', 0.0):.1f} s"
        )
    if "launch_floor" in doc:
        f = doc["launch_floor"]
        print(
            f"why (graphs): the full update is {f['kernels_full']:.0f} kernels, the bare step "
            f"{f['kernels_bare']:.0f} ({f['kernel_ratio']:.2f}x); replayed they take "
            f"{f['us_per_kernel_full']:.2f} and {f['us_per_kernel_bare']:.2f} us per kernel"
        )
    for note in doc["notes"]:
        print("note:", note)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
