"""Every random stream's seed, derived in one place from the run seed and what the stream is for.

A run has one seed (``run.seed``); each random stream a fold draws from gets its own seed from it,
``stream_seed(run_seed, stream, fold)``, and its own generator, passed explicitly to whatever draws.
Only the run loop seeds the process-wide generators (:func:`seed_process`), once per fold; building
an agent leaves them as they were. A fold's streams depend only on the run seed and the fold index,
so fold k+1 starts from the same state whatever fold k did.

The derivation is ``run_seed * FOLD_STRIDE + fold + offset[stream]``: the run seed picks a block of
``FOLD_STRIDE`` seeds, the fold a seed in it, and the stream an offset from that. The agent's stream
of fold k and the episode-starts stream of fold k - 1 share a seed; the two draw different things
(network initialisation and noise against uniform start rows), and the offsets are kept as they are
because every recorded result of the project was trained with them.

The idiom, for every random stream of the package: a seed comes from a function here (from the run
seed, the fold and the stream's purpose, or from a stream's integer keys), and a generator from
:func:`generator` (torch), :func:`rng` (numpy) or :func:`seeded_torch` (torch's process-wide
generator, for module initialisers that take none). Outside: numba's generator inside the synthetic
market's event loop is seeded by ``np.random.seed`` in the kernel (numba has no generator objects),
with a seed from :func:`keyed`; library samplers (Optuna's TPE, fANOVA, LightGBM) take
``run.seed``; and a Gymnasium ``reset(seed=...)`` reseeds with the caller's own seed.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from enum import StrEnum

import numpy as np
import torch

FOLD_STRIDE = 1000
"""Seeds per run seed: fold ``k`` of run seed ``s`` derives from ``s * FOLD_STRIDE + k``."""

MEMBER_STRIDE = 1_000_000
"""Member m of a committee run seeded s trains as a run of its own seeded ``s + m * MEMBER_STRIDE``
(:func:`member_seed`; foxhunt.train.members)."""


def member_seed(run_seed: int, member: int) -> int:
    """The run seed of member ``member`` of a run seeded ``run_seed`` (member 0: the run's)."""
    return run_seed + member * MEMBER_STRIDE


ALPHA_FOLD_STRIDE = 1000
"""Seeds per fold of the alpha check's model fits: :func:`alpha_fit_seed`."""


def alpha_fit_seed(run_seed: int, fold: int, horizon: int) -> int:
    """The seed of the alpha check's model fit on fold ``fold`` for ``horizon`` rows
    (foxhunt.alpha.check): ``run_seed + ALPHA_FOLD_STRIDE * fold + horizon``. A derivation of its
    own, not :func:`stream_seed`'s, kept because every recorded alpha result was fitted with it."""
    return run_seed + ALPHA_FOLD_STRIDE * fold + horizon


class Stream(StrEnum):
    """What a random stream is for (each has its own generator)."""

    AGENT = "agent"
    """The fold agent's generator: network initialisation, noisy-layer noise, exploration draws,
    replay sampling and the plateau ladder's perturbation."""
    EPISODE_STARTS = "episode_starts"
    """The rows where each epoch's training episodes start."""
    PROCESS = "process"
    """Python's, numpy's and torch's process-wide generators: the learner's noisy-layer noise draws
    from torch's, and a checkpoint records them all beside the named ones. Seeded per fold, so a
    fold's numbers and checkpoints do not depend on the process that computed them."""
    SCRIPTED_POLICY = "scripted_policy"
    """The draws of a scripted baseline policy (``random``) over a fold's validation period, the same
    in ``foxhunt backtest`` and the Python API so the two give the same numbers."""


_OFFSET = {Stream.AGENT: 0, Stream.EPISODE_STARTS: 1, Stream.PROCESS: 0, Stream.SCRIPTED_POLICY: 2}


def stream_seed(run_seed: int, stream: Stream, fold: int = 0) -> int:
    """The seed of ``stream`` in fold ``fold`` of a run seeded ``run_seed`` (module docstring)."""
    return run_seed * FOLD_STRIDE + fold + _OFFSET[stream]


def generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch generator on ``device`` seeded with ``seed``."""
    return torch.Generator(device=device).manual_seed(seed)


def rng(seed: int | np.random.SeedSequence) -> np.random.Generator:
    """A numpy generator (PCG64) seeded with ``seed``: an int or a :func:`keyed` / :func:`children`
    sequence."""
    return np.random.default_rng(seed)


def keyed(*keys: int) -> np.random.SeedSequence:
    """The seed sequence of a stream named by integer keys, e.g. the synthetic market's
    ``(synth.seed, stream, session)`` or a study's ``(run.seed, trials so far)``: distinct keys give
    independent streams, so two uses never share a seed by arithmetic accident."""
    return np.random.SeedSequence(list(keys))


def children(seed: int, n: int) -> list[np.random.SeedSequence]:
    """``n`` independent child sequences of ``seed`` (one per group, trial or worker), so one
    child's draws do not depend on how many the others made."""
    return np.random.SeedSequence(seed).spawn(n)


def cut_seed(seed: int, cut: int) -> int:
    """The seed of the leak guard's perturbation at its ``cut``-th cut (foxhunt.dataset.leaks): the
    guard's own ``seed`` (not the run's: a verdict does not depend on ``run.seed``) plus the cut."""
    return seed + cut


def trial_seed(run_seed: int, trial: int) -> int:
    """The run seed a tuning study's trial ``trial`` trains with (foxhunt.tune)."""
    return run_seed + trial


@contextlib.contextmanager
def seeded_torch(seed: int, devices: Sequence[int] = ()) -> Iterator[None]:
    """torch's process-wide generators (the CPU's, and ``devices``' CUDA ones) seeded with ``seed``
    inside the block and restored after it: ``nn.Module`` initialisers draw from them and take no
    generator, so a network's initial weights depend on ``seed`` alone and the process's streams
    are left as they were."""
    with torch.random.fork_rng(devices=list(devices)):
        torch.manual_seed(seed)
        yield


def seed_process(seed: int, torch_cpu_state: torch.Tensor | None = None) -> None:
    """Seed Python's, numpy's and torch's process-wide generators (CPU and every CUDA device), then
    put torch's CPU generator at ``torch_cpu_state`` when given.

    Only the run loop calls this, once per fold, so nothing a fold computes depends on what the
    process ran before: the learner draws its noisy layers' noise from torch's generator of the
    device (the one draw without an explicit generator; on the CPU it continues where the agent's
    network initialisation left its seeded stream: pass :attr:`Agent.noise_rng_state
    <foxhunt.agent.agent.Agent.noise_rng_state>`), and checkpoints record all of these streams.
    numpy's legacy seed must fit 32 bits, hence the modulus."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch_cpu_state is not None:
        torch.set_rng_state(torch_cpu_state)
