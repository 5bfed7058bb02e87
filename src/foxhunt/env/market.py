"""The market an environment steps over: one fold's rows as tensors on the device.

Built from a feature cache and a fold (:class:`~foxhunt.validation.dataset.FoldData`): the state's
feature groups (market, ofi, tlob, mtf, in :data:`~foxhunt.features.layout.STATE_LAYOUT` order)
normalised with the fold's training-row scaler (the one normalisation path), and the raw prices
execution needs (mid path, high/low, touch, a trailing volatility for plan barriers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from foxhunt.features.cache import FeatureCache
from foxhunt.features.layout import STATE_FEATURE_GROUPS, STATE_LAYOUT
from foxhunt.validation.dataset import FoldData
from foxhunt.validation.labels import segment_ids, trailing_volatility


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

    @property
    def rows(self) -> int:
        return int(self.mid.shape[0])

    @property
    def device(self) -> torch.device:
        return self.mid.device


def state_feature_columns() -> tuple[str, ...]:
    """The cache columns that feed the state, in state order (from the layout)."""
    return tuple(c for g in STATE_FEATURE_GROUPS for c in STATE_LAYOUT.group(g).names)


def _ffill(x: np.ndarray) -> np.ndarray:
    """Carry the last finite value forward (the price path has NaN before a book exists)."""
    idx = np.where(np.isfinite(x), np.arange(len(x)), 0)
    np.maximum.accumulate(idx, out=idx)
    out = x[idx]
    first = np.flatnonzero(np.isfinite(x))
    if len(first):
        out[: first[0]] = x[first[0]]
    return np.nan_to_num(out)


def market_tensors(
    cache: FeatureCache,
    fold: FoldData,
    *,
    vol_window: int,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float64,
) -> MarketTensors:
    columns = state_feature_columns()
    missing = [c for c in columns if c not in cache.columns]
    if missing:
        raise ValueError(f"cache {cache.path} lacks state columns {missing[:4]}... (rebuild the cache)")
    x_all = fold.normalise(cache.features())
    index = [cache.columns.index(c) for c in columns]
    mid = _ffill(cache.column("close").astype(np.float64))
    seg = cache.column("segment_start").astype(bool)
    vol = np.nan_to_num(trailing_volatility(mid, seg, vol_window))

    def t(a: np.ndarray, dt: torch.dtype = dtype) -> torch.Tensor:
        return torch.as_tensor(np.array(a, copy=True), dtype=dt, device=device)

    return MarketTensors(
        features=t(x_all[:, index], torch.float32),
        mid=t(mid),
        high=t(np.where(np.isfinite(cache.column("high")), cache.column("high"), mid)),
        low=t(np.where(np.isfinite(cache.column("low")), cache.column("low"), mid)),
        bid=t(cache.column("bid")),
        ask=t(cache.column("ask")),
        vol=t(vol),
        segment=t(segment_ids(seg), torch.int64),
        feature_columns=columns,
    )
