"""What a study ranks its trials on: each fold's **selection period**, never its validation period.

A fold's reported checkpoint is picked on the selection period (the tail of its training rows,
:mod:`foxhunt.train.selection`) and its validation period is evaluated once, at the fold's end. A
study that ranked its trials by the validation numbers would choose hyper-parameters on the period
it then reports: the best trial's validation result would be the maximum of many noisy draws, not a
held-out number. So the objective (``tune.objective``) is computed on the selection periods, from
the numbers every fold result records of its reported epoch (``fold["selection"]``: ``net_pnl``,
``sharpe_annual``, ``rule_net_pnl``), and the same formula over the validation periods is recorded
beside it, reported and never ranked on (docs/tune.md, "The objective").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from foxhunt.errors import ConfigError
from foxhunt.report.schema import SELECTION_KEY
from foxhunt.tune.config import Objective
from foxhunt.validation.config import Selection

if TYPE_CHECKING:
    from foxhunt.config.models import FoxhuntConfig
    from foxhunt.features.cache_file import FeatureCache


class Period(StrEnum):
    """The rows of each fold an objective is computed on."""

    SELECTION = "selection"  # the tail of the fold's training rows: what trials are ranked on
    VALIDATION = "validation"  # the fold's validation rows: reported beside, never ranked on


RANKED_ON = Period.SELECTION
"""The period this version of ``foxhunt tune`` ranks trials on (recorded on every study it creates)."""


class Undefined(Exception):
    """A trial's objective has no value (capture where the reference rule made no money)."""


def fold_numbers(fold: Mapping[str, Any], period: Period) -> tuple[float, float | None]:
    """``(agent net PnL, reference rule net PnL or None)`` of one fold result over ``period``.

    Raises ``KeyError`` naming the fold when it recorded no selection-period result (a fold trained
    with ``train.selection = last``: :func:`trial_config` trains the trials with ``train_tail``)."""
    if period is Period.SELECTION:
        sel = fold.get(SELECTION_KEY) or {}
        if sel.get("net_pnl") is None:
            raise KeyError(f"fold {fold.get('fold')} recorded no selection-period result")
        return float(sel["net_pnl"]), sel.get("rule_net_pnl")
    from foxhunt.backtest.capture import RULE

    rule = (fold.get("baselines") or {}).get(RULE)
    return float(fold["net_pnl"]), None if rule is None else rule["net_pnl"]


def period_value(folds: Sequence[Mapping[str, Any]], objective: Objective, period: Period) -> float | None:
    """``objective`` of one seed's fold results over ``period``: the mean net PnL over the folds, or the
    capture (the agent's net PnL summed over the folds / the rule's); None where the capture is
    undefined (no rule in some fold, or a rule that made no money: :func:`capture_ratio`)."""
    numbers = [fold_numbers(f, period) for f in folds]
    if objective is Objective.NET_PNL:
        return float(np.mean([agent for agent, _ in numbers]))
    from foxhunt.backtest.capture import capture_ratio

    if not numbers or any(rule is None for _, rule in numbers):
        return None
    return capture_ratio(sum(a for a, _ in numbers), sum(float(r) for _, r in numbers if r is not None))


def seed_value(folds: Sequence[Mapping[str, Any]], objective: Objective) -> float:
    """One seed's objective, the value the study ranks: over the selection periods only."""
    value = period_value(folds, objective, Period.SELECTION)
    if value is None:
        raise Undefined(
            "capture is undefined: the reference rule made no money over the folds' selection periods"
        )
    return value


def validation_numbers(folds: Sequence[Mapping[str, Any]], objective: Objective) -> dict[str, float | None]:
    """The same objective over the validation periods (``value``) and over the last fold's alone
    (``last_fold``), and the number of folds (:func:`out_of_sample`). Reported, never ranked on."""
    return {
        "value": period_value(folds, objective, Period.VALIDATION),
        "last_fold": period_value(folds[-1:], objective, Period.VALIDATION),
        "folds": len(folds),
    }


def out_of_sample(ranked: Period, folds: int) -> dict[str, bool]:
    """Which of a trial's validation numbers (:func:`validation_numbers`) are out of sample for the
    choice of its hyper-parameters. None where the study ranked on them. Otherwise the last fold's;
    all folds' only with one fold: a walk-forward fold's validation rows are training rows of the
    next fold, whose selection period (the tail of its training rows) overlaps them, so a study ranking
    on the selection periods reads every validation period but the last."""
    clean = ranked is Period.SELECTION
    return {"value": clean and folds == 1, "last_fold": clean}


def mean_or_none(values: Sequence[float | None]) -> float | None:
    """The mean over a trial's seeds; None when any seed's is undefined (or there are none)."""
    if not values or any(v is None for v in values):
        return None
    return float(np.mean([float(v) for v in values if v is not None]))


TRIAL_SELECTION = Selection.TRAIN_TAIL
"""The ``train.selection`` every trial trains with: the one that gives the folds a selection period to
rank it on."""


def trial_config(cfg: FoxhuntConfig) -> tuple[FoxhuntConfig, str | None]:
    """The config a study's trials train (their parameters set on it), and the line that says why
    when it is not ``cfg``.

    Trials are ranked on the folds' selection periods, never on the validation periods they report
    (module docstring); ``train.selection = last`` leaves no selection period, so under it the trials
    train with ``train_tail``. The ``[tune]`` space is checked first
    (:func:`foxhunt.tune.space.check_space`). Every part of the study then uses the returned config (its
    identity, recorded config, the reference rule's selection-period PnL, each trial's run); the best
    parameters found are set back on ``cfg`` itself (:func:`foxhunt.tune.export.write_best`)."""
    from foxhunt.config.loader import with_overrides
    from foxhunt.tune.space import check_space

    check_space(cfg)  # a space the config refuses is an error before the study builds anything
    updates: dict[str, object] = {}
    notes, kept = [], []
    if cfg.train.selection is not TRIAL_SELECTION:
        updates["train.selection"] = TRIAL_SELECTION.value
        kept.append(f"train.selection = {cfg.train.selection.value}")
        notes.append(
            f"train.selection = {cfg.train.selection.value} has no selection period: the trials train with "
            f"train.selection = {TRIAL_SELECTION.value}, as they are ranked on the folds' selection periods "
            "(never on the validation periods)"
        )
    if cfg.train.members > 1:
        # A committee's members are trained alike; the trial tunes that training, one member each,
        # and the selection periods rank one agent's epochs, not a committee's.
        updates["train.members"] = 1
        kept.append(f"train.members = {cfg.train.members}")
        notes.append(f"train.members = {cfg.train.members}: each trial trains one member (train.members = 1)")
    if not updates:
        return cfg, None
    trials = with_overrides(cfg, updates, where="foxhunt tune")
    note = "; ".join(
        [*notes, f"best.toml sets the best parameters on the profile as it is ({', '.join(kept)})"]
    )
    return trials, note


def check_tunable(cfg: FoxhuntConfig) -> None:
    """Refuse to run trials of a config whose folds would have no selection period to rank them on (a
    caller passes :func:`trial_config`'s config, never a profile's as it is), or whose space the config
    refuses (:func:`foxhunt.tune.space.check_space`)."""
    from foxhunt.tune.space import check_space

    check_space(cfg)
    if cfg.train.selection is not TRIAL_SELECTION:
        raise ConfigError(
            "train.selection",
            f"{cfg.train.selection.value} leaves the folds no selection period, and tune ranks its trials "
            "there (never on the validation periods it reports)",
            f"train the trials on trial_config(cfg) (train.selection = {TRIAL_SELECTION.value})",
        )


def rule_on_selection(cache: FeatureCache, cfg: FoxhuntConfig) -> float:
    """The reference rule's net PnL summed over the folds' selection periods (capture's denominator),
    evaluated as training evaluates it there; a FoxhuntError names a carrier feature not in the state."""
    from foxhunt.backtest.reference import ReferenceRule, rule_folds
    from foxhunt.backtest.run import bars_per_year
    from foxhunt.backtest.settings import BacktestSettings
    from foxhunt.train.evaluation import evaluate_selection
    from foxhunt.validation.folds import fold_periods

    rule = ReferenceRule.for_signal(cfg.synth.signal)
    bpy = bars_per_year(cache)
    fix = "turn its feature family on ([features]), pick another synth.signal, or tune net_pnl"
    total = 0.0
    for fd, market in rule_folds(cache, BacktestSettings.of(cfg), "tune.objective", fix):
        metrics, _ = evaluate_selection(market, fold_periods(fd.fold, cfg.train), cfg, rule.policy(), bpy)
        total += float(metrics["net_pnl"])
    return total
