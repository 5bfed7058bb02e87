"""The validation stage's config sections: ``[folds]``, the purged walk-forward of :mod:`.folds`, and
``[labels]``, the direction labels of :mod:`.labels` (the triple barrier's parameters are
``env.plan.barrier``, :class:`foxhunt.domain.barrier.BarrierConfig`, shared with the env's plan).

As every stage's sections do, they live beside the stage's code (docs/design.md §9): the code
imports its section from here, and :mod:`foxhunt.config.models` composes the sections into the root.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator

from foxhunt.config.base import Frozen
from foxhunt.data.schemas import RowUnit

_MAX_HORIZON = 1_000_000

REFERENCE_THRESHOLD = 1.5
"""The reference rule's entry threshold (:mod:`foxhunt.backtest.reference`), in fold-normalised
standard deviations of its carrier feature; the normaliser's clip must lie above it, or the rule
could never enter."""


class Selection(StrEnum):
    """How a fold picks the checkpoint it reports (``train.selection``;
    :func:`foxhunt.validation.folds.fold_periods`).
    Neither reads the validation period, which is evaluated once, at the end, with the picked checkpoint."""

    TRAIN_TAIL = "train_tail"  # the best greedy Sharpe on the last rows of the training block
    LAST = "last"  # no selection: the last epoch's weights


class FoldScheme(StrEnum):
    EXPANDING = "expanding"  # training starts at row 0 and grows with each fold
    ROLLING = "rolling"  # training keeps a fixed number of rows and slides forward


class FoldConfig(Frozen):
    n_folds: int = Field(
        3, ge=1, le=100, description="Validation blocks in time order (smoke 3, production 5+)."
    )
    scheme: FoldScheme = Field(
        FoldScheme.EXPANDING,
        description="expanding: train on every earlier row; rolling: a fixed-size window.",
    )
    min_train_fraction: float = Field(
        0.5,
        gt=0.0,
        lt=1.0,
        description="Share of rows before the first validation block; the blocks tile the remaining rows.",
    )
    embargo_rows: int = Field(
        0,
        ge=0,
        description="Extra gap in rows between training and validation; embargo = max(this, label span).",
    )
    rolling_train_rows: int | None = Field(
        None,
        ge=1,
        description="Training rows per fold for scheme = rolling (None: the first fold's training size).",
    )
    normalise_clip: float = Field(
        5.0,
        gt=REFERENCE_THRESHOLD,
        le=1e6,
        description=(
            "Each fold's robust z-scores (feature - training median) / training scale are clipped at"
            " +-this (the scaler stores it; exports and serve apply the stored value). Above the"
            f" reference rule's entry threshold ({REFERENCE_THRESHOLD:g}), which reads the same"
            " normalised features."
        ),
    )


Horizon = Annotated[int, Field(ge=1, le=_MAX_HORIZON)]


class LabelConfig(Frozen):
    """Direction-label horizons (part of the cache's schema hash), in rows of each row unit."""

    bar_horizons: tuple[Horizon, ...] = Field(
        (60,),
        min_length=1,
        description="Direction-label horizons K in rows for row_unit = bar (strictly increasing).",
    )
    snapshot_horizons: tuple[Horizon, ...] = Field(
        (5, 20, 50, 200, 500),
        min_length=1,
        description="Direction-label horizons K in rows for row_unit = snapshot (strictly increasing).",
    )

    @field_validator("bar_horizons", "snapshot_horizons")
    @classmethod
    def _increasing(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(b <= a for a, b in zip(value, value[1:], strict=False)):
            raise ValueError(f"horizons must be strictly increasing, got {value}")
        return value

    def horizons(self, row_unit: RowUnit) -> tuple[int, ...]:
        """Direction-label horizons of a row unit."""
        return self.bar_horizons if row_unit is RowUnit.BAR else self.snapshot_horizons
