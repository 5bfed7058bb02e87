"""Compute a feature stack: run each family on the rows, mask, guard, and report coverage.

The one place where family outputs are assembled (every caller, the cache and the leak guard
included, goes through :func:`compute_stack`). Post-processing here is deliberately minimal and
covered by the cache's schema hash: rows where a book-dependent family has no book are set to 0
(and its mask is False), a family's ``DEPTH_SLOTS`` are 0 on top-of-book input and its
``TRADE_SLOTS`` on rows without trades (listed in :attr:`FeatureMatrix.masked`), and a non-finite
value from a family is an error, not something to paper over (no NaN or Inf ever leaves a family).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from foxhunt.data.schemas import MaskReason
from foxhunt.features._kernels import Carry
from foxhunt.features.frame import RowInput
from foxhunt.features.layout import Layout, build_layout
from foxhunt.features.registry import FAMILIES, Family


@dataclass(frozen=True, eq=False)
class FeatureMatrix:
    """``values`` [n, W] float32 in ``layout`` column order, with a mask per family."""

    values: np.ndarray
    layout: Layout
    masks: dict[str, np.ndarray]  # family -> [n] bool, False where the family had no input
    # column -> why it is 0 (on every row for top-of-book input, on the rows without trades)
    masked: dict[str, MaskReason] = field(default_factory=dict)

    @property
    def columns(self) -> tuple[str, ...]:
        return self.layout.columns

    def coverage(self) -> np.ndarray:
        """[W] share of rows with a non-zero value, per column (0 = computed but never informative:
        such a column costs compute and state width and carries nothing to the model)."""
        if len(self.values) == 0:
            return np.zeros(self.values.shape[1])
        return (self.values != 0).mean(axis=0)


def mask_note(masked: Mapping[str, str]) -> str:
    """One line saying which columns the input could not fill, e.g. ``masked (0): 28 book-depth
    columns (top-of-book data: levels 2-10 absent)``; "" when none are."""
    counts: dict[MaskReason, int] = {}
    for reason in masked.values():
        counts[MaskReason(reason)] = counts.get(MaskReason(reason), 0) + 1
    if not counts:
        return ""
    return "masked (0): " + "; ".join(f"{n} {r.kind} columns ({r.cause})" for r, n in sorted(counts.items()))


class NonFiniteFeatureError(ValueError):
    """A family produced NaN or Inf (a bug in that family, named in the message)."""


def resumable(family: Family) -> bool:
    """Whether a family's ``compute`` takes a ``carry`` (the built-in ones: runs in chunks of rows)."""
    return "carry" in inspect.signature(family.compute).parameters


def compute_stack(
    inp: RowInput,
    families: tuple[str, ...],
    params: Mapping[str, object],
    registry: Mapping[str, Family] | None = None,
    carry: dict[str, Carry] | None = None,
) -> FeatureMatrix:
    """Run ``families`` (names in ``registry``, default :data:`FAMILIES`) on ``inp``.

    ``carry``: each family's state after the rows before ``inp`` (a chunk of a stream: foxhunt serve),
    filled in on the first chunk and advanced past ``inp``; every family must be :func:`resumable`.
    None: the batch. The masks below are per row, so chunks stack as the batch does."""
    registry = FAMILIES if registry is None else registry
    layout = build_layout("stack", [(name, tuple(registry[name].SLOTS)) for name in families], 1)
    values = np.zeros((len(inp), layout.width), np.float32)
    masks: dict[str, np.ndarray] = {}
    masked: dict[str, MaskReason] = {}
    no_trades = None if inp.volume_known().all() else ~inp.volume_known()
    for group in layout.groups:
        family = registry[group.name]
        if carry is None:
            block = np.asarray(family.compute(inp, params[group.name]))
        else:
            state = carry.setdefault(group.name, Carry())
            block = np.asarray(family.compute(inp, params[group.name], carry=state))  # type: ignore[call-arg]
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
        # Columns the input cannot fill: 0 ("no signal"), never a value computed from absent data.
        depth = set(getattr(family, "DEPTH_SLOTS", ())) if inp.top_of_book else set()
        trade = set(getattr(family, "TRADE_SLOTS", ())) if no_trades is not None else set()
        names = group.names  # built per access: once per group, not per slot
        for j, slot in enumerate(group.slots):
            if slot in depth:
                values[:, group.offset + j] = 0.0
                masked[names[j]] = MaskReason.TOP_OF_BOOK
            elif slot in trade:
                values[no_trades, group.offset + j] = 0.0
                masked[names[j]] = MaskReason.NO_TRADES
    return FeatureMatrix(values=values, layout=layout, masks=masks, masked=masked)
