"""Anomaly guard: NaN/Inf, exploding loss, the backtester's implausibility flag, a healthy run passes."""

from __future__ import annotations

import math
import pickle
from typing import Any

import numpy as np
import pytest
import torch

from foxhunt.backtest.metrics import StepRecord, compute_metrics
from foxhunt.errors import FoxhuntError
from foxhunt.train.config import AnomalyConfig
from foxhunt.train.guard import AnomalyError, AnomalyGuard, AnomalyVerdict, Cause

C0 = 100_000.0
BPY = 252.0 * 390  # one-minute bars


def _record(net: np.ndarray, trade_every: int, trade_pnl: np.ndarray) -> StepRecord:
    """Every step written, long one contract, a trade closed every ``trade_every`` steps."""
    E, T = net.shape
    f64 = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    i64 = lambda a: torch.tensor(a, dtype=torch.int64)  # noqa: E731
    closed = np.zeros((E, T), bool)
    closed[:, trade_every - 1 :: trade_every] = True
    ones = np.ones((E, T), np.int64)
    return StepRecord(
        written=torch.ones((E, T), dtype=torch.bool),
        gross_pnl=f64(net + 2.25),
        costs=f64(np.full((E, T), 2.25)),
        position=f64(np.ones((E, T))),
        equity=f64(C0 + np.cumsum(net, axis=1)),
        picked_direction=i64(2 * ones),
        picked_magnitude=i64(2 * ones),
        picked_order=i64(0 * ones),
        picked_urgency=i64(0 * ones),
        realised_direction=i64(2 * ones),
        realised_magnitude=i64(2 * ones),
        trade_closed=torch.from_numpy(closed),
        trade_pnl=f64(np.where(closed, trade_pnl, 0.0)),
        closed_magnitude=i64(np.where(closed, 2, -1)),
    )


def _metrics(net: np.ndarray, trade_pnl: np.ndarray) -> dict[str, Any]:
    kw = {"bars_per_year": BPY, "initial_capital": C0, "n_directions": 4, "n_magnitudes": 3}
    return compute_metrics(_record(net, 5, trade_pnl), **kw)


@pytest.fixture(scope="module")
def oracle_metrics() -> dict[str, Any]:
    """An oracle that peeks at the future: gains every bar, never loses (docs/design.md §8)."""
    rng = np.random.default_rng(3)
    return _metrics(rng.uniform(20.0, 200.0, (4, 300)), rng.uniform(100.0, 900.0, (4, 300)))


@pytest.fixture(scope="module")
def noisy_metrics() -> dict[str, Any]:
    """Zero-edge noise: drawdowns, many trades, a Sharpe within the noise."""
    rng = np.random.default_rng(4)
    return _metrics(rng.normal(0.0, 300.0, (4, 300)), rng.normal(0.0, 500.0, (4, 300)))


def _healthy(loss: float) -> dict[str, float]:
    return {"loss/total": loss, "loss/c51": 0.8 * loss, "grad/total": 3.0, "q/direction/mean": 0.01}


def test_a_healthy_run_passes_and_may_be_best(noisy_metrics: dict[str, Any]) -> None:
    guard = AnomalyGuard(AnomalyConfig(loss_explosion_factor=10.0, warmup_epochs=2))
    rng = np.random.default_rng(0)
    assert noisy_metrics["max_drawdown"] > 0.01 and abs(noisy_metrics["sharpe_annual"]) < 10
    for epoch in range(30):
        loss = 5.0 * math.exp(-epoch / 10) * rng.uniform(0.5, 2.0)  # decaying, noisy, never 10 x median
        result = guard.check_or_raise(_healthy(loss), noisy_metrics, where=f"fold 0 epoch {epoch}")
        assert result.verdict is AnomalyVerdict.OK and result.may_be_best and result.diagnosis == ""


@pytest.mark.parametrize(
    ("key", "value"), [("loss/c51", math.nan), ("q/direction/mean", math.inf), ("grad/total", -math.inf)]
)
def test_non_finite_statistics_stop_at_once(key: str, value: float) -> None:
    guard = AnomalyGuard()
    stats = {**_healthy(1.0), key: value}
    result = guard.check(stats)
    assert result.verdict is AnomalyVerdict.ANOMALOUS and result.causes == (Cause.NON_FINITE,)
    assert f"{key} is {value}" in result.diagnosis and not result.may_be_best
    with pytest.raises(AnomalyError, match=f"fold 1 epoch 4: .*{key} is {value}") as err:
        guard.check_or_raise(stats, where="fold 1 epoch 4")
    assert isinstance(err.value, FoxhuntError) and err.value.result.verdict is AnomalyVerdict.ANOMALOUS
    # a non-finite statistic outside loss/, grad/, q/ is not the guard's business (validation has its own)
    assert guard.check({**_healthy(1.0), "atoms/utilisation": math.nan}).verdict is AnomalyVerdict.OK
    # nor is the direction gap's correlation with the planted signal: NaN where the gap is constant
    assert guard.check({**_healthy(1.0), "q/direction_gap_corr": math.nan}).verdict is AnomalyVerdict.OK


def test_the_guards_error_survives_a_process_boundary() -> None:
    """Pickled and unpickled (as a worker process's error reaches its parent), the error keeps its
    class, message, fields and verdict; before, unpickling called AnomalyError(message) and failed."""
    guard = AnomalyGuard()
    with pytest.raises(AnomalyError) as err:
        guard.check_or_raise({**_healthy(1.0), "grad/aux": math.inf}, where="fold 2 epoch 1")
    back = pickle.loads(pickle.dumps(err.value))
    assert type(back) is AnomalyError and str(back) == str(err.value)
    assert (back.where, back.problem, back.fix) == (err.value.where, err.value.problem, err.value.fix)
    assert back.result == err.value.result and back.exit_code == 3
    plain = pickle.loads(pickle.dumps(FoxhuntError("a.toml", "bad key", "remove it")))
    assert str(plain) == "a.toml: bad key (fix: remove it)"


def test_exploding_loss_after_warmup() -> None:
    guard = AnomalyGuard(AnomalyConfig(loss_explosion_factor=100.0, warmup_epochs=3))
    assert guard.check(_healthy(1.0)).verdict is AnomalyVerdict.OK
    assert (
        guard.check(_healthy(1e6)).verdict is AnomalyVerdict.OK
    )  # 1 epoch of history < warm-up: no judgement
    guard.reset()
    for loss in (1.0, 1.2, 0.8):
        assert guard.check(_healthy(loss)).verdict is AnomalyVerdict.OK
    assert guard.check(_healthy(99.0)).verdict is AnomalyVerdict.OK  # 99 < 100 x median 1.0
    result = guard.check(_healthy(150.0))  # median of |1.0, 1.2, 0.8, 99| = 1.1 -> threshold 110
    assert result.verdict is AnomalyVerdict.ANOMALOUS and result.causes == (Cause.EXPLODING_LOSS,)
    assert "loss/total = 150" in result.diagnosis and "median 1.1" in result.diagnosis
    assert "threshold 110" in result.diagnosis
    assert guard.check(_healthy(-150.0)).verdict is AnomalyVerdict.ANOMALOUS  # compared in magnitude


def test_exploding_loss_tolerated_up_to_max_consecutive() -> None:
    guard = AnomalyGuard(AnomalyConfig(loss_explosion_factor=10.0, warmup_epochs=1, max_consecutive=2))
    guard.check(_healthy(1.0))
    first = guard.check(_healthy(50.0))
    assert first.verdict is AnomalyVerdict.SUSPECT and not first.may_be_best
    assert guard.check(_healthy(1.0)).verdict is AnomalyVerdict.OK  # recovery resets the streak
    assert guard.check(_healthy(50.0)).verdict is AnomalyVerdict.SUSPECT
    second = guard.check(_healthy(60.0))  # the exploding epochs never entered the median (still 1.0)
    assert second.verdict is AnomalyVerdict.ANOMALOUS and "2 consecutive" in second.diagnosis
    off = AnomalyGuard(AnomalyConfig(loss_explosion_factor=0.0, warmup_epochs=1))
    off.check(_healthy(1.0))
    assert off.check(_healthy(1e9)).verdict is AnomalyVerdict.OK  # factor 0 = check off


def test_oracle_is_flagged_through_backtest_implausibility(oracle_metrics: dict[str, Any]) -> None:
    assert "implausible" not in oracle_metrics  # the guard runs backtest.metrics.implausibility itself
    result = AnomalyGuard().check(_healthy(1.0), oracle_metrics)
    assert result.verdict is AnomalyVerdict.ANOMALOUS and result.causes == (Cause.IMPLAUSIBLE,)
    assert "annualised Sharpe" in result.diagnosis and "max drawdown 0 below" in result.diagnosis
    # the backtester's own flag is trusted as written (it may have used an AUC-derived ceiling)
    body = {"sharpe_annual": 3.0, "implausible": True, "implausible_reasons": ["Sharpe 3 above 2.5"]}
    assert "Sharpe 3 above 2.5" in AnomalyGuard().check(_healthy(1.0), body).diagnosis
    assert (
        AnomalyGuard().check(_healthy(1.0), {**oracle_metrics, "implausible": False}).verdict
        is AnomalyVerdict.OK
    )


def test_run_fed_the_oracle_stops_and_never_marks_it_best(
    oracle_metrics: dict[str, Any], noisy_metrics: dict[str, Any]
) -> None:
    """The caller's loop: mark best only on an OK verdict; the oracle's epoch raises instead."""
    guard = AnomalyGuard()
    validations = [noisy_metrics, noisy_metrics, oracle_metrics, noisy_metrics]
    best: list[int] = []

    def run() -> None:
        for epoch, val in enumerate(validations):
            result = guard.check(_healthy(1.0), val)
            if result.may_be_best:
                best.append(epoch)
            # ... the caller logs the diagnosis and saves the epoch as last (never best), then:
            guard.raise_if(result, where=f"fold 0 epoch {epoch}")

    with pytest.raises(AnomalyError, match="fold 0 epoch 2: .*look for future information") as err:
        run()
    assert best == [0, 1] and err.value.exit_code != 0
    assert AnomalyGuard().check(_healthy(1.0), True).causes == (Cause.IMPLAUSIBLE,)  # the bare flag
