"""The agent: a bundle of the acting head, the learner, the replay and the collector (docs/design.md §6).

Split the TorchRL way: the policy (:class:`~foxhunt.agent.actor.Actor`: greedy, decision, the
exploration table, capturable) acts and learns nothing; the learner (:class:`~foxhunt.agent.learner.Learner`)
updates the network it shares with the policy; the collector
(:class:`~foxhunt.agent.collect.Collector`) steps the environment with a policy callable and writes
the replay. :class:`Agent` wires them for one fold and is what training drives, through its public
methods only: collect, learn, the epoch's schedule and the plateau ladder's handles, the state of a
checkpoint. Another learner (an on-policy one) brings its own policy and learner and reuses the
collector.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch
from torch import Tensor

from foxhunt import seeding
from foxhunt.agent.actor import Actor, Exploring
from foxhunt.agent.collect import CachedCollector, StepMode
from foxhunt.agent.config import AgentConfig, Bootstrap, LearnConfig
from foxhunt.agent.counterfactual import CF, cf_width
from foxhunt.agent.graph import GraphedLearn
from foxhunt.agent.learner import Batch, CounterfactualBatch, Learner, decision_state
from foxhunt.agent.network import QNetwork
from foxhunt.agent.replay import NStep, PrioritizedReplay, transition_fields
from foxhunt.agent.signals import Signals
from foxhunt.agent.stats import q_key
from foxhunt.domain.actions import BRANCHES, BranchConfig
from foxhunt.env.config import EnvConfig
from foxhunt.env.market import AUX_TARGETS, MarketTensors
from foxhunt.features.layout import STATE_LAYOUT

_DIRECTION = BRANCHES.index("direction")


class UpdateMode(StrEnum):
    """How ``Agent.learn`` runs the learner update."""

    AUTO = "auto"  # a replayed CUDA graph on CUDA, eager elsewhere
    EAGER = "eager"  # always eager (benchmarks compare the two)
    GRAPH = "graph"  # always the CUDA graph (CUDA only)


class Restore(StrEnum):
    """What :meth:`Agent.load_state_dict` loads of an :meth:`Agent.state_dict`."""

    ALL = "all"  # the whole agent: it continues exactly where that one stood (a resumed fold)
    WEIGHTS = "weights"  # the learner (networks, PopArt, optimizer, schedule): the plateau ladder's rewind
    POLICY = "policy"  # the acting state alone (a trained policy: ``{"policy": ...}`` suffices)


@dataclass(frozen=True)
class PlateauHandles:
    """What the plateau ladder (:class:`foxhunt.train.plateau.PlateauResponder`) acts on: the learner's
    optimizer (momentum reset, rate bump), the branch heads' parameters (value stream, then each
    advantage stream, in registration order: reset and perturbed) and the generator of its noise."""

    optimizer: torch.optim.Optimizer
    head_params: list[torch.nn.Parameter]
    generator: torch.Generator


def nstep(learn: LearnConfig, n_envs: int, device: torch.device) -> NStep:
    """The n-step accumulator of ``learn`` for ``n_envs`` parallel episodes (the step-by-step reference
    of the windows :class:`~foxhunt.agent.collect.Collector` computes at once)."""
    stop = decision_state if learn.bootstrap is Bootstrap.DECISION else None
    return NStep(n_envs, learn.n_step, learn.gamma, device, stop=stop)


class Agent:
    """One fold's agent on one device (a fresh one per fold: walk-forward folds are independent).

    Components: :attr:`policy` (the :class:`~foxhunt.agent.actor.Actor`: ``policy(states, mode)``),
    :attr:`learner`, :attr:`replay`, :attr:`gen` (the generator of exploration, noise and replay
    draws); :attr:`plateau` (the plateau ladder's handles); :attr:`noise_rng_state` (where the
    initialisation left torch's CPU stream, which the run loop continues)."""

    def __init__(
        self,
        cfg: AgentConfig,
        branches: BranchConfig,
        *,
        device: torch.device | str = "cpu",
        seed: int = 0,
        replay_capacity: int | None = None,
    ) -> None:
        self.cfg, self.branches = cfg, branches
        self.device = torch.device(device)
        self.gen = seeding.generator(seed, self.device)
        # The initial weights draw from torch's CPU generator (nn.Module initialisers take none):
        # seeded on a fork of it, so they depend on ``seed`` alone and the process's stream is left
        # as it was.
        with seeding.seeded_torch(seed):
            net = QNetwork(cfg, branches).to(self.device)
            # Where the initialisation left that CPU stream. The learner draws its noisy layers'
            # noise from torch's process-wide generator of the device; the run loop continues that
            # stream from here (foxhunt.seeding.seed_process), so a fold's updates depend on ``seed``
            # alone.
            self.noise_rng_state = torch.get_rng_state()
        signals = Signals(cfg.network.experts, self.device)
        self.learner = Learner(net, cfg, signals)
        self.policy = Actor(net, self.learner.popart, signals, cfg, branches, self.gen)
        fields = transition_fields(STATE_LAYOUT.width, len(self.policy.sizes), len(AUX_TARGETS))
        if cfg.counterfactual.weight > 0:  # the counterfactual execution deltas (agent.counterfactual)
            fields[CF] = ((cf_width(self.policy.sizes),), torch.float32)
        self.replay = PrioritizedReplay(
            replay_capacity or cfg.replay.capacity,
            fields,
            alpha=cfg.replay.alpha,
            beta=cfg.replay.beta,
            eps=cfg.replay.eps,
            device=self.device,
        )
        self.plateau = PlateauHandles(
            self.learner.opt, [*net.value.parameters(), *net.advantage.parameters()], self.gen
        )
        self.update_mode = UpdateMode.AUTO
        self.step_mode = StepMode.AUTO  # how collection runs its step (agent.collect)
        self._graph: GraphedLearn | None = None  # CUDA: the captured learner step
        self._collection = CachedCollector(
            lambda: Exploring(self.policy),
            self.replay,
            signals,
            learn=cfg.learn,
            counterfactual=cfg.counterfactual,
        )

    # --- collection and learning ----------------------------------------------------------

    def collect(
        self, market: MarketTensors, env_cfg: EnvConfig, starts: Tensor, steps: int
    ) -> dict[str, Tensor]:
        """``steps`` steps of the exploring policy in episodes starting at rows ``starts`` [N] (each
        ``env_cfg.episode_rows`` long; training sets ``steps + 1``) into
        replay (n-step windows, the epoch's tail truncated and bootstrapped); statistics on the device,
        the epoch's Sharpe and shaping share also fed to the signals.

        The step (policy, env transition, staging) is :class:`~foxhunt.agent.collect.Collector`'s, built
        once per (market, env config, batch shape) and reused: on CUDA its captured graph and compiled
        step serve every epoch of the fold (``step_mode``), on the CPU eager.
        """
        return self._collection.collect(market, env_cfg, starts, steps, self.step_mode)

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
        step: Callable[[], dict[str, Tensor]] = lambda: self._learn_step(batch_size)  # noqa: E731
        if graph:
            if self._graph is None or self._graph.batch_size != batch_size:
                self._graph = GraphedLearn(step, self.learner, batch_size, generators=[self.gen])
            step = self._graph.update
        for _ in range(updates):
            stats = step()
            if sink is not None:
                sink(stats)

    def _learn_step(self, batch_size: int) -> dict[str, Tensor]:
        """One learner step on the device, no host read: draw a batch, update, write its priorities."""
        data, idx, weight = self.replay.sample(batch_size, self.gen)
        batch = (CounterfactualBatch if CF in data else Batch)(weight=weight, **data)
        priority, stats = self.learner.update(batch)
        boost = self.cfg.replay.decision_boost
        if boost > 0:  # decisions are rare under a plan lock: draw them more often (ReplayConfig)
            free = decision_state(batch.state)
            priority = priority * (1.0 + boost * free.to(priority.dtype))
        self.replay.update_priorities(idx, priority)
        self.policy.signals.ema("q_abs", stats[q_key(BRANCHES[_DIRECTION], "spread")].abs() + 1e-3)
        return stats

    # --- training controls ------------------------------------------------------------------

    def start_epoch(self, epoch: int) -> float:
        """Start epoch ``epoch`` of the learning-rate schedule and of the branch curriculum
        (``agent.curriculum``); returns its learning rate."""
        self.policy.hold(epoch)
        return self.learner.set_epoch(epoch)

    def adjust(self, *, lr: float = 1.0, temperature: float = 1.0) -> None:
        """The plateau ladder's lasting responses: multiply the learning-rate schedule by ``lr`` from the
        next :meth:`start_epoch` on (the ladder bumps the current epoch's rate in the optimizer itself)
        and the exploration's Boltzmann temperature by ``temperature``."""
        self.learner.lr_scale *= lr
        self.policy.temperature_boost *= temperature

    def set_input_mask(self, mask: Tensor) -> None:
        """The input screen's mask (``agent.network.input_screen``) on the online and target networks
        (a checkpoint then carries it)."""
        for net in (self.policy.net, self.learner.target):
            net.input_mask.copy_(mask)

    def expert_utilisation(self) -> Tensor:
        """The running share of the batch each expert of the mixture takes (the signal, on the device)."""
        return self.policy.signals["expert_utilisation"]

    # --- state ------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """``{"policy": ..., "training": ...}``: what acting reads (the actor's
        :meth:`~foxhunt.agent.actor.Actor.state_dict`), and what a resumed fold continues from: the
        learner (online and target networks, PopArt, optimizer, schedule:
        :meth:`~foxhunt.agent.learner.Learner.state_dict`), the replay buffer, the visit counts per
        branch, the generator and the exploration temperature's boost. Tensors are the live ones."""
        training = {
            "learner": self.learner.state_dict(),
            "replay": self.replay.state_dict(),
            "counts": dict(zip(BRANCHES, self.policy.counts, strict=True)),
            "generator": self.gen.get_state(),
            "temperature_boost": self.policy.temperature_boost,
        }
        return {"policy": self.policy.state_dict(), "training": training}

    def load_state_dict(self, state: Mapping[str, Any], restore: Restore = Restore.ALL) -> None:
        """Load what :meth:`state_dict` gave, as much as ``restore`` says (:class:`Restore`; generator
        states are read on the CPU). ``ALL``: the agent continues exactly where that one stood (the
        policy's network and PopArt come back with the learner, which holds them too). ``WEIGHTS``:
        the learner alone, the replay buffer, signals, visit counts and generator kept. ``POLICY``:
        the acting state, the target network started as the online one, as a fresh learner's is
        (acting never reads it)."""
        if restore is Restore.POLICY:
            self.policy.load_state_dict(state["policy"])
            self.learner.target.load_state_dict(state["policy"]["network"])
            return
        training = state["training"]
        self.learner.load_state_dict(_copied(training["learner"]))
        if restore is Restore.WEIGHTS:
            return
        self.replay.load_state_dict(training["replay"])
        for name, counts in zip(BRANCHES, self.policy.counts, strict=True):
            counts.copy_(training["counts"][name])
        self.gen.set_state(training["generator"].cpu())
        self.policy.temperature_boost = float(training["temperature_boost"])
        self.policy.signals.load_state_dict(dict(state["policy"]["signals"]))


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
