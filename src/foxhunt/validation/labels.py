"""Labels: direction at horizon K and triple-barrier outcomes (profit / stop / timeout).

Every label looks forward from row ``t`` and is **valid only inside one segment** (a session and
contract, marked by ``segment_start``): a move across the daily halt or a roll is not a move. A row
without a label is flagged invalid in the returned ``valid`` mask; its label value is a filler
(0 for directions, :data:`~foxhunt.domain.exits.NO_OUTCOME` = -1 for outcomes) that must never be
read as a class.

Conventions
-----------
* Direction: ``label[t, h] = sign(close[t + K_h] - close[t])`` in {-1, 0, +1}; valid iff
  ``t + K_h < n``, row ``t + K_h`` is in the segment of row ``t`` and both prices are finite.
* Triple barrier (:mod:`foxhunt.domain.barrier`, the one definition shared with the env's plan
  exits), for an entry at ``close[t]`` (side +1 = LONG, the default; -1 = SHORT):
  ``profit_price = c * (1 + side * profit_mult * vol[t])``,
  ``stop_price = c * (1 - side * stop_mult * vol[t])`` (:func:`barrier_prices`). Rows
  ``t+1 .. t+horizon`` are scanned in order with their ``high``/``low``; a LONG's profit is touched
  when ``high >= profit_price``, its stop when ``low <= stop_price`` (mirrored for a SHORT;
  :func:`barrier_touch`). The first touch wins. **When one row touches both, the outcome is STOP**
  (the path inside the row is unknown, so the conservative reading). With no touch the outcome is
  TIMEOUT at offset ``horizon`` (exit at ``close[t + horizon]``). The stored outcome is the class
  index of the :class:`~foxhunt.domain.exits.ExitReason` (:func:`~foxhunt.domain.exits.outcome_class`:
  profit 0, stop 1, timeout 2).
* The environment's plan is the same barrier (:mod:`foxhunt.env.core`): a position opened by a fill
  on step row ``r`` takes its entry reference ``close[t]`` (the env's ``mid``) and ``vol[t]`` at
  ``t = r + 1``, the row the step moves to. Row ``t``'s own high/low happened *before* that close,
  so the plan, like the label, first checks its barriers on row ``t + 1``. Its hold count is the
  offset from ``t`` and its timeout ``hold >= horizon`` exits at ``t + horizon``, as the label's:
  a plan lasts exactly the label's horizon, ``horizon + 1`` rows after the fill row ``r`` (the fill
  row itself precedes the entry reference; it is not an extra bar).
  A row is valid iff the whole horizon ``t .. t+horizon`` lies in its segment (so the label's
  availability never depends on the outcome, which would bias labels near segment ends), its
  ``close`` and ``vol`` are finite with ``vol > 0`` (a zero volatility scale puts both barriers on
  the entry price), and every scanned row up to the exit has a finite ``high`` and ``low``.
* ``vol`` is causal: :func:`~foxhunt.data.returns.trailing_volatility` is the sample standard
  deviation (ddof 1) of the one-row log returns ``log(close[i] / close[i-1])`` over the trailing
  ``window`` rows ending at ``t``, restarting at each segment; NaN until ``min_periods`` returns
  exist in the segment.
  It is a *per-row* volatility: for a random walk the move over ``horizon`` rows has standard
  deviation ``vol * sqrt(horizon)``, so ``profit_mult = stop_mult ~ sqrt(horizon)`` gives roughly
  a third each of profit, stop and timeout.

The barrier's parameters (multiples, volatility window, horizon) are one
:class:`~foxhunt.domain.barrier.BarrierConfig`, ``env.plan.barrier`` in the config; the direction horizons
are :class:`~foxhunt.validation.config.LabelConfig` (``[labels]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numba
import numpy as np

import foxhunt.jit  # noqa: F401  (before the kernels: their cache is stamped with the package)
from foxhunt.data.returns import row_values, segment_ids, trailing_volatility
from foxhunt.domain.barrier import BarrierConfig, barrier_prices, barrier_touch
from foxhunt.domain.exits import NO_OUTCOME, ExitReason, outcome_class

if TYPE_CHECKING:
    from foxhunt.features.frame import RowInput
    from foxhunt.validation.config import LabelConfig

# The label kernel's class codes (numba reads module ints as compile-time constants).
_PROFIT = outcome_class(int(ExitReason.PROFIT))
_STOP = outcome_class(int(ExitReason.STOP))
_TIMEOUT = outcome_class(int(ExitReason.TIMEOUT))


def label_span(horizons: tuple[int, ...] | list[int], barrier_horizon: int) -> int:
    """Longest forward reach of any label, in rows: the label of row t reads rows t .. t + span.

    The folds purge training rows whose window ``[t, t + span]`` reaches validation and embargo at
    least ``span`` rows (the volatility scale is trailing, so it adds no forward reach).
    """
    reach = [int(k) for k in horizons] + [int(barrier_horizon)]
    if min(reach) < 1:
        raise ValueError(f"label horizons must be >= 1 row, got {list(horizons)} and {barrier_horizon}")
    return max(reach)


# --- direction -------------------------------------------------------------------------------


def direction_labels(
    close: np.ndarray, segment_start: np.ndarray, horizons: tuple[int, ...] | list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """sign(close[t+K] - close[t]) per horizon: ``(labels int8 [n, H], valid bool [n, H])``.

    Invalid where ``t + K`` is past the data or in a later segment, or either price is not finite;
    invalid entries hold 0 and must be masked by ``valid``.
    """
    n = len(segment_start)
    c = row_values("close", close, n)
    seg = segment_ids(segment_start)
    finite = np.isfinite(c)
    labels = np.zeros((n, len(horizons)), np.int8)
    valid = np.zeros((n, len(horizons)), bool)
    t = np.arange(n)
    for h, k in enumerate(horizons):
        if k < 1:
            raise ValueError(f"direction horizon must be >= 1 row, got {k}")
        j = t + int(k)
        inside = j < n
        jj = np.minimum(j, n - 1)
        ok = inside & (seg[jj] == seg) & finite & finite[jj]
        with np.errstate(invalid="ignore"):
            labels[:, h] = np.where(ok, np.sign(c[jj] - c), 0)
        valid[:, h] = ok
    return labels, valid


# --- triple barrier --------------------------------------------------------------------------


@numba.njit(cache=True)
def _barrier_kernel(close, high, low, seg, ok_entry, profit_px, stop_px, horizon, side):  # pragma: no cover
    n = close.shape[0]
    outcome = np.full(n, NO_OUTCOME, np.int8)
    offset = np.full(n, -1, np.int64)
    for t in range(n):
        end = t + horizon
        if end >= n or seg[end] != seg[t] or not ok_entry[t]:
            continue
        res = _TIMEOUT
        off = horizon
        ok = np.isfinite(close[end])
        for j in range(t + 1, end + 1):
            h = high[j]
            lo = low[j]
            if not (np.isfinite(h) and np.isfinite(lo)):
                ok = False
                break
            profit, stop = barrier_touch(h, lo, profit_px[t], stop_px[t], side)
            if stop:  # a row touching both barriers counts as STOP (conservative)
                res, off, ok = _STOP, j - t, True
                break
            if profit:
                res, off, ok = _PROFIT, j - t, True
                break
        if ok:
            outcome[t] = res
            offset[t] = off
    return outcome, offset


def triple_barrier(
    close: np.ndarray,
    high: np.ndarray,
    low: np.ndarray,
    segment_start: np.ndarray,
    vol: np.ndarray,
    profit_mult: float,
    stop_mult: float,
    horizon: int,
    side: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """First of profit / stop / timeout for an entry at ``close[t]`` (module docstring: conventions).

    Returns ``(outcome int8 [n] (outcome classes, NO_OUTCOME where invalid), exit_offset int64 [n]
    (rows from entry to exit, 1..horizon; -1 where invalid), valid bool [n])``.
    """
    n = len(segment_start)
    c = row_values("close", close, n)
    h = row_values("high", high, n)
    lo = row_values("low", low, n)
    v = row_values("vol", vol, n)
    if horizon < 1:
        raise ValueError(f"barrier horizon must be >= 1 row, got {horizon}")
    if not (profit_mult > 0 and stop_mult > 0):
        raise ValueError(f"profit_mult and stop_mult must be > 0, got {profit_mult}, {stop_mult}")
    with np.errstate(invalid="ignore"):
        ok_entry = np.isfinite(c) & np.isfinite(v) & (v > 0)
    profit_px, stop_px = barrier_prices(c, v, profit_mult, stop_mult, side)
    outcome, offset = _barrier_kernel(
        c, h, lo, segment_ids(segment_start), ok_entry, profit_px, stop_px, int(horizon), int(side)
    )
    return outcome, offset, outcome != NO_OUTCOME


# --- all labels of a row set -----------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Labels:
    """Every label of a set of rows (shapes ``[n]`` / ``[n, H]``); masks say which are real."""

    horizons: tuple[int, ...]
    direction: np.ndarray  # [n, H] int8 in {-1, 0, +1}
    direction_valid: np.ndarray  # [n, H] bool
    outcome: np.ndarray  # [n] int8 outcome class (LONG entry, outcome_class), NO_OUTCOME where invalid
    exit_offset: np.ndarray  # [n] int64 rows to the exit, -1 where invalid
    outcome_valid: np.ndarray  # [n] bool
    vol: np.ndarray  # [n] float64 trailing per-row volatility (the barrier scale)
    span: int  # longest forward reach in rows (purge/embargo)


def compute_labels(rows: RowInput, params: LabelConfig, barrier: BarrierConfig) -> Labels:
    """Direction labels (the row unit's horizons) and LONG triple-barrier outcomes of ``rows``."""
    horizons = params.horizons(rows.row_unit)
    barrier_h = barrier.horizon
    direction, direction_valid = direction_labels(rows.close, rows.segment_start, horizons)
    vol = trailing_volatility(rows.close, rows.segment_start, barrier.vol_window)
    outcome, offset, valid = triple_barrier(
        rows.close,
        rows.high,
        rows.low,
        rows.segment_start,
        vol,
        barrier.profit_mult,
        barrier.stop_mult,
        barrier_h,
    )
    return Labels(
        horizons=tuple(horizons),
        direction=direction,
        direction_valid=direction_valid,
        outcome=outcome,
        exit_offset=offset,
        outcome_valid=valid,
        vol=vol,
        span=label_span(horizons, barrier_h),
    )
