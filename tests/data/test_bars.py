"""Bars from hand-built book states and trades, checked field by field."""

from __future__ import annotations

import numpy as np
import pytest

from foxhunt.data.arrays import OhlcvArrays
from foxhunt.data.bars import build_bars, build_snapshots
from foxhunt.data.config import DataConfig
from foxhunt.data.ingest import MarketData
from foxhunt.data.schemas import BarKind, DataSource
from foxhunt.data.sessions import session_open_ns
from foxhunt.errors import BarSpecError
from tests.factories import make_book, make_trades

S = 10**9
OPEN = session_open_ns(20260302, "America/Chicago", DataConfig().session_open)  # Sun 17:00 CT
NEXT_OPEN = session_open_ns(20260303, "America/Chicago", DataConfig().session_open)
HALT = NEXT_OPEN - 1800 * S  # 16:30 CT, inside the daily halt

BOOK_T = np.array([1, 5, 31, 45, 100]) * S + OPEN
MID_TICKS = np.array([0, 2, 1, -1, 3])
TRADE_T = np.array([2, 20, 35]) * S + OPEN


def _market(extra_book_t=(), extra_trade_t=()) -> MarketData:
    bt = np.concatenate([BOOK_T, np.asarray(extra_book_t, np.int64)])
    ticks = np.concatenate([MID_TICKS, np.zeros(len(extra_book_t), int)])
    tt = np.concatenate([TRADE_T, np.asarray(extra_trade_t, np.int64)])
    n_extra = len(extra_trade_t)
    trades = make_trades(
        tt,
        [5000.25, 5000.0, 5000.5] + [5000.0] * n_extra,
        [3, 2, 5] + [1] * n_extra,
        "BAB" + "A" * n_extra,
    )
    book = make_book(bt, ticks)
    return MarketData(books={1: book}, crossed={1: book.crossed()}, trades={1: trades}, symbols={1: "ESH6"})


def _mid(ticks):
    return 5000.0 + np.asarray(ticks) * 0.25 + 0.125


def test_time_bars_field_by_field() -> None:
    bars = build_bars(_market(), DataConfig(bar_seconds=30)).bars
    assert len(bars) == 3
    assert (bars.ts_open - OPEN).tolist() == [0, 30 * S, 90 * S]
    assert (bars.ts_close - bars.ts_open).tolist() == [30 * S] * 3
    assert bars.trade_date.tolist() == [20260302] * 3
    np.testing.assert_allclose(bars.mid_open, _mid([0, 1, 3]))
    np.testing.assert_allclose(bars.mid_high, _mid([2, 1, 3]))
    np.testing.assert_allclose(bars.mid_low, _mid([0, -1, 3]))
    np.testing.assert_allclose(bars.mid_close, _mid([2, -1, 3]))
    assert bars.volume.tolist() == [5, 5, 0]
    assert bars.buy_volume.tolist() == [3, 5, 0] and bars.sell_volume.tolist() == [2, 0, 0]
    assert bars.trade_count.tolist() == [2, 1, 0] and bars.event_count.tolist() == [2, 2, 1]
    assert bars.vwap[0] == pytest.approx((5000.25 * 3 + 5000.0 * 2) / 5)
    assert bars.trade_open[0] == 5000.25 and bars.trade_close[0] == 5000.0
    assert bars.trade_high[0] == 5000.25 and bars.trade_low[0] == 5000.0
    assert np.isnan(bars.trade_open[2]) and np.isnan(bars.vwap[2])
    # The book at close is the last state in the bar.
    assert bars.bid_px[0, 0] == 5000.0 + 2 * 0.25 and bars.bid_px.shape == (3, 10)
    assert bars.bid_sz[1].tolist() == [10] * 10 and bars.book_mask.all()


def test_no_bar_spans_the_halt_or_two_sessions() -> None:
    md = _market(extra_book_t=[HALT, NEXT_OPEN + 5 * S], extra_trade_t=[HALT + S, NEXT_OPEN + 6 * S])
    series = build_bars(md, DataConfig(bar_seconds=3600))
    bars = series.bars
    assert series.halt_dropped == 2  # one book state and one trade inside the halt
    assert bars.trade_date.tolist() == [20260302, 20260303]
    assert bars.ts_open[1] == NEXT_OPEN and bars.volume.tolist() == [10, 1]
    assert np.all(bars.ts_close[:-1] <= bars.ts_open[1:])


def test_volume_bars() -> None:
    bars = build_bars(_market(), DataConfig(bar_kind=BarKind.VOLUME, volume_bar_contracts=4)).bars
    # Trades 3, 2, 5 with v = 4: bar 0 holds trades 1-2 (starts below 4), bar 1 trade 3.
    assert bars.volume.tolist() == [5, 5]
    assert (bars.ts_close - OPEN).tolist() == [20 * S, 35 * S]
    assert bars.event_count.tolist() == [2, 1]  # states at 1 s, 5 s; 31 s; later ones unassigned
    big = build_bars(_market(), DataConfig(bar_kind=BarKind.VOLUME, volume_bar_contracts=6)).bars
    assert big.volume.tolist() == [10]  # 3+2 < 6, the 5-lot completes it


def test_ohlcv_bars_aggregate_and_mask() -> None:
    t = OPEN + np.arange(10) * 60 * S
    src = OhlcvArrays(
        ts_event=t,
        instrument_id=np.ones(10, np.uint32),
        open=np.arange(10) + 100.0,
        high=np.arange(10) + 101.0,
        low=np.arange(10) + 99.0,
        close=np.arange(10) + 100.5,
        volume=np.arange(10) + 1,
    )
    md = MarketData(ohlcv={1: src}, ohlcv_bar_ns=60 * S)
    bars = build_bars(md, DataConfig(data_source=DataSource.OHLCV, bar_seconds=300)).bars
    assert len(bars) == 2
    assert bars.trade_open.tolist() == [100.0, 105.0] and bars.trade_close.tolist() == [
        104.5,
        109.5,
    ]
    assert bars.trade_high.tolist() == [105.0, 110.0] and bars.trade_low.tolist() == [99.0, 104.0]
    assert bars.volume.tolist() == [15, 40]
    assert not bars.book_mask.any() and not bars.flow_mask.any()
    assert np.all(bars.bid_px == 0) and np.all(bars.mid_close == 0)
    assert (bars.ts_close - bars.ts_open).tolist() == [300 * S] * 2
    with pytest.raises(BarSpecError, match="multiple of 60"):
        build_bars(md, DataConfig(data_source=DataSource.OHLCV, bar_seconds=30))


def test_snapshot_rows() -> None:
    rows = build_snapshots(_market(), DataConfig())
    assert len(rows.book) == 5 and rows.trade_date.tolist() == [20260302] * 5
    assert rows.trades_before.tolist() == [0, 1, 2, 3, 3]
    assert not rows.crossed.any()
