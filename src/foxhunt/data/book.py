"""Rebuild an ``L``-level price book (MBP-10 by default) from Databento MBO records.

Semantics (Databento MBO; docs/design.md §1)
--------------------------------------------
Each resting order is known by its ``order_id``; the book is the set of resting orders, and a
price level is the aggregate of the orders resting at one exact price on one side:
``size`` = sum of their sizes, ``count`` = number of orders. Levels are keyed by the exact
fixed-point ``price_raw`` (int64, 1e-9 units), never by a float.

* ``A`` add: a new order rests at (side, price) with ``size``. An add for an id that is already
  resting replaces the old order (counted in ``n_duplicate_adds``).
* ``C`` cancel: the order's size shrinks by the record's ``size``; at 0 the order is removed (a full
  cancel). A cancel bigger than the resting size removes the order and is counted in
  ``n_overcancels``; a cancel for an unknown id changes nothing and is counted in
  ``n_unknown_cancels``. The resting order's own price and side are used, not the record's.
* ``M`` modify: the order's new price and size are the record's. A price (or side) change moves
  the order to the new level (queue priority is lost, which does not show in aggregates); a size
  change alone adjusts its level's size; a modify to size 0 removes the order. A modify for an
  unknown id is treated as an add, as Databento's own book example does (``n_unknown_modifies``).
* ``R`` clear: every resting order of the instrument is removed.
* ``T`` trade, ``F`` fill and ``N`` none do not change the book: the cancel or modify that comes
  with every fill does.
* Records with ``F_SNAPSHOT`` replay the resting orders at the start of a file (normally after an
  ``R``); they are ordinary adds here, so the book is built from them. A snapshot is the whole
  book, so the first record of each run of ``F_SNAPSHOT`` records empties the book as ``R`` does,
  whether or not an ``R`` precedes it (the real ESH4 file has none; a file made of several days
  back to back would otherwise keep the previous day's orders). No state is emitted inside the
  replay because its records carry no ``F_LAST`` until (at most) the final one.

A book state is emitted only at the end of an event (a record with ``F_LAST``), the only point at
which Databento guarantees the book is consistent, and only when the top ``levels`` levels
(price, size and count on both sides) differ from the previous emitted state (the empty book before
the first one). The row's ``ts_event``/``ts_recv``/``sequence``/``flags``/``action``/``side``/
``price``/``size`` are those of the ``F_LAST`` record; ``depth`` is the 0-based level of that
record's price on its book side (the resting side: the record's side, except for a trade, whose
side is the aggressor's), or 0 when the price lies beyond the top ``levels``; for a cancel that
emptied a level, the level it was at. The output is a :class:`~foxhunt.data.arrays.BookArrays`
with the same dtypes and conventions as MBP-10 ingest (NaN price, size 0 and count 0 for an empty
level). Malformed records are skipped and counted in ``n_invalid``: a new order (an add, or a
modify of an unknown id) with side ``N``, an undefined price or size 0, and a modify of a resting
order to an undefined price (a modify with side ``N`` keeps the order's side). Crossed or locked
states are emitted as they are and counted in ``n_crossed`` (flagged, not hidden: docs/design.md §1); the
real ESH4 file has one such run, 143 states of the pre-open on 2023-12-25. Several instruments are
rebuilt one book each and their states merged back in input order.

Data structure (and why)
------------------------
The builder is one ``numba`` loop over flat arrays, with no Python object per order (as in
hftbacktest):

* **Orders**: an open-addressing hash table (linear probing, Fibonacci hash of the order id,
  tombstones for removed orders, rehashed to twice the size or in place when live + deleted slots
  pass half the table). Each slot stores the order's level key, size and side, so an add, cancel
  or modify costs one probe sequence and no second lookup. A numba typed ``Dict`` plus slot arrays
  is slower (10.8 ms against 9.8 ms of kernel time on ESH4): its ``get`` types as Optional, so
  each lookup is ``in`` then ``[]``.
* **Levels**: per side, three parallel arrays (key, size, count) kept sorted by
  ``key = +price`` for bids and ``key = -price`` for asks, so that on both sides the best level is
  the *last* element. Finding a level is a binary search; creating or deleting one shifts only the
  levels *better* than it. Live level births and deaths happen near the touch: on the real ESH4
  file (60,067 live records, ~2,000 level births and deaths) they shifted ~100,000 entries in all. A
  snapshot arrives best level first, so its replay shifts O(levels^2) entries once (~550,000 for
  ESH4's 1,450 levels, about a millisecond). The top ``L`` levels are then simply the last ``L``
  elements: no heap, no partial scan, and the full-depth totals (``total_bid_orders`` ...) are
  plain sums. (A hash map of levels needs a scan of every level to find the top ``L`` after each
  event; a price-indexed ladder needs a known tick size and price range. Sorted arrays need
  neither.)
* **Emission**: at each ``F_LAST`` the top ``L`` levels are compared with the last emitted ones
  (``6 L`` integer comparisons, raw fixed-point prices); only a changed state is converted to
  float prices and written, straight into the output arrays.

Speed (one core, after compilation): :func:`rebuild_book` runs at 4-6 M records/s end to end on
the real ESH4 file (68,792 records, 37,064 states; the kernel alone at 6-7 M/s) and at 3-4 M/s
on a million records of it repeated. Writing the emitted states is a good part of the time.
"""

from __future__ import annotations

from dataclasses import dataclass

import databento_dbn as dbn
import numba
import numpy as np

import foxhunt.jit  # noqa: F401  (before the kernels: their cache is stamped with the package)
from foxhunt.data.arrays import (
    ACTION_ADD,
    ACTION_CANCEL,
    ACTION_CLEAR,
    ACTION_MODIFY,
    ACTION_TRADE,
    SIDE_ASK,
    SIDE_BID,
    BookArrays,
    MboArrays,
)
from foxhunt.data.dbn_read import PRICE_SCALE, UNDEF_PRICE, check_monotonic

F_LAST = int(dbn.F_LAST)  # 128: last record of an event; the book is consistent after it
F_SNAPSHOT = int(dbn.F_SNAPSHOT)  # 32: record replays a resting order of the start-of-day book

_BID = 0  # side index into the [2, cap] level arrays
_ASK = 1
_INITIAL_CAPACITY = 1024  # price levels per side; doubled on demand

# Layout of the kernel's int64 counter vector (names match BookRebuild's fields).
_COUNTERS = (
    "n_events",
    "n_states",
    "live_orders",
    "total_bid_orders",
    "total_ask_orders",
    "total_bid_size",
    "total_ask_size",
    "bid_levels",
    "ask_levels",
    "n_snapshot_records",
    "n_snapshots",
    "n_clears",
    "n_unknown_cancels",
    "n_unknown_modifies",
    "n_duplicate_adds",
    "n_overcancels",
    "n_invalid",
)
(
    _C_EVENTS,
    _C_STATES,
    _C_LIVE,
    _C_BID_ORDERS,
    _C_ASK_ORDERS,
    _C_BID_SIZE,
    _C_ASK_SIZE,
    _C_BID_LEVELS,
    _C_ASK_LEVELS,
    _C_SNAPSHOT,
    _C_SNAPSHOTS,
    _C_CLEARS,
    _C_UNKNOWN_CANCELS,
    _C_UNKNOWN_MODIFIES,
    _C_DUPLICATE_ADDS,
    _C_OVERCANCELS,
    _C_INVALID,
) = range(len(_COUNTERS))


@dataclass(frozen=True, eq=False)
class BookRebuild:
    """The rebuilt book states and what happened while building them.

    Order and size totals are over *all* levels of the final book (not only the top ``L``), so
    ``live_orders == total_bid_orders + total_ask_orders`` checks the level bookkeeping.
    """

    book: BookArrays  # one row per emitted state, input order
    n_events: int  # MBO records processed
    n_states: int  # book states emitted (rows of ``book``)
    n_crossed: int  # emitted states with both sides populated and best bid >= best ask
    live_orders: int  # resting orders at the end (all instruments)
    total_bid_orders: int  # sum of bid level counts at the end, full depth
    total_ask_orders: int
    total_bid_size: int  # sum of bid level sizes at the end, full depth
    total_ask_size: int
    bid_levels: int  # number of populated bid levels at the end, full depth
    ask_levels: int
    n_snapshot_records: int  # records carrying F_SNAPSHOT
    n_snapshots: int  # snapshot replays (runs of F_SNAPSHOT records), each one emptied the book
    n_clears: int  # R records
    n_unknown_cancels: int  # cancels of an order id not resting (ignored)
    n_unknown_modifies: int  # modifies of an order id not resting (applied as adds)
    n_duplicate_adds: int  # adds of an order id already resting (replace the old order)
    n_overcancels: int  # cancels larger than the resting size (order removed)
    n_invalid: int  # adds/modifies with side N, undefined price or size 0 (skipped)


# --- numba kernel -----------------------------------------------------------------------------

_EMPTY, _LIVE, _DELETED = 0, 1, 2  # order-table slot states (open addressing with tombstones)
_FIB = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: 2^64 / golden ratio


@numba.njit(cache=True)
def _find(t_id, t_state, oid, shift):
    """Slot of live order ``oid``, or ``-(insert slot) - 1`` when it is not resting.

    Linear probing from the Fibonacci hash of the id; the insert slot is the first deleted slot
    on the probe path, else the empty slot that ends it.
    """
    mask = t_id.shape[0] - 1
    i = np.int64((oid * _FIB) >> shift)
    free = -1
    while True:
        st = t_state[i]
        if st == _EMPTY:
            return -(free if free >= 0 else i) - 1
        if st == _LIVE:
            if t_id[i] == oid:
                return i
        elif free < 0:
            free = i
        i = (i + 1) & mask


@numba.njit(cache=True)
def _rehash(t_id, t_state, t_key, t_sz, t_side, cap, shift):
    """Copy the live orders into fresh tables of ``cap`` slots (``shift`` = 64 - log2(cap))."""
    n_id = np.empty(cap, np.uint64)
    n_state = np.zeros(cap, np.uint8)
    n_key = np.empty(cap, np.int64)
    n_sz = np.empty(cap, np.int64)
    n_side = np.empty(cap, np.int64)
    for j in range(t_id.shape[0]):
        if t_state[j] == _LIVE:
            i = -_find(n_id, n_state, t_id[j], shift) - 1
            n_id[i] = t_id[j]
            n_state[i] = _LIVE
            n_key[i] = t_key[j]
            n_sz[i] = t_sz[j]
            n_side[i] = t_side[j]
    return n_id, n_state, n_key, n_sz, n_side


@numba.njit(cache=True)
def _lower_bound(keys, n, key):
    """Smallest i in [0, n] with keys[i] >= key (keys[:n] ascending)."""
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
def _level_update(lv_key, lv_sz, lv_ct, n_lv, s, key, d_size, d_count):
    """Add (d_size, d_count) to level ``key`` of side ``s``: create it if new, drop it at count 0.

    Levels ``[0, n_lv[s])`` are sorted by key ascending (best last), so inserting or removing at
    position i shifts only the ``n - i`` better levels.
    """
    n = n_lv[s]
    i = _lower_bound(lv_key[s], n, key)
    if i < n and lv_key[s, i] == key:
        lv_sz[s, i] += d_size
        lv_ct[s, i] += d_count
        if lv_ct[s, i] <= 0:  # last order left the level: the better levels shift down one
            for j in range(i, n - 1):
                lv_key[s, j] = lv_key[s, j + 1]
                lv_sz[s, j] = lv_sz[s, j + 1]
                lv_ct[s, j] = lv_ct[s, j + 1]
            n_lv[s] = n - 1
    elif d_count > 0:  # first order at a new price: the better levels shift up one
        for j in range(n, i, -1):
            lv_key[s, j] = lv_key[s, j - 1]
            lv_sz[s, j] = lv_sz[s, j - 1]
            lv_ct[s, j] = lv_ct[s, j - 1]
        lv_key[s, i] = key
        lv_sz[s, i] = d_size
        lv_ct[s, i] = d_count
        n_lv[s] = n + 1


@numba.njit(cache=True)
def _grow_levels(a, cap):
    """A copy of the [2, old cap] level array with room for ``cap`` levels per side."""
    out = np.empty((a.shape[0], cap), a.dtype)
    for s in range(a.shape[0]):  # explicit loops: a 2-D slice assignment compiles ~10x slower
        for j in range(a.shape[1]):
            out[s, j] = a[s, j]
    return out


@numba.njit(cache=True)
def _side_index(side_byte):
    if side_byte == SIDE_BID:
        return _BID
    if side_byte == SIDE_ASK:
        return _ASK
    return -1


@numba.njit(cache=True)
def _begin_record(a, fl, in_snapshot, n_live, n_used, counters, t_state, n_lv):
    """Snapshot bookkeeping before a record with action ``a`` and flags ``fl``; an ``R``, or the first
    record of a snapshot replay, empties the book (the snapshot is the whole book, so whatever rested
    before it is stale even when no R precedes it). Returns ``(in_snapshot, n_live, n_used)``."""
    snapshot_start = False
    if fl & F_SNAPSHOT:
        counters[_C_SNAPSHOT] += 1
        snapshot_start = not in_snapshot
        in_snapshot = True
    else:
        in_snapshot = False
    if a == ACTION_CLEAR or snapshot_start:
        if a == ACTION_CLEAR:
            counters[_C_CLEARS] += 1
        if snapshot_start:
            counters[_C_SNAPSHOTS] += 1
        t_state[:] = _EMPTY
        n_live = 0
        n_used = 0
        n_lv[0] = 0
        n_lv[1] = 0
    return in_snapshot, n_live, n_used


@numba.njit(cache=True, inline="always")
def _new_order(
    oid, s, px, sz, free,  # the record, and the order table's insert slot
    t_id, t_state, t_key, t_sz, t_side, lv_key, lv_sz, lv_ct, n_lv, n_live, n_used, counters,  # the book
):  # fmt: skip
    """An order that is not resting joins (side ``s``, price ``px``) with ``sz`` at insert slot
    ``free`` (an add, or a modify of an unknown id), unless it is malformed. Returns
    ``(n_live, n_used)``."""
    if s < 0 or px == UNDEF_PRICE or sz <= 0:
        counters[_C_INVALID] += 1
    else:
        if t_state[free] == _EMPTY:
            n_used += 1
        n_live += 1
        key = px if s == _BID else -px
        t_id[free] = oid
        t_state[free] = _LIVE
        t_key[free] = key
        t_sz[free] = sz
        t_side[free] = s
        _level_update(lv_key, lv_sz, lv_ct, n_lv, s, key, sz, 1)
    return n_live, n_used


@numba.njit(cache=True, inline="always")
def _change_order(
    slot, s, px, sz,  # the order's slot, the record
    t_state, t_key, t_sz, t_side, lv_key, lv_sz, lv_ct, n_lv, n_live, counters,  # the book
):  # fmt: skip
    """The resting order in ``slot`` takes the record's price and size (an ``M``, or an ``A`` of an id
    already resting); side ``s`` < 0 keeps its side, size 0 removes it. Returns ``n_live``."""
    old_s = t_side[slot]
    old_key = t_key[slot]
    old_sz = t_sz[slot]
    if s < 0:  # a modify without a side keeps the order's side
        s = old_s
    if px == UNDEF_PRICE:
        counters[_C_INVALID] += 1
    elif sz <= 0:  # M to size 0: the order leaves the book
        _level_update(lv_key, lv_sz, lv_ct, n_lv, old_s, old_key, -old_sz, -1)
        t_state[slot] = _DELETED
        n_live -= 1
    else:
        key = px if s == _BID else -px
        if s == old_s and key == old_key:  # size change only: same level
            _level_update(lv_key, lv_sz, lv_ct, n_lv, s, key, sz - old_sz, 0)
        else:  # price (or side) change: leave the old level, join the new one
            _level_update(lv_key, lv_sz, lv_ct, n_lv, old_s, old_key, -old_sz, -1)
            _level_update(lv_key, lv_sz, lv_ct, n_lv, s, key, sz, 1)
        t_key[slot] = key
        t_sz[slot] = sz
        t_side[slot] = s
    return n_live


@numba.njit(cache=True, inline="always")
def _cancel(slot, c, t_state, t_key, t_sz, t_side, lv_key, lv_sz, lv_ct, n_lv, n_live, counters):
    """A ``C`` of ``c`` contracts of the order in ``slot`` (-1: not resting), at the resting order's
    side and price (not the record's); a cancel of its whole size (or more) removes it. Returns
    ``n_live``."""
    if slot < 0:
        counters[_C_UNKNOWN_CANCELS] += 1
    else:
        s = t_side[slot]
        key = t_key[slot]
        old_sz = t_sz[slot]
        if c > old_sz:
            counters[_C_OVERCANCELS] += 1
            c = old_sz
        if c == old_sz:  # full cancel: the order leaves its level
            _level_update(lv_key, lv_sz, lv_ct, n_lv, s, key, -old_sz, -1)
            t_state[slot] = _DELETED
            n_live -= 1
        else:  # partial cancel: size shrinks, the order keeps its place
            t_sz[slot] = old_sz - c
            _level_update(lv_key, lv_sz, lv_ct, n_lv, s, key, -c, 0)
    return n_live


@numba.njit(cache=True, inline="always")
def _top_changed(lv_key, lv_sz, lv_ct, n_lv, top_key, top_sz, top_ct, levels):
    """Whether the top ``levels`` levels (key, size, count per side; 0s for an empty level) differ
    from the last emitted ones ``top_*``, which they replace (``6 L`` integer comparisons)."""
    changed = False
    for s in range(2):
        nl = n_lv[s]
        for i in range(levels):
            j = nl - 1 - i  # level i from the best (best = last element)
            if j >= 0:
                key = lv_key[s, j]
                sz = lv_sz[s, j]
                ct = lv_ct[s, j]
            else:  # empty level
                key = 0
                sz = 0
                ct = 0
            if key != top_key[s, i] or sz != top_sz[s, i] or ct != top_ct[s, i]:
                changed = True
                top_key[s, i] = key
                top_sz[s, i] = sz
                top_ct[s, i] = ct
    return changed


@numba.njit(cache=True, inline="always")
def _write_state(top_key, top_sz, top_ct, out_px, out_sz, out_ct, m, levels):
    """Emitted state ``m`` [side, m, level]: prices as MBP-10 ingest converts them, NaN where empty."""
    for s in range(2):
        for i in range(levels):
            if top_ct[s, i] > 0:
                px = top_key[s, i] if s == _BID else -top_key[s, i]
                out_px[s, m, i] = px / PRICE_SCALE
            else:
                out_px[s, m, i] = np.nan
            out_sz[s, m, i] = top_sz[s, i]
            out_ct[s, m, i] = top_ct[s, i]


@numba.njit(cache=True, inline="always")
def _record_depth(a, side_byte, px, lv_key, n_lv, levels):
    """The level of a record's price on its resting side (a trade's side is the aggressor, so the
    resting side is the other one); 0 beyond the top ``levels`` or without a side or price."""
    s = _side_index(side_byte)
    if a == ACTION_TRADE and s >= 0:
        s = 1 - s
    depth = 0
    if s >= 0 and px != UNDEF_PRICE:
        key = px if s == _BID else -px
        nl = n_lv[s]
        i = _lower_bound(lv_key[s], nl, key)
        better = nl - i  # levels with a larger key: strictly better prices
        if i < nl and lv_key[s, i] == key:
            better -= 1
        if better < levels:
            depth = better
    return depth


@numba.njit(cache=True)
def _final_counters(counters, n, m, n_live, lv_key, lv_sz, lv_ct, n_lv):
    """The counters of a finished run: records, states, live orders and the full-depth totals."""
    counters[_C_EVENTS] = n
    counters[_C_STATES] = m
    counters[_C_LIVE] = n_live
    counters[_C_BID_LEVELS] = n_lv[_BID]
    counters[_C_ASK_LEVELS] = n_lv[_ASK]
    for j in range(n_lv[_BID]):
        counters[_C_BID_ORDERS] += lv_ct[_BID, j]
        counters[_C_BID_SIZE] += lv_sz[_BID, j]
    for j in range(n_lv[_ASK]):
        counters[_C_ASK_ORDERS] += lv_ct[_ASK, j]
        counters[_C_ASK_SIZE] += lv_sz[_ASK, j]


@numba.njit(cache=True)
def _rebuild_kernel(
    order_id, price_raw, size, action, side, flags,  # [n] the records' columns
    levels, n_out,  # the states' depth and a bound on their number
    t_id, t_state, t_key, t_sz, t_side,  # the order table
    lv_key, lv_sz, lv_ct, n_lv, top_key, top_sz, top_ct, scalars,  # the levels, the last state, scalars
):  # fmt: skip
    """One instrument's MBO records -> emitted states (see the module docstring), resumable.

    The book before the records is the state passed in (:class:`BookState`: the order table ``t_*``
    (id, slot state, level key, size, side), the levels ``lv_*`` (key, size, count ``[2, cap]``)
    with their counts ``n_lv``, the last emitted top levels ``top_*`` (``[2, levels]``) and
    ``scalars`` = [table bits, live orders, used slots, in snapshot]); ``n_lv``, ``top_*`` and
    ``scalars`` are updated in place, and the tables, which may be reallocated, are returned (each
    array its own argument: numba passes them borrowed, with no reference counts per record).
    Feeding records in chunks gives the states of feeding them at once, bit for bit: the loop is
    the same.

    Returns ``(src[m], depth[m], bid_px, ask_px, bid_sz, ask_sz, bid_ct, ask_ct, counters, table,
    lv)``, the book arrays ``[m, levels]`` in BookArrays dtypes, ``src`` the index of each state's
    F_LAST record. ``n_out`` must be at least the number of F_LAST records.
    """
    n = order_id.shape[0]
    counters = np.zeros(len(_COUNTERS), np.int64)
    bits, n_live, n_used = scalars[0], scalars[1], scalars[2]  # n_used: live + deleted slots
    shift = np.uint64(64 - bits)  # Fibonacci hash: the top ``bits`` bits of oid * _FIB
    in_snapshot = scalars[3] != 0  # the previous record carried F_SNAPSHOT
    # Emitted states, [side, row, level], one row per F_LAST at most. np.empty only reserves the
    # pages; the rows never written (events that left the top unchanged) are never touched, so
    # resident memory is that of the states emitted (growing them by doubling costs the copies and
    # slower code for arrays reassigned inside the loop: 1.8x slower on ESH4).
    src = np.empty(n_out, np.int64)
    depth = np.zeros(n_out, np.uint8)
    out_px = np.empty((2, n_out, levels), np.float64)  # NaN where the level is empty
    out_sz = np.empty((2, n_out, levels), np.int64)
    out_ct = np.empty((2, n_out, levels), np.int64)
    m = 0
    for r in range(n):
        a = action[r]
        if in_snapshot or a == ACTION_CLEAR or flags[r] & F_SNAPSHOT:  # else nothing to do
            in_snapshot, n_live, n_used = _begin_record(
                a, flags[r], in_snapshot, n_live, n_used, counters, t_state, n_lv
            )
        # A record adds at most one order and one level per side: make room first. The order table
        # keeps live + deleted slots under half its size: it doubles when live orders fill a
        # quarter, else it is rehashed in place (dropping tombstones).
        if 2 * (n_used + 1) > t_id.shape[0]:
            if 4 * (n_live + 1) > t_id.shape[0]:
                bits += 1
                shift = np.uint64(64 - bits)
            t_id, t_state, t_key, t_sz, t_side = _rehash(t_id, t_state, t_key, t_sz, t_side, 1 << bits, shift)
            n_used = n_live
        if max(n_lv[0], n_lv[1]) + 1 >= lv_key.shape[1]:
            cap = 2 * lv_key.shape[1]
            lv_key = _grow_levels(lv_key, cap)
            lv_sz = _grow_levels(lv_sz, cap)
            lv_ct = _grow_levels(lv_ct, cap)
        if a == ACTION_ADD or a == ACTION_MODIFY:
            slot = _find(t_id, t_state, order_id[r], shift)
            if slot < 0 and a == ACTION_MODIFY:
                counters[_C_UNKNOWN_MODIFIES] += 1  # unknown id: applied as an add
            elif slot >= 0 and a == ACTION_ADD:
                counters[_C_DUPLICATE_ADDS] += 1  # same id again: replaces the old order
            s, px, sz = _side_index(side[r]), price_raw[r], size[r]
            if slot < 0:
                n_live, n_used = _new_order(
                    order_id[r], s, px, sz, -slot - 1, t_id, t_state, t_key, t_sz, t_side,
                    lv_key, lv_sz, lv_ct, n_lv, n_live, n_used, counters,
                )  # fmt: skip
            else:
                n_live = _change_order(
                    slot, s, px, sz, t_state, t_key, t_sz, t_side,
                    lv_key, lv_sz, lv_ct, n_lv, n_live, counters,
                )  # fmt: skip
        elif a == ACTION_CANCEL:
            slot = max(_find(t_id, t_state, order_id[r], shift), -1)
            n_live = _cancel(
                slot, size[r], t_state, t_key, t_sz, t_side, lv_key, lv_sz, lv_ct, n_lv, n_live, counters
            )
        # T, F, N (and any other action) leave the book unchanged; R was applied above.
        if flags[r] & F_LAST and _top_changed(lv_key, lv_sz, lv_ct, n_lv, top_key, top_sz, top_ct, levels):
            src[m] = r  # the end of an event that changed the top levels: emit the state
            _write_state(top_key, top_sz, top_ct, out_px, out_sz, out_ct, m, levels)
            depth[m] = _record_depth(a, side[r], price_raw[r], lv_key, n_lv, levels)
            m += 1
    scalars[0], scalars[1], scalars[2], scalars[3] = bits, n_live, n_used, in_snapshot
    _final_counters(counters, n, m, n_live, lv_key, lv_sz, lv_ct, n_lv)
    return (
        src[:m], depth[:m], out_px[_BID, :m], out_px[_ASK, :m], out_sz[_BID, :m], out_sz[_ASK, :m],
        out_ct[_BID, :m], out_ct[_ASK, :m], counters,
        (t_id, t_state, t_key, t_sz, t_side), (lv_key, lv_sz, lv_ct),
    )  # fmt: skip


class BookState:
    """One instrument's book between two chunks of its MBO records: the state :func:`_rebuild_kernel`
    takes and leaves (the empty book to start), so a stream can be rebuilt as it arrives with the
    batch builder's own loop (``rebuild_book(chunk, states=...)``)."""

    def __init__(self, levels: int) -> None:
        bits = 10
        self.table = (
            np.empty(1 << bits, np.uint64),  # order id
            np.zeros(1 << bits, np.uint8),  # slot state: _EMPTY
            np.empty(1 << bits, np.int64),  # level key
            np.empty(1 << bits, np.int64),  # size
            np.empty(1 << bits, np.int64),  # side index
        )
        self.levels = tuple(np.empty((2, _INITIAL_CAPACITY), np.int64) for _ in range(3))  # key, size, count
        self.n_lv = np.zeros(2, np.int64)
        self.top = tuple(np.zeros((2, levels), np.int64) for _ in range(3))  # the empty book
        self.scalars = np.array([bits, 0, 0, 0], np.int64)  # bits, live, used, in snapshot

    def run(self, columns: tuple[np.ndarray, ...], levels: int, n_out: int) -> tuple[np.ndarray, ...]:
        """The kernel over ``columns`` from this state, which it leaves after them; the states' arrays."""
        *out, self.table, self.levels = _rebuild_kernel(
            *columns, levels, n_out, *self.table, *self.levels, self.n_lv, *self.top, self.scalars
        )
        return tuple(out)


# --- public API -------------------------------------------------------------------------------


def rebuild_book(
    mbo: MboArrays,
    levels: int = 10,
    where: str = "the MBO records",
    states: dict[int, BookState] | None = None,
) -> BookRebuild:
    """Replay MBO records into ``levels``-deep book states (one per changed end of event).

    Records of several instruments are rebuilt one book per ``instrument_id`` and the states are
    merged back in input order. See the module docstring for the exact semantics. Records out of
    time order within an instrument are refused (:class:`~foxhunt.errors.NonMonotonicTimestampError`
    naming ``where``): replayed out of order they build another book, and sorting cannot restore
    the order of events that share a timestamp.

    ``states`` (instrument -> :class:`BookState`) resumes each instrument's book where an earlier
    call left it and is updated: the records of a stream fed in chunks give the states of the whole
    stream at once (``foxhunt serve``). Without it every book starts empty. The counters then count
    the chunk's records and states; the totals are those of the book after it.

    >>> _, mbo = read_dbn("esh4.mbo.dbn.zst", expect=Schema.MBO)  # doctest: +SKIP
    >>> rebuild_book(mbo).book.bid_px[:, 0]  # doctest: +SKIP
    """
    if not 1 <= levels <= 255:
        raise ValueError(f"levels must be in 1..255 (depth is a uint8), got {levels}")
    check_monotonic(where, np.asarray(mbo.ts_event), np.asarray(mbo.instrument_id))
    # Exact dtypes, so the cached kernel compiles once.
    columns = (
        np.ascontiguousarray(mbo.order_id, dtype=np.uint64),
        np.ascontiguousarray(mbo.price_raw, dtype=np.int64),
        np.ascontiguousarray(mbo.size, dtype=np.int64),
        np.ascontiguousarray(mbo.action, dtype=np.uint8),
        np.ascontiguousarray(mbo.side, dtype=np.uint8),
        np.ascontiguousarray(mbo.flags, dtype=np.uint8),
    )
    flags = columns[-1]
    instrument_id = np.asarray(mbo.instrument_id)
    instruments = np.unique(instrument_id)

    counters = np.zeros(len(_COUNTERS), np.int64)
    parts: list[tuple[np.ndarray, ...]] = []
    for iid in instruments:  # one independent book per instrument
        if len(instruments) == 1:
            rows, cols = None, columns
        else:
            rows = np.flatnonzero(instrument_id == iid)
            cols = tuple(c[rows] for c in columns)
        n_last = int(np.count_nonzero(cols[-1] & F_LAST))  # bound on the states emitted
        state = BookState(levels) if states is None else states.setdefault(int(iid), BookState(levels))
        src, *arrays, c = state.run(cols, levels, n_last)
        parts.append((src if rows is None else rows[src], *arrays))
        counters += c

    if not parts:  # no records at all
        src = np.zeros(0, np.int64)
        depth = np.zeros(0, np.uint8)
        bid_px = ask_px = np.full((0, levels), np.nan)
        bid_sz = ask_sz = bid_ct = ask_ct = np.zeros((0, levels), np.int64)
    elif len(parts) == 1:
        src, depth, bid_px, ask_px, bid_sz, ask_sz, bid_ct, ask_ct = parts[0]
    else:  # merge the instruments' states back into input order
        merged = [np.concatenate(column) for column in zip(*parts, strict=True)]
        order = np.argsort(merged[0], kind="stable")
        src, depth, bid_px, ask_px, bid_sz, ask_sz, bid_ct, ask_ct = (a[order] for a in merged)

    book = BookArrays(
        ts_event=np.asarray(mbo.ts_event).astype(np.int64, copy=False)[src],
        ts_recv=np.asarray(mbo.ts_recv).astype(np.int64, copy=False)[src],
        instrument_id=instrument_id.astype(np.uint32, copy=False)[src],
        action=columns[3][src],
        side=columns[4][src],
        flags=flags[src],
        price=np.asarray(mbo.price).astype(np.float64, copy=False)[src],
        size=columns[2][src],
        depth=depth,
        sequence=np.asarray(mbo.sequence).astype(np.uint32, copy=False)[src],
        bid_px=bid_px,
        ask_px=ask_px,
        bid_sz=bid_sz,
        ask_sz=ask_sz,
        bid_ct=bid_ct,
        ask_ct=ask_ct,
    )
    fields = {name: int(counters[i]) for i, name in enumerate(_COUNTERS)}
    return BookRebuild(book=book, n_crossed=int(book.crossed().sum()), **fields)
