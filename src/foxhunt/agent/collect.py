"""Training collection as one step function, replayed as a CUDA graph on CUDA (docs/design.md §6).

The collector takes the policy, the environment and the replay apart (as TorchRL's
``SyncDataCollector(env, policy, replay_buffer=...)`` does): ``Collector(policy, env, replay)`` with
``policy`` any :class:`CollectingPolicy` (``obs -> PolicyOut``; the DQN agent's is
:class:`~foxhunt.agent.actor.Exploring`), so another learner's policy plugs in here. The sink is the
replay (n-step windows) or, for an on-policy learner, a :class:`RolloutSink` that takes the staged
sequence itself (:class:`Rollout`; PPO's :class:`~foxhunt.agent.ppo.RolloutStore`).

Each step of an epoch's collection is :meth:`Collector._step`: the exploring policy on the static
state buffer (its noise and Boltzmann / Thompson / epsilon draws from the policy's generator), the
aux predictions into the env's aux slots, the env transition with the policy's sizing inputs
(direction and magnitude conviction, Q-variance) written in place into the env's state
(:func:`foxhunt.env.graph.advance`, compiled by Inductor where that pays: :class:`StepMode`), and
the step's transition staged into ``[T, N]`` buffers at a device-side step counter (:func:`stage`),
with the epoch's reward statistics summed on the device. Nothing in the step reads the device from the
host, so on CUDA it is captured once per batch shape and each step is one graph replay. After the
epoch's steps, every n-step window of the staged sequence is computed at once
(:func:`~foxhunt.agent.replay.nstep_windows`: the same windows an :class:`~foxhunt.agent.replay.NStep`
pushed step by step and flushed gives) and written into the replay in one ``add``.

The captured graph keeps the addresses of everything it reads: the network's parameters and noise
buffers, the signals, the PopArt statistics and the visit counts are updated in place by the
learner (and restored in place from checkpoints), so a replay sees their current values; what the
policy holds as Python constants (its :meth:`~CollectingPolicy.capture_key`: the DQN agent's
temperature boost, which the plateau response changes) is captured with it, so the graph is captured
again when it changes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import torch
from torch import Tensor

from foxhunt.agent.actor import CompileScope, PolicyOut
from foxhunt.agent.config import Bootstrap, CounterfactualConfig, LearnConfig
from foxhunt.agent.counterfactual import CF, CounterfactualStage, EntryWindows
from foxhunt.agent.learner import decision_state
from foxhunt.agent.replay import VALID, PrioritizedReplay, nstep_windows
from foxhunt.agent.signals import Signals
from foxhunt.domain.actions import BRANCHES
from foxhunt.domain.sharpe import sharpe_ratio
from foxhunt.env.config import EnvConfig
from foxhunt.env.core import TradingEnv
from foxhunt.env.graph import COMPILE_MIN_BATCH, advance, compiled_advance, reset_in_place
from foxhunt.env.market import AUX_TARGETS, MarketTensors
from foxhunt.features.layout import STATE_LAYOUT

_DIRECTION, _MAGNITUDE = BRANCHES.index("direction"), BRANCHES.index("magnitude")


@contextmanager
def tf32_matmuls() -> Iterator[None]:
    """float32 matmuls on TF32 tensor cores inside the block (``set_float32_matmul_precision("high")``),
    the previous precision restored after it. A CUDA graph captured inside keeps the TF32 kernels.

    The exploring policy at 16,384 episodes (a 36 GFLOP forward) replayed as a CUDA graph on the H200
    took 3.44 ms in float32 and 2.84 ms in TF32 (bench/kernels.py): the matmuls are a part of it, the
    rest the forward's elementwise chains (which Inductor now fuses: from 1,024 episodes the
    collector compiles the forward, :meth:`~foxhunt.agent.actor.Actor.compile`; at 16,384
    episodes 1.83 ms as the eager forward's graph, 1.23 ms compiled, bench/policy_kernels.py). TF32
    rounds the matmul inputs to a 10-bit mantissa: Q-values move by about 1e-3 of their scale
    (tests/agent/test_collect.py bounds them at 1e-2), so greedy choices can flip only on near-ties,
    and exploration draws around them anyway. Only on CUDA (on a CPU this precision setting made the
    forward 3x slower). The learner keeps full float32 (its targets compound over updates)."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


class StepMode(StrEnum):
    """How the collection step runs."""

    AUTO = "auto"  # CUDA: a replayed CUDA graph (env step compiled for large batches); CPU: eager
    EAGER = "eager"  # the same step function, called eagerly (the reference)
    GRAPH = "graph"  # CUDA graph of the eager step (no Inductor)
    COMPILED = "compiled"  # Inductor-compiled env step, eager calls
    COMPILED_GRAPH = "compiled_graph"  # compiled env step, replayed as a CUDA graph
    # The env step as one Triton kernel (foxhunt.env.fused), replayed as a CUDA graph; CUDA only. In
    # collection from COMPILE_MIN_BATCH episodes the exploring decision is compiled whole with it
    # (foxhunt.agent.actor.CompiledExploring). AUTO does not pick it yet: it will once bench/collection.py
    # and bench/fused_step.py have measured it faster on the device.
    FUSED = "fused"


def _resolve(mode: StepMode, device: torch.device, n: int) -> tuple[bool, bool]:
    """``(compile, graph)`` for ``mode`` on ``device`` with ``n`` episodes.

    AUTO on CUDA is a graph, compiled from :data:`~foxhunt.env.graph.COMPILE_MIN_BATCH` episodes.
    AUTO on the CPU is eager: the network forward dominates the step there, and the env step's
    first compile (~23 s on 2 cores, ~4 s from Inductor's cache) costs more than a smoke run's
    whole collection.
    """
    cuda = device.type == "cuda"
    if mode is StepMode.AUTO:
        return cuda and n >= COMPILE_MIN_BATCH, cuda
    graph = mode in (StepMode.GRAPH, StepMode.COMPILED_GRAPH, StepMode.FUSED)
    if graph and not cuda:
        raise ValueError(f"step mode {mode.value} needs a CUDA device, the agent is on {device}")
    return mode in (StepMode.COMPILED, StepMode.COMPILED_GRAPH), graph


def stage(
    actions: Tensor,
    written: Tensor,
    realised_direction: Tensor,
    realised_magnitude: Tensor,
    reward: Tensor,
    components: Tensor,
    done: Tensor,
    row: Tensor,
    aux_targets: Tensor | None,
    no_aux: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """One step's transition as the collector stages it, from the policy's ``actions`` ``[N, branches]``
    and the step's result (``done`` and ``row``: the state after it): ``(acted, reward [N] float32,
    done [N], aux [N, aux targets], sums [5] float64)``. ``acted`` is the action that acted, which the
    replay learns from: under the plan lock the picked direction was ignored (realised Hold) and the
    Kelly cap may have lowered the magnitude. ``done`` ends a window (the episode ended, or the step
    was not written); ``aux`` the aux targets of the row the action was taken on (``no_aux`` without
    them); ``sums`` the reward statistics' increments (sum, sum of squares, live steps, |shaping
    terms|, |all terms|)."""
    rows = row - written.to(torch.int64)  # the row the action was taken on
    aux = aux_targets[rows].float() if aux_targets is not None else no_aux
    acted = actions.clone()
    acted[:, _DIRECTION] = torch.where(written, realised_direction, acted[:, _DIRECTION])
    acted[:, _MAGNITUDE] = torch.where(written, realised_magnitude, acted[:, _MAGNITUDE])
    r = reward.to(torch.float64)
    comp = components.abs().to(torch.float64)  # [N, len(COMPONENTS)], column 0 the PnL
    sums = torch.stack(
        [r.sum(), (r * r).sum(), written.to(torch.float64).sum(), comp[:, 1:].sum(), comp.sum()]
    )
    return acted, reward.float(), done | ~written, aux, sums


@functools.cache
def compiled_stage() -> Callable[..., tuple[Tensor, ...]]:
    """:func:`stage` compiled by Inductor (one per process, shared by every collector): under
    ``StepMode.FUSED`` the fused step's result is staged by a few fused kernels, not the ~20 small
    eager ones. The same values; the float64 sums' reduction order may differ (1e-16 relative)."""
    return torch.compile(stage, fullgraph=True, dynamic=False)


class CollectingPolicy(Protocol):
    """What the collector needs of a policy: the decision for the static state buffer, device-only
    (no host read: the step is captured), and what a capture of the step must know."""

    generator: torch.Generator  # where its draws come from (registered with a captured graph)

    def __call__(self, obs: Tensor) -> PolicyOut: ...

    def mutable(self) -> list[Tensor]:
        """The tensors a call changes in place (restored after a capture's warm-up steps)."""
        ...

    def capture_key(self) -> Hashable:
        """What a captured step holds as constants: another key captures the step again."""
        ...

    def compile(self, scope: CompileScope = CompileScope.FORWARD) -> None:
        """Compile the policy's pure part (called where the collector compiles the env step): the
        forward, or the whole decision, its draws made before it
        (``foxhunt.agent.actor.CompiledExploring``)."""
        ...


@dataclass(frozen=True)
class Rollout:
    """One epoch's staged sequence as an on-policy learner reads it (views of the collector's buffers,
    valid until its next ``collect``): states ``s_0 .. s_T`` ``[T + 1, n, W]``, the actions that acted
    ``[T, n, branches]`` (the realised direction under a plan lock, the Kelly cap's magnitude), rewards
    and dones ``[T, n]``, and ``valid`` ``[T, n]`` (the step was written); with counterfactual
    execution targets on, ``cf``: every entry's windows per execution value
    (:class:`~foxhunt.agent.counterfactual.EntryWindows`)."""

    states: Tensor
    actions: Tensor
    rewards: Tensor
    dones: Tensor
    valid: Tensor
    cf: EntryWindows | None = None


class RolloutSink(Protocol):
    """Where an on-policy learner's collection goes instead of a replay (``foxhunt.agent.ppo``)."""

    device: torch.device

    def take(self, rollout: Rollout) -> None:
        """Keep (a reference to) the epoch's rollout for the update that follows."""
        ...


class Collector:
    """``collect(starts)``: one epoch of ``steps`` steps of ``n`` training episodes into ``replay``.

    Acts with ``policy`` on ``env`` (reset in place each epoch) and writes the n-step windows of
    ``learn`` (``n_step``, ``gamma``, ``bootstrap``) into ``replay``; holds its staging buffers on the
    replay's device. Build one per (market, batch shape) and reuse it for every epoch
    (:class:`CachedCollector`, an agent's, caches it).
    """

    def __init__(
        self,
        policy: CollectingPolicy,
        env: TradingEnv,
        replay: PrioritizedReplay | RolloutSink,
        *,
        learn: LearnConfig,
        n: int,
        steps: int,
        mode: StepMode = StepMode.AUTO,
        counterfactual: CounterfactualConfig | None = None,
    ) -> None:
        if steps < 1:
            raise ValueError(f"a collection needs at least one step, got {steps}")
        self.policy, self.env, self.replay, self.learn = policy, env, replay, learn
        self.n, self.steps = n, steps
        dev = replay.device
        self.compile, self.graphed = _resolve(mode, dev, n)
        self.advance = compiled_advance() if self.compile else advance
        if mode is StepMode.FUSED:
            from foxhunt.env.fused import fused_advance  # imports Triton: only where asked for

            self.advance = fused_advance
        self.stage = stage
        if self.compile:
            policy.compile()  # the exploring forward too: at these batches its elementwise kernels bound it
        elif mode is StepMode.FUSED and n >= COMPILE_MIN_BATCH:
            policy.compile(CompileScope.DECISION)  # the whole exploring decision, one compiled function
            self.stage = compiled_stage()  # and the staging arithmetic: a few kernels instead of ~20
        self.tf32 = dev.type == "cuda"  # the exploring forward's matmuls (tf32_matmuls)
        width = STATE_LAYOUT.width
        a_width = len(AUX_TARGETS)
        self.states = torch.zeros(steps + 1, n, width, dtype=torch.float32, device=dev)  # s_0 .. s_T
        self.obs = torch.zeros(n, width, dtype=torch.float32, device=dev)  # the policy's input
        self.actions = torch.zeros(steps, n, len(BRANCHES), dtype=torch.int64, device=dev)
        self.rewards = torch.zeros(steps, n, dtype=torch.float32, device=dev)
        self.dones = torch.zeros(steps, n, dtype=torch.bool, device=dev)
        self.aux = torch.zeros(steps, n, a_width, dtype=torch.float32, device=dev)
        self.valid = torch.zeros(steps, n, dtype=torch.bool, device=dev)
        self.t = torch.zeros(1, dtype=torch.int64, device=dev)  # the step counter (index of slot t)
        self.no_aux = torch.full((n, a_width), float("nan"), dtype=torch.float32, device=dev)
        f64 = torch.float64
        # reward sum, sum of squares, live steps, |shaping terms|, |all terms|
        self.sums = torch.zeros(5, dtype=f64, device=dev)
        self.graph: torch.cuda.CUDAGraph | None = None
        self._captured_key: Hashable | None = None
        self._compiled = False  # the compiled step has run once (compiled without a graph)
        self.compile_seconds = 0.0  # warm-up (compilation) and capture, summed over captures
        reset_in_place(env, torch.zeros(n, dtype=torch.int64, device=dev))
        # The counterfactual execution targets (agent.counterfactual): the replay has their column; an
        # on-policy rollout sink takes them with the rollout (its windows are ``learn``'s, as the
        # on-policy learner passes them).
        self.cf: CounterfactualStage | None = None
        if isinstance(replay, PrioritizedReplay):
            if CF in replay.fields:
                if counterfactual is None:
                    raise ValueError(f"the replay has a '{CF}' column: pass the counterfactual config")
                self.cf = CounterfactualStage(env, counterfactual, learn, steps, n)
        elif counterfactual is not None and counterfactual.weight > 0:
            self.cf = CounterfactualStage(env, counterfactual, learn, steps, n)

    # --- the step ------------------------------------------------------------------------------

    def _step(self) -> None:
        """One step of every episode: policy, env transition in place, staging (no host read)."""
        env = self.env
        state = env._state()
        with tf32_matmuls() if self.tf32 else nullcontext():
            pol = self.policy(self.obs)
        assert env.aux is not None
        env.aux.copy_(pol.aux)  # seen in the next state: a one-step lag (PolicyOut.step)
        if self.cf is not None:  # the state the action is taken from, before advance writes over it
            sizing = (pol.direction_conviction, pol.magnitude_conviction, pol.q_variance)
            self.cf.record(self.t, state, sizing)
        res, nxt = self.advance(  # no trade ledger: collection reads none of it (StepResult.lean)
            env,
            state,
            pol.actions,
            True,
            pol.direction_conviction,
            pol.magnitude_conviction,
            pol.q_variance,
            ledger=False,
        )
        acted, reward, done, aux, sums = self.stage(
            pol.actions,
            res.written,
            res.realised_direction,
            res.realised_magnitude,
            res.reward,
            res.components,
            state.done,
            state.row,
            env.market.aux_targets,
            self.no_aux,
        )
        t = self.t
        self.states.index_copy_(0, t + 1, nxt.unsqueeze(0))
        self.actions.index_copy_(0, t, acted.unsqueeze(0))
        self.rewards.index_copy_(0, t, reward.unsqueeze(0))
        self.dones.index_copy_(0, t, done.unsqueeze(0))
        self.aux.index_copy_(0, t, aux.unsqueeze(0))
        self.valid.index_copy_(0, t, res.written.unsqueeze(0))
        self.sums += sums
        self.obs.copy_(nxt)
        t += 1

    # --- capture ----------------------------------------------------------------------------------

    def _mutable(self) -> list[Tensor]:
        """Every tensor a step changes that must survive a warm-up step unchanged."""
        env = self.env
        out = env._state().tensors()
        assert env.aux is not None
        out += [env.aux, self.obs, self.t, self.sums, *self.policy.mutable()]
        return out

    def _capture(self) -> None:
        """Warm up (compile, lazy init) on a side stream, undo the warm-up, capture one step."""
        t0 = time.perf_counter()
        gen = self.policy.generator
        keep = [x.clone() for x in self._mutable()]
        gen_state = gen.get_state()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        for dst, src in zip(self._mutable(), keep, strict=True):
            dst.copy_(src)
        gen.set_state(gen_state)
        graph = torch.cuda.CUDAGraph()
        # The exploring draws come from the policy's own generator: a graph replays its random
        # kernels with the generator's current offset only when the generator is registered.
        graph.register_generator_state(gen)
        with torch.cuda.graph(graph):
            self._step()
        torch.cuda.synchronize()
        self.graph = graph
        self._captured_key = self.policy.capture_key()
        self.compile_seconds += time.perf_counter() - t0

    # --- one epoch -------------------------------------------------------------------------------

    def collect(self, starts: Tensor) -> dict[str, Tensor]:
        """Episodes from rows ``starts`` [n] (each ``episode_rows`` long, as the env config says) for
        ``steps`` steps into replay; the epoch's statistics (device tensors: ``train_sharpe``, the
        per-step Sharpe of the rewards; ``reward_mean``; ``bonus_share``, the shaping terms' share of
        |reward|)."""
        steps = self.steps
        obs = reset_in_place(self.env, starts)  # episodes of the env config's episode_rows
        self.obs.copy_(obs)
        self.states[0].copy_(obs)
        self.t.zero_()
        self.sums.zero_()
        if self.graphed and (self.graph is None or self._captured_key != self.policy.capture_key()):
            self._capture()
        for i in range(steps):
            if self.graph is not None:
                self.graph.replay()
            elif i == 0 and self.compile and not self._compiled:  # the first call compiles: time it
                t0 = time.perf_counter()
                self._step()
                self.compile_seconds += time.perf_counter() - t0
                self._compiled = True
            else:
                self._step()
        if isinstance(self.replay, PrioritizedReplay):
            self._write_replay()
        else:  # an on-policy learner's sink: the sequence as it is (its own returns, GAE)
            cf = None if self.cf is None else self.cf.entry_windows(self.actions, self.valid)
            self.replay.take(Rollout(self.states, self.actions, self.rewards, self.dones, self.valid, cf))
        return self._statistics()

    def _write_replay(self) -> None:
        learn, T, n = self.learn, self.steps, self.n
        after = self.states[1:]  # s_{t+1}: does a window that reaches it end there?
        if learn.bootstrap is Bootstrap.DECISION:
            stop = decision_state(after.reshape(T * n, -1)).view(T, n)
        else:
            stop = torch.zeros(T, n, dtype=torch.bool, device=self.states.device)
        ret, discount, m = nstep_windows(self.rewards, self.dones, stop, learn.gamma, learn.n_step)
        t = torch.arange(T, device=m.device).unsqueeze(1)
        envs = torch.arange(n, device=m.device)
        extra = {} if self.cf is None else {CF: self.cf.windows(self.actions, self.valid)}
        self.replay.add(
            {
                **extra,
                "state": self.states[:T].reshape(T * n, -1),
                "action": self.actions.reshape(T * n, -1),
                "reward": ret.reshape(-1),
                "discount": discount.reshape(-1),
                "next_state": self.states[t + m, envs].reshape(T * n, -1),  # s_{t+m}
                "aux": self.aux.reshape(T * n, -1),
                VALID: self.valid.reshape(-1),
            }
        )

    def _statistics(self) -> dict[str, Tensor]:
        reward_sum, sq_sum, live_sum, bonus_abs, total_abs = self.sums.unbind()
        mean = reward_sum / live_sum.clamp(min=1)
        std = (sq_sum / live_sum.clamp(min=1) - mean * mean).clamp(min=0).sqrt()
        sharpe = sharpe_ratio(mean, std, live_sum)  # one pass: std = sqrt(E[r^2] - mean^2)
        share = torch.where(
            total_abs > 0, bonus_abs / total_abs.clamp(min=1e-12), torch.zeros_like(total_abs)
        )
        return {"train_sharpe": sharpe, "reward_mean": mean, "bonus_share": share}

    @property
    def last_obs(self) -> Tensor:
        """The state after the epoch's last step ``[n, W]`` (a view of the staging buffer)."""
        return self.states[self.steps]


class CachedCollector:
    """An agent's collection (``Agent.collect``, ``PPOAgent.collect``): the :class:`Collector` of
    ``explore()`` (the agent's sampling policy) into ``sink`` (the replay, or an on-policy learner's
    rollout store), built once per (market, env config, batch shape, steps, step mode) and reused: on
    CUDA its captured graph and compiled step serve every epoch of the fold, on the CPU eager. After
    each collection the epoch's Sharpe and shaping share feed ``signals``. ``learn`` is the learner's
    windows, or a function of the env that gives them (PPO's counterfactual windows reach its longest
    entry)."""

    def __init__(
        self,
        explore: Callable[[], CollectingPolicy],
        sink: PrioritizedReplay | RolloutSink,
        signals: Signals,
        *,
        learn: LearnConfig | Callable[[TradingEnv], LearnConfig],
        counterfactual: CounterfactualConfig | None = None,
    ) -> None:
        self.explore, self.sink, self.signals = explore, sink, signals
        self.learn, self.counterfactual = learn, counterfactual
        self.collector: Collector | None = None  # the one built last (bench/epoch.py reads its timings)
        self._key: tuple | None = None

    def collect(
        self, market: MarketTensors, env_cfg: EnvConfig, starts: Tensor, steps: int, mode: StepMode
    ) -> dict[str, Tensor]:
        """``steps`` steps of episodes from rows ``starts`` [N]; the epoch's statistics on the device."""
        n = int(starts.shape[0])
        key = (id(market), id(env_cfg), n, steps, mode)
        if self.collector is None or self._key != key:
            env = TradingEnv(market, env_cfg)
            self.collector = Collector(
                self.explore(),
                env,
                self.sink,
                learn=self.learn(env) if callable(self.learn) else self.learn,
                n=n,
                steps=steps,
                mode=mode,
                counterfactual=self.counterfactual,
            )
            self._key = key
        stats = self.collector.collect(starts)
        self.signals.ema("sharpe", stats["train_sharpe"].float())
        self.signals.ema("bonus_share", stats["bonus_share"].float())  # the shaping terms' share
        return stats
