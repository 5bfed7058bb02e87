"""Seeds derived in one place (foxhunt.seeding): hand-worked stream seeds, and process seeding that
makes what follows independent of what the process drew before."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from foxhunt import seeding
from foxhunt.seeding import Stream


def test_stream_seeds_by_hand() -> None:
    # run seed 10, fold 2: 10 * 1000 + 2 = 10002 for the agent and the process streams, +1 for the
    # episode starts (the derivation every recorded result was trained with), +2 for a scripted
    # baseline's draws.
    assert seeding.stream_seed(10, Stream.AGENT, fold=2) == 10_002
    assert seeding.stream_seed(10, Stream.PROCESS, fold=2) == 10_002
    assert seeding.stream_seed(10, Stream.EPISODE_STARTS, fold=2) == 10_003
    assert seeding.stream_seed(10, Stream.SCRIPTED_POLICY, fold=2) == 10_004
    assert seeding.stream_seed(0, Stream.AGENT) == 0
    # Another fold or run seed moves every stream; folds of one run seed stay in its block.
    assert seeding.stream_seed(11, Stream.AGENT, fold=2) == 11_002
    assert {seeding.stream_seed(3, s, fold=k) // seeding.FOLD_STRIDE for s in Stream for k in range(5)} == {3}


def test_member_and_alpha_fit_seeds_by_hand() -> None:
    # The derivations every recorded committee and alpha result used: member m of run seed 7 is a
    # run seeded 7 + m x 1,000,000; the alpha fit on fold 3 for horizon 5 is seeded 7 + 3 x 1000 + 5.
    assert [seeding.member_seed(7, m) for m in range(3)] == [7, 1_000_007, 2_000_007]
    assert seeding.alpha_fit_seed(7, 3, 5) == 3_012
    assert seeding.alpha_fit_seed(7, 0, 60) == 67


def test_generator_is_seeded_on_its_device() -> None:
    g = seeding.generator(5)
    assert g.device == torch.device("cpu") and g.initial_seed() == 5
    assert torch.equal(torch.rand(4, generator=g), torch.rand(4, generator=torch.Generator().manual_seed(5)))


def _draws() -> tuple:
    return torch.rand(3), np.random.rand(3), random.random()


@pytest.fixture
def process_streams_kept() -> Iterator[None]:
    """The process-wide streams as they were before the test (other tests' draws are not ours to move)."""
    py, npy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        yield
    random.setstate(py)
    np.random.set_state(npy)


@pytest.mark.usefixtures("process_streams_kept")
def test_seed_process_makes_the_next_draws_independent_of_the_past() -> None:
    seeding.seed_process(7)
    first = _draws()
    torch.rand(100), np.random.rand(100), random.random()  # the process draws on ...
    seeding.seed_process(7)
    again = _draws()
    assert torch.equal(first[0], again[0]) and np.array_equal(first[1], again[1]) and first[2] == again[2]
    # A CPU state put in after seeding is where torch's CPU stream continues from.
    state = torch.Generator().manual_seed(3).get_state()
    seeding.seed_process(7, torch_cpu_state=state)
    assert torch.equal(torch.rand(3), torch.rand(3, generator=torch.Generator().manual_seed(3)))
    assert np.array_equal(np.random.rand(3), first[1])  # numpy and Python as seeded
