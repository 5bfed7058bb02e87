"""Market family: returns, momentum, trend, volatility, range, volume, technicals, ADX and CUSUM.

Works on any row unit and data source: it reads only the row's price path (open/high/low/close)
and volume, so ``NEEDS_BOOK = False``. All windows count rows and restart at
``inp.segment_start``; a statistic that needs more history than its segment has is 0.

Notation (row t, windows from :class:`Params`, defaults in the slot names):

* ``y_t = ln close_t`` relative to the segment's first valid close; a missing close (NaN) carries
  the previous one. ``h_t``, ``l_t``: log high / low (falling back to ``y_t``, widened to contain it).
* ``p_t``: rows since the segment's first valid close (0 on it). ``r_t = y_t - y_{t-1}`` (0 at p = 0).
* ``σ_W = sqrt(Σ_{i=t-W+1..t} r_i² / W)``, the per-row realised volatility over W rows; a
  statistic "over W" needs ``p_t >= W`` (W returns) and is 0 before.
* ``σ = σ_{vol_norm_window}`` (100) normalises returns, MACD and distances. ``H_W``, ``L_W``:
  max of ``h`` / min of ``l`` over rows t-W+1..t. ``mean_W``, ``sd_W``: trailing mean and
  population standard deviation over W rows.
* Every ratio with a zero denominator is 0; every slot is clipped to the range shown.

| slot | name | formula | range |
|---|---|---|---|
| 0 | ret_lag1 | r_t (raw log return of the row; also the next-bar auxiliary label) | ±0.5 |
| 1 | ret_z_lag1 | r_t / σ | ±z_clip |
| 2-7 | ret_z_lag{k}, k = 2,5,10,20,50,100 | (y_t - y_{t-k}) / (σ √k); needs p >= max(k, 100) | ±z_clip |
| 8-9 | mom_sma_w{W}, W = 20,100 | (y_t - mean_W(y)) / (σ_W √W) | ±z_clip |
| 10-11 | mom_updown_w{W}, W = 20,100 | (#{r_i > 0} - #{r_i < 0}) / W over the last W rows | [-1, 1] |
| 12,14,16 | trend_slope_w{W}, W = 16,64,256 | OLS slope β of y on row index, W rows: β √W / σ_W | ±z_clip |
| 13,15,17 | trend_tstat_w{W} | that regression's t-stat β / se(β), se² = SSR / ((W-2) Sxx) | ±tstat_clip |
| 18-20 | vol_rv_w{W}_bps, W = 20,100,500 | 1e4 σ_W | [0, 1000] |
| 21 | vol_ratio_w20_w100 | ln(σ_20 / σ_100) | ±5 |
| 22 | vol_ratio_w100_w500 | ln(σ_100 / σ_500) | ±5 |
| 23 | vol_parkinson_w20_bps | 1e4 sqrt((H' - L')² / (4 ln 2 · W)) (block Parkinson) | [0, 1000] |
| 24 | vol_gk_w100_bps | 1e4 sqrt(max(0, ½(H' - L')² - (2 ln 2 - 1)(y_t - y_{t-W})²) / W) | [0, 1000] |
| 25 | range_z_w20 | (H_20 - L_20) / (σ_20 √20) | [0, 20] |
| 26-27 | range_pos_w{W}, W = 20,100 | 2 (y_t - L_W) / (H_W - L_W) - 1 | [-1, 1] |
| 28-29 | volume_rel_w{W}, W = 20,100 | ln((1 + v_t) / (1 + mean_W(v))) | ±10 |
| 30 | volume_z_w100 | (v_t - mean_W(v)) / sd_W(v) | ±z_clip |
| 31 | volume_trend_w20_w100 | ln((1 + mean_20(v)) / (1 + mean_100(v))) | ±10 |
| 32 | rsi_14 | Wilder RSI of r as (RSI - 50) / 50 = (G - L) / (G + L); needs p >= 14 | [-1, 1] |
| 33 | bb_b_w20 | (y_t - mean_W(y)) / (bb_width · sd_W(y)) (centred Bollinger %b: 2 %b - 1) | ±5 |
| 34 | dist_high_w100 | (y_t - H_W) / (σ √W) | [-z_clip, 0] |
| 35 | dist_low_w100 | (y_t - L_W) / (σ √W) | [0, z_clip] |
| 36 | macd_12_26 | (EMA_12(y) - EMA_26(y)) / σ; EMAs restart at y; needs p >= 26 | ±z_clip |
| 37 | macd_hist_12_26_9 | (m_t - EMA_9(m)_t) / σ, m = EMA_12(y) - EMA_26(y) | ±z_clip |
| 38 | efficiency_w20 | (y_t - y_{t-W}) / Σ_{last W} abs(r_i) (signed Kaufman efficiency ratio) | [-1, 1] |
| 39 | autocorr_w50 | Σ_{last W} r_i r_{i-1} / Σ_{last W} r_i²; needs p >= W + 1 | [-1, 1] |
| 40 | adx_14 | Wilder ADX / 100 of (h, l, y); needs p >= 2·14 - 1 | [0, 1] |
| 41 | cusum | (S+ + S-) / C: capped two-sided CUSUM of z_t = slot 1 (see below) | [-1, 1] |

Trend (12-17): y constant over the window gives 0; a perfect line gives ±tstat_clip. Block
volatility (23-24): ``H'``, ``L'`` = max of h / min of l over rows t-W+1..t together with
``y_{t-W}``, so the block covers W returns and works when o = h = l = c (snapshot rows).
CUSUM (41): S+ ← min(C, max(0, S+ + z - k)), S- ← max(-C, min(0, S- + z + k)), both 0 at a
segment start, C = cusum_cap, k = cusum_drift. ADX and RSI use log prices (scale-free).

Slot names carry the default windows; a profile that changes a window keeps the names (the
resolved feature config, saved with every artefact, says which windows were used).
Volume: NaN or negative counts as 0. Speed: O(n) running sums and deques in numba
(:mod:`foxhunt.features._kernels`).
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import Field, model_validator

from foxhunt.config.base import Frozen
from foxhunt.features import _kernels as K
from foxhunt.features.frame import RowInput

Window = Annotated[int, Field(ge=2, le=100_000)]
Lag = Annotated[int, Field(ge=1, le=100_000)]

NEEDS_BOOK = False

_RET_CLIP = 0.5  # slot 0: |log return| > 0.5 is a data error, not a move
_BPS_MAX = 1000.0
_RATIO_CLIP = 5.0
_VOLUME_CLIP = 10.0
_BB_CLIP = 5.0
_RANGE_Z_MAX = 20.0


class Params(Frozen):
    """Windows (in rows) and bounds of the market family."""

    return_lags: tuple[Lag, Lag, Lag, Lag, Lag, Lag] = Field(
        (2, 5, 10, 20, 50, 100), description="Lags k of the normalised k-row log returns (slots 2-7)."
    )
    vol_norm_window: Window = Field(
        100, description="Rows of the realised volatility σ that normalises returns, MACD and distances."
    )
    momentum_windows: tuple[Window, Window] = Field(
        (20, 100), description="Windows of the SMA-distance and up/down-count momentum (slots 8-11)."
    )
    trend_windows: tuple[Window, Window, Window] = Field(
        (16, 64, 256), description="Windows of the trailing OLS trend slope and t-stat (slots 12-17)."
    )
    vol_windows: tuple[Window, Window, Window] = Field(
        (20, 100, 500), description="Short, mid, long realised-volatility windows (slots 18-22)."
    )
    parkinson_window: Window = Field(20, description="Rows of the block Parkinson volatility (slot 23).")
    gk_window: Window = Field(100, description="Rows of the block Garman-Klass volatility (slot 24).")
    range_windows: tuple[Window, Window] = Field(
        (20, 100), description="Windows of the range z (first) and range positions (slots 25-27)."
    )
    volume_windows: tuple[Window, Window] = Field(
        (20, 100), description="Short and long trailing volume means (slots 28-31; z uses the long)."
    )
    rsi_period: Window = Field(14, description="Wilder RSI period (slot 32).")
    bb_window: Window = Field(20, description="Bollinger band window (slot 33).")
    bb_width: float = Field(
        2.0, gt=0.0, le=10.0, description="Bollinger band half-width in standard deviations."
    )
    extreme_window: Window = Field(100, description="Trailing high/low window of dist_high/dist_low (34-35).")
    macd_fast: Window = Field(12, description="Fast EMA span of the MACD (slots 36-37).")
    macd_slow: Window = Field(26, description="Slow EMA span of the MACD; must exceed macd_fast.")
    macd_signal: Window = Field(9, description="EMA span of the MACD signal line (slot 37).")
    efficiency_window: Window = Field(20, description="Window of the signed efficiency ratio (slot 38).")
    autocorr_window: Window = Field(50, description="Window of the lag-1 return autocorrelation (slot 39).")
    adx_period: Window = Field(14, description="Wilder ADX period (slot 40).")
    cusum_drift: float = Field(
        0.5, ge=0.0, le=10.0, description="CUSUM allowance k per row, in units of the normalised return."
    )
    cusum_cap: float = Field(
        5.0, gt=0.0, le=1000.0, description="CUSUM accumulator cap C; slot 41 is (S+ + S-) / C."
    )
    z_clip: float = Field(10.0, gt=0.0, le=1000.0, description="Clip of normalised returns, momentum, MACD.")
    tstat_clip: float = Field(20.0, gt=0.0, le=1000.0, description="Clip of the trend t-statistics.")

    @model_validator(mode="after")
    def _macd_order(self) -> Params:
        if self.macd_fast >= self.macd_slow:
            raise ValueError(
                f"market.macd_fast ({self.macd_fast}) must be below market.macd_slow ({self.macd_slow})"
            )
        return self


def _slot_names(p: Params) -> tuple[str, ...]:
    m1, m2 = p.momentum_windows
    v1, v2, v3 = p.vol_windows
    r1, r2 = p.range_windows
    u1, u2 = p.volume_windows
    names = ["ret_lag1", "ret_z_lag1"]
    names += [f"ret_z_lag{k}" for k in p.return_lags]
    names += [f"mom_sma_w{m1}", f"mom_sma_w{m2}", f"mom_updown_w{m1}", f"mom_updown_w{m2}"]
    for w in p.trend_windows:
        names += [f"trend_slope_w{w}", f"trend_tstat_w{w}"]
    names += [f"vol_rv_w{v1}_bps", f"vol_rv_w{v2}_bps", f"vol_rv_w{v3}_bps"]
    names += [f"vol_ratio_w{v1}_w{v2}", f"vol_ratio_w{v2}_w{v3}"]
    names += [f"vol_parkinson_w{p.parkinson_window}_bps", f"vol_gk_w{p.gk_window}_bps"]
    names += [f"range_z_w{r1}", f"range_pos_w{r1}", f"range_pos_w{r2}"]
    names += [f"volume_rel_w{u1}", f"volume_rel_w{u2}", f"volume_z_w{u2}", f"volume_trend_w{u1}_w{u2}"]
    names += [f"rsi_{p.rsi_period}", f"bb_b_w{p.bb_window}"]
    names += [f"dist_high_w{p.extreme_window}", f"dist_low_w{p.extreme_window}"]
    names += [f"macd_{p.macd_fast}_{p.macd_slow}", f"macd_hist_{p.macd_fast}_{p.macd_slow}_{p.macd_signal}"]
    names += [f"efficiency_w{p.efficiency_window}", f"autocorr_w{p.autocorr_window}"]
    names += [f"adx_{p.adx_period}", "cusum"]
    return tuple(names)


SLOTS: tuple[str, ...] = _slot_names(Params())

# The long/short mirror's declarations (the family contract in foxhunt.features.registry).
MIRROR_ODD: frozenset[str] = frozenset(
    s
    for s in SLOTS
    if s.startswith(("ret_", "mom_", "trend_", "range_pos", "rsi_", "bb_b", "dist_", "macd", "efficiency"))
    or s == "cusum"
)
_DIST_HIGH, _DIST_LOW = (s for s in SLOTS if s.startswith("dist_"))
# Slots that need traded volume: the stack sets them to 0 (masked) on rows without trades.
TRADE_SLOTS: tuple[str, ...] = tuple(s for s in SLOTS if s.startswith("volume_"))
MIRROR_SWAPS: tuple[tuple[str, str], ...] = ((_DIST_HIGH, _DIST_LOW),)  # dist_high <-> -dist_low


def _div(num: np.ndarray, den: np.ndarray, ok: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``clip(num / den, lo, hi)`` where ``ok`` and ``den > 0``, else 0."""
    good = ok & (den > 0.0)
    out = np.divide(num, den, out=np.zeros_like(num), where=good)
    return np.clip(out, lo, hi, out=out)


def _log_ratio(a: np.ndarray, b: np.ndarray, ok: np.ndarray, clip: float) -> np.ndarray:
    """``clip(ln(a / b))`` where ``ok`` and both are positive, else 0."""
    good = ok & (a > 0.0) & (b > 0.0)
    out = np.zeros_like(a)
    np.log(np.divide(a, b, out=np.ones_like(a), where=good), out=out, where=good)
    return np.clip(out, -clip, clip, out=out)


def _lagged(x: np.ndarray, k: int) -> np.ndarray:
    """``x[t - k]`` (0 for t < k); callers mask rows whose lag leaves the segment."""
    out = np.zeros_like(x)
    if k < len(x):
        out[k:] = x[:-k] if k > 0 else x
    return out


def history_rows(p: Params) -> int:
    """Rows of history a chunk needs (:class:`foxhunt.features._kernels.Carry`): the longest window or
    lag, plus the rows its returns and lagged products reach back (``r[t - 1]`` of ``y[t - 2]``)."""
    windows = (
        *p.return_lags, p.vol_norm_window, *p.momentum_windows, *p.trend_windows, *p.vol_windows,
        p.parkinson_window, p.gk_window, *p.range_windows, *p.volume_windows, p.rsi_period, p.bb_window,
        p.extreme_window, p.efficiency_window, p.autocorr_window, p.adx_period,
    )  # fmt: skip
    return max(windows) + 3


def compute(inp: RowInput, params: Params, carry: K.Carry | None = None) -> np.ndarray:
    """The market features of every row, float32 ``[len(inp), len(SLOTS)]`` (see the module table).

    ``carry``: the state of the rows before ``inp`` (a chunk of a stream, foxhunt serve); None for the
    batch, one chunk from a fresh state. Every array below is the carried history followed by the
    chunk's rows, and the kernels compute from ``start``, its first row."""
    p = params
    n = len(inp)
    out = np.zeros((n, len(SLOTS)), np.float32)
    if n == 0:
        return out
    carry = K.Carry() if carry is None else carry
    keep = history_rows(p)
    start = carry.history("y")
    seg = np.asarray(inp.segment_start, bool)
    path = K.segment_log_path(
        np.asarray(inp.open, np.float64),
        np.asarray(inp.high, np.float64),
        np.asarray(inp.low, np.float64),
        np.asarray(inp.close, np.float64),
        seg,
        carry.state("path", K.PATH_FRESH),
    )
    names = ("lo", "lh", "ll", "y", "pos")
    _, lh, ll, y, pos = (carry.extend(k, a, keep) for k, a in zip(names, path, strict=True))
    vol = np.asarray(inp.volume, np.float64)
    vol = carry.extend("vol", np.where(np.isfinite(vol) & (vol > 0.0), vol, 0.0), keep)
    r = K.segment_diff(y, pos)
    r2 = r * r
    zc, tc = p.z_clip, p.tstat_clip
    # The kernels run over the history and the chunk (they read back); the columns are made of the
    # chunk's rows only (every operation below is per row), ``_n`` their values there.
    y_n, r_n, pos_n, vol_n = y[start:], r[start:], pos[start:], vol[start:]

    def rsum(key: str, x: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray]:
        s, nz = K.rolling_sum_reset(x, pos, w, start, carry.state(key, K.SUM_FRESH))
        return s[start:], nz[start:]

    def ema(key: str, x: np.ndarray, span: int) -> np.ndarray:
        return K.ema_reset(x, pos, span, start, carry.state(key, K.EMA_FRESH))

    def lag(k: int) -> np.ndarray:
        return _lagged(y, k)[start:]

    sig_cache: dict[int, np.ndarray] = {}

    def sigma(w: int) -> np.ndarray:
        """σ_w, 0 where the segment has fewer than w returns."""
        if w not in sig_cache:
            s, _ = rsum(f"r2_w{w}", r2, w)
            sig_cache[w] = np.where(pos_n >= w, np.sqrt(np.maximum(s, 0.0) / w), 0.0)
        return sig_cache[w]

    def full(w: int) -> np.ndarray:
        return pos_n >= w

    wn = p.vol_norm_window
    sig = sigma(wn)
    ok_n = full(wn)
    cols: list[np.ndarray] = []

    # Returns (0-7).
    cols.append(np.clip(r_n, -_RET_CLIP, _RET_CLIP))
    z1 = _div(r_n, sig, ok_n, -zc, zc)
    cols.append(z1)
    cols.extend(_div(y_n - lag(k), sig * np.sqrt(k), ok_n & full(k), -zc, zc) for k in p.return_lags)

    # Momentum (8-11).
    for w in p.momentum_windows:
        sy, _ = rsum(f"y_w{w}", y, w)
        cols.append(_div(y_n - sy / w, sigma(w) * np.sqrt(w), full(w), -zc, zc))
    sgn = np.sign(r)
    for w in p.momentum_windows:
        su, _ = rsum(f"sign_w{w}", sgn, w)
        cols.append(np.where(full(w), su / w, 0.0))

    # Trend scanning (12-17).
    for w in p.trend_windows:
        beta, tstat = K.rolling_ols_tstat_reset(y, pos, w, tc, start, carry.state(f"ols_w{w}", K.OLS_FRESH))
        cols.append(_div(beta[start:] * np.sqrt(w), sigma(w), full(w), -zc, zc))
        cols.append(np.where(full(w), tstat[start:], 0.0))

    # Volatility (18-24).
    v1, v2, v3 = p.vol_windows
    cols.extend(np.clip(1e4 * sigma(w), 0.0, _BPS_MAX) for w in p.vol_windows)
    cols.append(_log_ratio(sigma(v1), sigma(v2), full(max(v1, v2)), _RATIO_CLIP))
    cols.append(_log_ratio(sigma(v2), sigma(v3), full(max(v2, v3)), _RATIO_CLIP))
    # The rolling extremes carry no state: an exact maximum over the window, which the history holds.
    for w, kind in ((p.parkinson_window, "parkinson"), (p.gk_window, "gk")):
        y_ref = lag(w)
        hi = np.maximum(K.rolling_max_reset(lh, pos, w)[start:], y_ref)
        lw = np.minimum(K.rolling_min_reset(ll, pos, w)[start:], y_ref)
        rng2 = (hi - lw) ** 2
        if kind == "parkinson":
            var = rng2 / (4.0 * np.log(2.0) * w)
        else:
            var = np.maximum(0.5 * rng2 - (2.0 * np.log(2.0) - 1.0) * (y_n - y_ref) ** 2, 0.0) / w
        cols.append(np.where(full(w), np.clip(1e4 * np.sqrt(var), 0.0, _BPS_MAX), 0.0))

    # Range (25-27).
    hl: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def high_low(w: int) -> tuple[np.ndarray, np.ndarray]:
        if w not in hl:
            hl[w] = (K.rolling_max_reset(lh, pos, w)[start:], K.rolling_min_reset(ll, pos, w)[start:])
        return hl[w]

    r1, r2w = p.range_windows
    h1, l1 = high_low(r1)
    cols.append(_div(h1 - l1, sigma(r1) * np.sqrt(r1), full(r1), 0.0, _RANGE_Z_MAX))
    for w in (r1, r2w):
        hw, lw_ = high_low(w)
        cols.append(_div(2.0 * (y_n - lw_) - (hw - lw_), hw - lw_, full(w), -1.0, 1.0))

    # Volume (28-31).
    u1, u2 = p.volume_windows
    means = {}
    for w in (u1, u2):
        sv, _ = rsum(f"vol_w{w}", vol, w)
        means[w] = np.maximum(sv / w, 0.0)
    cols.extend(_log_ratio(1.0 + vol_n, 1.0 + means[w], full(w), _VOLUME_CLIP) for w in (u1, u2))
    sv2, _ = rsum(f"vol2_w{u2}", vol * vol, u2)
    var_v = sv2 / u2 - means[u2] ** 2
    var_v = np.where(var_v > 1e-12 * np.maximum(sv2 / u2, 1e-300), var_v, 0.0)
    cols.append(_div(vol_n - means[u2], np.sqrt(var_v), full(u2), -zc, zc))
    cols.append(_log_ratio(1.0 + means[u1], 1.0 + means[u2], full(max(u1, u2)), _VOLUME_CLIP))

    # Technicals (32-39).
    rsi = K.wilder_rsi_reset(r, pos, p.rsi_period, start, carry.state("rsi", K.RSI_FRESH))
    cols.append(np.where(pos_n >= p.rsi_period, rsi[start:], 0.0))
    wb = p.bb_window
    sb, _ = rsum("bb_y", y, wb)
    qb, _ = rsum("bb_y2", y * y, wb)
    _, moves_b = rsum("bb_moves", r, wb - 1)  # steps inside the window: 0 = flat window
    mb = sb / wb
    var_b = np.where(moves_b > 0, np.maximum(qb / wb - mb * mb, 0.0), 0.0)
    cols.append(_div(y_n - mb, p.bb_width * np.sqrt(var_b), full(wb) & (moves_b > 0), -_BB_CLIP, _BB_CLIP))
    we = p.extreme_window
    he, le = high_low(we)
    cols.append(_div(y_n - he, sig * np.sqrt(we), ok_n & full(we), -zc, 0.0))
    cols.append(_div(y_n - le, sig * np.sqrt(we), ok_n & full(we), 0.0, zc))
    macd = ema("macd_fast", y, p.macd_fast) - ema("macd_slow", y, p.macd_slow)
    macd = np.where(pos >= 0, macd, 0.0)
    hist = macd[start:] - ema("macd_signal", macd, p.macd_signal)[start:]
    ok_m = ok_n & (pos_n >= p.macd_slow)
    cols.append(_div(macd[start:], sig, ok_m, -zc, zc))
    cols.append(_div(hist, sig, ok_m, -zc, zc))
    wf = p.efficiency_window
    sa, _ = rsum("efficiency", np.abs(r), wf)
    cols.append(_div(y_n - lag(wf), sa, full(wf), -1.0, 1.0))
    wa = p.autocorr_window
    rq = np.zeros_like(r)
    rq[1:] = r[1:] * r[:-1]
    rq[pos < 2] = 0.0
    sq, _ = rsum("autocorr_rr", rq, wa)
    sr, _ = rsum("autocorr_r2", r2, wa)
    cols.append(_div(sq, sr, pos_n >= wa + 1, -1.0, 1.0))

    # Regime (40-41).
    adx = K.wilder_adx_reset(lh, ll, y, pos, p.adx_period, start, carry.state("adx", K.ADX_FRESH))
    cols.append(np.clip(adx[start:], 0.0, 1.0))
    z = np.zeros(len(y))
    z[start:] = z1  # the CUSUM reads the chunk's rows only
    st = carry.state("cusum", K.CUSUM_FRESH)
    cusum = K.capped_cusum_reset(z, pos, p.cusum_drift, p.cusum_cap, start, st)
    cols.append(np.clip(cusum[start:], -1.0, 1.0))

    assert len(cols) == len(SLOTS), (len(cols), len(SLOTS))
    K.fill_columns(out, tuple(np.ascontiguousarray(c, np.float64) for c in cols))
    out[pos_n < 0] = 0.0  # no valid price yet in the segment
    carry.rows += n
    return out
