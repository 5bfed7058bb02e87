"""The best trial of a study as a TOML profile: ``foxhunt train --config DIR/best.toml`` trains it.

The profile is the tuned config with the best trial's parameters set
(:func:`foxhunt.config.loader.with_overrides`), written whole by
:func:`foxhunt.config.toml_text.config_toml`: the config the trial trained, read back to the same
config hash, except under a profile's ``train.selection = last``, whose trials train with
``train_tail`` (:func:`foxhunt.tune.objective.trial_config`) and whose best profile keeps ``last``
(the header says so). Only a COMPLETE trial can be best: a pruned trial has no value, and a trial
the anomaly guard stopped is FAILED.
"""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from foxhunt.atomic import write_text
from foxhunt.config.loader import with_overrides
from foxhunt.config.models import FoxhuntConfig
from foxhunt.config.toml_text import config_toml
from foxhunt.tune.objective import TRIAL_SELECTION, trial_config
from foxhunt.tune.study import ranked_on

BEST_PROFILE = "best.toml"


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    """The study's best COMPLETE trial (None before any trial completed)."""
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return None
    return study.best_trial


def undecided(study: optuna.Study) -> tuple[float, int] | None:
    """``(value, n)`` when the study's ``n`` COMPLETE trials leave nothing to choose: every one scored
    0 (no trial traded, or none moved the objective), or two or more scored the same; ``None`` when a
    best trial exists in earnest (or none completed). Optuna still names the first as best."""
    values = [t.value for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    if not values or len(set(values)) > 1 or (values[0] != 0 and len(values) < 2):
        return None
    return float(values[0]), len(values)


def undecided_text(value: float, n: int) -> str:
    """What is said instead of "best: trial 0" when :func:`undecided`."""
    if value == 0:
        return f"no trial scored: all {n} completed trials scored 0"
    return f"no trial scored above another: all {n} completed trials scored {value:,.6g}"


def best_config(cfg: FoxhuntConfig, trial: FrozenTrial) -> FoxhuntConfig:
    """``cfg`` with the trial's parameters set as ``--set`` would (``cfg`` the study's trial config:
    the config the trial trained)."""
    return with_overrides(cfg, trial.params, where=f"trial {trial.number}")


def write_best(cfg: FoxhuntConfig, study: optuna.Study, out: Path) -> Path | None:
    """``out/best.toml`` for the best trial (None, and nothing written, when no trial completed).

    ``cfg`` is the tuned config as the user gave it (not :func:`trial_config`'s): the best parameters
    are set on it, so a profile's ``train.selection = last`` stays in its best profile."""
    trial = best_trial(study)
    if trial is None:
        return None
    _, overridden = trial_config(cfg)
    trained = (
        f"Its trials trained with train.selection = {TRIAL_SELECTION.value} (ranked on the selection "
        f"periods); this profile keeps train.selection = {cfg.train.selection.value}.\n"
        if overridden
        else ""
    )
    header = (
        f"foxhunt tune: the best trial ({trial.number}) of study {study.study_name}, "
        f"{cfg.tune.objective.value} {trial.value:.6g} over the folds' {ranked_on(study).value} periods "
        "(what the trials were ranked on; tune.html shows its validation numbers and what they are worth).\n"
        f"Parameters: {', '.join(f'{k} = {v!r}' for k, v in trial.params.items())}.\n"
        f"{trained}"
        f"Train it: foxhunt train --config {BEST_PROFILE} (or foxhunt run, backtest ...)."
    )
    return write_text(Path(out) / BEST_PROFILE, config_toml(best_config(cfg, trial), header))
