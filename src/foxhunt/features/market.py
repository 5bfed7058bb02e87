"""Market family: returns, momentum, trend, volatility, range, volume, technicals, ADX and CUSUM.

Works on any row unit and data source: it reads only the row's price path (open/high/low/close)
and volume, so ``NEEDS_BOOK = False``. All windows count rows and restart at
``inp.segment_start``; a statistic that needs more history than its segment has is 0.

Notation (row t, windows from :class:`MarketConfig`, defaults in the slot names):

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


class MarketConfig(Frozen):
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
    def _macd_order(self) -> MarketConfig:
        if self.macd_fast >= self.macd_slow:
            raise ValueError(
                f"market.macd_fast ({self.macd_fast}) must be below market.macd_slow ({self.macd_slow})"
            )
        return self


CONFIG = MarketConfig
"""The family's settings class (the plug-in contract, docs/feature-plugins.md): ``features.market``."""


def _slot_names(p: MarketConfig) -> tuple[str, ...]:
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


SLOTS: tuple[str, ...] = _slot_names(MarketConfig())

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


def history_rows(p: MarketConfig) -> int:
    """Rows of history a chunk needs (:class:`foxhunt.features._kernels.Carry`): the longest window or
    lag, plus the rows its returns and lagged products reach back (``r[t - 1]`` of ``y[t - 2]``)."""
    windows = (
        *p.return_lags, p.vol_norm_window, *p.momentum_windows, *p.trend_windows, *p.vol_windows,
        p.parkinson_window, p.gk_window, *p.range_windows, *p.volume_windows, p.rsi_period, p.bb_window,
        p.extreme_window, p.efficiency_window, p.autocorr_window, p.adx_period,
    )  # fmt: skip
    return max(windows) + 3


class _ChunkSeries:
    """The chunk's series with the carried history in front (``start``: the chunk's first row), and
    the windowed statistics the slot groups share, each computed once (σ_W, H_W / L_W).

    The kernels run over the history and the chunk (they read back); the columns are made of the
    chunk's rows only (every operation on them is per row): ``*_n`` are the values there."""

    def __init__(self, inp: RowInput, p: MarketConfig, carry: K.Carry) -> None:
        self.carry = carry
        keep = history_rows(p)
        self.start = start = carry.history("y")
        path = K.segment_log_path(
            np.asarray(inp.open, np.float64),
            np.asarray(inp.high, np.float64),
            np.asarray(inp.low, np.float64),
            np.asarray(inp.close, np.float64),
            np.asarray(inp.segment_start, bool),
            carry.state("path", K.PATH_FRESH),
        )
        names = ("lo", "lh", "ll", "y", "pos")
        extended = (carry.extend(k, a, keep) for k, a in zip(names, path, strict=True))
        _, self.lh, self.ll, self.y, self.pos = extended
        vol = np.asarray(inp.volume, np.float64)
        self.vol = carry.extend("vol", np.where(np.isfinite(vol) & (vol > 0.0), vol, 0.0), keep)
        self.r = K.segment_diff(self.y, self.pos)
        self.r2 = self.r * self.r
        self.y_n, self.r_n, self.pos_n, self.vol_n = (a[start:] for a in (self.y, self.r, self.pos, self.vol))
        self._sigma: dict[int, np.ndarray] = {}
        self._high_low: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def rsum(self, key: str, x: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray]:
        """Σ over the last ``w`` rows of ``x`` and the count of its nonzero values (the chunk's rows)."""
        s, nz = K.rolling_sum_reset(x, self.pos, w, self.start, self.carry.state(key, K.SUM_FRESH))
        return s[self.start :], nz[self.start :]

    def ema(self, key: str, x: np.ndarray, span: int) -> np.ndarray:
        """EMA_span of ``x`` (history and chunk)."""
        return K.ema_reset(x, self.pos, span, self.start, self.carry.state(key, K.EMA_FRESH))

    def lag(self, k: int) -> np.ndarray:
        """``y_{t-k}`` on the chunk's rows."""
        return _lagged(self.y, k)[self.start :]

    def full(self, w: int) -> np.ndarray:
        """The segment has ``w`` returns."""
        return self.pos_n >= w

    def sigma(self, w: int) -> np.ndarray:
        """σ_w, 0 where the segment has fewer than w returns."""
        if w not in self._sigma:
            s, _ = self.rsum(f"r2_w{w}", self.r2, w)
            self._sigma[w] = np.where(self.pos_n >= w, np.sqrt(np.maximum(s, 0.0) / w), 0.0)
        return self._sigma[w]

    def high_low(self, w: int) -> tuple[np.ndarray, np.ndarray]:
        """``(H_w, L_w)`` on the chunk's rows. The rolling extremes carry no state: an exact maximum
        over the window, which the history holds."""
        if w not in self._high_low:
            lo = self.start
            self._high_low[w] = (
                K.rolling_max_reset(self.lh, self.pos, w)[lo:],
                K.rolling_min_reset(self.ll, self.pos, w)[lo:],
            )
        return self._high_low[w]


def _returns(c: _ChunkSeries, p: MarketConfig) -> list[np.ndarray]:
    """Slots 0-7: the row's log return, raw and normalised, and the normalised k-row returns."""
    sig, ok_n, zc = c.sigma(p.vol_norm_window), c.full(p.vol_norm_window), p.z_clip
    cols = [np.clip(c.r_n, -_RET_CLIP, _RET_CLIP), _div(c.r_n, sig, ok_n, -zc, zc)]
    cols.extend(_div(c.y_n - c.lag(k), sig * np.sqrt(k), ok_n & c.full(k), -zc, zc) for k in p.return_lags)
    return cols


def _momentum(c: _ChunkSeries, p: MarketConfig) -> list[np.ndarray]:
    """Slots 8-11: distance from the SMA in volatility units, and the up/down count."""
    cols = []
    for w in p.momentum_windows:
        sy, _ = c.rsum(f"y_w{w}", c.y, w)
        cols.append(_div(c.y_n - sy / w, c.sigma(w) * np.sqrt(w), c.full(w), -p.z_clip, p.z_clip))
    sgn = np.sign(c.r)
    for w in p.momentum_windows:
        su, _ = c.rsum(f"sign_w{w}", sgn, w)
        cols.append(np.where(c.full(w), su / w, 0.0))
    return cols


def _trend(c: _ChunkSeries, p: MarketConfig) -> list[np.ndarray]:
    """Slots 12-17: the trailing OLS slope (in volatility units) and its t-statistic per window."""
    cols = []
    for w in p.trend_windows:
        st = c.carry.state(f"ols_w{w}", K.OLS_FRESH)
        beta, tstat = K.rolling_ols_tstat_reset(c.y, c.pos, w, p.tstat_clip, c.start, st)
        cols.append(_div(beta[c.start :] * np.sqrt(w), c.sigma(w), c.full(w), -p.z_clip, p.z_clip))
        cols.append(np.where(c.full(w), tstat[c.start :], 0.0))
    return cols


def _volatility(c: _ChunkSeries, p: MarketConfig) -> list[np.ndarray]:
    """Slots 18-24: realised volatility (bps) and its ratios, block Parkinson and Garman-Klass."""
    v1, v2, v3 = p.vol_windows
    cols = [np.clip(1e4 * c.sigma(w), 0.0, _BPS_MAX) for w in p.vol_windows]
    cols.append(_log_ratio(c.sigma(v1), c.sigma(v2), c.full(max(v1, v2)), _RATIO_CLIP))
    cols.append(_log_ratio(c.sigma(v2), c.sigma(v3), c.full(max(v2, v3)), _RATIO_CLIP))
    for w, kind in ((p.parkinson_window, "parkinson"), (p.gk_window, "gk")):
        y_ref = c.lag(w)  # the block covers W returns: H', L' include y_{t-W}
        hi = np.maximum(K.rolling_max_reset(c.lh, c.pos, w)[c.start :], y_ref)
        lw = np.minimum(K.rolling_min_reset(c.ll, c.pos, w)[c.start :], y_ref)
        rng2 = (hi - lw) ** 2
        if kind == "parkinson":
            var = rng2 / (4.0 * np.log(2.0) * w)
        else:
            var = np.maximum(0.5 * rng2 - (2.0 * np.log(2.0) - 1.0) * (c.y_n - y_ref) ** 2, 0.0) / w
        cols.append(np.where(c.full(w), np.clip(1e4 * np.sqrt(var), 0.0, _BPS_MAX), 0.0))
    return cols


def _range(c: _ChunkSeries, p: MarketConfig) -> list[np.ndarray]:
    """Slots 25-27: the range in volatility units, and the position inside the range per window."""
    r1, r2 = p.range_windows
    h1, l1 = c.high_low(r1)
    cols = [_div(h1 - l1, c.sigma(r1) * np.sqrt(r1), c.full(r1), 0.0, _RANGE_Z_MAX)]
    for w in (r1, r2):
        hw, lw = c.high_low(w)
        cols.append(_div(2.0 * (c.y_n - lw) - (hw - lw), hw - lw, c.full(w), -1.0, 1.0))
    return cols


def _volume(c: _ChunkSeries, p: MarketConfig) -> list[np.ndarray]:
    """Slots 28-31: volume against its short and long means, its z-score, and the mean's trend."""
    u1, u2 = p.volume_windows
    means = {}
    for w in (u1, u2):
        sv, _ = c.rsum(f"vol_w{w}", c.vol, w)
        means[w] = np.maximum(sv / w, 0.0)
    cols = [_log_ratio(1.0 + c.vol_n, 1.0 + means[w], c.full(w), _VOLUME_CLIP) for w in (u1, u2)]
    sv2, _ = c.rsum(f"vol2_w{u2}", c.vol * c.vol, u2)
    var_v = sv2 / u2 - means[u2] ** 2
    var_v = np.where(var_v > 1e-12 * np.maximum(sv2 / u2, 1e-300), var_v, 0.0)  # rounding of a flat window
    cols.append(_div(c.vol_n - means[u2], np.sqrt(var_v), c.full(u2), -p.z_clip, p.z_clip))
    cols.append(_log_ratio(1.0 + means[u1], 1.0 + means[u2], c.full(max(u1, u2)), _VOLUME_CLIP))
    return cols


def _oscillators(c: _ChunkSeries, p: MarketConfig) -> list[np.ndarray]:
    """Slots 32-35: RSI, Bollinger %b, and the distances from the trailing high and low."""
    zc = p.z_clip
    rsi = K.wilder_rsi_reset(c.r, c.pos, p.rsi_period, c.start, c.carry.state("rsi", K.RSI_FRESH))
    cols = [np.where(c.pos_n >= p.rsi_period, rsi[c.start :], 0.0)]
    wb = p.bb_window
    sb, _ = c.rsum("bb_y", c.y, wb)
    qb, _ = c.rsum("bb_y2", c.y * c.y, wb)
    _, moves_b = c.rsum("bb_moves", c.r, wb - 1)  # steps inside the window: 0 = flat window
    mb = sb / wb
    var_b = np.where(moves_b > 0, np.maximum(qb / wb - mb * mb, 0.0), 0.0)
    ok_b = c.full(wb) & (moves_b > 0)
    cols.append(_div(c.y_n - mb, p.bb_width * np.sqrt(var_b), ok_b, -_BB_CLIP, _BB_CLIP))
    we = p.extreme_window
    he, le = c.high_low(we)
    sig, ok_n = c.sigma(p.vol_norm_window), c.full(p.vol_norm_window)
    cols.append(_div(c.y_n - he, sig * np.sqrt(we), ok_n & c.full(we), -zc, 0.0))
    cols.append(_div(c.y_n - le, sig * np.sqrt(we), ok_n & c.full(we), 0.0, zc))
    return cols


def _trend_quality(c: _ChunkSeries, p: MarketConfig) -> list[np.ndarray]:
    """Slots 36-39: MACD and its histogram, the signed efficiency ratio, the lag-1 autocorrelation."""
    zc = p.z_clip
    sig, ok_n = c.sigma(p.vol_norm_window), c.full(p.vol_norm_window)
    macd = c.ema("macd_fast", c.y, p.macd_fast) - c.ema("macd_slow", c.y, p.macd_slow)
    macd = np.where(c.pos >= 0, macd, 0.0)
    hist = macd[c.start :] - c.ema("macd_signal", macd, p.macd_signal)[c.start :]
    ok_m = ok_n & (c.pos_n >= p.macd_slow)
    cols = [_div(macd[c.start :], sig, ok_m, -zc, zc), _div(hist, sig, ok_m, -zc, zc)]
    wf = p.efficiency_window
    sa, _ = c.rsum("efficiency", np.abs(c.r), wf)
    cols.append(_div(c.y_n - c.lag(wf), sa, c.full(wf), -1.0, 1.0))
    wa = p.autocorr_window
    rq = np.zeros_like(c.r)
    rq[1:] = c.r[1:] * c.r[:-1]
    rq[c.pos < 2] = 0.0  # r_{t-1} outside the segment
    sq, _ = c.rsum("autocorr_rr", rq, wa)
    sr, _ = c.rsum("autocorr_r2", c.r2, wa)
    cols.append(_div(sq, sr, c.pos_n >= wa + 1, -1.0, 1.0))
    return cols


def _regime(c: _ChunkSeries, p: MarketConfig, z1: np.ndarray) -> list[np.ndarray]:
    """Slots 40-41: ADX and the capped CUSUM of the normalised return ``z1`` (slot 1)."""
    adx = K.wilder_adx_reset(c.lh, c.ll, c.y, c.pos, p.adx_period, c.start, c.carry.state("adx", K.ADX_FRESH))
    z = np.zeros(len(c.y))
    z[c.start :] = z1  # the CUSUM reads the chunk's rows only
    st = c.carry.state("cusum", K.CUSUM_FRESH)
    cusum = K.capped_cusum_reset(z, c.pos, p.cusum_drift, p.cusum_cap, c.start, st)
    return [np.clip(adx[c.start :], 0.0, 1.0), np.clip(cusum[c.start :], -1.0, 1.0)]


def compute(inp: RowInput, params: MarketConfig, carry: K.Carry | None = None) -> np.ndarray:
    """The market features of every row, float32 ``[len(inp), len(SLOTS)]`` (see the module table).

    ``carry``: the state of the rows before ``inp`` (a chunk of a stream, foxhunt serve); None for the
    batch, one chunk from a fresh state."""
    n = len(inp)
    out = np.zeros((n, len(SLOTS)), np.float32)
    if n == 0:
        return out
    c = _ChunkSeries(inp, params, K.Carry() if carry is None else carry)
    returns = _returns(c, params)
    cols = [
        *returns,
        *_momentum(c, params),
        *_trend(c, params),
        *_volatility(c, params),
        *_range(c, params),
        *_volume(c, params),
        *_oscillators(c, params),
        *_trend_quality(c, params),
        *_regime(c, params, z1=returns[1]),
    ]
    assert len(cols) == len(SLOTS), (len(cols), len(SLOTS))
    K.fill_columns(out, tuple(np.ascontiguousarray(col, np.float64) for col in cols))
    out[c.pos_n < 0] = 0.0  # no valid price yet in the segment
    c.carry.rows += n
    return out
