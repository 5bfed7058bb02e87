"""The ``[alpha]`` config section: horizons, bootstrap, regimes, and the three models' settings."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from foxhunt.config.base import Frozen


# The models' settings live here, not beside the models (alpha.models), so that reading a config
# does not import torch and LightGBM.
class MlpConfig(Frozen):
    hidden: tuple[Annotated[int, Field(ge=1, le=4096)], ...] = Field(
        (64, 32),
        min_length=1,
        max_length=8,
        description="Hidden layer widths, input side first ((128, 64) fits about 1.4x slower).",
    )
    dropout: float = Field(0.1, ge=0.0, lt=1.0, description="Dropout after every hidden layer (0 = off).")
    lr: float = Field(2e-3, gt=0.0, le=1.0, description="Adam (AdamW) learning rate.")
    weight_decay: float = Field(1e-4, ge=0.0, le=1.0, description="AdamW decoupled weight decay (0 = off).")
    batch_size: int = Field(4096, ge=1, le=1_048_576, description="Rows per mini-batch.")
    max_epochs: int = Field(8, ge=1, le=1000, description="Most passes over the inner-training rows.")
    patience: int = Field(
        2,
        ge=1,
        le=1000,
        description="Stop after this many epochs without a better inner-validation log-loss.",
    )
    inner_validation_fraction: float = Field(
        0.2,
        gt=0.0,
        lt=1.0,
        description="Share of the training rows, the latest in time, used for early stopping.",
    )
    threads: int = Field(2, ge=1, le=256, description="torch CPU threads during the fit and prediction.")


class GbmConfig(Frozen):
    n_estimators: int = Field(
        300, ge=1, le=100_000, description="Most boosting rounds (trees); early stopping usually ends sooner."
    )
    learning_rate: float = Field(0.1, gt=0.0, le=1.0, description="Shrinkage per tree.")
    num_leaves: int = Field(31, ge=2, le=131_072, description="Most leaves per tree.")
    min_data_in_leaf: int = Field(200, ge=1, le=10_000_000, description="Fewest rows in a leaf.")
    feature_fraction: float = Field(
        0.8, gt=0.0, le=1.0, description="Share of columns sampled per tree (1 = all)."
    )
    bagging_fraction: float = Field(
        0.8, gt=0.0, le=1.0, description="Share of rows sampled every bagging_freq trees (1 = all)."
    )
    bagging_freq: int = Field(1, ge=0, le=1000, description="Resample rows every this many trees (0 = off).")
    lambda_l2: float = Field(1.0, ge=0.0, le=1e6, description="L2 penalty on leaf values.")
    early_stopping_rounds: int = Field(
        20,
        ge=1,
        le=10_000,
        description="Stop after this many trees without a better inner-validation log-loss.",
    )
    inner_validation_fraction: float = Field(
        0.2,
        gt=0.0,
        lt=1.0,
        description="Share of the training rows, the latest in time, used for early stopping.",
    )
    num_threads: int = Field(2, ge=1, le=256, description="LightGBM threads for the fit and prediction.")
    max_bin: int = Field(63, ge=2, le=1023, description="Most histogram bins per column (fewer = faster).")
    bin_sample_rows: int = Field(
        50_000, ge=1_000, le=100_000_000, description="Rows sampled to place the bin edges (fewer = faster)."
    )


class LinearConfig(Frozen):
    columns: int = Field(
        16,
        ge=1,
        le=10_000,
        description=(
            "Feature columns the linear model reads: the fold's largest |rank IC| with the horizon's "
            "forward move on its training rows (foxhunt.validation.screen)."
        ),
    )
    c: float = Field(
        0.01, gt=0.0, le=1e6, description="Inverse L2 penalty of the logistic fit (smaller = stronger)."
    )
    max_iter: int = Field(500, ge=10, le=100_000, description="Most L-BFGS iterations of the fit.")


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
    mlp: MlpConfig = Field(default_factory=MlpConfig, description="The PyTorch MLP.")
    gbm: GbmConfig = Field(default_factory=GbmConfig, description="LightGBM.")
    linear: LinearConfig = Field(
        default_factory=LinearConfig, description="L2 logistic regression on the screened columns."
    )
