"""``foxhunt backtest``: a policy over every fold's validation period, metrics, trades, equity.

The cache's rows are split into the configured purged walk-forward folds; for each selected fold
the environment runs the policy over the fold's validation rows (normalised with the fold's
training scaler) and the per-step records of all folds are reduced together. ``bars_per_year`` is
stated in the output with the ``annualisation`` sentence of how (the instrument's session calendar,
foxhunt.backtest.annualise), and the ``instrument`` the prices and dollars are of.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Protocol

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from foxhunt.atomic import atomic_path, write_json  # noqa: E402
from foxhunt.backtest.annualise import Annualisation, annualisation  # noqa: E402
from foxhunt.backtest.decisions import DecisionRow, write_decisions_csv  # noqa: E402
from foxhunt.backtest.evaluate import (  # noqa: E402
    GraphedEvaluation,
    Policy,
    ScriptedPolicy,
    evaluate,
    scripted,
    scripted_env,
)
from foxhunt.backtest.execution import EXECUTION_KEY, execution_summary  # noqa: E402
from foxhunt.backtest.metrics import (  # noqa: E402
    MAX_PLAUSIBLE_SHARPE_ANNUAL,
    StepRecord,
    branch_sizes,
    compute_metrics,
    implausibility,
)
from foxhunt.backtest.settings import BacktestSettings  # noqa: E402
from foxhunt.backtest.trades import exit_reasons, trade_rows, write_trades_csv  # noqa: E402
from foxhunt.console import SILENT, Reporter  # noqa: E402
from foxhunt.data.instrument import instrument_of_cache
from foxhunt.data.schemas import BarKind, RowUnit  # noqa: E402
from foxhunt.domain.instrument import Instrument
from foxhunt.env.config import EnvConfig  # noqa: E402
from foxhunt.env.graph import CapturablePolicy  # noqa: E402
from foxhunt.env.market import market_tensors  # noqa: E402
from foxhunt.errors import FoxhuntError  # noqa: E402
from foxhunt.features.cache_file import FeatureCache  # noqa: E402
from foxhunt.seeding import Stream, stream_seed  # noqa: E402
from foxhunt.validation.folds import make_folds  # noqa: E402
from foxhunt.validation.normalise import RobustScaler  # noqa: E402

METRIC_KEYS = (
    "net_pnl",
    "gross_pnl",
    "costs",
    "sharpe_annual",
    "bars_per_year",
    "max_drawdown",
    "trades",
    "win_rate",
    "active_frac",
    "steps",
)
"""The headline metrics of every backtest body (``metrics.json``, the run's folds); ``steps``: the
written steps the Sharpe is measured over (below :data:`~foxhunt.backtest.metrics.MIN_SHARPE_STEPS`
it is shown as n/a)."""


def cache_annualisation(cache: FeatureCache, instrument: Instrument | None = None) -> Annualisation:
    """Bars per year of the cache's rows from ``instrument``'s session calendar (None: the cache's)."""
    ins = instrument if instrument is not None else instrument_of_cache(cache.meta)
    data = cache.meta.get("config", {}).get("data", {})
    return annualisation(
        RowUnit(cache.meta["row_unit"]),
        BarKind(data.get("bar_kind", BarKind.TIME.value)),
        float(data.get("bar_seconds", 0)),
        cache.column("ts"),
        cache.column("segment_start"),
        ins,
    )


def bars_per_year(cache: FeatureCache, instrument: Instrument | None = None) -> float:
    return cache_annualisation(cache, instrument).bars_per_year


def summarise(
    rec: StepRecord,
    bpy: float,
    env: EnvConfig,
    max_sharpe_annual: float = MAX_PLAUSIBLE_SHARPE_ANNUAL,
    unjudged: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """``(compute_metrics of rec, implausibility reasons)`` with ``env``'s branch sizes and capital
    (``unjudged``: :func:`~foxhunt.backtest.metrics.implausibility`'s, the ``backtest`` command's), and
    the execution block (:func:`~foxhunt.backtest.execution.execution_summary`) where ``rec`` keeps the
    trade ledger."""
    metrics = compute_metrics(
        rec,
        bars_per_year=bpy,
        initial_capital=env.contract.initial_capital,
        **branch_sizes(env.branches),
    )
    if rec.trade_detail is not None and rec.limit_orders is not None and rec.contracts is not None:
        metrics[EXECUTION_KEY] = execution_summary(rec, env.branches)
    return metrics, implausibility(metrics, max_sharpe_annual=max_sharpe_annual, unjudged=unjudged)


def equity_curve(rec: StepRecord) -> np.ndarray:
    """Cumulative net PnL per step, all windows summed (written steps only)."""
    net = (rec.gross_pnl - rec.costs) * rec.written
    return net.sum(dim=0).cumsum(0).cpu().numpy()


class TrainedPolicy(Protocol):
    """A trained policy (a checkpoint): its name and the fold it was trained on."""

    value: str
    fold: int

    def policy(self, device: torch.device | str) -> Policy: ...


def stored_normaliser(policy: TrainedPolicy, columns: list[str]) -> RobustScaler | None:
    """The fold normaliser a weights-only export stores (None: the cache's fold is fitted as usual).

    On the cache the run trained on it equals the fold's own; on other data (a later file, the one
    ``foxhunt serve`` replays) it is the scaling the network learned, so both judge it alike."""
    path = getattr(policy, "path", None)
    if path is None:
        return None
    from foxhunt.policy.checkpoint import read_checkpoint_meta

    meta = read_checkpoint_meta(path)
    if "normaliser" not in meta:
        return None
    scaler = RobustScaler.from_dict(meta["normaliser"])
    if list(scaler.columns) != list(columns):
        raise FoxhuntError(
            path,
            f"its normaliser scales {len(scaler.columns)} feature columns, the cache has {len(columns)} "
            "(another feature layout)",
            "backtest it on a cache built with the checkpoint's feature config",
        )
    return scaler


def run_backtest(
    cache: FeatureCache,
    settings: BacktestSettings,
    policy: ScriptedPolicy | TrainedPolicy,
    out_dir: str | Path,
    fold: int | None = None,
    device: str = "cpu",
    progress: Reporter = SILENT,
) -> dict[str, Any]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    folds = make_folds(cache.features(), cache.columns, settings.folds, int(cache.meta["label_span"]))
    if not isinstance(policy, ScriptedPolicy):  # a checkpoint is judged on its own fold only
        fold = policy.fold
    chosen = folds if fold is None else [folds[fold]]
    instrument = instrument_of_cache(cache.meta, settings.instrument)  # the config's overrides win
    records, trades, curves = [], [], []
    ts = cache.column("ts")
    decisions: list[DecisionRow] = []
    stored = None if isinstance(policy, ScriptedPolicy) else stored_normaliser(policy, cache.columns)
    for fd in progress.track(chosen, f"backtest {policy.value}, folds"):
        if stored is not None:  # the scaling the network was trained with, as foxhunt serve applies it
            fd = dataclasses.replace(fd, scaler=stored)
        market = market_tensors(
            cache, fd, vol_window=settings.env.plan.barrier.vol_window, device=device, instrument=instrument
        )
        lo, hi = fd.fold.validation_start, fd.fold.validation_end
        if isinstance(policy, ScriptedPolicy):
            seed = stream_seed(settings.seed, Stream.SCRIPTED_POLICY, fd.fold.index)
            pol = scripted(policy, settings.env, seed=seed)
            rec = evaluate(market, scripted_env(policy, settings.env), lo, hi, pol)
        else:
            # The fused step (one CUDA graph per step on CUDA) records decisions.csv's columns too
            # (compared with foxhunt serve), read back once after the run. A policy not marked
            # capturable runs the same step eagerly.
            pol = policy.policy(device)
            ev = GraphedEvaluation(
                market,
                settings.env,
                lo,
                hi,
                pol,
                graph=None if isinstance(pol, CapturablePolicy) else False,
                decisions=True,
            )
            rec = ev.run()
            decisions.extend(ev.decision_rows(lambda r: int(ts[r])))
        records.append(rec)
        curves.append(equity_curve(rec))
        trades.extend(trade_rows(rec, ts, fd.fold.index))
    annual = cache_annualisation(cache, instrument)
    bpy = annual.bars_per_year
    # The command's own check (unjudged): the default ceiling, not the run's train.anomaly one.
    metrics, reasons = summarise(StepRecord.concat(records), bpy, settings.env, unjudged=True)
    body = {
        "policy": policy.value,
        "folds": [fd.fold.index for fd in chosen],
        **{k: metrics[k] for k in METRIC_KEYS},
        "exit_reasons": exit_reasons(trades),
        EXECUTION_KEY: metrics[EXECUTION_KEY],  # entries by order type, urgency, magnitude; fills
        "annualisation": annual.text,
        "instrument": instrument.to_dict(),
        "implausible": bool(reasons),
        "implausible_reasons": reasons,
        "all": metrics,
    }
    write_json(out / "metrics.json", body, indent=2, default=float)
    write_trades_csv(out / "trades.csv", trades)
    if not isinstance(policy, ScriptedPolicy):
        write_decisions_csv(out / "decisions.csv", decisions, settings.env.branches)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for fd, curve in zip(chosen, curves, strict=True):
        ax.plot(curve, label=f"fold {fd.fold.index}")
    ax.set_xlabel("step within the validation windows")
    ax.set_ylabel("cumulative net PnL ($, all windows)")
    ax.set_title(f"{policy.value}: net Sharpe {metrics['sharpe_annual']:.2f} (annualised)")
    ax.legend()
    with atomic_path(out / "equity.png") as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
    plt.close(fig)
    return body
