"""A corpus of bad inputs: each raises its own typed error; the CLI exits 2 and writes nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.data.arrays import MboArrays
from foxhunt.data.config import DataConfig
from foxhunt.data.dbn_read import read_dbn, read_raw
from foxhunt.data.dbn_write import write_book, write_mbo
from foxhunt.data.ingest import load_market
from foxhunt.data.schemas import Schema
from foxhunt.errors import (
    CorruptCompressionError,
    CrossedBookError,
    EmptyFileError,
    MissingFileError,
    NonMonotonicTimestampError,
    NotDbnError,
    SchemaMismatchError,
    UndefinedPriceError,
)
from tests.factories import make_book

N = 400


def _good_book(path: Path) -> Path:
    rng = np.random.default_rng(0)
    ts = 1_767_000_000 * 10**9 + np.arange(N) * 10**8  # inside a session (no halt)
    return write_book(path, make_book(ts, np.cumsum(rng.integers(-1, 2, N))), symbols={1: "ESH6"})


def _corpus(tmp: Path) -> dict[str, tuple[Path, type[Exception]]]:
    good = _good_book(tmp / "good.mbp-10.dbn.zst")
    raw = good.read_bytes()
    cases: dict[str, tuple[Path, type[Exception]]] = {}

    p = tmp / "truncated.mbp-10.dbn.zst"
    p.write_bytes(raw[: len(raw) // 2])
    cases["truncated zstd"] = (p, CorruptCompressionError)

    p = tmp / "random.mbp-10.dbn.zst"
    p.write_bytes(np.random.default_rng(1).bytes(4096))
    cases["random bytes"] = (p, NotDbnError)

    p = tmp / "empty.mbp-10.dbn.zst"
    p.write_bytes(b"")
    cases["empty file"] = (p, EmptyFileError)

    ts = 1_767_000_000 * 10**9 + np.arange(N) * 10**8
    book = make_book(ts, np.zeros(N))
    shuffled = book.take(np.random.default_rng(2).permutation(N))
    p = write_book(tmp / "shuffled.mbp-10.dbn.zst", shuffled)
    cases["shuffled records"] = (p, NonMonotonicTimestampError)

    crossed = make_book(ts, np.zeros(N), spread_ticks=-1)  # best ask one tick below best bid
    p = write_book(tmp / "crossed.mbp-10.dbn.zst", crossed)
    cases["crossed book"] = (p, CrossedBookError)

    cases["missing file"] = (tmp / "nowhere.mbp-10.dbn.zst", MissingFileError)
    return cases


def _mbo_file(tmp: Path) -> Path:
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
        flags=np.array([128, 128], np.uint8),
        sequence=np.array([1, 2], np.uint32),
    )
    return write_mbo(tmp / "x.mbo.dbn.zst", mbo)


def test_each_bad_input_raises_its_own_error(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    for name, (path, error) in corpus.items():
        with pytest.raises(error) as info:
            load_market([path], DataConfig())
        assert str(path) in str(info.value), name  # the message names the file
        assert info.value.fix, name
    # The good file passes.
    md = load_market([tmp_path / "good.mbp-10.dbn.zst"], DataConfig())
    assert len(md.books[1]) == N


def test_mbo_where_mbp10_is_required(tmp_path: Path) -> None:
    with pytest.raises(SchemaMismatchError, match="rebuild-book"):
        read_dbn(_mbo_file(tmp_path), expect=Schema.MBP_10)


def test_schema_that_does_not_fit_data_source(tmp_path: Path) -> None:
    good = _good_book(tmp_path / "good.mbp-10.dbn.zst")
    with pytest.raises(SchemaMismatchError, match="data.data_source=mbp10"):
        load_market([good], DataConfig(data_source="ohlcv"))


def test_crossed_states_under_the_limit_are_flagged_or_dropped(tmp_path: Path) -> None:
    ts = 1_767_000_000 * 10**9 + np.arange(100) * 10**8
    book = make_book(ts, np.zeros(100))
    crossed_rows = np.zeros(100, bool)
    crossed_rows[[10, 50]] = True
    ask = book.ask_px.copy()
    ask[crossed_rows] -= 0.25  # locked: ask == bid
    book = type(book)(**{**{k: getattr(book, k) for k in book.__dataclass_fields__}, "ask_px": ask})
    path = write_book(tmp_path / "few.mbp-10.dbn.zst", book)
    flagged = load_market([path], DataConfig())
    assert len(flagged.books[1]) == 100 and flagged.crossed[1].sum() == 2
    assert flagged.files[0].crossed == 2 and flagged.files[0].dropped == 0
    dropped = load_market([path], DataConfig(crossed_policy="drop"))
    assert len(dropped.books[1]) == 98 and dropped.files[0].dropped == 2
    assert not dropped.books[1].crossed().any()


def test_cli_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    runner = CliRunner()
    for name, (path, _) in _corpus(tmp_path / "in").items():
        out = tmp_path / "out" / name.replace(" ", "_")
        result = runner.invoke(app, ["data", "bars", "--data", str(path), "--out", str(out), "-q"])
        assert result.exit_code == 2, (name, result.output)
        assert "error" in result.output and str(path.name) in result.output.replace("\n", "")
        assert not out.exists() or not any(out.iterdir()), name
        result = runner.invoke(app, ["data", "inspect", str(path), "--json"])
        if name == "crossed book":  # inspect reports the share rather than refusing the file
            assert result.exit_code == 0
            assert json.loads(result.stdout)["files"][0]["crossed_share"] == 1.0
        else:
            assert result.exit_code == 2, name
    # rebuild-book wants MBO: an MBP-10 file is refused and no output appears.
    good = tmp_path / "in" / "good.mbp-10.dbn.zst"
    target = tmp_path / "out" / "rebuilt.mbp-10.dbn.zst"
    result = runner.invoke(app, ["data", "rebuild-book", str(good), "--out", str(target)])
    assert result.exit_code == 2 and not target.exists()
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file() and os.path.getsize(p) >= 0]


def test_undefined_price_in_a_populated_level(tmp_path: Path) -> None:
    ts = 1_767_000_000 * 10**9 + np.arange(20) * 10**8
    book = make_book(ts, np.zeros(20))
    bid_px = book.bid_px.copy()
    bid_px[7, 3] = np.nan  # written as UNDEF_PRICE while bid_sz[7, 3] = 10
    fields = {k: getattr(book, k) for k in book.__dataclass_fields__}
    path = write_book(tmp_path / "undef.mbp-10.dbn.zst", type(book)(**{**fields, "bid_px": bid_px}))
    with pytest.raises(UndefinedPriceError, match="record 7, level 3"):
        load_market([path], DataConfig())
    # An empty level with an undefined price is normal (a thin book) and reads as NaN / 0.
    bid_sz = book.bid_sz.copy()
    bid_sz[7, 3] = 0
    ok = write_book(
        tmp_path / "thin.mbp-10.dbn.zst", type(book)(**{**fields, "bid_px": bid_px, "bid_sz": bid_sz})
    )
    md = load_market([ok], DataConfig())
    assert np.isnan(md.books[1].bid_px[7, 3]) and md.books[1].bid_sz[7, 3] == 0


def test_every_truncation_point_is_refused(tmp_path: Path, real_data_dir: Path) -> None:
    """A cut anywhere in a zstd file is refused, never read as a shorter valid file."""
    for source in (
        _good_book(tmp_path / "good.mbp-10.dbn.zst"),
        real_data_dir / "cme-es/esh4-glbx-mdp3-20231225.mbo.dbn.zst",  # Databento's multi-frame file
    ):
        raw = source.read_bytes()
        read_raw(source)  # the whole file reads
        for cut in np.linspace(1, len(raw) - 1, 40).astype(int):
            p = tmp_path / "cut.dbn.zst"
            p.write_bytes(raw[:cut])
            with pytest.raises((CorruptCompressionError, NotDbnError)):
                read_raw(p)
