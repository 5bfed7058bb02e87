"""The market an environment steps over: one fold's rows as tensors on the device.

Built from a feature cache and a fold (:class:`~foxhunt.validation.folds.FoldData`): the state's
feature groups (market, ofi, tlob, mtf, in :data:`~foxhunt.features.layout.STATE_LAYOUT` order)
normalised with the fold's training-row scaler (the one normalisation path), the raw prices
execution needs (mid path, high/low, touch, a trailing volatility for plan barriers) and the
instrument they are prices of (tick grid, point value: foxhunt.domain.instrument).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import torch

from foxhunt.data.instrument import instrument_of_cache
from foxhunt.data.returns import segment_ids, trailing_volatility
from foxhunt.domain.config import InstrumentConfig
from foxhunt.domain.instrument import Instrument, product_instrument
from foxhunt.features.cache_file import FeatureCache
from foxhunt.features.layout import STATE_FEATURE_GROUPS, STATE_LAYOUT
from foxhunt.validation.folds import FoldData


@dataclass(frozen=True, eq=False)
class MarketTensors:
    """``[R]`` or ``[R, F]`` tensors of every row of the cache, on one device."""

    features: torch.Tensor  # [R, F] float32, the state feature groups, normalised (fold scaler)
    mid: torch.Tensor  # [R] price path (mid for book data, trade close for ohlcv)
    high: torch.Tensor  # [R]
    low: torch.Tensor  # [R]
    bid: torch.Tensor  # [R] best bid, NaN where unknown
    ask: torch.Tensor  # [R] best ask, NaN where unknown
    vol: torch.Tensor  # [R] trailing per-row volatility of log returns (0 where unknown)
    segment: torch.Tensor  # [R] int64 session/contract segment id
    feature_columns: tuple[str, ...]
    aux_targets: torch.Tensor | None = None  # [R, len(AUX_TARGETS)] float32 aux-head targets, NaN = none
    # Queue-aware limit fills (env.costs.queue_ahead / volume_at_price); None: trade-through only.
    bid_size: torch.Tensor | None = None  # [R] contracts displayed at the best bid, NaN where unknown
    ask_size: torch.Tensor | None = None  # [R] contracts displayed at the best ask, NaN where unknown
    volume: torch.Tensor | None = None  # [R] contracts traded in the row, NaN where unknown
    # The contract the prices are of. market_tensors always sets the data's; a market assembled by
    # hand (tests) gets the built-in table's ES, the contract its hand-worked numbers assume.
    instrument: Instrument = field(default_factory=lambda: product_instrument("ES"))

    @property
    def rows(self) -> int:
        return int(self.mid.shape[0])

    @property
    def device(self) -> torch.device:
        return self.mid.device


AUX_TARGETS = (
    "next_return",  # log(mid[r+1] / mid[r]) / per-row vol (NaN across a segment end)
    "direction",  # 1 up / 0 down over the longest direction-label horizon (NaN: invalid or no move)
    "outcome",  # triple-barrier class of a long entered at r (outcome_class: profit 0, stop 1, timeout 2)
)


def aux_targets(cache: FeatureCache, mid: np.ndarray, seg: np.ndarray, vol: np.ndarray) -> np.ndarray:
    """The aux heads' targets per row (they look ahead: targets only, never state)."""
    n = len(mid)
    out = np.full((n, len(AUX_TARGETS)), np.nan, dtype=np.float32)
    if n > 1:
        ret = np.log(np.maximum(mid[1:], 1e-12) / np.maximum(mid[:-1], 1e-12)) / np.maximum(vol[:-1], 1e-5)
        ret[seg[1:]] = np.nan  # row r+1 starts a new segment: no return across it
        out[:-1, 0] = np.clip(ret, -20, 20)
    names = cache.table.column_names  # every column, labels included (cache.columns: the features)
    horizons = sorted(
        int(c[len("label.dir_h") :])
        for c in names
        if c.startswith("label.dir_h") and not c.endswith(".valid")
    )
    if horizons:
        k = horizons[-1]
        d = cache.column(f"label.dir_h{k}").astype(np.float32)
        ok = cache.column(f"label.dir_h{k}.valid").astype(bool) & (d != 0)
        out[:, 1] = np.where(ok, (d > 0).astype(np.float32), np.nan)
    if "label.outcome" in names:
        ok = cache.column("label.outcome.valid").astype(bool)
        out[:, 2] = np.where(ok, cache.column("label.outcome").astype(np.float32), np.nan)
    return out


@functools.cache
def state_feature_columns() -> tuple[str, ...]:
    """The cache columns that feed the state, in state order (from the layout, a module constant:
    made once, not at each of foxhunt serve's row closes)."""
    return tuple(c for g in STATE_FEATURE_GROUPS for c in STATE_LAYOUT.group(g).names)


@functools.lru_cache(maxsize=8)
def _state_index(cache_columns: tuple[str, ...]) -> tuple[list[str], np.ndarray]:
    """The state columns a cache of ``cache_columns`` lacks, and where the others are in it."""
    at = {c: j for j, c in enumerate(cache_columns)}
    columns = state_feature_columns()
    missing = [c for c in columns if c not in at]
    return missing, np.array([at.get(c, -1) for c in columns], np.int64)


def _ffill(x: np.ndarray) -> np.ndarray:
    """Carry the last finite value forward (the price path has NaN before a book exists)."""
    idx = np.where(np.isfinite(x), np.arange(len(x)), 0)
    np.maximum.accumulate(idx, out=idx)
    out = x[idx]
    first = np.flatnonzero(np.isfinite(x))
    if len(first):
        out[: first[0]] = x[first[0]]
    return np.nan_to_num(out)


def touch_sizes(cache: FeatureCache) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """``(bid_size, ask_size, volume)`` from the cache, NaN where unknown; None for an absent column.

    A size counts only where the book is known (both touches finite, > 0 and not crossed, as
    :func:`~foxhunt.env.costs.book_known`): ohlcv rows store 0 there, which is no queue.
    """
    bid, ask = cache.column("bid").astype(np.float64), cache.column("ask").astype(np.float64)
    with np.errstate(invalid="ignore"):
        known = np.isfinite(bid) & np.isfinite(ask) & (bid > 0) & (ask > 0) & (ask >= bid)

    def col(name: str, book: bool) -> np.ndarray | None:
        if name not in cache.columns:
            return None
        x = cache.column(name).astype(np.float64)
        ok = np.isfinite(x) & (x >= 0) & (known if book else True)
        return np.where(ok, x, np.nan)

    return col("bid_size", True), col("ask_size", True), col("volume", False)


def market_tensors(
    cache: FeatureCache,
    fold: FoldData,
    *,
    vol_window: int,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float64,
    instrument: Instrument | None = None,
    overrides: InstrumentConfig | None = None,
    vol: np.ndarray | None = None,
) -> MarketTensors:
    """The fold's market on ``device``; ``instrument`` None: the cache's own (its source files'
    definitions or symbols, with ``overrides``, the config's ``[instrument]``). ``vol``: the rows'
    trailing volatility where the caller has it (foxhunt serve's rows are the last of a session,
    over which it is computed); None: computed over these rows."""
    if instrument is None:
        instrument = instrument_of_cache(cache.meta, overrides)
    columns = state_feature_columns()
    missing, index = _state_index(tuple(cache.columns))
    if missing:
        raise ValueError(f"cache {cache.path} lacks state columns {missing[:4]}... (rebuild the cache)")
    x_all = fold.normalise(cache.features())
    mid = _ffill(cache.column("close").astype(np.float64))
    seg = cache.column("segment_start").astype(bool)
    if vol is None:
        vol = np.nan_to_num(trailing_volatility(mid, seg, vol_window))

    def t(a: np.ndarray, dt: torch.dtype = dtype) -> torch.Tensor:
        return torch.as_tensor(np.array(a, copy=True), dtype=dt, device=device)

    bid_size, ask_size, volume = (None if a is None else t(a) for a in touch_sizes(cache))

    return MarketTensors(
        features=t(x_all[:, index], torch.float32),
        mid=t(mid),
        high=t(np.where(np.isfinite(cache.column("high")), cache.column("high"), mid)),
        low=t(np.where(np.isfinite(cache.column("low")), cache.column("low"), mid)),
        bid=t(cache.column("bid")),
        ask=t(cache.column("ask")),
        vol=t(vol),
        segment=t(segment_ids(seg), torch.int64),
        aux_targets=t(aux_targets(cache, mid, seg, vol), torch.float32),
        feature_columns=columns,
        bid_size=bid_size,
        ask_size=ask_size,
        volume=volume,
        instrument=instrument,
    )
