"""The ``[train]`` config section: epochs, collection sizes, checkpoints ring, anomaly guard, plateau
handling and memory-derived sizing (docs/design.md §7).

Every optional mechanism has a numeric coefficient where 0 (or 1 for a multiplier) switches it off.
The defaults are the production sizes, those of the benchmarked epoch (16,384 episodes x 100 steps
per epoch, bench/epoch.py); the smoke profile shrinks them.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, model_validator

from foxhunt.config.base import Frozen
from foxhunt.validation.config import Selection


class AnomalyConfig(Frozen):
    """When an epoch's statistics stop the run instead of being saved (:mod:`foxhunt.train.guard`)."""

    loss_explosion_factor: float = Field(
        100.0,
        ge=0,
        le=1e12,
        description="An epoch's loss/total above this x the running median of the previous epochs' "
        "|loss/total| is exploding (0 = off).",
    )
    median_window: int = Field(
        20, ge=1, le=10_000, description="Previous healthy epochs the running loss median is taken over."
    )
    warmup_epochs: int = Field(
        3, ge=1, le=10_000, description="Healthy epochs of loss history needed before the explosion check."
    )
    max_consecutive: int = Field(
        1,
        ge=1,
        le=1000,
        description="Consecutive exploding-loss epochs that stop the run (earlier ones are SUSPECT: "
        "logged, never marked best). NaN/Inf and implausible selection-period results stop at once.",
    )
    max_sharpe_annual: float = Field(
        10.0,
        gt=0,
        le=1e6,
        description="Sharpe ceiling of the run's backtests (each epoch's selection period, each fold's "
        "validation) passed to backtest.metrics.implausibility.",
    )


class PlateauConfig(Frozen):
    """Frozen-learner detection and the response ladder (:mod:`foxhunt.train.plateau`)."""

    patience: int = Field(
        5,
        ge=0,
        le=10_000,
        description="Epochs the Q statistics must stay within tolerance (with a non-zero gradient) "
        "to count as a plateau (0 = detection off).",
    )
    tolerance: float = Field(
        0.01,
        ge=0,
        le=1,
        description="Largest range (max - min) of each q/<branch>/* statistic over the last patience + 1 "
        "epochs, relative to the branch's largest |statistic| there, that still counts as unchanged.",
    )
    shrink: float = Field(
        0.8, gt=0, le=1, description="Shrink-and-perturb multiplier of the head weights (1 = no shrink)."
    )
    perturb_std: float = Field(
        0.01, ge=0, le=10, description="Shrink-and-perturb Gaussian noise std added to the head weights."
    )
    temperature_boost: float = Field(
        2.0, ge=1, le=1000, description="Exploration temperature multiplier of the third rung (1 = off)."
    )
    lr_bump: float = Field(
        2.0, ge=1, le=1000, description="Learning-rate multiplier of the fourth rung (1 = off)."
    )


class SizingMode(StrEnum):
    MEMORY = "memory"  # on CUDA derive the sizes from free memory; CPU uses the profile's values
    PROFILE = "profile"  # the profile's values on every device


class SizingConfig(Frozen):
    """How episodes, batch and replay capacity follow the device's free memory
    (:mod:`foxhunt.train.memory_budget`).

    The profile's values (``train.envs``, ``agent.learn.batch``, ``agent.replay.capacity``) are
    used as they are on CPU; on CUDA the memory-derived sizes are clamped to
    ``[min(floor, profile), max_scale x profile]``.
    """

    mode: SizingMode = Field(
        SizingMode.MEMORY, description="memory: derive sizes from free CUDA memory; profile: never."
    )
    memory_share: float = Field(
        0.6, gt=0, le=0.95, description="Share of the device's free memory the run plans to fill."
    )
    replay_share: float = Field(0.6, gt=0, lt=1, description="Share of that budget for the replay buffer.")
    batch_share: float = Field(
        0.3, gt=0, lt=1, description="Share for the learner's batch activations (the rest: the envs)."
    )
    min_envs: int = Field(64, ge=1, le=1 << 20, description="Floor on memory-derived parallel episodes.")
    min_batch: int = Field(256, ge=1, le=1 << 20, description="Floor on the memory-derived batch size.")
    min_replay: int = Field(
        16_384, ge=16, le=1 << 28, description="Floor on the memory-derived replay capacity."
    )
    max_scale: float = Field(
        1.0,
        ge=1,
        le=1024,
        description="Memory-derived sizes stay at most this x the profile's values (1: the profile's "
        "values are ceilings that a small device lowers).",
    )

    @model_validator(mode="after")
    def _shares(self) -> SizingConfig:
        if self.replay_share + self.batch_share >= 1:
            raise ValueError(
                f"replay_share {self.replay_share} + batch_share {self.batch_share} must stay below 1 "
                f"(the rest of the budget holds the environments)"
            )
        return self


class TrainConfig(Frozen):
    """Folds -> epochs: each epoch collects ``envs`` episodes x ``steps_per_epoch`` steps, runs the
    learner updates (``agent.learn.updates_per_epoch``), then (``selection = train_tail``) a greedy
    backtest of the selection period (docs/design.md §7)."""

    epochs: int = Field(100, ge=1, le=1_000_000, description="Epochs per fold.")
    envs: int = Field(
        16_384,
        ge=1,
        le=1 << 22,
        description="Parallel episodes N collected per epoch (CPU: as is; CUDA: see train.sizing).",
    )
    steps_per_epoch: int = Field(
        100, ge=1, le=1_000_000, description="Steps T each parallel episode advances per epoch."
    )
    selection: Selection = Field(
        Selection.TRAIN_TAIL,
        description="Which epoch a fold reports: train_tail: the best greedy Sharpe on the selection "
        "period (the tail of the training rows); last: the last epoch (no per-epoch evaluation). "
        "The validation period is never an input to the choice.",
    )
    selection_fraction: float = Field(
        0.2,
        gt=0,
        le=0.5,
        description="train_tail: share of a fold's usable training rows, at their end, that form the "
        "selection period (training episodes end the fold's embargo rows before it); last: the share, "
        "at their end, that the per-epoch direction-gap diagnostic reads (in sample: it reads no label).",
    )
    selection_rows: int = Field(
        100_000,
        ge=0,
        le=1 << 40,
        description="train_tail: cap on the selection period's rows, which then are the last ones before "
        "the validation purge; the rows cut off return to training (0 = no cap). Each epoch backtests "
        "the whole selection period.",
    )
    ring: int = Field(3, ge=1, le=1000, description="Recent checkpoints kept for a plateau rewind.")
    checkpoint_every: int = Field(
        1,
        ge=1,
        le=1_000_000,
        description="Epochs between resumable checkpoints (the ring entry and last: the agent's whole "
        "training state, the replay buffer included, 1-2 GB at GPU sizes); a fold's last epoch is "
        "always saved. A resume redoes at most this many epochs, a plateau rewind goes back to the "
        "newest ring entry. The best checkpoint (the policy alone) is saved whenever it improves.",
    )
    log_every: int = Field(
        1, ge=1, le=1_000_000, description="Console line every k epochs (TensorBoard gets every epoch)."
    )
    members: int = Field(
        1,
        ge=1,
        le=64,
        description="Agents trained on the run's market, each with a seed of its own (member 0 is the "
        "run seed, member m the seed run.seed + m x 1,000,000); each fold reports their committee (the "
        "argmax of the members' mean E[Q], foxhunt.train.members). 1 = one agent.",
    )
    member_workers: int = Field(
        0,
        ge=0,
        le=64,
        description="Members trained at once, member 0 included (the others in spawned processes "
        "sharing the run's device); 0 = every member at once, 1 = one after the other in this process.",
    )
    anomaly: AnomalyConfig = Field(default_factory=AnomalyConfig, description="Anomaly guard.")
    plateau: PlateauConfig = Field(default_factory=PlateauConfig, description="Plateau detection, ladder.")
    sizing: SizingConfig = Field(default_factory=SizingConfig, description="Memory-derived sizes.")
