"""The config sections a backtest reads, and nothing else of the root config (issue 55, item 6).

The backtest sits below training in the layers (docs/design.md): it takes these sections, never
:class:`foxhunt.config.models.FoxhuntConfig`. A composing stage (train, tune, the front doors) passes
its root config to :meth:`BacktestSettings.of`, which reads the sections by name; the backtest
imports none of the stages above it for that.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from foxhunt.backtest.metrics import MAX_PLAUSIBLE_SHARPE_ANNUAL
from foxhunt.data.config import SynthConfig
from foxhunt.domain.config import InstrumentConfig
from foxhunt.env.config import EnvConfig
from foxhunt.validation.config import FoldConfig


class _Seeded(Protocol):
    @property
    def seed(self) -> int: ...


class _Ceiling(Protocol):
    @property
    def max_sharpe_annual(self) -> float: ...


class _Guarded(Protocol):
    @property
    def anomaly(self) -> _Ceiling: ...


class Composed(Protocol):
    """The sections of a root config a backtest reads (``[env]``, ``[folds]``, ``[instrument]``,
    ``[synth]``, ``run.seed``, ``train.anomaly.max_sharpe_annual``)."""

    @property
    def env(self) -> EnvConfig: ...
    @property
    def folds(self) -> FoldConfig: ...
    @property
    def instrument(self) -> InstrumentConfig: ...
    @property
    def synth(self) -> SynthConfig: ...
    @property
    def run(self) -> _Seeded: ...
    @property
    def train(self) -> _Guarded: ...


@dataclass(frozen=True)
class BacktestSettings:
    """What a backtest of a cache reads of the config."""

    env: EnvConfig
    folds: FoldConfig
    instrument: InstrumentConfig
    synth: SynthConfig  # the planted signal the reference rule reads
    seed: int  # run.seed: the scripted policies' random streams
    max_sharpe_annual: float = MAX_PLAUSIBLE_SHARPE_ANNUAL  # train.anomaly's plausibility ceiling

    @classmethod
    def of(cls, cfg: Composed) -> BacktestSettings:
        """The sections of a composed (root) config."""
        return cls(
            env=cfg.env,
            folds=cfg.folds,
            instrument=cfg.instrument,
            synth=cfg.synth,
            seed=cfg.run.seed,
            max_sharpe_annual=cfg.train.anomaly.max_sharpe_annual,
        )

    def with_env(self, env: EnvConfig) -> BacktestSettings:
        """These settings under another ``[env]`` (a baseline's own plan)."""
        return replace(self, env=env)
