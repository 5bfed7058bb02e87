"""Sizing: profile values on CPU, sizes that follow free memory on CUDA, floors and ceilings."""

from __future__ import annotations

import pytest
import torch

from foxhunt.domain.actions import BRANCHES
from foxhunt.env.market import AUX_TARGETS
from foxhunt.train.config import SizingConfig, SizingMode, TrainConfig
from foxhunt.train.memory_budget import (
    RunSizes,
    SizingSource,
    activation_bytes_per_sample,
    env_bytes,
    size_run,
    sizes_for_memory,
    transition_bytes,
)

W = 100  # state width
ACT = 100_000  # learner bytes per batch sample
PROFILE = {"envs": 16_384, "batch": 16_384, "replay_capacity": 1 << 20}
GIB = 1 << 30


def test_byte_estimates_hand_worked() -> None:
    # 2 x 4 x 100 (states) + 8 x 4 (actions) + 2 x 4 (return, discount) + 3 x 4 (aux targets)
    # + 2 x 8 (sum tree)
    assert transition_bytes(100, 4) == 800 + 32 + 8 + 12 + 16
    assert env_bytes(100, 4000) == 800 + 1024 + 1000
    # the n-step ring: per held step a 100-wide float32 state, an int64 action per branch, the float32
    # reward and aux targets, three bool flags
    held = 400 + 8 * len(BRANCHES) + 4 * (1 + len(AUX_TARGETS)) + 3
    assert env_bytes(100, 4000, n_step=21) == 800 + 1024 + 1000 + 21 * held
    units = 3 * 10 + 6 * 8 * 2 + 2 * 2 * (4 + 8) + 2 + 2 * 6 * 3 + 3 * 5 * (1 + 4 + 3)
    got = activation_bytes_per_sample(
        10,
        hidden=8,
        trunk_layers=2,
        experts=2,
        expert_hidden=4,
        head_hidden=6,
        atoms=5,
        branch_actions=(4, 3),
    )
    assert got == 16 * units


def test_cpu_and_profile_mode_use_the_profile_values() -> None:
    sizing = SizingConfig(max_scale=8.0)
    cpu = size_run("cpu", W, sizing=sizing, activation_bytes=ACT, free_memory_bytes=1000, **PROFILE)
    assert cpu == RunSizes(16_384, 16_384, 1 << 20, SizingSource.PROFILE, None)
    prof = SizingConfig(mode=SizingMode.PROFILE)
    cuda = size_run("cuda", W, sizing=prof, activation_bytes=ACT, free_memory_bytes=1000, **PROFILE)
    assert (cuda.envs, cuda.batch, cuda.replay_capacity, cuda.source) == (16_384, 16_384, 1 << 20, "profile")


def test_sizes_follow_free_memory_hand_worked() -> None:
    sizing = SizingConfig(memory_share=0.5, replay_share=0.5, batch_share=0.25, max_scale=1024.0)
    got = size_run("cuda", W, sizing=sizing, activation_bytes=ACT, free_memory_bytes=8 * GIB, **PROFILE)
    budget = 4 * GIB
    # replay: 2 GiB / 868 B = 2,474,059 -> 2^21; batch: 1 GiB / 1e5 B = 10,737 -> 2^13;
    # envs: 1 GiB / (800 + 1024 + 25,000) B = 40,029 -> 2^15
    assert got == RunSizes(1 << 15, 1 << 13, 1 << 21, SizingSource.MEMORY, budget)
    assert 2 * GIB // transition_bytes(W) == 2_474_059 and GIB // env_bytes(W, ACT) == 40_029
    # 4x the free memory: every size 4x (they are powers of two well above the floors)
    big = size_run("cuda", W, sizing=sizing, activation_bytes=ACT, free_memory_bytes=32 * GIB, **PROFILE)
    assert (big.envs, big.batch, big.replay_capacity) == (
        4 * got.envs,
        4 * got.batch,
        4 * got.replay_capacity,
    )


def test_floors_on_a_small_device_and_ceilings_on_a_large_one() -> None:
    sizing = SizingConfig(min_envs=64, min_batch=256, min_replay=16_384)  # max_scale 1
    small = sizes_for_memory(8 << 20, W, sizing=sizing, activation_bytes=ACT, **PROFILE)  # 8 MiB free
    assert (small.envs, small.batch, small.replay_capacity) == (64, 256, 16_384)
    none = sizes_for_memory(0, W, sizing=sizing, activation_bytes=ACT, **PROFILE)
    assert min(none.envs, none.batch, none.replay_capacity) >= 64  # never a zero size
    huge = sizes_for_memory(1 << 50, W, sizing=sizing, activation_bytes=ACT, **PROFILE)
    assert (huge.envs, huge.batch, huge.replay_capacity) == (16_384, 16_384, 1 << 20)  # profile = ceiling
    scaled = sizes_for_memory(1 << 50, W, sizing=SizingConfig(max_scale=2.0), activation_bytes=ACT, **PROFILE)
    assert (scaled.envs, scaled.batch, scaled.replay_capacity) == (32_768, 32_768, 1 << 21)
    # a profile asking for less than a floor gets what it asked for; the batch never exceeds the replay
    tiny = sizes_for_memory(0, W, sizing=sizing, activation_bytes=ACT, envs=8, batch=32, replay_capacity=16)
    assert (tiny.envs, tiny.batch, tiny.replay_capacity) == (8, 16, 16)


def test_sizing_config_rejects_zero_floors_and_overfull_shares() -> None:
    with pytest.raises(ValueError, match="min_envs"):
        SizingConfig(min_envs=0)
    with pytest.raises(ValueError, match="must stay below 1"):
        SizingConfig(replay_share=0.7, batch_share=0.3)
    with pytest.raises(ValueError, match="extra"):
        TrainConfig(epoch=3)  # unknown key (typo of epochs)
    assert TrainConfig().sizing.mode is SizingMode.MEMORY


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_reads_free_memory_on_cuda() -> None:
    free, _ = torch.cuda.mem_get_info()
    sizing = SizingConfig(max_scale=1024.0)
    got = size_run("cuda", W, sizing=sizing, activation_bytes=ACT, **PROFILE)
    assert got.source is SizingSource.MEMORY and got.budget_bytes == pytest.approx(0.6 * free, rel=0.05)
