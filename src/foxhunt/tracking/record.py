"""What a tracked run records, as plain data: parameters from the resolved config, metric names and
steps from the trainer's epoch rows, the results of a finished training.

Pure functions (no mlflow): :mod:`foxhunt.tracking.run` sends what they return.

- Parameters: the resolved config flattened (``agent.network.hidden``: :func:`~foxhunt.config.base.leaves`),
  each value as JSON text (a string as itself), cut to MLflow's value limit.
- Per-epoch metrics: every numeric field of the epoch row under its own name (``misc/select_net_pnl``,
  ``sharpe/select``), at step :func:`epoch_step` = fold x epochs + epoch, which rises over the whole run.
- Results: ``result/fold<k>/<metric>`` per fold (net PnL, trades, annual Sharpe, capture where the
  reference rule is defined) and ``result/total/...`` over the folds. ``foxhunt runs compare`` shows
  the ``result/`` metrics.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from foxhunt.config.base import leaves

if TYPE_CHECKING:
    from foxhunt.config.models import FoxhuntConfig

# MLflow's limits (mlflow.utils.validation, MLflow 3): restated so this module needs no mlflow import;
# tests/tracking checks them against mlflow's own.
MAX_PARAM_VALUE = 6000
MAX_KEY = 250
PARAMS_PER_BATCH = 100
METRICS_PER_BATCH = 1000

RESULT = "result/"
"""Prefix of a run's final numbers (per fold, totals), apart from the per-epoch series."""
FOLD_METRICS = ("net_pnl", "trades", "sharpe_annual", "capture")
CUT_MARK = "...[cut]"

_BAD_KEY = re.compile(r"[^\w./\- ]")


def key_name(name: str) -> str:
    """``name`` as MLflow accepts a parameter or metric key: letters, digits, ``_ - . / space``; any
    other character becomes ``_``; at most 250 characters."""
    return _BAD_KEY.sub("_", name)[:MAX_KEY]


def param_value(value: Any) -> str:
    """A config value as a parameter: a string as itself, anything else as JSON (``true``, ``null``,
    ``[1, 2]``), cut to MLflow's limit with a visible mark."""
    text = value if isinstance(value, str) else json.dumps(value)
    if len(text) > MAX_PARAM_VALUE:
        text = text[: MAX_PARAM_VALUE - len(CUT_MARK)] + CUT_MARK
    return text


def config_params(cfg: FoxhuntConfig) -> dict[str, str]:
    """The resolved config as MLflow parameters (module docs)."""
    return {key_name(k): param_value(v) for k, v in leaves(cfg.model_dump(mode="json")).items()}


def epoch_step(fold: int, epoch: int, epochs: int) -> int:
    """The step of fold ``fold``'s epoch ``epoch`` (0-based, ``epochs`` per fold): rises across folds."""
    return fold * epochs + epoch


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def epoch_metrics(row: Mapping[str, Any]) -> dict[str, float]:
    """The numeric fields of an epoch row under MLflow-safe names (text fields are left out)."""
    out = {}
    for name, value in row.items():
        number = _number(value)
        if number is not None:
            out[key_name(str(name))] = number
    return out


def fold_results(folds: list[Mapping[str, Any]]) -> dict[str, float]:
    """``result/fold<k>/...`` per fold and ``result/total/...`` from ``train()``'s fold results: net PnL
    and trades summed, Sharpe the mean over folds, capture the agent / rule net PnL over the folds where
    the rule made money, its median over them, and over every fold (``capture_all_folds``: the
    capture before issue 58); the agent's and the rule's cost per contract and limit fill rate over
    the folds where every fold recorded them (docs/execution.md)."""
    from foxhunt.backtest.capture import Capture

    out: dict[str, float] = {}
    for f in folds:
        for name in FOLD_METRICS:
            number = _number(f.get(name))
            if number is not None:
                out[f"{RESULT}fold{int(f['fold'])}/{name}"] = number
    if folds:
        out[f"{RESULT}total/net_pnl"] = float(sum(f["net_pnl"] for f in folds))
        out[f"{RESULT}total/trades"] = float(sum(f["trades"] for f in folds))
        out[f"{RESULT}total/sharpe_annual_mean"] = float(sum(f["sharpe_annual"] for f in folds) / len(folds))
        cap = Capture.of(list(folds))  # type: ignore[arg-type]
        totals = {"capture": cap.ratio, "capture_median": cap.median, "capture_all_folds": cap.all_folds}
        for name, value in totals.items():
            if value is not None:
                out[f"{RESULT}total/{name}"] = float(value)
        out.update(_execution_results(folds))
    return out


def _execution_results(folds: list[Mapping[str, Any]]) -> dict[str, float]:
    """``result/total/<agent|rule>_cost_per_contract`` and ``..._limit_fill_rate`` over the folds
    (foxhunt.backtest.execution; a side or a rate that is undefined is left out)."""
    from foxhunt.backtest.execution import folds_execution

    out: dict[str, float] = {}
    for side, block in folds_execution([dict(f) for f in folds]).items():
        if block is None:
            continue
        out[f"{RESULT}total/{side}_cost_per_contract"] = float(block["cost_per_contract"])
        if (rate := block["limit_orders"]["fill_rate"]) is not None:
            out[f"{RESULT}total/{side}_limit_fill_rate"] = float(rate)
    return out


def result_metrics(values: Mapping[str, Any]) -> dict[str, float]:
    """Any other final numbers (a seeds study's capture, a trial's objective) as ``result/<name>``;
    values that are not numbers (None: undefined) are left out."""
    out = {}
    for name, value in values.items():
        number = _number(value)
        if number is not None:
            out[key_name(RESULT + name)] = number
    return out
