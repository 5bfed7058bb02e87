"""The root configuration model: the one place where the stages' config sections are composed.

The convention (docs/design.md §9): each stage's config section lives in ``<stage>/config.py``
beside the stage's code (``foxhunt.data.config.DataConfig`` is ``[data]``, ``foxhunt.env.config``
holds ``[env]`` with its sizing and reward sub-sections, ``foxhunt.validation.config`` ``[folds]``
...), and this module composes them into :class:`FoxhuntConfig`; only the run's own settings
(``[run]``) and the checks across sections are written here. A feature family, built-in or plug-in,
declares its ``<Family>Config`` in its own module (the plug-in contract, docs/feature-plugins.md) and
``foxhunt.features.config`` composes the families. A new stage adds its ``config.py`` and one field
here.

Every model is frozen and rejects unknown keys (:class:`foxhunt.config.base.Frozen`), so a typo in a
profile or a ``--set`` override is an error instead of a silently ignored setting. Each field's
description is its documentation (``foxhunt config show`` prints them).
"""

from __future__ import annotations

from pydantic import Field, model_validator

from foxhunt.agent.config import AgentConfig, Algo
from foxhunt.alpha.config import AlphaConfig
from foxhunt.config.base import Device, Frozen
from foxhunt.data.config import DataConfig, SynthConfig
from foxhunt.domain.config import InstrumentConfig
from foxhunt.env.config import EnvConfig
from foxhunt.features.config import FeaturesConfig
from foxhunt.serve.config import ServeConfig
from foxhunt.train.config import TrainConfig
from foxhunt.tune.config import TuneConfig
from foxhunt.validation.config import FoldConfig, LabelConfig


class RunConfig(Frozen):
    seed: int = Field(0, ge=0, description="Seed for every random generator of a run (recorded with it).")
    device: Device = Field(Device.AUTO, description="Torch device: auto (CUDA if present), cpu or cuda.")
    threads: int = Field(
        0,
        ge=0,
        le=1024,
        description="CPU threads of torch during training (0 = torch's default). Small networks run "
        "fastest on 1: a second thread costs more in synchronisation than it computes.",
    )


class FoxhuntConfig(Frozen):
    """The whole resolved configuration of a foxhunt run."""

    run: RunConfig = Field(default_factory=RunConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    instrument: InstrumentConfig = Field(
        default_factory=InstrumentConfig, description="Contract spec overrides (None: from the data)."
    )
    synth: SynthConfig = Field(default_factory=lambda: SynthConfig())
    features: FeaturesConfig = Field(default_factory=FeaturesConfig)
    labels: LabelConfig = Field(default_factory=LabelConfig)
    folds: FoldConfig = Field(default_factory=FoldConfig)
    alpha: AlphaConfig = Field(default_factory=AlphaConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    serve: ServeConfig = Field(
        default_factory=ServeConfig, description="foxhunt serve: warm-up and the fail-safe on bad streams."
    )
    tune: TuneConfig = Field(
        default_factory=TuneConfig, description="foxhunt tune: the search space, objective and budget."
    )

    @model_validator(mode="after")
    def _plateau_reads_q(self) -> FoxhuntConfig:
        """The plateau ladder judges a frozen learner by the DQN learner's Q statistics; a PPO learner
        reports none, so under agent.algo = ppo the ladder on would be a setting that never acts."""
        if self.agent.algo is Algo.PPO and self.train.plateau.patience > 0:
            raise ValueError(
                f"train.plateau (patience {self.train.plateau.patience}) reads the DQN learner's Q "
                "statistics and never acts under agent.algo = ppo: set train.plateau.patience=0 (the "
                "ladder off) or agent.algo=dqn"
            )
        return self
