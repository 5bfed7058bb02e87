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
"""

from __future__ import annotations

import random
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
