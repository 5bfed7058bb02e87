"""Compute a feature stack: run each family on the rows, mask, guard, and report coverage.

The one place where family outputs are assembled (every caller, the cache and the leak guard
included, goes through :func:`compute_stack`). Post-processing here is deliberately minimal and
covered by the cache's schema hash: rows where a book-dependent family has no book are set to 0
(and its mask is False), and a non-finite value from a family is an error, not something to
paper over (SPEC §3: no NaN or Inf ever leaves a family).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from foxhunt.features.frame import RowInput
from foxhunt.features.layout import Layout, build_layout
from foxhunt.features.registry import FAMILIES, Family


@dataclass(frozen=True, eq=False)
class FeatureMatrix:
    """``values`` [n, W] float32 in ``layout`` column order, with a mask per family."""

    values: np.ndarray
    layout: Layout
    masks: dict[str, np.ndarray]  # family -> [n] bool, False where the family had no input

    @property
    def columns(self) -> tuple[str, ...]:
        return self.layout.columns

    def coverage(self) -> np.ndarray:
        """[W] share of rows with a non-zero value, per column (0 = computed but never informative:
        the old system found columns that never reached the model this way)."""
        if len(self.values) == 0:
            return np.zeros(self.values.shape[1])
        return (self.values != 0).mean(axis=0)


class NonFiniteFeatureError(ValueError):
    """A family produced NaN or Inf (a bug in that family, named in the message)."""


def compute_stack(
    inp: RowInput,
    families: tuple[str, ...],
    params: Mapping[str, object],
    registry: Mapping[str, Family] | None = None,
) -> FeatureMatrix:
    """Run ``families`` (names in ``registry``, default :data:`FAMILIES`) on ``inp``."""
    registry = FAMILIES if registry is None else registry
    layout = build_layout("stack", [(name, tuple(registry[name].SLOTS)) for name in families], 1)
    values = np.zeros((len(inp), layout.width), np.float32)
    masks: dict[str, np.ndarray] = {}
    for group in layout.groups:
        family = registry[group.name]
        block = np.asarray(family.compute(inp, params[group.name]))
        if block.shape != (len(inp), group.width):
            raise ValueError(
                f"feature family {group.name!r} returned shape {block.shape}, "
                f"expected ({len(inp)}, {group.width}) from its SLOTS"
            )
        bad = ~np.isfinite(block)
        if bad.any():
            cols = sorted({group.slots[j] for j in np.flatnonzero(bad.any(axis=0))})
            raise NonFiniteFeatureError(f"feature family {group.name!r} produced NaN/Inf in {cols}")
        mask = inp.book_mask.copy() if family.NEEDS_BOOK else np.ones(len(inp), bool)
        values[:, group.slice] = np.where(mask[:, None], block, 0).astype(np.float32)
        masks[group.name] = mask
    return FeatureMatrix(values=values, layout=layout, masks=masks)
