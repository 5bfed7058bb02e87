"""The root configuration model and its sections.

Every model is frozen and rejects unknown keys, so a typo in a profile or a ``--set`` override is
an error instead of a silently ignored setting. Each field's description is its documentation
(``foxhunt config show`` prints them). Later stages add their own section here.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from foxhunt.agent.config import AgentConfig
from foxhunt.alpha.config import AlphaConfig
from foxhunt.config.base import Frozen
from foxhunt.config.data import DataConfig
from foxhunt.config.features import FeaturesConfig
from foxhunt.config.synth import SynthConfig
from foxhunt.env.config import EnvConfig
from foxhunt.train.config import TrainConfig
from foxhunt.validation.folds import FoldParams
from foxhunt.validation.labels import LabelParams


class Device(StrEnum):
    AUTO = "auto"  # CUDA when available, else CPU
    CPU = "cpu"
    CUDA = "cuda"


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
    synth: SynthConfig = Field(default_factory=lambda: SynthConfig())
    features: FeaturesConfig = Field(default_factory=FeaturesConfig)
    labels: LabelParams = Field(default_factory=LabelParams)
    folds: FoldParams = Field(default_factory=FoldParams)
    alpha: AlphaConfig = Field(default_factory=AlphaConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
