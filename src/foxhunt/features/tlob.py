"""Book-shape family ``tlob`` (docs/design.md §2): the shape of the row's 10-level book.

One numba pass over the rows' books (``inp.bid_*``/``inp.ask_*``: the book at the row). Only the
last slot has memory (a trailing mean), restarted at every segment start; rows with ``book_mask``
False are all 0 and do not enter it.

Notation: level ``i`` (0 = touch) of side ``s`` has price ``p^s_i`` (NaN = empty level) and size
``q^s_i`` (0 when empty); ``Q^s = sum_i q^s_i`` over all ``L`` levels. A level is *populated* when its
price is finite and its size > 0. Ratios with a zero denominator are 0 ("no signal").

=====  ================  ==================================================================================
slot   name              formula
=====  ================  ==================================================================================
0      bid_share_l0      q^b_0 / Q^b (depth profile: share of the side's depth at the touch)
1      bid_share_l1_2    (q^b_1 + q^b_2) / Q^b
2      bid_share_l3_5    (q^b_3 + q^b_4 + q^b_5) / Q^b   (levels 6-9 hold the rest: 1 - slots 0-2)
3-5    ask_share_*       the same for the ask side
6      imbalance_1       cumulative imbalance over k = 1 level:
                         sum_{i<k} (q^b_i - q^a_i) / sum_{i<k} (q^b_i + q^a_i)
7      imbalance_3       the same over k = 3 levels
8      imbalance_5       k = 5
9      imbalance_10      k = 10 (all levels)
10     bid_slope         OLS slope of cumulative depth y_j = sum_{i<=j} q^b_i against the distance from
                         the mid in ticks x_j = |p^b_j - mid| / tick, over the populated levels (the
                         slope does not depend on the offset, so a one-sided book uses the distance
                         from its touch), divided by the trailing mean depth per level D (slot 15);
                         in levels' worth of depth per tick, clipped to [0, clip]; 0 with < 2 levels
11     ask_slope         the same for the ask side
12     convexity         least-squares quadratic a0 + a1 u + a2 u^2 of q^s_i / mean_i(q^s_i) against
                         u = i / (L - 1); the mean over both sides of a2, clipped to [-clip, clip]
                         (> 0: depth grows faster than linearly away from the touch)
13     bid_gap           (|p^b_last - p^b_0| / tick) / (n^b - 1) - 1 over the n^b populated levels: mean
                         extra ticks between consecutive levels (0 for a contiguous book), clipped to
                         [0, 100]
14     ask_gap           the same for the ask side
15     depth_rel         log(T_t / EMA_depth_span(T)_t), T = Q^b + Q^a, clipped to [-5, 5]; the EMA
                         (m += (T - m) / depth_span, m = T at a segment's first row) includes row t
=====  ================  ==================================================================================
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from pydantic import Field

import foxhunt.jit  # noqa: F401  (before the kernels: their cache is stamped with the package)
from foxhunt.config.base import Frozen
from foxhunt.features._kernels import Carry
from foxhunt.features.frame import RowInput

SLOTS: tuple[str, ...] = (
    "bid_share_l0",
    "bid_share_l1_2",
    "bid_share_l3_5",
    "ask_share_l0",
    "ask_share_l1_2",
    "ask_share_l3_5",
    "imbalance_1",
    "imbalance_3",
    "imbalance_5",
    "imbalance_10",
    "bid_slope",
    "ask_slope",
    "convexity",
    "bid_gap",
    "ask_gap",
    "depth_rel",
)
NEEDS_BOOK = True

# The long/short mirror's declarations (the family contract in foxhunt.features.registry).
MIRROR_ODD: frozenset[str] = frozenset(s for s in SLOTS if s.startswith("imbalance_"))
# Slots that need the book beyond the touch: the stack sets them to 0 (masked) on top-of-book input.
DEPTH_SLOTS: tuple[str, ...] = tuple(s for s in SLOTS if s != "imbalance_1")
MIRROR_SWAPS: tuple[tuple[str, str], ...] = (
    ("bid_share_l0", "ask_share_l0"),
    ("bid_share_l1_2", "ask_share_l1_2"),
    ("bid_share_l3_5", "ask_share_l3_5"),
    ("bid_slope", "ask_slope"),
    ("bid_gap", "ask_gap"),
)

_WIDTH = len(SLOTS)
_S = {name: i for i, name in enumerate(SLOTS)}  # slot -> column, for the kernels
_S_BID_SHARE_L0 = _S["bid_share_l0"]
_S_BID_SHARE_L1_2 = _S["bid_share_l1_2"]
_S_BID_SHARE_L3_5 = _S["bid_share_l3_5"]
_S_ASK_SHARE_L0 = _S["ask_share_l0"]
_S_ASK_SHARE_L1_2 = _S["ask_share_l1_2"]
_S_ASK_SHARE_L3_5 = _S["ask_share_l3_5"]
_S_IMBALANCE_1 = _S["imbalance_1"]
_S_BID_SLOPE = _S["bid_slope"]
_S_ASK_SLOPE = _S["ask_slope"]
_S_CONVEXITY = _S["convexity"]
_S_BID_GAP = _S["bid_gap"]
_S_ASK_GAP = _S["ask_gap"]
_S_DEPTH_REL = _S["depth_rel"]

_DEPTH_REL_CLIP = 5.0
_GAP_CLIP = 100.0


class TlobConfig(Frozen):
    """Windows and bounds of the ``tlob`` family."""

    depth_span: int = Field(
        500, ge=1, le=1_000_000, description="Rows of the trailing mean total depth (slots 10, 11, 15)."
    )
    clip: float = Field(
        20.0, ge=1, le=1_000, description="Bound of the depth slopes (slots 10, 11) and the convexity (12)."
    )


CONFIG = TlobConfig
"""The family's settings class (the plug-in contract, docs/feature-plugins.md): ``features.tlob``."""


@functools.lru_cache(maxsize=8)
def quadratic_weights(levels: int) -> np.ndarray:
    """[L] weights ``c`` with ``a2 = c . y``: the u^2 coefficient of the least-squares quadratic
    through ``(i / (L - 1), y_i)``; zeros for fewer than 3 levels. Read-only and remembered: a
    pseudo-inverse per call was a third of the family's time on a stream's one-row chunks."""
    if levels < 3:
        w = np.zeros(levels)
    else:
        u = np.arange(levels) / (levels - 1)
        vander = np.stack([np.ones(levels), u, u * u], axis=1)  # [L, 3]
        w = np.linalg.pinv(vander)[2]
    w.flags.writeable = False
    return w


@numba.njit(cache=True)
def _side_shape(px, sz, t, n_lev, tick):
    """(slope of cumulative depth vs. distance in ticks, mean extra gap in ticks) of one side."""
    n = 0
    sx = 0.0
    sy = 0.0
    sxx = 0.0
    sxy = 0.0
    cum = 0.0
    p0 = np.nan
    far = 0.0
    for i in range(n_lev):
        p = px[t, i]
        q = sz[t, i]
        if not (p == p) or q <= 0.0:
            continue
        cum += q
        if n == 0:
            p0 = p
        x = abs(p - p0) / tick
        far = x
        n += 1
        sx += x
        sy += cum
        sxx += x * x
        sxy += x * cum
    if n < 2:
        return 0.0, 0.0
    var = sxx - sx * sx / n
    slope = (sxy - sx * sy / n) / var if var > 0.0 else 0.0
    gap = far / (n - 1) - 1.0
    return slope, min(max(gap, 0.0), _GAP_CLIP)


@numba.njit(cache=True)
def _ratio(num, den):
    return num / den if den > 0.0 else 0.0


@numba.njit(cache=True)
def _tlob_kernel(seg, book_mask, bid_px, bid_sz, ask_px, ask_sz, tick, qw, n_depth, lim, st):
    """The rows' slots; ``st``: the carried (fresh, trailing mean depth), updated in place."""
    n, n_lev = bid_px.shape
    out = np.zeros((n, _WIDTH), np.float32)
    ks = (1, 3, 5, 10)
    fresh = st[0] != 0.0
    mean_t = st[1]
    for t in range(n):
        if seg[t]:
            fresh = True
        if not book_mask[t]:
            continue
        row = out[t]
        qb = 0.0
        qa = 0.0
        for i in range(n_lev):
            qb += bid_sz[t, i]
            qa += ask_sz[t, i]
        # depth profile
        b12 = 0.0
        a12 = 0.0
        b35 = 0.0
        a35 = 0.0
        for i in range(1, min(3, n_lev)):
            b12 += bid_sz[t, i]
            a12 += ask_sz[t, i]
        for i in range(3, min(6, n_lev)):
            b35 += bid_sz[t, i]
            a35 += ask_sz[t, i]
        row[_S_BID_SHARE_L0] = _ratio(bid_sz[t, 0], qb)
        row[_S_BID_SHARE_L1_2] = _ratio(b12, qb)
        row[_S_BID_SHARE_L3_5] = _ratio(b35, qb)
        row[_S_ASK_SHARE_L0] = _ratio(ask_sz[t, 0], qa)
        row[_S_ASK_SHARE_L1_2] = _ratio(a12, qa)
        row[_S_ASK_SHARE_L3_5] = _ratio(a35, qa)
        # cumulative imbalances
        cb = 0.0
        ca = 0.0
        j = 0
        for i in range(n_lev):
            cb += bid_sz[t, i]
            ca += ask_sz[t, i]
            while j < 4 and ks[j] == i + 1:
                row[_S_IMBALANCE_1 + j] = _ratio(cb - ca, cb + ca)
                j += 1
        while j < 4:  # fewer levels than k: all of them
            row[_S_IMBALANCE_1 + j] = _ratio(cb - ca, cb + ca)
            j += 1
        # trailing mean depth per level
        tot = qb + qa
        if fresh:
            mean_t = tot
            fresh = False
        else:
            mean_t += (tot - mean_t) / n_depth
        d_level = mean_t / (2.0 * n_lev)
        # slopes and gaps
        sb, gb = _side_shape(bid_px, bid_sz, t, n_lev, tick)
        sa, ga = _side_shape(ask_px, ask_sz, t, n_lev, tick)
        row[_S_BID_SLOPE] = min(max(_ratio(sb, d_level), 0.0), lim)
        row[_S_ASK_SLOPE] = min(max(_ratio(sa, d_level), 0.0), lim)
        row[_S_BID_GAP] = gb
        row[_S_ASK_GAP] = ga
        # convexity: a2 of the quadratic fit of the normalised level profile, mean over sides
        cv = 0.0
        ab = 0.0
        aa = 0.0
        for i in range(n_lev):
            ab += qw[i] * bid_sz[t, i]
            aa += qw[i] * ask_sz[t, i]
        cv = 0.5 * (_ratio(ab * n_lev, qb) + _ratio(aa * n_lev, qa))
        row[_S_CONVEXITY] = min(max(cv, -lim), lim)
        if tot > 0.0 and mean_t > 0.0:
            row[_S_DEPTH_REL] = min(max(np.log(tot / mean_t), -_DEPTH_REL_CLIP), _DEPTH_REL_CLIP)
    st[0] = 1.0 if fresh else 0.0
    st[1] = mean_t
    return out


def compute(inp: RowInput, params: TlobConfig, carry: Carry | None = None) -> np.ndarray:
    """float32 ``[len(inp), 16]``: the ``tlob`` slots (see the module docstring); ``carry``: the
    state of the rows before ``inp`` (foxhunt.features._kernels.Carry; None: the batch)."""
    n = len(inp)
    if n == 0:
        return np.zeros((0, len(SLOTS)), np.float32)
    carry = Carry() if carry is None else carry
    f = np.ascontiguousarray
    out = _tlob_kernel(
        f(inp.segment_start, np.bool_),
        f(inp.book_mask, np.bool_),
        f(inp.bid_px, np.float64),
        f(inp.bid_sz, np.float64),
        f(inp.ask_px, np.float64),
        f(inp.ask_sz, np.float64),
        float(inp.tick_size),
        quadratic_weights(inp.levels),
        float(params.depth_span),
        float(params.clip),
        carry.state("depth", (1.0, 0.0)),
    )
    out[~np.isfinite(out)] = 0.0
    carry.rows += n
    return out
