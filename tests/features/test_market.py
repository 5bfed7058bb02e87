"""Market family: contract, causality, segment resets and hand-worked numbers."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from pydantic import ValidationError

from foxhunt.data.schemas import DataSource, RowUnit
from foxhunt.features import market
from foxhunt.features.frame import RowInput

SLOT = {name: j for j, name in enumerate(market.SLOTS)}


def tiny_rows(
    close: list[float] | np.ndarray,
    *,
    high: list[float] | np.ndarray | None = None,
    low: list[float] | np.ndarray | None = None,
    volume: list[float] | np.ndarray | None = None,
    seg: list[int] | None = None,
    ts_s: list[float] | np.ndarray | None = None,
) -> RowInput:
    """An OHLCV-style bar RowInput (no book): ``seg`` lists the rows that start a segment (row 0 always)."""
    c = np.asarray(close, np.float64)
    n = len(c)
    start = np.zeros(n, bool)
    start[0] = True
    start[list(seg or [])] = True
    ts = (
        np.arange(n, dtype=np.int64) * 30_000_000_000
        if ts_s is None
        else (np.asarray(ts_s, np.float64) * 1e9).astype(np.int64)
    )
    nan_book = np.full((n, 1), np.nan)
    zero_book = np.zeros((n, 1))
    return RowInput(
        row_unit=RowUnit.BAR,
        data_source=DataSource.OHLCV,
        tick_size=0.25,
        ts=ts,
        trade_date=np.cumsum(start).astype(np.int64) + 20260301,
        segment_start=start,
        open=c.copy(),
        high=c.copy() if high is None else np.asarray(high, np.float64),
        low=c.copy() if low is None else np.asarray(low, np.float64),
        close=c,
        volume=np.zeros(n) if volume is None else np.asarray(volume, np.float64),
        buy_volume=np.zeros(n),
        sell_volume=np.zeros(n),
        trade_count=np.zeros(n),
        event_count=np.ones(n),
        vwap=np.full(n, np.nan),
        last_trade_ts=np.full(n, -1, np.int64),
        bid_px=nan_book,
        ask_px=nan_book.copy(),
        bid_sz=zero_book,
        ask_sz=zero_book.copy(),
        bid_ct=zero_book.copy(),
        ask_ct=zero_book.copy(),
        book_mask=np.zeros(n, bool),
        flow_mask=np.zeros(n, bool),
        events=None,
    )


def suffix(inp: RowInput, s: int) -> RowInput:
    """Rows ``s:`` alone (no events): the input a segment starting at ``s`` would have on its own."""
    fields = {f.name: getattr(inp, f.name) for f in dataclasses.fields(inp)}
    for k, v in fields.items():
        if isinstance(v, np.ndarray):
            fields[k] = v[s:]
    fields["events"] = None
    return RowInput(**fields)


def ohlcv_style(inp: RowInput, nan_share: float = 0.3, seed: int = 0) -> RowInput:
    """The same rows as OHLCV data: no book, and NaN prices in ``nan_share`` of the rows (no trades)."""
    rng = np.random.default_rng(seed)
    gone = rng.random(len(inp)) < nan_share
    nan = np.full(inp.bid_px.shape, np.nan)

    def holes(a: np.ndarray) -> np.ndarray:
        return np.where(gone, np.nan, a)

    return dataclasses.replace(
        inp,
        data_source=DataSource.OHLCV,
        open=holes(inp.open),
        high=holes(inp.high),
        low=holes(inp.low),
        close=holes(inp.close),
        volume=np.where(gone, 0.0, inp.volume),
        bid_px=nan,
        ask_px=nan.copy(),
        book_mask=np.zeros(len(inp), bool),
        flow_mask=np.zeros(len(inp), bool),
        events=None,
    )


@pytest.fixture(scope="module")
def computed(bar_rows: RowInput, snapshot_rows: RowInput) -> dict[str, tuple[RowInput, np.ndarray]]:
    p = market.MarketConfig()
    return {
        "bar": (bar_rows, market.compute(bar_rows, p)),
        "snapshot": (snapshot_rows, market.compute(snapshot_rows, p)),
    }


# --- contract -------------------------------------------------------------------------------------


def test_slots_follow_the_spec_layout() -> None:
    assert len(market.SLOTS) == 42 and len(set(market.SLOTS)) == 42
    assert market.SLOTS[0] == "ret_lag1"
    assert market.SLOTS[-2] == "adx_14" and market.SLOTS[-1] == "cusum"
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", s) for s in market.SLOTS)
    assert market.NEEDS_BOOK is False
    for name, field in market.MarketConfig.model_fields.items():
        assert field.description, f"MarketConfig.{name} has no description"


def test_params_reject_bad_values() -> None:
    with pytest.raises(ValidationError):
        market.MarketConfig(macd_fast=30, macd_slow=26)
    with pytest.raises(ValidationError):
        market.MarketConfig(trend_windows=(1, 64, 256))
    with pytest.raises(ValidationError):
        market.MarketConfig(return_lags=(2, 5))
    with pytest.raises(ValidationError):
        market.MarketConfig(window=3)  # unknown key


@pytest.mark.parametrize("unit", ["bar", "snapshot"])
def test_shape_dtype_finite_and_bounded(computed: dict, unit: str) -> None:
    inp, x = computed[unit]
    assert x.shape == (len(inp), len(market.SLOTS)) and x.dtype == np.float32
    assert np.isfinite(x).all()
    assert np.abs(x).max() <= 1000.0
    for name in ("rsi_14", "range_pos_w20", "range_pos_w100", "efficiency_w20", "autocorr_w50", "cusum"):
        assert np.abs(x[:, SLOT[name]]).max() <= 1.0, name
    assert 0.0 <= x[:, SLOT["adx_14"]].min() and x[:, SLOT["adx_14"]].max() <= 1.0
    for w in (16, 64, 256):
        assert np.abs(x[:, SLOT[f"trend_tstat_w{w}"]]).max() <= 20.0
    assert (x != 0).any(axis=0).all(), "a slot is 0 on every row"


@pytest.mark.parametrize("unit", ["bar", "snapshot"])
def test_prefix_gives_the_same_rows(computed: dict, unit: str) -> None:
    inp, x = computed[unit]
    for k in (1, 7, 300, len(inp) // 2 + 13, len(inp) - 1):
        np.testing.assert_array_equal(market.compute(inp.prefix(k), market.MarketConfig()), x[:k])


@pytest.mark.parametrize("unit", ["bar", "snapshot"])
def test_segments_do_not_see_each_other(computed: dict, unit: str) -> None:
    inp, x = computed[unit]
    starts = np.flatnonzero(inp.segment_start)
    assert len(starts) >= 2
    assert (x[starts, SLOT["ret_lag1"]] == 0).all()
    # The second segment computed alone is bit-for-bit the same: nothing reaches back across it.
    s = int(starts[1])
    np.testing.assert_array_equal(market.compute(suffix(inp, s), market.MarketConfig()), x[s:])
    # Lagged statistics restart: the first rows of a segment have no k-row return, no trend, no ADX.
    for name in ("ret_z_lag100", "trend_tstat_w256", "vol_rv_w500_bps"):
        assert (x[s : s + 100, SLOT[name]] == 0).all(), name
    assert (x[s : s + 2 * 14 - 1, SLOT["adx_14"]] == 0).all() and x[s + 2 * 14 - 1, SLOT["adx_14"]] > 0


def test_ohlcv_input_with_missing_prices(bar_rows: RowInput) -> None:
    inp = ohlcv_style(bar_rows)
    x = market.compute(inp, market.MarketConfig())
    assert x.shape == (len(inp), 42) and np.isfinite(x).all()
    gone = np.isnan(inp.close)
    assert (x[gone, SLOT["ret_lag1"]] == 0).all()  # a missing price is no move
    # With the book removed but prices kept, the family is unchanged (it never reads the book).
    no_book = dataclasses.replace(
        bar_rows,
        data_source=DataSource.OHLCV,
        book_mask=np.zeros(len(bar_rows), bool),
        bid_px=np.full(bar_rows.bid_px.shape, np.nan),
        events=None,
    )
    p = market.MarketConfig()
    np.testing.assert_array_equal(market.compute(no_book, p), market.compute(bar_rows, p))


# --- hand-worked numbers --------------------------------------------------------------------------


def test_slot0_is_the_last_rows_log_return() -> None:
    inp = tiny_rows([100.0, 101.0, 99.0, np.nan, 99.5, 98.0], seg=[2])
    x = market.compute(inp, market.MarketConfig())
    expected = [0.0, math.log(101 / 100), 0.0, 0.0, math.log(99.5 / 99), math.log(98 / 99.5)]
    np.testing.assert_allclose(x[:, 0], expected, rtol=1e-6, atol=0)


def test_leading_missing_prices_give_zero_rows() -> None:
    inp = tiny_rows([np.nan, np.nan, 100.0, 101.0])
    x = market.compute(inp, market.MarketConfig())
    assert (x[:3] == 0).all() and x[3, 0] == pytest.approx(math.log(1.01), rel=1e-6)


def test_trend_slope_and_tstat_hand_worked() -> None:
    # y = ln(c / 100) = [0, 0, 1, 3, 2] · 1e-3; the window of 4 at the last row is [0, 1, 3, 2] · 1e-3.
    # x = 0..3: Sxx = 5, Sxy = 4e-3, β = 0.8e-3, Syy = 5e-6, SSR = 5e-6 - 0.8e-3 · 4e-3 = 1.8e-6,
    # se = sqrt(1.8e-6 / (2 · 5)), t = 0.8 / sqrt(0.18). σ_4 = sqrt((0 + 1 + 4 + 1) / 4) · 1e-3.
    y = np.array([0.0, 0.0, 1.0, 3.0, 2.0]) * 1e-3
    p = market.MarketConfig(trend_windows=(4, 5, 6))
    x = market.compute(tiny_rows(100.0 * np.exp(y)), p)
    t_expected = 0.8 / math.sqrt(0.18)
    slope_expected = 0.8e-3 * math.sqrt(4) / (math.sqrt(1.5) * 1e-3)
    assert x[4, SLOT["trend_slope_w16"]] == pytest.approx(slope_expected, rel=1e-5)
    assert x[4, SLOT["trend_tstat_w16"]] == pytest.approx(t_expected, rel=1e-5)
    assert (x[:4, SLOT["trend_tstat_w16"]] == 0).all()  # fewer than 4 returns in the segment


@pytest.mark.parametrize("direction", [1.0, -1.0])
def test_perfect_line_tstat_is_clipped(direction: float) -> None:
    y = direction * 1e-4 * np.arange(40)
    x = market.compute(tiny_rows(5000.0 * np.exp(y)), market.MarketConfig(trend_windows=(4, 8, 16)))
    for name, w in (("trend_tstat_w16", 4), ("trend_tstat_w64", 8), ("trend_tstat_w256", 16)):
        assert (x[w:, SLOT[name]] == direction * 20.0).all()
        assert (x[:w, SLOT[name]] == 0).all()
    # Slope: β √W / σ_W with β = σ_W = 1e-4 per row -> √W.
    np.testing.assert_allclose(x[4:, SLOT["trend_slope_w16"]], direction * 2.0, rtol=1e-5)
    flat = market.compute(tiny_rows(np.full(40, 5000.0)), market.MarketConfig(trend_windows=(4, 8, 16)))
    assert (flat == 0).all()


def test_rsi_hand_worked() -> None:
    # r = [2, -1, 3, -1, 0] · 1e-3, period 3. After 3 changes: G = 5/3, L = 1/3 -> (G - L)/(G + L) = 2/3;
    # then G = (10/3 + 0)/3 = 10/9, L = (2/3 + 1)/3 = 5/9 -> 1/3; then G = 20/27, L = 10/27 -> 1/3.
    y = np.array([0.0, 2.0, 1.0, 4.0, 3.0, 3.0]) * 1e-3
    x = market.compute(tiny_rows(100.0 * np.exp(y)), market.MarketConfig(rsi_period=3))
    np.testing.assert_allclose(x[:, SLOT["rsi_14"]], [0, 0, 0, 2 / 3, 1 / 3, 1 / 3], rtol=1e-5, atol=1e-7)


def test_range_position_and_efficiency_hand_worked() -> None:
    # Closes only (high = low = close); window 4 at the last row: y = [0, 3, 1, 2] · 1e-3, the row
    # before it y = 0: range position 2 (2 - 0) / (3 - 0) - 1 = 1/3; efficiency (2 - 0) / (0+3+2+1) = 1/3.
    y = np.array([0.0, 0.0, 3.0, 1.0, 2.0]) * 1e-3
    p = market.MarketConfig(range_windows=(4, 4), efficiency_window=4)
    x = market.compute(tiny_rows(100.0 * np.exp(y)), p)
    assert x[4, SLOT["range_pos_w20"]] == pytest.approx(1 / 3, rel=1e-5)
    assert x[4, SLOT["efficiency_w20"]] == pytest.approx(1 / 3, rel=1e-5)


def _random_bars(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.cumsum(rng.normal(0, 1e-3, n) * (rng.random(n) < 0.7))
    c = 100.0 * np.exp(y)
    return c, c * np.exp(np.abs(rng.normal(0, 5e-4, n))), c * np.exp(-np.abs(rng.normal(0, 5e-4, n)))


def _adx_reference(h: list[float], l: list[float], c: list[float], n: int) -> list[float]:
    """Wilder's ADX / 100 for one segment, textbook form (log prices in, one value per row)."""
    out = [0.0] * len(c)
    tr, pdm, mdm = [], [], []
    for t in range(1, len(c)):
        tr.append(max(h[t] - l[t], abs(h[t] - c[t - 1]), abs(l[t] - c[t - 1])))
        up, dn = h[t] - h[t - 1], l[t - 1] - l[t]
        pdm.append(up if up > dn and up > 0 else 0.0)
        mdm.append(dn if dn > up and dn > 0 else 0.0)

    def smooth(v: list[float]) -> list[float | None]:
        s: list[float | None] = [None] * len(v)
        if len(v) >= n:
            s[n - 1] = sum(v[:n])
            for i in range(n, len(v)):
                s[i] = s[i - 1] - s[i - 1] / n + v[i]
        return s

    s_tr, s_p, s_m = smooth(tr), smooth(pdm), smooth(mdm)
    dx = [0.0] * len(tr)
    for i in range(n - 1, len(tr)):
        pdi, mdi = 100 * s_p[i] / s_tr[i], 100 * s_m[i] / s_tr[i]
        dx[i] = 100 * abs(pdi - mdi) / (pdi + mdi) if pdi + mdi > 0 else 0.0
    adx = 0.0
    for i in range(2 * n - 2, len(tr)):
        adx = sum(dx[n - 1 : 2 * n - 1]) / n if i == 2 * n - 2 else (adx * (n - 1) + dx[i]) / n
        out[i + 1] = adx / 100
    return out


def test_adx_matches_a_direct_implementation() -> None:
    c, h, l = _random_bars(70, seed=3)
    seg = 33
    x = market.compute(tiny_rows(c, high=h, low=l, seg=[seg]), market.MarketConfig(adx_period=4))
    expected: list[float] = []
    for a, b in ((0, seg), (seg, len(c))):
        expected += _adx_reference(list(np.log(h[a:b])), list(np.log(l[a:b])), list(np.log(c[a:b])), 4)
    assert np.count_nonzero(expected) > 40
    np.testing.assert_allclose(x[:, SLOT["adx_14"]], expected, rtol=1e-5, atol=1e-7)


def _cusum_reference(c: list[float], w: int, drift: float, cap: float, clip: float) -> list[float]:
    """The capped CUSUM of z = r / σ_w for one segment, plain Python."""
    r = [0.0] + [math.log(c[t] / c[t - 1]) for t in range(1, len(c))]
    sp = sm = 0.0
    out = [0.0]
    for t in range(1, len(c)):
        z = 0.0
        if t >= w:
            sigma = math.sqrt(sum(v * v for v in r[t - w + 1 : t + 1]) / w)
            z = max(-clip, min(clip, r[t] / sigma)) if sigma > 0 else 0.0
        sp = min(cap, max(0.0, sp + z - drift))
        sm = max(-cap, min(0.0, sm + z + drift))
        out.append((sp + sm) / cap)
    return out


def test_cusum_matches_a_direct_implementation() -> None:
    c, _, _ = _random_bars(80, seed=11)
    c[40:52] *= np.exp(np.arange(12) * 2e-3)  # a run of up moves in the second segment
    seg = 25
    p = market.MarketConfig(vol_norm_window=5, cusum_drift=0.3, cusum_cap=2.0)
    x = market.compute(tiny_rows(c, seg=[seg]), p)
    expected = [
        v for a, b in ((0, seg), (seg, len(c))) for v in _cusum_reference(list(c[a:b]), 5, 0.3, 2.0, 10.0)
    ]
    assert max(expected) == 1.0 and min(expected) < -0.3
    np.testing.assert_allclose(x[:, SLOT["cusum"]], expected, rtol=1e-5, atol=1e-6)


def test_volume_relative_to_its_trailing_mean() -> None:
    # Window 2 at row 2: volumes [10, 30] (mean 20): ln(31 / 21); z: (30 - 20) / 10 = 1.
    inp = tiny_rows([100.0, 100.0, 100.0], volume=[5.0, 10.0, 30.0])
    x = market.compute(inp, market.MarketConfig(volume_windows=(2, 2)))
    assert x[2, SLOT["volume_rel_w20"]] == pytest.approx(math.log(31 / 21), rel=1e-6)
    assert x[2, SLOT["volume_z_w100"]] == pytest.approx(1.0, rel=1e-6)
    assert (x[:2, SLOT["volume_rel_w20"]] == 0).all()
