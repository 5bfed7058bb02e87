"""Ingest many DBN files at once: validate, merge in time order, split by instrument.

:func:`load_market` is the one entry point the later stages use. It reads every file with
:mod:`foxhunt.data.dbn_read`, checks what ``data_source`` needs (``mbp10``: MBP-10 or MBO books,
trades; ``ohlcv``: OHLCV bars), rebuilds MBO into MBP-10 book states, applies the crossed-book
policy, and returns per-instrument arrays sorted by ``ts_event`` plus a report of what it counted.
Nothing is written; any problem raises a typed :class:`~foxhunt.errors.DataError` naming the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from foxhunt.config.data import DataConfig
from foxhunt.data.arrays import (
    ACTION_TRADE,
    BookArrays,
    DefinitionArrays,
    MboArrays,
    OhlcvArrays,
    TradeArrays,
)
from foxhunt.data.dbn_read import DbnFile, read_raw, to_arrays
from foxhunt.data.schemas import CrossedPolicy, DataSource, Schema
from foxhunt.errors import (
    CrossedBookError,
    MissingFileError,
    NonMonotonicTimestampError,
    SchemaMismatchError,
)

DBN_SUFFIXES = (".dbn", ".dbn.zst")

ACCEPTED: dict[DataSource, tuple[Schema, ...]] = {
    DataSource.MBP10: (Schema.MBP_10, Schema.MBO, Schema.TRADES, Schema.DEFINITION),
    DataSource.OHLCV: (
        Schema.OHLCV_1S,
        Schema.OHLCV_1M,
        Schema.OHLCV_1H,
        Schema.OHLCV_1D,
        Schema.DEFINITION,
    ),
}


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; a directory contributes its ``*.dbn`` / ``*.dbn.zst`` files, sorted."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.name.endswith(DBN_SUFFIXES))
            if not found:
                raise MissingFileError(p, "directory holds no .dbn or .dbn.zst files", "point at DBN files")
            out.extend(found)
        elif not p.exists():
            raise MissingFileError(p, "no such file or directory", "check the path")
        else:
            out.append(p)
    return out


@dataclass
class FileReport:
    """What ingest saw in one file (the rows of ``foxhunt data inspect``)."""

    path: str
    schema: str
    dataset: str
    records: int
    instruments: dict[int, str]
    start: int
    end: int
    book_states: int = 0
    crossed: int = 0
    dropped: int = 0
    median_spread_ticks: float | None = None

    @property
    def crossed_share(self) -> float:
        return self.crossed / self.book_states if self.book_states else 0.0


@dataclass
class MarketData:
    """Everything ingested, per instrument, each array sorted by ``ts_event`` (stable)."""

    books: dict[int, BookArrays] = field(default_factory=dict)
    crossed: dict[int, np.ndarray] = field(default_factory=dict)  # [n] bool per book state
    trades: dict[int, TradeArrays] = field(default_factory=dict)
    ohlcv: dict[int, OhlcvArrays] = field(default_factory=dict)
    ohlcv_bar_ns: int = 0
    definitions: DefinitionArrays | None = None
    symbols: dict[int, str] = field(default_factory=dict)
    files: list[FileReport] = field(default_factory=list)

    @property
    def instruments(self) -> list[int]:
        return sorted(set(self.books) | set(self.trades) | set(self.ohlcv))

    def symbol(self, instrument_id: int) -> str:
        return self.symbols.get(int(instrument_id), str(int(instrument_id)))


def check_monotonic(path: Path, ts: np.ndarray, instrument_id: np.ndarray) -> None:
    """Raise unless ``ts`` is non-decreasing within each instrument (file order)."""
    for iid in np.unique(instrument_id):
        t = ts[instrument_id == iid]
        back = np.flatnonzero(np.diff(t) < 0)
        if len(back):
            i = int(back[0])
            raise NonMonotonicTimestampError(
                path,
                f"ts_event goes backwards for instrument {int(iid)} ({len(back)} times; first "
                f"after record {i} of that instrument: {int(t[i])} -> {int(t[i + 1])})",
                "the file was re-ordered or corrupted; re-download it",
            )


def median_spread_ticks(book: BookArrays, tick: float) -> float | None:
    ok = (book.bid_sz[:, 0] > 0) & (book.ask_sz[:, 0] > 0)
    if not ok.any():
        return None
    return float(np.median((book.ask_px[ok, 0] - book.bid_px[ok, 0]) / tick))


def _split(arrays, instrument_id: np.ndarray) -> dict[int, object]:
    return {int(i): arrays.take(instrument_id == i) for i in np.unique(instrument_id)}


def _merge_sorted(parts: list, cls) -> object:
    merged = cls.concat(parts) if len(parts) > 1 else parts[0]
    order = np.argsort(merged.ts_event, kind="stable")
    if np.all(order == np.arange(len(order))):
        return merged
    return merged.take(order)


def _apply_crossed_policy(
    path: Path, book: BookArrays, cfg: DataConfig, report: FileReport
) -> tuple[BookArrays, np.ndarray]:
    crossed = book.crossed()
    report.book_states = len(book)
    report.crossed = int(crossed.sum())
    if report.crossed_share > cfg.max_crossed_share:
        raise CrossedBookError(
            path,
            f"{report.crossed} of {len(book)} book states are crossed or locked "
            f"({report.crossed_share:.1%} > data.max_crossed_share = {cfg.max_crossed_share:.1%})",
            "the book is corrupt or was built wrongly; re-download or raise data.max_crossed_share",
        )
    if cfg.crossed_policy is CrossedPolicy.DROP and report.crossed:
        report.dropped = report.crossed
        return book.take(~crossed), np.zeros(len(book) - report.crossed, bool)
    return book, crossed


def trades_in(arrays: BookArrays | MboArrays) -> TradeArrays:
    """Trade prints carried inside a book stream (action ``T``; ``side`` is the aggressor).

    Databento MBP-10 and MBO both carry trades as ``T`` records. ``F`` (fill) records repeat a
    trade from the resting side and are not counted again.
    """
    t = arrays.take(arrays.action == ACTION_TRADE)
    return TradeArrays(
        ts_event=t.ts_event,
        ts_recv=t.ts_recv,
        instrument_id=t.instrument_id,
        price=t.price,
        size=t.size,
        side=t.side,
        flags=t.flags,
        sequence=t.sequence,
    )


def read_book_file(f: DbnFile, cfg: DataConfig) -> tuple[BookArrays, TradeArrays, FileReport]:
    """Book states of one MBP-10 or MBO file (MBO is rebuilt), validated, the trades the
    stream carries, and the file's report."""
    arrays = to_arrays(f)
    report = FileReport(
        path=str(f.path),
        schema=f.schema.value,
        dataset=f.dataset,
        records=len(f),
        instruments={},
        start=int(f.records["ts_event"].min()),
        end=int(f.records["ts_event"].max()),
    )
    if isinstance(arrays, MboArrays):
        check_monotonic(f.path, arrays.ts_event, arrays.instrument_id)
        from foxhunt.data.book import rebuild_book  # numba compile only when MBO is read

        book = rebuild_book(arrays, levels=cfg.levels).book
    else:
        assert isinstance(arrays, BookArrays)
        check_monotonic(f.path, arrays.ts_event, arrays.instrument_id)
        book = arrays
    report.median_spread_ticks = median_spread_ticks(book, cfg.tick_size)
    return book, trades_in(arrays), report


def load_market(paths: Sequence[str | Path], cfg: DataConfig) -> MarketData:
    """Read, validate, merge and split every file under ``paths`` for ``cfg.data_source``."""
    files = expand_paths(paths)
    accepted = ACCEPTED[cfg.data_source]
    md = MarketData()
    book_parts: list[BookArrays] = []
    crossed_parts: list[np.ndarray] = []
    trade_parts: list[TradeArrays] = []
    carried_trades: list[TradeArrays] = []  # T records inside MBP-10/MBO streams
    ohlcv_parts: list[OhlcvArrays] = []
    ohlcv_schemas: set[Schema] = set()
    defs: list[DefinitionArrays] = []
    for path in files:
        f = read_raw(path)
        if f.schema not in accepted:
            other = DataSource.OHLCV if f.schema.is_ohlcv else DataSource.MBP10
            hint = (
                f"set data.data_source={other.value}"
                if f.schema in ACCEPTED[other]
                else f"pass {' / '.join(s.value for s in accepted)} files"
            )
            raise SchemaMismatchError(
                path,
                f"file is {f.schema.value}; data_source '{cfg.data_source.value}' needs "
                f"{' / '.join(s.value for s in accepted)}",
                hint,
            )
        md.symbols.update(f.instrument_symbols)
        if f.schema in (Schema.MBP_10, Schema.MBO):
            book, carried, report = read_book_file(f, cfg)
            book, crossed = _apply_crossed_policy(path, book, cfg, report)
            carried_trades.append(carried)
            book_parts.append(book)
            crossed_parts.append(crossed)
        else:
            arrays = to_arrays(f)
            report = FileReport(
                path=str(path),
                schema=f.schema.value,
                dataset=f.dataset,
                records=len(f),
                instruments={},
                start=int(f.records["ts_event"].min()),
                end=int(f.records["ts_event"].max()),
            )
            if isinstance(arrays, TradeArrays):
                check_monotonic(path, arrays.ts_event, arrays.instrument_id)
                trade_parts.append(arrays)
            elif isinstance(arrays, OhlcvArrays):
                check_monotonic(path, arrays.ts_event, arrays.instrument_id)
                ohlcv_parts.append(arrays)
                ohlcv_schemas.add(f.schema)
            elif isinstance(arrays, DefinitionArrays):
                defs.append(arrays)
        ids = np.unique(f.records["instrument_id"])
        report.instruments = {int(i): f.instrument_symbols.get(int(i), str(int(i))) for i in ids}
        md.files.append(report)

    if len(ohlcv_schemas) > 1:
        raise SchemaMismatchError(
            files[0],
            f"OHLCV files of several intervals ({', '.join(sorted(s.value for s in ohlcv_schemas))})",
            "pass OHLCV files of one interval",
        )
    if defs:
        md.definitions = DefinitionArrays.concat(defs)
        for iid, sym in zip(md.definitions.instrument_id, md.definitions.raw_symbol, strict=True):
            md.symbols.setdefault(int(iid), str(sym))
    if book_parts:
        # Merge by time, keeping each state's crossed flag with it.
        all_books = BookArrays.concat(book_parts)
        all_crossed = np.concatenate(crossed_parts)
        order = np.argsort(all_books.ts_event, kind="stable")
        all_books, all_crossed = all_books.take(order), all_crossed[order]
        for iid in np.unique(all_books.instrument_id):
            sel = all_books.instrument_id == iid
            md.books[int(iid)] = all_books.take(sel)
            md.crossed[int(iid)] = all_crossed[sel]
    if trade_parts:
        merged_trades = _merge_sorted(trade_parts, TradeArrays)
        md.trades = _split(merged_trades, merged_trades.instrument_id)  # type: ignore[assignment]
    elif carried_trades and sum(len(t) for t in carried_trades):
        # No trades file: use the trade records the book streams carry (never both, which would
        # count every trade twice).
        merged_trades = _merge_sorted(carried_trades, TradeArrays)
        md.trades = _split(merged_trades, merged_trades.instrument_id)  # type: ignore[assignment]
    if ohlcv_parts:
        merged = _merge_sorted(ohlcv_parts, OhlcvArrays)
        md.ohlcv = _split(merged, merged.instrument_id)  # type: ignore[assignment]
        md.ohlcv_bar_ns = next(iter(ohlcv_schemas)).bar_ns
    if cfg.data_source is DataSource.MBP10 and not md.books:
        raise SchemaMismatchError(
            files[0] if files else "--data",
            "no book file (MBP-10 or MBO) among the inputs; data_source 'mbp10' needs one",
            "add the MBP-10/MBO files or set data.data_source=ohlcv",
        )
    if cfg.data_source is DataSource.OHLCV and not md.ohlcv:
        raise SchemaMismatchError(
            files[0] if files else "--data", "no OHLCV file among the inputs", "add OHLCV files"
        )
    return md
