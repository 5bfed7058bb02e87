"""Exploration: per-branch action selection from Q-values and return distributions (docs/design.md §6).

Pure batched functions over one branch at a time (``B`` batch, ``A`` the branch's values, ``K`` C51
atoms, ``Q`` IQN fractions). Randomness comes only from the ``generator`` argument (a
``torch.Generator`` on the inputs' device, or ``None`` for the global one), so a seeded run is
repeatable. Everything stays on the device: no ``.item()``, no data-dependent Python branch (a
Python-float coefficient may pick a path, a tensor one is applied with ``torch.where``).

Every mechanism's coefficient at 0 removes it: ``eps = 0`` returns the greedy actions, ``temperature =
0`` is greedy, ``coef = 0`` adds nothing, ``share = 0`` never uses Thompson sampling.

The exploring policy (:class:`~foxhunt.agent.actor.Actor`) runs, per branch, the ordered table
:data:`METHODS` as :func:`exploration` builds it from the config: each entry one pure step
``(Draw, Context) -> Draw`` that may shift the branch's E[Q] (the count bonus) or replace its choice
(Boltzmann, Thompson, epsilon), in table order; a branch with no choice yet takes the greedy one.
Adding an exploration method is two files: its step and its :data:`METHODS` row here, its
coefficient as a field of :class:`~foxhunt.agent.config.ExploreConfig`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import torch
from torch import Tensor

from foxhunt.agent.config import ExploreConfig
from foxhunt.agent.distributional import expectation, sample_c51, sample_quantiles

__all__ = [
    "METHODS",
    "Context",
    "Draw",
    "Method",
    "boltzmann",
    "count_bonus",
    "epsilon_greedy",
    "exploration",
    "greedy",
    "thompson_direction",
]

_TINY = 1e-20  # keeps log(u) finite for a uniform draw of exactly 0


def greedy(q_BA: Tensor) -> Tensor:
    """``argmax_a q[b, a]`` (the first maximum on ties): ``[B]`` int64."""
    return q_BA.argmax(dim=-1)


def epsilon_greedy(
    actions_B: Tensor, n_values: int, eps: Tensor | float, generator: torch.Generator | None = None
) -> Tensor:
    """Replace each action, with probability ``eps``, by a value drawn uniformly from ``0 .. n_values-1``.

    One branch: ``actions_B [B]`` int64 are the greedy choices, ``n_values`` the branch's full range
    (``BranchConfig``), so every value of the branch is reachable. A uniform draw can equal the greedy
    action, so the chance of a *different* action is ``eps (n - 1) / n``. Returns ``[B]`` int64.
    """
    dev = actions_B.device
    random_B = torch.randint(0, n_values, actions_B.shape, generator=generator, device=dev)  # uniform
    explore_B = torch.rand(actions_B.shape, generator=generator, device=dev) < eps  # coin per sample
    return torch.where(explore_B, random_B, actions_B)


def boltzmann(
    q_BA: Tensor, temperature: Tensor | float, floor: float, generator: torch.Generator | None = None
) -> Tensor:
    """Sample ``a ~ softmax(q / T)`` with ``T = max(temperature, floor)``; greedy when ``temperature <= 0``.

    ``q_BA`` should already be on a comparable scale (the caller divides E[Q] by its |Q| reference).
    Sampling uses the Gumbel-max trick, ``argmax_a (q_a / T + G_a)`` with ``G = -ln(-ln U)``, which is an
    exact draw from the softmax and needs no multinomial. Returns ``[B]`` int64.
    """
    u_BA = torch.rand(q_BA.shape, generator=generator, device=q_BA.device, dtype=q_BA.dtype)
    gumbel_BA = -torch.log(-torch.log(u_BA.clamp_min(_TINY)))  # G ~ Gumbel(0, 1)   [B, A]
    if isinstance(temperature, Tensor):
        t = temperature.clamp_min(floor)
        sampled_B = (q_BA / t + gumbel_BA).argmax(dim=-1)
        return torch.where(temperature > 0, sampled_B, greedy(q_BA))
    if temperature <= 0:  # off
        return greedy(q_BA)
    return (q_BA / max(temperature, floor) + gumbel_BA).argmax(dim=-1)  # [B]


def count_bonus(q_BA: Tensor, counts_A: Tensor, coef: Tensor | float) -> Tensor:
    """``q + c / sqrt(1 + n(a))``, the count-based exploration bonus on E[Q]; counts ``[A]`` or ``[B, A]``."""
    return q_BA + coef * (1.0 + counts_A.to(q_BA.dtype)).rsqrt()


def thompson_direction(
    probs_BAK: Tensor | None,
    z_K: Tensor,
    quantiles_BAQ: Tensor | None,
    taus_Q: Tensor,
    share: Tensor | float,
    generator: torch.Generator | None = None,
    fallback_B: Tensor | None = None,
) -> Tensor:
    """Direction choice with Thompson sampling for a ``share`` of the samples: ``[B]`` int64.

    For each sample, with probability ``share``: draw one ``u ~ U[0, 1)`` per action, take the C51
    inverse-CDF sample ``F_C51^{-1}(u)`` (:func:`sample_c51`) and the IQN quantile interpolation
    ``F_IQN^{-1}(u)`` (:func:`sample_quantiles`), average the two and take the argmax over actions.
    Using the same ``u`` for both heads makes the average an exact draw from the quantile average of
    the two distributions (it keeps the full spread; independent draws would halve the variance).
    Other samples take ``fallback_B`` (the caller's greedy or ε-greedy choice), by default the
    evaluation policy ``argmax_a (E_C51 + E_IQN) / 2`` with ``E_IQN`` the mean of the quantiles.

    ``probs_BAK`` (C51 probabilities on ``z_K``) and ``quantiles_BAQ`` (at ``taus_Q``) must be in the
    same units: de-normalise PopArt-normalised IQN outputs first. A head passed as ``None`` is left
    out (untrained, its loss weight 0: ``network.TrainedHeads``): the draw and the default fallback
    come from the other head alone, with the same random numbers.
    """
    given = probs_BAK if probs_BAK is not None else quantiles_BAQ  # either head's [B, A, ...]
    if given is None:
        raise ValueError("thompson_direction: pass the C51 probabilities, the IQN quantiles or both")
    b, a = given.shape[:2]
    dev = given.device
    u_BA = torch.rand((b, a), generator=generator, device=dev, dtype=given.dtype)  # one u per action
    draw_BA = _average(
        sample_c51(probs_BAK, z_K, u_BA) if probs_BAK is not None else None,
        sample_quantiles(quantiles_BAQ, taus_Q, u_BA) if quantiles_BAQ is not None else None,
    )  # [B, A]
    thompson_B = draw_BA.argmax(dim=-1)  # [B]
    if fallback_B is None:
        mean_BA = _average(  # (E_C51 + E_IQN) / 2
            expectation(probs_BAK, z_K) if probs_BAK is not None else None,
            quantiles_BAQ.mean(dim=-1) if quantiles_BAQ is not None else None,
        )
        fallback_B = mean_BA.argmax(dim=-1)
    use_B = torch.rand((b,), generator=generator, device=dev) < share  # Thompson for this sample?
    return torch.where(use_B, thompson_B, fallback_B)


def _average(c51: Tensor | None, iqn: Tensor | None) -> Tensor:
    """``(c51 + iqn) / 2``, or the one of the two given (the other head untrained)."""
    if c51 is not None and iqn is not None:
        return 0.5 * (c51 + iqn)
    only = c51 if c51 is not None else iqn
    assert only is not None  # thompson_direction checked that one head is given
    return only


# --- the exploration table ------------------------------------------------------------------------


class Draw(NamedTuple):
    """One branch's choice in the making: what an exploration step reads and returns."""

    q: Tensor  # [B, A] the E[Q] the choice is made on (after the steps before this one)
    actions: Tensor | None  # [B] int64 the choice so far; None: none yet (the greedy one of q)

    def chosen(self) -> Tensor:
        """The choice so far, the greedy one of ``q`` when no step has chosen."""
        return greedy(self.q) if self.actions is None else self.actions


@dataclass(frozen=True)
class Context:
    """What an exploration step may read of one branch beside its :class:`Draw` (the same for every
    step of the branch). The Thompson draws read the heads the loss trains (``network.TrainedHeads``):
    ``probs`` (C51, on ``z``) and ``quantiles`` (IQN at ``taus``, de-normalised) are built only when a
    step asks for them, None for an untrained head."""

    counts: Tensor  # [A] the branch's visit counts
    q_abs: Tensor  # [] the running |Q| reference (the q_abs signal): Boltzmann's scale
    temperature_boost: float  # the plateau ladder's multiplier of the Boltzmann temperature
    generator: torch.Generator
    probs: Callable[[], Tensor | None]  # [B, A, K] the C51 probabilities, or None
    z: Tensor  # [K] the C51 support
    quantiles: Callable[[], Tensor | None]  # [B, A, Q] the de-normalised IQN quantiles, or None
    taus: Tensor  # [Q]


Step = Callable[[Draw, Context], Draw]


def _count_bonus(d: Draw, c: Context, *, coef: float, cfg: ExploreConfig) -> Draw:
    return Draw(count_bonus(d.q, c.counts, coef), d.actions)


def _boltzmann(d: Draw, c: Context, *, coef: float, cfg: ExploreConfig) -> Draw:
    scale = c.q_abs.clamp(min=1e-6)  # E[Q] in units of its running |Q|: a temperature without units
    return Draw(d.q, boltzmann(d.q / scale, coef * c.temperature_boost, cfg.temperature_floor, c.generator))


def _thompson(d: Draw, c: Context, *, coef: float, cfg: ExploreConfig) -> Draw:
    # the share not sampled keeps the choice so far (Boltzmann's, or the greedy one)
    a = thompson_direction(c.probs(), c.z, c.quantiles(), c.taus, coef, c.generator, fallback_B=d.chosen())
    return Draw(d.q, a)


def _epsilon(d: Draw, c: Context, *, coef: float, cfg: ExploreConfig) -> Draw:
    return Draw(d.q, epsilon_greedy(d.chosen(), d.q.shape[1], coef, c.generator))


@dataclass(frozen=True)
class Method:
    """One row of :data:`METHODS`: an exploration step, the config field of its coefficient, the
    branches it acts on (None: every branch) and whether it stays in the table at coefficient 0."""

    name: str
    step: Callable[..., Draw]  # (Draw, Context, *, coef, cfg) -> Draw
    coefficient: str  # the ExploreConfig field
    branches: tuple[str, ...] | None = None
    always: bool = False


METHODS: tuple[Method, ...] = (
    Method("count_bonus", _count_bonus, "count_bonus"),
    Method("boltzmann", _boltzmann, "temperature"),
    Method("thompson", _thompson, "thompson", branches=("direction",)),
    # In the table at eps = 0 too: its two draws a step are part of every seeded run's random stream
    # (leaving them out would change every later draw of a run with epsilon off).
    Method("epsilon", _epsilon, "epsilon", always=True),
)
"""The exploration methods in the order the exploring policy applies them to each branch."""


def exploration(cfg: ExploreConfig, branch: str) -> tuple[Step, ...]:
    """The steps of :data:`METHODS` that act on ``branch`` under ``cfg`` (their coefficient above 0, or
    ``always``), in table order, each bound to its coefficient (epsilon: the branch's own,
    :meth:`ExploreConfig.epsilon_of`)."""
    steps = []
    for m in METHODS:
        # epsilon: the branch's own (agent.explore.branch_epsilon), else the common one
        coef = cfg.epsilon_of(branch) if m.coefficient == "epsilon" else float(getattr(cfg, m.coefficient))
        if (m.always or coef > 0) and (m.branches is None or branch in m.branches):
            steps.append(partial(m.step, coef=coef, cfg=cfg))
    return tuple(steps)
