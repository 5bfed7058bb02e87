"""Multi-timeframe family: the core market statistics on slower, completed time buckets.

Rows are grouped into time buckets of each timeframe ``T`` (``MtfConfig.timeframes_s``): row t belongs
to bucket ``floor(ts[t] / T)`` (epoch-aligned clock buckets, by the time the row became known, so
the same rule serves bars and snapshots), and only rows of its own segment. A bucket is *completed*
when a later row of the segment falls in a later bucket; then its end ``<= ts[t]`` and all its rows
precede row t. Row t sees the statistics of the completed buckets of its segment only, never the
bucket it is in; before the first completed bucket of a segment every slot is 0. Empty buckets
(no rows) are skipped.

Per completed bucket b: log close ``C_b`` (last row's close; missing closes carry the previous one,
as in :mod:`foxhunt.features.market`), high ``H_b`` / low ``L_b`` (max/min of the rows' log
high/low), volume ``V_b`` (sum), return ``R_b = C_b - C_ref`` with ``C_ref`` the close of the row
before the bucket (the bucket's first open for the segment's first bucket), range ``G_b = H_b - L_b``.
Window: the last ``m = min(nb, lookback_buckets)`` completed buckets (``nb`` completed so far); the
slots marked "window" need ``nb >= min_buckets`` and are 0 before. ``b`` = the last completed bucket.

| slot (per timeframe, 8) | formula | range |
|---|---|---|
| tf{T}_ret_bps | 1e4 R_b | ±bps_clip |
| tf{T}_mom_z | window: Σ R / sqrt(Σ R²) (sum of returns over its volatility) | ±z_clip |
| tf{T}_rv_bps | window: 1e4 sqrt(Σ R² / m) | [0, bps_clip] |
| tf{T}_range_ratio | window: ln(G_b / mean G) | ±5 |
| tf{T}_close_pos | 2 (C_b - L_b) / G_b - 1 (where the last bucket closed in its own range) | [-1, 1] |
| tf{T}_range_pos | window: 2 (C_b - min L) / (max H - min L) - 1 | [-1, 1] |
| tf{T}_trend_tstat | window: t-stat of the OLS slope of C on the bucket index | ±tstat_clip |
| tf{T}_volume_ratio | window: ln((1 + V_b) / (1 + mean V)) | ±5 |

Slots are the 8 of the first timeframe, then the 8 of the second; names carry the default
timeframes (``tf5m``, ``tf30m``). Every ratio with a zero denominator is 0.
"""

from __future__ import annotations

import math
from typing import Annotated

import numba
import numpy as np
from pydantic import Field, model_validator

import foxhunt.jit  # noqa: F401  (before the kernels: their cache is stamped with the package)
from foxhunt.config.base import Frozen
from foxhunt.features import _kernels as K
from foxhunt.features.frame import RowInput

NEEDS_BOOK = False

_PER_TF = 8
_RATIO_CLIP = 5.0

Seconds = Annotated[int, Field(ge=1, le=86_400)]


class MtfConfig(Frozen):
    """Timeframes and bucket window of the multi-timeframe family."""

    timeframes_s: tuple[Seconds, Seconds] = Field(
        (300, 1800), description="The two slower timeframes in seconds (bucket lengths), faster first."
    )
    lookback_buckets: int = Field(
        12, ge=3, le=10_000, description="Completed buckets in the window of the window statistics."
    )
    min_buckets: int = Field(
        3, ge=3, le=10_000, description="Completed buckets a window statistic needs (0 before)."
    )
    bps_clip: float = Field(500.0, gt=0.0, le=100_000.0, description="Clip of the bps slots (ret, rv).")
    z_clip: float = Field(10.0, gt=0.0, le=1000.0, description="Clip of the normalised momentum.")
    tstat_clip: float = Field(20.0, gt=0.0, le=1000.0, description="Clip of the trend t-statistic.")

    @model_validator(mode="after")
    def _consistent(self) -> MtfConfig:
        if self.min_buckets > self.lookback_buckets:
            raise ValueError(
                f"mtf.min_buckets ({self.min_buckets}) exceeds mtf.lookback_buckets ({self.lookback_buckets})"
            )
        if self.timeframes_s[0] == self.timeframes_s[1]:
            raise ValueError(f"mtf.timeframes_s {self.timeframes_s} repeats a timeframe; give two different")
        return self


CONFIG = MtfConfig
"""The family's settings class (the plug-in contract, docs/feature-plugins.md): ``features.mtf``."""


def _tf_label(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


_STATS = (
    "ret_bps",
    "mom_z",
    "rv_bps",
    "range_ratio",
    "close_pos",
    "range_pos",
    "trend_tstat",
    "volume_ratio",
)
_RET, _MOM, _RV, _RRATIO, _CPOS, _RPOS, _TSTAT, _VRATIO = range(_PER_TF)  # column of each statistic


def _slot_names(p: MtfConfig) -> tuple[str, ...]:
    return tuple(f"tf{_tf_label(tf)}_{s}" for tf in p.timeframes_s for s in _STATS)


SLOTS: tuple[str, ...] = _slot_names(MtfConfig())

# The long/short mirror's declarations (the family contract in foxhunt.features.registry).
MIRROR_ODD: frozenset[str] = frozenset(
    s for s in SLOTS if s.endswith(("_ret_bps", "_mom_z", "_close_pos", "_range_pos", "_trend_tstat"))
)
MIRROR_SWAPS: tuple[tuple[str, str], ...] = ()
# Slots that need traded volume: the stack sets them to 0 (masked) on rows without trades.
TRADE_SLOTS: tuple[str, ...] = tuple(s for s in SLOTS if s.endswith("_volume_ratio"))


@numba.njit(cache=True)
def _bucket_stats(
    ring_r: np.ndarray,
    ring_h: np.ndarray,
    ring_l: np.ndarray,
    ring_c: np.ndarray,
    ring_v: np.ndarray,
    nb: int,
    lookback: int,
    min_b: int,
    bps_clip: float,
    z_clip: float,
    t_clip: float,
    st: np.ndarray,
) -> None:
    """The 8 statistics after ``nb`` completed buckets (ring buffers of ``lookback``) into ``st``."""
    st[:] = 0.0
    last = (nb - 1) % lookback
    st[_RET] = min(max(1e4 * ring_r[last], -bps_clip), bps_clip)
    g_last = ring_h[last] - ring_l[last]
    if g_last > 0.0:
        st[_CPOS] = min(max(2.0 * (ring_c[last] - ring_l[last]) / g_last - 1.0, -1.0), 1.0)
    if nb < min_b:
        return
    m = min(nb, lookback)
    sr = 0.0
    sr2 = 0.0
    sg = 0.0
    sv = 0.0
    hi = -np.inf
    lo = np.inf
    cbar = 0.0
    for j in range(m):
        i = (nb - m + j) % lookback
        sr += ring_r[i]
        sr2 += ring_r[i] * ring_r[i]
        sg += ring_h[i] - ring_l[i]
        sv += ring_v[i]
        hi = max(hi, ring_h[i])
        lo = min(lo, ring_l[i])
        cbar += ring_c[i]
    cbar /= m
    if sr2 > 0.0:
        st[_MOM] = min(max(sr / math.sqrt(sr2), -z_clip), z_clip)
    st[_RV] = min(1e4 * math.sqrt(sr2 / m), bps_clip)
    if g_last > 0.0 and sg > 0.0:
        st[_RRATIO] = min(max(math.log(g_last / (sg / m)), -_RATIO_CLIP), _RATIO_CLIP)
    if hi > lo:
        st[_RPOS] = min(max(2.0 * (ring_c[last] - lo) / (hi - lo) - 1.0, -1.0), 1.0)
    # OLS of C on j = 0..m-1 (two-pass, so a flat series gives exactly 0).
    xbar = (m - 1) / 2.0
    sxx = 0.0
    sxy = 0.0
    syy = 0.0
    for j in range(m):
        i = (nb - m + j) % lookback
        dx = j - xbar
        dy = ring_c[i] - cbar
        sxx += dx * dx
        sxy += dx * dy
        syy += dy * dy
    if sxy != 0.0:
        b = sxy / sxx
        ssr = syy - b * sxy
        if ssr > 0.0:
            st[_TSTAT] = min(max(b / math.sqrt(ssr / ((m - 2) * sxx)), -t_clip), t_clip)
        else:
            st[_TSTAT] = t_clip if b > 0.0 else -t_clip
    st[_VRATIO] = min(max(math.log((1.0 + ring_v[last]) / (1.0 + sv / m)), -_RATIO_CLIP), _RATIO_CLIP)


# The carried scalars of _mtf_kernel: completed buckets, a bucket open, its id, its reference close,
# high, low, close and volume so far.
_FRESH = (0.0,) * 8


@numba.njit(cache=True)
def _mtf_kernel(
    ts: np.ndarray,
    seg: np.ndarray,
    pos: np.ndarray,
    lo: np.ndarray,
    lh: np.ndarray,
    ll: np.ndarray,
    lc: np.ndarray,
    vol: np.ndarray,
    tf_ns: int,
    lookback: int,
    min_b: int,
    bps_clip: float,
    z_clip: float,
    t_clip: float,
    start: int,
    rings: np.ndarray,
    st: np.ndarray,
    sc: np.ndarray,
) -> np.ndarray:
    """One timeframe's 8 slots for every row: stats of the completed buckets of the row's segment.

    Rows from ``start`` (one row of history before it); carried: ``rings`` ``[5, lookback]`` (the
    completed buckets' R, H, L, C, V), ``st`` (the 8 statistics) and ``sc`` (the scalars of
    :data:`_FRESH`), updated in place."""
    n = len(ts)
    out = np.zeros((n, _PER_TF))
    ring_r = rings[0]
    ring_h = rings[1]
    ring_l = rings[2]
    ring_c = rings[3]
    ring_v = rings[4]
    nb = np.int64(sc[0])
    open_bucket = sc[1] != 0.0
    cur = np.int64(sc[2])
    b_ref = sc[3]
    b_h = sc[4]
    b_l = sc[5]
    b_c = sc[6]
    b_v = sc[7]
    for t in range(start, n):
        if seg[t]:
            nb = 0
            open_bucket = False
            st[:] = 0.0
        if pos[t] < 0:
            continue  # no valid price yet in this segment: 0
        bid = ts[t] // tf_ns
        if open_bucket and bid != cur:  # the open bucket is complete: push it, refresh the stats
            i = nb % lookback
            ring_r[i] = b_c - b_ref
            ring_h[i] = b_h
            ring_l[i] = b_l
            ring_c[i] = b_c
            ring_v[i] = b_v
            nb += 1
            open_bucket = False
            _bucket_stats(
                ring_r, ring_h, ring_l, ring_c, ring_v, nb, lookback, min_b, bps_clip, z_clip, t_clip, st
            )
        if not open_bucket:
            open_bucket = True
            cur = bid
            b_ref = lc[t - 1] if pos[t] > 0 else lo[t]
            b_h = lh[t]
            b_l = ll[t]
            b_v = 0.0
        b_h = max(b_h, lh[t])
        b_l = min(b_l, ll[t])
        b_c = lc[t]
        b_v += vol[t]
        out[t, :] = st
    sc[0] = nb
    sc[1] = 1.0 if open_bucket else 0.0
    sc[2] = cur
    sc[3] = b_ref
    sc[4] = b_h
    sc[5] = b_l
    sc[6] = b_c
    sc[7] = b_v
    return out


def compute(inp: RowInput, params: MtfConfig, carry: K.Carry | None = None) -> np.ndarray:
    """The multi-timeframe features of every row, float32 ``[len(inp), len(SLOTS)]``; ``carry``: the
    state of the rows before ``inp`` (foxhunt.features._kernels.Carry; None: the batch)."""
    p = params
    n = len(inp)
    out = np.zeros((n, len(SLOTS)), np.float32)
    if n == 0:
        return out
    carry = K.Carry() if carry is None else carry
    start = carry.history("lc")
    path = K.segment_log_path(
        np.asarray(inp.open, np.float64),
        np.asarray(inp.high, np.float64),
        np.asarray(inp.low, np.float64),
        np.asarray(inp.close, np.float64),
        np.asarray(inp.segment_start, bool),
        carry.state("path", K.PATH_FRESH),
    )
    # One row of history: a bucket's reference is the close of the row before it.
    names = ("lo", "lh", "ll", "lc", "pos")
    lo, lh, ll, lc, pos = (carry.extend(k, a, 1) for k, a in zip(names, path, strict=True))
    seg = carry.extend("seg", np.asarray(inp.segment_start, bool), 1)
    ts = carry.extend("ts", np.asarray(inp.ts, np.int64), 1)
    vol = np.asarray(inp.volume, np.float64)
    vol = carry.extend("vol", np.where(np.isfinite(vol) & (vol > 0.0), vol, 0.0), 1)
    for j, tf in enumerate(p.timeframes_s):
        block = _mtf_kernel(
            ts,
            seg,
            pos,
            lo,
            lh,
            ll,
            lc,
            vol,
            int(tf) * 1_000_000_000,
            p.lookback_buckets,
            p.min_buckets,
            p.bps_clip,
            p.z_clip,
            p.tstat_clip,
            start,
            carry.state(f"rings{j}", (0.0,) * (5 * p.lookback_buckets)).reshape(5, p.lookback_buckets),
            carry.state(f"stats{j}", (0.0,) * _PER_TF),
            carry.state(f"scalars{j}", _FRESH),
        )
        out[:, j * _PER_TF : (j + 1) * _PER_TF] = block[start:]
    carry.rows += n
    return out
