"""Per-row returns and volatility of a price path split into segments (sessions and contracts).

The one home of :func:`segment_ids`, :func:`log_returns` and :func:`trailing_volatility`: the labels'
barrier scale (:mod:`foxhunt.validation.labels`), the environment's market (:mod:`foxhunt.env.market`)
and the live service's state (:mod:`foxhunt.serve.state`) all read the same volatility.

* A *segment* is a run of rows of one session and contract, marked by ``segment_start``; nothing
  here spans a segment (a move across the daily halt or a roll is not a move).
* ``vol`` is causal: :func:`trailing_volatility` is the sample standard deviation (ddof 1) of the
  one-row log returns ``log(close[i] / close[i-1])`` over the trailing ``window`` rows ending at
  ``t``, restarting at each segment; NaN until ``min_periods`` returns exist in the segment.
"""

from __future__ import annotations

import numba
import numpy as np

import foxhunt.jit  # noqa: F401  (before the kernels: their cache is stamped with the package)


def segment_ids(segment_start: np.ndarray) -> np.ndarray:
    """Segment number of every row (int64, from 0); row 0 always starts a segment."""
    start = np.asarray(segment_start, dtype=bool).copy()
    if len(start):
        start[0] = True
    return np.cumsum(start, dtype=np.int64) - 1


def row_values(name: str, arr: np.ndarray, n: int) -> np.ndarray:
    """``arr`` as float64, refused unless it holds one value per row (``n``)."""
    a = np.asarray(arr, dtype=np.float64)
    if a.shape != (n,):
        raise ValueError(f"{name} has shape {a.shape}; expected ({n},) like segment_start")
    return a


@numba.njit(cache=True)
def _trailing_std_kernel(ret, seg, window, min_periods):  # pragma: no cover - compiled
    """Rolling sample std of ``ret`` (NaN = missing) over ``window`` rows, reset at segments.

    Welford add/remove; a window whose finite values are all equal gives exactly 0 (tracked by the
    run length of equal consecutive values, as pandas does).
    """
    n = ret.shape[0]
    out = np.full(n, np.nan)
    m = 0
    mean = 0.0
    ssq = 0.0
    run = 0
    last = np.nan
    s = 0  # first row of the current segment
    for t in range(n):
        if t == 0 or seg[t] != seg[t - 1]:
            m, mean, ssq, run, last, s = 0, 0.0, 0.0, 0, np.nan, t
        x = ret[t]
        if np.isfinite(x):  # add ret[t]
            m += 1
            d = x - mean
            mean += d / m
            ssq += d * (x - mean)
            run = run + 1 if x == last else 1
            last = x
        o = t - window  # ret[o] leaves the window
        if o >= s and np.isfinite(ret[o]):
            m -= 1
            if m == 0:
                mean, ssq = 0.0, 0.0
            else:
                d = ret[o] - mean
                mean -= d / m
                ssq -= d * (ret[o] - mean)
        if m >= min_periods:
            out[t] = 0.0 if run >= m else np.sqrt(max(ssq, 0.0) / (m - 1))
    return out


def log_returns(close: np.ndarray, segment_start: np.ndarray) -> np.ndarray:
    """One-row log returns ``log(close[t] / close[t-1])``; NaN at segment starts and bad prices."""
    n = len(segment_start)
    c = row_values("close", close, n)
    r = np.full(n, np.nan)
    if n > 1:
        seg = segment_ids(segment_start)
        prev, cur = c[:-1], c[1:]
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(prev) & np.isfinite(cur) & (prev > 0) & (cur > 0) & (seg[1:] == seg[:-1])
        r[1:][ok] = np.log(cur[ok] / prev[ok])
    return r


def trailing_volatility(
    close: np.ndarray, segment_start: np.ndarray, window: int, min_periods: int | None = None
) -> np.ndarray:
    """Causal per-row volatility: std (ddof 1) of the one-row log returns of rows ``t-window+1 .. t``.

    Restarts at every segment (the first row of a segment has no return); returns of non-finite
    or non-positive prices are skipped. NaN until ``min_periods`` (default: ``window``, at least 2)
    returns exist in the window. float64 ``[n]``.
    """
    if window < 2:
        raise ValueError(f"volatility window must be >= 2 rows, got {window}")
    mp = window if min_periods is None else int(min_periods)
    if not 2 <= mp <= window:
        raise ValueError(f"min_periods must lie in [2, window={window}], got {min_periods}")
    r = log_returns(close, segment_start)
    return _trailing_std_kernel(r, segment_ids(segment_start), int(window), mp)
