"""The market family's slot groups (foxhunt.features.market), each on a hand-made path with
hand-worked numbers; the whole family is covered by tests/features/test_market.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from foxhunt.features import market
from foxhunt.features._kernels import Carry
from tests.features.test_market import tiny_rows

A = 0.01  # log return per row of the geometric paths below
SMALL = market.MarketConfig(
    return_lags=(2, 2, 3, 3, 4, 4), vol_norm_window=4, momentum_windows=(3, 4), trend_windows=(3, 4, 5),
    vol_windows=(3, 4, 5), parkinson_window=3, gk_window=3, range_windows=(3, 4), volume_windows=(3, 4),
    rsi_period=3, bb_window=3, extreme_window=4, macd_fast=2, macd_slow=3, macd_signal=2,
    efficiency_window=3, autocorr_window=3, adx_period=2,
)  # fmt: skip


def rising(n: int = 12, volume: float = 5.0) -> market._ChunkSeries:
    """y_t = A t: every return A, constant volume."""
    close = 100.0 * np.exp(A * np.arange(n))
    return market._ChunkSeries(tiny_rows(close, volume=np.full(n, volume)), SMALL, Carry())


def test_series_carries_a_missing_close_and_restarts_per_segment() -> None:
    inp = tiny_rows([100.0, 110.0, np.nan, 121.0, 50.0, 55.0], seg=[4])
    c = market._ChunkSeries(inp, SMALL, Carry())
    a = math.log(1.1)
    assert c.y_n == pytest.approx([0.0, a, a, 2 * a, 0.0, a])
    assert c.r_n == pytest.approx([0.0, a, 0.0, a, 0.0, a])
    assert list(c.pos_n) == [0, 1, 2, 3, 0, 1]
    # σ_2 at row 3 = sqrt((0 + a²) / 2); 0 before two returns and after the segment restart
    assert c.sigma(2) == pytest.approx([0.0, 0.0, a / math.sqrt(2), a / math.sqrt(2), 0.0, 0.0])
    assert c.sigma(2) is c.sigma(2)  # computed once


def test_returns_and_momentum() -> None:
    c = rising()
    ret = market._returns(c, SMALL)
    assert len(ret) == 8 and ret[0][1:] == pytest.approx(A)
    assert ret[1][4:] == pytest.approx(1.0) and not ret[1][:4].any()  # r / σ_4 once 4 returns exist
    assert ret[2][4:] == pytest.approx(2 * A / (A * math.sqrt(2)))  # (y_t - y_{t-2}) / (σ √2)
    mom = market._momentum(c, SMALL)
    # SMA distance over 3 rows: (A t - A (t - 1)) / (A √3); every return up: +1
    assert mom[0][3:] == pytest.approx(1 / math.sqrt(3)) and mom[2][3:] == pytest.approx(1.0)


def test_trend_of_a_perfect_line() -> None:
    cols = market._trend(rising(), SMALL)
    assert cols[0][3:] == pytest.approx(math.sqrt(3))  # β √W / σ_W = A √3 / A
    assert cols[1][3:] == pytest.approx(SMALL.tstat_clip)  # no residual: the t-stat's clip


def test_volatility_of_constant_returns() -> None:
    cols = market._volatility(rising(), SMALL)
    assert cols[0][3:] == pytest.approx(1e4 * A) and not cols[0][:3].any()  # vol_rv_w3_bps
    assert cols[3][5:] == pytest.approx(0.0, abs=1e-9)  # ln(σ_3 / σ_4)
    # block Parkinson over 3 returns: H' - L' = 3A, sqrt((3A)² / (4 ln 2 · 3)) in bps
    assert cols[5][3:] == pytest.approx(1e4 * 3 * A / math.sqrt(4 * math.log(2) * 3))
    # Garman-Klass: ½ (3A)² - (2 ln 2 - 1) (3A)², over 3
    gk = (0.5 - (2 * math.log(2) - 1)) * (3 * A) ** 2 / 3
    assert cols[6][3:] == pytest.approx(1e4 * math.sqrt(gk))


def test_range_and_oscillators_at_the_top() -> None:
    c = rising()
    rng = market._range(c, SMALL)
    assert rng[0][3:] == pytest.approx(2 * A / (A * math.sqrt(3)))  # H_3 - L_3 = 2A over σ_3 √3
    assert rng[1][3:] == pytest.approx(1.0) and rng[2][4:] == pytest.approx(1.0)  # at the high
    osc = market._oscillators(c, SMALL)
    assert osc[0][3:] == pytest.approx(1.0)  # RSI: gains only
    assert osc[2][4:] == pytest.approx(0.0)  # the close is the trailing high
    assert osc[3][4:] == pytest.approx(3 * A / (A * 2))  # (y - L_4) / (σ √4)


def test_volume_of_a_constant_flow() -> None:
    cols = market._volume(rising(volume=5.0), SMALL)
    assert all(not col.any() for col in cols)  # at its mean, no variance, no trend
    inp = tiny_rows(np.full(6, 100.0), volume=[1.0, 1.0, 1.0, 1.0, 1.0, 7.0])
    cols = market._volume(market._ChunkSeries(inp, SMALL, Carry()), SMALL)
    assert cols[0][5] == pytest.approx(math.log(8.0 / 4.0))  # ln((1 + 7) / (1 + mean_3 = 3))


def test_trend_quality_and_regime() -> None:
    c = rising()
    tq = market._trend_quality(c, SMALL)
    assert tq[2][3:] == pytest.approx(1.0)  # efficiency: a straight path
    assert tq[3][4:] == pytest.approx(1.0)  # autocorrelation of constant returns
    assert tq[0][4:].min() > 0.0  # MACD of a rising path is positive
    z1 = market._returns(c, SMALL)[1]
    reg = market._regime(c, SMALL, z1)
    assert reg[0][-1] == pytest.approx(1.0)  # ADX of a one-way path
    # CUSUM of z = 1 from row 4: S+ grows by 1 - k = 0.5 per row up to C = 5: (S+ + S-) / C
    assert reg[1][4:8] == pytest.approx([0.1, 0.2, 0.3, 0.4])


def test_groups_fill_every_slot_in_order() -> None:
    c = rising()
    groups = (market._returns, market._momentum, market._trend, market._volatility, market._range,
              market._volume, market._oscillators, market._trend_quality)  # fmt: skip
    widths = [len(g(c, SMALL)) for g in groups] + [2]
    assert widths == [8, 4, 6, 7, 3, 4, 4, 4, 2] and sum(widths) == len(market.SLOTS)
