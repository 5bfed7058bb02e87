"""A policy judged on a fold: the selection period each epoch, the validation period once (docs/design.md §7).

The evaluation both a training run (:mod:`foxhunt.train.run`) and its committee
(:mod:`foxhunt.train.members`) judge by: the backtester over the fold's rows, summarised with the
run's own plausibility ceiling, the net PnL per validation row and the action shares.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from foxhunt.backtest.evaluate import evaluate, windows
from foxhunt.backtest.execution import EXECUTION_KEY
from foxhunt.backtest.metrics import StepRecord
from foxhunt.backtest.run import METRIC_KEYS, summarise
from foxhunt.config.models import FoxhuntConfig
from foxhunt.domain.actions import ActionCodec
from foxhunt.env.market import MarketTensors
from foxhunt.report.series import net_by_row
from foxhunt.validation.folds import FoldData, FoldPeriods


def _summarise(rec: StepRecord, bpy: float, cfg: FoxhuntConfig) -> dict[str, Any]:
    # The run's own ceiling (train.anomaly.max_sharpe_annual), which the guard would otherwise never
    # see: these metrics carry the flag, and the guard trusts a flag that is present.
    m, reasons = summarise(rec, bpy, cfg.env, cfg.train.anomaly.max_sharpe_annual)
    # The execution block beside the headline: the fold's and each baseline's (folds[k].execution).
    head = {k: m[k] for k in METRIC_KEYS}
    return {**head, EXECUTION_KEY: m[EXECUTION_KEY], "implausible": reasons, "all": m}


def validation_net(rec: StepRecord, fd: FoldData, cfg: FoxhuntConfig) -> np.ndarray:
    """Net PnL per validation row in time order, of a record over the whole validation period."""
    lo, hi = fd.fold.validation_start, fd.fold.validation_end
    starts, _ = windows(lo, hi, cfg.env.episode_rows)
    net = ((rec.gross_pnl - rec.costs) * rec.written).cpu().numpy()
    return net_by_row(net, rec.written.cpu().numpy(), starts.numpy(), lo, hi)


def action_shares(metrics: dict[str, Any], cfg: FoxhuntConfig) -> dict[str, dict[str, dict[str, float]]]:
    """``{picked|realised: {branch: {value label: share of written steps}}}`` from
    :func:`~foxhunt.backtest.metrics.compute_metrics`' distributions (picked: every branch;
    realised: direction after the plan lock, magnitude after the Kelly cap)."""
    labels = ActionCodec(cfg.env.branches).value_labels()
    return {
        kind: {
            branch: {name: float(x) for name, x in zip(labels[branch], shares, strict=False)}
            for branch, shares in metrics[kind].items()
        }
        for kind in ("picked", "realised")
    }


def validate(
    market: MarketTensors, fd: FoldData, cfg: FoxhuntConfig, policy, bpy: float, mode: str = "auto"
) -> tuple[dict, StepRecord]:
    """The policy over the fold's whole validation period, as ``foxhunt backtest`` evaluates a
    checkpoint: run once a fold, after its epochs, so it never decides which epoch is reported.
    ``mode``: the env step (the agent's ``step_mode``; ``fused`` the one-kernel step,
    :func:`~foxhunt.backtest.evaluate.evaluate`)."""
    rec = evaluate(market, cfg.env, fd.fold.validation_start, fd.fold.validation_end, policy, mode=mode)
    return _summarise(rec, bpy, cfg), rec


def evaluate_selection(
    market: MarketTensors, periods: FoldPeriods, cfg: FoxhuntConfig, policy, bpy: float, mode: str = "auto"
) -> tuple[dict, StepRecord]:
    """The policy over the fold's selection period (each epoch's greedy backtest: its Sharpe picks
    ``best.safetensors``); the same evaluator as :func:`validate`, over other rows."""
    rec = evaluate(market, cfg.env, periods.select_lo, periods.select_hi, policy, mode=mode)
    return _summarise(rec, bpy, cfg), rec
