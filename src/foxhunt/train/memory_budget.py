"""Run sizes from the device's free memory (docs/design.md §7): parallel episodes, learner batch,
replay capacity.

On CPU (or with ``train.sizing.mode = "profile"``) the profile's values are used as they are. On
CUDA a share of the free memory (``torch.cuda.mem_get_info``) is split between the replay buffer,
the learner's batch activations and the environments::

    budget   = memory_share * free_bytes
    replay   = floor2(budget * replay_share / transition_bytes)
    batch    = floor2(budget * batch_share / activation_bytes)
    envs     = floor2(budget * (1 - replay_share - batch_share) / env_bytes)
    each     clamped to [min(floor, profile), max_scale * profile];  batch <= replay

``floor2(x)`` is the largest power of two <= x (0 for x < 1). The floors keep a small device
usable (never a zero size); the ceiling keeps a large device from changing the learning problem
(batch size is a hyper-parameter) beyond what ``max_scale`` allows. The byte estimates
(:func:`transition_bytes`, :func:`activation_bytes_per_sample`, :func:`env_bytes`) are deliberately
rough upper bounds; the shares leave the rest of the device for the allocator and the model.
:func:`sizes_for_memory` is a pure function of the free memory, testable without a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import torch

from foxhunt.agent.replay import transition_fields
from foxhunt.domain.actions import BRANCHES
from foxhunt.env.market import AUX_TARGETS
from foxhunt.train.config import SizingConfig, SizingMode

_F32, _F64, _I64 = 4, 8, 8


class SizingSource(StrEnum):
    PROFILE = "profile"
    MEMORY = "memory"


@dataclass(frozen=True)
class RunSizes:
    envs: int
    batch: int
    replay_capacity: int
    source: SizingSource = SizingSource.PROFILE
    budget_bytes: int | None = None
    """The memory budget the sizes were derived from (None when they are the profile's)."""

    def describe(self) -> str:
        where = "profile" if self.budget_bytes is None else f"{self.budget_bytes / 2**30:.2f} GiB budget"
        return f"{self.envs} envs, batch {self.batch}, replay {self.replay_capacity} ({where})"


def transition_bytes(
    state_width: int, n_branches: int = len(BRANCHES), aux_width: int = len(AUX_TARGETS)
) -> int:
    """Replay bytes per transition: every field of the replay's transition record
    (:func:`~foxhunt.agent.replay.transition_fields`: ``s_t`` and ``s_{t+n}``, one int64 action per
    branch, the n-step return and discount, the aux targets), plus the float64 sum-tree leaf with
    its share of the inner nodes (2 x 8)."""
    fields = transition_fields(state_width, n_branches, aux_width).values()
    record = sum(math.prod(shape) * torch.empty((), dtype=dtype).element_size() for shape, dtype in fields)
    return record + 2 * _F64


def activation_bytes_per_sample(
    state_width: int,
    *,
    hidden: int,
    trunk_layers: int,
    experts: int,
    expert_hidden: int,
    head_hidden: int,
    atoms: int,
    branch_actions: Sequence[int],
) -> int:
    """Rough learner bytes per batch sample.

    float32 values of one forward pass::

        units = 3 W                                      selection gates over the input
              + 6 hidden * trunk_layers                  GRN blocks (linear, ELU, linear, GLU, norm)
              + 2 K (expert_hidden + hidden) + K         every expert runs on every sample, the gate
              + 2 head_hidden (1 + branches)             value and advantage heads
              + 3 atoms (1 + sum(branch actions))        logits, log-softmax, probabilities

    x 4: the online forward on ``s_t`` keeps its activations and their gradients (x 2), and the online
    and target forwards on ``s_{t+n}`` for the double-Q target (x 1 each).
    """
    units = (
        3 * state_width
        + 6 * hidden * trunk_layers
        + 2 * experts * (expert_hidden + hidden)
        + experts
        + 2 * head_hidden * (1 + len(branch_actions))
        + 3 * atoms * (1 + sum(branch_actions))
    )
    return 4 * _F32 * units


def env_bytes(state_width: int, activation_bytes: int, n_step: int = 0) -> int:
    """Bytes per parallel episode: its observation and next row (float32), ~128 float64 portfolio,
    plan and reward trackers, a policy forward without gradient (a quarter of a learner sample), and
    the n-step accumulator's ring of ``n_step`` held steps (:class:`~foxhunt.agent.replay.NStep`:
    per step the float32 state, an int64 action per branch, the float32 reward and aux targets and
    three bool flags), which dominates under ``bootstrap = decision`` with a long window."""
    held_step = _F32 * state_width + _I64 * len(BRANCHES) + _F32 * (1 + len(AUX_TARGETS)) + 3
    return 2 * _F32 * state_width + 128 * _F64 + activation_bytes // 4 + n_step * held_step


def _floor2(x: float) -> int:
    return 1 << (int(x).bit_length() - 1) if x >= 1 else 0


def _clamp(derived: int, profile: int, floor: int, max_scale: float) -> int:
    lo = min(floor, profile)  # a profile that asks for less than the floor gets what it asked for
    hi = max(int(max_scale * profile), profile)
    return max(lo, min(derived, hi))


def _check(state_width: int, activation_bytes: int, **profile: int) -> None:
    if state_width < 1:
        raise ValueError(f"state_width must be >= 1, got {state_width}")
    if activation_bytes < 1:
        raise ValueError(f"activation_bytes must be >= 1, got {activation_bytes}")
    for name, v in profile.items():
        if v < 1:
            raise ValueError(f"profile value {name} must be >= 1, got {v}")


def sizes_for_memory(
    free_bytes: int,
    state_width: int,
    *,
    envs: int,
    batch: int,
    replay_capacity: int,
    sizing: SizingConfig,
    activation_bytes: int,
    n_branches: int = len(BRANCHES),
    n_step: int = 0,
) -> RunSizes:
    """The module docstring's sizes for ``free_bytes`` of free device memory (pure)."""
    _check(state_width, activation_bytes, envs=envs, batch=batch, replay_capacity=replay_capacity)
    if free_bytes < 0:
        raise ValueError(f"free_bytes must be >= 0, got {free_bytes}")
    budget = sizing.memory_share * free_bytes
    env_share = 1.0 - sizing.replay_share - sizing.batch_share
    replay_n = _floor2(budget * sizing.replay_share / transition_bytes(state_width, n_branches))
    batch_n = _floor2(budget * sizing.batch_share / activation_bytes)
    envs_n = _floor2(budget * env_share / env_bytes(state_width, activation_bytes, n_step))
    replay_n = _clamp(replay_n, replay_capacity, sizing.min_replay, sizing.max_scale)
    batch_n = min(_clamp(batch_n, batch, sizing.min_batch, sizing.max_scale), replay_n)
    envs_n = _clamp(envs_n, envs, sizing.min_envs, sizing.max_scale)
    return RunSizes(envs_n, batch_n, replay_n, SizingSource.MEMORY, int(budget))


def size_run(
    device: torch.device | str,
    state_width: int,
    *,
    envs: int,
    batch: int,
    replay_capacity: int,
    sizing: SizingConfig,
    activation_bytes: int,
    n_branches: int = len(BRANCHES),
    n_step: int = 0,
    free_memory_bytes: int | None = None,
) -> RunSizes:
    """The run's sizes on ``device``: the profile's values (``envs``, ``batch``, ``replay_capacity``)
    on CPU or in ``profile`` mode; else :func:`sizes_for_memory` of ``free_memory_bytes``, read from
    ``torch.cuda.mem_get_info(device)`` when not given."""
    device = torch.device(device)
    _check(state_width, activation_bytes, envs=envs, batch=batch, replay_capacity=replay_capacity)
    if device.type != "cuda" or sizing.mode is SizingMode.PROFILE:
        return RunSizes(envs, batch, replay_capacity)
    if free_memory_bytes is None:
        free_memory_bytes, _total = torch.cuda.mem_get_info(device)
    return sizes_for_memory(
        free_memory_bytes,
        state_width,
        envs=envs,
        batch=batch,
        replay_capacity=replay_capacity,
        sizing=sizing,
        activation_bytes=activation_bytes,
        n_branches=n_branches,
        n_step=n_step,
    )
