"""A trained checkpoint as a policy: what ``foxhunt backtest --checkpoint``, ``foxhunt serve``, the
API and the run's own report evaluate (the greedy evaluation policy of docs/design.md §6).

It reads only a checkpoint's ``policy`` section (:mod:`foxhunt.policy.checkpoint`), so it imports the
checkpoint format and the agent but not the training loop: a backtest or a server loads a trained
policy without loading the code that trains one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from foxhunt.agent.agent import Restore
from foxhunt.agent.build import AnyAgent, build_agent
from foxhunt.agent.committee import committee_decision
from foxhunt.agent.config import AgentConfig
from foxhunt.env.config import EnvConfig
from foxhunt.env.graph import CapturablePolicy
from foxhunt.errors import FoxhuntError, door
from foxhunt.policy.checkpoint import Fingerprint, checkpoint_config, load_checkpoint


class RunRecord(Protocol):
    """What a trained policy reads of the run that trained it (a checkpoint's header config): the
    agent's and the environment's sections, and the market sections (:data:`MARKET_SECTIONS`) that
    committee members must share, compared by name."""

    @property
    def agent(self) -> AgentConfig: ...

    @property
    def env(self) -> EnvConfig: ...


_ACTING_REPLAY = 16
"""Replay capacity of an agent built to act: acting stores no transition, so the least that builds."""


class CheckpointPolicy:
    """A trained checkpoint as a backtest policy (greedy: argmax, no noise, no exploration)."""

    def __init__(self, path: str | Path, cfg: RunRecord) -> None:
        self.path = Path(path)
        # Tensors, fold, epoch and the header's config all checked before anything uses them.
        self.cfg, meta = checkpoint_config(self.path, cfg)
        self.fold = int(meta["fold"])
        self.epoch = int(meta["epoch"])
        self.value = f"checkpoint {self.path.name} (fold {self.fold}, epoch {self.epoch})"

    def agent(self, device: torch.device | str) -> AnyAgent:
        """A fresh agent on ``device`` holding the checkpoint's policy (the acting state only), of the
        learner its config names (``agent.algo``), with the branches ``agent.curriculum`` held at the
        checkpoint's epoch held (as training's validation of that epoch acted, and its committee votes:
        :mod:`foxhunt.agent.committee`)."""
        agent = build_agent(
            self.cfg.agent, self.cfg.env.branches, device=device, replay_capacity=_ACTING_REPLAY
        )
        expect = Fingerprint.of(agent.policy.state_dict(), self.cfg.env.branches)
        policy = load_checkpoint(self.path, expect=expect, map_location=device).policy
        agent.load_state_dict({"policy": policy}, Restore.POLICY)
        agent.policy.hold(self.epoch)
        return agent

    def policy(self, device: torch.device | str) -> CapturablePolicy:
        """The greedy policy ``(state, env) -> PolicyOut``: capturable, one CUDA graph per window shape
        on CUDA."""
        return self.agent(device).policy.greedy()


class CommitteePolicy:
    """Several trained checkpoints of one fold as one greedy policy: each branch's action is the
    argmax of the members' mean E[Q] (:mod:`foxhunt.agent.committee`). The members must have been
    trained on the same fold of one market (:data:`MARKET_SECTIONS`; different seeds or settings of
    the learner are what a committee is for); their stored normalisers, if any, must agree. One
    member is that checkpoint's :class:`CheckpointPolicy`, bit for bit."""

    def __init__(self, paths: Sequence[str | Path], cfg: RunRecord) -> None:
        if not paths:
            raise FoxhuntError(
                door("--checkpoint", "paths"), "no checkpoints for a committee", "pass one or more"
            )
        self.members = [CheckpointPolicy(p, cfg) for p in paths]
        first = self.members[0]
        for m in self.members[1:]:
            if m.fold != first.fold:
                raise FoxhuntError(
                    m.path,
                    f"trained on fold {m.fold}, {first.path} on fold {first.fold}",
                    "a committee judges one fold: pass checkpoints of one fold",
                )
            if m.cfg.agent.algo != first.cfg.agent.algo:
                raise FoxhuntError(
                    m.path,
                    f"made by agent.algo = {m.cfg.agent.algo.value}, {first.path} by "
                    f"{first.cfg.agent.algo.value}",
                    "a committee averages one learner's values: pass checkpoints of one agent.algo",
                )
            if differ := differing_market(m.cfg, first.cfg):
                raise FoxhuntError(
                    m.path,
                    f"its [{'], ['.join(differ)}] config differs from {first.path}'s",
                    "a committee votes on one market: pass checkpoints trained on the same data, features, "
                    "folds and environment",
                )
            if _normaliser(m.path) != _normaliser(first.path):
                raise FoxhuntError(
                    m.path,
                    f"its stored normaliser differs from {first.path}'s",
                    "export every member from the same feature cache",
                )
        self.cfg = first.cfg
        self.fold = first.fold
        self.epoch = first.epoch
        self.path = first.path  # its stored normaliser (if any) is every member's
        n = len(self.members)
        self.value = first.value if n == 1 else f"committee of {n} checkpoints (fold {self.fold})"

    def policy(self, device: torch.device | str) -> CapturablePolicy:
        """The committee's greedy policy ``(state, env) -> PolicyOut`` (capturable, as a member's)."""
        return committee_policy([m.agent(device) for m in self.members])


def committee_policy(agents: Sequence[AnyAgent]) -> CapturablePolicy:
    """The greedy policy ``(state, env) -> PolicyOut`` of ``agents`` voting as a committee
    (:func:`~foxhunt.agent.committee.committee_decision`), capturable."""
    actors = [a.policy for a in agents]
    return CapturablePolicy(lambda obs, env: committee_decision(actors, obs))


MARKET_SECTIONS = ("data", "instrument", "synth", "features", "labels", "folds", "env")
"""The config sections that make the market a checkpoint acts on: its rows, features, folds and
environment. Members of a committee share them; the learner's (``agent``, ``train``, ``run``) may differ."""


def differing_market(a: Any, b: Any) -> list[str]:
    """The :data:`MARKET_SECTIONS` in which ``a`` and ``b`` differ (empty: one market)."""
    return [name for name in MARKET_SECTIONS if getattr(a, name) != getattr(b, name)]


def _normaliser(path: Path) -> object:
    from foxhunt.policy.checkpoint import read_checkpoint_meta

    return read_checkpoint_meta(path).get("normaliser")
