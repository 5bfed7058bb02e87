"""The agent of ``agent.algo``: the one place that picks the learner (docs/ppo.md).

Training (:class:`foxhunt.train.run.FoldTrainer`) and the trained-policy readers
(:class:`foxhunt.policy.trained.CheckpointPolicy`) build their agent here; everything after reads the
public surface both agents share (collect, learn, start_epoch, the policy's greedy decision and
state, the checkpoint state).
"""

from __future__ import annotations

import torch

from foxhunt.agent.agent import Agent
from foxhunt.agent.config import AgentConfig, Algo
from foxhunt.agent.ppo import PPOAgent
from foxhunt.domain.actions import BranchConfig

AnyAgent = Agent | PPOAgent


def build_agent(
    cfg: AgentConfig,
    branches: BranchConfig,
    *,
    device: torch.device | str = "cpu",
    seed: int = 0,
    replay_capacity: int | None = None,
    epochs: int = 1,
) -> AnyAgent:
    """A fresh agent of ``cfg.algo``: :class:`~foxhunt.agent.agent.Agent` (DQN, its replay of
    ``replay_capacity``) or :class:`~foxhunt.agent.ppo.PPOAgent` (its learning rate annealed over
    ``epochs``)."""
    if cfg.algo is Algo.PPO:
        return PPOAgent(cfg, branches, device=device, seed=seed, epochs=epochs)
    return Agent(cfg, branches, device=device, seed=seed, replay_capacity=replay_capacity)
