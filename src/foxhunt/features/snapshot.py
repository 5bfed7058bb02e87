"""Snapshot-native family ``snapshot`` (docs/design.md §2): timing and touch state of one book update.

Used in the snapshot row unit's stack; defined for bars too (there a "row" is a bar and the event
rate counts the book states inside bars). One numba pass over the events (``inp.events``, or one
event per row when it is None) and one over the rows; both are forward recursions restarted at
every segment start. Rows with ``book_mask`` False are all 0.

=====  ==================  ========================================================================
slot   name                formula
=====  ==================  ========================================================================
0      time_since_trade    log(1 + (ts_t - last_trade_ts_t) / 1 s); 0 when no trade yet in the
                           segment (``last_trade_ts = -1``)
1      time_since_update   log(1 + (ts_t - ts_{t-1}) / 1 s) within the segment; 0 at its first row
2      event_rate          log(1 + 1 / A), A = EMA_rate_span of the inter-arrival times (s) of the
                           book states (m += (dt - m) / rate_span, m = dt at the segment's second
                           state), A floored at 1 us; at the row's last state (carried over rows
                           without one); 0 before the segment's second state
3      spread_bps          (p^a_0 - p^b_0) / mid * 1e4, clipped to [-1000, 1000]; 0 if a side is empty
4      l1_imbalance        (q^b_0 - q^a_0) / (q^b_0 + q^a_0); 0 when both are 0
5      microprice_drift    (micro_t - micro_{t-drift_rows}) / tick, clipped to [-1000, 1000];
                           micro = (p^b_0 q^a_0 + p^a_0 q^b_0) / (q^b_0 + q^a_0); 0 when row
                           t - drift_rows is before the segment start or either microprice is undefined
=====  ==================  ========================================================================
"""

from __future__ import annotations

import numba
import numpy as np
from pydantic import Field

import foxhunt.jit  # noqa: F401  (before the kernels: their cache is stamped with the package)
from foxhunt.config.base import Frozen
from foxhunt.features._kernels import Carry
from foxhunt.features.frame import RowInput
from foxhunt.features.ofi import book_events, event_reset, with_last_event

SLOTS: tuple[str, ...] = (
    "time_since_trade",
    "time_since_update",
    "event_rate",
    "spread_bps",
    "l1_imbalance",
    "microprice_drift",
)
NEEDS_BOOK = True
# Slots that need trades: the stack sets them to 0 (masked) on rows without trades.
TRADE_SLOTS: tuple[str, ...] = ("time_since_trade",)

_WIDTH = len(SLOTS)
_S = {name: i for i, name in enumerate(SLOTS)}  # slot -> column, for the kernels
_S_TIME_SINCE_TRADE = _S["time_since_trade"]
_S_TIME_SINCE_UPDATE = _S["time_since_update"]
_S_EVENT_RATE = _S["event_rate"]
_S_SPREAD_BPS = _S["spread_bps"]
_S_L1_IMBALANCE = _S["l1_imbalance"]
_S_MICROPRICE_DRIFT = _S["microprice_drift"]

_NS = 1e-9
_BPS_CLIP = 1000.0
_TICK_CLIP = 1000.0
_MIN_INTERARRIVAL_S = 1e-6


class SnapshotConfig(Frozen):
    """Windows of the ``snapshot`` family."""

    rate_span: int = Field(
        100, ge=1, le=1_000_000, description="Book states in the EMA of inter-arrival times (event rate)."
    )
    drift_rows: int = Field(
        50, ge=1, le=1_000_000, description="Rows back over which the microprice drift is measured."
    )


CONFIG = SnapshotConfig
"""The family's settings class (the plug-in contract, docs/feature-plugins.md): ``features.snapshot``."""


@numba.njit(cache=True)
def _event_rate(ev_row, ev_ts, reset, n_rows, n_rate, start, st):
    """[n_rows] log(1 + events per second) at each row's last event; has-value flags. Events from
    ``start`` (the one before it: the previous chunk's last); ``st``: the carried (EMA, states seen)."""
    rate = np.zeros(n_rows)
    has = np.zeros(n_rows, np.bool_)
    a = st[0]
    seen = np.int64(st[1])
    for k in range(start, ev_ts.shape[0]):
        r = ev_row[k]
        if reset[k] or k == 0:
            seen = 1
        else:
            dt = max((ev_ts[k] - ev_ts[k - 1]) * _NS, 0.0)
            a = dt if seen == 1 else a + (dt - a) / n_rate
            seen += 1
        has[r] = True
        rate[r] = np.log1p(1.0 / max(a, _MIN_INTERARRIVAL_S)) if seen >= 2 else 0.0
    st[0] = a
    st[1] = seen
    return rate, has


@numba.njit(cache=True)
def _micro(bid_px, ask_px, bid_sz, ask_sz, t):
    qb = bid_sz[t, 0]
    qa = ask_sz[t, 0]
    if qb + qa <= 0.0:
        return np.nan
    return (bid_px[t, 0] * qa + ask_px[t, 0] * qb) / (qb + qa)


@numba.njit(cache=True)
def _snapshot_kernel(
    ts, seg, book_mask, last_trade, bid_px, ask_px, bid_sz, ask_sz,  # [n] / [n, L] the rows
    tick, ev_rate, ev_has, drift_rows, start, st,
):  # fmt: skip
    """Rows from ``start`` (``drift_rows`` rows of history before it); ``st``: the carried (first row
    of the segment, as an index into these arrays, and the event rate), updated in place."""
    n = ts.shape[0]
    out = np.zeros((n, _WIDTH), np.float32)
    seg_first = np.int64(st[0])
    rate = st[1]
    for t in range(start, n):
        if seg[t]:
            seg_first = t
            rate = 0.0
        if ev_has[t]:
            rate = ev_rate[t]
        if not book_mask[t]:
            continue
        row = out[t]
        if last_trade[t] >= 0 and last_trade[t] <= ts[t]:
            row[_S_TIME_SINCE_TRADE] = np.log1p((ts[t] - last_trade[t]) * _NS)
        if t > seg_first:
            row[_S_TIME_SINCE_UPDATE] = np.log1p(max((ts[t] - ts[t - 1]) * _NS, 0.0))
        row[_S_EVENT_RATE] = rate
        pb = bid_px[t, 0]
        pa = ask_px[t, 0]
        if pb == pb and pa == pa:
            mid = 0.5 * (pa + pb)
            if mid > 0.0:
                row[_S_SPREAD_BPS] = min(max((pa - pb) / mid * 1e4, -_BPS_CLIP), _BPS_CLIP)
        qb = bid_sz[t, 0]
        qa = ask_sz[t, 0]
        if qb + qa > 0.0:
            row[_S_L1_IMBALANCE] = (qb - qa) / (qb + qa)
        lag = t - drift_rows
        if lag >= seg_first and book_mask[lag]:
            m1 = _micro(bid_px, ask_px, bid_sz, ask_sz, t)
            m0 = _micro(bid_px, ask_px, bid_sz, ask_sz, lag)
            if m1 == m1 and m0 == m0:
                row[_S_MICROPRICE_DRIFT] = min(max((m1 - m0) / tick, -_TICK_CLIP), _TICK_CLIP)
    st[0] = seg_first
    st[1] = rate
    return out


def compute(inp: RowInput, params: SnapshotConfig, carry: Carry | None = None) -> np.ndarray:
    """float32 ``[len(inp), 6]``: the ``snapshot`` slots (see the module docstring); ``carry``: the
    state of the rows before ``inp`` (foxhunt.features._kernels.Carry; None: the batch)."""
    n = len(inp)
    if n == 0:
        return np.zeros((0, len(SLOTS)), np.float32)
    carry = Carry() if carry is None else carry
    f = np.ascontiguousarray
    keep = int(params.drift_rows) + 1  # the drift's lag and the previous row's time
    start = carry.history("ts")
    rows = {
        "ts": f(inp.ts, np.int64),
        "seg": f(inp.segment_start, np.bool_),
        "book_mask": f(inp.book_mask, np.bool_),
        "last_trade": f(inp.last_trade_ts, np.int64),
        **{k: f(getattr(inp, k), np.float64) for k in ("bid_px", "ask_px", "bid_sz", "ask_sz")},
    }
    full = {k: carry.extend(k, a, keep) for k, a in rows.items()}
    ev = book_events(inp)
    arrays, s0 = with_last_event(ev, event_reset(inp, ev, carry), carry)
    ev_rate, ev_has = _event_rate(
        arrays["row"] + start,
        arrays["ts"],
        arrays["reset"],
        start + n,
        float(params.rate_span),
        s0,
        carry.state("event_rate", (0.0, 0.0)),
    )
    st = carry.state("rows", (0.0, 0.0))
    out = _snapshot_kernel(
        *full.values(), float(inp.tick_size), ev_rate, ev_has, int(params.drift_rows), start, st
    )[start:]
    st[0] -= start + n - carry.history("ts")  # the segment's first row, in the next chunk's arrays
    out[~np.isfinite(out)] = 0.0
    carry.rows += n
    return out
