"""The MBO book builder's steps (foxhunt.data.book), each on a hand-made book: the pieces
_rebuild_kernel runs per record (the whole loop is covered by tests/data/test_book.py)."""

from __future__ import annotations

import numpy as np

from foxhunt.data import book as B
from foxhunt.data.arrays import ACTION_ADD, ACTION_CLEAR, ACTION_MODIFY, ACTION_TRADE, SIDE_ASK, SIDE_BID
from foxhunt.data.dbn_read import PRICE_SCALE, UNDEF_PRICE

BITS = 4  # a 16-slot order table


def empty(levels: int = 3) -> B.BookState:
    st = B.BookState(levels)
    st.table = tuple(np.resize(a, 1 << BITS) for a in st.table)
    st.table[1][:] = B._EMPTY
    st.scalars[0] = BITS
    return st


def counters() -> np.ndarray:
    return np.zeros(len(B._COUNTERS), np.int64)


def add(st: B.BookState, oid: int, side: int, px: int, sz: int, c: np.ndarray, live: int = 0) -> int:
    """An add through _find and _new_order; the live order count after it."""
    shift = np.uint64(64 - BITS)
    slot = B._find(st.table[0], st.table[1], np.uint64(oid), shift)
    assert slot < 0
    free = -slot - 1
    live, _ = B._new_order(np.uint64(oid), side, px, sz, free, *st.table, *st.levels, st.n_lv, live, 0, c)
    return live


def book(st: B.BookState) -> tuple[np.ndarray, ...]:
    """The order table less its ids, the levels and their counts: what the order steps take."""
    return (*st.table[1:], *st.levels, st.n_lv)


def levels(st: B.BookState, s: int) -> list[tuple[int, int, int]]:
    """(key, size, count) of side ``s``, best first."""
    k, z, n = st.levels
    return [(int(k[s, j]), int(z[s, j]), int(n[s, j])) for j in range(st.n_lv[s] - 1, -1, -1)]


def test_new_orders_join_sorted_levels_and_bad_ones_are_counted() -> None:
    st, c = empty(), counters()
    live = add(st, 1, B._BID, 100, 5, c)
    live = add(st, 2, B._BID, 101, 2, c, live)
    live = add(st, 3, B._BID, 100, 1, c, live)
    live = add(st, 4, B._ASK, 103, 4, c, live)
    assert live == 4
    assert levels(st, B._BID) == [(101, 2, 1), (100, 6, 2)]
    assert levels(st, B._ASK) == [(-103, 4, 1)]  # asks are keyed by -price: best last
    for bad in ((5, -1, 100, 1), (6, B._BID, UNDEF_PRICE, 1), (7, B._BID, 100, 0)):
        live = add(st, *bad, c, live)
    assert live == 4 and c[B._C_INVALID] == 3


def test_change_order_resizes_moves_and_removes() -> None:
    st, c = empty(), counters()
    live = add(st, 1, B._BID, 100, 5, c)
    live = add(st, 2, B._BID, 100, 1, c, live)
    slot = B._find(st.table[0], st.table[1], np.uint64(1), np.uint64(64 - BITS))
    live = B._change_order(slot, -1, 100, 3, *book(st), live, c)  # side N: kept
    assert levels(st, B._BID) == [(100, 4, 2)]
    live = B._change_order(slot, B._BID, 99, 3, *book(st), live, c)  # new price
    assert levels(st, B._BID) == [(100, 1, 1), (99, 3, 1)]
    live = B._change_order(slot, B._BID, UNDEF_PRICE, 3, *book(st), live, c)
    assert c[B._C_INVALID] == 1 and levels(st, B._BID) == [(100, 1, 1), (99, 3, 1)]
    live = B._change_order(slot, B._BID, 99, 0, *book(st), live, c)  # size 0: leaves
    assert live == 1 and levels(st, B._BID) == [(100, 1, 1)] and st.table[1][slot] == B._DELETED


def test_cancel_partial_full_over_and_unknown() -> None:
    st, c = empty(), counters()
    live = add(st, 1, B._ASK, 105, 5, c)
    slot = B._find(st.table[0], st.table[1], np.uint64(1), np.uint64(64 - BITS))
    live = B._cancel(slot, 2, *book(st), live, c)
    assert live == 1 and levels(st, B._ASK) == [(-105, 3, 1)]
    live = B._cancel(-1, 1, *book(st), live, c)
    assert c[B._C_UNKNOWN_CANCELS] == 1 and live == 1
    live = B._cancel(slot, 7, *book(st), live, c)
    assert c[B._C_OVERCANCELS] == 1 and live == 0 and st.n_lv[B._ASK] == 0


def test_begin_record_clears_on_r_and_on_a_snapshot_start() -> None:
    st, c = empty(), counters()
    st.table[1][:3] = B._LIVE
    st.n_lv[:] = 2
    args = (c, st.table[1], st.n_lv)
    assert B._begin_record(ACTION_ADD, B.F_SNAPSHOT, True, 3, 4, *args) == (True, 3, 4)  # inside a replay
    assert c[B._C_SNAPSHOT] == 1 and c[B._C_SNAPSHOTS] == 0 and st.n_lv[0] == 2
    assert B._begin_record(ACTION_ADD, B.F_SNAPSHOT, False, 3, 4, *args) == (True, 0, 0)  # a replay starts
    assert c[B._C_SNAPSHOTS] == 1 and st.n_lv[0] == 0 and not st.table[1].any()
    assert B._begin_record(ACTION_CLEAR, 0, True, 2, 2, *args) == (False, 0, 0)
    assert c[B._C_CLEARS] == 1


def run(st: B.BookState, actions: list[tuple[int, int, int]]) -> None:
    """``(action, order id, price)`` records of size 1 on the bid side, each its own event."""
    n = len(actions)
    cols = (
        np.array([o for _, o, _ in actions], np.uint64),
        np.array([p for _, _, p in actions], np.int64),
        np.ones(n, np.int64),
        np.array([a for a, _, _ in actions], np.uint8),
        np.full(n, SIDE_BID, np.uint8),
        np.full(n, B.F_LAST, np.uint8),
    )
    st.run(cols, 3, n)


def test_order_table_doubles_with_live_orders_and_drops_tombstones_in_place() -> None:
    st = empty()
    # the 9th add would fill half the 16 slots with 8 live orders (over a quarter): 32 slots
    run(st, [(ACTION_ADD, oid, 100 + oid % 3) for oid in range(1, 10)])
    assert st.scalars[0] == BITS + 1 and st.table[0].shape[0] == 2 << BITS and st.scalars[1] == 9
    run(st, [(ord("C"), oid, 0) for oid in range(1, 6)])  # 4 live, 9 used slots
    assert st.scalars[1] == 4 and st.scalars[2] == 9
    # churn with few live orders: the deleted slots are reclaimed in place, the table keeps its size
    run(st, [(a, oid, 90) for oid in range(10, 60) for a in (ACTION_ADD, ord("C"))])
    assert st.scalars[0] == BITS + 1 and st.table[0].shape[0] == 2 << BITS
    assert st.scalars[1] == 4 and st.scalars[2] < 16 and st.n_lv[B._BID] == 3


def test_top_changed_and_write_state() -> None:
    st, c = empty(levels=2), counters()
    live = add(st, 1, B._BID, 100 * PRICE_SCALE, 5, c)
    add(st, 2, B._ASK, 101 * PRICE_SCALE, 3, c, live)
    assert B._top_changed(*st.levels, st.n_lv, *st.top, 2)
    assert not B._top_changed(*st.levels, st.n_lv, *st.top, 2)  # nothing new since
    out = [np.zeros((2, 1, 2)) for _ in range(3)]
    B._write_state(*st.top, *out, 0, 2)
    px, sz, ct = out
    assert px[B._BID, 0, 0] == 100.0 and px[B._ASK, 0, 0] == 101.0 and np.isnan(px[B._BID, 0, 1])
    assert list(sz[:, 0, 0]) == [5, 3] and list(ct[:, 0, :].ravel()) == [1, 0, 1, 0]


def test_record_depth_on_the_resting_side() -> None:
    st, c = empty(), counters()
    live = 0
    for oid, px in enumerate((100, 99, 98, 97), start=1):
        live = add(st, oid, B._BID, px, 1, c, live)
    key = st.levels[0]
    assert B._record_depth(ACTION_ADD, SIDE_BID, 98, key, st.n_lv, 3) == 2
    assert B._record_depth(ACTION_MODIFY, SIDE_BID, 97, key, st.n_lv, 3) == 0  # beyond the top 3
    assert B._record_depth(ACTION_ADD, SIDE_BID, 97, key, st.n_lv, 5) == 3
    assert B._record_depth(ACTION_TRADE, SIDE_ASK, 99, key, st.n_lv, 3) == 1  # an ask aggressor hits bids
    assert B._record_depth(ACTION_ADD, SIDE_BID, 98, key, st.n_lv, 3) == 2
    assert B._record_depth(ACTION_ADD, ord("N"), 98, key, st.n_lv, 3) == 0
    assert B._record_depth(ACTION_ADD, SIDE_BID, 101, key, st.n_lv, 3) == 0  # a new best price: level 0


def test_final_counters_sum_the_full_depth() -> None:
    st, c = empty(), counters()
    live = 0
    for oid, (side, px, sz) in enumerate(((B._BID, 100, 2), (B._BID, 99, 3), (B._ASK, 101, 4)), start=1):
        live = add(st, oid, side, px, sz, c, live)
    B._final_counters(c, 10, 4, live, *st.levels, st.n_lv)
    got = {name: int(c[i]) for i, name in enumerate(B._COUNTERS)}
    assert got["n_events"] == 10 and got["n_states"] == 4 and got["live_orders"] == 3
    assert (got["total_bid_orders"], got["total_bid_size"], got["bid_levels"]) == (2, 5, 2)
    assert (got["total_ask_orders"], got["total_ask_size"], got["ask_levels"]) == (1, 4, 1)
