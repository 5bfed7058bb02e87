"""Many files at once: merge by time, split by instrument, MBO rebuilt, trades from MBP-10."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from foxhunt.data.arrays import ACTION_TRADE, BookArrays
from foxhunt.data.config import DataConfig
from foxhunt.data.dbn_write import write_book
from foxhunt.data.ingest import load_market
from foxhunt.data.schemas import DataSource
from tests.factories import make_book

T0 = 1_767_000_000 * 10**9  # 2025-12-29 09:20 UTC, inside a session
S = 10**9


def test_files_merge_in_time_order_and_split_by_instrument(tmp_path: Path) -> None:
    day2 = write_book(
        tmp_path / "b.mbp-10.dbn.zst", make_book(T0 + 86_400 * S + np.arange(5) * S, np.zeros(5))
    )
    # One file with two instruments interleaved in time.
    a = make_book(T0 + np.arange(0, 10, 2) * S, np.zeros(5), instrument_id=1)
    b = make_book(T0 + np.arange(1, 10, 2) * S, np.ones(5), instrument_id=2)
    both = BookArrays.concat([a, b])
    day1 = write_book(
        tmp_path / "a.mbp-10.dbn.zst",
        both.take(np.argsort(both.ts_event, kind="stable")),
        symbols={1: "ESH6", 2: "ESM6"},
    )
    md = load_market([day2, day1], DataConfig())  # given out of order on purpose
    assert set(md.books) == {1, 2} and md.symbols == {1: "ESH6", 2: "ESM6"}
    assert len(md.books[1]) == 10 and len(md.books[2]) == 5
    assert np.all(np.diff(md.books[1].ts_event) > 0)
    assert md.books[1].ts_event[0] == T0 and md.books[1].ts_event[-1] == T0 + (86_400 + 4) * S
    assert np.all(md.books[2].bid_px[:, 0] == 5000.25)
    # A folder is the same as its files.
    folder = load_market([tmp_path], DataConfig())
    np.testing.assert_array_equal(folder.books[1].ts_event, md.books[1].ts_event)


def test_trades_come_from_mbp10_trade_records_without_a_trades_file(tmp_path: Path) -> None:
    book = make_book(T0 + np.arange(6) * S, np.zeros(6))
    action = book.action.copy()
    action[[2, 4]] = ACTION_TRADE
    fields = {k: getattr(book, k) for k in book.__dataclass_fields__}
    path = write_book(tmp_path / "x.mbp-10.dbn.zst", BookArrays(**{**fields, "action": action}))
    md = load_market([path], DataConfig())
    assert md.trades[1].ts_event.tolist() == [T0 + 2 * S, T0 + 4 * S]


def test_real_mbo_is_rebuilt_and_crossed_states_counted(real_data_dir: Path) -> None:
    md = load_market([real_data_dir / "cme-es/esh4-glbx-mdp3-20231225.mbo.dbn.zst"], DataConfig())
    book = md.books[17077]
    assert md.symbol(17077) == "ESH4"
    assert 30_000 < len(book) < 45_000
    report = md.files[0]
    assert report.schema == "mbo" and report.records == 68_792
    # The pre-open crossed run is flagged, counted, and under the refusal threshold.
    assert report.crossed == int(md.crossed[17077].sum()) > 0
    assert report.crossed_share < 0.01


def test_real_ohlcv_splits_two_products(real_data_dir: Path) -> None:
    path = real_data_dir / "cme-es/futures_ohlcv-1m_2024-07-01T23-40_2024-07-02T00-10.dbn.zst"
    md = load_market([path], DataConfig(data_source=DataSource.OHLCV))
    assert {md.symbol(i) for i in md.ohlcv} == {"ESU4", "NQU4"}
    assert sum(len(v) for v in md.ohlcv.values()) == 60 and md.ohlcv_bar_ns == 60 * S


def test_real_mbo_trades_come_from_its_trade_records(real_data_dir: Path) -> None:
    from foxhunt.data.dbn_read import read_dbn

    path = real_data_dir / "cme-es/esh4-glbx-mdp3-20231225.mbo.dbn.zst"
    _, mbo = read_dbn(path)
    md = load_market([path], DataConfig())
    t = md.trades[17077]
    assert len(t) == int((mbo.action == ACTION_TRADE).sum()) > 0
    assert np.all(np.diff(t.ts_event) >= 0) and np.all(t.size > 0)


def test_ingest_reports_each_file_read(real_data_dir: Path) -> None:
    from foxhunt.console import Reporter

    lines: list[str] = []
    files = sorted((real_data_dir / "cme-es").glob("futures_*ohlcv*.dbn.zst"))
    load_market(files, DataConfig(data_source=DataSource.OHLCV, bar_seconds=60), Reporter.lines(lines.append))
    n = len(files)
    assert lines == ["ingest: reading DBN files ...", f"ingest: reading DBN files: done {n}/{n} in 0s"]
