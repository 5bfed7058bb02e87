"""The ``ofi`` family: CKS order-flow imbalance by hand, book-state slots by hand, causality, the
segment reset, empty and missing books, and the planted alpha of the synthetic market."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from foxhunt.data.config import DataConfig, PlantedSignal, SynthConfig
from foxhunt.data.schemas import DataSource, RowUnit
from foxhunt.data.synth import simulate_session, trade_flow_signal
from foxhunt.data.synth_market import synthetic_market
from foxhunt.features import ofi
from foxhunt.features._kernels import Carry
from foxhunt.features.frame import EventInput, RowInput
from foxhunt.features.pipeline import rows_from_market
from tests.features.conftest import synthetic_rows

TICK = 0.25
NS = 1_000_000_000


# --- helpers shared by the book-family tests (test_tlob, test_snapshot import them) ---------------


def make_rows(
    bid_px: list | np.ndarray,
    ask_px: list | np.ndarray,
    bid_sz: list | np.ndarray,
    ask_sz: list | np.ndarray,
    *,
    bid_ct: list | np.ndarray | None = None,
    ask_ct: list | np.ndarray | None = None,
    ts_s: list | np.ndarray | None = None,
    segment_start: list | np.ndarray | None = None,
    buy: list | np.ndarray | None = None,
    sell: list | np.ndarray | None = None,
    last_trade_s: list | np.ndarray | None = None,
) -> RowInput:
    """A tiny snapshot-unit RowInput (one book state per row, mid price path) from ``[n, L]`` books.

    Times in seconds (default 1 s apart); ``last_trade_s`` < 0 means no trade yet.
    """
    bpx, apx = np.asarray(bid_px, float), np.asarray(ask_px, float)
    bsz, asz = np.asarray(bid_sz, float), np.asarray(ask_sz, float)
    n = len(bpx)
    bct = np.ones_like(bsz) if bid_ct is None else np.asarray(bid_ct, float)
    act = np.ones_like(asz) if ask_ct is None else np.asarray(ask_ct, float)
    ts = (np.arange(n) if ts_s is None else np.asarray(ts_s, float)) * NS
    ts = ts.astype(np.int64)
    seg = np.zeros(n, bool) if segment_start is None else np.asarray(segment_start, bool)
    seg[0] = True
    buy_v = np.zeros(n) if buy is None else np.asarray(buy, float)
    sell_v = np.zeros(n) if sell is None else np.asarray(sell, float)
    if last_trade_s is None:
        last = np.full(n, -1, np.int64)
    else:
        lt = np.asarray(last_trade_s, float)
        last = np.where(lt < 0, -1, lt * NS).astype(np.int64)
    mid = 0.5 * (bpx[:, 0] + apx[:, 0])
    events = EventInput(
        row=np.arange(n, dtype=np.int64),
        ts=ts,
        segment_start=seg.copy(),
        bid_px=bpx,
        ask_px=apx,
        bid_sz=bsz,
        ask_sz=asz,
        bid_ct=bct,
        ask_ct=act,
    )
    return RowInput(
        row_unit=RowUnit.SNAPSHOT,
        data_source=DataSource.MBP10,
        tick_size=TICK,
        ts=ts,
        trade_date=np.full(n, 20260302, np.int64),
        segment_start=seg,
        open=mid,
        high=mid,
        low=mid,
        close=mid,
        volume=buy_v + sell_v,
        buy_volume=buy_v,
        sell_volume=sell_v,
        trade_count=((buy_v + sell_v) > 0).astype(float),
        event_count=np.ones(n),
        vwap=np.full(n, np.nan),
        last_trade_ts=last,
        bid_px=bpx,
        ask_px=apx,
        bid_sz=bsz,
        ask_sz=asz,
        bid_ct=bct,
        ask_ct=act,
        book_mask=np.ones(n, bool),
        flow_mask=np.ones(n, bool),
        events=events,
    )


def ohlcv_rows(n: int = 20, levels: int = 10) -> RowInput:
    """What ``data_source = ohlcv`` bars look like: book NaN, sizes 0, masks False, no events."""
    rng = np.random.default_rng(0)
    close = 5500 + np.cumsum(rng.normal(size=n))
    zeros = np.zeros((n, levels))
    nan = np.full((n, levels), np.nan)
    seg = np.zeros(n, bool)
    seg[0] = True
    return RowInput(
        row_unit=RowUnit.BAR,
        data_source=DataSource.OHLCV,
        tick_size=TICK,
        ts=np.arange(1, n + 1, dtype=np.int64) * 30 * NS,
        trade_date=np.full(n, 20260302, np.int64),
        segment_start=seg,
        open=close - 0.5,
        high=close + 1,
        low=close - 1,
        close=close,
        volume=np.full(n, 100.0),
        buy_volume=np.zeros(n),
        sell_volume=np.zeros(n),
        trade_count=np.zeros(n),
        event_count=np.full(n, 5.0),
        vwap=np.zeros(n),
        last_trade_ts=np.full(n, -1, np.int64),
        bid_px=nan,
        ask_px=nan.copy(),
        bid_sz=zeros,
        ask_sz=zeros.copy(),
        bid_ct=zeros.copy(),
        ask_ct=zeros.copy(),
        book_mask=np.zeros(n, bool),
        flow_mask=np.zeros(n, bool),
        events=None,
    )


def rows_from(inp: RowInput, lo: int) -> RowInput:
    """Rows ``lo:`` (and their events, renumbered), as if the data began at row ``lo``."""
    fields = {
        f.name: (v[lo:] if isinstance(v := getattr(inp, f.name), np.ndarray) else v)
        for f in dataclasses.fields(inp)
    }
    if inp.events is not None:
        m = int(np.searchsorted(inp.events.row, lo, "left"))
        ev = {f.name: getattr(inp.events, f.name)[m:] for f in dataclasses.fields(EventInput)}
        ev["row"] = ev["row"] - lo
        fields["events"] = EventInput(**ev)
    return RowInput(**fields)


def second_segment_start(inp: RowInput) -> int:
    starts = np.flatnonzero(inp.segment_start)
    assert len(starts) >= 2, "the fixture should hold two sessions"
    return int(starts[1])


# --- contract -----------------------------------------------------------------------------------

ROW_UNITS = ["bar_rows", "snapshot_rows"]
COL = {name: i for i, name in enumerate(ofi.SLOTS)}


@pytest.mark.parametrize("fixture", ROW_UNITS)
def test_width_and_finite(fixture: str, request: pytest.FixtureRequest) -> None:
    inp = request.getfixturevalue(fixture)
    out = ofi.compute(inp, ofi.OfiConfig())
    assert len(ofi.SLOTS) == 33 and len(set(ofi.SLOTS)) == 33 and ofi.NEEDS_BOOK
    assert out.shape == (len(inp), len(ofi.SLOTS)) and out.dtype == np.float32
    assert np.isfinite(out).all()
    # every slot carries information on real data, except the intra-row momentum of snapshots
    # (a snapshot row's price path is one point)
    live = (out != 0).mean(axis=0) > 0.001
    expected = np.ones(len(ofi.SLOTS), bool)
    if inp.row_unit is RowUnit.SNAPSHOT:
        expected[COL["intrabar_momentum"]] = False
    assert np.array_equal(live, expected), [s for s, ok in zip(ofi.SLOTS, live, strict=True) if not ok]


@pytest.mark.parametrize("fixture", ROW_UNITS)
def test_prefix_gives_the_same_rows(fixture: str, request: pytest.FixtureRequest) -> None:
    inp = request.getfixturevalue(fixture)
    full = ofi.compute(inp, ofi.OfiConfig())
    for k in (1, 2, 37, len(inp) // 3, second_segment_start(inp) + 5, len(inp) - 1):
        assert np.array_equal(ofi.compute(inp.prefix(k), ofi.OfiConfig()), full[:k]), k


@pytest.mark.parametrize("fixture", ROW_UNITS)
def test_segment_start_restarts_every_recursion(fixture: str, request: pytest.FixtureRequest) -> None:
    """The second session's rows do not depend on anything before it."""
    inp = request.getfixturevalue(fixture)
    s = second_segment_start(inp)
    full = ofi.compute(inp, ofi.OfiConfig())
    assert np.array_equal(ofi.compute(rows_from(inp, s), ofi.OfiConfig())[:500], full[s:][:500])


def test_lags_are_zero_at_a_segment_start() -> None:
    book = dict(
        bid_px=[[100.0]] * 4,
        ask_px=[[100.25]] * 4,
        bid_sz=[[10], [12], [12], [20]],
        ask_sz=[[10], [10], [3], [10]],
    )
    out = ofi.compute(make_rows(**book, segment_start=[1, 0, 1, 0]), ofi.OfiConfig(depth_span=1))
    # OFI needs a previous state of the segment: rows 0 and 2 have none.
    assert out[0, COL["ofi_l0"]] == 0 and out[2, COL["ofi_l0"]] == 0
    assert out[1, COL["ofi_l0"]] == pytest.approx(2 / 11)
    assert out[3, COL["ofi_l0"]] == pytest.approx((8 - 7) / 15)
    assert out[2, COL["ofi_accel"]] == 0 and out[2, COL["spread_change"]] == 0


# --- hand-worked numbers ------------------------------------------------------------------------

# Three book states, two levels. State 1: bid queues +4 / -2, ask queues -3 / +5 (same prices).
# State 2: the ask moves up a tick (both levels), the bid improves a tick (both levels).
BID_PX = [[100.00, 99.75], [100.00, 99.75], [100.25, 100.00]]
ASK_PX = [[100.25, 100.50], [100.25, 100.50], [100.50, 100.75]]
BID_SZ = [[10, 20], [14, 18], [5, 14]]
ASK_SZ = [[15, 25], [12, 30], [9, 40]]


def test_cks_ofi_by_hand() -> None:
    reset = np.array([1, 0, 0])
    e = ofi.cks_ofi(np.array(BID_PX), np.array(BID_SZ), np.array(ASK_PX), np.array(ASK_SZ), reset)
    # level 1: state 1: e^b = 14 - 10 = 4, e^a = 12 - 15 = -3 -> 7;
    #          state 2: bid up -> e^b = +5, ask up -> e^a = -12 -> 17
    # level 2: state 1: e^b = 18 - 20 = -2, e^a = 30 - 25 = 5 -> -7;
    #          state 2: bid up -> e^b = +14, ask up -> e^a = -30 -> 44
    np.testing.assert_array_equal(e, [[0, 0], [7, -7], [17, 44]])


def test_cks_ofi_with_empty_levels() -> None:
    nan = np.nan
    bid_px = np.array([[100.0], [nan], [99.75]])
    ask_px = np.array([[nan], [100.5], [100.5]])
    bid_sz = np.array([[10.0], [0.0], [6.0]])
    ask_sz = np.array([[0.0], [8.0], [9.0]])
    e = ofi.cks_ofi(bid_px, bid_sz, ask_px, ask_sz, np.array([1, 0, 0]))
    # state 1: the bid empties (-10), an ask appears (e^a = +8) -> -18
    # state 2: a bid appears (+6), the ask queue grows by 1 -> 5
    np.testing.assert_array_equal(e[:, 0], [0, -18, 5])


def test_depth_normalised_ofi_slots_by_hand() -> None:
    inp = make_rows(BID_PX, ASK_PX, BID_SZ, ASK_SZ)
    out = ofi.compute(inp, ofi.OfiConfig(depth_span=1, fast_span=1, mid_span=1, slow_span=1))
    # depth_span = 1: D_i is the row's own mean level depth (q^b_i + q^a_i) / 2
    np.testing.assert_allclose(out[:, COL["ofi_l0"]], [0, 7 / 13, 17 / 7], rtol=1e-6)
    np.testing.assert_allclose(out[:, COL["ofi_l1"]], [0, -7 / 24, 44 / 27], rtol=1e-6)
    np.testing.assert_allclose(out[:, COL["ofi_total"]], [0, 0 / 37, 61 / 34], rtol=1e-6, atol=1e-7)
    # only two levels: nothing deeper
    assert (out[:, COL["ofi_deep"]] == 0).all() and (out[:, COL["ofi_l2"]] == 0).all()


def test_order_count_imbalance_microprice_and_spread_by_hand() -> None:
    inp = make_rows(
        [[100.0, 99.75]], [[100.25, 100.5]], [[30, 5]], [[10, 5]], bid_ct=[[3, 5]], ask_ct=[[2, 2]]
    )
    out = ofi.compute(inp, ofi.OfiConfig())[0]
    assert out[COL["order_count_imbalance"]] == pytest.approx((8 - 4) / 12)
    # microprice = (100 * 10 + 100.25 * 30) / 40 = 100.1875, mid = 100.125
    assert out[COL["microprice_residual"]] == pytest.approx(0.0625 / 100.125, rel=1e-5)
    assert out[COL["spread_ticks"]] == 1.0
    # book pressure with no decay: (35 - 15) / 50
    assert ofi.compute(inp, ofi.OfiConfig(pressure_decay=0))[0, COL["book_pressure"]] == pytest.approx(0.4)


def test_aggression_and_toxicity_by_hand() -> None:
    inp = make_rows([[100.0]] * 3, [[100.25]] * 3, [[10]] * 3, [[10]] * 3, buy=[6, 0, 1], sell=[2, 0, 3])
    out = ofi.compute(inp, ofi.OfiConfig(toxicity_bucket_span=1, toxicity_span=1))
    np.testing.assert_allclose(out[:, COL["aggression_row"]], [6 / 8 - 0.5, 0, 1 / 4 - 0.5])
    # bucket span 1: VPIN is this row's |buy - sell| / volume
    np.testing.assert_allclose(out[:, COL["vpin"]], [0.5, 0, 0.5])
    flow_off = dataclasses.replace(inp, flow_mask=np.zeros(3, bool))
    out_off = ofi.compute(flow_off, ofi.OfiConfig())
    for slot in ("vpin", "toxicity_gradient", "aggression", "aggression_row", "trade_flow"):
        assert (out_off[:, COL[slot]] == 0).all(), slot


def test_imbalance_ema_is_the_synthetic_alpha_recursion(snapshot_rows: RowInput) -> None:
    """On snapshot rows the slot is S_t = S_{t-1} + (I_t - S_{t-1}) / H, S_0 = I_0 (synth docstring)."""
    inp = snapshot_rows.prefix(3000)
    b, a = inp.bid_sz[:, 0], inp.ask_sz[:, 0]
    imb = (b - a) / (b + a)
    s = np.empty(len(imb))
    s[0] = imb[0]
    for t in range(1, len(imb)):
        s[t] = s[t - 1] + (imb[t] - s[t - 1]) / 50
    out = ofi.compute(inp, ofi.OfiConfig(imbalance_horizon_events=50))
    np.testing.assert_allclose(out[:, COL["l1_imbalance_ema"]], s, rtol=1e-5, atol=1e-6)


# --- missing data -------------------------------------------------------------------------------


def test_empty_levels_and_one_sided_books_are_finite() -> None:
    nan = np.nan
    levels = 10
    bid_px = 100.0 - TICK * np.arange(levels)[None, :].repeat(4, 0)
    ask_px = 100.25 + TICK * np.arange(levels)[None, :].repeat(4, 0)
    bid_sz = np.full((4, levels), 10.0)
    ask_sz = np.full((4, levels), 12.0)
    ask_px[1, 3:], ask_sz[1, 3:] = nan, 0  # thin ask
    ask_px[2], ask_sz[2] = nan, 0  # one-sided book
    bid_px[3], bid_sz[3], ask_px[3], ask_sz[3] = nan, 0, nan, 0  # empty book
    out = ofi.compute(make_rows(bid_px, ask_px, bid_sz, ask_sz, buy=[0, 1, 0, 0]), ofi.OfiConfig())
    assert np.isfinite(out).all()
    assert out[2, COL["spread_ticks"]] == 0 and out[2, COL["microprice_residual"]] == 0
    assert out[3, COL["order_count_imbalance"]] == 0 and out[3, COL["book_pressure"]] == 0
    assert out[2, COL["ofi_l0"]] > 0  # the ask side vanished: bullish flow


def test_ohlcv_input_gives_all_zeros() -> None:
    inp = ohlcv_rows()
    out = ofi.compute(inp, ofi.OfiConfig())
    assert out.shape == (len(inp), len(ofi.SLOTS)) and not out.any()


# --- known answer on the synthetic market --------------------------------------------------------


def _future_move_corr(alpha: float, horizon: int = 50) -> float:
    inp = synthetic_rows(RowUnit.SNAPSHOT, events=20_000, sessions=2, alpha=alpha, seed=5)
    x = ofi.compute(inp, ofi.OfiConfig())[:, COL["l1_imbalance_ema"]]
    seg = np.cumsum(inp.segment_start)
    ok = np.zeros(len(inp), bool)
    ok[:-horizon] = seg[horizon:] == seg[:-horizon]
    move = np.zeros(len(inp))
    move[:-horizon] = inp.close[horizon:] - inp.close[:-horizon]
    return float(np.corrcoef(x[ok], move[ok])[0, 1])


def test_imbalance_ema_predicts_the_planted_move() -> None:
    assert _future_move_corr(alpha=1.0) > 0.2  # about 0.38
    assert abs(_future_move_corr(alpha=0.0)) < 0.1  # about 0.03


# --- the market orders' sign EMA (the trade-flow market's carrier) ----------------------------------


def test_trade_sign_ema_by_hand() -> None:
    # five states, touch 100.00 / 100.25 except state 3, where a buy swept the ask to 100.50; N = 2:
    # state 0: F = 0 (segment start); 1: a buy market order, F = 0 + (1 - 0) / 2 = 0.5; 2: a sell,
    # 0.5 + (-1 - 0.5) / 2 = -0.25; 3: the sweep is not a market order (the touch moved): -0.25;
    # 4: a buy at state 3's touch: -0.25 + (1 + 0.25) / 2 = 0.375
    bid = [[100.0]] * 5
    ask = [[100.25], [100.25], [100.25], [100.5], [100.5]]
    inp = make_rows(bid, ask, [[10.0]] * 5, [[10.0]] * 5)
    sign = np.array([0.0, 1.0, -1.0, 1.0, 1.0])
    inp = dataclasses.replace(inp, events=dataclasses.replace(inp.events, trade_sign=sign))
    out = ofi.compute(inp, ofi.OfiConfig(trade_sign_horizon_trades=2))[:, COL["trade_sign_ema"]]
    np.testing.assert_allclose(out, [0.0, 0.5, -0.25, -0.25, 0.375])
    # in two chunks with the carried state, the same rows; without trade states, 0
    carry = Carry()
    two = ofi.OfiConfig(trade_sign_horizon_trades=2)
    parts = [ofi.compute(inp.rows(a, b), two, carry) for a, b in ((0, 2), (2, 5))]
    np.testing.assert_array_equal(np.concatenate(parts)[:, COL["trade_sign_ema"]], out)
    none = dataclasses.replace(inp, events=dataclasses.replace(inp.events, trade_sign=None))
    assert not ofi.compute(none, ofi.OfiConfig())[:, COL["trade_sign_ema"]].any()


@pytest.mark.parametrize("unit", [RowUnit.SNAPSHOT, RowUnit.BAR])
def test_trade_sign_ema_is_the_trade_flow_carrier(unit: RowUnit) -> None:
    """On the trade-flow market the slot is the simulator's carrier F at each row's last book state
    (data.synth.trade_flow_signal), row for row: the state observes the planted edge exactly."""
    flow = PlantedSignal.TRADE_FLOW
    cfg = SynthConfig(seed=5, sessions=2, events_per_session=20_000, alpha=1.0, signal=flow)
    md = synthetic_market(cfg)
    inp = rows_from_market(md, DataConfig(row_unit=unit, bar_seconds=30))
    book = md.books[cfg.instrument_id]
    n = cfg.flow_horizon_trades
    f = np.concatenate([trade_flow_signal(simulate_session(cfg, i).book, n) for i in range(2)])
    assert len(f) == len(book) and np.abs(f).max() > 0.1
    params = ofi.OfiConfig(trade_sign_horizon_trades=cfg.flow_horizon_trades)
    out = ofi.compute(inp, params)[:, COL["trade_sign_ema"]]
    last = np.searchsorted(book.ts_event, inp.ts, "right") - 1  # each row's last state
    np.testing.assert_allclose(out, f[last], rtol=1e-5, atol=1e-6)
