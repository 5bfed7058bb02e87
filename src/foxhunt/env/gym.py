"""Gymnasium wrappers around :class:`~foxhunt.env.core.TradingEnv`, for outside agents.

``FoxhuntEnv`` is a single environment (``gymnasium.Env``, passes
``gymnasium.utils.env_checker.check_env``); ``FoxhuntVectorEnv`` steps ``num_envs`` episodes in one
batched call (``gymnasium.vector.VectorEnv``, next-step autoreset). Both draw episode windows of
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

from foxhunt.domain.exits import ExitReason
from foxhunt.env.config import EnvConfig
from foxhunt.env.core import TradingEnv
from foxhunt.env.market import MarketTensors
from foxhunt.features.layout import STATE_LAYOUT

OBS_BOUND = 20.0
_CAPITAL_FLOOR = int(ExitReason.CAPITAL_FLOOR)  # a plain int: StepResult.exit_reason is an int64 tensor


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
    """``num_envs`` episodes stepped together; a finished episode restarts on the next step."""

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
        self._gen = torch.Generator().manual_seed(seed)
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
        if self._restart.any():  # next-step autoreset: restart finished episodes, then step all
            s = self._env.state
            assert s is not None
            fresh = self._starts(int(self._restart.sum()))
            starts = s.row.clone()
            starts[self._restart] = fresh.to(starts.device)
            keep, aux = s, self._env.aux.clone()
            self._env.reset(torch.where(self._restart, starts, s.row))
            # Episodes that did not finish keep their portfolio (and aux slots): copy them back.
            mask = ~self._restart.to(aux.device)
            for o, n in zip(keep.tensors(), self._env.state.tensors(), strict=True):
                n[mask] = o[mask]
            self._env.aux[mask] = aux[mask]
        a = torch.as_tensor(np.asarray(actions, dtype=np.int64))
        state, res = self._env.step(a)
        terminated = (res.exit_reason == _CAPITAL_FLOOR).cpu().numpy()
        done = self._env.state.done.cpu().numpy()
        self._restart = torch.as_tensor(done)
        return state.cpu().numpy(), res.reward.cpu().numpy(), terminated, done & ~terminated, {}
