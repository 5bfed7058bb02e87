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


def test_the_idioms_generators_are_numpys_and_torchs_own_with_the_same_seeds() -> None:
    # rng and keyed: the generators the package drew before they came through seeding, draw for draw
    assert np.array_equal(seeding.rng(5).random(4), np.random.default_rng(5).random(4))
    keyed = seeding.keyed(7, 2, 3)
    assert keyed.entropy == np.random.SeedSequence([7, 2, 3]).entropy
    assert np.array_equal(
        seeding.rng(keyed).random(3),
        np.random.Generator(np.random.PCG64(np.random.SeedSequence([7, 2, 3]))).random(3),
    )
    got = [seeding.rng(c).integers(1 << 30) for c in seeding.children(11, 3)]
    want = [np.random.default_rng(c).integers(1 << 30) for c in np.random.SeedSequence(11).spawn(3)]
    assert got == want and len(set(got)) == 3
    assert seeding.cut_seed(0, 3) == 3 and seeding.trial_seed(7, 2) == 9


def test_seeded_torch_seeds_inside_and_restores_the_process_stream() -> None:
    torch.manual_seed(123)
    before = torch.get_rng_state()
    with seeding.seeded_torch(4):
        inside = torch.rand(3)
    assert torch.equal(torch.get_rng_state(), before)  # the process's stream is left as it was
    torch.manual_seed(4)
    assert torch.equal(inside, torch.rand(3))  # the block drew from seed 4's stream


def test_random_streams_are_made_only_through_seeding() -> None:
    """One seed idiom (issue 55 item 6): no module but seeding.py makes a numpy or torch generator or
    seeds torch's, except the two named here, each with its reason."""
    import re
    from pathlib import Path

    import foxhunt

    allowed = {
        "data/synth_engine.py": "numba's generator inside the event loop's kernel (seeded from keyed)",
        "env/gym.py": "a Gymnasium reset(seed=...) reseeds with the caller's own seed",
    }
    making = re.compile(r"default_rng\(|SeedSequence\(|manual_seed\(|fork_rng\(|np\.random\.seed\(")
    root = Path(foxhunt.__file__).parent
    found = set()
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        code = [ln.split("#")[0] for ln in path.read_text().splitlines() if "``" not in ln]
        if rel != "seeding.py" and any(making.search(ln) for ln in code):
            found.add(rel)
    assert found == set(allowed), f"random streams made outside seeding: {sorted(found - set(allowed))}"
