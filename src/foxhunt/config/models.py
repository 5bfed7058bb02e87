"""The root configuration model and its sections.

Every model is frozen and rejects unknown keys, so a typo in a profile or a ``--set`` override is
an error instead of a silently ignored setting. Each field's description is its documentation
(``foxhunt config show`` prints them). Later stages add their own section here.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, model_validator

from foxhunt.agent.config import AgentConfig
from foxhunt.alpha.config import AlphaConfig
from foxhunt.config.base import Frozen
from foxhunt.config.data import DataConfig
from foxhunt.config.features import FeaturesConfig
from foxhunt.config.instrument import InstrumentConfig
from foxhunt.config.synth import SynthConfig
from foxhunt.data.schemas import RowUnit
from foxhunt.env.config import EnvConfig
from foxhunt.serve.config import ServeConfig
from foxhunt.train.config import TrainConfig
from foxhunt.tune.config import TuneConfig
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
    instrument: InstrumentConfig = Field(
        default_factory=InstrumentConfig, description="Contract spec overrides (None: from the data)."
    )
    synth: SynthConfig = Field(default_factory=lambda: SynthConfig())
    features: FeaturesConfig = Field(default_factory=FeaturesConfig)
    labels: LabelParams = Field(default_factory=LabelParams)
    folds: FoldParams = Field(default_factory=FoldParams)
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
    def _tune_space_is_config(self) -> FoxhuntConfig:
        """Every searched key is a value of this config that accepts its bounds (or choices), checked
        by setting each as ``--set`` would: a typo in [tune] is an error at load, not at trial 0."""
        from foxhunt.tune.space import check_space  # it validates configs: imported when one is checked

        check_space(self)
        return self

    @model_validator(mode="after")
    def _barriers_are_the_plan(self) -> FoxhuntConfig:
        """The labels' triple barrier is the env plan's exits (SPEC §5): the aux outcome targets and
        the oracle read the labels as what a plan opened now would meet, so the two must agree."""
        lab, plan = self.labels, self.env.plan
        pairs = [
            ("labels.profit_mult", lab.profit_mult, "env.plan.profit_mult", plan.profit_mult),
            ("labels.stop_mult", lab.stop_mult, "env.plan.stop_mult", plan.stop_mult),
            ("labels.barrier_vol_window", lab.barrier_vol_window, "env.plan.vol_window", plan.vol_window),
        ]
        # The plan's timeout counts rows of the configured unit; so does the label's of that unit.
        horizon_key = (
            "labels.barrier_horizon_bars"
            if self.data.row_unit is RowUnit.BAR
            else "labels.barrier_horizon_snapshots"
        )
        pairs.append(
            (horizon_key, lab.barrier_horizon(self.data.row_unit), "env.plan.target_bars", plan.target_bars)
        )
        differ = [f"{a} = {x} but {b} = {y}" for a, x, b, y in pairs if x != y]
        if differ:
            raise ValueError("the labels' triple barrier must be the env plan's exits: " + "; ".join(differ))
        return self
