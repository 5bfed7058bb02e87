"""Data integrity: zstd checksums on foxhunt's own DBN files, trade prices, duplicate and
overlapping inputs, MBO out of time order."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zstandard

import foxhunt.data.dbn_write as dbn_write
from foxhunt.data.arrays import ACTION_ADD, MboArrays
from foxhunt.data.book import rebuild_book
from foxhunt.data.config import DataConfig
from foxhunt.data.dbn_read import read_dbn, read_raw
from foxhunt.data.ingest import expand_paths, load_market
from foxhunt.data.schemas import Schema
from foxhunt.errors import (
    BadTradePriceError,
    DataError,
    DuplicateInputError,
    NonMonotonicTimestampError,
)
from tests.factories import make_book, make_trades
from tests.tamper import flip_bit

T0 = 1_767_000_000 * 10**9
N = 400


def _book(path: Path, start: int = 0, n: int = N) -> Path:
    ts = T0 + (start + np.arange(n)) * 10**8
    return dbn_write.write_book(path, make_book(ts, np.zeros(n)), symbols={1: "ESH6"})


def _missed_flips(path: Path, trials: int) -> int:
    """Single-bit flips of ``path`` read back as other records without an error."""
    base = read_raw(path).records.tobytes()
    missed = 0
    for seed in range(trials):
        bad = flip_bit(path, path.with_name("flipped.dbn.zst"), seed)
        try:
            missed += read_raw(bad).records.tobytes() != base
        except DataError:
            pass
    return missed


def test_foxhunts_own_files_carry_the_zstd_checksum_and_every_bit_flip_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _book(tmp_path / "own.mbp-10.dbn.zst")
    assert zstandard.get_frame_parameters(path.read_bytes()).has_checksum
    assert _missed_flips(path, 30) == 0  # a real Databento file: 20 of 20 caught
    # The same file written without the checksum (as before): flips decode as other data.
    real = zstandard.ZstdCompressor
    monkeypatch.setattr(
        dbn_write.zstandard, "ZstdCompressor", lambda level, write_checksum: real(level=level)
    )
    old = _book(tmp_path / "old.mbp-10.dbn.zst")
    assert not zstandard.get_frame_parameters(old.read_bytes()).has_checksum
    assert _missed_flips(old, 30) >= 3


def _trades(path: Path, prices: np.ndarray) -> Path:
    ts = T0 + np.arange(len(prices)) * 4 * 10**8 + 1
    trades = make_trades(ts, prices, np.ones(len(prices)), "B" * len(prices))
    return dbn_write.write_trades(path, trades, symbols={1: "ESH6"})


@pytest.mark.parametrize("bad", [float("nan"), -5000.0, 0.0])
def test_undefined_or_non_positive_trade_prices_are_refused(tmp_path: Path, bad: float) -> None:
    book = _book(tmp_path / "b.mbp-10.dbn.zst")
    prices = np.full(50, 5000.0)
    prices[[7, 9]] = bad
    trades = _trades(tmp_path / "t.trades.dbn.zst", prices)
    with pytest.raises(BadTradePriceError, match=r"2 trade\(s\) .*first: trade 7") as info:
        load_market([book, trades], DataConfig())
    assert str(trades) in str(info.value)
    good = _trades(tmp_path / "good.trades.dbn.zst", np.full(50, 5000.0))
    assert len(load_market([book, good], DataConfig()).trades[1]) == 50


def test_a_trade_carried_in_a_book_stream_is_checked_too(tmp_path: Path) -> None:
    ts = T0 + np.arange(20) * 10**8
    book = make_book(ts, np.zeros(20))
    action, price = book.action.copy(), book.price.copy()
    action[5], price[5] = ord("T"), -1.0
    fields = {k: getattr(book, k) for k in book.__dataclass_fields__}
    path = dbn_write.write_book(
        tmp_path / "x.mbp-10.dbn.zst", type(book)(**{**fields, "action": action, "price": price})
    )
    with pytest.raises(BadTradePriceError, match="price -1.0"):
        load_market([path], DataConfig())


def test_a_file_given_twice_or_with_its_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    book = _book(folder / "b.mbp-10.dbn.zst")
    with pytest.raises(DuplicateInputError, match="is given twice"):
        expand_paths([book, book])
    with pytest.raises(DuplicateInputError, match=r"is given twice: as .* \(in .*d\)"):
        expand_paths([folder, book])
    spelled = folder / ".." / "d" / "b.mbp-10.dbn.zst"  # another spelling of the same file
    with pytest.raises(DuplicateInputError):
        load_market([book, spelled], DataConfig())
    assert expand_paths([folder]) == [book]


def test_overlapping_files_of_one_kind_are_refused_and_adjacent_ones_pass(tmp_path: Path) -> None:
    first = _book(tmp_path / "a.mbp-10.dbn.zst", 0)
    copy = tmp_path / "copy.mbp-10.dbn.zst"
    shutil.copyfile(first, copy)
    with pytest.raises(DuplicateInputError, match="overlaps a.mbp-10.dbn.zst .*instrument 1"):
        load_market([first, copy], DataConfig())
    half = _book(tmp_path / "half.mbp-10.dbn.zst", N // 2)  # overlaps the second half
    with pytest.raises(DuplicateInputError, match="overlaps"):
        load_market([first, half], DataConfig())
    after = _book(tmp_path / "after.mbp-10.dbn.zst", N)  # starts where the first ends
    md = load_market([first, after], DataConfig())
    assert len(md.books[1]) == 2 * N
    trades = _trades(tmp_path / "t.trades.dbn.zst", np.full(50, 5000.0))  # another kind: fine
    assert len(load_market([first, trades], DataConfig()).books[1]) == N


def _mbo(ts: list[int]) -> MboArrays:
    n = len(ts)
    side = np.frombuffer(b"BA" * (n // 2), np.uint8).copy()
    price = np.where(side == ord("B"), 5000.0, 5000.25)
    return MboArrays(
        ts_event=T0 + np.asarray(ts, np.int64),
        ts_recv=T0 + np.asarray(ts, np.int64) + 10,
        instrument_id=np.ones(n, np.uint32),
        order_id=np.arange(1, n + 1, dtype=np.uint64),
        price_raw=np.rint(price * 1e9).astype(np.int64),
        price=price,
        size=np.ones(n, np.int64),
        action=np.full(n, ACTION_ADD, np.uint8),
        side=side,
        flags=np.full(n, 128, np.uint8),
        sequence=np.arange(n, dtype=np.uint32),
    )


def test_mbo_out_of_time_order_is_refused_by_the_reader_and_the_book_builder(tmp_path: Path) -> None:
    shuffled = _mbo([0, 5, 3, 9])
    path = dbn_write.write_mbo(tmp_path / "s.mbo.dbn.zst", shuffled)
    with pytest.raises(NonMonotonicTimestampError, match=r"s.mbo.dbn.zst: ts_event goes backwards"):
        read_dbn(path, expect=Schema.MBO)
    with pytest.raises(NonMonotonicTimestampError, match=r"the MBO records: .* backwards .*005 -> \d+003"):
        rebuild_book(shuffled)
    with pytest.raises(NonMonotonicTimestampError):
        load_market([path], DataConfig())
    ordered = _mbo([0, 3, 3, 9])  # equal timestamps are in order
    assert rebuild_book(ordered).n_events == 4
    read_dbn(dbn_write.write_mbo(tmp_path / "o.mbo.dbn.zst", ordered), expect=Schema.MBO)
