"""``ofi.trade_sign_ema``: the count-weighted aggressor-sign EMA in trade-count time, by hand on a
scripted row sequence, through the row builders (bars and snapshot rows), and against the synthetic
trade-flow market's planted carrier (foxhunt.data.synth.trade_flow_signal)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from foxhunt.config.loader import load_config
from foxhunt.data.arrays import SIDE_ASK, SIDE_BID, BookArrays
from foxhunt.data.config import DataConfig, PlantedSignal, SynthConfig
from foxhunt.data.ingest import MarketData, load_market
from foxhunt.data.schemas import RowUnit
from foxhunt.data.synth import trade_flow_signal
from foxhunt.data.synth_market import synthetic_market
from foxhunt.features import ofi
from foxhunt.features.frame import RowInput, TradeInput
from foxhunt.features.pipeline import rows_from_market
from tests.features.test_ofi import make_rows

COL = ofi.SLOTS.index("trade_sign_ema")


def scripted(trade_row: list[int], sign: list[float], n: int = 6, **kw: object) -> RowInput:
    """``n`` one-level book rows (flat book) with the scripted trades."""
    book = {"bid_px": [[100.0]] * n, "ask_px": [[100.25]] * n, "bid_sz": [[10]] * n, "ask_sz": [[10]] * n}
    inp = make_rows(**book, **kw)  # type: ignore[arg-type]
    return dataclasses.replace(inp, trades=TradeInput(np.array(trade_row, np.int64), np.array(sign)))


def test_the_ema_by_hand_trade_by_trade() -> None:
    # N = 4 (step 1/4). Row 0: buy, buy; row 1: none; row 2: sell; row 3 (a new segment): sell, buy;
    # row 4: buy, sell, sell; row 5: none.
    inp = scripted([0, 0, 2, 3, 3, 4, 4, 4], [1, 1, -1, -1, 1, 1, -1, -1], segment_start=[1, 0, 0, 1, 0, 0])
    got = ofi.compute(inp, ofi.Params(trade_sign_horizon_trades=4))[:, COL]
    g0 = 0.25 + (1 - 0.25) / 4  # 0 -> 1/4 -> 7/16
    g2 = g0 + (-1 - g0) / 4  # 7/16 -> 5/64
    g3 = -0.25 + (1 + 0.25) / 4  # reset to 0: 0 -> -1/4 -> 1/16
    g4a = g3 + (1 - g3) / 4  # 19/64
    g4b = g4a + (-1 - g4a) / 4
    g4 = g4b + (-1 - g4b) / 4
    want = [g0, g0, g2, g3, g4, g4]  # rows without trades carry the value
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert (g0, g2, g3, g4a) == (7 / 16, 5 / 64, 1 / 16, 19 / 64)
    # The order inside a row counts: the last trade weighs most (buy-then-sell reads below sell-then-buy).
    late_buy = ofi.compute(scripted([0, 0], [-1, 1]), ofi.Params(trade_sign_horizon_trades=4))[0, COL]
    late_sell = ofi.compute(scripted([0, 0], [1, -1]), ofi.Params(trade_sign_horizon_trades=4))[0, COL]
    assert late_buy == pytest.approx(1 / 16) and late_sell == pytest.approx(-1 / 16)


def test_count_weighted_not_volume_weighted() -> None:
    """One large sell, then three small buys: the volume slot reads sell pressure, this one buying."""
    inp = scripted([0, 0, 0, 0], [-1, 1, 1, 1], n=1, buy=[3], sell=[50])
    out = ofi.compute(inp, ofi.Params(trade_sign_horizon_trades=2))[0]
    assert out[COL] == 13 / 16  # 0 -> -1/2 -> 1/4 -> 5/8 -> 13/16, whatever the sizes
    assert out[ofi.SLOTS.index("trade_flow")] < 0


def test_no_trades_known_or_no_flow_reads_zero() -> None:
    inp = scripted([0, 1], [1, 1], n=3)
    assert ofi.compute(dataclasses.replace(inp, trades=None), ofi.Params())[:, COL].tolist() == [0, 0, 0]
    off = dataclasses.replace(inp, flow_mask=np.array([True, False, True]))
    got = ofi.compute(off, ofi.Params(trade_sign_horizon_trades=2))[:, COL]
    # row 1 has no trade data: 0 there, but its trade still counts (the EMA runs in trade time)
    np.testing.assert_allclose(got, [0.5, 0.0, 0.75])


@pytest.mark.parametrize("row_unit", [RowUnit.BAR, RowUnit.SNAPSHOT])
def test_row_builders_list_every_aggressor_trade_once(row_unit: RowUnit) -> None:
    """The trades each row lists are the ones its buy and sell volumes sum (per row, in count)."""
    md = synthetic_market(SynthConfig(seed=3, sessions=2, events_per_session=6_000))
    inp = rows_from_market(md, DataConfig(row_unit=row_unit, bar_seconds=30))
    assert inp.trades is not None and np.all(np.diff(inp.trades.row) >= 0)
    per_row = np.bincount(inp.trades.row, minlength=len(inp))
    np.testing.assert_array_equal(per_row, inp.trade_count)
    buys = np.bincount(inp.trades.row, weights=inp.trades.sign > 0, minlength=len(inp))
    np.testing.assert_array_equal(buys > 0, inp.buy_volume > 0)
    np.testing.assert_array_equal(per_row - buys > 0, inp.sell_volume > 0)


# --- against the planted carrier -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FlowMarket:
    """One session of the trade-flow market: its data, its book and the planted carrier F after
    each book event."""

    md: MarketData
    book: BookArrays
    carrier: np.ndarray

    def rows(self, row_unit: RowUnit) -> RowInput:
        return rows_from_market(self.md, DataConfig(row_unit=row_unit, bar_seconds=30))


@pytest.fixture(scope="module")
def flow_market() -> FlowMarket:
    cfg = SynthConfig(
        seed=5, sessions=1, events_per_session=40_000, alpha=1.0, signal=PlantedSignal.TRADE_FLOW
    )
    assert cfg.flow_horizon_trades == ofi.Params().trade_sign_horizon_trades  # the slot's default
    md = synthetic_market(cfg)
    book = md.books[cfg.instrument_id]
    return FlowMarket(md, book, trade_flow_signal(book, cfg.flow_horizon_trades))


@pytest.mark.parametrize("row_unit", [RowUnit.BAR, RowUnit.SNAPSHOT])
def test_the_slot_tracks_the_planted_trade_flow_carrier(row_unit: RowUnit, flow_market: FlowMarket) -> None:
    """corr(slot at each row, F at the row's last event) > 0.9 (measured: 0.932 on 30 s bars, 0.940
    on snapshot rows), where the volume-weighted ``trade_flow`` reads 0.51 and 0.21. The slot counts
    every trade, the carrier the market orders only: the sweeps (28% of the trades here) are the rest."""
    inp = flow_market.rows(row_unit)
    out = ofi.compute(inp, ofi.Params())
    last = np.searchsorted(flow_market.book.ts_event, inp.ts, "right") - 1  # the row's last event
    ok = last >= 0
    f = flow_market.carrier[last[ok]]
    corr = float(np.corrcoef(out[ok, COL], f)[0, 1])
    old = float(np.corrcoef(out[ok, ofi.SLOTS.index("trade_flow")], f)[0, 1])
    assert corr > 0.9 and corr > old + 0.3, (corr, old)


def test_the_slot_is_the_carrier_over_the_market_orders(flow_market: FlowMarket) -> None:
    """Fed the market orders alone (trades that leave the touch where it was), the slot is the
    simulator's own recursion, row for row on snapshot rows (float32 rounding apart)."""
    book = flow_market.book
    inp = flow_market.rows(RowUnit.SNAPSHOT)
    assert len(inp) == len(book)  # one row per book event
    bid, ask = book.bid_px[:, 0], book.ask_px[:, 0]
    same_touch = np.r_[False, (bid[1:] == bid[:-1]) & (ask[1:] == ask[:-1])]
    market = np.flatnonzero((book.action == ord("T")) & same_touch)
    sign = np.where(book.side[market] == ord("B"), 1.0, -1.0)
    got = ofi.compute(dataclasses.replace(inp, trades=TradeInput(market, sign)), ofi.Params())[:, COL]
    np.testing.assert_allclose(got, flow_market.carrier, atol=1e-6)


# --- real data -----------------------------------------------------------------------------------

ESH4_MBO = "cme-es/esh4-glbx-mdp3-20231225.mbo.dbn.zst"  # two hours of ES, 2,973 trades (one side N)
MBP10_NO_TRADES = "databento-fixtures/GLBX.MDP3/test_data.mbp-10.dbn.zst"  # four book states, no trade


def _real_rows(path: Path, row_unit: RowUnit) -> tuple[MarketData, RowInput]:
    cfg = load_config("smoke", overrides=[f"data.row_unit={row_unit.value}", "data.bar_seconds=15"])
    md = load_market([path], cfg.data)
    return md, rows_from_market(md, cfg.data)


@pytest.mark.parametrize("row_unit", [RowUnit.BAR, RowUnit.SNAPSHOT])
def test_real_mbo_trades_run_the_ema_in_trade_time(real_data_dir: Path, row_unit: RowUnit) -> None:
    md, inp = _real_rows(real_data_dir / ESH4_MBO, row_unit)
    (trades,) = md.trades.values()
    assert inp.trades is not None and len(inp.trades) == int(np.isin(trades.side, (SIDE_BID, SIDE_ASK)).sum())
    params = ofi.Params()
    got = ofi.compute(inp, params)[:, COL]
    # The plain recursion over the listed signs, restarted at each segment, read at each row's last trade.
    seg = np.cumsum(inp.segment_start)
    want = np.zeros(len(inp))
    g, g_seg = 0.0, -1
    for row, s in zip(inp.trades.row, inp.trades.sign, strict=True):
        if seg[row] != g_seg:
            g, g_seg = 0.0, seg[row]
        g += (s - g) / params.trade_sign_horizon_trades
        want[row] = g
    has = np.bincount(inp.trades.row, minlength=len(inp)) > 0
    np.testing.assert_allclose(got[has], want[has], atol=1e-6)
    assert (got != 0).mean() > 0.99 and np.abs(got).max() <= 1.0 and np.abs(got).max() > 0.1


def test_real_book_without_trades_reads_zero(real_data_dir: Path) -> None:
    _, inp = _real_rows(real_data_dir / MBP10_NO_TRADES, RowUnit.SNAPSHOT)
    assert len(inp) and not inp.flow_mask.any() and (inp.trades is None or not len(inp.trades))
    assert not ofi.compute(inp, ofi.Params())[:, COL].any()
