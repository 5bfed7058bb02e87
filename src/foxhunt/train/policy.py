"""A trained checkpoint as a policy: what ``foxhunt backtest --checkpoint``, ``foxhunt serve``, the
API and the run's own report evaluate (the greedy evaluation policy of docs/design.md §6).

It reads only a checkpoint's ``policy`` section (:mod:`foxhunt.train.checkpoint`), so it imports the
checkpoint format and the agent but not the training loop: a backtest or a server loads a trained
policy without loading the code that trains one.
"""

from __future__ import annotations

from pathlib import Path

import torch

from foxhunt.agent.agent import Agent
from foxhunt.config.models import FoxhuntConfig
from foxhunt.env.graph import CapturablePolicy
from foxhunt.train.checkpoint import Fingerprint, checkpoint_config, load_checkpoint

_ACTING_REPLAY = 16
"""Replay capacity of an agent built to act: acting stores no transition, so the least that builds."""


class CheckpointPolicy:
    """A trained checkpoint as a backtest policy (greedy: argmax, no noise, no exploration)."""

    def __init__(self, path: str | Path, cfg: FoxhuntConfig) -> None:
        self.path = Path(path)
        # Tensors, fold, epoch and the header's config all checked before anything uses them.
        self.cfg, meta = checkpoint_config(self.path, cfg)
        self.fold = int(meta["fold"])
        self.epoch = int(meta["epoch"])
        self.value = f"checkpoint {self.path.name} (fold {self.fold}, epoch {self.epoch})"

    def agent(self, device: torch.device | str) -> Agent:
        """A fresh agent on ``device`` holding the checkpoint's policy (the acting state only)."""
        agent = Agent(self.cfg.agent, self.cfg.env.branches, device=device, replay_capacity=_ACTING_REPLAY)
        expect = Fingerprint.of(agent.policy_state_dict(), self.cfg.env.branches)
        agent.load_policy_state_dict(load_checkpoint(self.path, expect=expect, map_location=device).policy)
        return agent

    def policy(self, device: torch.device | str) -> CapturablePolicy:
        """The greedy policy ``(state, env) -> PolicyOut``: capturable, one CUDA graph per window shape
        on CUDA."""
        return self.agent(device).greedy_policy()
