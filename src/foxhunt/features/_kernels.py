"""Shared numba kernels for feature families: rolling windows and recursions that restart per segment.

Every kernel walks the rows once, in order, and reads row ``t`` and earlier only, so its output on
a prefix of the rows is bit-for-bit the prefix of its output (the causality the families promise).

The kernels take ``pos``, the row's index since the first valid price of its segment (``-1`` before
it; see :func:`segment_log_path`): ``pos == 0`` restarts every window and recursion, so nothing
reaches across a session or contract boundary, and a window of ``w`` rows is full once
``pos >= w - 1``. Rows with ``pos < 0`` get 0.

Running sums drift by rounding; the rolling-sum kernels therefore recompute the window exactly every
``w`` rows and force the sum to exactly 0 when every value in the window is 0 (a flat price path is
the most common window in snapshot data, and its statistics must be exactly "no signal").

Resumable (foxhunt serve): the kernels with memory take their carried state, a small float64 array
``st`` they read at entry and write back at exit (EMA values, running sums and counts, a path's
reference price), and ``start``, the first row to compute: rows before it are history the windows
look back over (``x[t - window]``), already computed in an earlier chunk. A family runs its rows in
chunks with a :class:`Carry` (the states by name and the history tail); the batch is the one-chunk
case, a fresh :class:`Carry` and ``start = 0``, the same loop over the same numbers in the same
order, so a chunked run equals the batch bit for bit (tests/features/test_chunks.py).
"""

from __future__ import annotations

import math

import numba
import numpy as np

import foxhunt.jit  # noqa: F401  (before the kernels: their cache is stamped with the package)

# The fresh states of the kernels below: their values before a batch's first row.
PATH_FRESH = (0.0, 0.0, 0.0, -1.0)  # segment_log_path: started, ref, last, pos
SUM_FRESH = (0.0, 0.0)  # rolling_sum_reset: sum, nonzero
EMA_FRESH = (0.0,)
OLS_FRESH = (0.0, 0.0, 0.0, 0.0)  # rolling_ols_tstat_reset: Σy, Σy², Σjy, moves
RSI_FRESH = (0.0, 0.0)  # mean gain, mean loss
ADX_FRESH = (0.0, 0.0, 0.0, 0.0)  # TR, +DM, -DM sums, ADX
CUSUM_FRESH = (0.0, 0.0)  # S+, S-


class Carry:
    """What a feature family carries from one chunk of rows to the next (module docs): its kernels'
    states by name and the tail of the rows its windows look back over. A fresh one is the batch."""

    def __init__(self) -> None:
        self.states: dict[str, np.ndarray] = {}
        self.tails: dict[str, np.ndarray] = {}
        self.rows = 0  # rows of the chunks so far

    def state(self, key: str, fresh: tuple[float, ...]) -> np.ndarray:
        """The carried state ``key`` (a float64 array the kernel updates in place)."""
        st = self.states.get(key)
        if st is None:
            st = self.states[key] = np.array(fresh, np.float64)
        return st

    def record(self, key: str, fresh: np.ndarray) -> np.void:
        """The carried record state ``key`` (a structured scalar the kernel updates field by field);
        ``fresh``: a one-element structured array of its values before any row."""
        st = self.states.get(key)
        if st is None:
            st = self.states[key] = fresh.copy()
        return st[0]

    def ints(self, key: str, fresh: tuple[int, ...]) -> np.ndarray:
        """An int64 state (nanosecond times, which a float64 cannot hold exactly)."""
        st = self.states.get(key)
        if st is None:
            st = self.states[key] = np.array(fresh, np.int64)
        return st

    def history(self, name: str) -> int:
        """Rows of the history of ``name`` before the current chunk (0 for the batch)."""
        return len(self.tails.get(name, ()))

    def extend(self, name: str, new: np.ndarray, keep: int) -> np.ndarray:
        """The history of ``name`` followed by ``new`` (the chunk's rows); the last ``keep`` rows of
        it are kept as the next chunk's history."""
        tail = self.tails.get(name)
        full = new if tail is None or not len(tail) else np.concatenate([tail, new])
        self.tails[name] = full[max(len(full) - keep, 0) :].copy()
        return full


@numba.njit(cache=True)
def segment_log_path(
    open_: np.ndarray,
    high: np.ndarray,
    low: np.ndarray,
    close: np.ndarray,
    segment_start: np.ndarray,
    st: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Log price path relative to the segment's first valid close, with missing prices carried.

    Returns ``(lo, lh, ll, lc, pos)``, each ``[n]``: ``lc[t] = ln(close[t]) - ln(close[s])`` where
    ``s`` is the first row of the segment with a finite positive close; a missing close (NaN, <= 0)
    carries the previous one (a zero return). ``lh``/``ll`` are the log high/low, falling back to
    ``lc`` when missing and widened to contain ``lc``; ``lo`` is the log open, falling back to the
    previous row's ``lc`` (``lc`` itself at ``pos == 0``). ``pos[t]`` counts rows since ``s``
    (``-1`` before ``s``, where all outputs are 0). ``st``: the carried (started, ref, last, pos)
    (:data:`PATH_FRESH`), so a chunk continues the path of the rows before it.
    """
    n = len(close)
    lo = np.zeros(n)
    lh = np.zeros(n)
    ll = np.zeros(n)
    lc = np.zeros(n)
    pos = np.full(n, -1, np.int64)
    started = st[0] != 0.0
    ref = st[1]
    last = st[2]
    p = np.int64(st[3])
    for t in range(n):
        if segment_start[t]:
            started = False
            p = -1
        c = close[t]
        ok = math.isfinite(c) and c > 0.0
        if not started:
            if not ok:
                continue
            started = True
            ref = math.log(c)
            last = 0.0
        prev = last
        p += 1
        if ok:
            last = math.log(c) - ref
        pos[t] = p
        lc[t] = last
        o = open_[t]
        lo[t] = math.log(o) - ref if (math.isfinite(o) and o > 0.0) else (last if p == 0 else prev)
        h = high[t]
        hv = math.log(h) - ref if (math.isfinite(h) and h > 0.0) else last
        lh[t] = max(hv, last)
        lw = low[t]
        lv = math.log(lw) - ref if (math.isfinite(lw) and lw > 0.0) else last
        ll[t] = min(lv, last)
    st[0] = 1.0 if started else 0.0
    st[1] = ref
    st[2] = last
    st[3] = p
    return lo, lh, ll, lc, pos


@numba.njit(cache=True)
def segment_diff(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """``x[t] - x[t-1]`` inside a segment; 0 at ``pos <= 0`` (the log return when ``x = lc``)."""
    n = len(x)
    out = np.zeros(n)
    for t in range(1, n):
        if pos[t] > 0:
            out[t] = x[t] - x[t - 1]
    return out


@numba.njit(cache=True)
def rolling_sum_reset(
    x: np.ndarray, pos: np.ndarray, window: int, start: int, st: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sum and nonzero count of ``x`` over the last ``window`` rows of the segment (fewer at its start).

    Returns ``(sum, nonzero)``; ``sum`` is exactly 0 when ``nonzero`` is 0. Callers decide when the
    window is full (``pos >= window - 1``). Rows from ``start`` (``window`` rows of history before
    it); ``st``: the carried (sum, nonzero).
    """
    n = len(x)
    out = np.zeros(n)
    cnt = np.zeros(n, np.int64)
    s = st[0]
    nz = np.int64(st[1])
    for t in range(start, n):
        p = pos[t]
        if p < 0:
            continue
        v = x[t]
        if p == 0:
            s = 0.0
            nz = 0
        s += v
        nz += v != 0.0
        if p >= window:
            u = x[t - window]
            s -= u
            nz -= u != 0.0
            if p % window == 0:  # exact recompute: bounded rounding drift
                s = 0.0
                for j in range(t - window + 1, t + 1):
                    s += x[j]
        if nz == 0:
            s = 0.0
        out[t] = s
        cnt[t] = nz
    st[0] = s
    st[1] = nz
    return out, cnt


@numba.njit(cache=True)
def rolling_max_reset(x: np.ndarray, pos: np.ndarray, window: int) -> np.ndarray:
    """Maximum of ``x`` over the last ``window`` rows of the segment (monotonic deque, O(n))."""
    n = len(x)
    out = np.zeros(n)
    dq = np.empty(n, np.int64)
    head = 0
    tail = 0
    for t in range(n):
        p = pos[t]
        if p < 0:
            continue
        if p == 0:
            head = 0
            tail = 0
        v = x[t]
        while tail > head and x[dq[tail - 1]] <= v:
            tail -= 1
        dq[tail] = t
        tail += 1
        if dq[head] <= t - window:
            head += 1
        out[t] = x[dq[head]]
    return out


@numba.njit(cache=True)
def rolling_min_reset(x: np.ndarray, pos: np.ndarray, window: int) -> np.ndarray:
    """Minimum of ``x`` over the last ``window`` rows of the segment: ``-max(-x)``, exact in floats
    (``0.0 - m`` rather than ``-m`` keeps skipped rows at +0.0)."""
    return 0.0 - rolling_max_reset(-x, pos, window)


@numba.njit(cache=True)
def ema_reset(x: np.ndarray, pos: np.ndarray, span: float, start: int, st: np.ndarray) -> np.ndarray:
    """EMA with ``alpha = 2 / (span + 1)``, restarted at ``x`` on each segment's first row; rows from
    ``start``, ``st`` the carried EMA."""
    n = len(x)
    out = np.zeros(n)
    a = 2.0 / (span + 1.0)
    e = st[0]
    for t in range(start, n):
        p = pos[t]
        if p < 0:
            continue
        if p == 0:
            e = x[t]
        else:
            e += a * (x[t] - e)
        out[t] = e
    st[0] = e
    return out


@numba.njit(cache=True)
def rolling_ols_tstat_reset(
    y: np.ndarray, pos: np.ndarray, window: int, tstat_clip: float, start: int, st: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Trailing OLS of ``y`` on the row index over the last ``window`` rows ("trend scanning").

    Returns ``(slope, tstat)`` per row: slope β = Sxy / Sxx per row, t = β / se(β) with
    se² = SSR / ((w - 2) Sxx), clipped to ±``tstat_clip`` (a perfect line gives ±clip). Both are 0
    until the window is full (``pos >= window - 1``) and when ``y`` is constant over the window.
    O(n) running sums of Σy, Σy² and Σ j·y (j = 0..w-1 the index inside the window), recomputed
    exactly every ``window`` rows. Rows from ``start``; ``st``: the carried (Σy, Σy², Σjy, moves).
    """
    n = len(y)
    slope = np.zeros(n)
    tstat = np.zeros(n)
    w = window
    wf = float(w)
    sxx = wf * (wf * wf - 1.0) / 12.0
    xbar = (wf - 1.0) / 2.0
    s = st[0]  # Σ y
    q = st[1]  # Σ y²
    a = st[2]  # Σ j y_j, j = 0 for the oldest row in the window
    moves = np.int64(st[3])  # rows in the window (but its first) whose y differs from the row before
    for t in range(start, n):
        p = pos[t]
        if p < 0:
            continue
        v = y[t]
        if p == 0:
            s = 0.0
            q = 0.0
            a = 0.0
            moves = 0
        if p >= w:
            u = y[t - w]
            a -= s - u  # every kept row's index drops by one; the leaving row had index 0
            s -= u
            q -= u * u
            moves -= y[t - w + 1] != u  # its step leaves the window's interior
        if p >= 1:
            moves += v != y[t - 1]
        j = p if p < w else w - 1
        a += j * v
        s += v
        q += v * v
        if p >= w and p % w == 0:  # exact recompute: bounded rounding drift
            s = 0.0
            q = 0.0
            a = 0.0
            for k in range(w):
                yk = y[t - w + 1 + k]
                s += yk
                q += yk * yk
                a += k * yk
        if p < w - 1 or moves == 0:
            continue
        sxy = a - xbar * s
        syy = q - s * s / wf
        b = sxy / sxx
        ssr = syy - b * sxy
        slope[t] = b
        if w <= 2:
            continue
        if ssr > 0.0:
            tv = b / math.sqrt(ssr / ((wf - 2.0) * sxx))
            tstat[t] = min(max(tv, -tstat_clip), tstat_clip)
        elif b > 0.0:
            tstat[t] = tstat_clip
        elif b < 0.0:
            tstat[t] = -tstat_clip
    st[0] = s
    st[1] = q
    st[2] = a
    st[3] = moves
    return slope, tstat


@numba.njit(cache=True)
def wilder_rsi_reset(r: np.ndarray, pos: np.ndarray, period: int, start: int, st: np.ndarray) -> np.ndarray:
    """Wilder RSI of the changes ``r`` as ``(G - L) / (G + L) = (RSI - 50) / 50`` in [-1, 1].

    G, L: the mean gain and loss of the first ``period`` changes of the segment (rows ``pos``
    1..period), then Wilder-smoothed ``G = (G (period - 1) + gain) / period``. 0 before
    ``pos == period`` and while ``G + L == 0``. Rows from ``start``; ``st``: the carried (G, L).
    """
    n = len(r)
    out = np.zeros(n)
    g = st[0]
    lo = st[1]
    for t in range(start, n):
        p = pos[t]
        if p <= 0:
            g = 0.0
            lo = 0.0
            continue
        v = r[t]
        gain = v if v > 0.0 else 0.0
        loss = -v if v < 0.0 else 0.0
        if p <= period:
            g += gain
            lo += loss
            if p < period:
                continue
            g /= period
            lo /= period
        else:
            g = (g * (period - 1) + gain) / period
            lo = (lo * (period - 1) + loss) / period
        d = g + lo
        if d > 0.0:
            out[t] = (g - lo) / d
    st[0] = g
    st[1] = lo
    return out


@numba.njit(cache=True)
def wilder_adx_reset(
    lh: np.ndarray, ll: np.ndarray, lc: np.ndarray, pos: np.ndarray, period: int, start: int, st: np.ndarray
) -> np.ndarray:
    """Wilder's ADX / 100 in [0, 1] from the (log) high, low, close path, restarted per segment.

    Per row (pos >= 1): TR = max(h - l, |h - c₋₁|, |l - c₋₁|); up = h - h₋₁, down = l₋₁ - l;
    +DM = up if up > down and up > 0, -DM = down if down > up and down > 0. Rows pos 1..n sum TR,
    ±DM; after that X ← X - X/n + x. DI± = DM± / TR, DX = |DI+ - DI-| / (DI+ + DI-) (0 if both 0).
    ADX = mean of the first n DX (rows pos n..2n-1), then ADX ← (ADX (n - 1) + DX) / n. 0 before
    ``pos == 2n - 1``. Rows from ``start`` (one row of history); ``st``: the carried (TR, +DM, -DM, ADX).
    """
    n_rows = len(lc)
    out = np.zeros(n_rows)
    n = period
    tr_s = st[0]
    pdm_s = st[1]
    mdm_s = st[2]
    adx = st[3]
    for t in range(start, n_rows):
        p = pos[t]
        if p <= 0:
            tr_s = 0.0
            pdm_s = 0.0
            mdm_s = 0.0
            adx = 0.0
            continue
        h = lh[t]
        lw = ll[t]
        cp = lc[t - 1]
        tr = max(h - lw, abs(h - cp), abs(lw - cp))
        up = h - lh[t - 1]
        down = ll[t - 1] - lw
        pdm = up if (up > down and up > 0.0) else 0.0
        mdm = down if (down > up and down > 0.0) else 0.0
        if p <= n:
            tr_s += tr
            pdm_s += pdm
            mdm_s += mdm
            if p < n:
                continue
        else:
            tr_s = tr_s - tr_s / n + tr
            pdm_s = pdm_s - pdm_s / n + pdm
            mdm_s = mdm_s - mdm_s / n + mdm
        dx = 0.0
        if tr_s > 0.0:
            pdi = pdm_s / tr_s
            mdi = mdm_s / tr_s
            if pdi + mdi > 0.0:
                dx = abs(pdi - mdi) / (pdi + mdi)
        if p < 2 * n - 1:
            adx += dx
        elif p == 2 * n - 1:
            adx = (adx + dx) / n
            out[t] = adx
        else:
            adx = (adx * (n - 1) + dx) / n
            out[t] = adx
    st[0] = tr_s
    st[1] = pdm_s
    st[2] = mdm_s
    st[3] = adx
    return out


@numba.njit(cache=True)
def capped_cusum_reset(
    z: np.ndarray, pos: np.ndarray, drift: float, cap: float, start: int, st: np.ndarray
) -> np.ndarray:
    """Two-sided CUSUM of ``z`` with capped accumulators, as ``(S+ + S-) / cap`` in [-1, 1].

    S+ ← min(cap, max(0, S+ + z - drift)), S- ← max(-cap, min(0, S- + z + drift)), both 0 at each
    segment start. Rows from ``start``; ``st``: the carried (S+, S-).
    """
    n = len(z)
    out = np.zeros(n)
    sp = st[0]
    sm = st[1]
    for t in range(start, n):
        p = pos[t]
        if p <= 0:
            sp = 0.0
            sm = 0.0
            continue
        v = z[t]
        sp = min(cap, max(0.0, sp + v - drift))
        sm = max(-cap, min(0.0, sm + v + drift))
        out[t] = (sp + sm) / cap
    st[0] = sp
    st[1] = sm
    return out


@numba.njit(cache=True)
def fill_columns(out: np.ndarray, cols: tuple) -> None:
    """``out[:, j] = cols[j]`` for a C-ordered ``out`` ``[n, m]``, in cache-sized row blocks.

    numpy's strided column writes are ~5x slower on wide outputs; ``cols`` is a tuple of ``m``
    float64 ``[n]`` arrays.
    """
    n, m = out.shape
    block = 512
    for s in range(0, n, block):
        e = min(n, s + block)
        for j in range(m):
            c = cols[j]
            for i in range(s, e):
                out[i, j] = c[i]
