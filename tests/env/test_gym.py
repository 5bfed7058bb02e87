"""Gymnasium wrappers: the single env passes check_env; the vector env steps and autoresets as it
declares (next step); both are made by id through Gymnasium's registry."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import torch
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

from foxhunt.env.core import TradingEnv
from foxhunt.env.gym import ENV_ID, FoxhuntEnv, FoxhuntVectorEnv
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


def test_made_by_id_through_gymnasium() -> None:
    cfg = config(horizon=4).model_copy(update={"episode_rows": 20})
    m = market(MID)
    env = gym.make(ENV_ID, market=m, cfg=cfg, lo=0, hi=300)
    assert isinstance(env.unwrapped, FoxhuntEnv) and env.spec is not None and env.spec.id == ENV_ID
    check_env(env.unwrapped, skip_render_check=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # make_vec warns when a vector env lacks its autoreset mode
        venv = gym.make_vec(ENV_ID, num_envs=3, market=m, cfg=cfg, lo=0, hi=300)
    assert isinstance(venv, FoxhuntVectorEnv) and venv.num_envs == 3
    assert venv.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    obs, _ = venv.reset(seed=0)
    assert venv.observation_space.contains(obs)


def _until_one_ends(venv: FoxhuntVectorEnv, actions: np.ndarray) -> tuple[np.ndarray, int]:
    for step in range(1, 40):
        _, _, term, trunc, _ = venv.step(actions)
        ended = term | trunc
        if ended.any():
            return ended, step
    raise AssertionError("no episode ended")


def test_vector_env_autoresets_on_the_next_step_as_it_declares() -> None:
    """The step after an episode ends returns that episode's first observation (the one a fresh env
    shows at its new window), reward 0 and no flag, whatever its action; the one after steps it."""
    cfg = config(horizon=4).model_copy(update={"episode_rows": 10})
    m = market(MID)
    results = []
    for direction in (0, 2):  # the restarted episodes' action differs: Short, then Long
        venv = FoxhuntVectorEnv(m, cfg, 0, 300, num_envs=4, seed=1)
        venv.reset(seed=5)
        hold = np.tile(np.array([1, 0, 0, 0]), (4, 1))  # Hold: every episode runs its whole window
        ended, steps = _until_one_ends(venv, hold)
        assert steps == cfg.episode_rows - 1 and ended.all()  # windows of 10 rows: 9 steps
        act = hold.copy()
        act[:, 0] = direction
        obs, rew, term, trunc, _ = venv.step(act)
        assert (rew == 0).all() and not term.any() and not trunc.any()
        starts = venv._env.state.row.clone()  # not advanced: the new windows' first rows
        fresh = TradingEnv(m, cfg)
        assert np.array_equal(obs, fresh.reset(starts).cpu().numpy())
        obs2, *_ = venv.step(act)
        assert torch.equal(venv._env.state.row, starts + 1)  # the next step steps them
        results.append((obs, starts))
    assert np.array_equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


def test_vector_env_restarts_only_the_episodes_that_ended() -> None:
    cfg = config(horizon=4).model_copy(update={"episode_rows": 10})
    venv = FoxhuntVectorEnv(market(MID), cfg, 0, 300, num_envs=2, seed=1)
    venv.reset(seed=5)
    hold = np.tile(np.array([1, 0, 0, 0]), (2, 1))
    for _ in range(4):
        venv.step(hold)
    rows = venv._env.state.row.clone()
    venv._env.state.done[0] = True  # episode 0 ends here (as its window's end would end it)
    venv._restart = venv._env.state.done.cpu()
    _, rew, term, trunc, _ = venv.step(hold)
    assert rew[0] == 0 and not (term[0] or trunc[0])
    assert int(venv._env.state.row[1]) == int(rows[1]) + 1  # the other one stepped on
