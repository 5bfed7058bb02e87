"""load_market's steps (foxhunt.data.ingest), each alone: the data-source check, the per-file
collection, the merge and the refusal without primary files (load_market as a whole:
tests/data/test_ingest.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from foxhunt.data.arrays import BookArrays, OhlcvArrays
from foxhunt.data.config import DataConfig
from foxhunt.data.dbn_read import read_raw
from foxhunt.data.dbn_write import write_book
from foxhunt.data.ingest import (
    MarketData,
    _check_accepted,
    _check_primary,
    _merge_parts,
    _Parts,
    _prefetched,
    _take_book_file,
    read_book_file,
)
from foxhunt.data.schemas import DataSource, Schema
from foxhunt.errors import SchemaMismatchError
from tests.factories import make_book

T0 = 1_767_000_000 * 10**9
S = 10**9


def test_check_accepted_names_the_data_source_that_reads_the_file() -> None:
    _check_accepted(Path("a.dbn.zst"), Schema.MBO, DataConfig())  # mbp10 reads MBO
    with pytest.raises(SchemaMismatchError, match="data.data_source=ohlcv"):
        _check_accepted(Path("a.dbn.zst"), Schema.OHLCV_1M, DataConfig())
    with pytest.raises(SchemaMismatchError, match="pass mbp-10 / mbo"):
        _check_accepted(Path("a.dbn.zst"), Schema.STATISTICS, DataConfig())


def test_take_book_file_keeps_states_and_the_levels(tmp_path: Path) -> None:
    path = write_book(tmp_path / "a.mbp-10.dbn.zst", make_book(T0 + np.arange(4) * S, np.zeros(4)))
    md, parts = MarketData(trade_coverage=[]), _Parts()
    f = read_raw(path)
    report = _take_book_file(path, f, read_book_file(f, DataConfig()), DataConfig(), md, parts)
    assert report.book_states == 4 and len(parts.books) == 1 and len(parts.books[0]) == 4
    assert parts.crossed[0].dtype == bool and not parts.crossed[0].any()
    assert md.book_levels == DataConfig().levels and len(parts.carried) == 1


def test_merge_parts_sorts_by_time_and_splits_instruments() -> None:
    a = make_book(T0 + np.array([0, 4]) * S, np.zeros(2), instrument_id=1)
    b = make_book(T0 + np.array([1, 2]) * S, np.ones(2), instrument_id=2)
    c = make_book(T0 + np.array([3]) * S, np.zeros(1), instrument_id=1)
    parts = _Parts(books=[a, b, c], crossed=[np.array([True, False]), np.zeros(2, bool), np.array([True])])
    md = MarketData()
    _merge_parts(md, parts, [])
    assert md.books[1].ts_event.tolist() == [T0, T0 + 3 * S, T0 + 4 * S]
    assert md.crossed[1].tolist() == [True, True, False]  # each flag stays with its state
    assert md.books[2].ts_event.tolist() == [T0 + S, T0 + 2 * S]
    assert isinstance(md.books[1], BookArrays) and not md.trades


def test_merge_parts_refuses_two_ohlcv_intervals() -> None:
    dtypes = (np.int64, np.uint32, float, float, float, float, np.int64)
    empty = OhlcvArrays(*(np.zeros(0, t) for t in dtypes))
    parts = _Parts(ohlcv=[empty], ohlcv_schemas={Schema.OHLCV_1M, Schema.OHLCV_1H})
    with pytest.raises(SchemaMismatchError, match="several intervals"):
        _merge_parts(MarketData(), parts, [Path("x.dbn")])


def test_check_primary() -> None:
    with pytest.raises(SchemaMismatchError, match="no book file"):
        _check_primary(MarketData(), DataConfig(), [])
    with pytest.raises(SchemaMismatchError, match="no OHLCV file"):
        _check_primary(MarketData(), DataConfig(data_source=DataSource.OHLCV, row_unit="bar"), [])
    md = MarketData(books={1: make_book(np.array([T0]), np.zeros(1))})
    _check_primary(md, DataConfig(), [])  # a book: nothing to refuse


def test_prefetched_keeps_the_order_and_raises_an_items_error_at_its_turn() -> None:
    def fn(x: int) -> int:
        if x == 5:
            raise ValueError("five")
        return x * x

    out = _prefetched(fn, list(range(8)), workers=3)
    seen = [next(out) for _ in range(5)]  # everything before the failing item, in order
    with pytest.raises(ValueError, match="five"):
        next(out)
    assert seen == [0, 1, 4, 9, 16]
    threaded, sequential = _prefetched(fn, [1, 2, 3], workers=3), _prefetched(fn, [1, 2, 3], workers=1)
    assert list(threaded) == list(sequential) == [1, 4, 9]
