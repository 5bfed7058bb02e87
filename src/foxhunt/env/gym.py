"""Gymnasium wrappers around :class:`~foxhunt.env.core.TradingEnv`, for outside agents.

``FoxhuntEnv`` is a single environment (``gymnasium.Env``, passes
``gymnasium.utils.env_checker.check_env``); ``FoxhuntVectorEnv`` steps ``num_envs`` episodes in one
batched call (``gymnasium.vector.VectorEnv``). Both are registered with Gymnasium as
:data:`ENV_ID` when this module is imported (Gymnasium 1.x loads no plugins by itself; the
``"module:id"`` form imports it for you)::

    env = gym.make("foxhunt.env.gym:foxhunt/Futures-v0", market=market, cfg=cfg.env, lo=lo, hi=hi)
    venv = gym.make_vec("foxhunt/Futures-v0", num_envs=64, market=market, cfg=cfg.env, lo=lo, hi=hi)

(``market`` from :func:`foxhunt.api.fold_market`, ``[lo, hi)`` a fold's rows; ``make_vec`` builds the
batched ``FoxhuntVectorEnv``, its ``vector_entry_point``.)

**Autoreset.** The vector env declares ``metadata["autoreset_mode"] = AutoresetMode.NEXT_STEP``
and behaves so (Gymnasium 1.x's convention): the step on which an episode ends returns its last
observation with ``terminated`` or ``truncated``; on the next :meth:`~FoxhuntVectorEnv.step` that
episode restarts at a fresh window, its action is ignored, and it returns the new episode's first
observation with reward 0 and neither flag set. Both draw episode windows of
``cfg.episode_rows`` rows uniformly from the rows ``[lo, hi)`` they are given (a fold's training
or validation block). Observations are the state of :data:`~foxhunt.features.layout.STATE_LAYOUT`
(float32, clipped to +-20 by the state assembly); actions are the four branch indices
(``MultiDiscrete(codec.sizes)``). ``terminated`` means the capital floor was breached, ``truncated``
that the window ran out.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from foxhunt.domain.exits import ExitReason
from foxhunt.env.config import EnvConfig
from foxhunt.env.core import TradingEnv
from foxhunt.env.market import MarketTensors
from foxhunt.features.layout import STATE_LAYOUT
from foxhunt.seeding import generator

OBS_BOUND = 20.0
_CAPITAL_FLOOR = int(ExitReason.CAPITAL_FLOOR)  # a plain int: StepResult.exit_reason is an int64 tensor
ENV_ID = "foxhunt/Futures-v0"
"""The Gymnasium id of the environment (``gym.make`` / ``gym.make_vec``; module docs)."""


def _spaces(env: TradingEnv) -> tuple[gym.spaces.Box, gym.spaces.MultiDiscrete]:
    obs = gym.spaces.Box(-OBS_BOUND, OBS_BOUND, shape=(STATE_LAYOUT.width,), dtype=np.float32)
    return obs, gym.spaces.MultiDiscrete(np.array(env.codec.sizes, dtype=np.int64))


class FoxhuntEnv(gym.Env):
    """One episode at a time over rows ``[lo, hi)`` of ``market``."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, market: MarketTensors, cfg: EnvConfig, lo: int, hi: int) -> None:
        if hi - lo <= cfg.episode_rows:
            raise ValueError(f"rows [{lo}, {hi}) are too few for episodes of {cfg.episode_rows} rows")
        self._env = TradingEnv(market, cfg)
        self._lo, self._hi = lo, hi
        self.observation_space, self.action_space = _spaces(self._env)

    def _obs(self, state: torch.Tensor) -> np.ndarray:
        return np.clip(state[0].cpu().numpy(), -OBS_BOUND, OBS_BOUND).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        start = int(self.np_random.integers(self._lo, self._hi - self._env.cfg.episode_rows))
        state = self._env.reset(torch.tensor([start]))
        return self._obs(state), {"row": start}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = torch.as_tensor(np.asarray(action, dtype=np.int64).reshape(1, -1))
        state, res = self._env.step(a)
        terminated = bool(res.exit_reason[0] == _CAPITAL_FLOOR)
        truncated = bool(self._env.state.done[0]) and not terminated
        info = {
            "net_pnl": float(res.net[0]),
            "costs": float(res.costs[0]),
            "position": float(self._env.state.account.position[0]),
        }
        return self._obs(state), float(res.reward[0]), terminated, truncated, info


class FoxhuntVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` episodes stepped together; a finished episode restarts on the next step, which
    returns its first observation (next-step autoreset, module docs)."""

    metadata: dict[str, Any] = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self, market: MarketTensors, cfg: EnvConfig, lo: int, hi: int, num_envs: int, seed: int = 0
    ) -> None:
        if hi - lo <= cfg.episode_rows:
            raise ValueError(f"rows [{lo}, {hi}) are too few for episodes of {cfg.episode_rows} rows")
        self._env = TradingEnv(market, cfg)
        self._lo, self._hi = lo, hi
        self.num_envs = num_envs
        self.single_observation_space, self.single_action_space = _spaces(self._env)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self._gen = generator(seed)
        self._restart = torch.zeros(num_envs, dtype=torch.bool)

    def _starts(self, n: int) -> torch.Tensor:
        return torch.randint(self._lo, self._hi - self._env.cfg.episode_rows, (n,), generator=self._gen)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if seed is not None:
            self._gen.manual_seed(seed)
        state = self._env.reset(self._starts(self.num_envs))
        self._restart[:] = False
        return state.cpu().numpy(), {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        restart = self._restart.to(self._env.device)
        if restart.any():  # next-step autoreset: restart the episodes that ended on the last step
            s = self._env.state
            assert s is not None
            fresh = self._starts(int(restart.sum()))
            starts = s.row.clone()
            starts[restart] = fresh.to(starts.device)
            keep, aux = s, self._env.aux.clone()
            self._env.reset(torch.where(restart, starts, s.row))
            # Episodes that did not finish keep their portfolio (and aux slots): copy them back.
            for o, n in zip(keep.tensors(), self._env.state.tensors(), strict=True):
                n[~restart] = o[~restart]
            self._env.aux[~restart] = aux[~restart]
            # The restarted ones sit this step out (the env steps live episodes only; their action
            # is ignored) and answer their first observation, reward 0, neither flag. A done
            # episode's clocks still tick in a step (time since trade), so their fresh state is
            # put back after it.
            self._env.state.done[restart] = True
            first = [t[restart].clone() for t in self._env.state.tensors()]
        a = torch.as_tensor(np.asarray(actions, dtype=np.int64))
        state, res = self._env.step(a)
        if restart.any():
            for f, n in zip(first, self._env.state.tensors(), strict=True):
                n[restart] = f
            self._env.state.done[restart] = False  # a fresh window is longer than one row (__init__)
            state = self._env.observe()
        terminated = (res.exit_reason == _CAPITAL_FLOOR) & ~restart
        done = self._env.state.done
        reward = torch.where(restart, torch.zeros_like(res.reward), res.reward)
        self._restart = done.cpu()
        return (
            state.cpu().numpy(),
            reward.cpu().numpy(),
            terminated.cpu().numpy(),
            (done & ~terminated).cpu().numpy(),
            {},
        )


if ENV_ID not in gym.registry:  # once per process: a second import (importlib.reload) keeps the first
    gym.register(
        id=ENV_ID,
        entry_point=FoxhuntEnv,
        vector_entry_point=FoxhuntVectorEnv,
        disable_env_checker=False,
    )
