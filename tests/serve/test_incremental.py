"""The resumable kernels ``foxhunt serve`` runs on a stream: fed chunk by chunk they give the batch
pipeline's result bit for bit (the batch is one chunk from the initial state)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from foxhunt.data.arrays import BookArrays, MboArrays
from foxhunt.data.book import BookState, rebuild_book
from foxhunt.data.config import DataConfig
from foxhunt.data.dbn_read import read_dbn, read_raw
from foxhunt.data.dbn_write import record_dtype
from foxhunt.data.ingest import MarketData, load_market
from foxhunt.data.schemas import Schema
from foxhunt.serve.source import StreamMeta
from foxhunt.serve.state import BookStream, book_market

ESH4 = "cme-es/esh4-glbx-mdp3-20231225.mbo.dbn.zst"  # ESH4: a snapshot of 8,725 orders, then 2 h live


def _chunks(mbo: MboArrays, cuts: list[int]) -> list[MboArrays]:
    edges = [0, *cuts, len(mbo)]
    return [mbo.take(np.arange(a, b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


BOOK_FIELDS = ("ts_event", "ts_recv", "instrument_id", "action", "side", "flags", "price", "size", "depth")
LEVEL_FIELDS = ("sequence", "bid_px", "ask_px", "bid_sz", "ask_sz", "bid_ct", "ask_ct")


def _same(a: BookArrays, b: BookArrays) -> bool:
    return all(
        np.array_equal(getattr(a, f), getattr(b, f), equal_nan=f in ("price", "bid_px", "ask_px"))
        for f in BOOK_FIELDS + LEVEL_FIELDS
    )


@pytest.fixture(scope="module")
def esh4(real_data_dir: Path) -> MboArrays:
    path = real_data_dir / ESH4
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    _, mbo = read_dbn(path, expect=Schema.MBO)
    assert isinstance(mbo, MboArrays)
    return mbo


def test_mbo_rebuilt_in_chunks_is_the_batch_rebuild_bit_for_bit(esh4: MboArrays) -> None:
    whole = rebuild_book(esh4).book
    # Cuts inside the snapshot replay (a run of F_SNAPSHOT records), one record apart, and through
    # the live records, so the order table is rehashed and the levels grow inside a later chunk.
    cuts = [1, 2, 3, 100, 4_000, 8_724, 8_725, 8_726, 20_000, 20_001, 45_000, 68_000]
    states: dict[int, BookState] = {}
    parts = [rebuild_book(c, states=states).book for c in _chunks(esh4, cuts)]
    chunked = BookArrays.concat(parts)
    assert len(whole) > 30_000
    assert _same(chunked, whole)
    # Without the carried state, a later chunk starts from an empty book: the states differ.
    fresh = BookArrays.concat([rebuild_book(c).book for c in _chunks(esh4, cuts)])
    assert len(fresh) != len(whole) or not _same(fresh, whole)


def test_a_state_keeps_the_counters_of_the_book_it_holds(esh4: MboArrays) -> None:
    whole = rebuild_book(esh4)
    states: dict[int, BookState] = {}
    for c in _chunks(esh4, [30_000]):
        last = rebuild_book(c, states=states)
    assert (last.live_orders, last.bid_levels, last.ask_levels, last.total_bid_size) == (
        whole.live_orders,
        whole.bid_levels,
        whole.ask_levels,
        whole.total_bid_size,
    )


def _stream_of(path: Path) -> tuple[StreamMeta, np.ndarray]:
    """A file as ``foxhunt serve`` receives it: its stream and its records, decoded from their bytes."""
    f = read_raw(path)
    return StreamMeta(f.schema, f.dataset, dict(f.instrument_symbols)), np.frombuffer(
        f.records.tobytes(), dtype=record_dtype(f.schema)
    )


def _assert_same_market(got: MarketData, want: MarketData) -> None:
    assert (got.book_levels, got.symbols, got.trade_coverage) == (
        want.book_levels,
        want.symbols,
        want.trade_coverage,
    )
    assert sorted(got.books) == sorted(want.books) and sorted(got.trades) == sorted(want.trades)
    for iid, book in want.books.items():
        assert _same(got.books[iid], book)
        assert np.array_equal(got.crossed[iid], want.crossed[iid])
    for iid, trades in want.trades.items():
        for f in ("ts_event", "ts_recv", "instrument_id", "price", "size", "side", "flags", "sequence"):
            assert np.array_equal(getattr(got.trades[iid], f), getattr(trades, f)), f


@pytest.mark.parametrize(
    ("name", "cuts"),
    [
        (ESH4, [5, 8_725, 30_000, 30_001, 60_000]),  # MBO: the book rebuilt chunk by chunk
        ("databento-fixtures/GLBX.MDP3/test_data.mbp-10.dbn.zst", [1]),  # MBP-10, real, 2 records
    ],
)
def test_a_book_stream_fed_in_chunks_is_the_market_load_market_reads(
    real_data_dir: Path, name: str, cuts: list[int]
) -> None:
    """serve's market of a book stream (records decoded as they arrive) is ingest's, field for field."""
    path = real_data_dir / name
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    cfg = DataConfig()
    meta, recs = _stream_of(path)
    stream = BookStream(meta, cfg)
    edges = [0, *[c for c in cuts if c < len(recs)], len(recs)]
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        stream.feed(recs[a:b])
        book_market([stream])  # a row close in between changes nothing of what follows
    _assert_same_market(book_market([stream]), load_market([path], cfg))
