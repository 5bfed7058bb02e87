"""The agent: network, learner, replay and exploration behind a pure ``policy`` (docs/design.md §6).

``policy(states, mode)`` maps ``[N, W]`` states to the four branch actions plus what the
environment's sizing needs (direction and magnitude convictions, Q-variance) and the auxiliary
heads' predictions, which the caller writes into the environment's aux slots before stepping, so
they appear in the *next* state (a one-step lag, identical in training and evaluation:
:meth:`PolicyOut.step`); with the aux loss off (``agent.loss.aux = 0``) the slots get zeros, the
value the environment starts them at: an untrained head's output would be noise fed into the state.
``Mode.GREEDY`` is the evaluation policy: argmax of the trained heads' E[Q] per branch
(:meth:`QNetwork.expected_q`: (E_C51 + E_IQN) / 2, or the one head whose loss is on) with the noisy
layers at their means and no exploration. ``Mode.EXPLORE`` adds, each with
its coefficient (0 = off): a count bonus, Boltzmann sampling with a temperature floor, Thompson
sampling for the direction branch, and per-branch epsilon-greedy. (There is no Q-mean centering:
removing a branch's mean Q shifts all its actions equally, so no choice above could change.)
With ``agent.act.entry_margin = m > 0`` (off by default) both modes first lower the direction's
Short and Long E[Q] by m running gaps (the ``q_gap`` signal), so a trade must beat Hold and Flat by
that margin; the sizing's conviction still reads the unlowered gap.

Conviction (the sizing's ``q_gap`` input, clamped there to ``[conviction_min, 1]``) is the gap
between a branch's best and second-best E[Q] over twice its running mean (the ``q_gap`` signal),
so a typical decision sizes at one half and a decisive one at full. The Q-variance is the variance
of the chosen direction's C51 distribution in units of the running ``|Q|`` reference squared; with
the C51 loss off, that of its de-normalised IQN quantiles. With both on it stays C51's: a distribution
over the whole support, where the IQN head's few fixed fractions miss the tails (the default five
carry 0.77 of a normal's variance).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch
from torch import Tensor

from foxhunt import seeding
from foxhunt.agent import explore as ex
from foxhunt.agent.collect import Collector, StepMode
from foxhunt.agent.config import AgentConfig, Bootstrap
from foxhunt.agent.graph import GraphedLearn
from foxhunt.agent.learner import Batch, Learner, plan_locked
from foxhunt.agent.network import NetOut, QNetwork
from foxhunt.agent.replay import NStep, PrioritizedReplay, transition_fields
from foxhunt.agent.signals import Signals
from foxhunt.agent.stats import q_key
from foxhunt.domain.actions import BRANCHES, ActionCodec, BranchConfig, Direction
from foxhunt.env.config import EnvConfig
from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.graph import CapturablePolicy
from foxhunt.env.market import AUX_TARGETS, MarketTensors
from foxhunt.features.layout import STATE_LAYOUT

_DIRECTION, _MAGNITUDE = BRANCHES.index("direction"), BRANCHES.index("magnitude")

POLICY_ENTRIES = ("network", "popart", "signals")
"""The entries of :meth:`Agent.policy_state_dict`: what a trained policy acts with."""

AUX_RETURN_BOUND = 4.0
"""Soft bound (per-row vols) of the next-return prediction written into the next state's
``aux.next_return`` slot: ``b tanh(x / b)``. The slot feeds the network's own output back as an
input, and unbounded that loop can run away: a prediction out of the training range gives an input
out of range, answered by a larger prediction, until the slot and the aux gradient overflow. The
targets have unit scale (|x| > 4 is rare), so the bound leaves them alone; tanh is odd, so the
long/short mirror of the slot still holds. The loss sees the raw output."""


class UpdateMode(StrEnum):
    """How ``Agent.learn`` runs the learner update."""

    AUTO = "auto"  # a replayed CUDA graph on CUDA, eager elsewhere
    EAGER = "eager"  # always eager (benchmarks compare the two)
    GRAPH = "graph"  # always the CUDA graph (CUDA only)


class Mode(StrEnum):
    EXPLORE = "explore"  # training collection
    GREEDY = "greedy"  # evaluation: argmax, no noise, no exploration


@dataclass
class PolicyOut:
    actions: Tensor  # [N, n_branches] int64
    direction_conviction: Tensor  # [N] q_gap for the sizing (clamped there)
    magnitude_conviction: Tensor  # [N]
    q_variance: Tensor  # [N]
    aux: Tensor  # [N, aux slots] float32: the aux heads' predictions for the next state
    q_gap: Tensor  # [] mean best-minus-second direction gap (feeds the q_gap signal)

    def step(self, env: TradingEnv) -> tuple[Tensor, StepResult]:
        """Write the aux predictions (seen in the next state: a one-step lag), then step the env."""
        env.aux = self.aux
        return env.step(self.actions, self.direction_conviction, self.magnitude_conviction, self.q_variance)


@contextmanager
def _eval_mode(net: torch.nn.Module):
    if not net.training:  # already evaluating (a served agent, foxhunt.serve.decide): eval() and the
        yield  # train(False) after it would be two passes over every module for nothing
        return
    was = net.training
    net.eval()
    try:
        yield
    finally:
        net.train(was)


class Agent:
    """One fold's agent on one device (a fresh one per fold: walk-forward folds are independent)."""

    def __init__(
        self,
        cfg: AgentConfig,
        branches: BranchConfig,
        *,
        device: torch.device | str = "cpu",
        seed: int = 0,
        replay_capacity: int | None = None,
    ) -> None:
        self.cfg = cfg
        self.branches = branches
        self.device = torch.device(device)
        self.gen = seeding.generator(seed, self.device)
        # The initial weights draw from torch's CPU generator (nn.Module initialisers take none):
        # seeded on a fork of it, so they depend on ``seed`` alone and the process's stream is left
        # as it was.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.net = QNetwork(cfg, branches).to(self.device)
            # Where the initialisation left that CPU stream. The learner draws its noisy layers'
            # noise from torch's process-wide generator of the device; the run loop continues that
            # stream from here (foxhunt.seeding.seed_process), so a fold's updates depend on ``seed``
            # alone.
            self.noise_rng_state = torch.get_rng_state()
        self.signals = Signals(cfg.network.experts, self.device)
        self.learner = Learner(self.net, cfg, self.signals)
        self.sizes = ActionCodec(branches).sizes
        self.counts = [torch.zeros(n, device=self.device) for n in self.sizes]
        self.replay = PrioritizedReplay(
            replay_capacity or cfg.replay.capacity,
            transition_fields(STATE_LAYOUT.width, len(self.sizes), len(AUX_TARGETS)),
            alpha=cfg.replay.alpha,
            beta=cfg.replay.beta,
            eps=cfg.replay.eps,
            device=self.device,
        )
        self.taus = torch.tensor(cfg.network.quantiles, dtype=torch.float32, device=self.device)
        self.temperature_boost = 1.0  # plateau response multiplies the Boltzmann temperature
        self.update_mode = UpdateMode.AUTO
        self._graph: GraphedLearn | None = None  # CUDA: the captured learner step
        self.step_mode = StepMode.AUTO  # how collection runs its step (agent.collect)
        self._collector: Collector | None = None
        self._collector_key: tuple | None = None
        self._greedy: CapturablePolicy | None = None
        self._values_fn = self._values  # torch.compile-d by compile_policy
        self.policy_compiled = False
        # [A] the entry margin (agent.act.entry_margin, in running direction gaps) on Short and Long,
        # 0 on Hold and Flat: subtracted from the direction's E[Q] before any choice.
        self.entry_penalty = torch.zeros(self.sizes[_DIRECTION], device=self.device)
        self.entry_penalty[[Direction.SHORT, Direction.LONG]] = cfg.act.entry_margin

    # --- acting ---------------------------------------------------------------------------

    def _values(self, states: Tensor) -> tuple[NetOut, tuple[Tensor, ...]]:
        """The network's outputs for ``states`` and each branch's E[Q] ``[N, A]`` in reward units: the
        pure, deterministic head of :meth:`policy` (no draws), what :meth:`compile_policy` compiles."""
        out = self.net(states)
        return out, self.net.expected_q(out, self.learner.popart.denormalise)

    def compile_policy(self, backend: str = "inductor") -> None:
        """``torch.compile`` the policy's network forward and E[Q] (:meth:`_values`). Replayed as a CUDA
        graph, the eager forward of a large batch is bound by its ~300 unfused elementwise kernels,
        not its matmuls (``bench/policy_kernels.py``); Inductor fuses them. The noise and exploration
        draws stay eager (they take the agent's generator). Training collection calls it where it
        compiles the env step (``foxhunt.agent.collect``). Only the exploring mode takes it: greedy
        calls (validation, backtests, serving) stay eager, one compile fewer per process. Compile
        before a CUDA-graph capture: the first call compiles, the capture must not. ``backend``:
        Inductor; the CPU tests also trace it with ``"eager"`` (the same graph, no code generated)."""
        if not self.policy_compiled:
            self._values_fn = torch.compile(self._values, fullgraph=True, dynamic=False, backend=backend)
            self.policy_compiled = True

    @torch.no_grad()
    def policy(self, states: Tensor, mode: Mode) -> PolicyOut:
        """Branch actions, sizing inputs and aux predictions for ``states`` ``[N, W]``."""
        net, e = self.net, self.cfg.explore
        if mode is Mode.GREEDY:  # eager: a backtest's batches are small, their graph launch-bound
            out, qs = self.greedy_values(states)
        else:
            net.reset_noise(self.gen)
            out, qs = self._values_fn(states)
        z = net.support()  # qs: per branch [N, A], real units
        actions = []
        for i, q in enumerate(self.acting_q(qs)):
            if mode is Mode.GREEDY:
                actions.append(ex.greedy(q))
                continue
            q = ex.count_bonus(q, self.counts[i], e.count_bonus)
            if e.temperature > 0:
                scale = self.signals["q_abs"].clamp(min=1e-6)
                a = ex.boltzmann(
                    q / scale, e.temperature * self.temperature_boost, e.temperature_floor, self.gen
                )
            else:
                a = ex.greedy(q)
            if i == _DIRECTION and e.thompson > 0:
                b = out.branches[i]
                a = ex.thompson_direction(  # draws from the trained heads only (TrainedHeads)
                    torch.softmax(b.logits, -1) if net.trained.c51[i] else None,
                    z,
                    self.learner.popart.denormalise(b.quantiles) if net.trained.iqn[i] else None,
                    self.taus,
                    e.thompson,
                    self.gen,
                    fallback_B=a,  # the share not sampled keeps its Boltzmann / count-bonus choice
                )
            a = ex.epsilon_greedy(a, q.shape[1], e.epsilon, self.gen)
            # index_add_ rather than bincount: bincount syncs with the host to size its output.
            self.counts[i].index_add_(0, a, torch.ones_like(a, dtype=self.counts[i].dtype))
            actions.append(a)
        return self.decision(out, qs, torch.stack(actions, dim=1))

    def greedy_values(self, states: Tensor) -> tuple[NetOut, tuple[Tensor, ...]]:
        """The network's outputs and each branch's E[Q] ``[N, A]`` (real units) as :attr:`Mode.GREEDY`
        sees them: noisy layers at their means, no draws (what a committee of agents averages)."""
        with _eval_mode(self.net):
            return self._values(states)

    def acting_q(self, qs: tuple[Tensor, ...]) -> list[Tensor]:
        """The E[Q] a choice is made on: the direction's Short and Long lowered by the entry margin
        (``agent.act.entry_margin`` running direction gaps), the other branches as they are."""
        if self.cfg.act.entry_margin <= 0:
            return list(qs)
        margin = self.entry_penalty * self.signals["q_gap"]
        return [q - margin if i == _DIRECTION else q for i, q in enumerate(qs)]

    def decision(self, out: NetOut, qs: tuple[Tensor, ...], acts: Tensor) -> PolicyOut:
        """The decision for the chosen ``acts`` ``[N, branches]``: the convictions (each branch's
        best-minus-second E[Q] gap in ``qs`` over twice the running gap), the Q-variance of the chosen
        direction's return distribution and the aux predictions, from the network's ``out``."""
        net = self.net
        z = net.support()
        states_n = acts.shape[0]
        gap_ref = 2.0 * self.signals["q_gap"].clamp(min=1e-6)
        d_gap = _top2_gap(qs[_DIRECTION])
        m_gap = _top2_gap(qs[_MAGNITUDE]) if qs[_MAGNITUDE].shape[1] > 1 else torch.ones_like(d_gap) * gap_ref
        rows = torch.arange(states_n, device=acts.device)
        direction = out.branches[_DIRECTION]
        if net.trained.c51[_DIRECTION]:  # the C51 distribution's variance (both heads on, or C51 alone)
            p_dir = torch.softmax(direction.logits, -1)[rows, acts[:, _DIRECTION]]
            mean = (p_dir * z).sum(-1)
            var = (p_dir * (z - mean[:, None]).pow(2)).sum(-1)
        else:  # C51 untrained: the variance of the de-normalised IQN quantiles, equal weights
            var = self.learner.popart.denormalise(direction.quantiles[rows, acts[:, _DIRECTION]]).var(
                -1, correction=0
            )
        q_var = var / self.signals["q_abs"].clamp(min=1e-6).pow(2)
        if net.trained.aux:
            p_up = torch.softmax(out.aux_direction, -1)[:, 1]
            ret = AUX_RETURN_BOUND * torch.tanh(out.aux_return / AUX_RETURN_BOUND)  # bounded: the constant
            aux = torch.cat(
                [ret[:, None], (2.0 * p_up - 1.0)[:, None], torch.softmax(out.aux_outcome, -1)], dim=1
            )
        else:  # aux loss off: the untrained heads' outputs would be noise in the next state; 0 is none
            aux = torch.zeros(states_n, STATE_LAYOUT.group("aux").width, device=acts.device)
        return PolicyOut(
            actions=acts,
            direction_conviction=d_gap / gap_ref,
            magnitude_conviction=m_gap / gap_ref,
            q_variance=q_var,
            aux=aux.float(),
            q_gap=d_gap.mean(),
        )

    def greedy_policy(self) -> CapturablePolicy:
        """The evaluation policy as a backtest policy ``(state, env) -> PolicyOut``, marked capturable:
        on CUDA :func:`~foxhunt.backtest.evaluate.evaluate` replays it with the env step as one CUDA
        graph per window shape, captured once and reused by every epoch's validation."""
        if self._greedy is None:
            self._greedy = CapturablePolicy(lambda obs, env: self.policy(obs, Mode.GREEDY))
        return self._greedy

    @torch.no_grad()
    def expected_q(self, states: Tensor) -> tuple[Tensor, ...]:
        """Per branch ``[N, A]`` E[Q] of the greedy network (noisy layers at their means) in real units
        (PopArt de-normalised): what :attr:`Mode.GREEDY` takes the argmax of."""
        with _eval_mode(self.net):
            return self.net.expected_q(self.net(states), self.learner.popart.denormalise)

    # --- state ------------------------------------------------------------------------------

    def policy_state_dict(self) -> dict[str, dict[str, Tensor]]:
        """What acting reads (:data:`POLICY_ENTRIES`): the network, PopArt (its statistics turn the
        network's normalised Q values into dollars) and the running signals that scale the conviction
        and Q-variance sizing inputs."""
        parts = (self.net.state_dict(), self.learner.popart.state_dict(), self.signals.state_dict())
        return dict(zip(POLICY_ENTRIES, parts, strict=True))

    def load_policy_state_dict(self, state: Mapping[str, Mapping[str, Tensor]]) -> None:
        """Load what :meth:`policy_state_dict` gave; the target network starts as the online one, as
        a fresh learner's does (acting never reads it)."""
        self.net.load_state_dict(state["network"])
        self.learner.target.load_state_dict(state["network"])
        self.learner.popart.load_state_dict(state["popart"])
        self.signals.load_state_dict(dict(state["signals"]))

    def training_state_dict(self) -> dict[str, Any]:
        """What a resumed fold continues from: the learner (online and target networks, PopArt,
        optimizer, schedule: :meth:`~foxhunt.agent.learner.Learner.state_dict`), the replay buffer,
        the visit counts per branch, the generator and the exploration temperature's boost."""
        return {
            "learner": self.learner.state_dict(),
            "replay": self.replay.state_dict(),
            "counts": dict(zip(BRANCHES, self.counts, strict=True)),
            "generator": self.gen.get_state(),
            "temperature_boost": self.temperature_boost,
        }

    def load_training_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load what :meth:`training_state_dict` gave (generator states are read on the CPU)."""
        self.learner.load_state_dict(_copied(state["learner"]))
        self.replay.load_state_dict(state["replay"])
        for name, counts in zip(BRANCHES, self.counts, strict=True):
            counts.copy_(state["counts"][name])
        self.gen.set_state(state["generator"].cpu())
        self.temperature_boost = float(state["temperature_boost"])

    def state_dict(self) -> dict[str, Any]:
        """``{"policy": policy_state_dict(), "training": training_state_dict()}``: the whole agent."""
        return {"policy": self.policy_state_dict(), "training": self.training_state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load what :meth:`state_dict` gave: the agent continues exactly where that one stood (the
        policy's network and PopArt come back with the learner, which holds them too)."""
        self.load_training_state_dict(state["training"])
        self.signals.load_state_dict(dict(state["policy"]["signals"]))

    def load_weights(self, state: Mapping[str, Any]) -> None:
        """Load the learner of a :meth:`state_dict` (online and target networks, PopArt, optimizer,
        schedule), keeping the replay buffer, signals, visit counts and generator: the plateau
        ladder's rewind."""
        self.learner.load_state_dict(_copied(state["training"]["learner"]))

    # --- training controls ------------------------------------------------------------------

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The learner's optimizer (the plateau ladder resets its momentum and bumps its rate)."""
        return self.learner.opt

    def head_parameters(self) -> list[torch.nn.Parameter]:
        """The branch heads' parameters (value stream, then each advantage stream), in registration
        order: what the plateau ladder resets and perturbs."""
        return [*self.net.value.parameters(), *self.net.advantage.parameters()]

    def set_epoch(self, epoch: int) -> float:
        """Start epoch ``epoch`` of the learning-rate schedule; returns its learning rate."""
        return self.learner.set_epoch(epoch)

    def scale_lr(self, factor: float) -> None:
        """Multiply the learning-rate schedule by ``factor`` from the next :meth:`set_epoch` on (the
        plateau ladder bumps the current epoch's rate in the optimizer itself)."""
        self.learner.lr_scale *= factor

    # --- collection and learning ----------------------------------------------------------

    def nstep(self, n_envs: int) -> NStep:
        """The n-step accumulator of this agent's learn config for ``n_envs`` parallel episodes."""
        learn = self.cfg.learn
        stop = _decision_state if learn.bootstrap is Bootstrap.DECISION else None
        return NStep(n_envs, learn.n_step, learn.gamma, self.device, stop=stop)

    def collector(self, market: MarketTensors, env_cfg: EnvConfig, n_envs: int, steps: int) -> Collector:
        """The collection step for ``n_envs`` episodes of ``steps`` steps on ``market`` (built once, then
        reused: on CUDA its captured graph and compiled step serve every epoch of the fold)."""
        key = (id(market), id(env_cfg), n_envs, steps, self.step_mode)
        if self._collector is None or self._collector_key != key:
            env = TradingEnv(market, env_cfg)
            self._collector = Collector(self, env, n_envs, steps, self.step_mode)
            self._collector_key = key
        return self._collector

    def collect(
        self, market: MarketTensors, env_cfg: EnvConfig, starts: Tensor, steps: int
    ) -> dict[str, Tensor]:
        """``steps`` steps of the exploring policy in episodes starting at rows ``starts`` [N] (each
        ``env_cfg.episode_rows`` long; training sets ``steps + 1``) into
        replay (n-step windows, the epoch's tail truncated and bootstrapped); statistics on the device.

        The step (policy, env transition, staging) is :class:`~foxhunt.agent.collect.Collector`'s:
        on CUDA compiled and replayed as a CUDA graph (``step_mode``), on the CPU eager.
        """
        return self.collector(market, env_cfg, int(starts.shape[0]), steps).collect(starts)

    def learn(
        self, updates: int, batch_size: int, sink: Callable[[dict[str, Tensor]], None] | None = None
    ) -> None:
        """``updates`` learner steps from replay. ``sink`` receives each update's statistics (device
        tensors, valid until the next update: on CUDA the whole step, replay sampling and priority
        write included, is one replayed graph, :class:`~foxhunt.agent.graph.GraphedLearn`)."""
        if updates < 1:
            return
        graph = self.update_mode is UpdateMode.GRAPH or (
            self.update_mode is UpdateMode.AUTO and self.device.type == "cuda"
        )
        step: Callable[[], dict[str, Tensor]] = lambda: self.learn_step(batch_size)  # noqa: E731
        if graph:
            if self._graph is None or self._graph.batch_size != batch_size:
                self._graph = GraphedLearn(step, self.learner, batch_size, generators=[self.gen])
            step = self._graph.update
        for _ in range(updates):
            stats = step()
            if sink is not None:
                sink(stats)

    def learn_step(self, batch_size: int) -> dict[str, Tensor]:
        """One learner step on the device, no host read: draw a batch, update, write its priorities."""
        data, idx, weight = self.replay.sample(batch_size, self.gen)
        batch = Batch(weight=weight, **data)
        priority, stats = self.learner.update(batch)
        boost = self.cfg.replay.decision_boost
        if boost > 0:  # decisions are rare under a plan lock: draw them more often (ReplayConfig)
            free = _decision_state(batch.state)
            priority = priority * (1.0 + boost * free.to(priority.dtype))
        self.replay.update_priorities(idx, priority)
        self.signals.ema("q_abs", stats[q_key(BRANCHES[_DIRECTION], "spread")].abs() + 1e-3)
        return stats


def _copied(tree: Any) -> Any:
    """``tree`` with every tensor cloned. torch's ``Optimizer.load_state_dict`` keeps the given state
    tensors when they already have the right device and dtype, so an agent loading another live
    agent's state would otherwise share (and double-step) its Adam moments."""
    if isinstance(tree, Tensor):
        return tree.clone()
    if isinstance(tree, Mapping):
        return {k: _copied(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(_copied(v) for v in tree)
    return tree


def _decision_state(state_NW: Tensor) -> Tensor:
    """States where the direction acts again (no plan lock): where a ``Bootstrap.DECISION`` window ends."""
    return ~plan_locked(state_NW)


def _top2_gap(q_NA: Tensor) -> Tensor:
    top = torch.topk(q_NA, 2, dim=1).values
    return top[:, 0] - top[:, 1]
