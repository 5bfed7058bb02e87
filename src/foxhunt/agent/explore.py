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

Every draw goes through :func:`uniform` or :func:`integers`, whose ``generator`` may also be a
:class:`Dice`: one that records the draws it makes (their :class:`DrawSpec` plan), or one that hands
out numbers drawn before in that plan's order. A compiled exploring decision
(:class:`foxhunt.agent.actor.CompiledExploring`) takes its random numbers that way: ``torch.compile``
cannot take a generator, and the same draws from the same generator give the same numbers, so its
choices are the eager ones wherever its E[Q] rounds alike.
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
    "Dice",
    "Draw",
    "DrawSpec",
    "Method",
    "boltzmann",
    "count_bonus",
    "epsilon_greedy",
    "exploration",
    "greedy",
    "integers",
    "thompson_direction",
    "uniform",
]

_TINY = 1e-20  # keeps log(u) finite for a uniform draw of exactly 0


@dataclass(frozen=True)
class DrawSpec:
    """One draw of an exploring call: ``torch.rand(shape, dtype)`` (``high`` 0) or
    ``torch.randint(0, high, shape)``."""

    shape: tuple[int, ...]
    dtype: torch.dtype | None  # None: the default float dtype, as torch.rand
    high: int = 0

    def draw(self, generator: torch.Generator, device: torch.device) -> Tensor:
        if self.high:
            return torch.randint(0, self.high, self.shape, generator=generator, device=device)
        return torch.rand(self.shape, generator=generator, device=device, dtype=self.dtype)


class Dice:
    """The random numbers of one exploring call, in the order its steps ask for them.

    ``Dice(generator=g)`` draws each from ``g`` when asked, as the plain calls would, and records what
    it drew (:attr:`plan`); ``Dice(drawn=[...])`` hands out tensors drawn before from such a plan
    (:meth:`DrawSpec.draw`), in order, drawing nothing (inside ``torch.compile``)."""

    def __init__(self, generator: torch.Generator | None = None, drawn: list[Tensor] | None = None) -> None:
        self.generator, self.drawn = generator, drawn
        self.plan: list[DrawSpec] = []
        self.taken = 0

    def take(self, spec: DrawSpec, device: torch.device) -> Tensor:
        """The next number drawn before, or ``spec`` drawn now and recorded."""
        if self.drawn is not None:
            x = self.drawn[self.taken]
            self.taken += 1
            return x
        self.plan.append(spec)
        assert self.generator is not None
        return spec.draw(self.generator, device)


def uniform(
    generator: torch.Generator | Dice | None,
    shape: tuple[int, ...],
    device: torch.device,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """``U[0, 1)`` draws of ``shape``: ``torch.rand`` from ``generator``, or a :class:`Dice`'s next."""
    if not isinstance(generator, Dice):
        return torch.rand(shape, generator=generator, device=device, dtype=dtype)
    if generator.drawn is not None:  # inside a compiled decision: nothing built, the next tensor
        return generator.take(_NO_SPEC, device)
    return generator.take(DrawSpec(tuple(shape), dtype), device)


def integers(
    generator: torch.Generator | Dice | None, high: int, shape: tuple[int, ...], device: torch.device
) -> Tensor:
    """Uniform ``0 .. high - 1`` int64 draws of ``shape``: ``torch.randint``, or a :class:`Dice`'s next."""
    if not isinstance(generator, Dice):
        return torch.randint(0, high, shape, generator=generator, device=device)
    if generator.drawn is not None:
        return generator.take(_NO_SPEC, device)
    return generator.take(DrawSpec(tuple(shape), torch.int64, high), device)


_NO_SPEC = DrawSpec((), None)  # what a Dice of numbers drawn before is asked for (it reads none)


def greedy(q_BA: Tensor) -> Tensor:
    """``argmax_a q[b, a]`` (the first maximum on ties): ``[B]`` int64."""
    return q_BA.argmax(dim=-1)


def epsilon_greedy(
    actions_B: Tensor, n_values: int, eps: Tensor | float, generator: torch.Generator | Dice | None = None
) -> Tensor:
    """Replace each action, with probability ``eps``, by a value drawn uniformly from ``0 .. n_values-1``.

    One branch: ``actions_B [B]`` int64 are the greedy choices, ``n_values`` the branch's full range
    (``BranchConfig``), so every value of the branch is reachable. A uniform draw can equal the greedy
    action, so the chance of a *different* action is ``eps (n - 1) / n``. Returns ``[B]`` int64.
    """
    dev = actions_B.device
    random_B = integers(generator, n_values, actions_B.shape, dev)  # uniform
    explore_B = uniform(generator, actions_B.shape, dev) < eps  # coin per sample
    return torch.where(explore_B, random_B, actions_B)


def boltzmann(
    q_BA: Tensor, temperature: Tensor | float, floor: float, generator: torch.Generator | Dice | None = None
) -> Tensor:
    """Sample ``a ~ softmax(q / T)`` with ``T = max(temperature, floor)``; greedy when ``temperature <= 0``.

    ``q_BA`` should already be on a comparable scale (the caller divides E[Q] by its |Q| reference).
    Sampling uses the Gumbel-max trick, ``argmax_a (q_a / T + G_a)`` with ``G = -ln(-ln U)``, which is an
    exact draw from the softmax and needs no multinomial. Returns ``[B]`` int64.
    """
    u_BA = uniform(generator, q_BA.shape, q_BA.device, q_BA.dtype)
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
    generator: torch.Generator | Dice | None = None,
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
    u_BA = uniform(generator, (b, a), dev, given.dtype)  # one u per action
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
    use_B = uniform(generator, (b,), dev) < share  # Thompson for this sample?
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
    generator: torch.Generator | Dice  # where the draws come from (a Dice: recorded, or drawn before)
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
