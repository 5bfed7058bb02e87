"""Gymnasium wrappers: the single env passes check_env; the vector env steps and autoresets."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium.utils.env_checker import check_env

from foxhunt.env.gym import FoxhuntEnv, FoxhuntVectorEnv
from foxhunt.features.layout import STATE_LAYOUT
from tests.env.test_core import config, market

MID = [100.0 + 0.25 * ((i * 5) % 9) for i in range(300)]


def test_single_env_passes_check_env() -> None:
    env = FoxhuntEnv(market(MID), config(horizon=4).model_copy(update={"episode_rows": 20}), 0, 300)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert obs.shape == (STATE_LAYOUT.width,) and env.observation_space.contains(obs)
    total, steps = 0.0, 0
    while True:
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        total += reward
        steps += 1
        if terminated or truncated:
            break
    assert steps == 19 and np.isfinite(total)


def test_vector_env_steps_and_autoresets() -> None:
    cfg = config(horizon=4).model_copy(update={"episode_rows": 10})
    venv = FoxhuntVectorEnv(market(MID), cfg, 0, 300, num_envs=6, seed=1)
    obs, _ = venv.reset(seed=2)
    assert obs.shape == (6, STATE_LAYOUT.width)
    dones = 0
    for _ in range(30):
        obs, rew, term, trunc, _ = venv.step(venv.action_space.sample())
        assert obs.shape == (6, STATE_LAYOUT.width) and rew.shape == (6,) and np.isfinite(rew).all()
        dones += int((term | trunc).sum())
    assert dones >= 12  # every 9 steps each episode ends and restarts
    assert not venv._env.state.done.all() or torch.any(venv._restart)
