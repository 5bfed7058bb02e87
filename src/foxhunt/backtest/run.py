"""``foxhunt backtest``: a policy over every fold's validation period, metrics, trades, equity.

The cache's rows are split into the configured purged walk-forward folds; for each selected fold
the environment runs the policy over the fold's validation rows (normalised with the fold's
training scaler) and the per-step records of all folds are reduced together. ``bars_per_year`` is
stated in the output: rows per session in the data x 252 sessions.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Protocol

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from foxhunt.atomic import atomic_path, write_json  # noqa: E402
from foxhunt.backtest.evaluate import Policy, ScriptedPolicy, evaluate, scripted  # noqa: E402
from foxhunt.backtest.metrics import (  # noqa: E402
    MAX_PLAUSIBLE_SHARPE_ANNUAL,
    StepRecord,
    branch_sizes,
    compute_metrics,
    implausibility,
)
from foxhunt.config.models import FoxhuntConfig  # noqa: E402
from foxhunt.env.market import market_tensors  # noqa: E402
from foxhunt.features.cache import FeatureCache  # noqa: E402
from foxhunt.validation.dataset import make_folds  # noqa: E402

SESSIONS_PER_YEAR = 252

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
)
"""The headline metrics of every backtest body (``metrics.json``, the run's folds)."""


def bars_per_year(cache: FeatureCache) -> float:
    dates = cache.column("trade_date")
    return float(len(dates) / max(len(np.unique(dates)), 1) * SESSIONS_PER_YEAR)


def summarise(
    rec: StepRecord, bpy: float, cfg: FoxhuntConfig, max_sharpe_annual: float = MAX_PLAUSIBLE_SHARPE_ANNUAL
) -> tuple[dict[str, Any], list[str]]:
    """``(compute_metrics of rec, implausibility reasons)`` with the config's branch sizes and capital."""
    metrics = compute_metrics(
        rec,
        bars_per_year=bpy,
        initial_capital=cfg.env.contract.initial_capital,
        **branch_sizes(cfg.env.branches),
    )
    return metrics, implausibility(metrics, max_sharpe_annual=max_sharpe_annual)


def equity_curve(rec: StepRecord) -> np.ndarray:
    """Cumulative net PnL per step, all windows summed (written steps only)."""
    net = (rec.gross_pnl - rec.costs) * rec.written
    return net.sum(dim=0).cumsum(0).cpu().numpy()


def _concat(records: list[StepRecord]) -> StepRecord:
    steps = max(r.written.shape[1] for r in records)
    parts: dict[str, list[torch.Tensor]] = {}
    for r in records:
        pad = steps - r.written.shape[1]
        blank = StepRecord.blank(r.written.shape[0], pad, r.written.device)
        for name in r.__dataclass_fields__:
            parts.setdefault(name, []).append(torch.cat([getattr(r, name), getattr(blank, name)], dim=1))
    return StepRecord(**{k: torch.cat(v, dim=0) for k, v in parts.items()})


class TrainedPolicy(Protocol):
    """A trained policy (a checkpoint): its name and the fold it was trained on."""

    value: str
    fold: int

    def policy(self, device: torch.device | str) -> Policy: ...


def run_backtest(
    cache: FeatureCache,
    cfg: FoxhuntConfig,
    policy: ScriptedPolicy | TrainedPolicy,
    out_dir: str | Path,
    fold: int | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    folds = make_folds(cache.features(), cache.columns, cfg.folds, int(cache.meta["label_span"]))
    if not isinstance(policy, ScriptedPolicy):  # a checkpoint is judged on its own fold only
        fold = policy.fold
    chosen = folds if fold is None else [folds[fold]]
    records, trades, curves = [], [], []
    for fd in chosen:
        market = market_tensors(cache, fd, vol_window=cfg.env.plan.vol_window, device=device)
        lo, hi = fd.fold.validation_start, fd.fold.validation_end
        pol = (
            scripted(policy, cfg.env, seed=cfg.run.seed + fd.fold.index)
            if isinstance(policy, ScriptedPolicy)
            else policy.policy(device)
        )
        rec = evaluate(market, cfg.env, lo, hi, pol)
        records.append(rec)
        curves.append(equity_curve(rec))
        e_idx, t_idx = torch.nonzero(rec.trade_closed & rec.written, as_tuple=True)
        trades.extend(
            {
                "fold": fd.fold.index,
                "episode": int(e),
                "step": int(t),
                "pnl": float(rec.trade_pnl[e, t]),
                "magnitude": int(rec.closed_magnitude[e, t]),
            }
            for e, t in zip(e_idx.tolist(), t_idx.tolist(), strict=True)
        )
    bpy = bars_per_year(cache)
    metrics, reasons = summarise(_concat(records), bpy, cfg)
    body = {
        "policy": policy.value,
        "folds": [fd.fold.index for fd in chosen],
        **{k: metrics[k] for k in METRIC_KEYS},
        "implausible": bool(reasons),
        "implausible_reasons": reasons,
        "all": metrics,
    }
    write_json(out / "metrics.json", body, indent=2, default=float)
    with atomic_path(out / "trades.csv") as tmp:
        with tmp.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=["fold", "episode", "step", "pnl", "magnitude"])
            w.writeheader()
            w.writerows(trades)
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
