"""The acting head: the network's E[Q] turned into a decision, greedy or exploring (docs/design.md §6).

The agent's policy, apart from its learner (as TorchRL's actor is apart from its loss module and its
collector): :class:`Actor` reads the network, PopArt (normalised Q back to reward units) and the
running signals, and learns nothing. ``actor(states, mode)`` maps ``[N, W]`` states to the four branch
actions plus what the environment's sizing needs (direction and magnitude convictions, Q-variance)
and the auxiliary heads' predictions, which the caller writes into the environment's aux slots before
stepping, so they appear in the *next* state (a one-step lag, identical in training and evaluation:
:meth:`PolicyOut.step`); with the aux loss off (``agent.loss.aux = 0``) the slots get zeros, the
value the environment starts them at: an untrained head's output would be noise fed into the state.

``Mode.GREEDY`` is the evaluation policy: argmax of the trained heads' E[Q] per branch
(:meth:`QNetwork.expected_q`: (E_C51 + E_IQN) / 2, or the one head whose loss is on) with the noisy
layers at their means and no exploration. ``Mode.EXPLORE`` runs, per branch, the ordered table of
exploration steps the config turns on (:func:`foxhunt.agent.explore.exploration`: a count bonus,
Boltzmann sampling with a temperature floor, Thompson sampling for the direction branch, and
per-branch epsilon-greedy). (There is no Q-mean centering: removing a branch's mean Q shifts all its
actions equally, so no choice above could change.) With ``agent.act.entry_margin = m > 0`` (off by
default) both modes first lower the direction's Short and Long E[Q] by m running gaps (the ``q_gap``
signal), so a trade must beat Hold and Flat by that margin; the sizing's conviction still reads the
unlowered gap.

Conviction (the sizing's ``q_gap`` input, clamped there to ``[conviction_min, 1]``) is the gap
between a branch's best and second-best E[Q] over twice its running mean (the ``q_gap`` signal),
so a typical decision sizes at one half and a decisive one at full. The Q-variance is the variance
of the chosen direction's C51 distribution in units of the running ``|Q|`` reference squared; with
the C51 loss off, that of its de-normalised IQN quantiles. With both on it stays C51's: a distribution
over the whole support, where the IQN head's few fixed fractions miss the tails (the default five
carry 0.77 of a normal's variance).

:class:`Exploring` is the exploring policy as training collection calls it
(:class:`~foxhunt.agent.collect.Collector`): one argument, the acting statistics fed to the signals,
and what a CUDA-graph capture of the step must know (the generator, the tensors it changes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import torch
from torch import Tensor

from foxhunt.agent import explore as ex
from foxhunt.agent.config import AgentConfig
from foxhunt.agent.network import NetOut, QNetwork
from foxhunt.agent.popart import PopArt
from foxhunt.agent.signals import Signals
from foxhunt.domain.actions import BRANCHES, ActionCodec, BranchConfig, Direction
from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.graph import CapturablePolicy
from foxhunt.features.layout import STATE_LAYOUT

_DIRECTION, _MAGNITUDE = BRANCHES.index("direction"), BRANCHES.index("magnitude")

POLICY_ENTRIES = ("network", "popart", "signals")
"""The entries of :meth:`Actor.state_dict`: what a trained policy acts with."""

AUX_RETURN_BOUND = 4.0
"""Soft bound (per-row vols) of the next-return prediction written into the next state's
``aux.next_return`` slot: ``b tanh(x / b)``. The slot feeds the network's own output back as an
input, and unbounded that loop can run away: a prediction out of the training range gives an input
out of range, answered by a larger prediction, until the slot and the aux gradient overflow. The
targets have unit scale (|x| > 4 is rare), so the bound leaves them alone; tanh is odd, so the
long/short mirror of the slot still holds. The loss sees the raw output."""


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


class Actor:
    """The acting head on one device: ``actor(states, mode) -> PolicyOut`` (module docstring).

    Holds references to the network, PopArt and the signals (the learner updates them in place, so
    the actor always acts with the current ones), and the exploration state: the visit counts per
    branch, the generator its draws come from and the plateau ladder's temperature boost.
    """

    def __init__(
        self,
        net: QNetwork,
        popart: PopArt,
        signals: Signals,
        cfg: AgentConfig,
        branches: BranchConfig,
        generator: torch.Generator,
    ) -> None:
        self.net, self.popart, self.signals, self.cfg, self.gen = net, popart, signals, cfg, generator
        device = signals.device
        self.sizes = ActionCodec(branches).sizes
        self.counts = [torch.zeros(n, device=device) for n in self.sizes]
        self.taus = torch.tensor(cfg.network.quantiles, dtype=torch.float32, device=device)
        self.temperature_boost = 1.0  # plateau response multiplies the Boltzmann temperature
        self.exploration = tuple(ex.exploration(cfg.explore, name) for name in BRANCHES)
        self._greedy: CapturablePolicy | None = None
        self._values_fn = self._values  # torch.compile-d by compile
        self.compiled = False
        # [A] the entry margin (agent.act.entry_margin, in running direction gaps) on Short and Long,
        # 0 on Hold and Flat: subtracted from the direction's E[Q] before any choice.
        self.entry_penalty = torch.zeros(self.sizes[_DIRECTION], device=device)
        self.entry_penalty[[Direction.SHORT, Direction.LONG]] = cfg.act.entry_margin
        # agent.curriculum: which branches are held (set per epoch by hold, in place, so a captured
        # graph reads the current mask) and the default choice they are held at.
        self.curriculum = cfg.curriculum if cfg.curriculum.on else None
        self.held = torch.zeros(len(self.sizes), dtype=torch.bool, device=device)
        self.held_at = torch.tensor([0, self.sizes[_MAGNITUDE] - 1, 0, 0], device=device)

    @torch.no_grad()
    def __call__(self, states: Tensor, mode: Mode) -> PolicyOut:
        """Branch actions, sizing inputs and aux predictions for ``states`` ``[N, W]``."""
        if mode is Mode.EXPLORE:
            self.net.reset_noise(self.gen)
            return self.explore(states, self.gen)
        out, qs = self.greedy_values(states)  # eager: a backtest's batches are small, launch-bound
        acts = torch.stack([ex.greedy(q) for q in self.acting_q(qs)], dim=1)  # qs: per branch [N, A]
        if self.curriculum is not None:  # the held branches at their default choice (agent.curriculum)
            acts = torch.where(self.held, self.held_at, acts)
        return self.decision(out, qs, acts)

    def explore(self, states: Tensor, draws: torch.Generator | ex.Dice) -> PolicyOut:
        """:attr:`Mode.EXPLORE`'s decision once the noisy layers have their noise, the exploration steps'
        random numbers from ``draws``: the actor's generator, or a :class:`~foxhunt.agent.explore.Dice`
        (:class:`CompiledExploring` compiles this on numbers drawn before)."""
        out, qs = self._values_fn(states)
        z = self.net.support()  # qs: per branch [N, A], real units
        acting = self.acting_q(qs)
        acts = torch.stack([self._explore(i, q, out, z, draws) for i, q in enumerate(acting)], dim=1)
        if self.curriculum is not None:  # the held branches at their default choice (agent.curriculum)
            acts = torch.where(self.held, self.held_at, acts)
        return self.decision(out, qs, acts)

    def hold(self, epoch: int) -> None:
        """The curriculum's mask at fold epoch ``epoch`` (``agent.curriculum``; in place)."""
        self.held.copy_(torch.tensor(self.cfg.curriculum.held(epoch), device=self.held.device))

    def _explore(self, i: int, q: Tensor, out: NetOut, z: Tensor, draws: torch.Generator | ex.Dice) -> Tensor:
        """Branch ``i``'s exploring choice: its table of exploration steps (:mod:`foxhunt.agent.explore`)
        on its acting E[Q] ``q``, then the choice counted in its visit counts."""
        head, trained = out.branches[i], self.net.trained
        ctx = ex.Context(
            counts=self.counts[i],
            q_abs=self.signals["q_abs"],
            temperature_boost=self.temperature_boost,
            generator=draws,
            probs=lambda: torch.softmax(head.logits, -1) if trained.c51[i] else None,
            z=z,
            quantiles=lambda: self.popart.denormalise(head.quantiles) if trained.iqn[i] else None,
            taus=self.taus,
        )
        draw = ex.Draw(q, None)
        for step in self.exploration[i]:
            draw = step(draw, ctx)
        a = draw.chosen()
        # index_add_ rather than bincount: bincount syncs with the host to size its output.
        self.counts[i].index_add_(0, a, torch.ones_like(a, dtype=self.counts[i].dtype))
        return a

    def _values(self, states: Tensor) -> tuple[NetOut, tuple[Tensor, ...]]:
        """The network's outputs for ``states`` and each branch's E[Q] ``[N, A]`` in reward units: the
        pure, deterministic head of the policy (no draws), what :meth:`compile` compiles."""
        out = self.net(states)
        return out, self.net.expected_q(out, self.popart.denormalise)

    def compile(self, backend: str = "inductor") -> None:
        """``torch.compile`` the policy's network forward and E[Q] (:meth:`_values`). Replayed as a CUDA
        graph, the eager forward of a large batch is bound by its ~300 unfused elementwise kernels,
        not its matmuls (``bench/policy_kernels.py``); Inductor fuses them. The noise and exploration
        draws stay eager (they take the actor's generator). Training collection calls it where it
        compiles the env step (``foxhunt.agent.collect``). Only the exploring mode takes it: greedy
        calls (validation, backtests, serving) stay eager, one compile fewer per process. Compile
        before a CUDA-graph capture: the first call compiles, the capture must not. ``backend``:
        Inductor; the CPU tests also trace it with ``"eager"`` (the same graph, no code generated)."""
        if not self.compiled:
            self._values_fn = torch.compile(self._values, fullgraph=True, dynamic=False, backend=backend)
            self.compiled = True

    def greedy_values(self, states: Tensor) -> tuple[NetOut, tuple[Tensor, ...]]:
        """The network's outputs and each branch's E[Q] ``[N, A]`` (real units) as :attr:`Mode.GREEDY`
        sees them: noisy layers at their means, no draws (what a committee of agents averages)."""
        with _eval_mode(self.net):
            return self._values(states)

    @torch.no_grad()
    def expected_q(self, states: Tensor) -> tuple[Tensor, ...]:
        """Per branch ``[N, A]`` E[Q] of the greedy network (noisy layers at their means) in real units
        (PopArt de-normalised): what :attr:`Mode.GREEDY` takes the argmax of."""
        with _eval_mode(self.net):
            return self.net.expected_q(self.net(states), self.popart.denormalise)

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
            var = self.popart.denormalise(direction.quantiles[rows, acts[:, _DIRECTION]]).var(
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

    def greedy(self) -> CapturablePolicy:
        """The evaluation policy as a backtest policy ``(state, env) -> PolicyOut``, marked capturable:
        on CUDA :func:`~foxhunt.backtest.evaluate.evaluate` replays it with the env step as one CUDA
        graph per window shape, captured once and reused by every epoch's validation."""
        if self._greedy is None:
            self._greedy = CapturablePolicy(lambda obs, env: self(obs, Mode.GREEDY))
        return self._greedy

    def state_dict(self) -> dict[str, dict[str, Tensor]]:
        """What acting reads (:data:`POLICY_ENTRIES`): the network, PopArt (its statistics turn the
        network's normalised Q values into dollars) and the running signals that scale the conviction
        and Q-variance sizing inputs."""
        parts = (self.net.state_dict(), self.popart.state_dict(), self.signals.state_dict())
        return dict(zip(POLICY_ENTRIES, parts, strict=True))

    def load_state_dict(self, state: Mapping[str, Mapping[str, Tensor]]) -> None:
        """Load what :meth:`state_dict` gave, in place (the learner holds the same network and PopArt)."""
        self.net.load_state_dict(state["network"])
        self.popart.load_state_dict(state["popart"])
        self.signals.load_state_dict(dict(state["signals"]))


class CompileScope(StrEnum):
    """What an exploring policy's ``compile`` compiles (collection picks it by step mode)."""

    FORWARD = "forward"  # the network's forward and E[Q] (Actor.compile); exploration stays eager
    DECISION = "decision"  # the whole exploring decision, its draws made before it (CompiledExploring)


class Exploring:
    """The exploring policy as :class:`~foxhunt.agent.collect.Collector` calls it: ``obs -> PolicyOut``,
    the decision's direction gap fed to the ``q_gap`` signal (acting statistics feed the signals in
    collection only), plus what a CUDA-graph capture of the step needs (:meth:`mutable`,
    :attr:`generator`, :meth:`capture_key`)."""

    def __init__(self, actor: Actor) -> None:
        self.actor = actor
        self.generator = actor.gen  # the draws' generator: a captured graph registers it
        self.lean: CompiledExploring | None = None  # compile(CompileScope.DECISION)

    def __call__(self, obs: Tensor) -> PolicyOut:
        pol = self.actor(obs, Mode.EXPLORE) if self.lean is None else self.lean(obs)
        self.actor.signals.ema("q_gap", pol.q_gap)
        return pol

    def mutable(self) -> list[Tensor]:
        """The tensors a call changes in place (the visit counts, the q_gap signal)."""
        return [*self.actor.counts, self.actor.signals["q_gap"]]

    def capture_key(self) -> float:
        """What a captured graph holds as a constant: the temperature boost (a Python float the plateau
        response changes). A graph captured under another key is captured again."""
        return self.actor.temperature_boost

    def compile(self, scope: CompileScope = CompileScope.FORWARD, backend: str = "inductor") -> None:
        """The forward and E[Q] compiled (:meth:`Actor.compile`), or the whole decision
        (:class:`CompiledExploring`)."""
        if scope is CompileScope.FORWARD:
            self.actor.compile(backend)
        elif self.lean is None:
            actor = self.actor
            self.lean = CompiledExploring(actor, lambda: actor.net.reset_noise(actor.gen), backend)


class CompiledExploring:
    """``decide(states) -> PolicyOut``: the exploring decision compiled whole, what collection acts with
    under ``StepMode.FUSED`` from :data:`~foxhunt.env.graph.COMPILE_MIN_BATCH` episodes.

    :meth:`Actor.compile` compiles the network's forward and E[Q] only: every network output is written
    out in full (each branch's C51 logits ``[N, A, K]``, IQN quantiles, gate, selection) and the
    exploration steps, sizing inputs and aux predictions run after it as a chain of small eager
    kernels, each reading those outputs again. This compiles ``actor.explore(states, draws)`` from the
    forward to the :class:`PolicyOut` in one ``torch.compile(fullgraph=True)``: Inductor computes only
    what the decision reads (PPO's value head is not computed; the gate, the selection weights and
    the heads' outputs are no longer written out whole) and fuses the exploration and sizing
    arithmetic into the forward's kernels.

    ``torch.compile`` cannot take a generator, so the random numbers come in as inputs: the first call
    at a batch shape runs the eager decision with a recording :class:`~foxhunt.agent.explore.Dice` (the
    plan: its draws' shapes and kinds, in order); each later call draws that plan from the actor's
    generator (the eager decision's ``torch.rand`` / ``torch.randint`` calls in its order: the same
    numbers) and hands them to the compiled function. ``noise`` runs first, eagerly (the DQN network's
    ``reset_noise``, whose draws precede the exploration's in the eager call too). So the choices are
    the eager decision's wherever the compiled E[Q] rounds alike (tests/agent/test_lean.py), and a
    captured collection step replays the draws from the registered generator as it does the eager
    ones. ``backend``: Inductor; the CPU tests also trace it with ``"eager"`` (the same graph, no code
    generated).
    """

    def __init__(
        self, actor: ExploringActor, noise: Callable[[], None] | None = None, backend: str = "inductor"
    ) -> None:
        self.actor, self.noise = actor, noise
        self.plans: dict[tuple[int, ...], list[ex.DrawSpec]] = {}
        self._compiled = torch.compile(self._decide, fullgraph=True, dynamic=False, backend=backend)

    def _decide(self, states: Tensor, drawn: list[Tensor]) -> tuple[Tensor, ...]:
        pol = self.actor.explore(states, ex.Dice(drawn=drawn))
        return (
            pol.actions,
            pol.direction_conviction,
            pol.magnitude_conviction,
            pol.q_variance,
            pol.aux,
            pol.q_gap,
        )

    @torch.no_grad()
    def __call__(self, states: Tensor) -> PolicyOut:
        if self.noise is not None:
            self.noise()
        key = tuple(states.shape)
        plan = self.plans.get(key)
        if plan is None:  # the first call at this shape: the eager decision, its draws recorded
            dice = ex.Dice(generator=self.actor.gen)
            pol = self.actor.explore(states, dice)
            self.plans[key] = dice.plan
            return pol
        drawn = [spec.draw(self.actor.gen, states.device) for spec in plan]
        return PolicyOut(*self._compiled(states, drawn))


class ExploringActor(Protocol):
    """An actor whose exploring decision takes its draws as an argument (:class:`Actor`, PPO's
    :class:`~foxhunt.agent.ppo.PPOActor`): what :class:`CompiledExploring` compiles."""

    gen: torch.Generator

    def explore(self, states: Tensor, draws: torch.Generator | ex.Dice) -> PolicyOut: ...


def _top2_gap(q_NA: Tensor) -> Tensor:
    """Best minus second-best of each row ``[N, A] -> [N]`` (0 where two actions tie for the best):
    ``topk(q, 2)``'s two values, written as two row maxima so that Inductor fuses them into the
    compiled decision (``topk`` stays a library kernel: two a step, 54 us of the 1.45 ms collection
    step at 16 k envs on an H100, docs/results/2026-12-07-h100-fused-engine-and-production.md)."""
    best = q_NA.amax(dim=1)  # [N]
    first = q_NA.argmax(dim=1, keepdim=True)  # one of the best (the first), removed once   [N, 1]
    second = q_NA.scatter(1, first, float("-inf")).amax(dim=1)  # [N]
    return best - second
