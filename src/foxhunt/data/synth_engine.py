"""The numba event loop of the synthetic market (the model is documented in :mod:`.synth`).

One call simulates one session in business time and returns flat arrays: one row per book
update (the MBP-10 state after the event and the event's fields) and, optionally, a table of
the market-by-order records that produce the same book. Prices are integer ticks inside; book
rows are written in price units (``ticks * tick_raw / 1e9``, exactly as DBN ingest converts),
MBO records keep ticks. The caller maps business time to wall-clock time.

Book storage (per side ``s`` = 0 bid, 1 ask; level ``i`` = 0 best): ``LMAX`` contiguous price
levels, ``VIS`` = 10 visible (they evolve) plus ``LMAX - VIS`` hidden reserve levels (static;
they only enter the visible window when the touch moves away). Each level is a FIFO of orders
(``oid``/``osz`` ``[2, LMAX, CAP]``) with its order count ``cnt`` and total size ``qty``.
"""

from __future__ import annotations

import numba
import numpy as np

import foxhunt.jit  # noqa: F401  (before the kernels: their cache is stamped with the package)

BID, ASK = 0, 1
VIS = 10  # visible levels (MBP-10)
LMAX = 12  # levels kept per side: 10 visible + 2 hidden reserve levels
CAP = 256  # orders per level (adds stop at CAP - 1)

# Columns of the int64 MBO record table the kernel fills.
R_ROW, R_OID, R_PX, R_SIZE, R_ACTION, R_SIDE, R_FLAGS = range(7)
N_RCOLS = 7
NO_PRICE = np.iinfo(np.int64).min  # R_PX sentinel: undefined price (the clear record)

F_LAST = 128
F_SNAPSHOT = 32
A_ADD = ord("A")
A_CANCEL = ord("C")
A_MODIFY = ord("M")
A_CLEAR = ord("R")
A_TRADE = ord("T")
S_BID = ord("B")
S_ASK = ord("A")
S_NONE = ord("N")

# Event kinds, in the order their intensities are laid out.
EV_ADD, EV_CANCEL, EV_MODIFY, EV_MARKET, EV_MOVE, EV_GAP_FILL = range(6)

# Carriers of the planted alpha (``signal_kind``; foxhunt.data.config.PlantedSignal, in this order).
SIGNAL_IMBALANCE, SIGNAL_TRADE_FLOW, SIGNAL_MOMENTUM = range(3)


# Explicit signatures: one compiled variant per helper (literal arguments would otherwise
# multiply them) and a shorter cold compile.
_I2 = "int64[:, ::1]"
_I3 = "int64[:, :, ::1]"
_BOOK = f"{_I2}, {_I3}, {_I3}, {_I2}, {_I2}"  # px, oid, osz, cnt, qty


@numba.njit("int64(int64)", cache=True)
def _side_code(s):
    return S_BID if s == BID else S_ASK


@numba.njit("int64(float64, float64, int64)", cache=True)
def _order_size(mu, sd, max_size):
    """Order size in contracts: 1 + floor(exp(N(mu, sd))), at most ``max_size``."""
    v = np.exp(mu + sd * np.random.standard_normal())
    if v >= max_size - 1:
        return max_size
    return 1 + int(v)


@numba.njit(f"int64({_I2}, int64, int64, int64, int64, int64, int64, int64, int64)", cache=True)
def _rec(mbo, k, row, order_id, price, size, action, side, flags):
    """Write MBO record ``k`` (column-major table ``[N_RCOLS, capacity]``); return ``k + 1``."""
    mbo[R_ROW, k] = row
    mbo[R_OID, k] = order_id
    mbo[R_PX, k] = price
    mbo[R_SIZE, k] = size
    mbo[R_ACTION, k] = action
    mbo[R_SIDE, k] = side
    mbo[R_FLAGS, k] = flags
    return k + 1


@numba.njit(f"none({_I3}, {_I3}, {_I2}, {_I2}, int64, int64, int64, int64)", cache=True)
def _append(oid, osz, cnt, qty, s, i, order_id, size):
    j = cnt[s, i]
    oid[s, i, j] = order_id
    osz[s, i, j] = size
    cnt[s, i] = j + 1
    qty[s, i] += size


@numba.njit(f"int64({_I3}, {_I3}, {_I2}, {_I2}, int64, int64, int64)", cache=True)
def _remove_at(oid, osz, cnt, qty, s, i, j):
    """Remove order ``j`` of level ``i`` (later orders keep their queue order); its size."""
    size = osz[s, i, j]
    n = cnt[s, i]
    for t in range(j, n - 1):
        oid[s, i, t] = oid[s, i, t + 1]
        osz[s, i, t] = osz[s, i, t + 1]
    cnt[s, i] = n - 1
    qty[s, i] -= size
    return size


@numba.njit(f"none({_BOOK}, int64, int64, int64)", cache=True)
def _copy_level(px, oid, osz, cnt, qty, s, src, dst):
    n = cnt[s, src]
    px[s, dst] = px[s, src]
    cnt[s, dst] = n
    qty[s, dst] = qty[s, src]
    for t in range(n):
        oid[s, dst, t] = oid[s, src, t]
        osz[s, dst, t] = osz[s, src, t]


@numba.njit(
    f"UniTuple(int64, 2)({_BOOK}, int64, int64, int64, float64, float64, float64, int64, int64, "
    f"{_I2}, int64, int64, int64, boolean)",
    cache=True,
)
def _fill_level(
    px, oid, osz, cnt, qty, s, i, price, n_target, mu, sd, max_size, next_oid, mbo, k, row, flags, emit
):
    """Populate empty level ``i`` at ``price`` with max(1, Poisson(n_target)) new orders."""
    n = max(1, min(CAP // 2, np.random.poisson(n_target)))
    px[s, i] = price
    cnt[s, i] = 0
    qty[s, i] = 0
    for _ in range(n):
        size = _order_size(mu, sd, max_size)
        _append(oid, osz, cnt, qty, s, i, next_oid, size)
        if emit:
            k = _rec(mbo, k, row, next_oid, price, size, A_ADD, _side_code(s), flags)
        next_oid += 1
    return next_oid, k


@numba.njit(
    f"UniTuple(int64, 2)({_BOOK}, int64, float64, float64, float64, int64, int64, {_I2}, int64, "
    "int64, boolean)",
    cache=True,
)
def _shift_in(px, oid, osz, cnt, qty, s, n_target, mu, sd, max_size, next_oid, mbo, k, row, emit):
    """Level 0 of side ``s`` is gone: levels move one step in, a new reserve level appears."""
    for i in range(LMAX - 1):
        _copy_level(px, oid, osz, cnt, qty, s, i + 1, i)
    out = -1 if s == BID else 1  # one tick away from the touch
    return _fill_level(
        px,
        oid,
        osz,
        cnt,
        qty,
        s,
        LMAX - 1,
        px[s, LMAX - 2] + out,
        n_target,
        mu,
        sd,
        max_size,
        next_oid,
        mbo,
        k,
        row,
        0,
        emit,
    )


@numba.njit(f"int64({_BOOK}, int64, int64, {_I2}, int64, int64, boolean)", cache=True)
def _shift_out(px, oid, osz, cnt, qty, s, price, mbo, k, row, emit):
    """Make room for a new best level at ``price``: the farthest level is cancelled."""
    far = LMAX - 1
    if emit:
        for t in range(cnt[s, far]):
            k = _rec(mbo, k, row, oid[s, far, t], px[s, far], osz[s, far, t], A_CANCEL, _side_code(s), 0)
    for i in range(LMAX - 1, 0, -1):
        _copy_level(px, oid, osz, cnt, qty, s, i - 1, i)
    px[s, 0] = price
    cnt[s, 0] = 0
    qty[s, 0] = 0
    return k


@numba.njit(f"int64({_BOOK}, int64, int64, {_I2}, int64, int64, boolean)", cache=True)
def _fill_touch(px, oid, osz, cnt, qty, s, want, mbo, k, row, emit):
    """Execute ``want`` contracts against level 0 of resting side ``s`` in FIFO order.

    Each filled order leaves with a cancel record of its full size, a partially filled one is
    modified to its remaining size (keeping its place). Returns the new record count.
    """
    left = want
    done = 0  # orders filled completely
    n = cnt[s, 0]
    price = px[s, 0]
    code = _side_code(s)
    while left > 0 and done < n:
        size = osz[s, 0, done]
        if size <= left:
            left -= size
            if emit:
                k = _rec(mbo, k, row, oid[s, 0, done], price, size, A_CANCEL, code, 0)
            done += 1
        else:
            osz[s, 0, done] = size - left
            if emit:
                k = _rec(mbo, k, row, oid[s, 0, done], price, size - left, A_MODIFY, code, 0)
            left = 0
    for t in range(done, n):
        oid[s, 0, t - done] = oid[s, 0, t]
        osz[s, 0, t - done] = osz[s, 0, t]
    cnt[s, 0] = n - done
    qty[s, 0] -= want - left
    return k


@numba.njit(f"{_I2}({_I2}, int64)", cache=True)
def _grow(mbo, need):
    """The record table with room for ``need`` records (doubling)."""
    if need <= mbo.shape[1]:
        return mbo
    new = np.empty((N_RCOLS, max(need, 2 * mbo.shape[1])), np.int64)
    # A loop, not ``new[:, : mbo.shape[1]] = mbo``: the slice assignment makes numba compile its
    # broadcast error message (string formatting), 5 s of this kernel's 5.4 s cold compile, paid at
    # import (eager signature) before the job's first line. Same copy: ``mbo`` has N_RCOLS rows.
    for r in range(N_RCOLS):
        for j in range(mbo.shape[1]):
            new[r, j] = mbo[r, j]
    return new


# The market model's parameters as one record (numba reads its fields by name), filled from a
# SynthConfig by foxhunt.data.synth.model_record. Per-regime fields hold [calm, volatile]; the
# symbols are those of the model in :mod:`.synth`.
MODEL = np.dtype(
    [
        ("depth_orders", np.float64, (VIS,)),  # m_i before the regime's depth_mult
        ("level_turnover", np.float64, (VIS,)),  # w_i
        ("size_mu", np.float64),  # order size 1 + floor(exp(N(size_mu, size_sd))) ...
        ("size_sd", np.float64),
        ("max_size", np.int64),  # ... at most max_size contracts
        ("cancel_rate", np.float64),  # mu before the regime's cancel_mult
        ("refill_boost", np.float64),  # kappa
        ("modify_rate", np.float64),  # nu before the regime's cancel_mult
        ("market_rate", np.float64),
        ("move_rate", np.float64),
        ("gap_fill_rate", np.float64),
        ("activity", np.float64, (2,)),  # business-time speed of the regime
        ("move_mult", np.float64, (2,)),
        ("gap_prob", np.float64, (2,)),  # P(a price move leaves a two-tick spread)
        ("cancel_mult", np.float64, (2,)),
        ("market_mult", np.float64, (2,)),
        ("depth_mult", np.float64, (2,)),
        ("switch_prob", np.float64, (2,)),  # P(leaving the regime) per event
        ("alpha", np.float64),  # strength of the planted alpha (0 = none)
        ("horizon", np.int64),  # H: rows of the imbalance carrier's EMA
        ("signal_kind", np.int64),  # SIGNAL_IMBALANCE, SIGNAL_TRADE_FLOW or SIGNAL_MOMENTUM
        ("flow_horizon", np.int64),  # N: market orders of the trade-flow carrier's EMA
        ("momentum_horizon", np.int64),  # K: mid changes of the momentum carrier's EMA
    ]
)


@numba.njit(cache=True)
def _row_arrays(n_rows):
    """The per-row outputs: tau, regime, action, side, price, size, depth, then the visible book
    ``[n_rows, VIS]`` bid_px, ask_px, bid_sz, ask_sz, bid_ct, ask_ct."""
    return (
        np.empty(n_rows, np.float64),
        np.empty(n_rows, np.uint8),
        np.empty(n_rows, np.uint8),
        np.empty(n_rows, np.uint8),
        np.empty(n_rows, np.float64),
        np.empty(n_rows, np.int64),
        np.zeros(n_rows, np.uint8),
        np.empty((n_rows, VIS), np.float64),
        np.empty((n_rows, VIS), np.float64),
        np.empty((n_rows, VIS), np.int64),
        np.empty((n_rows, VIS), np.int64),
        np.empty((n_rows, VIS), np.int64),
        np.empty((n_rows, VIS), np.int64),
    )


@numba.njit(cache=True, inline="always")
def _record_row(
    row, t_now, regime, event, px, cnt, qty, tick_raw, price_scale,
    tau, regime_out, action, side, price, size, depth, bid_px, ask_px, bid_sz, ask_sz, bid_ct, ask_ct,
):  # fmt: skip
    """Write row ``row`` of the :func:`_row_arrays`: its time, regime and event ``(action, side,
    price, size, depth)``, and the visible book after it, prices in price units as DBN ingest
    converts them."""
    ev_action, ev_side, ev_price, ev_size, ev_depth = event
    tau[row] = t_now
    regime_out[row] = regime
    action[row] = ev_action
    side[row] = ev_side
    price[row] = (ev_price * tick_raw) / price_scale
    size[row] = ev_size
    depth[row] = ev_depth
    for i in range(VIS):
        bid_px[row, i] = (px[BID, i] * tick_raw) / price_scale
        ask_px[row, i] = (px[ASK, i] * tick_raw) / price_scale
        bid_sz[row, i] = qty[BID, i]
        ask_sz[row, i] = qty[ASK, i]
        bid_ct[row, i] = cnt[BID, i]
        ask_ct[row, i] = cnt[ASK, i]


@numba.njit(cache=True)
def _open_book(px, oid, osz, cnt, qty, bid0, m, mbo, emit):
    """Row 0, the opening snapshot around best bid ``bid0``: R, then every order with F_SNAPSHOT,
    the asks then the bids, each side from its farthest level (so the best bid comes last).

    Returns ``(next order id, records written, row 0's event)``."""
    k = 0
    next_oid = 1
    if emit:
        k = _rec(mbo, k, 0, 0, NO_PRICE, 0, A_CLEAR, S_NONE, F_SNAPSHOT)
    for s in (ASK, BID):
        for i in range(LMAX - 1, -1, -1):
            level_px = bid0 - i if s == BID else bid0 + 1 + i
            target = m.depth_orders[min(i, VIS - 1)] * m.depth_mult[0]
            next_oid, k = _fill_level(
                px, oid, osz, cnt, qty, s, i, level_px, target,
                m.size_mu, m.size_sd, m.max_size, next_oid, mbo, k, 0, F_SNAPSHOT, emit,
            )  # fmt: skip
    if emit:
        mbo[R_FLAGS, k - 1] |= F_LAST
    event = (A_ADD, S_BID, px[BID, 0], osz[BID, 0, cnt[BID, 0] - 1], 0)  # the last add: the best bid's
    return next_oid, k, event


@numba.njit(cache=True, inline="always")
def _intensities(r_add, r_cancel, r_modify, px, cnt, qty, regime, m):
    """The state's event intensities: lambda^A, lambda^C, lambda^M of each side and visible level
    into ``r_*[2, VIS]``; returns ``(Lambda, lambda^O buy, lambda^O sell, lambda^P)`` (module
    equations of :mod:`.synth`; lambda^G is what remains of Lambda)."""
    mu = m.cancel_rate * m.cancel_mult[regime]
    nu = m.modify_rate * m.cancel_mult[regime]
    # the record's fields as locals: the loop's stores cannot then be taken to change them
    depth_orders, turnover = m.depth_orders, m.level_turnover
    mult, kappa = m.depth_mult[regime], m.refill_boost
    total = 0.0
    for s in range(2):
        for i in range(VIS):
            n = cnt[s, i]
            target = depth_orders[i] * mult
            w = turnover[i]
            # add:    w_i mu m_i (1 + kappa max(0, 1 - n/m_i))   (queue-reactive refill)
            # cancel: w_i mu (n - 1)   (the last order of a level stays: no depletion)
            # modify: nu (n - 1)
            refill = 1.0 + kappa * max(0.0, 1.0 - n / target)
            r_add[s, i] = 0.0 if n >= CAP - 1 else w * mu * target * refill
            r_cancel[s, i] = w * mu * (n - 1)
            r_modify[s, i] = nu * (n - 1)
            total += r_add[s, i] + r_cancel[s, i] + r_modify[s, i]
    spread = px[ASK, 0] - px[BID, 0]
    rm = m.market_rate * m.market_mult[regime]
    r_buy = rm if qty[ASK, 0] > 1 else 0.0  # market orders never empty the touch
    r_sell = rm if qty[BID, 0] > 1 else 0.0
    r_move = m.move_rate * m.move_mult[regime] if spread == 1 else 0.0
    r_gap = m.gap_fill_rate if spread > 1 else 0.0
    total += r_buy + r_sell + r_move + r_gap
    return total, r_buy, r_sell, r_move


@numba.njit(cache=True, inline="always")
def _pick_event(r_add, r_cancel, r_modify, r_buy, r_sell, r_move, total):
    """Draw the next event with probability lambda_e / Lambda: ``(kind, side, level)``; the side of
    a market order is the resting side it fills against (a buy rests on the ask side)."""
    x = np.random.random() * total
    for c in range(2 * VIS):
        s, i = c // VIS, c % VIS
        x -= r_add[s, i]
        if x < 0.0:
            return EV_ADD, s, i
        x -= r_cancel[s, i]
        if x < 0.0:
            return EV_CANCEL, s, i
        x -= r_modify[s, i]
        if x < 0.0:
            return EV_MODIFY, s, i
    x -= r_buy
    if x < 0.0:
        return EV_MARKET, ASK, 0
    x -= r_sell
    if x < 0.0:
        return EV_MARKET, BID, 0
    if r_move > 0.0:
        return EV_MOVE, 0, 0
    return EV_GAP_FILL, 0, 0


@numba.njit(cache=True, inline="always")
def _p_up(m, signal, flow, momentum):
    """P(up) = clip(1/2 + alpha * carrier, 0.02, 0.98) of a move or gap fill: the planted alpha,
    carried by the imbalance EMA ``signal``, the trade-flow EMA ``flow`` or the momentum EMA
    ``momentum``."""
    if m.alpha > 0.0:
        if m.signal_kind == SIGNAL_TRADE_FLOW:
            carrier = flow
        elif m.signal_kind == SIGNAL_MOMENTUM:
            carrier = momentum
        else:
            carrier = signal
        return min(0.98, max(0.02, 0.5 + m.alpha * carrier))
    return 0.5


# --- the events: each applies itself to the book, writes its MBO records and returns
# (next order id, records written, its row's event (action, side, price, size, depth)) ---------


@numba.njit(cache=True, inline="always")
def _add(px, oid, osz, cnt, qty, s, i, m, next_oid, mbo, k, row, emit):
    """A new order joins the back of level ``i`` of side ``s``."""
    size = _order_size(m.size_mu, m.size_sd, m.max_size)
    _append(oid, osz, cnt, qty, s, i, next_oid, size)
    if emit:
        k = _rec(mbo, k, row, next_oid, px[s, i], size, A_ADD, _side_code(s), 0)
    return next_oid + 1, k, (A_ADD, _side_code(s), px[s, i], size, i)


@numba.njit(cache=True, inline="always")
def _cancel(px, oid, osz, cnt, qty, s, i, next_oid, mbo, k, row, emit):
    """A uniformly drawn order of level ``i`` of side ``s`` leaves (never the last: lambda^C)."""
    j = np.random.randint(0, cnt[s, i])
    order_id = oid[s, i, j]
    size = _remove_at(oid, osz, cnt, qty, s, i, j)
    if emit:
        k = _rec(mbo, k, row, order_id, px[s, i], size, A_CANCEL, _side_code(s), 0)
    return next_oid, k, (A_CANCEL, _side_code(s), px[s, i], size, i)


@numba.njit(cache=True, inline="always")
def _modify(px, oid, osz, cnt, qty, s, i, next_oid, mbo, k, row, emit):
    """An order moves one level in or out (never into the spread) and joins the back there."""
    if i == 0:
        t = 1
    elif i == VIS - 1:
        t = VIS - 2
    else:
        t = i + 1 if np.random.random() < 0.5 else i - 1
    if cnt[s, t] >= CAP - 1:
        t = i  # target full (never with sane depths): the order re-joins its own level
    j = np.random.randint(0, cnt[s, i])
    order_id = oid[s, i, j]
    size = _remove_at(oid, osz, cnt, qty, s, i, j)
    _append(oid, osz, cnt, qty, s, t, order_id, size)
    if emit:
        k = _rec(mbo, k, row, order_id, px[s, t], size, A_MODIFY, _side_code(s), 0)
    return next_oid, k, (A_MODIFY, _side_code(s), px[s, t], size, t)


@numba.njit(cache=True, inline="always")
def _market(px, oid, osz, cnt, qty, s, m, next_oid, mbo, k, row, emit):
    """A market order against resting side ``s`` that fills inside the touch queue (at most
    q_0 - 1 contracts, so the touch never empties)."""
    want = min(_order_size(m.size_mu, m.size_sd, m.max_size), qty[s, 0] - 1)
    trade_px = px[s, 0]
    k = _fill_touch(px, oid, osz, cnt, qty, s, want, mbo, k, row, emit)
    agg = _side_code(1 - s)
    if emit:
        k = _rec(mbo, k, row, 0, trade_px, want, A_TRADE, agg, 0)
    return next_oid, k, (A_TRADE, agg, trade_px, want, 0)


@numba.njit(cache=True, inline="always")
def _move(px, oid, osz, cnt, qty, regime, p_up, m, next_oid, mbo, k, row, emit):
    """The latent price moves one tick: an aggressor sweeps the whole touch level of the resting
    side; unless a gap is left (gap_prob), the aggressor's residual and joining quotes form a fresh
    level (Poisson(m_0) orders) at the swept price."""
    up = np.random.random() < p_up
    if px[BID, 0] <= 4 * LMAX:  # keep prices positive on absurd configurations
        up = True
    s = ASK if up else BID  # resting side swept
    a = 1 - s  # aggressor's side of the book
    trade_px = px[s, 0]
    filled = qty[s, 0]
    k = _fill_touch(px, oid, osz, cnt, qty, s, filled, mbo, k, row, emit)
    far = m.depth_orders[VIS - 1] * m.depth_mult[regime]
    next_oid, k = _shift_in(
        px, oid, osz, cnt, qty, s, far, m.size_mu, m.size_sd, m.max_size, next_oid, mbo, k, row, emit
    )
    if np.random.random() >= m.gap_prob[regime]:
        k = _shift_out(px, oid, osz, cnt, qty, a, trade_px, mbo, k, row, emit)
        touch = m.depth_orders[0] * m.depth_mult[regime]
        next_oid, k = _fill_level(
            px, oid, osz, cnt, qty, a, 0, trade_px, touch,
            m.size_mu, m.size_sd, m.max_size, next_oid, mbo, k, row, 0, emit,
        )  # fmt: skip
    agg = _side_code(a)
    if emit:
        k = _rec(mbo, k, row, 0, trade_px, filled, A_TRADE, agg, 0)
    return next_oid, k, (A_TRADE, agg, trade_px, filled, 0)


@numba.njit(cache=True, inline="always")
def _gap_fill(px, oid, osz, cnt, qty, p_up, m, next_oid, mbo, k, row, emit):
    """An order improves a two-tick spread (on the bid side, the mid goes up)."""
    s = BID if np.random.random() < p_up else ASK
    new_px = px[BID, 0] + 1 if s == BID else px[ASK, 0] - 1
    k = _shift_out(px, oid, osz, cnt, qty, s, new_px, mbo, k, row, emit)
    size = _order_size(m.size_mu, m.size_sd, m.max_size)
    _append(oid, osz, cnt, qty, s, 0, next_oid, size)
    if emit:
        k = _rec(mbo, k, row, next_oid, new_px, size, A_ADD, _side_code(s), 0)
    return next_oid + 1, k, (A_ADD, _side_code(s), new_px, size, 0)


# nogil: write_synthetic simulates its sessions on threads at once.
@numba.njit(cache=True, nogil=True)
def simulate_kernel(seed, n_rows, bid0, tick_raw, price_scale, m, emit):
    """Simulate ``n_rows`` book updates of one session of the market ``m`` (a :data:`MODEL` record;
    equations in :mod:`.synth`) opening with best bid ``bid0`` ticks.

    Returns ``(rows, mbo, tau_end)``: the per-row arrays of :func:`_row_arrays` (business time,
    regime and event fields, the visible book after each row, prices in price units,
    ``ticks * tick_raw / price_scale`` as DBN ingest converts them), the MBO record table
    ``[N_RCOLS, m]`` (prices in ticks; ``m`` = 0 without ``emit``), and the business time at
    which the session ends.

    The planted alpha's carrier is the imbalance EMA over ``horizon`` rows (``SIGNAL_IMBALANCE``) or
    the EMA of market-order aggressor signs over ``flow_horizon`` market orders (``SIGNAL_TRADE_FLOW``;
    sweeps are the alpha's outcome, not its carrier, so they do not enter it) or the EMA of the signs
    of the mid's own changes over ``momentum_horizon`` of them (``SIGNAL_MOMENTUM``: the moves and gap
    fills before a move are its carrier). No carrier draws a random number, so a market of one kind is
    the same draw for draw whatever the others would have been.
    """
    np.random.seed(seed)
    rows = _row_arrays(n_rows)
    tau, regime_out, action, side, price, size, depth, bid_px, ask_px, bid_sz, ask_sz, bid_ct, ask_ct = rows
    mbo = np.empty((N_RCOLS, 4 * n_rows + 4 * LMAX * CAP if emit else 0), np.int64)
    px = np.empty((2, LMAX), np.int64)
    oid = np.zeros((2, LMAX, CAP), np.int64)
    osz = np.zeros((2, LMAX, CAP), np.int64)
    cnt = np.zeros((2, LMAX), np.int64)
    qty = np.zeros((2, LMAX), np.int64)
    r_add = np.zeros((2, VIS), np.float64)
    r_cancel = np.zeros((2, VIS), np.float64)
    r_modify = np.zeros((2, VIS), np.float64)
    next_oid, k, event = _open_book(px, oid, osz, cnt, qty, bid0, m, mbo, emit)
    regime = 0
    t_now = 0.0
    total = 1.0
    signal = 0.0  # S: EMA of the level-1 imbalance over the rows so far
    flow = 0.0  # F: EMA of the market orders' aggressor signs so far (0 before the first)
    momentum = 0.0  # M: EMA of the signs of the mid's changes so far (0 before the first)
    row = 0
    while True:
        _record_row(
            row, t_now, regime, event, px, cnt, qty, tick_raw, price_scale,
            tau, regime_out, action, side, price, size, depth, bid_px, ask_px, bid_sz, ask_sz, bid_ct, ask_ct,
        )  # fmt: skip
        # I_t = (q_bid - q_ask) / (q_bid + q_ask); S_t = S_{t-1} + (I_t - S_{t-1}) / H, S_0 = I_0
        imb = (qty[BID, 0] - qty[ASK, 0]) / (qty[BID, 0] + qty[ASK, 0])
        signal = imb if row == 0 else signal + (imb - signal) / m.horizon
        row += 1
        if row == n_rows:
            break
        if np.random.random() < m.switch_prob[regime]:  # the regime: a Markov chain stepped per event
            regime = 1 - regime
        if emit:
            mbo = _grow(mbo, k + 4 * LMAX * CAP)
        k0 = k
        total, r_buy, r_sell, r_move = _intensities(r_add, r_cancel, r_modify, px, cnt, qty, regime, m)
        t_now += np.random.exponential(1.0) / (total * m.activity[regime])  # dtau ~ Exp(Lambda activity_r)
        kind, s, i = _pick_event(r_add, r_cancel, r_modify, r_buy, r_sell, r_move, total)
        p_up = _p_up(m, signal, flow, momentum)
        if kind == EV_ADD:
            next_oid, k, event = _add(px, oid, osz, cnt, qty, s, i, m, next_oid, mbo, k, row, emit)
        elif kind == EV_CANCEL:
            next_oid, k, event = _cancel(px, oid, osz, cnt, qty, s, i, next_oid, mbo, k, row, emit)
        elif kind == EV_MODIFY:
            next_oid, k, event = _modify(px, oid, osz, cnt, qty, s, i, next_oid, mbo, k, row, emit)
        elif kind == EV_MARKET:
            next_oid, k, event = _market(px, oid, osz, cnt, qty, s, m, next_oid, mbo, k, row, emit)
            # F <- F + (sign - F) / N, sign +1 for a buy (it rests on the ask side), -1 for a sell
            flow += ((1.0 if s == ASK else -1.0) - flow) / m.flow_horizon
        elif kind == EV_MOVE:
            next_oid, k, event = _move(px, oid, osz, cnt, qty, regime, p_up, m, next_oid, mbo, k, row, emit)
        else:
            next_oid, k, event = _gap_fill(px, oid, osz, cnt, qty, p_up, m, next_oid, mbo, k, row, emit)
        if kind == EV_MOVE or kind == EV_GAP_FILL:
            # both move the mid, up when the bid side acted (a buyer swept the ask, or a bid improved):
            # M <- M + (sign - M) / K
            momentum += ((1.0 if event[1] == S_BID else -1.0) - momentum) / m.momentum_horizon
        if emit:
            mbo[R_FLAGS, k - 1] |= F_LAST  # the event's last record closes it
        if emit and k == k0:  # cannot happen: every event writes a record
            raise RuntimeError("synthetic event wrote no MBO record")
    t_end = t_now + np.random.exponential(1.0) / (total * m.activity[regime])
    return rows, mbo[:, :k], t_end


@numba.njit(cache=True)
def imbalance_ema(imb, horizon):
    """S_0 = I_0, S_t = S_{t-1} + (I_t - S_{t-1}) / H: the kernel's alpha signal, row by row."""
    out = np.empty(imb.shape[0], np.float64)
    s = 0.0
    for t in range(imb.shape[0]):
        s = imb[t] if t == 0 else s + (imb[t] - s) / horizon
        out[t] = s
    return out


@numba.njit(cache=True)
def trade_flow_ema(sign, is_market, horizon):
    """F_t after row t: F <- F + (sign_t - F) / N on market-order rows (F = 0 before the first):
    the kernel's trade_flow carrier, row by row."""
    out = np.empty(sign.shape[0], np.float64)
    f = 0.0
    for t in range(sign.shape[0]):
        if is_market[t]:
            f += (sign[t] - f) / horizon
        out[t] = f
    return out


@numba.njit(cache=True)
def momentum_ema(mid, horizon):
    """M_t after row t: M <- M + (sign(mid_t - mid_{t-1}) - M) / K on rows whose mid changed (M = 0
    before the first): the kernel's momentum carrier, row by row."""
    out = np.empty(mid.shape[0], np.float64)
    m = 0.0
    for t in range(mid.shape[0]):
        if t > 0 and mid[t] != mid[t - 1]:
            m += ((1.0 if mid[t] > mid[t - 1] else -1.0) - m) / horizon
        out[t] = m
    return out
