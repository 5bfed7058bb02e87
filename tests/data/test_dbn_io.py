"""DBN decoding with Databento's library, our typed arrays, and the writer's byte layout."""

from __future__ import annotations

from pathlib import Path

import databento as db
import databento_dbn as dbn
import numpy as np
import pytest

from foxhunt.data.arrays import BookArrays, MboArrays, OhlcvArrays, TradeArrays
from foxhunt.data.dbn_read import read_dbn, read_raw, to_arrays
from foxhunt.data.dbn_write import (
    book_records,
    write_book,
    write_mbo,
    write_ohlcv,
    write_trades,
)
from foxhunt.data.schemas import Schema
from tests.factories import make_book, make_trades


def _fixture_files(real: Path) -> list[Path]:
    return sorted((real / "databento-fixtures").rglob("*.dbn.zst"))


def test_every_fixture_schema_decodes(real_data_dir: Path) -> None:
    files = _fixture_files(real_data_dir)
    assert len(files) >= 30
    seen = set()
    for path in files:
        f = read_raw(path)
        assert len(f) >= 1
        assert f.records["ts_event"].min() > 1_500_000_000 * 10**9  # a real 2020s timestamp
        seen.add(f.schema)
        if f.schema.has_typed_arrays:
            arrays = to_arrays(f)
            assert len(arrays) == len(f)
            assert arrays.ts_event.dtype == np.int64
    assert {
        Schema.MBP_10,
        Schema.MBP_1,
        Schema.TBBO,
        Schema.TRADES,
        Schema.MBO,
        Schema.OHLCV_1S,
        Schema.OHLCV_1M,
        Schema.OHLCV_1H,
        Schema.OHLCV_1D,
        Schema.DEFINITION,
        Schema.BBO_1S,
        Schema.STATISTICS,
    } <= seen


def test_first_mbp10_record_of_v3_fixture(real_data_dir: Path) -> None:
    f, book = read_dbn(
        real_data_dir / "databento-fixtures/dbn-v3/test_data.mbp-10.v3.dbn.zst",
        expect=Schema.MBP_10,
    )
    assert isinstance(book, BookArrays)
    assert f.version == 3 and f.instrument_symbols == {5482: "ESH1"}
    assert book.bid_px[0, 0] == 3720.25 and book.bid_sz[0, 0] == 24 and book.bid_ct[0, 0] == 15
    assert book.ask_px[0, 0] == 3720.50 and book.ask_sz[0, 0] == 10 and book.ask_ct[0, 0] == 8
    assert book.bid_px.shape == (2, 10)
    assert np.all(book.bid_sz[0] > 0) and np.all(book.ask_sz[0] > 0)  # all ten levels present
    assert np.all(np.diff(book.bid_px[0]) < 0) and np.all(np.diff(book.ask_px[0]) > 0)
    assert str(np.datetime64(int(book.ts_event[0]), "ns")) == "2020-12-28T13:00:00.000429831"


def test_definition_carries_tick_and_point_value(real_data_dir: Path) -> None:
    _, d = read_dbn(real_data_dir / "cme-es/futures_definition.dbn.zst", expect=Schema.DEFINITION)
    es = list(d.raw_symbol).index("ESU4")
    assert d.min_price_increment[es] == 0.25
    assert d.contract_multiplier[es] == 50.0


def test_writer_layout_matches_databento_record_classes() -> None:
    book = make_book(np.array([10, 20]), np.array([0, 3]))
    rec = book_records(book)
    for i in range(2):
        msg = dbn.MBP10Msg(
            publisher_id=1,
            instrument_id=1,
            ts_event=int(book.ts_event[i]),
            price=int(round(book.price[i] * 1e9)),
            size=1,
            action=dbn.Action.ADD,
            side=dbn.Side.BID,
            depth=0,
            ts_recv=int(book.ts_recv[i]),
            flags=128,
            sequence=i,
            levels=[
                dbn.BidAskPair(
                    bid_px=int(round(book.bid_px[i, k] * 1e9)),
                    ask_px=int(round(book.ask_px[i, k] * 1e9)),
                    bid_sz=10,
                    ask_sz=10,
                    bid_ct=2,
                    ask_ct=2,
                )
                for k in range(10)
            ],
        )
        assert rec[i].tobytes() == bytes(msg)


def _assert_same(a, b) -> None:
    assert type(a) is type(b)
    for name in a.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize("suffix", [".dbn", ".dbn.zst"])
def test_round_trip_every_writer(tmp_path: Path, suffix: str) -> None:
    book = make_book(np.arange(5) * 10**9, np.array([0, 1, 1, -2, 0]))
    trades = make_trades([1, 2, 3], [5000.25, 5000.0, 5000.5], [1, 4, 2], "BAB")
    bars = OhlcvArrays(
        ts_event=np.array([0, 60 * 10**9]),
        instrument_id=np.array([1, 1], np.uint32),
        open=np.array([1.0, 2.0]),
        high=np.array([2.0, 3.0]),
        low=np.array([0.5, 1.0]),
        close=np.array([1.5, 2.5]),
        volume=np.array([10, 20]),
    )
    mbo = MboArrays(
        ts_event=np.array([1, 2]),
        ts_recv=np.array([3, 4]),
        instrument_id=np.array([1, 1], np.uint32),
        order_id=np.array([7, 8], np.uint64),
        price_raw=np.array([5_000_250_000_000, 5_000_500_000_000]),
        price=np.array([5000.25, 5000.5]),
        size=np.array([1, 2]),
        action=np.frombuffer(b"AA", np.uint8).copy(),
        side=np.frombuffer(b"BA", np.uint8).copy(),
        flags=np.array([0, 128], np.uint8),
        sequence=np.array([1, 2], np.uint32),
    )
    cases = [
        (write_book, book, Schema.MBP_10, BookArrays),
        (write_trades, trades, Schema.TRADES, TradeArrays),
        (write_ohlcv, bars, Schema.OHLCV_1M, OhlcvArrays),
        (write_mbo, mbo, Schema.MBO, MboArrays),
    ]
    for writer, arrays, schema, cls in cases:
        path = writer(tmp_path / f"x.{schema.value}{suffix}", arrays, symbols={1: "ESH6"})
        f, back = read_dbn(path, expect=schema)
        assert isinstance(back, cls)
        assert f.instrument_symbols == {1: "ESH6"}
        _assert_same(arrays, back)
        # Databento's own reader agrees on the record count and schema.
        store = db.DBNStore.from_file(path)
        assert str(store.schema) == schema.value and len(store.to_ndarray()) == len(arrays)
    assert not list(tmp_path.glob(".*tmp"))  # no temp files left behind
