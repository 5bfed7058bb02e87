"""Order-flow family ``ofi`` (docs/design.md §2): multi-level order-flow imbalance and microstructure state.

Two numba passes over flat arrays: one over the book states (``inp.events``; each row's book when
``events`` is None) and one over the rows. Both are forward recursions, so row ``t`` only sees rows
and events ``<= t``; every recursion restarts at a segment start (new session or contract), where
lags read 0 and EMAs start from their first value.

Notation. Book of a row or event: bid/ask price ``p^b_i, p^a_i`` and size ``q^b_i, q^a_i`` at
level ``i`` (0 = touch, ``L`` = 10 levels), order counts ``c^b_i, c^a_i``. An empty level has NaN
price and size 0. ``EMA_N``: ``m_t = m_{t-1} + (x_t - m_{t-1}) / N`` (``m = x`` at the first row of
a segment), over rows whose book is real (``book_mask``); flow EMAs only over rows with
``flow_mask``. ``clip(x)`` is ``x`` clipped to ``±OfiConfig.clip``. Ratios with a zero denominator are 0.

Cont-Kukanov-Stoikov OFI of level ``i`` at event ``k`` (vs. event ``k - 1`` of the same segment; 0 at
the first event), an empty bid price read as ``-inf`` and an empty ask price as ``+inf``::

    e^b = q^b_k            if p^b_k > p^b_{k-1};  q^b_k - q^b_{k-1}  if equal;  -q^b_{k-1}  if lower
    e^a = q^a_k            if p^a_k < p^a_{k-1};  q^a_k - q^a_{k-1}  if equal;  -q^a_{k-1}  if higher
    e_i = e^b - e^a                                                        (:func:`cks_ofi`)

``E_{t,i}``: the sum of ``e_i`` over the events of row ``t``; ``D_i = EMA_depth_span((q^b_i + q^a_i)/2)``
the trailing mean depth of level ``i``.

=====  =======================  ============================================================================
slot   name                     formula (windows in rows unless stated)
=====  =======================  ============================================================================
0-4    ofi_l0 .. ofi_l4         clip(E_{t,i} / D_i), levels 0..4
5      ofi_deep                 clip(sum_{i=5..9} E_{t,i} / sum_{i=5..9} D_i)
6      ofi_total                X_t = clip(sum_i E_{t,i} / sum_i D_i) (all levels: integrated OFI)
7      ofi_accel                clip(X_t - EMA_fast(X)_{t-1}) (the flow's change vs. its trajectory; 0 at
                                segment start)
8-10   ofi_ema_fast/mid/slow    EMA_fast_span(X), EMA_mid_span(X), EMA_slow_span(X): OFI trajectory
11     vpin                     EMA_toxicity_span(|B_t - S_t|) / EMA_toxicity_span(V_t), with
                                B, S, V = EMA_toxicity_bucket_span of buy, sell, total volume (a
                                bucket-free VPIN in [0, 1]); 0 when flow_mask is False
12     toxicity_gradient        |B_t - S_t| / V_t - vpin (current vs. trailing toxicity), in [-1, 1]
13     realised_vol             sqrt(EMA_vol_fast_span(RV_t)) in ticks, RV_t = sum over the row's events of
                                the squared mid change in ticks (within segment; both mids defined);
                                clipped to [0, 1000]
14     vol_regime               (EMA_vol_fast(RV) - EMA_vol_slow(RV)) / (sum of both): regime score
15     hawkes_rate              log(1 + lambda_f(ts_t)), lambda_tau(s) = (1/tau) sum_{event k <= s}
                                exp(-(s - ts_k)/tau) in events per second, tau = hawkes_fast_seconds
16     hawkes_ratio             (lambda_f - lambda_s) / (lambda_f + lambda_s), tau_s = hawkes_slow_seconds
17     book_pressure            sum_i w_i (q^b_i - q^a_i) / sum_i w_i (q^b_i + q^a_i), w_i = exp(-decay i)
18     spread_ticks             (p^a_0 - p^b_0) / tick, clipped to [-100, 100]; 0 if a side is empty
19     spread_change            spread_ticks_t - spread_ticks_{t-1} (0 at segment start or if either is 0)
20     spread_dev               spread_ticks - EMA_slow_span(spread_ticks) (over rows with both sides)
21     aggression               B_t / (B_t + S_t) - 1/2 (flow-weighted over toxicity_bucket_span)
22     aggression_row           buy / (buy + sell) - 1/2 of this row's trades
23     trade_flow               clip((B_t - S_t) / D_0): net aggressor volume in touch queues
24     queue_depletion_asym     EMA_fast(d^b - d^a) / EMA_fast(d^b + d^a); d^s = the row's sum over events
                                of the touch queue depleted on side s (the whole previous queue when
                                the touch moved away from the mid, the size decrease when it stayed);
                                > 0: the bid is being eaten faster (bearish), in [-1, 1]
25     order_count_flux         clip((C_t - C_{t-1}) / EMA_depth_span(C)), C = sum_i (c^b_i + c^a_i);
                                0 at segment start
26     intrabar_momentum        (close - open) / (high - low) of the row's price path, in [-1, 1]
27     order_count_imbalance    (sum_i c^b_i - sum_i c^a_i) / sum_i (c^b_i + c^a_i)
28     microprice_residual      (microprice - mid) / mid,
                                microprice = (p^b_0 q^a_0 + p^a_0 q^b_0) / (q^b_0 + q^a_0)
29     l1_imbalance_ema         S = EMA over *events* (horizon imbalance_horizon_events) of
                                I = (q^b_0 - q^a_0)/(q^b_0 + q^a_0), at the row's last event (carried
                                over rows without events): the synthetic market's alpha carrier
30     l1_imbalance_ema_slow    the same with horizon imbalance_slow_horizon_events
31     ofi_l0_ema               EMA_mid_span(ofi_l0): touch OFI trajectory
32     trade_sign_ema           F = EMA over *market orders* (horizon trade_sign_horizon_trades) of the
                                aggressor sign (+1 buy, -1 sell), at the row's last event (carried over
                                rows without events); a market order is a trade state (action T) whose
                                touch prices equal the previous state's (a sweep that moved them is
                                not one), 0 before the segment's first: the trade-flow market's carrier
                                (data.synth.trade_flow_signal); 0 on a book without trade states (one
                                rebuilt from MBO)
=====  =======================  ============================================================================

Rows with ``book_mask`` False are all 0 and leave every recursion untouched; flow slots (11, 12,
21-23) are 0 on rows with ``flow_mask`` False.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
from pydantic import Field, model_validator

import foxhunt.jit  # noqa: F401  (before the kernels: their cache is stamped with the package)
from foxhunt.config.base import Frozen
from foxhunt.features._kernels import Carry
from foxhunt.features.frame import EventInput, RowInput

SLOTS: tuple[str, ...] = (
    "ofi_l0",
    "ofi_l1",
    "ofi_l2",
    "ofi_l3",
    "ofi_l4",
    "ofi_deep",
    "ofi_total",
    "ofi_accel",
    "ofi_ema_fast",
    "ofi_ema_mid",
    "ofi_ema_slow",
    "vpin",
    "toxicity_gradient",
    "realised_vol",
    "vol_regime",
    "hawkes_rate",
    "hawkes_ratio",
    "book_pressure",
    "spread_ticks",
    "spread_change",
    "spread_dev",
    "aggression",
    "aggression_row",
    "trade_flow",
    "queue_depletion_asym",
    "order_count_flux",
    "intrabar_momentum",
    "order_count_imbalance",
    "microprice_residual",
    "l1_imbalance_ema",
    "l1_imbalance_ema_slow",
    "ofi_l0_ema",
    "trade_sign_ema",
)
NEEDS_BOOK = True
# Slots that need the book beyond the touch (levels 1-9, or all levels summed): the stack sets
# them to 0 (masked) on top-of-book input. Slots that need trades: 0 (masked) on rows without.
DEPTH_SLOTS: tuple[str, ...] = (
    "ofi_l1",
    "ofi_l2",
    "ofi_l3",
    "ofi_l4",
    "ofi_deep",
    "ofi_total",
    "ofi_accel",
    "ofi_ema_fast",
    "ofi_ema_mid",
    "ofi_ema_slow",
    "book_pressure",
    "order_count_flux",
    "order_count_imbalance",
)
TRADE_SLOTS: tuple[str, ...] = ("vpin", "toxicity_gradient", "aggression", "aggression_row", "trade_flow")

# The long/short mirror's declarations (the family contract in foxhunt.features.registry).
MIRROR_ODD: frozenset[str] = frozenset(
    s
    for s in SLOTS
    if s.startswith(("ofi_", "l1_imbalance", "aggression"))
    or s
    in (
        "book_pressure",
        "trade_flow",
        "trade_sign_ema",
        "queue_depletion_asym",
        "intrabar_momentum",
        "order_count_imbalance",
        "microprice_residual",
    )
)
MIRROR_SWAPS: tuple[tuple[str, str], ...] = ()

_WIDTH = len(SLOTS)
_S = {name: i for i, name in enumerate(SLOTS)}  # slot -> column, for the kernels
_S_OFI_L0 = _S["ofi_l0"]
_S_OFI_DEEP = _S["ofi_deep"]
_S_OFI_TOTAL = _S["ofi_total"]
_S_OFI_ACCEL = _S["ofi_accel"]
_S_OFI_EMA_FAST = _S["ofi_ema_fast"]
_S_OFI_EMA_MID = _S["ofi_ema_mid"]
_S_OFI_EMA_SLOW = _S["ofi_ema_slow"]
_S_VPIN = _S["vpin"]
_S_TOXICITY_GRADIENT = _S["toxicity_gradient"]
_S_REALISED_VOL = _S["realised_vol"]
_S_VOL_REGIME = _S["vol_regime"]
_S_HAWKES_RATE = _S["hawkes_rate"]
_S_HAWKES_RATIO = _S["hawkes_ratio"]
_S_BOOK_PRESSURE = _S["book_pressure"]
_S_SPREAD_TICKS = _S["spread_ticks"]
_S_SPREAD_CHANGE = _S["spread_change"]
_S_SPREAD_DEV = _S["spread_dev"]
_S_AGGRESSION = _S["aggression"]
_S_AGGRESSION_ROW = _S["aggression_row"]
_S_TRADE_FLOW = _S["trade_flow"]
_S_QUEUE_DEPLETION_ASYM = _S["queue_depletion_asym"]
_S_ORDER_COUNT_FLUX = _S["order_count_flux"]
_S_INTRABAR_MOMENTUM = _S["intrabar_momentum"]
_S_ORDER_COUNT_IMBALANCE = _S["order_count_imbalance"]
_S_MICROPRICE_RESIDUAL = _S["microprice_residual"]
_S_L1_IMBALANCE_EMA = _S["l1_imbalance_ema"]
_S_L1_IMBALANCE_EMA_SLOW = _S["l1_imbalance_ema_slow"]
_S_OFI_L0_EMA = _S["ofi_l0_ema"]
_S_TRADE_SIGN_EMA = _S["trade_sign_ema"]

_SEPARATE_LEVELS = 5  # ofi_l0 .. ofi_l4; levels 5.. go to ofi_deep


class OfiConfig(Frozen):
    """Windows of the ``ofi`` family (EMA horizons ``N`` in rows unless stated: ``m += (x - m) / N``)."""

    depth_span: int = Field(
        100, ge=1, le=100_000, description="Rows of the trailing mean depth per level (D_i) and order count."
    )
    fast_span: int = Field(5, ge=1, le=100_000, description="Rows of the fast OFI trajectory EMA.")
    mid_span: int = Field(20, ge=1, le=100_000, description="Rows of the medium OFI trajectory EMA.")
    slow_span: int = Field(
        100, ge=1, le=100_000, description="Rows of the slow OFI trajectory EMA and of the spread's mean."
    )
    toxicity_bucket_span: int = Field(
        20, ge=1, le=100_000, description="Rows of the buy/sell/volume EMAs that play VPIN's volume bucket."
    )
    toxicity_span: int = Field(
        200, ge=1, le=1_000_000, description="Rows over which VPIN averages the bucket imbalances."
    )
    vol_fast_span: int = Field(20, ge=1, le=100_000, description="Rows of the fast realised-variance EMA.")
    vol_slow_span: int = Field(
        500, ge=1, le=1_000_000, description="Rows of the slow realised-variance EMA (regime baseline)."
    )
    hawkes_fast_seconds: float = Field(
        1.0, gt=0, le=86_400, description="Decay time (s) of the fast Hawkes-style event intensity."
    )
    hawkes_slow_seconds: float = Field(
        60.0, gt=0, le=86_400, description="Decay time (s) of the slow (baseline) event intensity."
    )
    pressure_decay: float = Field(
        0.3, ge=0, le=10, description="Book pressure level weight w_i = exp(-pressure_decay * i)."
    )
    imbalance_horizon_events: int = Field(
        50, ge=1, le=100_000, description="Events H of the level-1 imbalance EMA (synthetic alpha carrier)."
    )
    imbalance_slow_horizon_events: int = Field(
        500, ge=1, le=1_000_000, description="Events of the slow level-1 imbalance EMA."
    )
    trade_sign_horizon_trades: int = Field(
        200,
        ge=1,
        le=1_000_000,
        description="Market orders N of the EMA of their aggressor signs (trade_sign_ema), in trades.",
    )
    clip: float = Field(
        10.0, ge=1, le=1_000, description="Bound of the depth-normalised flow ratios (slots 0-7, 23, 25)."
    )

    @model_validator(mode="after")
    def _ordered(self) -> OfiConfig:
        if not self.fast_span <= self.mid_span <= self.slow_span:
            raise ValueError(
                f"ofi spans must satisfy fast_span <= mid_span <= slow_span, got "
                f"{self.fast_span}, {self.mid_span}, {self.slow_span}"
            )
        return self


CONFIG = OfiConfig
"""The family's settings class (the plug-in contract, docs/feature-plugins.md): ``features.ofi``."""


# --- event pass -------------------------------------------------------------------------------


@numba.njit(cache=True)
def _side_flow(p_prev: float, q_prev: float, p_cur: float, q_cur: float, sign: float) -> float:
    """CKS contribution of one side; ``sign`` = +1 for bids (higher is better), -1 for asks.

    An empty level (NaN price) counts as the worst possible price of its side.
    """
    prev_ok = p_prev == p_prev
    cur_ok = p_cur == p_cur
    if not prev_ok and not cur_ok:
        return 0.0
    if not prev_ok:
        return q_cur
    if not cur_ok:
        return -q_prev
    d = (p_cur - p_prev) * sign
    if d > 0.0:
        return q_cur
    if d < 0.0:
        return -q_prev
    return q_cur - q_prev


@numba.njit(cache=True)
def _cks_ofi_kernel(bid_px, bid_sz, ask_px, ask_sz, reset):
    m, n_lev = bid_px.shape
    out = np.zeros((m, n_lev))
    for k in range(m):
        if reset[k] or k == 0:
            continue
        for i in range(n_lev):
            eb = _side_flow(bid_px[k - 1, i], bid_sz[k - 1, i], bid_px[k, i], bid_sz[k, i], 1.0)
            ea = _side_flow(ask_px[k - 1, i], ask_sz[k - 1, i], ask_px[k, i], ask_sz[k, i], -1.0)
            out[k, i] = eb - ea
    return out


def cks_ofi(
    bid_px: np.ndarray, bid_sz: np.ndarray, ask_px: np.ndarray, ask_sz: np.ndarray, reset: np.ndarray
) -> np.ndarray:
    """[m, L] Cont-Kukanov-Stoikov order-flow imbalance ``e_i`` of each book state vs. the previous one.

    ``reset[k]`` (bool ``[m]``) marks a state with no predecessor in its segment (its OFI is 0).
    """
    f = np.ascontiguousarray
    return _cks_ofi_kernel(
        f(bid_px, np.float64),
        f(bid_sz, np.float64),
        f(ask_px, np.float64),
        f(ask_sz, np.float64),
        f(reset, np.bool_),
    )


class RowEvents(NamedTuple):
    """[n] per-row results of the event pass: sums over the row's events and the event-level
    recursions sampled at its last event."""

    ofi: np.ndarray  # [n, L] E_{t,i}
    rv: np.ndarray  # RV_t: squared mid changes, ticks^2
    dep_b: np.ndarray  # d^b, d^a: touch queue depleted on each side
    dep_a: np.ndarray
    has_ev: np.ndarray  # bool: the row holds an event
    lam_f: np.ndarray  # intensities just after the row's last event, events/s
    lam_s: np.ndarray
    t_last: np.ndarray  # int64 ns: the row's last event's time
    imb_f: np.ndarray  # imbalance EMAs at the row's last event
    imb_s: np.ndarray
    flow: np.ndarray  # the market orders' sign EMA at the row's last event


# What the event pass carries from one chunk to the next: the intensities, imbalance EMAs and the
# market orders' sign EMA just after the last event.
EVENT_STATE = np.dtype(
    [
        ("lam_f", np.float64),
        ("lam_s", np.float64),
        ("imb_f", np.float64),
        ("imb_s", np.float64),
        ("flow", np.float64),
    ],
    align=True,
)
EVENT_FRESH = np.zeros(1, EVENT_STATE)


@numba.njit(cache=True)
def _event_pass(
    ev_row, ev_ts, reset, bid_px, bid_sz, ask_px, ask_sz, sign,  # [m] / [m, L] the events
    n_rows, tick, tau_f, tau_s, h_fast, h_slow, h_flow, start, st,
):  # fmt: skip
    """Per-row sums of event flows and the event-level recursions sampled at each row's last event.

    Events from ``start`` (the one before it: the last event of the previous chunk); ``st``: the
    carried :data:`EVENT_STATE`, updated in place. Returns :class:`RowEvents`."""
    m, n_lev = bid_px.shape
    ofi = np.zeros((n_rows, n_lev))
    rv = np.zeros(n_rows)
    dep_b = np.zeros(n_rows)
    dep_a = np.zeros(n_rows)
    has_ev = np.zeros(n_rows, np.bool_)
    lam_f = np.zeros(n_rows)  # intensities just after the row's last event
    lam_s = np.zeros(n_rows)
    t_last = np.zeros(n_rows, np.int64)
    imb_f = np.zeros(n_rows)
    imb_s = np.zeros(n_rows)
    flow = np.zeros(n_rows)
    lf = st.lam_f
    ls = st.lam_s
    sf = st.imb_f
    ss = st.imb_s
    fl = st.flow
    for k in range(start, m):
        r = ev_row[k]
        b0 = bid_sz[k, 0]
        a0 = ask_sz[k, 0]
        imb = (b0 - a0) / (b0 + a0) if b0 + a0 > 0.0 else 0.0
        first = reset[k] or k == 0
        if first:
            lf = 1.0 / tau_f
            ls = 1.0 / tau_s
            sf = imb
            ss = imb
            fl = 0.0  # no market order of the segment yet (the first state has no touch before it)
        else:
            dt = (ev_ts[k] - ev_ts[k - 1]) * 1e-9
            if dt < 0.0:
                dt = 0.0
            lf = lf * np.exp(-dt / tau_f) + 1.0 / tau_f
            ls = ls * np.exp(-dt / tau_s) + 1.0 / tau_s
            sf += (imb - sf) / h_fast
            ss += (imb - ss) / h_slow
            # a market order: a trade that left both touch prices where they were (a sweep moved
            # them; NaN, an empty touch, equals nothing), F <- F + (sign - F) / N
            if sign[k] != 0.0 and bid_px[k, 0] == bid_px[k - 1, 0] and ask_px[k, 0] == ask_px[k - 1, 0]:
                fl += (sign[k] - fl) / h_flow
            for i in range(n_lev):
                eb = _side_flow(bid_px[k - 1, i], bid_sz[k - 1, i], bid_px[k, i], bid_sz[k, i], 1.0)
                ea = _side_flow(ask_px[k - 1, i], ask_sz[k - 1, i], ask_px[k, i], ask_sz[k, i], -1.0)
                ofi[r, i] += eb - ea
            mid0 = 0.5 * (bid_px[k - 1, 0] + ask_px[k - 1, 0])
            mid1 = 0.5 * (bid_px[k, 0] + ask_px[k, 0])
            if mid0 == mid0 and mid1 == mid1:
                dm = (mid1 - mid0) / tick
                rv[r] += dm * dm
            # touch queue depletion: the whole queue if the touch moved away, else the decrease
            pb0 = bid_px[k - 1, 0]
            pb1 = bid_px[k, 0]
            if pb0 == pb0:
                if not (pb1 == pb1) or pb1 < pb0:
                    dep_b[r] += bid_sz[k - 1, 0]
                elif pb1 == pb0 and bid_sz[k, 0] < bid_sz[k - 1, 0]:
                    dep_b[r] += bid_sz[k - 1, 0] - bid_sz[k, 0]
            pa0 = ask_px[k - 1, 0]
            pa1 = ask_px[k, 0]
            if pa0 == pa0:
                if not (pa1 == pa1) or pa1 > pa0:
                    dep_a[r] += ask_sz[k - 1, 0]
                elif pa1 == pa0 and ask_sz[k, 0] < ask_sz[k - 1, 0]:
                    dep_a[r] += ask_sz[k - 1, 0] - ask_sz[k, 0]
        has_ev[r] = True
        lam_f[r] = lf
        lam_s[r] = ls
        t_last[r] = ev_ts[k]
        imb_f[r] = sf
        imb_s[r] = ss
        flow[r] = fl
    st.lam_f = lf
    st.lam_s = ls
    st.imb_f = sf
    st.imb_s = ss
    st.flow = fl
    return RowEvents(ofi, rv, dep_b, dep_a, has_ev, lam_f, lam_s, t_last, imb_f, imb_s, flow)


# --- row pass ---------------------------------------------------------------------------------


class RowSeries(NamedTuple):
    """[n] per-row inputs of the row pass (numba reads them by name)."""

    ts: np.ndarray  # int64 ns
    segment_start: np.ndarray  # bool
    book_mask: np.ndarray  # bool: the row's book is real
    flow_mask: np.ndarray  # bool: the row has trades
    open: np.ndarray  # float64 price path of the row
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    buy: np.ndarray  # float64 aggressor volumes
    sell: np.ndarray


class RowBook(NamedTuple):
    """[n, L] float64: each row's book (price NaN and size 0 on an empty level)."""

    bid_px: np.ndarray
    bid_sz: np.ndarray
    ask_px: np.ndarray
    ask_sz: np.ndarray
    bid_ct: np.ndarray
    ask_ct: np.ndarray


# The row pass's constants, one record: the tick and the windows of OfiConfig (EMA horizons in rows).
ROW_PARAMS = np.dtype(
    [
        ("tick", np.float64),
        ("n_depth", np.float64),  # depth_span
        ("n_fast", np.float64),  # fast_span
        ("n_mid", np.float64),  # mid_span
        ("n_slow", np.float64),  # slow_span
        ("n_bucket", np.float64),  # toxicity_bucket_span
        ("n_tox", np.float64),  # toxicity_span
        ("n_vf", np.float64),  # vol_fast_span
        ("n_vs", np.float64),  # vol_slow_span
        ("tau_f", np.float64),  # hawkes_fast_seconds
        ("tau_s", np.float64),  # hawkes_slow_seconds
        ("decay", np.float64),  # pressure_decay
        ("clip", np.float64),
    ],
    align=True,
)

# What the row pass carries from one row (and chunk) to the next, one record; the symbols are
# those of the module table.
ROW_STATE = np.dtype(
    [
        ("fresh", np.bool_),  # the next real row starts a segment
        ("flow_fresh", np.bool_),  # the next row with trades starts the flow EMAs
        ("x_fast", np.float64),  # EMA_fast(X), X = ofi_total
        ("x_mid", np.float64),
        ("x_slow", np.float64),
        ("l0_mid", np.float64),  # EMA_mid(ofi_l0)
        ("buy", np.float64),  # B, S, V: bucket EMAs of buy, sell, total volume
        ("sell", np.float64),
        ("volume", np.float64),
        ("tox_num", np.float64),  # EMA_toxicity(|B - S|)
        ("tox_den", np.float64),  # EMA_toxicity(V)
        ("rv_fast", np.float64),  # EMA_vol_fast(RV), EMA_vol_slow(RV)
        ("rv_slow", np.float64),
        ("spread_prev", np.float64),  # spread_ticks of the previous real row
        ("spread_mean", np.float64),  # EMA_slow(spread_ticks) ...
        ("spread_mean_ok", np.bool_),  # ... once a row with both sides has started it
        ("dep_num", np.float64),  # EMA_fast(d^b - d^a), EMA_fast(d^b + d^a)
        ("dep_den", np.float64),
        ("count_prev", np.float64),  # C of the previous real row
        ("count_mean", np.float64),  # EMA_depth(C)
        ("ev_ok", np.bool_),  # the segment has had an event: the samples below are its last
        ("ev_lf", np.float64),  # lambda_f, lambda_s just after the last event
        ("ev_ls", np.float64),
        ("ev_sf", np.float64),  # the imbalance EMAs at the last event
        ("ev_ss", np.float64),
        ("ev_fl", np.float64),  # the market orders' sign EMA at the last event
        ("ev_t", np.int64),  # its time, ns
    ],
    align=True,
)
ROW_FRESH = np.zeros(1, ROW_STATE)  # a segment to start (flow too), every EMA and event sample unset
ROW_FRESH["fresh"] = ROW_FRESH["flow_fresh"] = True


@numba.njit(cache=True)
def _ratio(num: float, den: float) -> float:
    return num / den if den > 0.0 else 0.0


@numba.njit(cache=True)
def _clip(x: float, lim: float) -> float:
    return min(max(x, -lim), lim)


@numba.njit(cache=True, inline="always")
def _ofi_slots(out, t, book, ofi, depth, st, p):
    """Slots 0-10 and 31: depth-normalised OFI per level, deep and total, and their trajectories;
    updates D_i (``depth``) and the OFI EMAs."""
    n_lev = depth.shape[0]
    n_sep = min(_SEPARATE_LEVELS, n_lev)
    lim = p.clip
    tot_e = 0.0
    tot_d = 0.0
    deep_e = 0.0
    deep_d = 0.0
    for i in range(n_lev):
        dl = 0.5 * (book.bid_sz[t, i] + book.ask_sz[t, i])
        if st.fresh:
            depth[i] = dl
        else:
            depth[i] += (dl - depth[i]) / p.n_depth
        e = ofi[t, i]
        tot_e += e
        tot_d += depth[i]
        if i < n_sep:
            out[t, _S_OFI_L0 + i] = _clip(_ratio(e, depth[i]), lim)
        else:
            deep_e += e
            deep_d += depth[i]
    out[t, _S_OFI_DEEP] = _clip(_ratio(deep_e, deep_d), lim)
    x = _clip(_ratio(tot_e, tot_d), lim)
    out[t, _S_OFI_TOTAL] = x
    l0 = out[t, _S_OFI_L0]
    if st.fresh:
        out[t, _S_OFI_ACCEL] = 0.0
        st.x_fast = st.x_mid = st.x_slow = x
        st.l0_mid = l0
    else:
        out[t, _S_OFI_ACCEL] = _clip(x - st.x_fast, lim)
        st.x_fast += (x - st.x_fast) / p.n_fast
        st.x_mid += (x - st.x_mid) / p.n_mid
        st.x_slow += (x - st.x_slow) / p.n_slow
        st.l0_mid += (l0 - st.l0_mid) / p.n_mid
    out[t, _S_OFI_EMA_FAST] = st.x_fast
    out[t, _S_OFI_EMA_MID] = st.x_mid
    out[t, _S_OFI_EMA_SLOW] = st.x_slow
    out[t, _S_OFI_L0_EMA] = st.l0_mid


@numba.njit(cache=True, inline="always")
def _flow_slots(out, t, b, s, depth0, st, p):
    """Slots 11-12 and 21-23 of a row with trades (``b``, ``s``: its buy and sell volume): the
    bucket-free VPIN, toxicity gradient, aggression and trade flow; updates the flow EMAs."""
    v = b + s
    if st.flow_fresh:
        st.buy = b
        st.sell = s
        st.volume = v
        st.tox_num = abs(b - s)
        st.tox_den = v
        st.flow_fresh = False
    else:
        st.buy += (b - st.buy) / p.n_bucket
        st.sell += (s - st.sell) / p.n_bucket
        st.volume += (v - st.volume) / p.n_bucket
        st.tox_num += (abs(st.buy - st.sell) - st.tox_num) / p.n_tox
        st.tox_den += (st.volume - st.tox_den) / p.n_tox
    bb = st.buy
    ss = st.sell
    vpin = min(_ratio(st.tox_num, st.tox_den), 1.0)
    out[t, _S_VPIN] = vpin
    out[t, _S_TOXICITY_GRADIENT] = min(_ratio(abs(bb - ss), st.volume), 1.0) - vpin
    out[t, _S_AGGRESSION] = _ratio(bb, bb + ss) - 0.5 if bb + ss > 0.0 else 0.0
    out[t, _S_AGGRESSION_ROW] = b / v - 0.5 if v > 0.0 else 0.0
    out[t, _S_TRADE_FLOW] = _clip(_ratio(bb - ss, depth0), p.clip)


@numba.njit(cache=True, inline="always")
def _vol_slots(out, t, rv, st, p):
    """Slots 13-14: realised volatility (ticks) and its regime score from the row's RV_t ``rv``."""
    if st.fresh:
        st.rv_fast = st.rv_slow = rv
    else:
        st.rv_fast += (rv - st.rv_fast) / p.n_vf
        st.rv_slow += (rv - st.rv_slow) / p.n_vs
    out[t, _S_REALISED_VOL] = min(np.sqrt(st.rv_fast), 1000.0)
    out[t, _S_VOL_REGIME] = _ratio(st.rv_fast - st.rv_slow, st.rv_fast + st.rv_slow)


@numba.njit(cache=True, inline="always")
def _event_slots(out, t, ts, st, p):
    """Slots 15-16, 29-30 and 32 from the segment's last event: the Hawkes-style intensities decayed
    to the row's time ``ts``, lambda(s) = lambda(ts_k) exp(-(s - ts_k)/tau), the imbalance EMAs and
    the market orders' sign EMA."""
    dt = max((ts - st.ev_t) * 1e-9, 0.0)
    rf = st.ev_lf * np.exp(-dt / p.tau_f)
    rs = st.ev_ls * np.exp(-dt / p.tau_s)
    out[t, _S_HAWKES_RATE] = np.log1p(rf)
    out[t, _S_HAWKES_RATIO] = _ratio(rf - rs, rf + rs)
    out[t, _S_L1_IMBALANCE_EMA] = st.ev_sf
    out[t, _S_L1_IMBALANCE_EMA_SLOW] = st.ev_ss
    out[t, _S_TRADE_SIGN_EMA] = st.ev_fl


@numba.njit(cache=True, inline="always")
def _book_slots(out, t, book, w, st, p):
    """Slots 17-20 and 27-28 from the row's book: pressure, spread and its change and deviation,
    order-count imbalance, microprice residual. Returns C, the row's total order count."""
    num = 0.0
    den = 0.0
    cb = 0.0
    ca = 0.0
    for i in range(w.shape[0]):
        num += w[i] * (book.bid_sz[t, i] - book.ask_sz[t, i])
        den += w[i] * (book.bid_sz[t, i] + book.ask_sz[t, i])
        cb += book.bid_ct[t, i]
        ca += book.ask_ct[t, i]
    out[t, _S_BOOK_PRESSURE] = _ratio(num, den)
    pb = book.bid_px[t, 0]
    pa = book.ask_px[t, 0]
    both = pb == pb and pa == pa
    sp = min(max((pa - pb) / p.tick, -100.0), 100.0) if both else 0.0
    out[t, _S_SPREAD_TICKS] = sp
    if not st.fresh and sp != 0.0 and st.spread_prev != 0.0:
        out[t, _S_SPREAD_CHANGE] = sp - st.spread_prev
    st.spread_prev = sp
    if st.fresh:
        st.spread_mean_ok = False
    if both:
        if not st.spread_mean_ok:
            st.spread_mean = sp
            st.spread_mean_ok = True
        else:
            st.spread_mean += (sp - st.spread_mean) / p.n_slow
        out[t, _S_SPREAD_DEV] = sp - st.spread_mean
    qb = book.bid_sz[t, 0]
    qa = book.ask_sz[t, 0]
    if both and qb + qa > 0.0:
        mid = 0.5 * (pa + pb)
        micro = (pb * qa + pa * qb) / (qb + qa)
        out[t, _S_MICROPRICE_RESIDUAL] = (micro - mid) / mid if mid != 0.0 else 0.0
    cnt = cb + ca
    out[t, _S_ORDER_COUNT_IMBALANCE] = _ratio(cb - ca, cnt)
    return cnt


@numba.njit(cache=True, inline="always")
def _queue_slots(out, t, dep_b, dep_a, cnt, st, p):
    """Slots 24-25: queue-depletion asymmetry from the row's depletions ``dep_b``, ``dep_a``, and the
    order-count flux of its total order count ``cnt``."""
    d_diff = dep_b - dep_a
    d_sum = dep_b + dep_a
    if st.fresh:
        st.dep_num = d_diff
        st.dep_den = d_sum
    else:
        st.dep_num += (d_diff - st.dep_num) / p.n_fast
        st.dep_den += (d_sum - st.dep_den) / p.n_fast
    out[t, _S_QUEUE_DEPLETION_ASYM] = _clip(_ratio(st.dep_num, st.dep_den), 1.0)
    if st.fresh:
        st.count_mean = cnt
    else:
        st.count_mean += (cnt - st.count_mean) / p.n_depth
        out[t, _S_ORDER_COUNT_FLUX] = _clip(_ratio(cnt - st.count_prev, st.count_mean), p.clip)
    st.count_prev = cnt


@numba.njit(cache=True)
def _row_pass(rows, book, ev, p, st, depth):
    """float32 ``[n, len(SLOTS)]``: the slots of each row (:class:`RowSeries`, :class:`RowBook`) from the
    event pass's per-row sums ``ev`` (:class:`RowEvents`), constants ``p`` (:data:`ROW_PARAMS`);
    ``st`` (:data:`ROW_STATE`) and ``depth`` (D_i, [L]) are carried and updated in place."""
    n, n_lev = book.bid_px.shape
    out = np.zeros((n, _WIDTH), np.float32)
    w = np.empty(n_lev)
    for i in range(n_lev):
        w[i] = np.exp(-p.decay * i)  # book pressure weights
    for t in range(n):
        if rows.segment_start[t]:
            st.fresh = True
            st.flow_fresh = True
            st.ev_ok = False
        if ev.has_ev[t]:  # sample the event recursions at the row's last event
            st.ev_ok = True
            st.ev_lf = ev.lam_f[t]
            st.ev_ls = ev.lam_s[t]
            st.ev_sf = ev.imb_f[t]
            st.ev_ss = ev.imb_s[t]
            st.ev_fl = ev.flow[t]
            st.ev_t = ev.t_last[t]
        if not rows.book_mask[t]:
            continue
        _ofi_slots(out, t, book, ev.ofi, depth, st, p)
        if rows.flow_mask[t]:
            _flow_slots(out, t, rows.buy[t], rows.sell[t], depth[0], st, p)
        _vol_slots(out, t, ev.rv[t], st, p)
        if st.ev_ok:
            _event_slots(out, t, rows.ts[t], st, p)
        cnt = _book_slots(out, t, book, w, st, p)
        _queue_slots(out, t, ev.dep_b[t], ev.dep_a[t], cnt, st, p)
        rng = rows.high[t] - rows.low[t]  # intra-row momentum of the row's price path
        c, o = rows.close[t], rows.open[t]
        if rng > 0.0 and c == c and o == o:
            out[t, _S_INTRABAR_MOMENTUM] = _clip((c - o) / rng, 1.0)
        st.fresh = False
    return out


# --- entry point ------------------------------------------------------------------------------


def book_events(inp: RowInput) -> EventInput:
    """``inp.events``, or each row's own book as one event per row when ``events`` is None."""
    if inp.events is not None:
        return inp.events
    return EventInput(
        row=np.arange(len(inp), dtype=np.int64),
        ts=inp.ts,
        segment_start=inp.segment_start,
        bid_px=inp.bid_px,
        ask_px=inp.ask_px,
        bid_sz=inp.bid_sz,
        ask_sz=inp.ask_sz,
        bid_ct=inp.bid_ct,
        ask_ct=inp.ask_ct,
    )


def event_reset(inp: RowInput, ev: EventInput, carry: Carry | None = None) -> np.ndarray:
    """[m] bool: the event has no predecessor in its segment.

    True at ``ev.segment_start`` and wherever the event's row is in another segment than the
    previous event's row (robust to a segment whose first row holds no event). ``carry`` (a chunk
    of rows, foxhunt.features._kernels.Carry): the segments and the last event before ``inp``; it
    is advanced past ``inp``.
    """
    carry = Carry() if carry is None else carry
    seen = carry.ints("events", (0, 0, -1))  # segments before inp, an event before it, its segment
    row_seg = seen[0] + np.cumsum(inp.segment_start)
    reset = np.ones(len(ev), bool)
    if len(ev):
        seg_of = row_seg[ev.row]
        reset[1:] = ev.segment_start[1:] | (seg_of[1:] != seg_of[:-1])
        if seen[1]:
            reset[0] = bool(ev.segment_start[0]) or int(seg_of[0]) != int(seen[2])
        seen[1], seen[2] = 1, int(seg_of[-1])
    seen[0] = int(row_seg[-1]) if len(row_seg) else int(seen[0])
    return reset


_EVENT_BOOK = ("bid_px", "bid_sz", "ask_px", "ask_sz")


def with_last_event(ev: EventInput, reset: np.ndarray, carry: Carry) -> tuple[dict[str, np.ndarray], int]:
    """The events' arrays for a kernel that reads each event's predecessor: with the last event of
    the previous chunk (``carry``) in front when the first one continues its segment, and the index
    to start from (1 then, else 0); the chunk's last event is kept in ``carry`` for the next."""
    f = np.ascontiguousarray
    arrays = {k: f(getattr(ev, k), np.float64) for k in _EVENT_BOOK}
    arrays["ts"], arrays["row"] = f(ev.ts, np.int64), f(ev.row, np.int64)
    arrays["sign"] = np.zeros(len(ev)) if ev.trade_sign is None else f(ev.trade_sign, np.float64)
    arrays["reset"] = reset
    start = 0
    if "event.ts" in carry.tails and len(ev) and not reset[0]:
        start = 1
        for k in (*_EVENT_BOOK, "ts"):
            arrays[k] = np.concatenate([carry.tails[f"event.{k}"], arrays[k]])
        arrays["row"] = np.concatenate([[0], arrays["row"]])  # never written: the loop starts after it
        arrays["sign"] = np.concatenate([[0.0], arrays["sign"]])  # never read, as the row
        arrays["reset"] = np.concatenate([[True], reset])
    if len(ev):
        for k in (*_EVENT_BOOK, "ts"):
            carry.tails[f"event.{k}"] = arrays[k][-1:].copy()
    return arrays, start


# ROW_PARAMS field -> the OfiConfig window it holds (the rest are the tick and OfiConfig fields by name).
_SPANS = {
    "n_depth": "depth_span", "n_fast": "fast_span", "n_mid": "mid_span", "n_slow": "slow_span",
    "n_bucket": "toxicity_bucket_span", "n_tox": "toxicity_span", "n_vf": "vol_fast_span",
    "n_vs": "vol_slow_span", "tau_f": "hawkes_fast_seconds", "tau_s": "hawkes_slow_seconds",
    "decay": "pressure_decay", "clip": "clip",
}  # fmt: skip


def row_params(tick: float, params: OfiConfig) -> np.void:
    """The row pass's constants: one :data:`ROW_PARAMS` record."""
    p = np.zeros(1, ROW_PARAMS)[0]
    p["tick"] = tick
    for field, name in _SPANS.items():
        p[field] = float(getattr(params, name))
    return p


_PRICE_PATH_AND_FLOW = ("open", "high", "low", "close", "buy_volume", "sell_volume")


def row_arrays(inp: RowInput) -> tuple[RowSeries, RowBook]:
    """The rows of ``inp`` as the row pass reads them (contiguous, in its dtypes)."""
    f = np.ascontiguousarray
    series = RowSeries(
        f(inp.ts, np.int64),
        *(f(getattr(inp, k), np.bool_) for k in ("segment_start", "book_mask", "flow_mask")),
        *(f(getattr(inp, k), np.float64) for k in _PRICE_PATH_AND_FLOW),
    )
    return series, RowBook(*(f(getattr(inp, k), np.float64) for k in RowBook._fields))


def compute(inp: RowInput, params: OfiConfig, carry: Carry | None = None) -> np.ndarray:
    """float32 ``[len(inp), len(SLOTS)]``: the ``ofi`` slots (see the module docstring); ``carry``: the state
    of the rows before ``inp`` (foxhunt.features._kernels.Carry; None: the batch)."""
    n = len(inp)
    if n == 0:
        return np.zeros((0, len(SLOTS)), np.float32)
    carry = Carry() if carry is None else carry
    tick = float(inp.tick_size)
    ev = book_events(inp)
    arrays, start = with_last_event(ev, event_reset(inp, ev, carry), carry)
    per_row = _event_pass(
        arrays["row"],
        arrays["ts"],
        arrays["reset"],
        *(arrays[k] for k in _EVENT_BOOK),
        arrays["sign"],
        n,
        tick,
        params.hawkes_fast_seconds,
        params.hawkes_slow_seconds,
        float(params.imbalance_horizon_events),
        float(params.imbalance_slow_horizon_events),
        float(params.trade_sign_horizon_trades),
        start,
        carry.record("event_pass", EVENT_FRESH),
    )
    series, book = row_arrays(inp)
    st = carry.record("row_pass", ROW_FRESH)
    depth = carry.state("depth", (0.0,) * inp.levels)  # D_i
    out = _row_pass(series, book, per_row, row_params(tick, params), st, depth)
    # NaN-safe by construction; a non-finite input size would still leak, so zero it here.
    out[~np.isfinite(out)] = 0.0
    carry.rows += n
    return out
