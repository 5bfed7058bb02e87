"""The environment transition as one Triton kernel: one episode per program lane (:mod:`foxhunt.env.fused`).

Imported only where Triton is (PyTorch's CUDA builds ship it; the CPU install and CI have none):
:func:`foxhunt.env.fused.available` says whether it is. The kernel is
:meth:`foxhunt.env.core.TradingEnv.transition` and :meth:`~foxhunt.env.core.TradingEnv.observe`
spelled out per episode, each expression in the eager path's operand order, so that in float64
(and float32) every rounding is the eager path's rounding (the exceptions: module docstring of
:mod:`foxhunt.env.fused`). The comments name the eager function each block mirrors.

Conventions: ``F`` is the state's float dtype; every float constant of the config comes from the
``[C]`` constants tensor in that dtype (:func:`foxhunt.env.fused.constants`: rounded to ``F`` the way
torch rounds a Python scalar against an ``F`` tensor); divisions and square roots are the correctly
rounded ones in both dtypes (``tl.div_rn``, ``tl.sqrt_rn`` in float32: Triton's default float32
division and square root are approximate); the launch turns off multiply-add contraction
(``enable_fp_fusion=False``: eager PyTorch rounds every product).
"""

from __future__ import annotations

import triton
import triton.language as tl

# Indices into the constants tensor (foxhunt.env.fused.constants builds it in this order).
C_CONV_MIN = tl.constexpr(0)
C_CONV_MAX = tl.constexpr(1)
C_TINY = tl.constexpr(2)
C_KELLY_FRACTION = tl.constexpr(3)
C_MAX_POS = tl.constexpr(4)
C_KELLY_FLOOR = tl.constexpr(5)
C_KELLY_WEIGHT = tl.constexpr(6)
C_KELLY_LIMIT = tl.constexpr(7)
C_EFF_MIN = tl.constexpr(8)
C_SLIP_PER = tl.constexpr(9)
C_SLIP_IMM = tl.constexpr(10)
C_TICK = tl.constexpr(11)
C_FEE = tl.constexpr(12)
C_POINT = tl.constexpr(13)
C_TOL = tl.constexpr(14)
C_PROFIT_MULT = tl.constexpr(15)
C_STOP_MULT = tl.constexpr(16)
C_TRAIL_MULT = tl.constexpr(17)
C_FLOOR = tl.constexpr(18)
C_PNL_DIV = tl.constexpr(19)
C_ALPHA = tl.constexpr(20)
C_THRESH = tl.constexpr(21)
C_ENTRY = tl.constexpr(22)
C_EXIT = tl.constexpr(23)
C_DRAWDOWN = tl.constexpr(24)
C_NEG_REGIME = tl.constexpr(25)
C_REGIME = tl.constexpr(26)
C_TAIL_SHARE = tl.constexpr(27)
C_TAIL_ROUND = tl.constexpr(28)
C_BUDGET = tl.constexpr(29)
C_CVAR_FLOOR = tl.constexpr(30)
C_CVAR_WEIGHT = tl.constexpr(31)
C_CVAR_MIN_OBS = tl.constexpr(32)
C_MIN_VOL = tl.constexpr(33)
C_HORIZON = tl.constexpr(34)
C_NAN = tl.constexpr(35)
C_INF = tl.constexpr(36)
C_SLOTS = tl.constexpr(37)  # 15 slots x (times, per, clamp): portfolio then plan
C_FRACTIONS = tl.constexpr(82)  # the magnitude fractions
N_CONSTANTS_BEFORE_FRACTIONS = 82

HOLD = tl.constexpr(1)
LONG = tl.constexpr(2)
SHORT = tl.constexpr(0)
FLAT = tl.constexpr(3)
MARKET = tl.constexpr(0)
LIMIT_INSIDE = tl.constexpr(2)
IMMEDIATE = tl.constexpr(2)
PATIENT = tl.constexpr(1)
R_PROFIT = tl.constexpr(1)
R_STOP = tl.constexpr(2)
R_TIMEOUT = tl.constexpr(3)
R_FLOOR = tl.constexpr(4)
R_WINDOW_END = tl.constexpr(5)
R_AGENT_CLOSE = tl.constexpr(6)
R_FLIP = tl.constexpr(7)


@triton.jit
def _div(a, b, F64: tl.constexpr):
    if F64:
        r = a / b
    else:
        r = tl.div_rn(a, b)
    return r


@triton.jit
def _sdiv(a, b, F64: tl.constexpr, RECIP: tl.constexpr):
    """``a / b`` with ``b`` a Python number in the eager step: on CUDA PyTorch multiplies by the
    reciprocal (``1 / b`` rounded in the dtype, ATen's div_true_kernel_cuda), on the CPU it divides."""
    if RECIP:
        r = a * _div(1.0, b, F64)
    else:
        r = _div(a, b, F64)
    return r


@triton.jit
def _sqrt(a, F64: tl.constexpr):
    if F64:
        r = tl.sqrt(a)
    else:
        r = tl.sqrt_rn(a)
    return r


@triton.jit
def _sign(x):
    """torch.sign of a float (no NaN reaches it)."""
    return tl.where(x > 0, 1.0, 0.0).to(x.dtype) - tl.where(x < 0, 1.0, 0.0).to(x.dtype)


@triton.jit
def _finite(x):
    return (x - x) == 0.0


@triton.jit
def _clamp(x, lo, hi):
    """torch.clamp(x, lo, hi): max then min, NaN kept."""
    y = tl.where(x < lo, lo, x)
    return tl.where(y > hi, hi, y)


@triton.jit
def _cmin(x, lo):
    """torch.clamp(x, min=lo)."""
    return tl.where(x < lo, lo, x)


@triton.jit
def _cmax(x, hi):
    """torch.clamp(x, max=hi)."""
    return tl.where(x > hi, hi, x)


@triton.jit
def _tanh64(x):
    """tanh(x) for x >= 0 in float64 (PyTorch's is its libm's; this one within a few ulps): the odd
    series to x**9 below 0.05 (the next term, 8.9e-3 x**11, is under 1e-15 of it there), else
    ``(1 - e) / (1 + e)``, ``e = exp(-2x)`` (no cancellation left to lose digits to)."""
    x2 = x * x
    series = x * (
        1.0
        + x2
        * (
            -0.3333333333333333
            + x2 * (0.13333333333333333 + x2 * (-0.05396825396825397 + x2 * 0.021869488536155203))
        )
    )
    e = tl.exp(-2.0 * x)
    return tl.where(x < 0.05, series, (1.0 - e) / (1.0 + e))


@triton.jit
def _tanh(x, F64: tl.constexpr):
    """:func:`_tanh64` in the state's dtype. Float32 is computed in float64 and rounded once:
    Triton's float32 ``exp`` is the approximate ``ex2``, whose few ulps ``1 - e`` magnifies about
    tenfold near 0.05 (on an H100 the shaped config's float32 reward was off by more than 1e-6
    relative)."""
    if F64:
        r = _tanh64(x)
    else:
        r = _tanh64(x.to(tl.float64)).to(tl.float32)
    return r


@triton.jit
def _bound(t, b):
    """torch.maximum(torch.minimum(t, b), -b)."""
    t = tl.where(t > b, b, t)
    return tl.where(t < -b, -b, t)


@triton.jit
def _round_even(x):
    """torch.round: half to even (exact for |x| < 2**52)."""
    f = tl.floor(x)
    d = x - f
    odd = (f - 2.0 * tl.floor(f * 0.5)) == 1.0
    up = (d > 0.5) | ((d == 0.5) & odd)
    return tl.where(up, f + 1.0, f)


@triton.jit
def _tick_round(price, s, tick, F64: tl.constexpr, RECIP: tl.constexpr):
    """costs.tick_round with s = sign(side) already."""
    rounded = s * tl.ceil(s * _sdiv(price, tick, F64, RECIP) - 1e-6) * tick
    return tl.where(s != 0, rounded, price)


@triton.jit
def _into_range(price, low, high):
    ok = _finite(low) & _finite(high) & (low <= high)
    return tl.where(ok, _cmax(_cmin(price, low), high), price)


@triton.jit
def _market_fill(side_in, size, qb, qa, qk, mid, urgency, low, high, c_ptr, F64: tl.constexpr,
                 RECIP: tl.constexpr):  # fmt: skip
    """costs.market_order_quoted: ``(filled, fill_price, contracts, costs)``; costs = fees + slippage."""
    tick = tl.load(c_ptr + C_TICK)
    s = _sign(side_in)
    touch = tl.where(s > 0, qa, tl.where(s < 0, qb, 0.5 * (qb + qa)))
    n = tl.abs(size)
    extra = _cmin(n - 1.0, 0.0)
    immediate = (urgency == IMMEDIATE).to(n.dtype)
    slip_ticks = tl.load(c_ptr + C_SLIP_PER) * extra + tl.load(c_ptr + C_SLIP_IMM) * immediate
    price = touch + s * (slip_ticks * tick)
    modelled = _into_range(_tick_round(price, s, tick, F64, RECIP), low, high)
    price = tl.where(qk | (s == 0), price, modelled)
    filled = (side_in != 0) & (size != 0)
    return _fill(filled, side_in, size, price, mid, c_ptr)


@triton.jit
def _fill(filled, side, contracts, price, reference, c_ptr):
    """costs._fill: ``(filled, fill_price, signed contracts, fees + slippage)``."""
    s = _sign(side)
    n = tl.where(filled, tl.abs(contracts), 0.0)
    fill_price = tl.where(filled, price, reference)
    slip = s * (fill_price - reference) * n * tl.load(c_ptr + C_POINT)
    fees = tl.load(c_ptr + C_FEE) * tl.abs(n)
    return filled, fill_price, s * n, fees + slip


@triton.jit
def _book(
    t_side, t_entry_row, t_magnitude, t_opened, t_entry_value, t_closed, t_exit_value, t_gross, t_costs,
    t_order_type, t_urgency, t_entry_costs,
    position, contracts, price, costs, row, magnitude, order_type, urgency, close_reason,
    n, mask, F64: tl.constexpr, STAGE: tl.constexpr, LEDGER: tl.constexpr,
    o_closed, o_pnl, o_gross, o_costs, o_side, o_size, o_entry_price, o_exit_price,
    o_entry_row, o_exit_row, o_magnitude, o_reason, o_order_type, o_urgency, o_entry_costs,
    o_fills, o_fill_price, o_fill_costs,
):  # fmt: skip
    """trades.book_fill of one fill (``magnitude, order_type, urgency``: its trades.Entry); stores the
    closed-trade record at slot STAGE; returns the open trade after the fill and ``(ends, pnl, size)``
    of the trade it closed."""
    size = tl.abs(contracts)
    sc = _sign(contracts)
    sp = _sign(position)
    against = (position != 0) & (sc == -sp)
    closing = tl.where(against, tl.minimum(size, tl.abs(position)), 0.0)
    opening = size - closing
    close_costs = _div(costs * closing, _cmin(size, 1.0), F64)
    open_costs = costs - close_costs
    after = position + contracts
    ends = against & (_sign(after) != sp)
    done_closed = t_closed + closing
    done_exit_value = t_exit_value + closing * price
    done_costs = t_costs + close_costs
    pnl = tl.where(ends, t_gross - done_costs, 0.0)
    closed_size = tl.where(ends, t_opened, 0.0)
    slot = n * 3 + STAGE
    tl.store(o_closed + slot, ends, mask=mask)
    tl.store(o_pnl + slot, pnl, mask=mask)
    tl.store(o_size + slot, closed_size, mask=mask)
    if LEDGER:
        reason = tl.where(after != 0, R_FLIP, close_reason)
        tl.store(o_gross + slot, tl.where(ends, t_gross, 0.0), mask=mask)
        tl.store(o_costs + slot, tl.where(ends, done_costs, 0.0), mask=mask)
        tl.store(o_side + slot, tl.where(ends, t_side, 0.0), mask=mask)
        tl.store(
            o_entry_price + slot,
            tl.where(ends, _div(t_entry_value, _cmin(t_opened, 1.0), F64), 0.0),
            mask=mask,
        )
        tl.store(
            o_exit_price + slot,
            tl.where(ends, _div(done_exit_value, _cmin(done_closed, 1.0), F64), 0.0),
            mask=mask,
        )
        tl.store(o_entry_row + slot, tl.where(ends, t_entry_row, -1), mask=mask)
        tl.store(o_exit_row + slot, tl.where(ends, row, -1), mask=mask)
        tl.store(o_magnitude + slot, tl.where(ends, t_magnitude, -1), mask=mask)
        tl.store(o_reason + slot, tl.where(ends, reason, 0), mask=mask)
        tl.store(o_order_type + slot, tl.where(ends, t_order_type, -1), mask=mask)
        tl.store(o_urgency + slot, tl.where(ends, t_urgency, -1), mask=mask)
        tl.store(o_entry_costs + slot, tl.where(ends, t_entry_costs, 0.0), mask=mask)
        tl.store(o_fills + slot, contracts, mask=mask)
        tl.store(o_fill_price + slot, price, mask=mask)
        tl.store(o_fill_costs + slot, costs, mask=mask)
    fresh = (opening > 0) & ((position == 0) | ends)
    keep = ~ends
    side = tl.where(fresh, sc, tl.where(keep, t_side, 0.0))
    entry_row = tl.where(fresh, row, tl.where(keep, t_entry_row, -1))
    mag = tl.where(fresh, magnitude, tl.where(keep, t_magnitude, -1))
    opened = tl.where(keep, t_opened, 0.0) + opening
    entry_value = tl.where(keep, t_entry_value, 0.0) + opening * price
    closed = tl.where(keep, done_closed, 0.0)
    exit_value = tl.where(keep, done_exit_value, 0.0)
    gross = tl.where(keep, t_gross, 0.0)
    new_costs = tl.where(keep, done_costs, 0.0) + open_costs
    kind = tl.where(fresh, order_type, tl.where(keep, t_order_type, -1))
    urg = tl.where(fresh, urgency, tl.where(keep, t_urgency, -1))
    entry_costs = tl.where(keep, t_entry_costs, 0.0) + open_costs
    return (
        side, entry_row, mag, opened, entry_value, closed, exit_value, gross, new_costs,
        kind, urg, entry_costs, ends, pnl, closed_size,
    )  # fmt: skip


@triton.jit
def _tail_sum(ring_ptr, tail_ptr, tcount_ptr, tlast_ptr, n, mask, live, count_old, count, nvalid, slot,
              old, value, k, W: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, BLOCK: tl.constexpr,
              INF):  # fmt: skip
    """Sum of the k smallest of the first ``nvalid`` entries of each ring row (the row with ``value``
    pushed at ``slot``), added in ascending order: sizing.cvar_scale's tail.

    The K smallest of the row are kept between steps (``tail [N, KP]``, with the count and the last
    return they are of): a push inserts the new return (it replaces the largest kept where smaller),
    and only a row whose evicted return was among the kept (or whose kept tail is not of this ring:
    another count or last return, a first step, a reset) is scanned again, in one pass that keeps
    the K smallest seen. Either way the kept multiset is the row's K smallest, so the sum is the
    full scan's. About K / W of the rows are scanned a step. The general path (any K, the tail a
    ``[BLOCK, KP]`` tile, reductions across lanes); :func:`_tail_sum_regs` is the one for K <= 8."""
    cols = tl.arange(0, KP)
    real = cols[None, :] < K
    kept = tl.load(tail_ptr + n[:, None] * KP + cols[None, :], mask=mask[:, None] & real, other=0.0)
    kept = tl.where(real, kept, -INF)
    top = tl.max(kept, axis=1)
    tcount = tl.load(tcount_ptr + n, mask=mask, other=-1)
    tlast = tl.load(tlast_ptr + n, mask=mask, other=0.0)
    last_slot = (count_old + W - 1) % W
    last = tl.load(ring_ptr + n * W + last_slot, mask=mask & (count_old > 0), other=0.0)
    same = (tcount == count_old) & ((count_old == 0) | (last == tlast))
    scan = mask & (~same | (live & (count_old >= W) & (old <= top)))
    at = tl.argmax(kept, axis=1)
    take = (cols[None, :] == at[:, None]) & (live & (value < top))[:, None]
    kept = tl.where(take, value[:, None], kept)
    if tl.max(scan.to(tl.int32), axis=0) > 0:
        tail = tl.where(real, INF, -INF) + tl.zeros([BLOCK, KP], dtype=value.dtype)
        row_base = n.to(tl.int64) * W
        for j0 in range(0, W, 8):  # 8 loads in flight a lane: the scan is not one DRAM latency a return
            for jj in tl.static_range(8):
                j = j0 + jj
                v = tl.load(ring_ptr + row_base + j, mask=scan & (j < nvalid), other=0.0)
                v = tl.where(j == slot, value, v)
                v = tl.where(j < nvalid, v, INF)
                hi = tl.max(tail, axis=1)
                hi_at = tl.argmax(tail, axis=1)
                tail = tl.where((cols[None, :] == hi_at[:, None]) & (v < hi)[:, None], v[:, None], tail)
        kept = tl.where(scan[:, None], tail, kept)
    kept = tl.where(real, kept, INF)
    tl.store(tail_ptr + n[:, None] * KP + cols[None, :], kept, mask=mask[:, None] & real)
    tl.store(tcount_ptr + n, count, mask=mask)
    tl.store(tlast_ptr + n, tl.where(live, value, last), mask=mask & (count > 0))
    total = tl.zeros([BLOCK], dtype=value.dtype)
    for c in tl.static_range(K):
        low = tl.min(kept, axis=1)
        low_at = tl.argmin(kept, axis=1)
        kept = tl.where(cols[None, :] == low_at[:, None], INF, kept)
        total = tl.where(c < k, total + low, total)
    return total


@triton.jit
def _cx(v, t):
    """One compare-exchange of a sorted insertion: ``(the slot's new value, the value carried on)``;
    a NaN never enters (``torch.sort`` puts it last)."""
    lt = v < t
    return tl.where(lt, v, t), tl.where(lt, t, v)


@triton.jit
def _insert(v, t0, t1, t2, t3, t4, t5, t6, t7, K: tl.constexpr):
    """Insert ``v`` into the ascending ``t0 .. t{K-1}``, the largest of the K + 1 dropped."""
    t0, v = _cx(v, t0)
    if K > 1:
        t1, v = _cx(v, t1)
    if K > 2:
        t2, v = _cx(v, t2)
    if K > 3:
        t3, v = _cx(v, t3)
    if K > 4:
        t4, v = _cx(v, t4)
    if K > 5:
        t5, v = _cx(v, t5)
    if K > 6:
        t6, v = _cx(v, t6)
    if K > 7:
        t7, v = _cx(v, t7)
    return t0, t1, t2, t3, t4, t5, t6, t7


@triton.jit
def _kslot(tail_ptr, n, mask, J: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, INF):
    if J < K:
        t = tl.load(tail_ptr + n * KP + J, mask=mask, other=0.0)
    else:
        t = tl.zeros(n.shape, dtype=INF.dtype) + INF
    return t


@triton.jit
def _kstore(tail_ptr, n, mask, t, J: tl.constexpr, K: tl.constexpr, KP: tl.constexpr):
    if J < K:
        tl.store(tail_ptr + n * KP + J, t, mask=mask)


@triton.jit
def _ksum(total, t, k, J: tl.constexpr, K: tl.constexpr):
    if J < K:
        total = tl.where(J < k, total + t, total)
    return total


@triton.jit
def _tail_sum_regs(ring_ptr, tail_ptr, tcount_ptr, tlast_ptr, n, mask, live, count_old, count, nvalid, slot,
                   old, value, k, W: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, INF):  # fmt: skip
    """:func:`_tail_sum` with the kept tail in registers, ascending, ``K <= 8`` (the default 5 of
    100): each lane holds its row's ``K`` smallest as ``K`` values, a return enters by one sorted
    insertion (``K`` compare-exchanges in the lane: no reduction across lanes, no shared memory),
    and the sum adds the first ``k`` as they lie. Kept and stored in ascending order."""
    t0 = _kslot(tail_ptr, n, mask, 0, K, KP, INF)
    t1 = _kslot(tail_ptr, n, mask, 1, K, KP, INF)
    t2 = _kslot(tail_ptr, n, mask, 2, K, KP, INF)
    t3 = _kslot(tail_ptr, n, mask, 3, K, KP, INF)
    t4 = _kslot(tail_ptr, n, mask, 4, K, KP, INF)
    t5 = _kslot(tail_ptr, n, mask, 5, K, KP, INF)
    t6 = _kslot(tail_ptr, n, mask, 6, K, KP, INF)
    t7 = _kslot(tail_ptr, n, mask, 7, K, KP, INF)
    if K == 1:
        top = t0
    elif K == 2:
        top = t1
    elif K == 3:
        top = t2
    elif K == 4:
        top = t3
    elif K == 5:
        top = t4
    elif K == 6:
        top = t5
    elif K == 7:
        top = t6
    else:
        top = t7
    tcount = tl.load(tcount_ptr + n, mask=mask, other=-1)
    tlast = tl.load(tlast_ptr + n, mask=mask, other=0.0)
    last_slot = (count_old + W - 1) % W
    last = tl.load(ring_ptr + n * W + last_slot, mask=mask & (count_old > 0), other=0.0)
    same = (tcount == count_old) & ((count_old == 0) | (last == tlast))
    scan = mask & (~same | (live & (count_old >= W) & (old <= top)))
    entering = live & (value < top)  # the push: the new return among the K smallest
    t0, t1, t2, t3, t4, t5, t6, t7 = _insert(tl.where(live, value, INF), t0, t1, t2, t3, t4, t5, t6, t7, K)
    if tl.max(scan.to(tl.int32), axis=0) > 0:
        s0 = tl.zeros(value.shape, dtype=value.dtype) + INF
        s1 = s0
        s2 = s0
        s3 = s0
        s4 = s0
        s5 = s0
        s6 = s0
        s7 = s0
        row_base = n * W
        for j0 in range(0, W, 8):  # 8 loads in flight a lane: the scan is not one DRAM latency a return
            for jj in tl.static_range(8):
                j = j0 + jj
                v = tl.load(ring_ptr + row_base + j, mask=scan & (j < nvalid), other=0.0)
                v = tl.where(j == slot, value, v)
                v = tl.where(j < nvalid, v, INF)
                s0, s1, s2, s3, s4, s5, s6, s7 = _insert(v, s0, s1, s2, s3, s4, s5, s6, s7, K)
        t0 = tl.where(scan, s0, t0)
        t1 = tl.where(scan, s1, t1)
        t2 = tl.where(scan, s2, t2)
        t3 = tl.where(scan, s3, t3)
        t4 = tl.where(scan, s4, t4)
        t5 = tl.where(scan, s5, t5)
        t6 = tl.where(scan, s6, t6)
        t7 = tl.where(scan, s7, t7)
    changed = mask & (scan | entering)  # an unchanged tail is not written back
    _kstore(tail_ptr, n, changed, t0, 0, K, KP)
    _kstore(tail_ptr, n, changed, t1, 1, K, KP)
    _kstore(tail_ptr, n, changed, t2, 2, K, KP)
    _kstore(tail_ptr, n, changed, t3, 3, K, KP)
    _kstore(tail_ptr, n, changed, t4, 4, K, KP)
    _kstore(tail_ptr, n, changed, t5, 5, K, KP)
    _kstore(tail_ptr, n, changed, t6, 6, K, KP)
    _kstore(tail_ptr, n, changed, t7, 7, K, KP)
    tl.store(tcount_ptr + n, count, mask=mask)
    tl.store(tlast_ptr + n, tl.where(live, value, last), mask=mask & (count > 0))
    total = tl.zeros(value.shape, dtype=value.dtype) + t0
    total = _ksum(total, t1, k, 1, K)
    total = _ksum(total, t2, k, 2, K)
    total = _ksum(total, t3, k, 3, K)
    total = _ksum(total, t4, k, 4, K)
    total = _ksum(total, t5, k, 5, K)
    total = _ksum(total, t6, k, 6, K)
    total = _ksum(total, t7, k, 7, K)
    return total


@triton.jit
def _ld(ptr, n, mask):
    return tl.load(ptr + n, mask=mask)


@triton.jit
def step_kernel(
    # inputs
    actions_ptr, dconv_ptr, mconv_ptr, qvar_ptr, c_ptr,
    mid_ptr, high_ptr, low_ptr, qbid_ptr, qask_ptr, qknown_ptr, volume_ptr, bsize_ptr, asize_ptr,
    vol_ptr, regime_ptr, feat_ptr, aux_ptr, colmap_ptr, log1p_ptr, tail_ptr, tcount_ptr, tlast_ptr,
    # state (Portfolio.tensors() order), read and written in place
    row_ptr, end_ptr, done_ptr,
    a_position, a_equity, a_peak_equity, a_costs_paid, a_hold_time, a_trade_max, a_trade_min,
    a_peak_step, a_time_since_trade, a_n_trades, a_n_wins, a_n_losses, a_sum_win, a_sum_loss,
    o_side_ptr, o_contracts_ptr, o_price_ptr, o_age_ptr, o_urgency_ptr, o_magnitude_ptr, o_queue_ptr,
    o_volume_ptr, o_order_type_ptr,
    p_active, p_direction, p_profit, p_stop, p_best, p_vol,
    k_regime_prev, k_regime_ema, k_regime_steps, k_ring, k_count, k_cvar,
    t_side_ptr, t_entry_row_ptr, t_magnitude_ptr, t_opened_ptr, t_entry_value_ptr, t_closed_ptr,
    t_exit_value_ptr, t_gross_ptr, t_costs_ptr, t_order_type_ptr, t_urgency_ptr, t_entry_costs_ptr,
    h_pnl, h_peak, h_trough, h_hold, h_since_peak, h_regime_entry, h_shifted, h_after_shift,
    # outputs
    r_gross, r_costs, r_net, r_reward, r_written, r_picked, r_direction, r_magnitude, r_reason,
    r_components,
    x_closed, x_pnl, x_gross, x_costs, x_side, x_size, x_entry_price, x_exit_price, x_entry_row,
    x_exit_row, x_magnitude, x_reason, x_order_type, x_urgency, x_entry_costs, x_fills, x_fill_price,
    x_fill_costs, r_limits,
    obs_ptr,
    N, ROWS, LOG1P_LAST,
    W: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, M: tl.constexpr, F: tl.constexpr,
    A: tl.constexpr, OBS_W: tl.constexpr, OBS_CHUNK: tl.constexpr, PORT0: tl.constexpr, PLAN0: tl.constexpr,
    PATIENCE0: tl.constexpr, PATIENCE1: tl.constexpr, PATIENCE2: tl.constexpr,
    HORIZON: tl.constexpr, KELLY_MIN: tl.constexpr, TRAILING: tl.constexpr,
    HAS_VOLUME: tl.constexpr, HAS_SIZES: tl.constexpr, LEDGER: tl.constexpr, OBSERVE: tl.constexpr,
    F64: tl.constexpr, RECIP: tl.constexpr, IDX32: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    if IDX32:  # every offset fits int32 (fused.kernel_arguments checks): 32-bit address arithmetic
        n = pid * BLOCK + tl.arange(0, BLOCK)
    else:
        n = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = n < N
    NAN = tl.load(c_ptr + C_NAN)
    INF = tl.load(c_ptr + C_INF)
    TINY = tl.load(c_ptr + C_TINY)

    # --- the state ------------------------------------------------------------------------
    row = _ld(row_ptr, n, m)
    end = _ld(end_ptr, n, m)
    done = _ld(done_ptr, n, m) != 0
    position = _ld(a_position, n, m)
    equity0 = _ld(a_equity, n, m)
    hold_time = _ld(a_hold_time, n, m)
    plan_active = _ld(p_active, n, m) != 0

    live = ~done
    d_conv = _ld(dconv_ptr, n, m).to(position.dtype)
    m_conv = _ld(mconv_ptr, n, m).to(position.dtype)
    q_var = _ld(qvar_ptr, n, m).to(position.dtype)
    a_dir = tl.load(actions_ptr + n * 4 + 0, mask=m, other=HOLD)
    a_mag = tl.load(actions_ptr + n * 4 + 1, mask=m, other=0)
    a_ord = tl.load(actions_ptr + n * 4 + 2, mask=m, other=0)
    a_urg = tl.load(actions_ptr + n * 4 + 3, mask=m, other=0)

    # --- decide ---------------------------------------------------------------------------
    realised = tl.where(plan_active | ~live, HOLD, a_dir)
    conv = _clamp(d_conv, tl.load(c_ptr + C_CONV_MIN), tl.load(c_ptr + C_CONV_MAX))
    n_wins = _ld(a_n_wins, n, m)
    n_losses = _ld(a_n_losses, n, m)
    n_trades = _ld(a_n_trades, n, m)
    sum_win = _ld(a_sum_win, n, m)
    sum_loss = _ld(a_sum_loss, n, m)
    w = n_wins.to(position.dtype)
    lo = n_losses.to(position.dtype)
    decided = _cmin(w + lo, 1.0)
    p_win = _div(w, decided, F64)
    q_loss = _div(lo, decided, F64)
    avg_win = _div(sum_win, _cmin(w, 1.0), F64)
    avg_loss = _div(tl.abs(sum_loss), _cmin(lo, 1.0), F64)
    q_over_b = tl.where(
        avg_win > 0,
        _div(q_loss * avg_loss, _cmin(avg_win, TINY), F64),
        2.0 * (q_loss > 0).to(position.dtype),
    )
    f_star = _clamp(p_win - q_over_b, -1.0, 1.0)
    safety = tl.where(d_conv < m_conv, m_conv, d_conv)  # torch.maximum (no NaN reaches it)
    kelly_contracts = _div(
        safety * tl.load(c_ptr + C_KELLY_FRACTION) * f_star * equity0, _cmin(avg_loss, TINY), F64
    )
    ratio = tl.where(avg_loss > 0, _sdiv(kelly_contracts, tl.load(c_ptr + C_MAX_POS), F64, RECIP), 1.0)
    raw_kelly = _clamp(ratio, tl.load(c_ptr + C_KELLY_FLOOR), 1.0)
    blended = 1.0 - tl.load(c_ptr + C_KELLY_WEIGHT) * (1.0 - raw_kelly)
    kelly = tl.where(n_trades >= KELLY_MIN, blended, 1.0)
    if M > 1:  # Kelly caps the magnitude (sizing.kelly_cap_by_magnitude)
        limit = kelly * tl.load(c_ptr + C_KELLY_LIMIT)
        allowed = tl.zeros([BLOCK], dtype=tl.int64)
        for i in tl.static_range(M):
            allowed = allowed + (limit >= tl.load(c_ptr + C_FRACTIONS + i)).to(tl.int64)
        cap = tl.maximum(allowed - 1, 0)
        magnitude = tl.minimum(a_mag, cap)
    else:  # one magnitude: nothing smaller to cap at, Kelly scales the effective max position
        magnitude = a_mag
    tl.store(r_picked + n * 4 + 0, tl.where(live, a_dir, -1), mask=m)
    tl.store(r_picked + n * 4 + 1, tl.where(live, a_mag, -1), mask=m)
    tl.store(r_picked + n * 4 + 2, tl.where(live, a_ord, -1), mask=m)
    tl.store(r_picked + n * 4 + 3, tl.where(live, a_urg, -1), mask=m)
    tl.store(r_direction + n, tl.where(live, realised, -1), mask=m)
    tl.store(r_magnitude + n, tl.where(live, magnitude, -1), mask=m)
    var_raw = _div(1.0, 1.0 + _sqrt(_cmin(q_var, 0.0), F64), F64)
    variance = tl.where(var_raw < conv, conv, var_raw)
    cvar0 = _ld(k_cvar, n, m)
    eff_max = tl.load(c_ptr + C_MAX_POS) * cvar0 * conv
    if M == 1:
        eff_max = eff_max * kelly
    eff_max = eff_max * variance  # (several magnitudes: x 1.0, the eager Kelly factor, is exact)
    pos_frac = _div(position, _cmin(eff_max, tl.load(c_ptr + C_EFF_MIN)), F64)
    frac_m = tl.load(c_ptr + C_FRACTIONS + magnitude, mask=m, other=0.0)
    sgn = (realised == LONG).to(position.dtype) - (realised == SHORT).to(position.dtype)
    frac = tl.where(realised == HOLD, pos_frac, sgn * frac_m)
    target = tl.where(realised == HOLD, position, _round_even(frac * eff_max))
    delta = tl.where(live, target - position, 0.0)
    side = _sign(delta)
    market = (a_ord == MARKET) | (realised == FLAT)

    # --- the rest of the state and the rows, loaded after decide (fewer values live there) --
    o_side = _ld(o_side_ptr, n, m)
    o_contracts = _ld(o_contracts_ptr, n, m)
    o_price = _ld(o_price_ptr, n, m)
    o_age = _ld(o_age_ptr, n, m)
    o_urgency = _ld(o_urgency_ptr, n, m)
    o_magnitude = _ld(o_magnitude_ptr, n, m)
    o_queue = _ld(o_queue_ptr, n, m)
    o_volume = _ld(o_volume_ptr, n, m)
    o_order_type = _ld(o_order_type_ptr, n, m)
    before = o_side  # the resting order's side before the step (transition.limit_events)
    t_side = _ld(t_side_ptr, n, m)
    t_entry_row = _ld(t_entry_row_ptr, n, m)
    t_magnitude = _ld(t_magnitude_ptr, n, m)
    t_opened = _ld(t_opened_ptr, n, m)
    t_entry_value = _ld(t_entry_value_ptr, n, m)
    t_closed = _ld(t_closed_ptr, n, m)
    t_exit_value = _ld(t_exit_value_ptr, n, m)
    t_gross = _ld(t_gross_ptr, n, m)
    t_costs = _ld(t_costs_ptr, n, m)
    t_order_type = _ld(t_order_type_ptr, n, m)
    t_urgency = _ld(t_urgency_ptr, n, m)
    t_entry_costs = _ld(t_entry_costs_ptr, n, m)

    # --- the rows (TradingEnv._rows) ------------------------------------------------------
    if IDX32:
        r = row.to(tl.int32)
    else:
        r = row
    r1 = tl.minimum(r + 1, ROWS - 1)
    mid = _ld(mid_ptr, r, m)
    qb = _ld(qbid_ptr, r, m)
    qa = _ld(qask_ptr, r, m)
    qk = _ld(qknown_ptr, r, m) != 0
    low = _ld(low_ptr, r, m)
    high = _ld(high_ptr, r, m)

    # --- execute: the market order at row r, a limit order placed ------------------------
    size = tl.abs(delta)
    f0_filled, f0_price, f0_contracts, f0_costs = _market_fill(
        tl.where(market, side, 0.0), size, qb, qa, qk, mid, a_urg, low, high, c_ptr, F64, RECIP
    )
    tick = tl.load(c_ptr + C_TICK)
    trades = live & (side != 0)
    new = trades & ~market
    # costs.limit_price
    spread_ticks = _round_even(_sdiv(qa - qb, tick, F64, RECIP))
    inside = (a_ord == LIMIT_INSIDE) & (spread_ticks >= 2)
    improve = inside.to(qb.dtype) * tick
    buy = tl.where(a_ord == MARKET, qa, qb + improve)
    sell = tl.where(a_ord == MARKET, qb, qa - improve)
    lprice = tl.where(side > 0, buy, tl.where(side < 0, sell, 0.5 * (qb + qa)))
    keep = qk | (side == 0) | (a_ord == MARKET)
    lprice = tl.where(keep, lprice, _tick_round(lprice, -side, tick, F64, RECIP))
    TOL = tl.load(c_ptr + C_TOL)
    if HAS_SIZES:  # costs.queue_ahead
        bsz = _ld(bsize_ptr, r, m)
        asz = _ld(asize_ptr, r, m)
        qsize = tl.where(side > 0, bsz, asz)
        tol = TOL * tl.abs(lprice)
        new_level = tl.where(side > 0, lprice > qb + tol, lprice < qa - tol)
        ahead = tl.where(new_level, 0.0, qsize)
        ahead = tl.where(qk & (side != 0) & _finite(qsize), ahead, NAN)
    else:
        ahead = lprice * 0.0 + NAN
    o_side = tl.where(new, side, o_side)
    o_side = tl.where(trades & market, 0.0, o_side)
    o_contracts = tl.where(new, size, o_contracts)
    o_price = tl.where(new, lprice, o_price)
    o_age = tl.where(new, 0, o_age)
    o_urgency = tl.where(new, a_urg, o_urgency)
    o_magnitude = tl.where(new, magnitude, o_magnitude)
    o_queue = tl.where(new, ahead, o_queue)
    o_volume = tl.where(new, 0.0, o_volume)
    o_order_type = tl.where(new, a_ord, o_order_type)
    placed_side = o_side
    (t_side, t_entry_row, t_magnitude, t_opened, t_entry_value, t_closed, t_exit_value, t_gross, t_costs,
     t_order_type, t_urgency, t_entry_costs, ends0, pnl0, size0) = _book(
        t_side, t_entry_row, t_magnitude, t_opened, t_entry_value, t_closed, t_exit_value, t_gross, t_costs,
        t_order_type, t_urgency, t_entry_costs,
        position, f0_contracts, f0_price, f0_costs, r, magnitude, a_ord * 0 + MARKET, a_urg, R_AGENT_CLOSE,
        n, m, F64, 0, LEDGER,
        x_closed, x_pnl, x_gross, x_costs, x_side, x_size, x_entry_price, x_exit_price,
        x_entry_row, x_exit_row, x_magnitude, x_reason, x_order_type, x_urgency, x_entry_costs,
        x_fills, x_fill_price, x_fill_costs,
    )  # fmt: skip
    pos0 = position + f0_contracts

    # the next row, read after the market order (fewer values live across it)
    mid1 = _ld(mid_ptr, r1, m)
    low1 = _ld(low_ptr, r1, m)
    high1 = _ld(high_ptr, r1, m)
    if HAS_VOLUME:
        volume1 = _ld(volume_ptr, r1, m)
    else:
        volume1 = mid1 * 0.0 + NAN
    # --- mark_position --------------------------------------------------------------------
    gross = tl.where(live, pos0 * (mid1 - mid) * tl.load(c_ptr + C_POINT), 0.0)
    t_gross = t_gross + gross

    # --- fill_resting ---------------------------------------------------------------------
    resting = tl.where(live, o_side, 0.0)
    rs = _sign(resting)
    tol = TOL * tl.abs(o_price)
    reached = ((rs > 0) & (low1 <= o_price + tol)) | ((rs < 0) & (high1 >= o_price - tol))
    o_volume = o_volume + tl.where(reached, volume1, 0.0)
    buy_through = low1 < o_price - tol
    sell_through = high1 > o_price + tol
    buy_at = tl.abs(low1 - o_price) <= tol
    sell_at = tl.abs(high1 - o_price) <= tol
    queue_known = _finite(o_queue) & (o_queue >= 0) & _finite(o_volume)
    consumed = o_volume >= o_queue + tl.abs(o_contracts)
    at_fills = queue_known & consumed
    lbuy = (rs > 0) & (buy_through | (buy_at & at_fills))
    lsell = (rs < 0) & (sell_through | (sell_at & at_fills))
    lfilled = lbuy | lsell
    lfill_price = tl.where(lfilled, _into_range(o_price, low1, high1), o_price)
    lfilled = lfilled & (o_contracts != 0)
    f1_filled, f1_price, f1_contracts, f1_costs = _fill(
        lfilled, resting, o_contracts, lfill_price, mid1, c_ptr
    )
    (t_side, t_entry_row, t_magnitude, t_opened, t_entry_value, t_closed, t_exit_value, t_gross, t_costs,
     t_order_type, t_urgency, t_entry_costs, ends1, pnl1, size1) = _book(
        t_side, t_entry_row, t_magnitude, t_opened, t_entry_value, t_closed, t_exit_value, t_gross, t_costs,
        t_order_type, t_urgency, t_entry_costs,
        pos0, f1_contracts, f1_price, f1_costs, r1, o_magnitude, o_order_type, o_urgency, R_AGENT_CLOSE,
        n, m, F64, 1, LEDGER,
        x_closed, x_pnl, x_gross, x_costs, x_side, x_size, x_entry_price, x_exit_price,
        x_entry_row, x_exit_row, x_magnitude, x_reason, x_order_type, x_urgency, x_entry_costs,
        x_fills, x_fill_price, x_fill_costs,
    )  # fmt: skip
    pos1 = pos0 + f1_contracts
    o_age = tl.where(o_side != 0, o_age + 1, o_age)
    patience = tl.where(
        o_urgency == PATIENT, PATIENCE1, tl.where(o_urgency == IMMEDIATE, PATIENCE2, PATIENCE0)
    )
    expired = o_age >= patience
    o_side = tl.where(f1_filled | expired, 0.0, o_side)
    rested_side = o_side
    tl.store(o_contracts_ptr + n, o_contracts, mask=m)  # the resting order is final but its side
    tl.store(o_price_ptr + n, o_price, mask=m)
    tl.store(o_age_ptr + n, o_age, mask=m)
    tl.store(o_urgency_ptr + n, o_urgency, mask=m)
    tl.store(o_magnitude_ptr + n, o_magnitude, mask=m)
    tl.store(o_queue_ptr + n, o_queue, mask=m)
    tl.store(o_volume_ptr + n, o_volume, mask=m)
    tl.store(o_order_type_ptr + n, o_order_type, mask=m)

    # the plan, read after the market order and the resting fill (fewer values live across them)
    plan_direction = _ld(p_direction, n, m)
    plan_profit = _ld(p_profit, n, m)
    plan_stop = _ld(p_stop, n, m)
    plan_best = _ld(p_best, n, m)
    plan_vol = _ld(p_vol, n, m)
    # --- open_plan ------------------------------------------------------------------------
    holding = pos1 != 0
    direction = _sign(pos1)
    opened = holding & ((position == 0) | (direction != _sign(position)))
    vol1 = _ld(vol_ptr, r1, m)
    profit = mid1 * (1.0 + direction * tl.load(c_ptr + C_PROFIT_MULT) * vol1)
    stop = mid1 * (1.0 - direction * tl.load(c_ptr + C_STOP_MULT) * vol1)
    plan_active = opened | (plan_active & holding)
    plan_direction = tl.where(opened, direction, plan_direction)
    plan_profit = tl.where(opened, profit, plan_profit)
    plan_stop = tl.where(opened, stop, plan_stop)
    plan_best = tl.where(opened, mid1, plan_best)
    plan_vol = tl.where(opened, vol1, plan_vol)
    hold = tl.where(opened, 0, hold_time + holding.to(tl.int64))

    # --- check_barriers -------------------------------------------------------------------
    checked = plan_active & ~opened
    long = plan_direction > 0
    best = tl.where(
        long, tl.where(plan_best < high1, high1, plan_best), tl.where(plan_best > low1, low1, plan_best)
    )
    plan_best = tl.where(checked, best, plan_best)
    if TRAILING:
        trail = plan_best * (1.0 - plan_direction * tl.load(c_ptr + C_TRAIL_MULT) * plan_vol)
        better = tl.where(long, trail > plan_stop, trail < plan_stop)
        plan_stop = tl.where(checked & better, trail, plan_stop)
    hit_profit = checked & tl.where(long, high1 >= plan_profit, low1 <= plan_profit)
    hit_stop = checked & tl.where(long, low1 <= plan_stop, high1 >= plan_stop)
    timeout = checked & (hold >= HORIZON)
    reason = tl.where(timeout, R_TIMEOUT, 0)
    reason = tl.where(hit_profit, R_PROFIT, reason)
    reason = tl.where(hit_stop, R_STOP, reason).to(tl.int64)

    # --- forced exits, the exit ----------------------------------------------------------
    costs = f0_costs + f1_costs
    equity = equity0 + gross - costs
    floored = live & (equity < tl.load(c_ptr + C_FLOOR))
    reason = tl.where(floored, R_FLOOR, reason)
    last = live & (r1 >= end) & (reason == 0)
    reason = tl.where(last, R_WINDOW_END, reason).to(tl.int64)
    exiting = live & (reason > 0) & (pos1 != 0)
    qb1 = _ld(qbid_ptr, r1, m)
    qa1 = _ld(qask_ptr, r1, m)
    qk1 = _ld(qknown_ptr, r1, m) != 0
    f2_filled, f2_price, f2_contracts, f2_costs = _market_fill(
        tl.where(exiting, -_sign(pos1), 0.0), tl.abs(pos1), qb1, qa1, qk1, mid1, reason * 0,
        low1, high1, c_ptr, F64, RECIP,
    )  # fmt: skip
    no_open = t_magnitude * 0 - 1  # an exit opens nothing
    (t_side, t_entry_row, t_magnitude, t_opened, t_entry_value, t_closed, t_exit_value, t_gross, t_costs,
     t_order_type, t_urgency, t_entry_costs, ends2, pnl2, size2) = _book(
        t_side, t_entry_row, t_magnitude, t_opened, t_entry_value, t_closed, t_exit_value, t_gross, t_costs,
        t_order_type, t_urgency, t_entry_costs,
        pos1, f2_contracts, f2_price, f2_costs, r1, no_open, no_open, no_open, reason,
        n, m, F64, 2, LEDGER,
        x_closed, x_pnl, x_gross, x_costs, x_side, x_size, x_entry_price, x_exit_price,
        x_entry_row, x_exit_row, x_magnitude, x_reason, x_order_type, x_urgency, x_entry_costs,
        x_fills, x_fill_price, x_fill_costs,
    )  # fmt: skip
    after = pos1 + f2_contracts
    plan_active = plan_active & ~exiting & (after != 0)
    o_side = tl.where(floored, 0.0, o_side)

    costs = costs + f2_costs
    net = gross - costs
    any_closed = ends0 | ends1 | ends2
    held_closed = live & (position != 0) & any_closed
    equity = tl.where(live, equity - f2_costs, equity0)
    new_row = tl.where(live, r + 1, r)

    # --- write what is final: each field stored as soon as its value is (fewer values live) --
    tl.store(row_ptr + n, new_row, mask=m)
    tl.store(done_ptr + n, done | floored | (new_row >= end), mask=m)
    tl.store(o_side_ptr + n, o_side, mask=m)
    tl.store(p_active + n, plan_active, mask=m)
    tl.store(p_direction + n, plan_direction, mask=m)
    tl.store(p_profit + n, plan_profit, mask=m)
    tl.store(p_stop + n, plan_stop, mask=m)
    tl.store(p_best + n, plan_best, mask=m)
    tl.store(p_vol + n, plan_vol, mask=m)
    if LEDGER:  # transition.limit_events, LIMIT_EVENTS order
        one = live.to(tl.int64)
        cancelled = ((before != 0) & (side != 0)).to(tl.int64) + (floored & (rested_side != 0)).to(tl.int64)
        tl.store(r_limits + n * 5 + 0, one * ((side != 0) & ~market).to(tl.int64), mask=m)
        tl.store(r_limits + n * 5 + 1, one * (f1_contracts != 0).to(tl.int64), mask=m)
        expired_ev = (placed_side != 0) & (rested_side == 0) & (f1_contracts == 0)
        tl.store(r_limits + n * 5 + 2, one * expired_ev.to(tl.int64), mask=m)
        tl.store(r_limits + n * 5 + 3, one * cancelled, mask=m)
        tl.store(r_limits + n * 5 + 4, one * ((new_row >= end) & (o_side != 0)).to(tl.int64), mask=m)
    tl.store(t_side_ptr + n, t_side, mask=m)
    tl.store(t_entry_row_ptr + n, t_entry_row, mask=m)
    tl.store(t_magnitude_ptr + n, t_magnitude, mask=m)
    tl.store(t_opened_ptr + n, t_opened, mask=m)
    tl.store(t_entry_value_ptr + n, t_entry_value, mask=m)
    tl.store(t_closed_ptr + n, t_closed, mask=m)
    tl.store(t_exit_value_ptr + n, t_exit_value, mask=m)
    tl.store(t_gross_ptr + n, t_gross, mask=m)
    tl.store(t_costs_ptr + n, t_costs, mask=m)
    tl.store(t_order_type_ptr + n, t_order_type, mask=m)
    tl.store(t_urgency_ptr + n, t_urgency, mask=m)
    tl.store(t_entry_costs_ptr + n, t_entry_costs, mask=m)
    tl.store(r_gross + n, tl.where(live, gross, 0.0), mask=m)
    tl.store(r_costs + n, tl.where(live, costs, 0.0), mask=m)
    tl.store(r_net + n, tl.where(live, net, 0.0), mask=m)
    tl.store(r_written + n, live, mask=m)
    tl.store(r_reason + n, tl.where(live, reason, 0), mask=m)

    # --- settle ---------------------------------------------------------------------------
    win0 = ends0 & (pnl0 > 0)
    win1 = ends1 & (pnl1 > 0)
    win2 = ends2 & (pnl2 > 0)
    lost0 = ends0 & (pnl0 < 0)
    lost1 = ends1 & (pnl1 < 0)
    lost2 = ends2 & (pnl2 < 0)
    pc0 = _div(pnl0, _cmin(size0, 1.0), F64)
    pc1 = _div(pnl1, _cmin(size1, 1.0), F64)
    pc2 = _div(pnl2, _cmin(size2, 1.0), F64)
    continuing = (position != 0) & ~any_closed
    trade_net = t_gross - t_costs
    base_max = tl.where(continuing, _ld(a_trade_max, n, m), 0.0)
    base_min = tl.where(continuing, _ld(a_trade_min, n, m), 0.0)
    flat = after == 0
    new_max = tl.where(base_max < trade_net, trade_net, base_max)
    peak_step = tl.where(trade_net >= base_max, hold, tl.where(continuing, _ld(a_peak_step, n, m), 0))
    traded = (f0_contracts != 0) | (f1_contracts != 0) | (f2_contracts != 0)
    new_position = tl.where(live, after, position)
    peak_equity = _ld(a_peak_equity, n, m)
    peak_equity = tl.where(peak_equity < equity, equity, peak_equity)
    costs_paid = _ld(a_costs_paid, n, m) + tl.where(live, costs, 0.0)
    hold_time = tl.where(flat, 0, hold)
    trade_max = tl.where(flat, 0.0, new_max)
    trade_min = tl.where(flat, 0.0, tl.where(base_min > trade_net, trade_net, base_min))
    peak_step = tl.where(flat, 0, peak_step)
    since_trade = tl.where(traded, 0, _ld(a_time_since_trade, n, m) + 1)
    # the Kelly statistics read again (decide's copies are not kept live across the step)
    n_trades = _ld(a_n_trades, n, m) + ends0.to(tl.int64) + ends1.to(tl.int64) + ends2.to(tl.int64)
    n_wins = _ld(a_n_wins, n, m) + win0.to(tl.int64) + win1.to(tl.int64) + win2.to(tl.int64)
    n_losses = _ld(a_n_losses, n, m) + lost0.to(tl.int64) + lost1.to(tl.int64) + lost2.to(tl.int64)
    sum_win = _ld(a_sum_win, n, m) + (
        tl.where(win0, pc0, 0.0) + tl.where(win1, pc1, 0.0) + tl.where(win2, pc2, 0.0)
    )
    sum_loss = _ld(a_sum_loss, n, m) + (
        tl.where(lost0, -pc0, 0.0) + tl.where(lost1, -pc1, 0.0) + tl.where(lost2, -pc2, 0.0)
    )
    tl.store(a_position + n, new_position, mask=m)
    tl.store(a_equity + n, equity, mask=m)
    tl.store(a_peak_equity + n, peak_equity, mask=m)
    tl.store(a_costs_paid + n, costs_paid, mask=m)
    tl.store(a_hold_time + n, hold_time, mask=m)
    tl.store(a_trade_max + n, trade_max, mask=m)
    tl.store(a_trade_min + n, trade_min, mask=m)
    tl.store(a_peak_step + n, peak_step, mask=m)
    tl.store(a_time_since_trade + n, since_trade, mask=m)
    tl.store(a_n_trades + n, n_trades, mask=m)
    tl.store(a_n_wins + n, n_wins, mask=m)
    tl.store(a_n_losses + n, n_losses, mask=m)
    tl.store(a_sum_win + n, sum_win, mask=m)
    tl.store(a_sum_loss + n, sum_loss, mask=m)

    # --- the observation's portfolio and plan slots (TradingEnv.observe of the new state) --
    if OBSERVE:  # observe.portfolio_values then observe.plan_values, scaled (scale_group)
        dt = position.dtype
        mid_new = _ld(mid_ptr, new_row, m)
        unreal = t_gross - t_costs
        drawdown_v = _div(peak_equity - equity, peak_equity, F64)
        since = tl.minimum(since_trade, LOG1P_LAST)
        log_since = tl.load(log1p_ptr + since, mask=m, other=0.0)
        vol_px = _cmin(plan_vol, tl.load(c_ptr + C_MIN_VOL)) * mid_new
        active_f = plan_active.to(dt)
        target_f = tl.load(c_ptr + C_HORIZON)
        left = _clamp(_sdiv(target_f - hold_time.to(dt), target_f, F64, RECIP), 0.0, 1.0)
        _slot(obs_ptr, n, m, OBS_W, PORT0 + 0, new_position, c_ptr, 0, False, F64, RECIP)
        _slot(obs_ptr, n, m, OBS_W, PORT0 + 1, unreal, c_ptr, 1, False, F64, RECIP)
        _slot(obs_ptr, n, m, OBS_W, PORT0 + 2, hold_time.to(dt), c_ptr, 2, False, F64, RECIP)
        _slot(obs_ptr, n, m, OBS_W, PORT0 + 3, trade_max, c_ptr, 3, False, F64, RECIP)
        _slot(obs_ptr, n, m, OBS_W, PORT0 + 4, trade_min, c_ptr, 4, False, F64, RECIP)
        _slot(obs_ptr, n, m, OBS_W, PORT0 + 5, drawdown_v, c_ptr, 5, False, F64, RECIP)
        _slot(obs_ptr, n, m, OBS_W, PORT0 + 6, costs_paid, c_ptr, 6, False, F64, RECIP)
        _slot(obs_ptr, n, m, OBS_W, PORT0 + 7, log_since, c_ptr, 7, False, F64, RECIP)
        _slot(obs_ptr, n, m, OBS_W, PLAN0 + 0, active_f, c_ptr, 8, True, F64, RECIP)
        _slot(obs_ptr, n, m, OBS_W, PLAN0 + 1, plan_direction * active_f, c_ptr, 9, True, F64, RECIP)
        _slot(obs_ptr, n, m, OBS_W, PLAN0 + 2, active_f * target_f, c_ptr, 10, True, F64, RECIP)
        _slot(obs_ptr, n, m, OBS_W, PLAN0 + 3, active_f * left, c_ptr, 11, True, F64, RECIP)
        _slot(
            obs_ptr, n, m, OBS_W, PLAN0 + 4,
            _div(active_f * (plan_profit - mid_new), vol_px, F64) * plan_direction,
            c_ptr, 12, True, F64, RECIP,
        )  # fmt: skip
        _slot(
            obs_ptr, n, m, OBS_W, PLAN0 + 5,
            _div(active_f * (mid_new - plan_stop), vol_px, F64) * plan_direction,
            c_ptr, 13, True, F64, RECIP,
        )  # fmt: skip
        _slot(obs_ptr, n, m, OBS_W, PLAN0 + 6, active_f * plan_vol, c_ptr, 14, True, F64, RECIP)

    # --- pay: the reward and the trade's path ---------------------------------------------
    regime1 = _ld(regime_ptr, r1, m)
    regime_prev = _ld(k_regime_prev, n, m)
    regime_ema0 = _ld(k_regime_ema, n, m)
    regime_steps = _ld(k_regime_steps, n, m)
    rate = _cmin(_div(1.0, regime_steps.to(position.dtype) + 1.0, F64), tl.load(c_ptr + C_ALPHA))
    ema = regime_ema0 + rate * (tl.abs(regime1 - regime_prev) - regime_ema0)
    regime_ema = tl.where(live, ema, regime_ema0)
    tl.store(k_regime_prev + n, tl.where(live, regime1, regime_prev), mask=m)
    tl.store(k_regime_ema + n, regime_ema, mask=m)
    tl.store(k_regime_steps + n, regime_steps + live.to(tl.int64), mask=m)
    path_pnl = _ld(h_pnl, n, m)
    path_peak = _ld(h_peak, n, m)
    path_trough = _ld(h_trough, n, m)
    path_hold = _ld(h_hold, n, m)
    path_since_peak = _ld(h_since_peak, n, m)
    path_regime_entry = _ld(h_regime_entry, n, m)
    path_shifted = _ld(h_shifted, n, m) != 0
    path_after_shift = _ld(h_after_shift, n, m)
    adv = live & (position != 0)  # rewards.advance_trade
    hold_adv = path_hold + 1.0
    pnl_adv = path_pnl + net
    new_peak = pnl_adv > path_peak
    drift = tl.abs(regime1 - path_regime_entry)
    crossed = drift > tl.load(c_ptr + C_THRESH) * regime_ema * _sqrt(hold_adv, F64)
    path_after_shift = tl.where(adv, tl.where(path_shifted, path_after_shift + 1.0, 0.0), path_after_shift)
    path_since_peak = tl.where(adv, tl.where(new_peak, 0.0, path_since_peak + 1.0), path_since_peak)
    path_peak = tl.where(adv, tl.where(path_peak < pnl_adv, pnl_adv, path_peak), path_peak)
    path_trough = tl.where(adv, tl.where(path_trough > pnl_adv, pnl_adv, path_trough), path_trough)
    path_pnl = tl.where(adv, pnl_adv, path_pnl)
    path_hold = tl.where(adv, hold_adv, path_hold)
    path_shifted = tl.where(adv, path_shifted | crossed, path_shifted)
    # rewards.step_reward / shaping_terms
    PNL_DIV = tl.load(c_ptr + C_PNL_DIV)
    c_pnl = _sdiv(net, PNL_DIV, F64, RECIP)
    rr = _sdiv(path_pnl, PNL_DIV, F64, RECIP)
    peak_n = _sdiv(path_peak, PNL_DIV, F64, RECIP)
    trough_n = _sdiv(path_trough, PNL_DIV, F64, RECIP)
    abs_r = tl.abs(rr)
    hold_c = _cmin(path_hold, 1.0)
    mfe = _cmin(peak_n, 0.0)
    mae = _cmin(-trough_n, 0.0)
    excursion = mfe + mae
    quality = tl.where(excursion > 0, _div(mfe - mae, _cmin(excursion, TINY), F64), 0.0)
    C_E = tl.load(c_ptr + C_ENTRY)
    C_X = tl.load(c_ptr + C_EXIT)
    C_D = tl.load(c_ptr + C_DRAWDOWN)
    C_R = tl.load(c_ptr + C_REGIME)
    entry_t = C_E * abs_r * _clamp(quality, -1.0, 1.0)
    late = _clamp(_div(path_since_peak, hold_c, F64), 0.0, 1.0)
    exit_t = C_X * abs_r * (1.0 - 2.0 * late)
    depth = _cmin(-trough_n, 0.0)
    recovered = _cmin(rr, 0.0)
    x_rec = _div(recovered, _cmin(depth, TINY), F64)
    tanh_rec = _tanh(x_rec, F64)
    recovery = tl.where(depth > 0, depth * tanh_rec, 0.0)
    drawdown_t = C_D * recovery
    after_frac = _clamp(_div(path_after_shift, hold_c, F64), 0.0, 1.0)
    regime_t = tl.load(c_ptr + C_NEG_REGIME) * abs_r * after_frac
    entry_t = _bound(entry_t, C_E * abs_r)
    exit_t = _bound(exit_t, C_X * abs_r)
    drawdown_t = _bound(drawdown_t, C_D * abs_r)
    regime_t = _bound(regime_t, C_R * abs_r)
    entry_t = tl.where(held_closed, entry_t, 0.0)
    exit_t = tl.where(held_closed, exit_t, 0.0)
    drawdown_t = tl.where(held_closed, drawdown_t, 0.0)
    regime_t = tl.where(held_closed, regime_t, 0.0)
    reward = c_pnl + entry_t + exit_t + drawdown_t + regime_t
    reward = tl.where(live, reward, 0.0)
    # rewards.open_trade
    new_trade = live & (after != 0) & ((position == 0) | held_closed)
    entry_pnl = tl.where(position == 0, net, 0.0)
    path_pnl = tl.where(new_trade, entry_pnl, path_pnl)
    path_peak = tl.where(new_trade, entry_pnl, path_peak)
    path_trough = tl.where(new_trade, entry_pnl, path_trough)
    path_hold = tl.where(new_trade, 0.0, path_hold)
    path_since_peak = tl.where(new_trade, 0.0, path_since_peak)
    path_regime_entry = tl.where(new_trade, regime1, path_regime_entry)
    path_shifted = path_shifted & ~new_trade
    path_after_shift = tl.where(new_trade, 0.0, path_after_shift)
    tl.store(h_pnl + n, path_pnl, mask=m)
    tl.store(h_peak + n, path_peak, mask=m)
    tl.store(h_trough + n, path_trough, mask=m)
    tl.store(h_hold + n, path_hold, mask=m)
    tl.store(h_since_peak + n, path_since_peak, mask=m)
    tl.store(h_regime_entry + n, path_regime_entry, mask=m)
    tl.store(h_shifted + n, path_shifted, mask=m)
    tl.store(h_after_shift + n, path_after_shift, mask=m)
    tl.store(r_reward + n, reward, mask=m)
    tl.store(r_components + n * 5 + 0, tl.where(live, c_pnl, 0.0), mask=m)
    tl.store(r_components + n * 5 + 1, tl.where(live, entry_t, 0.0), mask=m)
    tl.store(r_components + n * 5 + 2, tl.where(live, exit_t, 0.0), mask=m)
    tl.store(r_components + n * 5 + 3, tl.where(live, drawdown_t, 0.0), mask=m)
    tl.store(r_components + n * 5 + 4, tl.where(live, regime_t, 0.0), mask=m)

    # --- update_risk: the ring, the CVaR factor -------------------------------------------
    count = _ld(k_count, n, m)
    if IDX32:
        slot = (count % W).to(tl.int32)
    else:
        slot = count % W
    ret = _div(net, _cmin(equity0, 1.0), F64)
    old = tl.load(k_ring + n * W + slot, mask=m, other=0.0)
    value = tl.where(live, ret, old)
    count = count + live.to(tl.int64)
    nvalid = tl.minimum(count, W)
    nf = nvalid.to(position.dtype)
    k = _cmin(tl.ceil(tl.load(c_ptr + C_TAIL_SHARE) * nf - tl.load(c_ptr + C_TAIL_ROUND)), 1.0)
    if K <= 8:  # the tail in registers (the default: 5 of 100)
        tail_sum = _tail_sum_regs(
            k_ring, tail_ptr, tcount_ptr, tlast_ptr, n, m, live, count - live.to(tl.int64), count, nvalid,
            slot, old, value, k, W, K, KP, INF,
        )  # fmt: skip
    else:
        tail_sum = _tail_sum(
            k_ring, tail_ptr, tcount_ptr, tlast_ptr, n, m, live, count - live.to(tl.int64), count, nvalid,
            slot, old, value, k, W, K, KP, BLOCK, INF,
        )  # fmt: skip
    tl.store(k_ring + n * W + slot, value, mask=m)
    cvar = _div(-tail_sum, k, F64)
    # budget / cvar is Tensor.__rtruediv__: cvar.reciprocal() * budget (on every device)
    raw_cvar = tl.where(cvar > 0, _div(1.0, _cmin(cvar, TINY), F64) * tl.load(c_ptr + C_BUDGET), 1.0)
    blended_cvar = 1.0 - tl.load(c_ptr + C_CVAR_WEIGHT) * (
        1.0 - _clamp(raw_cvar, tl.load(c_ptr + C_CVAR_FLOOR), 1.0)
    )
    cvar_factor = tl.where(nf >= tl.load(c_ptr + C_CVAR_MIN_OBS), blended_cvar, 1.0)
    tl.store(k_count + n, count, mask=m)
    tl.store(k_cvar + n, cvar_factor, mask=m)

    # --- the observation's feature groups and aux (last: nothing else is live by now) -------
    if OBSERVE:
        for c0 in range(0, OBS_W, OBS_CHUNK):  # the row's features and the aux, a few columns at a time
            cols = c0 + tl.arange(0, OBS_CHUNK)
            src = tl.load(colmap_ptr + cols, mask=cols < OBS_W, other=-1)
            is_feat = src >= 0
            is_aux = (src <= -2) & (src > -1000)
            m2 = m[:, None] & (cols[None, :] < OBS_W)
            fv = tl.load(
                feat_ptr + new_row[:, None] * F + src[None, :], mask=m2 & is_feat[None, :], other=0.0
            )
            av = tl.load(aux_ptr + n[:, None] * A + (-2 - src)[None, :], mask=m2 & is_aux[None, :], other=0.0)
            tile = tl.where(is_feat[None, :], fv, tl.where(is_aux[None, :], av, 0.0))
            env_slot = src <= -1000
            tl.store(obs_ptr + n[:, None] * OBS_W + cols[None, :], tile, mask=m2 & ~env_slot[None, :])


@triton.jit
def _slot(obs_ptr, n, m, OBS_W: tl.constexpr, COL, x, c_ptr, S: tl.constexpr, NAN_TO_ZERO: tl.constexpr,
          F64: tl.constexpr, RECIP: tl.constexpr):  # fmt: skip
    """observe.scale_group of one slot: ``clamp(x * times / per, -clamp, clamp)`` into float32 at
    the column the colmap gives (``COL``: -1000 - slot index)."""
    times = tl.load(c_ptr + C_SLOTS + 3 * S)
    per = tl.load(c_ptr + C_SLOTS + 3 * S + 1)
    bound = tl.load(c_ptr + C_SLOTS + 3 * S + 2)
    x = _sdiv(x * times, per, F64, RECIP)
    if NAN_TO_ZERO:
        x = tl.where(x != x, 0.0, x)
    x = _clamp(x, -bound, bound)
    tl.store(obs_ptr + n * OBS_W + COL, x.to(tl.float32), mask=m)
