"""MBO -> 10-level book rebuild: hand-worked books, a reference replay, real ES data, DBN round trip."""

from __future__ import annotations

import heapq
from pathlib import Path

import databento as db
import numpy as np
import pytest

from foxhunt.data.arrays import BookArrays, MboArrays
from foxhunt.data.book import F_LAST, F_SNAPSHOT, BookRebuild, rebuild_book
from foxhunt.data.dbn_read import PRICE_SCALE, UNDEF_PRICE, read_dbn
from foxhunt.data.dbn_write import write_book
from foxhunt.data.schemas import Schema

ESH4 = "cme-es/esh4-glbx-mdp3-20231225.mbo.dbn.zst"  # ESH4, iid 17077: snapshot + 2 h live
ESM4 = "cme-es/orderbooks_mbo_2024-05-08T00-00-00_2024-05-08T00-00-02.dbn.zst"  # ESM4, 2 s
ES_TICK = 0.25


# --- hand-built MBO streams -------------------------------------------------------------------


def ev(
    action: str, side: str, oid: int, price: float | None, size: int, flags: int = F_LAST, iid: int = 1
) -> tuple:
    """One MBO record; ``price=None`` is Databento's undefined price. One event by default."""
    return (action, side, oid, price, size, flags, iid)


def mbo_of(events: list[tuple]) -> MboArrays:
    """Records in the given order; record i has ts_event = 1000 i, ts_recv = 1000 i + 7, seq i + 1."""
    n = len(events)
    action, side, oid, price, size, flags, iid = zip(*events, strict=True) if n else ((),) * 7
    price_raw = np.array([UNDEF_PRICE if p is None else round(p * PRICE_SCALE) for p in price], np.int64)
    ts = np.arange(n, dtype=np.int64) * 1000
    return MboArrays(
        ts_event=ts,
        ts_recv=ts + 7,
        instrument_id=np.array(iid, np.uint32),
        order_id=np.array(oid, np.uint64),
        price_raw=price_raw,
        price=np.where(price_raw == UNDEF_PRICE, np.nan, price_raw / PRICE_SCALE),
        size=np.array(size, np.int64),
        action=np.array([ord(a) for a in action], np.uint8),
        side=np.array([ord(s) for s in side], np.uint8),
        flags=np.array(flags, np.uint8),
        sequence=np.arange(1, n + 1, dtype=np.uint32),
    )


def bids(book: BookArrays, row: int = -1) -> list[tuple[float, int, int]]:
    """Populated bid levels of one state as (price, size, count), best first."""
    return [
        (float(p), int(s), int(c))
        for p, s, c in zip(book.bid_px[row], book.bid_sz[row], book.bid_ct[row], strict=True)
        if c > 0
    ]


def asks(book: BookArrays, row: int = -1) -> list[tuple[float, int, int]]:
    return [
        (float(p), int(s), int(c))
        for p, s, c in zip(book.ask_px[row], book.ask_sz[row], book.ask_ct[row], strict=True)
        if c > 0
    ]


# A resting book every hand test starts from (one event per add):
#   bids 100.00 x 5 (#1) + x 3 (#2) | 99.75 x 4 (#3) | 99.50 x 1 (#4)
#   asks 100.25 x 2 (#11) | 100.50 x 6 (#12) + x 1 (#13)
BASE = [
    ev("A", "B", 1, 100.00, 5),
    ev("A", "B", 2, 100.00, 3),
    ev("A", "B", 3, 99.75, 4),
    ev("A", "B", 4, 99.50, 1),
    ev("A", "A", 11, 100.25, 2),
    ev("A", "A", 12, 100.50, 6),
    ev("A", "A", 13, 100.50, 1),
]
BASE_BIDS = [(100.00, 8, 2), (99.75, 4, 1), (99.50, 1, 1)]
BASE_ASKS = [(100.25, 2, 1), (100.50, 7, 2)]


def test_adds_aggregate_levels_sorted_best_first() -> None:
    res = rebuild_book(mbo_of(BASE))
    book = res.book
    assert res.n_states == 7  # every add changed the top 10
    assert bids(book) == BASE_BIDS
    assert asks(book) == BASE_ASKS
    # empty levels follow the MBP-10 ingest convention: NaN price, size 0, count 0
    assert np.isnan(book.bid_px[-1, 3:]).all() and np.isnan(book.ask_px[-1, 2:]).all()
    assert (book.bid_sz[-1, 3:] == 0).all() and (book.ask_ct[-1, 2:] == 0).all()
    # depth = level the add's price sits at on its side (99.75 -> 1, 99.50 -> 2, 100.50 -> 1)
    assert book.depth.tolist() == [0, 0, 1, 2, 0, 1, 1]
    assert res.live_orders == 7
    assert (res.total_bid_orders, res.total_ask_orders) == (4, 3)
    assert (res.total_bid_size, res.total_ask_size) == (13, 9)
    assert (res.bid_levels, res.ask_levels) == (3, 2)
    assert res.n_crossed == 0
    # dtypes are BookArrays' (as MBP-10 ingest produces)
    assert book.bid_px.dtype == np.float64 and book.bid_sz.dtype == np.int64
    assert book.bid_ct.dtype == np.int64 and book.depth.dtype == np.uint8
    assert book.action.dtype == np.uint8 and book.sequence.dtype == np.uint32
    assert book.instrument_id.dtype == np.uint32 and book.ts_event.dtype == np.int64


def test_partial_cancel_reduces_size_keeps_order() -> None:
    res = rebuild_book(mbo_of([*BASE, ev("C", "B", 1, 100.00, 2)]))
    assert bids(res.book) == [(100.00, 6, 2), (99.75, 4, 1), (99.50, 1, 1)]
    assert res.live_orders == 7
    assert res.book.depth[-1] == 0


def test_full_cancel_removes_level_and_deeper_levels_shift_up() -> None:
    res = rebuild_book(mbo_of([*BASE, ev("C", "B", 3, 99.75, 4)]))
    assert bids(res.book) == [(100.00, 8, 2), (99.50, 1, 1)]
    assert np.isnan(res.book.bid_px[-1, 2])
    assert res.book.depth[-1] == 1  # the level the cancel emptied was level 1
    assert res.live_orders == 6 == res.total_bid_orders + res.total_ask_orders


def test_cancel_uses_the_resting_order_not_the_record_price() -> None:
    # a cancel carrying a wrong price still removes order 4 from 99.50
    res = rebuild_book(mbo_of([*BASE, ev("C", "B", 4, 98.00, 1)]))
    assert bids(res.book) == [(100.00, 8, 2), (99.75, 4, 1)]


def test_modify_moves_order_across_levels_and_resizes() -> None:
    events = [
        *BASE,
        ev("M", "B", 2, 99.50, 7),  # 100.00 x3 -> 99.50 x7: count moves with it
        ev("M", "A", 11, 100.25, 9),  # size only: same level, same count
        ev("M", "A", 13, 100.25, 1),  # 100.50 -> 100.25 (onto the touch)
    ]
    res = rebuild_book(mbo_of(events))
    book = res.book
    assert bids(book, -3) == [(100.00, 5, 1), (99.75, 4, 1), (99.50, 8, 2)]
    assert book.depth[-3] == 2  # the modify's new price is level 2
    assert asks(book, -2) == [(100.25, 9, 1), (100.50, 7, 2)]
    assert asks(book, -1) == [(100.25, 10, 2), (100.50, 6, 1)]
    assert res.live_orders == 7
    assert res.n_unknown_modifies == 0


def test_modify_to_size_zero_removes_the_order() -> None:
    res = rebuild_book(mbo_of([*BASE, ev("M", "B", 4, 99.50, 0)]))
    assert bids(res.book) == [(100.00, 8, 2), (99.75, 4, 1)]
    assert res.live_orders == 6


def test_clear_empties_the_book_and_later_adds_rebuild_it() -> None:
    res = rebuild_book(mbo_of([*BASE, ev("R", "N", 0, None, 0), ev("A", "A", 21, 101.0, 3)]))
    book = res.book
    assert bids(book, -2) == [] and asks(book, -2) == []
    assert np.isnan(book.bid_px[-2]).all() and (book.ask_ct[-2] == 0).all()
    assert bids(book) == [] and asks(book) == [(101.0, 3, 1)]
    assert res.n_clears == 1
    assert res.live_orders == 1


def test_trades_and_fills_do_not_move_the_book() -> None:
    events = [
        *BASE,
        ev("T", "B", 0, 100.25, 1, flags=0),  # buy aggressor lifts the ask ...
        ev("F", "A", 11, 100.25, 1, flags=0),  # ... fills order 11 ...
        ev("C", "A", 11, 100.25, 1),  # ... and the cancel is what changes the book
        ev("T", "A", 0, 100.00, 1),  # a lone trade or fill closing an event: no new state
        ev("F", "B", 1, 100.00, 1),
        ev("N", "N", 0, None, 0),
    ]
    res = rebuild_book(mbo_of(events))
    assert res.n_states == len(BASE) + 1
    assert asks(res.book) == [(100.25, 1, 1), (100.50, 7, 2)]
    assert bids(res.book) == BASE_BIDS
    assert res.book.action[-1] == ord("C") and res.book.sequence[-1] == len(BASE) + 3


def test_state_emitted_only_at_f_last_and_only_when_top_levels_change() -> None:
    events = [
        ev("A", "B", 1, 100.00, 5, flags=0),
        ev("A", "B", 2, 99.75, 4, flags=0),
        ev("A", "A", 11, 100.25, 2),  # F_LAST: one state for the three records
        ev("A", "B", 3, 99.50, 1),  # level 2: outside the top 2 levels, no state
        ev("A", "A", 12, 100.50, 1, flags=0),
        ev("C", "A", 12, 100.50, 1),  # add then cancel in one event: book unchanged, no state
        ev("C", "B", 2, 99.75, 4),  # 99.50 moves up into the top 2: a state
    ]
    res = rebuild_book(mbo_of(events), levels=2)
    book = res.book
    assert res.n_states == 2 and len(book) == 2
    assert book.bid_px.shape == (2, 2)
    assert bids(book, 0) == [(100.00, 5, 1), (99.75, 4, 1)]
    assert asks(book, 0) == [(100.25, 2, 1)]
    # the emitted row carries the F_LAST record's fields
    assert book.ts_event[0] == 2000 and book.ts_recv[0] == 2007 and book.sequence[0] == 3
    assert book.action[0] == ord("A") and book.side[0] == ord("A")
    assert book.price[0] == 100.25 and book.size[0] == 2 and book.flags[0] == F_LAST
    assert bids(book, 1) == [(100.00, 5, 1), (99.50, 1, 1)]
    assert book.sequence[1] == 7 and book.depth[1] == 1
    assert res.n_events == 7


def test_depth_is_zero_beyond_the_top_levels() -> None:
    events = [*BASE, ev("C", "B", 4, 99.50, 1)]  # changes level 2 of a 3-level book
    res = rebuild_book(mbo_of(events), levels=3)
    assert res.book.depth[-1] == 2
    beyond = [
        *BASE,
        ev("A", "B", 5, 99.25, 1),  # level 3: beyond 3 levels, no state
        ev("C", "A", 11, 100.25, 2, flags=0),  # the top changes ...
        ev("A", "B", 6, 99.00, 1),  # ... in an event whose F_LAST record is at level 4
    ]
    res2 = rebuild_book(mbo_of(beyond), levels=3)
    assert res2.n_states == len(BASE) + 1
    assert res2.book.sequence[-1] == len(beyond) and res2.book.depth[-1] == 0


def test_unknown_ids_are_counted_not_fatal() -> None:
    events = [
        *BASE,
        ev("C", "B", 999, 100.00, 1),  # unknown cancel: ignored
        ev("M", "A", 998, 100.75, 4),  # unknown modify: applied as an add
        ev("C", "A", 12, 100.50, 10),  # cancel larger than the order: order removed
        ev("A", "B", 1, 99.75, 2),  # add of a resting id: replaces order 1
        ev("A", "N", 997, 100.00, 1),  # no side: skipped
        ev("A", "B", 996, None, 1),  # undefined price: skipped
    ]
    res = rebuild_book(mbo_of(events))
    assert res.n_unknown_cancels == 1
    assert res.n_unknown_modifies == 1
    assert res.n_overcancels == 1
    assert res.n_duplicate_adds == 1
    assert res.n_invalid == 2
    assert asks(res.book) == [(100.25, 2, 1), (100.50, 1, 1), (100.75, 4, 1)]
    assert bids(res.book) == [(100.00, 3, 1), (99.75, 6, 2), (99.50, 1, 1)]
    assert res.live_orders == 7 == res.total_bid_orders + res.total_ask_orders


def test_snapshot_replay_emits_once_at_its_f_last() -> None:
    snap = F_SNAPSHOT
    events = [
        ev("R", "N", 0, None, 0, flags=snap),
        *(ev(a, s, o, p, q, flags=snap) for a, s, o, p, q, _, _ in BASE),
    ]
    events[-1] = ev("A", "A", 13, 100.50, 1, flags=snap | F_LAST)
    res = rebuild_book(mbo_of([*events, ev("C", "B", 1, 100.00, 5)]))
    assert res.n_states == 2
    assert bids(res.book, 0) == BASE_BIDS and asks(res.book, 0) == BASE_ASKS
    assert res.book.sequence[0] == len(BASE) + 1
    assert res.n_snapshot_records == len(BASE) + 1
    # a snapshot whose last record lacks F_LAST (as in the real ESH4 file): the first live
    # F_LAST emits the state
    events[-1] = ev("A", "A", 13, 100.50, 1, flags=snap)
    res = rebuild_book(mbo_of([*events, ev("C", "B", 1, 100.00, 5)]))
    assert res.n_states == 1
    assert bids(res.book) == [(100.00, 3, 1), (99.75, 4, 1), (99.50, 1, 1)]


def test_snapshot_without_clear_replaces_the_book() -> None:
    # live orders, then a snapshot with no R before it: the snapshot is the whole book, so the
    # orders resting before it (order 1 at 101.00, order 2 at 99.00) are dropped
    snapshot = [ev(a, s, o, p, q, flags=F_SNAPSHOT) for a, s, o, p, q, _, _ in BASE]
    snapshot[-1] = ev("A", "A", 13, 100.50, 1, flags=F_SNAPSHOT | F_LAST)
    events = [ev("A", "A", 1, 101.00, 9), ev("A", "B", 2, 99.00, 9), *snapshot]
    res = rebuild_book(mbo_of(events))
    assert bids(res.book) == BASE_BIDS and asks(res.book) == BASE_ASKS
    assert res.n_snapshots == 1 and res.n_clears == 0
    assert res.n_duplicate_adds == 0  # orders 1 and 2 were dropped before the replay re-added them
    assert res.live_orders == len(BASE)


def test_two_interleaved_instruments_get_their_own_books() -> None:
    events = [
        ev("A", "B", 1, 100.00, 5, iid=7),
        ev("A", "B", 1, 200.00, 9, iid=8),  # the same order id on another instrument
        ev("A", "A", 2, 100.25, 1, iid=7),
        ev("R", "N", 0, None, 0, iid=8),  # clears instrument 8 only
        ev("C", "B", 1, 100.00, 2, iid=7),
        ev("A", "A", 3, 201.00, 4, iid=8),
    ]
    res = rebuild_book(mbo_of(events))
    book = res.book
    assert book.instrument_id.tolist() == [7, 8, 7, 8, 7, 8]  # input order kept
    assert book.sequence.tolist() == [1, 2, 3, 4, 5, 6]
    assert bids(book, 1) == [(200.00, 9, 1)]
    assert bids(book, 2) == [(100.00, 5, 1)] and asks(book, 2) == [(100.25, 1, 1)]
    assert bids(book, 3) == [] and asks(book, 3) == []
    assert bids(book, 4) == [(100.00, 3, 1)] and asks(book, 4) == [(100.25, 1, 1)]
    assert bids(book, 5) == [] and asks(book, 5) == [(201.00, 4, 1)]
    assert res.live_orders == 3 and res.n_clears == 1 and res.n_unknown_cancels == 0


def test_many_orders_and_levels_grow_the_tables() -> None:
    # 3000 orders on 1500 levels per side then every other one cancelled: exercises table
    # rehashing, tombstones and level arrays past their initial capacity (1024)
    events = []
    for k in range(3000):
        events.append(ev("A", "B", 10_000 + k, 100.0 - 0.25 * (k % 1500), 1 + k % 3))
        events.append(ev("A", "A", 20_000 + k, 100.25 + 0.25 * (k % 1500), 1))
    # the first order of every bid level goes
    events.extend(ev("C", "B", 10_000 + k, 0.0, 1 + k % 3) for k in range(1500))
    res = rebuild_book(mbo_of(events))
    assert res.live_orders == 4500 == res.total_bid_orders + res.total_ask_orders
    assert (res.bid_levels, res.ask_levels) == (1500, 1500)
    assert res.total_bid_size == sum(1 + k % 3 for k in range(1500, 3000))
    assert bids(res.book)[:2] == [(100.0, 1, 1), (99.75, 2, 1)]
    assert asks(res.book)[0] == (100.25, 2, 2)


def test_empty_input_and_bad_levels() -> None:
    res = rebuild_book(mbo_of([]))
    assert len(res.book) == 0 and res.book.bid_px.shape == (0, 10) and res.n_events == 0
    with pytest.raises(ValueError, match="levels"):
        rebuild_book(mbo_of(BASE), levels=0)


# --- an independent replay (dicts, no numba) --------------------------------------------------


def reference_states(mbo: MboArrays, levels: int) -> list[tuple[int, tuple]]:
    """(F_LAST record index, top levels) for each state the semantics say to emit."""
    orders: dict[int, list] = {}  # order id -> [side, price_raw, size]
    book: dict[str, dict[int, list[int]]] = {"B": {}, "A": {}}  # side -> price -> [size, count]

    def level(side: str, px: int, d_size: int, d_count: int) -> None:
        lv = book[side].setdefault(px, [0, 0])
        lv[0] += d_size
        lv[1] += d_count
        if lv[1] == 0:
            del book[side][px]

    out, last, in_snapshot = [], ((), ()), False
    for r in range(len(mbo)):
        a, s = chr(mbo.action[r]), chr(mbo.side[r])
        oid, px, sz = int(mbo.order_id[r]), int(mbo.price_raw[r]), int(mbo.size[r])
        snapshot = bool(mbo.flags[r] & F_SNAPSHOT)
        if a == "R" or (snapshot and not in_snapshot):  # R, or a snapshot replay begins
            orders.clear()
            book = {"B": {}, "A": {}}
        in_snapshot = snapshot
        if a == "R":
            pass
        elif a == "A" or (a == "M" and oid not in orders):
            if s in "BA" and px != UNDEF_PRICE and sz > 0:
                if oid in orders:
                    level(*orders[oid][:2], -orders[oid][2], -1)
                orders[oid] = [s, px, sz]
                level(s, px, sz, 1)
        elif a == "M":
            os_, opx, osz = orders.pop(oid)
            level(os_, opx, -osz, -1)
            if sz > 0:
                orders[oid] = [s if s in "BA" else os_, px, sz]
                level(orders[oid][0], px, sz, 1)
        elif a == "C" and oid in orders:
            o = orders[oid]
            c = min(sz, o[2])
            o[2] -= c
            level(o[0], o[1], -c, -1 if o[2] == 0 else 0)
            if o[2] == 0:
                del orders[oid]
        if mbo.flags[r] & F_LAST:
            top = (
                tuple((p, *book["B"][p]) for p in heapq.nlargest(levels, book["B"])),
                tuple((p, *book["A"][p]) for p in heapq.nsmallest(levels, book["A"])),
            )
            if top != last:
                out.append((r, top))
                last = top
    return out


def assert_matches_reference(mbo: MboArrays, res: BookRebuild, levels: int = 10) -> None:
    ref = reference_states(mbo, levels)
    book = res.book
    assert res.n_states == len(ref)
    seq = [int(mbo.sequence[r]) for r, _ in ref]
    assert book.sequence.tolist() == seq
    for row, (_, (ref_bids, ref_asks)) in enumerate(ref):
        got = (bids(book, row), asks(book, row))
        want = (
            [(p / PRICE_SCALE, s, c) for p, s, c in ref_bids],
            [(p / PRICE_SCALE, s, c) for p, s, c in ref_asks],
        )
        assert got == want, f"state {row} differs"


def test_hand_streams_match_reference_replay() -> None:
    snapshot = [ev(a, s, o, p, q, flags=F_SNAPSHOT) for a, s, o, p, q, _, _ in BASE[2:]]
    events = [
        *BASE,
        ev("M", "B", 2, 99.50, 7),
        ev("C", "A", 12, 100.50, 6),
        ev("A", "B", 5, 100.25, 1),
        ev("R", "N", 0, None, 0),
        *BASE[:3],
        *snapshot,
        ev("M", "B", 4, 99.25, 2),
        ev("C", "B", 3, 0.0, 1),
    ]
    mbo = mbo_of(events)
    assert_matches_reference(mbo, rebuild_book(mbo, levels=2), levels=2)


# --- real ES data -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_books(real_data_dir: Path) -> dict[str, tuple[MboArrays, BookRebuild]]:
    out = {}
    for name in (ESH4, ESM4):
        path = real_data_dir / name
        if not path.is_file():
            pytest.skip(f"real MBO file {path} is absent")
        _, mbo = read_dbn(path, expect=Schema.MBO)
        out[name] = (mbo, rebuild_book(mbo))
    return out


@pytest.mark.parametrize("name", [ESH4, ESM4])
def test_real_book_invariants(real_books: dict, name: str) -> None:
    mbo, res = real_books[name]
    book = res.book
    assert res.n_events == len(mbo)
    assert (book.bid_sz >= 0).all() and (book.ask_sz >= 0).all()
    assert (book.bid_ct >= 0).all() and (book.ask_ct >= 0).all()
    for px, sz, ct in ((book.bid_px, book.bid_sz, book.bid_ct), (book.ask_px, book.ask_sz, book.ask_ct)):
        populated = ct > 0
        assert ((sz > 0) == populated).all()  # a level is populated iff it has size and orders
        assert np.isfinite(px[populated]).all() and np.isnan(px[~populated]).all()
        ticks = px[populated] / ES_TICK
        assert (ticks == np.round(ticks)).all()  # every price on the 0.25 grid
        # levels are contiguous from the top (no hole)
        assert (populated[:, :-1] | ~populated[:, 1:]).all()
    with np.errstate(invalid="ignore"):
        assert (np.diff(book.bid_px, axis=1) < 0)[book.bid_ct[:, 1:] > 0].all()  # descending
        assert (np.diff(book.ask_px, axis=1) > 0)[book.ask_ct[:, 1:] > 0].all()  # ascending
    both = (book.bid_ct[:, 0] > 0) & (book.ask_ct[:, 0] > 0)
    uncrossed = both & (book.bid_px[:, 0] < book.ask_px[:, 0])
    assert uncrossed.sum() >= 0.99 * both.sum()
    assert res.n_crossed == int(book.crossed().sum())
    assert res.live_orders == res.total_bid_orders + res.total_ask_orders
    assert res.n_unknown_cancels == res.n_invalid == 0
    assert (np.diff(book.ts_recv) >= 0).all()
    # emitted at event ends only, and every F_LAST record at most once
    assert (book.flags & F_LAST).all()
    assert res.n_states <= int(np.count_nonzero(mbo.flags & F_LAST))


def test_real_esh4_state_count_and_final_book(real_books: dict) -> None:
    mbo, res = real_books[ESH4]
    assert 30_000 <= res.n_states <= 45_000  # about 37,000 real ten-level states
    assert res.n_snapshot_records == 8725 and res.n_snapshots == 1
    # the final best bid is below the final best ask, and all ten levels are populated
    assert res.book.bid_px[-1, 0] < res.book.ask_px[-1, 0]
    assert (res.book.bid_ct[-1] > 0).all() and (res.book.ask_ct[-1] > 0).all()


def test_real_esm4_snapshot_after_clear(real_books: dict) -> None:
    mbo, res = real_books[ESM4]
    assert res.n_clears == 1 and res.n_snapshot_records == 13_601 and res.n_snapshots == 1
    # the snapshot's last record carries F_LAST: the first state is emitted exactly there
    snap_end = int(np.flatnonzero(mbo.flags & F_SNAPSHOT)[-1])
    assert res.book.sequence[0] == mbo.sequence[snap_end]
    assert res.book.ts_recv[0] == mbo.ts_recv[snap_end]


@pytest.mark.parametrize(("name", "n_records"), [(ESM4, None), (ESH4, 15_000)])
def test_real_data_matches_reference_replay(real_books: dict, name: str, n_records) -> None:
    mbo, res = real_books[name]
    if n_records is not None:  # a prefix keeps the pure-Python replay fast
        mbo = mbo.take(slice(0, n_records))
        res = rebuild_book(mbo)
    assert_matches_reference(mbo, res)


def test_rebuilt_book_round_trips_through_mbp10_dbn(real_books: dict, tmp_path: Path) -> None:
    _, res = real_books[ESH4]
    book = res.book
    path = write_book(tmp_path / "x.mbp-10.dbn.zst", book, symbols={17077: "ESH4"})

    f, back = read_dbn(path, expect=Schema.MBP_10)
    assert f.instrument_symbols == {17077: "ESH4"}
    assert isinstance(back, BookArrays)
    for field in BookArrays.__dataclass_fields__:
        want, got = getattr(book, field), getattr(back, field)
        assert got.dtype == want.dtype, field
        assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), field

    rec = db.DBNStore.from_file(path).to_ndarray()
    assert len(rec) == len(book)
    for field in ("ts_event", "ts_recv", "instrument_id", "flags", "depth", "sequence", "size"):
        assert np.array_equal(rec[field].astype(np.int64), getattr(book, field).astype(np.int64))
    assert np.array_equal(rec["action"].view(np.uint8), book.action)
    assert np.array_equal(rec["side"].view(np.uint8), book.side)
    for i in range(10):
        for side in ("bid", "ask"):
            px = getattr(book, f"{side}_px")[:, i]
            raw = np.where(np.isnan(px), UNDEF_PRICE, np.rint(np.nan_to_num(px) * PRICE_SCALE))
            assert np.array_equal(rec[f"{side}_px_{i:02d}"], raw.astype(np.int64))
            assert np.array_equal(rec[f"{side}_sz_{i:02d}"], getattr(book, f"{side}_sz")[:, i])
            assert np.array_equal(rec[f"{side}_ct_{i:02d}"], getattr(book, f"{side}_ct")[:, i])
