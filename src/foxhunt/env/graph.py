"""The step replayed as one CUDA graph, optionally fused by ``torch.compile`` (Inductor) first.

Eager PyTorch launches hundreds of small kernels per step, so at 16 k envs the step is launch-bound.
A CUDA graph records the launches once and replays them with one call. bench/env.py on an H200,
float64, full step with state assembly (env-steps/s)::

    envs     eager    graph    compiled + graph
    16 k     1.8e6    8.9e6    1.1e8
    1 M      4.8e7    5.6e7    2.5e8

The environment's transition is pure (:meth:`TradingEnv.transition`) and has no host round trip,
so it can be captured as is: :func:`advance` computes the next portfolio (with the policy's sizing
inputs) and writes it back into the state's tensors in place (the graph's static buffers).
Every stepping path uses it: training collection (:class:`foxhunt.agent.collect.Collector`: the
exploring policy and the step captured together), validation, the run's checkpoint evaluation,
the scripted baselines and the reference rule (a :class:`CapturablePolicy`,
:class:`foxhunt.backtest.evaluate.GraphedEvaluation`), and the recorded-policy backtest
(``evaluate_many``: its whole step, reductions included, captured by
:class:`foxhunt.backtest.evaluate.RecordedPolicies`); ``foxhunt backtest --checkpoint`` too, its decisions.csv
written into device buffers inside the step (``GraphedEvaluation(decisions=True)``) and copied to the
host once at the end. :func:`reset_in_place` starts
new episodes in the same tensors, so one capture serves every epoch.

With ``compile=True`` :func:`advance` (and the state assembly, ``observe=True``) is compiled with
``torch.compile(fullgraph=True)`` before capture, so the graph replays a few fused Inductor kernels
that write the next state straight into the state's tensors, instead of hundreds of eager kernels
and one copy per field. :data:`COMPILE_OPTIONS` keeps the compile time reasonable (see there);
Inductor's on-disk caches (``TORCHINDUCTOR_CACHE_DIR``, FX graph cache on by default) make a
second process's compile of the same step a cache hit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from torch import Tensor

from foxhunt.domain.actions import BRANCHES, Direction
from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.state import Portfolio

T = TypeVar("T")


def capture(
    step: Callable[[], T], warmup: int = 3, generators: Sequence[torch.Generator] = ()
) -> tuple[torch.cuda.CUDAGraph, T]:
    """``step`` run ``warmup`` times eagerly on a side stream (lazy state, compilation), then captured;
    ``(graph, the captured call's outputs)``. A custom generator the step draws from must be in
    ``generators``: a graph replays its random kernels at the generator's current offset (advancing
    it) only when registered; the default generator is registered by the capture itself."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    for g in generators:
        graph.register_generator_state(g)
    with torch.cuda.graph(graph):
        out = step()
    torch.cuda.synchronize()
    return graph, out


COMPILE_OPTIONS: dict[str, object] = {
    # Store a value that several consumers read instead of re-inlining its expression into each. The
    # transition is a long chain of `where`s feeding ~60 outputs; with the default (inline unless
    # read more than 4 times) every output's loop body carried most of the chain again, and
    # Inductor's codegen took 40-120 s on a 2-core CPU (over 480 s on the H200 box); with 1, the
    # whole step compiles in ~23 s on that CPU (101 s without) and 25-31 s on the H200 box, and a
    # cache hit takes ~4 s. The stored intermediates stay inside the fused kernels.
    "realize_reads_threshold": 1,
    # One block size per pointwise kernel instead of compiling and timing two: the step is
    # memory-bound and the block size barely matters.
    "triton.autotune_pointwise": False,
}
"""Inductor options for compiling the step (default mode, not max-autotune)."""


def _pairs(a: Portfolio, b: Portfolio) -> list[tuple[Tensor, Tensor]]:
    return list(zip(a.tensors(), b.tensors(), strict=True))


def advance(
    env: TradingEnv,
    state: Portfolio,
    actions: Tensor,
    observe: bool,
    direction_conviction: Tensor | None = None,
    magnitude_conviction: Tensor | None = None,
    q_variance: Tensor | None = None,
    ledger: bool = True,
) -> tuple[StepResult, Tensor]:
    """One transition of ``env`` written back into ``state``'s tensors in place; ``(result, obs)``.

    The sizing inputs come from the policy (:class:`~foxhunt.agent.actor.PolicyOut`); None is
    neutral (scripted and recorded policies). ``state`` must be ``env.state`` with every tensor in
    its own storage (:func:`own_storage`). ``obs`` is the next state assembled through the layout
    (reading ``env.aux``) when ``observe``, else an empty tensor. Without ``ledger`` the result is
    :meth:`StepResult.lean` (no trade detail, no per-stage fills): compiled, the step then neither
    computes nor writes them (training collection, the recorded-policy backtest).
    """
    new, result = env.transition(
        state, actions, direction_conviction, magnitude_conviction, q_variance, ledger
    )  # without ledger already lean: eagerly (a graph of the eager step) the ledger is skipped too
    for dst, src in _pairs(state, new):
        if src is not dst:
            dst.copy_(src)
    obs = env.observe() if observe else actions.new_empty(0)
    return result, obs


COMPILE_MIN_BATCH = 1024
"""Smallest batch (episodes stepped together) for which a captured step is compiled by Inductor
first. Below it the CUDA graph of the eager step is launch-free already and each compile (35-45 s
per input signature on the H200 box, bench/epoch.py; more on a fresh host, whose Inductor and
Triton caches are empty) costs more than a short run saves. At 128 the smoke profile's 256
training episodes compiled: on a fresh H200 host its first epoch took 81 s, 79.5 s of it in the
collector's first capture, against 8.9 s when the same host ran it again from Inductor's cache
(189.6 s against 99.5 s end to end). The smoke job steps ~1,200 training batches in all, so even
a 2 ms saving a step repays under 3 s of that. At 1,024 the fresh host's smoke job took 119.9 s,
its first epoch 3.8 s. The localdev profile's 4,096 episodes and production's
16,384 compile. Measured on the H200 at 16,384 episodes: collection 4.1 ms per step compiled +
graph; validation of 196 windows 0.90 ms per step compiled + graph (0.46 s for 100 k rows)
against 23.9 ms eager."""

_COMPILED: list[Callable[..., tuple[StepResult, Tensor]]] = []


def compiled_advance() -> Callable[..., tuple[StepResult, Tensor]]:
    """:func:`advance` compiled whole (``fullgraph=True``) with :data:`COMPILE_OPTIONS`.

    One compiled function per process, shared by every caller (training collection, validation,
    the recorded-policy backtest), so its compiled variants (one per input signature; the guards
    pick) are reused across folds and epochs instead of compiled again for a new wrapper.
    """
    if not _COMPILED:
        _COMPILED.append(torch.compile(advance, fullgraph=True, options=COMPILE_OPTIONS))
    return _COMPILED[0]


def reset_in_place(env: TradingEnv, starts: Tensor, ends: Tensor | None = None) -> Tensor:
    """``env.reset(starts, ends)`` written into the tensors of the env's current state and aux.

    A captured step reads and writes the state's tensors by address, so a new epoch (or validation
    pass) of the same batch size must reuse them. The env's first reset gives every tensor its own
    storage (:func:`own_storage`). Returns the first observation (a fresh tensor).
    """
    old, old_aux = env.state, env.aux
    obs = env.reset(starts, ends)
    if old is None or old_aux is None or old.row.shape != env.state.row.shape:
        own_storage(env)
        return obs
    for dst, src in _pairs(old, env.state):
        dst.copy_(src)
    old_aux.copy_(env.aux)
    env.state, env.aux = old, old_aux
    return obs


def own_storage(env: TradingEnv) -> Portfolio:
    """Give every state tensor its own storage (in-place writes of one field must not touch another;
    a fresh :class:`~foxhunt.env.rewards.TradePath` shares one zero tensor among its fields)."""
    env.state = env._state().map(torch.clone)
    return env.state


class CapturablePolicy:
    """Marks ``fn`` (``(state, env) -> actions | decision``) as capturable in a CUDA graph: it reads
    only device tensors whose addresses stay put (the network's parameters, the signals) and never
    reads the host. A decision must carry ``actions``, ``aux`` and the sizing inputs
    (``direction_conviction``, ``magnitude_conviction``, ``q_variance``), as the agent's
    ``PolicyOut`` does. ``graphs`` holds the evaluations captured for it
    (:class:`foxhunt.backtest.evaluate.GraphedEvaluation`), reused by later evaluations."""

    def __init__(self, fn: Callable[[Tensor, TradingEnv], object]) -> None:
        self.fn = fn
        self.graphs: dict[tuple, object] = {}

    def __call__(self, obs: Tensor, env: TradingEnv) -> object:
        return self.fn(obs, env)


class GraphedStep:
    """``step(actions) -> StepResult`` replaying a captured step of ``env`` (CUDA only).

    The env must have been reset; episodes keep their fixed windows (no autoreset inside the graph).
    Convictions are neutral (scripted and evaluation policies); the result tensors (and ``obs``, the
    next state when ``observe``) are static buffers overwritten by the next replay (copy them out if
    you keep them). The result is :meth:`StepResult.lean` unless ``ledger`` (with the trade detail in
    the result the compiled step at 1 M envs fell from 2.48e8 to 1.68e8 env-steps/s, bench/env.py).
    ``compile``: fuse the step with Inductor first (module docstring); the first
    construction for a shape compiles, ``compile_seconds`` says how long warm-up and capture took.
    ``dynamic_batch``: compile for any number of episodes (one compile serves every N) instead of
    this N (torch.compile's default: static first, dynamic from the first N that differs).
    """

    def __init__(
        self,
        env: TradingEnv,
        warmup: int = 3,
        *,
        compile: bool = False,
        observe: bool = False,
        dynamic_batch: bool = False,
        ledger: bool = False,
    ) -> None:
        if env.device.type != "cuda":
            raise ValueError("CUDA graphs need the environment on a CUDA device")
        import time

        state = own_storage(env)
        n = state.row.shape[0]
        self.env = env
        self.observe = observe
        self.fn = compiled_advance() if compile else advance
        self.actions = torch.zeros(n, len(BRANCHES), dtype=torch.int64, device=env.device)
        self.actions[:, BRANCHES.index("direction")] = int(Direction.HOLD)  # Hold while warming up
        if dynamic_batch:
            for t in (*state.tensors(), env.aux, self.actions):
                torch._dynamo.maybe_mark_dynamic(t, 0)
        snapshot = [t.clone() for t in state.tensors()]
        t0 = time.perf_counter()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up off the capture (allocator, lazy init, compilation)
            for _ in range(warmup):
                self.fn(env, state, self.actions, observe, ledger=ledger)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.result, self.obs = self.fn(env, state, self.actions, observe, ledger=ledger)
        for dst, src in zip(state.tensors(), snapshot, strict=True):  # warm-up and capture
            dst.copy_(src)  # ran the step: undo them
        torch.cuda.synchronize()
        self.compile_seconds = time.perf_counter() - t0

    def step(self, actions: Tensor) -> StepResult:
        self.actions.copy_(actions)
        self.graph.replay()
        return self.result
