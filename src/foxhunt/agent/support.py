"""Growth of the C51 support: the half-width ``v_max`` follows the targets' scale up, never down.

The support ``z = v_max · (2i / (K - 1) - 1)`` (:func:`foxhunt.agent.distributional.support`) must cover
the bootstrapped targets, whose scale is unknown before training and grows as the Q values do; it must
also stay fine enough to resolve them (docs/design.md §6). Each update:

1. **Reach** ``ρ``: the ``SUPPORT_QUANTILE`` quantile of ``|y|`` over every IQN and MSE target (real
   units). A quantile, not the maximum: one wild early bootstrap would otherwise widen the support for
   good and coarsen its resolution; the rarer tail is clipped onto the end atoms by the projection.
2. **Factor** ``f = g^n``, ``n >= 0`` the fewest growth steps with ``ρ <= c · v_max · g^n`` (``g`` =
   ``NetworkConfig.support_growth``, ``c`` = ``SUPPORT_COVER``); ``g = 1`` keeps the support fixed.
3. ``v_max <- f · v_max`` in the online network; the target network takes the same ``v_max``, so both
   distributions live on one support.

The support's state is each network's ``v_max`` buffer (saved with the network, whose forward reads it):
:class:`SupportGrowth` holds only the rule and owns no state of its own. Everything stays on the device
(no ``.item()``, no branch on a tensor), so it runs inside a compiled or graph-captured update.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from foxhunt.agent.network import QNetwork

__all__ = ["SUPPORT_COVER", "SUPPORT_QUANTILE", "SupportGrowth", "growth_factor", "target_reach"]

SUPPORT_COVER = 0.9
"""The support grows while the reach of the targets exceeds this share of ``v_max``."""

SUPPORT_QUANTILE = 0.99
"""Share of the targets' ``|y|`` the support must cover (the rest is clipped onto the end atoms)."""


def target_reach(targets: Sequence[Tensor], quantile: float = SUPPORT_QUANTILE) -> Tensor:
    """``ρ``: the ``quantile`` quantile of ``|y|`` over every element of ``targets`` (any shapes): ``[]``."""
    return torch.quantile(torch.cat([y.abs().flatten() for y in targets]).float(), quantile)


def growth_factor(v_max: Tensor, reach: Tensor, growth: float, cover: float = SUPPORT_COVER) -> Tensor:
    """The factor ``g^n`` by which ``c · v_max · g^n`` covers ``max |reach|`` (1 if it does already): ``[]``.

    ``n = ceil(log(t / (c v)) / log g)`` for ``t = max |reach|`` over its finite elements (a non-finite
    reach is ignored). ``growth == 1`` is the fixed support: factor 1. Taken a hair low (``- 1e-4``) so
    that ``t = c v g^n`` exactly gives ``n``, not ``n + 1``; the ``where`` adds the step that this (or
    rounding) may leave missing.
    """
    one = torch.ones_like(v_max)
    if growth == 1.0:
        return one
    a = reach.detach().to(v_max.dtype).abs()
    t = torch.where(torch.isfinite(a), a, torch.zeros_like(a)).amax()
    covered = cover * v_max
    steps = torch.ceil(torch.log(torch.clamp_min(t / covered, 1.0)) / math.log(growth) - 1e-4).clamp_min(0)
    factor = torch.pow(growth * one, steps)
    return torch.where(t > covered * factor, factor * growth, factor)


class SupportGrowth:
    """The support rule of an online network and its target: grow the online ``v_max`` to cover the
    reach, copy it to the target."""

    def __init__(self, online: QNetwork, target: QNetwork, cover: float = SUPPORT_COVER) -> None:
        self.online, self.target = online, target
        self.growth = online.cfg.support_growth
        self.cover = cover

    @torch.no_grad()
    def step(self, reach: Tensor) -> Tensor:
        """Grow both networks' ``v_max`` in place to cover ``reach``; returns the factor applied ``[]``."""
        factor = growth_factor(self.online.v_max, reach, self.growth, self.cover)
        if self.growth != 1.0:  # a fixed support needs neither the multiply nor the copy
            self.online.v_max.mul_(factor)
        self.target.v_max.copy_(self.online.v_max)
        return factor
