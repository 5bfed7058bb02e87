"""Inputs beyond full MBP-10 + trades: mixed folders, top-of-book files, book-only data.

* A folder that does not fit the data source is refused in one line that names every fix at once.
* MBP-1, TBBO and BBO files are one-level books: levels 2..10 are empty and the depth feature
  columns are 0 and listed as masked (TBBO and MBP-1 carry their trades).
* Book data without trade records (``foxhunt data rebuild-book`` output, BBO) builds bars and
  features, with the volume/trade fields 0 and masked.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.config.loader import load_config
from foxhunt.data.arrays import ACTION_NONE, ACTION_TRADE
from foxhunt.data.arrow_io import column, read_ipc
from foxhunt.data.bars import build_bars, build_snapshots
from foxhunt.data.config import DataConfig
from foxhunt.data.dbn_read import read_dbn, read_raw
from foxhunt.data.dbn_write import write_book
from foxhunt.data.ingest import MarketData, load_market
from foxhunt.data.schemas import BarKind, DataSource, MaskReason, RowUnit, Schema
from foxhunt.data.sessions import session_open_ns
from foxhunt.dataset.cache import compute_features
from foxhunt.errors import BarSpecError, FrontDoor, SchemaMismatchError
from foxhunt.features import market, mtf, ofi, tlob
from foxhunt.features.cache_file import open_cache
from foxhunt.features.pipeline import rows_from_market
from foxhunt.features.stack import mask_note
from tests.factories import make_book, make_trades

runner = CliRunner()
S = 10**9
FIXTURES = "databento-fixtures/GLBX.MDP3"
MBP1 = "cme-es/futures_mbp-1_2024-07-01T23-58_2024-07-02T00-02.dbn.zst"
TRADES = "cme-es/futures_trades_2024-07-01T23-58_2024-07-02T00-02.dbn.zst"
OHLCV_FILES = (
    "cme-es/es-2013-lean.ohlcv-1m.dbn.zst",
    "cme-es/futures_ohlcv-1m_2024-07-01T23-40_2024-07-02T00-10.dbn.zst",
)
ESH4 = "cme-es/esh4-glbx-mdp3-20231225.mbo.dbn.zst"


def _cli(*args: str | Path) -> tuple[int, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


# --- one refusal, every fix -----------------------------------------------------------------------


def test_mixed_folder_is_refused_in_one_line_naming_every_fix(real_data_dir: Path, tmp_path: Path) -> None:
    folder = real_data_dir / "cme-es"  # MBO, MBP-1, trades, OHLCV-1m and definition files
    code, output = _cli("data", "bars", "--data", folder, "--out", tmp_path / "refused", "-q")
    assert code == 2, output
    line = output.strip()
    assert "\n" not in line and line.startswith(f"error: {folder}:")
    # Fix 1: drop the OHLCV files (named); fix 2: keep only them, with every setting they need.
    assert "drop the 2 ohlcv-1m files (es-2013-lean.ohlcv-1m.dbn.zst, futures_ohlcv-1m_2024" in line
    assert "and pass --set data.data_source=ohlcv --set data.bar_seconds=60)" in line
    # Each fix works as stated, in one round trip.
    ohlcv = [real_data_dir / f for f in OHLCV_FILES]
    code, output = _cli(
        "data", "bars", "--data", *ohlcv, "--out", tmp_path / "ohlcv", "-q",
        "--set", "data.data_source=ohlcv", "--set", "data.bar_seconds=60",
    )  # fmt: skip
    assert code == 0, output
    book_files = [p for p in sorted(folder.iterdir()) if "ohlcv" not in p.name]
    code, output = _cli("data", "bars", "--data", *book_files, "--out", tmp_path / "book", "-q")
    assert code == 0, output
    table = read_ipc(tmp_path / "book" / "bars.arrow")
    # The front month follows the files (ESH4 in Dec 2023, ESM4 in May, ESU4 in July 2024): every
    # session of the inputs has bars, none is lost to a contract absent from it.
    instrument, volume = column(table, "instrument_id"), column(table, "volume")
    assert set(instrument.tolist()) == {17077, 5602, 118}
    assert "top-of-book data: mbp-1" in output  # the MBP-1 file makes the whole book one level
    # ESU4: the trades file's 120 trades (253 lots), counted once though the MBP-1 stream carries
    # them too. ESH4: the trades its MBO stream carries, which a trades file of another day used
    # to silence (volume 0).
    trades = read_raw(real_data_dir / TRADES).records
    assert volume[instrument == 118].sum() == trades["size"].sum() == 253
    assert volume[instrument == 17077].sum() > 0


def test_ohlcv_files_with_the_default_config_need_one_round_trip(real_data_dir: Path, tmp_path: Path) -> None:
    # Both settings (data.data_source=ohlcv, data.bar_seconds a multiple of 60) are named in one
    # message, so one round trip fixes the config instead of one per setting.
    path = real_data_dir / OHLCV_FILES[1]
    code, output = _cli("data", "bars", "--data", path, "--out", tmp_path, "-q")
    assert code == 2
    assert output.strip().endswith("(fix: pass --set data.data_source=ohlcv --set data.bar_seconds=60)")
    code, output = _cli(
        "data", "bars", "--data", path, "--out", tmp_path, "-q",
        "--set", "data.data_source=ohlcv", "--set", "data.bar_seconds=60",
    )  # fmt: skip
    assert code == 0, output


def test_ohlcv_snapshot_refusal_names_every_bar_setting(real_data_dir: Path) -> None:
    cfg = DataConfig(data_source=DataSource.OHLCV, row_unit=RowUnit.SNAPSHOT, bar_kind=BarKind.VOLUME)
    md = load_market([real_data_dir / OHLCV_FILES[1]], cfg)
    with pytest.raises(BarSpecError) as err:
        build_snapshots(md, cfg)
    cli = "pass --set data.row_unit=bar --set data.bar_kind=time --set data.bar_seconds=60"
    assert cli in err.value.render(FrontDoor.CLI)
    assert 'overrides=["data.row_unit=bar", "data.bar_kind=time", "data.bar_seconds=60"]' in str(err.value)
    bar_cfg = DataConfig(data_source=DataSource.OHLCV, bar_kind=BarKind.VOLUME, bar_seconds=90)
    with pytest.raises(BarSpecError, match=r'overrides=\["data.bar_kind=time", "data.bar_seconds=120"\]'):
        build_bars(md, bar_cfg)


def test_statistics_file_is_named_for_dropping(real_data_dir: Path) -> None:
    files = [real_data_dir / FIXTURES / f"test_data.{s}.dbn.zst" for s in ("mbp-10", "statistics")]
    with pytest.raises(SchemaMismatchError, match=r"fix: drop the 1 statistics file \(test_data.statistics"):
        load_market(files, DataConfig())


# --- top of book --------------------------------------------------------------------------------


@pytest.mark.parametrize("schema", [Schema.MBP_1, Schema.TBBO, Schema.BBO_1S, Schema.BBO_1M])
def test_top_of_book_fixtures_are_one_level_books(schema: Schema, real_data_dir: Path) -> None:
    path = real_data_dir / FIXTURES / f"test_data.{schema.value}.dbn.zst"
    md = load_market([path], DataConfig())  # refused outright before
    _, raw = read_dbn(path)
    book = md.books[5482]
    assert md.book_levels == 1 and book.levels == DataConfig().levels == 10
    np.testing.assert_array_equal(book.bid_px[:, 0], raw.bid_px[:, 0])  # type: ignore[union-attr]
    np.testing.assert_array_equal(book.ask_sz[:, 0], raw.ask_sz[:, 0])  # type: ignore[union-attr]
    assert np.isnan(book.bid_px[:, 1:]).all() and not book.ask_sz[:, 1:].any()
    assert not book.bid_ct[:, 1:].any()
    if schema is Schema.TBBO:  # every TBBO record is a trade (with the touch just before it)
        records = read_raw(path).records
        assert len(md.trades[5482]) == len(records) == 4
        np.testing.assert_array_equal(md.trades[5482].size, records["size"])
    else:  # these fixtures hold book updates (MBP-1: adds only) or quotes (BBO) only
        assert not md.trades


DEPTH_COLUMNS = {f"tlob.{s}" for s in tlob.DEPTH_SLOTS} | {f"ofi.{s}" for s in ofi.DEPTH_SLOTS}
TRADE_COLUMNS = {f"market.{s}" for s in market.TRADE_SLOTS} | {f"ofi.{s}" for s in ofi.TRADE_SLOTS}


def _features(files: list[Path], *sets: str):
    """The feature stack of ``files`` as the cache computes it (without writing one)."""
    cfg = load_config(overrides=sets)
    return compute_features(rows_from_market(load_market(files, cfg.data), cfg.data), cfg)


def test_mbp1_with_trades_masks_the_depth_columns(real_data_dir: Path, tmp_path: Path) -> None:
    files = [real_data_dir / MBP1, real_data_dir / TRADES]
    code, output = _cli("data", "bars", "--data", *files, "--out", tmp_path / "bars", "-q")
    assert code == 0, output
    assert "masked: book levels 2-10 empty, depth features will be 0 (top-of-book data: mbp-1)" in output
    assert "no trade records" not in output
    meta = read_ipc(tmp_path / "bars" / "bars.arrow").schema.metadata
    assert json.loads(meta[b"book_levels"]) == 1
    assert list(json.loads(meta[b"masked"])) == [MaskReason.TOP_OF_BOOK.value]

    fm = _features(files, "data.row_unit=snapshot")
    assert fm.masked == dict.fromkeys(DEPTH_COLUMNS, MaskReason.TOP_OF_BOOK)
    assert mask_note(fm.masked) == "masked (0): 28 book-depth columns (top-of-book data: levels 2-10 absent)"
    values = dict(zip(fm.columns, fm.values.T, strict=True))
    for c in DEPTH_COLUMNS:  # computed from the empty levels, they would not all be 0
        assert not values[c].any(), c
    # What the touch and the trades do carry is computed, not masked.
    for c in ("tlob.imbalance_1", "ofi.ofi_l0", "ofi.spread_ticks", "ofi.vpin", "snapshot.time_since_trade"):
        assert c not in fm.masked and values[c].any(), c


# --- book without trades ------------------------------------------------------------------------


def _without_trades(src: Path, dst: Path) -> Path:
    """The rebuilt book of ``src`` with its trade records turned into plain book updates: the synthetic
    market's events end on the trade, so its rebuilt book still carries trades; a real one (ESH4)
    ends on the fills and carries none."""
    f, book = read_dbn(src, expect=Schema.MBP_10)
    action = np.where(book.action == ACTION_TRADE, ACTION_NONE, book.action)  # type: ignore[union-attr]
    plain = dataclasses.replace(book, action=action.astype(np.uint8))  # type: ignore[type-var]
    write_book(dst, plain, symbols=f.instrument_symbols, dataset=f.dataset)
    return dst


def test_synthetic_rebuilt_book_without_trades_builds_bars_and_features(tmp_path: Path) -> None:
    synth_dir = tmp_path / "market"
    code, output = _cli(
        "data", "synth", "--out", synth_dir, "--seed", "5", "--sessions", "2",
        "--events-per-session", "3000", "--schemas", "mbo", "-q",
    )  # fmt: skip
    assert code == 0, output
    books = []
    for i, mbo in enumerate(sorted(synth_dir.glob("*.mbo.dbn.zst"))):
        rebuilt = tmp_path / f"rebuilt{i}.mbp-10.dbn.zst"
        code, output = _cli("data", "rebuild-book", mbo, "--out", rebuilt, "-q")
        assert code == 0, output
        books.append(_without_trades(rebuilt, tmp_path / f"book{i}.mbp-10.dbn.zst"))
    sets = ("--set", "data.bar_seconds=60")
    code, output = _cli("data", "bars", "--data", *books, "--out", tmp_path / "bars", "-q", *sets)
    assert code == 0, output
    table = read_ipc(tmp_path / "bars" / "bars.arrow")
    n = table.num_rows
    # Both sessions have bars (before, only the first session entered the front-month table).
    assert sorted(set(column(table, "trade_date").tolist())) == [20260302, 20260303] and n > 100
    assert not column(table, "volume").any() and not column(table, "volume_mask").any()
    assert column(table, "book_mask").all() and np.isfinite(column(table, "mid_close")).all()
    assert f"masked: volume and trade fields 0 on {n:,} of {n:,} bars (no trade records" in output

    fm = _features(books, "data.bar_seconds=60")
    assert set(fm.masked) == TRADE_COLUMNS | {f"mtf.{s}" for s in mtf.TRADE_SLOTS}
    assert set(fm.masked.values()) == {MaskReason.NO_TRADES}
    values = dict(zip(fm.columns, fm.values.T, strict=True))
    assert values["tlob.imbalance_10"].any() and values["ofi.ofi_total"].any()  # the full depth is used


@pytest.mark.slow  # ~20 s on the shared host, most of it the cache's code fingerprint (schema hash)
def test_features_build_says_what_is_masked_and_records_it(real_data_dir: Path, tmp_path: Path) -> None:
    files = [real_data_dir / MBP1, real_data_dir / TRADES]
    args = ("--row-unit", "snapshot", "--out", tmp_path, "-q")
    code, output = _cli("features", "build", "--data", *files, *args)
    assert code == 0, output
    assert "masked (0): 28 book-depth columns (top-of-book data: levels 2-10 absent)" in output
    cache = open_cache(next(tmp_path.glob("features-snapshot-*.arrow")))
    assert cache.meta["masked"] == dict.fromkeys(DEPTH_COLUMNS, MaskReason.TOP_OF_BOOK.value)
    for c in DEPTH_COLUMNS:
        assert not cache.column(c).any(), c
    assert np.isfinite(cache.column("volume")).all()
    # Book only (ESH4 rebuilt): the volume columns are masked, and the row volume the environment
    # fills limit orders against is unknown (NaN), not "nothing traded".
    rebuilt = tmp_path / "esh4.mbp-10.dbn.zst"
    assert _cli("data", "rebuild-book", real_data_dir / ESH4, "--out", rebuilt, "-q")[0] == 0
    # 120 bars: 20-bar direction labels (the smoke plan's horizon); the default 60-bar label's 60-row
    # embargo leaves the profile's folds no training row, and features build refuses the file
    short = ("--set", "labels.bar_horizons=[20]")
    code, output = _cli("features", "build", "--data", rebuilt, "--out", tmp_path / "book", *short, "-q")
    assert code == 0, output
    assert "volume/trade columns (no trade records: book-only data)" in output
    cache = open_cache(next((tmp_path / "book").glob("features-bar-*.arrow")))
    assert set(cache.meta["masked"].values()) == {MaskReason.NO_TRADES.value}
    assert np.isnan(cache.column("volume")).all() and cache.table.num_rows == 120


def test_real_esh4_rebuilt_book_builds_its_120_bars(real_data_dir: Path, tmp_path: Path) -> None:
    rebuilt = tmp_path / "esh4.mbp-10.dbn.zst"
    code, output = _cli("data", "rebuild-book", real_data_dir / ESH4, "--out", rebuilt, "-q")
    assert code == 0, output
    # The rebuilt book's first state falls in another session than the rest: the front-month table
    # must still hold the session of the other states, or no bar is left.
    code, output = _cli("data", "bars", "--data", rebuilt, "--out", tmp_path / "bars", "-q")
    assert code == 0, output
    table = read_ipc(tmp_path / "bars" / "bars.arrow")
    assert table.num_rows == 120  # two hours of 30 s bars
    assert not column(table, "volume").any() and not column(table, "volume_mask").any()
    assert "volume and trade fields 0 on 120 of 120 bars" in output
    fm = _features([rebuilt])
    assert set(fm.masked) == TRADE_COLUMNS | {f"mtf.{s}" for s in mtf.TRADE_SLOTS}
    assert np.isfinite(fm.values).all() and fm.values[:, fm.layout.group("tlob").slice].any()
    # The same file as MBO (which carries its trades) gives the same bars with their volume.
    code, output = _cli("data", "bars", "--data", real_data_dir / ESH4, "--out", tmp_path / "mbo", "-q")
    assert code == 0, output
    mbo = read_ipc(tmp_path / "mbo" / "bars.arrow")
    np.testing.assert_array_equal(column(mbo, "mid_close"), column(table, "mid_close"))
    assert column(mbo, "volume").sum() > 0 and "masked" not in output


def test_volume_bars_of_a_book_without_trades_name_the_fix() -> None:
    o = session_open_ns(20260302, "America/Chicago", DataConfig().session_open)
    book = make_book(o + np.arange(1, 10) * S, np.zeros(9))
    md = MarketData(books={1: book}, crossed={1: book.crossed()})
    api_fix = r'pass api.config\(\.\.\., overrides=\["data.bar_kind=time"\]\)'
    with pytest.raises(BarSpecError, match=api_fix) as err:
        build_bars(md, DataConfig(bar_kind=BarKind.VOLUME))
    assert "pass --set data.bar_kind=time" in err.value.render(FrontDoor.CLI)


def test_volume_is_masked_only_in_sessions_without_trade_data() -> None:
    # Trades cover session 1 only: its bars keep their (possibly zero) volume, session 2's are masked.
    opens = [session_open_ns(d, "America/Chicago", DataConfig().session_open) for d in (20260302, 20260303)]
    t = np.concatenate([o + np.arange(1, 31) * 10 * S for o in opens])
    book = make_book(t, np.arange(60) % 4)
    trades = make_trades(opens[0] + np.array([15, 95]) * S, [5000.0, 5000.25], [2, 3], "BA")
    md = MarketData(books={1: book}, crossed={1: book.crossed()}, trades={1: trades})
    md.trade_coverage = [(1, 20260302, 20260302)]  # as ingest records it for one trades file
    bars = build_bars(md, DataConfig(bar_seconds=60)).bars
    first = bars.trade_date == 20260302
    assert bars.volume_mask.tolist() == first.tolist() and bars.flow_mask.tolist() == first.tolist()
    assert bars.volume[first].tolist() == [2, 3, 0, 0, 0, 0]
