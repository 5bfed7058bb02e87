"""The reference rule: the one-feature trade that a market's planted signal implies, as a yardstick.

An agent is judged by how much of a known edge it harvests, not by its PnL alone (a fold's PnL
swings by thousands with the market). The rule reads the state feature that carries the synthetic
market's planted alpha (``synth.signal``: :data:`REFERENCE_COLUMN`) in its fold-normalised units and
goes long above ``+REFERENCE_THRESHOLD``, short below ``-REFERENCE_THRESHOLD``, holds otherwise; Full
size, market orders, under the same plan lock and costs as every policy. On the smoke market it
makes +11,790 / +2,090 / +7,110 over the three validation folds.

**Capture**, the agent's net PnL over the rule's, fold by fold and over the folds, is
:mod:`foxhunt.backtest.capture`.

On real data the planted signal is unknown; the rule is then only a named one-feature benchmark
(the same column and threshold), not an edge known to exist.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from foxhunt.backtest.capture import RULE
from foxhunt.backtest.evaluate import Policy, ScriptedPolicy, evaluate, scripted, scripted_env
from foxhunt.backtest.execution import EXECUTION_KEY
from foxhunt.backtest.run import METRIC_KEYS, bars_per_year, summarise
from foxhunt.backtest.settings import BacktestSettings
from foxhunt.data.config import MANIFEST_NAME, PlantedSignal  # not from .synth (compiles the simulator)
from foxhunt.domain.actions import BRANCHES, Direction, OrderType
from foxhunt.domain.baselines import ORDER, Baseline
from foxhunt.env.config import EnvConfig
from foxhunt.env.core import TradingEnv
from foxhunt.env.graph import CapturablePolicy
from foxhunt.env.market import MarketTensors, market_tensors
from foxhunt.errors import FoxhuntError
from foxhunt.features.cache_file import FeatureCache
from foxhunt.validation.config import REFERENCE_THRESHOLD
from foxhunt.validation.folds import FoldData, make_folds

REFERENCE_COLUMN: dict[PlantedSignal, str] = {
    PlantedSignal.IMBALANCE: "ofi.l1_imbalance_ema_slow",
    PlantedSignal.TRADE_FLOW: "ofi.trade_sign_ema",
    # the momentum carrier counts mid changes, which no bar-row feature can count as the simulator
    # does; the market family's trailing momentum over 100 bars (the carrier's horizon of 100 mid
    # changes is about 40 30-second bars of the smoke market) reads it at corr. 0.29 with the next
    # 20-bar move (docs/results/2026-12-07-signal-kinds.md)
    PlantedSignal.MOMENTUM: "market.mom_sma_w100",
}
"""The state feature that carries each kind of planted signal (the feature family it lives in)."""


_DIR, _MAG, _ORDER = (BRANCHES.index(b) for b in ("direction", "magnitude", "order_type"))


def threshold_rule(column: str, threshold: float, order: OrderType = OrderType.MARKET) -> Policy:
    """Long where ``column`` > +threshold, short where < -threshold, else hold; Full size, ``order``.

    A pure function of the device state, marked capturable: on CUDA each fold's baseline replays it
    with the env step as one CUDA graph per step (stepped eagerly it cost the smoke job on an H200
    7.7 s per fold, bench/stages.py)."""

    def policy(obs: Tensor, env: TradingEnv) -> Tensor:
        x = env.market.features[env.state.row, env.market.feature_columns.index(column)]
        d = torch.where(
            x > threshold,
            int(Direction.LONG),
            torch.where(x < -threshold, int(Direction.SHORT), int(Direction.HOLD)),
        )
        a = torch.zeros(obs.shape[0], len(env.codec.sizes), dtype=torch.int64, device=obs.device)
        a[:, _DIR], a[:, _MAG], a[:, _ORDER] = d, env.codec.sizes[_MAG] - 1, int(order)  # largest size
        return a

    return CapturablePolicy(policy)


@dataclass(frozen=True)
class ReferenceRule:
    """The rule a planted signal implies: its carrier column and threshold."""

    signal: PlantedSignal
    column: str
    threshold: float = REFERENCE_THRESHOLD

    @classmethod
    def for_signal(cls, signal: PlantedSignal) -> ReferenceRule:
        """The rule of the planted signal ``synth.signal``."""
        return cls(signal, REFERENCE_COLUMN[signal])

    def policy(self) -> Policy:
        return threshold_rule(self.column, self.threshold, OrderType.MARKET)

    def available(self, market: MarketTensors) -> bool:
        """Whether the market's state holds the carrier column (a feature family may be off)."""
        return self.column in market.feature_columns

    def describe(self) -> str:
        t = self.threshold
        return (
            f"{self.signal.value} rule: long above +{t:g} sd of {self.column}, short below -{t:g} sd, "
            "Full size, market orders"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"signal": self.signal.value, "column": self.column, "threshold": self.threshold}


def fold_policies(settings: BacktestSettings, market: MarketTensors) -> dict[str, Policy]:
    """``{"flat", "long", "buy_hold", "rule"}`` policies (:class:`~foxhunt.domain.baselines.Baseline`;
    the rule only where its carrier column is in the state). Evaluate each under
    :func:`baseline_env` (buy-and-hold's plan is its own)."""
    kinds = (ScriptedPolicy(b.value) for b in ORDER)
    out = {k.value: scripted(k, settings.env, seed=settings.seed) for k in kinds}
    rule = ReferenceRule.for_signal(settings.synth.signal)
    if rule.available(market):
        out[RULE] = rule.policy()
    return out


def baseline_env(name: str, env: EnvConfig) -> EnvConfig:
    """The ``[env]`` a baseline of :func:`fold_policies` is evaluated under: ``env``, with buy-and-hold's
    plan (:func:`~foxhunt.backtest.evaluate.scripted_env`) for ``buy_hold``."""
    if name != Baseline.BUY_HOLD:
        return env
    return scripted_env(ScriptedPolicy.BUY_HOLD, env)


def evaluate_fold(
    market: MarketTensors, fd: FoldData, settings: BacktestSettings, policy: Policy, bpy: float
) -> dict[str, Any]:
    """A policy's headline metrics and execution block over the fold's whole validation period (as
    training reports them)."""
    rec = evaluate(market, settings.env, fd.fold.validation_start, fd.fold.validation_end, policy)
    m, reasons = summarise(rec, bpy, settings.env, settings.max_sharpe_annual)
    return {**{k: m[k] for k in METRIC_KEYS}, EXECUTION_KEY: m[EXECUTION_KEY], "implausible": reasons}


def rule_folds(
    cache: FeatureCache, settings: BacktestSettings, where: str, fix: str
) -> Iterator[tuple[FoldData, MarketTensors]]:
    """Each walk-forward fold of ``cache`` with its market, once the reference rule's carrier column is
    known to be a state feature there: a FoxhuntError at ``where`` (the setting that asked for the
    rule) with ``fix`` otherwise."""
    rule = ReferenceRule.for_signal(settings.synth.signal)
    for fd in make_folds(cache.features(), cache.columns, settings.folds, int(cache.meta["label_span"])):
        market = market_tensors(cache, fd, vol_window=settings.env.plan.barrier.vol_window)
        if not rule.available(market):
            raise FoxhuntError(
                where, f"the reference rule reads {rule.column}, which is not a state feature here", fix
            )
        yield fd, market


def edge(cache: FeatureCache, settings: BacktestSettings) -> dict[str, Any]:
    """The reference rule beside flat, long and buy-and-hold on every fold's validation period
    (``foxhunt edge``).

    Returns ``{"rule": ReferenceRule.to_dict(), "folds": [{"fold", "rule", "flat", "long", "buy_hold"}...],
    "total": {name: summed net PnL}}``; raises a FoxhuntError when the carrier column is not a state
    feature (its feature family is off)."""
    rule = ReferenceRule.for_signal(settings.synth.signal)
    bpy = bars_per_year(cache)
    rows = []
    fix = "turn its feature family on ([features]) or pick another synth.signal"
    for fd, market in rule_folds(cache, settings, "synth.signal", fix):
        pols = fold_policies(settings, market)
        metrics = {
            n: evaluate_fold(market, fd, settings.with_env(baseline_env(n, settings.env)), p, bpy)
            for n, p in pols.items()
        }
        rows.append({"fold": fd.fold.index} | metrics)
    names = (RULE, *(b.value for b in ORDER))
    return {
        "rule": rule.to_dict() | {"text": rule.describe(), "plan_rows": settings.env.plan.barrier.horizon},
        "folds": rows,
        "total": {n: float(sum(r[n]["net_pnl"] for r in rows)) for n in names},
    }


def planted_column(files: list[Path]) -> str | None:
    """The state column carrying the planted signal of the market in ``files``, or None when unknown.

    A market is synthetic when every file lies beside the simulator's manifest (``synth.json``, which
    ``foxhunt run`` and ``data synth`` write), which records its signal kind. Real data has no known
    planted signal: None (the report says n/a, never a guessed column)."""
    import json

    manifests = {Path(f).parent / MANIFEST_NAME for f in files}
    if not files or not all(m.is_file() for m in manifests):
        return None
    kinds = set()
    for m in manifests:
        try:
            body = json.loads(m.read_text())
        except (OSError, ValueError):
            return None
        # manifests written before synth.signal existed planted the imbalance carrier
        kinds.add(body.get("signal", body.get("config", {}).get("signal", PlantedSignal.IMBALANCE.value)))
    if len(kinds) != 1:
        return None
    try:
        return REFERENCE_COLUMN[PlantedSignal(kinds.pop())]
    except ValueError:
        return None
