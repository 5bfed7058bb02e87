"""The ``[alpha]`` config section: horizons, bootstrap, regimes, and the two models' settings."""

from __future__ import annotations

from pydantic import Field

from foxhunt.alpha.models import GbmParams, MlpParams
from foxhunt.config.base import Frozen


class AlphaConfig(Frozen):
    horizons: tuple[int, ...] | None = Field(
        None, description="Direction horizons in rows (None: the labels section's for the row unit)."
    )
    n_boot: int = Field(
        1000,
        ge=100,
        le=20_000,
        description="Block-bootstrap replicates per interval (the Bonferroni tails are 0.05 / (2 m) each).",
    )
    family_error: float = Field(
        0.05,
        gt=0.0,
        le=0.2,
        description=(
            "Family-wise error of the verdict over all models x horizons: each of the m intervals is "
            "Bonferroni-adjusted to the level 1 - family_error / m."
        ),
    )
    min_block: int = Field(
        20, ge=1, le=100_000, description="Shortest bootstrap block in rows (blocks are max(horizon, this))."
    )
    max_blocks: int = Field(
        200,
        ge=20,
        le=100_000,
        description="At most this many bootstrap blocks (longer blocks keep slow predictions' dependence).",
    )
    permutation_repeats: int = Field(
        2, ge=1, le=20, description="Repeats of the MLP's group permutation test."
    )
    mlp: MlpParams = Field(default_factory=MlpParams, description="The PyTorch MLP.")
    gbm: GbmParams = Field(default_factory=GbmParams, description="LightGBM.")
