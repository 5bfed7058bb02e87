"""The market tensors' touch sizes and volume, read from a cache's raw columns."""

from __future__ import annotations

import math

import numpy as np

from foxhunt.env.market import touch_sizes

NAN = float("nan")


class _Cache:
    def __init__(self, **columns: list[float]) -> None:
        self._columns = {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}
        self.columns = list(self._columns)

    def column(self, name: str) -> np.ndarray:
        return self._columns[name]


def _same(a: np.ndarray | None, b: list[float]) -> bool:
    return a is not None and all(
        (math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b, strict=True)
    )


def test_sizes_only_where_the_book_is_known() -> None:
    # rows: a book; an ohlcv row (no book, sizes stored as 0); a crossed book; a NaN size; no volume
    cache = _Cache(
        bid=[100.0, NAN, 100.5, 100.0, 100.0],
        ask=[100.25, NAN, 100.25, 100.25, 100.25],
        bid_size=[7.0, 0.0, 3.0, NAN, 4.0],
        ask_size=[9.0, 0.0, 3.0, 2.0, 5.0],
        volume=[12.0, 40.0, 1.0, 0.0, NAN],
    )
    bid_size, ask_size, volume = touch_sizes(cache)  # type: ignore[arg-type]
    assert _same(bid_size, [7.0, NAN, NAN, NAN, 4.0])
    assert _same(ask_size, [9.0, NAN, NAN, 2.0, 5.0])
    assert _same(volume, [12.0, 40.0, 1.0, 0.0, NAN])  # traded volume needs no book


def test_absent_columns_mean_trade_through_only() -> None:
    cache = _Cache(bid=[100.0], ask=[100.25], volume=[3.0])
    bid_size, ask_size, volume = touch_sizes(cache)  # type: ignore[arg-type]
    assert bid_size is None and ask_size is None and _same(volume, [3.0])
