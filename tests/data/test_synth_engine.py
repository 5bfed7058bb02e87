"""The synthetic market's event loop, step by step: each named piece of simulate_kernel on a
hand-made book with hand-worked numbers (the whole loop is covered by tests/data/test_synth.py)."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from foxhunt.data import synth
from foxhunt.data import synth_engine as eng
from foxhunt.data.config import PlantedSignal, SynthConfig
from foxhunt.data.synth import model_record

BID, ASK, VIS, LMAX, CAP = eng.BID, eng.ASK, eng.VIS, eng.LMAX, eng.CAP


def flat_model(**fields: float) -> np.void:
    """A MODEL record with every rate, multiplier and depth at 1 (``fields`` override)."""
    m = np.zeros(1, eng.MODEL)[0]
    for name in eng.MODEL.names:
        m[name] = 1
    m["size_mu"], m["size_sd"], m["max_size"], m["alpha"] = 0.0, 0.0, 50, 0.0
    m["signal_kind"] = eng.SIGNAL_IMBALANCE
    for name, value in fields.items():
        m[name] = value
    return m


def book(bid0: int = 1000, spread: int = 1, orders: int = 1, size: int = 1) -> tuple[np.ndarray, ...]:
    """px, oid, osz, cnt, qty: ``orders`` orders of ``size`` on every level, contiguous prices."""
    px = np.empty((2, LMAX), np.int64)
    px[BID] = bid0 - np.arange(LMAX)
    px[ASK] = bid0 + spread + np.arange(LMAX)
    oid = np.zeros((2, LMAX, CAP), np.int64)
    osz = np.zeros((2, LMAX, CAP), np.int64)
    oid[:, :, :orders] = 1 + np.arange(2 * LMAX * orders).reshape(2, LMAX, orders)
    osz[:, :, :orders] = size
    cnt = np.full((2, LMAX), orders, np.int64)
    qty = np.full((2, LMAX), orders * size, np.int64)
    return px, oid, osz, cnt, qty


@numba.njit
def _seeded(seed: int) -> None:
    np.random.seed(seed)


def test_model_record_holds_the_config() -> None:
    cfg = SynthConfig(seed=1, sessions=1, events_per_session=1000, alpha=0.3, signal=PlantedSignal.TRADE_FLOW)
    m = model_record(cfg)
    assert m.dtype == eng.MODEL
    assert list(m["depth_orders"]) == list(cfg.depth_orders)
    assert list(m["cancel_mult"]) == [cfg.calm.cancel_mult, cfg.volatile.cancel_mult]
    assert m["max_size"] == cfg.max_order_size and m["horizon"] == cfg.alpha_horizon_events
    assert m["signal_kind"] == eng.SIGNAL_TRADE_FLOW and m["alpha"] == 0.3
    assert m["flow_horizon"] == cfg.flow_horizon_trades
    assert m["momentum_horizon"] == cfg.momentum_horizon_moves


def test_intensities_by_hand() -> None:
    # m_i = 2, w_i = 1, mu = 1, kappa = 1, nu = 0.5; one order per level:
    # lambda^A = 1 * 1 * 2 * (1 + 1 * (1 - 1/2)) = 3, lambda^C = lambda^M = 0 (n - 1 = 0).
    m = flat_model(depth_orders=2.0, modify_rate=0.5, market_rate=4.0, move_rate=5.0, gap_fill_rate=7.0)
    px, _, _, cnt, qty = book(spread=1, orders=1, size=3)
    r = [np.zeros((2, VIS)) for _ in range(3)]
    total, r_buy, r_sell, r_move = eng._intensities(*r, px, cnt, qty, 0, m)
    assert np.all(r[0] == 3.0) and np.all(r[1] == 0.0) and np.all(r[2] == 0.0)
    assert (r_buy, r_sell, r_move) == (4.0, 4.0, 5.0)  # q_0 = 3 > 1; spread 1: moves, no gap fill
    assert total == 2 * VIS * 3.0 + 4.0 + 4.0 + 5.0
    # three orders: lambda^A = 2 (a full queue, no refill), lambda^C = 2, lambda^M = 1; size 1 touch:
    # no market orders; a two-tick spread: gap fills, no moves.
    px, _, _, cnt, qty = book(spread=2, orders=3, size=1)
    qty[:, 0] = 1
    total, r_buy, r_sell, r_move = eng._intensities(*r, px, cnt, qty, 0, m)
    assert np.all(r[0] == 2.0) and np.all(r[1] == 2.0) and np.all(r[2] == 1.0)
    assert (r_buy, r_sell, r_move) == (0.0, 0.0, 0.0)
    assert total == 2 * VIS * 5.0 + 7.0


def test_intensities_use_the_regime() -> None:
    m = flat_model(cancel_mult=np.array([1.0, 3.0]), depth_mult=np.array([1.0, 2.0]))
    px, _, _, cnt, qty = book(orders=2)
    r = [np.zeros((2, VIS)) for _ in range(3)]
    eng._intensities(*r, px, cnt, qty, 1, m)
    # mu = 3, m_i = 2: lambda^A = 3 * 2 * (1 + 0) = 6, lambda^C = 3 * 1 = 3, lambda^M = 3 * 1 = 3
    assert np.all(r[0] == 6.0) and np.all(r[1] == 3.0) and np.all(r[2] == 3.0)


@pytest.mark.parametrize(
    ("which", "want"),
    [
        (("cancel", ASK, 3), (eng.EV_CANCEL, ASK, 3)),
        (("add", BID, 9), (eng.EV_ADD, BID, 9)),
        (("modify", BID, 0), (eng.EV_MODIFY, BID, 0)),
        (("buy",), (eng.EV_MARKET, ASK, 0)),  # a buy fills against the asks
        (("sell",), (eng.EV_MARKET, BID, 0)),
        (("move",), (eng.EV_MOVE, 0, 0)),
        (("gap",), (eng.EV_GAP_FILL, 0, 0)),  # what remains of Lambda
    ],
)
def test_pick_event_draws_the_only_possible_event(which: tuple, want: tuple) -> None:
    r = {k: np.zeros((2, VIS)) for k in ("add", "cancel", "modify")}
    scalar = {"buy": 0.0, "sell": 0.0, "move": 0.0}
    if len(which) == 3:
        r[which[0]][which[1], which[2]] = 2.5
    elif which[0] in scalar:
        scalar[which[0]] = 2.5
    got = eng._pick_event(*r.values(), scalar["buy"], scalar["sell"], scalar["move"], 2.5)
    assert tuple(got) == want


def test_pick_event_is_proportional_to_the_rates() -> None:
    r_add = np.zeros((2, VIS))
    r_add[BID, 0] = 1.0
    _seeded(3)
    zero = np.zeros((2, VIS))
    kinds = [eng._pick_event(r_add, zero, zero, 3.0, 0.0, 0.0, 4.0)[0] for _ in range(4000)]
    share = np.mean(np.asarray(kinds) == eng.EV_ADD)
    assert abs(share - 0.25) < 0.03  # lambda^A / Lambda = 1 / 4


def test_p_up_is_the_clipped_carrier() -> None:
    assert eng._p_up(flat_model(alpha=0.0), 0.9, 0.9, 0.9) == 0.5
    assert eng._p_up(flat_model(alpha=0.5), 0.4, -1.0, -1.0) == pytest.approx(0.7)  # imbalance carrier
    flow = flat_model(alpha=0.5, signal_kind=eng.SIGNAL_TRADE_FLOW)
    assert eng._p_up(flow, 0.4, -0.2, 1.0) == pytest.approx(0.4)  # the trade-flow carrier
    momentum = flat_model(alpha=0.25, signal_kind=eng.SIGNAL_MOMENTUM)
    assert eng._p_up(momentum, 0.4, -0.2, 0.6) == pytest.approx(0.65)  # the momentum carrier
    assert eng._p_up(flat_model(alpha=2.0), 0.9, 0.0, 0.0) == 0.98
    assert eng._p_up(flat_model(alpha=2.0), -0.9, 0.0, 0.0) == 0.02


def test_open_book_writes_the_snapshot_best_bid_last() -> None:
    m = flat_model(depth_orders=np.full(VIS, 3.0))
    px, oid, osz, cnt, qty = (np.zeros_like(a) for a in book())
    mbo = np.empty((eng.N_RCOLS, 4 * LMAX * CAP), np.int64)
    _seeded(1)
    next_oid, k, event = eng._open_book(px, oid, osz, cnt, qty, 500, m, mbo, True)
    assert list(px[BID]) == list(500 - np.arange(LMAX)) and list(px[ASK]) == list(501 + np.arange(LMAX))
    assert next_oid == 1 + cnt.sum() and k == 1 + cnt.sum()  # R plus one add per order
    assert mbo[eng.R_ACTION, 0] == eng.A_CLEAR and np.all(mbo[eng.R_ACTION, 1:k] == eng.A_ADD)
    assert np.all(mbo[eng.R_FLAGS, :k] & eng.F_SNAPSHOT) and mbo[eng.R_FLAGS, k - 1] & eng.F_LAST
    assert mbo[eng.R_PX, k - 1] == 500 and mbo[eng.R_SIDE, k - 1] == eng.S_BID  # best bid last
    assert tuple(event) == (eng.A_ADD, eng.S_BID, 500, osz[BID, 0, cnt[BID, 0] - 1], 0)
    assert np.all(qty == osz.sum(axis=2))


def test_market_order_fills_fifo_inside_the_touch() -> None:
    px, oid, osz, cnt, qty = book(orders=3, size=2)  # touch: 3 orders of 2
    m = flat_model(size_mu=np.log(4.5), max_size=4)  # 1 + floor(exp(N(ln 4.5, 0))) = 5 >= max: 4 contracts
    mbo = np.empty((eng.N_RCOLS, 64), np.int64)
    first = oid[ASK, 0, :3].copy()
    _, k, event = eng._market(px, oid, osz, cnt, qty, ASK, m, 7, mbo, 0, 5, True)
    # want = min(4, q_0 - 1 = 5) = 4: the first two orders leave (cancels of 2), the third stays
    assert tuple(event) == (eng.A_TRADE, eng.S_BID, px[ASK, 0], 4, 0)
    assert cnt[ASK, 0] == 1 and qty[ASK, 0] == 2 and oid[ASK, 0, 0] == first[2]
    assert list(mbo[eng.R_ACTION, :k]) == [eng.A_CANCEL, eng.A_CANCEL, eng.A_TRADE]
    assert list(mbo[eng.R_OID, :2]) == list(first[:2]) and np.all(mbo[eng.R_ROW, :k] == 5)


def test_move_sweeps_the_touch_and_refills_at_the_swept_price() -> None:
    px, oid, osz, cnt, qty = book(bid0=1000, orders=2, size=1)
    m = flat_model(gap_prob=np.array([0.0, 0.0]), depth_orders=np.full(VIS, 2.0))
    mbo = np.empty((eng.N_RCOLS, 4 * LMAX * CAP), np.int64)
    _seeded(2)
    _, k, event = eng._move(px, oid, osz, cnt, qty, 0, 1.0, m, 100, mbo, 0, 9, True)  # P(up) = 1
    assert tuple(event) == (eng.A_TRADE, eng.S_BID, 1001, 2, 0)  # the ask touch (2 contracts) swept
    assert px[ASK, 0] == 1002 and px[BID, 0] == 1001  # the mid moved one tick up
    assert px[ASK, LMAX - 1] == 1002 + LMAX - 1  # a new reserve level behind the asks
    assert qty[BID, 0] == osz[BID, 0, : cnt[BID, 0]].sum() > 0
    assert mbo[eng.R_ACTION, k - 1] == eng.A_TRADE and mbo[eng.R_SIZE, k - 1] == 2


def test_gap_fill_improves_the_spread_on_the_drawn_side() -> None:
    for p_up, side, new_px in ((1.0, BID, 1001), (0.0, ASK, 1001)):
        px, oid, osz, cnt, qty = book(bid0=1000, spread=2)
        mbo = np.empty((eng.N_RCOLS, 4 * LMAX * CAP), np.int64)
        next_oid, k, event = eng._gap_fill(px, oid, osz, cnt, qty, p_up, flat_model(), 40, mbo, 0, 3, True)
        assert px[side, 0] == new_px and px[ASK, 0] - px[BID, 0] == 1
        assert cnt[side, 0] == 1 and oid[side, 0, 0] == 40 and next_oid == 41
        assert event[0] == eng.A_ADD and event[2] == new_px and event[4] == 0
        # the far level was cancelled to make room: its orders' cancels, then the add
        assert mbo[eng.R_ACTION, k - 1] == eng.A_ADD and np.all(mbo[eng.R_ACTION, : k - 1] == eng.A_CANCEL)


def test_cancel_and_modify_keep_the_level_sums() -> None:
    px, oid, osz, cnt, qty = book(orders=4, size=3)
    mbo = np.empty((eng.N_RCOLS, 8), np.int64)
    _seeded(4)
    _, k, event = eng._cancel(px, oid, osz, cnt, qty, BID, 2, 1, mbo, 0, 1, True)
    assert tuple(event) == (eng.A_CANCEL, eng.S_BID, px[BID, 2], 3, 2)
    assert cnt[BID, 2] == 3 and qty[BID, 2] == 9
    _, k, event = eng._modify(px, oid, osz, cnt, qty, ASK, 0, 1, mbo, k, 2, True)
    assert event[0] == eng.A_MODIFY and event[4] == 1  # level 0 can only move out
    assert cnt[ASK, 0] == 3 and cnt[ASK, 1] == 5 and qty[ASK, 1] == 15 and k == 2


def test_record_row_converts_ticks_as_ingest_does() -> None:
    px, _, _, cnt, qty = book(bid0=20_000)
    rows = eng._row_arrays(2)
    eng._record_row(1, 0.5, 1, (eng.A_TRADE, eng.S_ASK, 20_001, 7, 0), px, cnt, qty, 250_000_000, 1e9, *rows)
    tau, regime, action, side, price, size, depth, bid_px, ask_px, bid_sz, *_ = rows
    assert (tau[1], regime[1], action[1], side[1], size[1]) == (0.5, 1, eng.A_TRADE, eng.S_ASK, 7)
    assert price[1] == 5000.25 and bid_px[1, 0] == 5000.0 and ask_px[1, 9] == 5002.5
    assert list(bid_sz[1]) == list(qty[BID, :VIS])


def test_wall_clock_is_ordered_inside_the_session() -> None:
    cfg = SynthConfig(seed=2, sessions=1, events_per_session=1000)
    start, end = synth.session_window_ns(synth.session_trade_dates(cfg)[0])
    u = np.array([0.0, 0.2, 0.2, 0.5, 0.999999999])
    ts_event, ts_recv = synth._wall_clock(cfg, 0, u, start, end)
    assert ts_event[0] == start and np.all(np.diff(ts_event) >= 0) and ts_event[-1] < end
    assert ts_event[1] == ts_event[2]  # the same business time, the same instant
    assert np.all(ts_recv >= ts_event) and np.all(np.diff(ts_recv) >= 0)
    again = synth._wall_clock(cfg, 0, u, start, end)
    assert np.array_equal(again[1], ts_recv)  # the latencies come from the session's own stream
    assert not np.array_equal(synth._wall_clock(cfg, 1, u, start, end)[1], ts_recv)


def test_book_arrays_and_trade_rows() -> None:
    rows = eng._row_arrays(3)
    rows[2][:] = [eng.A_ADD, eng.A_TRADE, eng.A_CANCEL]
    rows[4][:] = [1.0, 2.0, 3.0]
    book = synth._book_arrays(rows, np.array([5, 6, 7]), np.array([8, 9, 10]), 42)
    assert list(book.flags) == [eng.F_LAST | eng.F_SNAPSHOT, eng.F_LAST, eng.F_LAST]
    assert list(book.sequence) == [1, 2, 3] and np.all(book.instrument_id == 42)
    trades = synth._trade_rows(book)
    assert list(trades.price) == [2.0] and list(trades.ts_recv) == [9] and list(trades.sequence) == [2]
