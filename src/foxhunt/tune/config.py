"""The ``[tune]`` config section: a hyperparameter search's space, objective and budget.

A parameter is a table keyed by the config path it sets, with a range or a list of choices::

    [tune.params."agent.learn.lr"]
    low = 1e-4
    high = 1e-2
    log = true                      # sampled uniformly in log space

    [tune.params."agent.network.hidden"]
    low = 16
    high = 64
    step = 16                       # integer bounds (and step): an integer parameter

    [tune.params."agent.network.symmetry"]
    choices = ["mirror", "none"]    # categorical

Whether every key is a config value, and every bound one it accepts, is checked when a study starts
(:func:`foxhunt.tune.space.check_space`, through the ``--set`` machinery), before it builds anything.

This module imports only pydantic and the config base: the root config model imports it.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

from pydantic import Field, model_validator

from foxhunt.config.base import Frozen


class Objective(StrEnum):
    """What a trial is ranked on, over each fold's selection period (never its validation period:
    :mod:`foxhunt.tune.objective`), averaged over the trial's seeds."""

    NET_PNL = "net_pnl"  # mean net PnL of the folds' reported epochs over their selection periods
    CAPTURE = "capture"  # the agent's selection-period net PnL over the reference rule's, summed over folds


class StudyDirection(StrEnum):
    """Which way a study optimises its objective (Optuna's study direction; not a trade's direction,
    :class:`foxhunt.domain.actions.Direction`)."""

    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


class Pruner(StrEnum):
    MEDIAN = "median"  # stop a trial whose epoch result is below the median of earlier trials' there
    NONE = "none"  # every trial runs all its epochs


Choice = bool | int | float | str
"""A categorical choice: the values Optuna stores (and TOML writes) as they are."""


class ParamSpaceConfig(Frozen):
    """One searched parameter: ``low``/``high`` (``log``, ``step``) or ``choices``."""

    low: int | float | None = Field(None, description="Lowest value (with high). Integer bounds: an integer.")
    high: int | float | None = Field(None, description="Highest value, included.")
    log: bool = Field(False, description="Sample uniformly in log space (low must be > 0).")
    step: int | float | None = Field(None, gt=0, description="Grid step from low (None: continuous).")
    choices: tuple[Choice, ...] | None = Field(None, min_length=1, description="Categorical values.")

    @model_validator(mode="after")
    def _range_or_choices(self) -> ParamSpaceConfig:
        if self.choices is not None:
            if (self.low, self.high, self.step) != (None, None, None) or self.log:
                raise ValueError("give either choices or low/high (log, step), not both")
            return self
        if self.low is None or self.high is None:
            raise ValueError("give low and high (or choices)")
        if any(isinstance(v, bool) for v in (self.low, self.high, self.step)):
            raise ValueError("low, high and step are numbers, not booleans")
        if not self.low < self.high:
            raise ValueError(f"low {self.low} must be below high {self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"log = true needs low > 0 (got {self.low})")
        if self.log and self.step is not None:
            raise ValueError("log and step cannot be combined")
        return self

    @property
    def is_int(self) -> bool:
        """Integer bounds (and step): Optuna's ``suggest_int``; any float among them: ``suggest_float``."""
        return self.choices is None and all(isinstance(v, int) for v in (self.low, self.high, self.step or 1))

    def probes(self) -> list[Any]:
        """The values whose acceptance by the config proves the whole space valid: every choice, or
        both bounds and, for a float range, a fractional point between them (a float range on an integer
        setting fails there, not at the first trial)."""
        if self.choices is not None:
            return list(self.choices)
        assert self.low is not None and self.high is not None  # the validator's guarantee
        if self.is_int:
            return [self.low, self.high]
        # A fractional value inside the range: an integer setting refuses it (16.5 of 16..64).
        inside = math.floor(self.low) + 0.5
        if not self.low < inside < self.high:
            inside = (self.low * self.high) ** 0.5 if self.log else (self.low + self.high) / 2
        return [float(self.low), float(inside), float(self.high)]


class TuneConfig(Frozen):
    """``foxhunt tune``: an Optuna study over ``params`` (docs/tune.md)."""

    params: dict[str, ParamSpaceConfig] = Field(
        default_factory=dict,
        description="Searched parameters keyed by the config path they set (agent.learn.lr ...).",
    )
    objective: Objective = Field(
        Objective.NET_PNL,
        description="Computed on each fold's selection period (the tail of its training rows), never on "
        "its validation period: net_pnl: mean net PnL over the folds; capture: agent / reference rule net "
        "PnL summed over the folds (needs the rule's feature column and a rule that makes money there).",
    )
    direction: StudyDirection = Field(
        StudyDirection.MAXIMIZE, description="Maximize or minimize the objective."
    )
    trials: int = Field(20, ge=1, le=100_000, description="Trials of the study (--trials overrides).")
    seeds: int = Field(
        1,
        ge=1,
        le=1000,
        description="Seeds per trial (run.seed, run.seed + 1, ...): the trial's value is their mean.",
    )
    startup_trials: int = Field(
        5, ge=0, le=100_000, description="Random trials before the TPE sampler models the results."
    )
    pruner: Pruner = Field(Pruner.MEDIAN, description="median: stop trials behind the median; none: off.")
    prune_after_trials: int = Field(
        2, ge=0, le=100_000, description="Finished trials before the pruner stops any trial."
    )
    prune_warmup_epochs: int = Field(
        1, ge=0, le=100_000, description="Epochs (over a trial's folds and seeds) never pruned."
    )
    gpus_per_trial: float | None = Field(
        None,
        ge=0,
        le=64,
        description="GPU share each trial declares to the executor (0.25: four trials share one GPU; "
        "0: CPU trials; None: the visible GPUs divided among the workers, at most 1).",
    )
    heartbeat_seconds: int = Field(
        10,
        ge=1,
        le=3600,
        description="A running trial records that it is alive this often; one silent for 3x as long "
        "(its process was killed) is failed and re-run with the same parameters.",
    )
    retries: int = Field(
        2, ge=0, le=100, description="Re-runs of a trial whose process died (0 = none: counted as failed)."
    )
