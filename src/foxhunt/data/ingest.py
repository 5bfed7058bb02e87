"""Ingest many DBN files at once: validate, merge in time order, split by instrument.

:func:`load_market` is the one entry point the later stages use. It reads every file with
:mod:`foxhunt.data.dbn_read`, checks what ``data_source`` needs (``mbp10``: book files, MBP-10,
MBO or top of book, and trades; ``ohlcv``: OHLCV bars), rebuilds MBO into MBP-10 book states,
applies the crossed-book policy, and returns per-instrument arrays sorted by ``ts_event`` plus a
report of what it counted. Trades come from trades files and, where no trades file covers them,
from the trade records the book streams carry (:func:`_uncovered`).
Nothing is written; any problem raises a typed :class:`~foxhunt.errors.DataError` naming the file.

Before decoding anything, :func:`check_inputs` reads every file's schema from its header and
refuses a set of inputs that does not fit the configuration in *one* message naming every fix at
once (the files to drop, or all the ``--set`` overrides of the other data source). Top-of-book
files (MBP-1, TBBO, BBO) are book data with one level: their books are padded to ``cfg.levels``
with empty levels and :attr:`MarketData.book_levels` says how deep the real book is.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from foxhunt.console import SILENT, Reporter
from foxhunt.data.arrays import (
    ACTION_TRADE,
    BookArrays,
    DefinitionArrays,
    MboArrays,
    OhlcvArrays,
    TradeArrays,
)
from foxhunt.data.config import DataConfig
from foxhunt.data.dbn_read import DbnFile, check_monotonic, peek_schema, read_raw, to_arrays
from foxhunt.data.schemas import BarKind, CrossedPolicy, DataSource, RowUnit, Schema
from foxhunt.data.sessions import in_halt, session_dates
from foxhunt.errors import (
    BadTradePriceError,
    CrossedBookError,
    DuplicateInputError,
    MissingFileError,
    SchemaMismatchError,
    setting,
)

DBN_SUFFIXES = (".dbn", ".dbn.zst")

BOOK_SCHEMAS = (Schema.MBP_10, Schema.MBO, Schema.MBP_1, Schema.TBBO, Schema.BBO_1S, Schema.BBO_1M)
OHLCV_SCHEMAS = (Schema.OHLCV_1S, Schema.OHLCV_1M, Schema.OHLCV_1H, Schema.OHLCV_1D)
# The files each data source reads, and the kind of file it cannot do without.
ACCEPTED: dict[DataSource, tuple[Schema, ...]] = {
    DataSource.MBP10: (*BOOK_SCHEMAS, Schema.TRADES, Schema.DEFINITION),
    DataSource.OHLCV: (*OHLCV_SCHEMAS, Schema.DEFINITION),
}
PRIMARY: dict[DataSource, tuple[Schema, ...]] = {
    DataSource.MBP10: BOOK_SCHEMAS,
    DataSource.OHLCV: OHLCV_SCHEMAS,
}
_NS = 1_000_000_000
_NAMES_SHOWN = 4  # file names listed per schema in a refusal before "+N more"


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; a directory contributes its ``*.dbn`` / ``*.dbn.zst`` files, sorted.

    A file reached twice (named twice, or named and inside a folder also given, however the path is
    spelled) is refused with :class:`DuplicateInputError`: reading it twice would double every event.
    """
    out: list[Path] = []
    first: dict[Path, tuple[Path, str | Path]] = {}  # resolved file -> (as listed, the argument)
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.name.endswith(DBN_SUFFIXES))
            if not found:
                raise MissingFileError(p, "directory holds no .dbn or .dbn.zst files", "point at DBN files")
        elif not p.exists():
            raise MissingFileError(p, "no such file or directory", "check the path")
        else:
            found = [p]
        for q in found:
            key = q.resolve()
            if key in first:
                earlier, given = first[key]
                via = "" if Path(given) == earlier else f" (in {given})"
                raise DuplicateInputError(
                    q,
                    f"is given twice: as {raw} and as {earlier}{via}; every event would count twice",
                    "pass each file once (a folder already includes its files)",
                )
            first[key] = (q, raw)
            out.append(q)
    return out


def ohlcv_settings(bar_ns: int, cfg: DataConfig) -> list[str]:
    """The ``data.*`` overrides that ``cfg`` needs to build bars from OHLCV records of ``bar_ns``."""
    sets: list[str] = []
    if cfg.row_unit is RowUnit.SNAPSHOT:
        sets.append(f"data.row_unit={RowUnit.BAR.value}")
    if cfg.bar_kind is BarKind.VOLUME:
        sets.append(f"data.bar_kind={BarKind.TIME.value}")
    step = bar_ns // _NS
    if step and cfg.bar_seconds % step:
        sets.append(f"data.bar_seconds={-(-cfg.bar_seconds // step) * step}")  # next multiple up
    return sets


def as_flags(sets: Sequence[str]) -> str:
    """The config overrides ``sets`` as a fix: ``--set ...`` or ``api.config(..., overrides=...)``."""
    return setting(*sets)


def _file_list(paths: Sequence[Path], schemas: dict[Path, Schema], *, named: bool = True) -> str:
    """``2 ohlcv-1m files (a, b)``, one group per schema, names shortened past a few."""
    groups: dict[Schema, list[str]] = {}
    for p in paths:
        groups.setdefault(schemas[p], []).append(p.name)
    parts = []
    for schema, files in groups.items():
        text = f"{len(files)} {schema.value} file{'s' * (len(files) > 1)}"
        if named:
            more = len(files) - _NAMES_SHOWN
            text += f" ({', '.join(files[:_NAMES_SHOWN])}{f', +{more} more' if more > 0 else ''})"
        parts.append(text)
    return ", ".join(parts)


def _option(
    source: DataSource, files: list[Path], schemas: dict[Path, Schema], cfg: DataConfig
) -> tuple[list[Path], list[str]] | None:
    """(files to drop, --set overrides) that make ``source`` work on ``files``, or None if it has
    none of its primary files. OHLCV keeps one interval (the finest: it builds the most bar lengths)."""
    keep = [p for p in files if schemas[p] in ACCEPTED[source]]
    if not any(schemas[p] in PRIMARY[source] for p in keep):
        return None
    sets = [f"data.data_source={source.value}"] if source is not cfg.data_source else []
    if source is DataSource.OHLCV:
        finest = min((schemas[p] for p in keep if schemas[p].is_ohlcv), key=lambda s: s.bar_ns)
        keep = [p for p in keep if not schemas[p].is_ohlcv or schemas[p] is finest]
        sets += ohlcv_settings(finest.bar_ns, cfg)
    return [p for p in files if p not in keep], sets


def check_inputs(given: Sequence[str | Path], files: list[Path], cfg: DataConfig) -> None:
    """Refuse, in one line that names every fix, inputs that ``cfg.data_source`` cannot read whole.

    A fix is a set of files to drop and/or the ``--set`` overrides of the other data source (its
    bar settings included), so one round trip is enough. Schemas are read from the file headers
    only; a file whose header cannot be read is left to :func:`read_raw` to report.
    """
    schemas = {p: s for p in files if (s := peek_schema(p)) is not None}
    known = [p for p in files if p in schemas]
    current = _option(cfg.data_source, known, schemas, cfg)
    if current is not None and not current[0]:
        # Every file is used as configured; bar settings that do not fit are refused where the
        # bars are built. Once refusing anyway, the fix below names them too.
        return
    other = DataSource.OHLCV if cfg.data_source is DataSource.MBP10 else DataSource.MBP10
    options = [o for o in (current, _option(other, known, schemas, cfg)) if o is not None]
    if not options:
        return  # nothing this source or the other could use: the no-book/no-OHLCV refusal below
    fixes = []
    for drop, sets in options:
        words = [f"drop the {_file_list(drop, schemas)}"] if drop else []
        words += [f"pass {as_flags(sets)}"] if sets else []
        fixes.append(" and ".join(words))
    refused = [p for p in known if schemas[p] not in ACCEPTED[cfg.data_source]]
    kinds = {s.value for s in schemas.values()}
    if refused:
        lack = f"cannot use the {_file_list(refused, schemas, named=False)}"
    elif current is not None:
        lack = "needs OHLCV files of one interval"
    else:
        lack = f"needs {' / '.join(s.value for s in PRIMARY[cfg.data_source])} files"
    problem = f"the inputs are {', '.join(sorted(kinds))} files; data_source '{cfg.data_source.value}' {lack}"
    dirs = [Path(g) for g in given if Path(g).is_dir()]
    where = dirs[0] if len(dirs) == 1 else (refused or known)[0]
    raise SchemaMismatchError(where, problem, "; or ".join(fixes))


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
    crossed_trading: int = 0  # of ``crossed``, those outside the daily halt (what a refusal judges)
    dropped: int = 0
    median_spread_ticks: float | None = None

    @property
    def crossed_share(self) -> float:
        return self.crossed / self.book_states if self.book_states else 0.0


@dataclass
class MarketData:
    """Everything ingested, per instrument, each array sorted by ``ts_event`` (stable)."""

    books: dict[int, BookArrays] = field(default_factory=dict)
    # Levels per side that carry real data: cfg.levels for MBP-10/MBO, 1 when any book file is
    # top of book (MBP-1, TBBO, BBO; the rest are padded empty), 0 without books.
    book_levels: int = 0
    # (instrument, first session, last session) of every input file that carries trades (a trades
    # file, or a book file with trade records): where a volume of 0 means "nothing traded" rather
    # than "no trade data". A fact about the inputs, not the market, so no row learns from it what
    # happens later. None (data built in memory): the sessions of ``trades``.
    trade_coverage: list[tuple[int, int, int]] | None = None
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


def check_trade_prices(path: Path, trades: TradeArrays) -> None:
    """Refuse trades whose price is undefined (NaN), infinite or not above zero.

    Rule: refused, never dropped or repaired. foxhunt trades outright index futures, whose prices
    are positive; an undefined or negative trade price is a damaged or foreign stream, and one
    such print turns the bar's VWAP into NaN and its return into thousands of basis points.
    """
    bad = ~(np.isfinite(trades.price) & (trades.price > 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise BadTradePriceError(
            path,
            f"{int(bad.sum())} trade(s) with an undefined or non-positive price (first: trade {i}, "
            f"price {trades.price[i]}); trade prices must be finite and above zero",
            "re-download the file, or leave it out (a calendar-spread or damaged stream)",
        )


_KIND = {**{s: "book" for s in BOOK_SCHEMAS}, Schema.TRADES: "trades", **{s: "ohlcv" for s in OHLCV_SCHEMAS}}
"""Files of one kind carry the same events: two of them over one instrument and time count it twice."""


def check_overlaps(spans: list[tuple[Path, Schema, dict[int, tuple[int, int]]]]) -> None:
    """Refuse two files of one kind (:data:`_KIND`) whose time ranges overlap for one instrument.

    Rule: refused, never de-duplicated. The same data twice (a copy under another name, MBO beside
    the MBP-10 built from it, two downloads of one day) would count every event and trade twice;
    which file is right is the user's choice. ``spans`` is (file, schema, instrument -> (first,
    last) ts_event) per file; files that only touch (one ends where the next starts) are accepted.
    """
    seen: dict[tuple[str, int], list[tuple[int, int, Path]]] = {}
    for path, schema, by_instrument in spans:
        kind = _KIND.get(schema)
        if kind is None:
            continue  # definitions: a lookup table, not events
        for iid, (lo, hi) in by_instrument.items():
            for other_lo, other_hi, other in seen.get((kind, iid), []):
                if (lo < other_hi and other_lo < hi) or (lo, hi) == (other_lo, other_hi):
                    raise DuplicateInputError(
                        path,
                        f"overlaps {other.name} ({kind} data of instrument {iid} over the same time), "
                        "so every event there would count twice",
                        f"pass only one of {path.name} and {other.name}",
                    )
            seen.setdefault((kind, iid), []).append((lo, hi, path))


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
    path: Path,
    book: BookArrays,
    cfg: DataConfig,
    report: FileReport,
    before: tuple[int, int, int] = (0, 0, 0),
) -> tuple[BookArrays, np.ndarray]:
    """The crossed policy on a file's book states; ``before``: the (states, crossed, crossed in trading
    hours) of the file's states before ``book`` (foxhunt serve applies it to each close's new states),
    counted in the share.

    The refusal (``data.max_crossed_share``, a book built wrongly) counts the crossed states outside
    the daily halt only: a pre-open auction's indicative book crosses by design (ESH4's 2023-12-25
    file: all 143 of its crossed states lie in the 20 minutes before the 23:00 UTC open). So a stream
    judged at its first close after the open (146 states, 143 of them crossed) is not refused where
    the whole file (37,064 states) is not: serve and the batch judge the same states alike."""
    crossed = book.crossed()
    n_crossed = int(crossed.sum())  # in this part (serve's close); report.crossed counts the file's
    trading = 0
    if n_crossed:  # the session clock only where something crossed (serve's closes: usually nothing)
        halt = in_halt(book.ts_event, cfg.session_timezone, cfg.session_open, cfg.session_close)
        trading = int((crossed & ~halt).sum())
    report.book_states = before[0] + len(book)
    report.crossed = before[1] + n_crossed
    report.crossed_trading = before[2] + trading
    share = report.crossed_trading / report.book_states if report.book_states else 0.0
    if share > cfg.max_crossed_share:
        raise CrossedBookError(
            path,
            f"{report.crossed_trading} of {report.book_states} book states are crossed or locked outside "
            f"the daily halt ({share:.1%} > data.max_crossed_share = {cfg.max_crossed_share:.1%})",
            "the book is corrupt or was built wrongly; re-download or raise data.max_crossed_share",
        )
    if cfg.crossed_policy is CrossedPolicy.DROP and report.crossed:
        report.dropped = report.crossed
        return book.take(~crossed), np.zeros(len(book) - n_crossed, bool)
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
    """Book states of one book file (MBO is rebuilt; every book has ``cfg.levels`` levels, the
    missing ones empty), validated, the trades the stream carries, and the file's report."""
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
        book = arrays.with_levels(cfg.levels)
    report.median_spread_ticks = median_spread_ticks(book, cfg.tick_size)
    return book, trades_in(arrays), report


def _cover(md: MarketData, trades: TradeArrays, cfg: DataConfig, dates=None) -> None:
    """Record the sessions one file's trades cover, per instrument (nothing for a file without).
    ``dates``: ``session_dates`` of an array of timestamps (foxhunt serve passes a remembering one)."""
    assert md.trade_coverage is not None
    for iid in np.unique(trades.instrument_id):
        ts = trades.ts_event[trades.instrument_id == iid]
        if dates is None:
            first, last = session_dates(ts[[0, -1]], cfg.session_timezone, cfg.session_open)
        else:
            first, last = dates(ts[[0, -1]])
        md.trade_coverage.append((int(iid), int(first), int(last)))


def trade_coverage(md: MarketData, cfg: DataConfig) -> list[tuple[int, int, int]]:
    """:attr:`MarketData.trade_coverage`, or for data built in memory the span of its trades."""
    if md.trade_coverage is not None:
        return md.trade_coverage
    out: list[tuple[int, int, int]] = []
    for iid, trades in md.trades.items():
        if len(trades):
            first, last = session_dates(trades.ts_event[[0, -1]], cfg.session_timezone, cfg.session_open)
            out.append((int(iid), int(first), int(last)))
    return out


def _uncovered(carried: TradeArrays, trade_files: list[TradeArrays]) -> TradeArrays:
    """The trades a book stream carries that no trades file covers: a trades file is the
    authority for its instruments over its own time span (taking both would count every trade
    twice), and the book streams fill in the rest (a day of MBO beside a trades file of another)."""
    keep = np.ones(len(carried), bool)
    for part in trade_files:
        for iid in np.unique(part.instrument_id):
            ts = part.ts_event[part.instrument_id == iid]
            keep &= ~(
                (carried.instrument_id == iid) & (carried.ts_event >= ts[0]) & (carried.ts_event <= ts[-1])
            )
    return carried if keep.all() else carried.take(keep)


def _spans(f: DbnFile) -> dict[int, tuple[int, int]]:
    """Instrument -> (first, last) ``ts_event`` of one file's records."""
    ts, ids = f.records["ts_event"].astype(np.int64), f.records["instrument_id"]
    return {int(i): (int(ts[ids == i].min()), int(ts[ids == i].max())) for i in np.unique(ids)}


@dataclass
class _Parts:
    """What :func:`load_market` collects file by file, merged once every file is read."""

    books: list[BookArrays] = field(default_factory=list)
    crossed: list[np.ndarray] = field(default_factory=list)  # [n] bool per state of ``books``
    trades: list[TradeArrays] = field(default_factory=list)  # trades files
    carried: list[TradeArrays] = field(default_factory=list)  # T records inside MBP-10/MBO streams
    ohlcv: list[OhlcvArrays] = field(default_factory=list)
    ohlcv_schemas: set[Schema] = field(default_factory=set)
    definitions: list[DefinitionArrays] = field(default_factory=list)
    spans: list[tuple[Path, Schema, dict[int, tuple[int, int]]]] = field(default_factory=list)


def load_market(paths: Sequence[str | Path], cfg: DataConfig, progress: Reporter = SILENT) -> MarketData:
    """Read, validate, merge and split every file under ``paths`` for ``cfg.data_source``
    (``progress`` counts the files read)."""
    files = expand_paths(paths)
    check_inputs(paths, files, cfg)
    md = MarketData(trade_coverage=[])
    parts = _Parts()
    decoded = _prefetched(lambda path: _decode(path, cfg), files, _read_workers(len(files)))
    for path, (f, arrays) in zip(progress.track(files, "ingest: reading DBN files"), decoded, strict=True):
        md.symbols.update(f.instrument_symbols)
        if f.schema in BOOK_SCHEMAS:
            report = _take_book_file(path, f, arrays, cfg, md, parts)
        else:
            report = _take_other_file(path, f, arrays, cfg, md, parts)
        ids = np.unique(f.records["instrument_id"])
        report.instruments = {int(i): f.instrument_symbols.get(int(i), str(int(i))) for i in ids}
        md.files.append(report)
        parts.spans.append((path, f.schema, _spans(f)))
    check_overlaps(parts.spans)
    _merge_parts(md, parts, files)
    _check_primary(md, cfg, files)
    return md


def _check_accepted(path: Path, schema: Schema, cfg: DataConfig) -> None:
    """Refuse a file ``cfg.data_source`` does not read, naming the data source that would."""
    accepted = ACCEPTED[cfg.data_source]
    if schema in accepted:
        return
    other = DataSource.OHLCV if schema.is_ohlcv else DataSource.MBP10
    hint = (
        f"set data.data_source={other.value}"
        if schema in ACCEPTED[other]
        else f"pass {' / '.join(s.value for s in accepted)} files"
    )
    raise SchemaMismatchError(
        path,
        f"file is {schema.value}; data_source '{cfg.data_source.value}' needs "
        f"{' / '.join(s.value for s in accepted)}",
        hint,
    )


T = TypeVar("T")
R = TypeVar("R")

READ_AHEAD = 8
"""Most files decoded at once by :func:`load_market` (its threads; fewer on fewer idle cores). Each
file's decoding (zstd, the DBN records, the book levels' conversion) is independent of the others
and spends most of its time in C code that releases the GIL; the checks and the merge that follow
stay in file order on the calling thread. Bounded so that at most this many files' raw records are
held at once (an MBP-10 session of 1 M events is ~370 MB of them)."""


def _read_workers(n_files: int) -> int:
    from foxhunt.parallel.idle import idle_cores

    return max(1, min(n_files, READ_AHEAD, int(idle_cores())))


def _prefetched(fn: Callable[[T], R], items: Sequence[T], workers: int) -> Iterator[R]:
    """``fn(item)`` for each item in order, up to ``workers`` of them computed ahead on threads. An
    item's error is raised when its turn comes, as in a sequential loop."""
    if workers <= 1:
        yield from (fn(x) for x in items)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="foxhunt-read") as pool:
        ahead: deque[Future[R]] = deque(pool.submit(fn, x) for x in items[:workers])
        for nxt in items[workers:]:
            done = ahead.popleft()
            ahead.append(pool.submit(fn, nxt))
            yield done.result()
        while ahead:
            yield ahead.popleft().result()


def _decode(path: Path, cfg: DataConfig) -> tuple[DbnFile, Any]:
    """One file read, checked against ``cfg.data_source`` and converted: for a book file
    :func:`read_book_file`'s ``(book, carried trades, report)``, else :func:`to_arrays`'s arrays."""
    f = read_raw(path)
    _check_accepted(path, f.schema, cfg)
    return f, (read_book_file(f, cfg) if f.schema in BOOK_SCHEMAS else to_arrays(f))


def _take_book_file(
    path: Path,
    f: DbnFile,
    decoded: tuple[BookArrays, TradeArrays, FileReport],
    cfg: DataConfig,
    md: MarketData,
    parts: _Parts,
) -> FileReport:
    """A book file (MBP-10, MBO, top of book): its states after the crossed-book policy, and the trade
    records its stream carries."""
    book, carried, report = decoded
    depth = 1 if f.schema.is_top_of_book else cfg.levels
    md.book_levels = min(md.book_levels, depth) if md.book_levels else depth
    book, crossed = _apply_crossed_policy(path, book, cfg, report)
    check_trade_prices(path, carried)
    parts.carried.append(carried)
    _cover(md, carried, cfg)
    parts.books.append(book)
    parts.crossed.append(crossed)
    return report


def _take_other_file(
    path: Path, f: DbnFile, arrays: Any, cfg: DataConfig, md: MarketData, parts: _Parts
) -> FileReport:
    """A trades, OHLCV or definition file (``arrays``: its :func:`to_arrays`), checked (time order,
    trade prices) and kept."""
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
        check_trade_prices(path, arrays)
        parts.trades.append(arrays)
        _cover(md, arrays, cfg)
    elif isinstance(arrays, OhlcvArrays):
        check_monotonic(path, arrays.ts_event, arrays.instrument_id)
        parts.ohlcv.append(arrays)
        parts.ohlcv_schemas.add(f.schema)
    elif isinstance(arrays, DefinitionArrays):
        parts.definitions.append(arrays)
    return report


def _merge_parts(md: MarketData, parts: _Parts, files: list[Path]) -> None:
    """Merge every file's arrays by time into ``md``, split per instrument."""
    if len(parts.ohlcv_schemas) > 1:
        raise SchemaMismatchError(
            files[0],
            f"OHLCV files of several intervals ({', '.join(sorted(s.value for s in parts.ohlcv_schemas))})",
            "pass OHLCV files of one interval",
        )
    if parts.definitions:
        md.definitions = DefinitionArrays.concat(parts.definitions)
        for iid, sym in zip(md.definitions.instrument_id, md.definitions.raw_symbol, strict=True):
            md.symbols.setdefault(int(iid), str(sym))
    if parts.books:
        # Merge by time, keeping each state's crossed flag with it.
        all_books = BookArrays.concat(parts.books)
        all_crossed = np.concatenate(parts.crossed)
        # Copies only where rows move or go (a few hundred ms a copy of a 600,000-row book): files
        # already in time order (the synthetic market's sessions) of one instrument are kept as merged.
        order = np.argsort(all_books.ts_event, kind="stable")
        if not np.array_equal(order, np.arange(len(order))):
            all_books, all_crossed = all_books.take(order), all_crossed[order]
        for iid in np.unique(all_books.instrument_id):
            sel = all_books.instrument_id == iid
            whole = bool(sel.all())
            md.books[int(iid)] = all_books if whole else all_books.take(sel)
            md.crossed[int(iid)] = all_crossed if whole else all_crossed[sel]
    all_trades = parts.trades + [_uncovered(c, parts.trades) for c in parts.carried]
    all_trades = [t for t in all_trades if len(t)]
    if all_trades:
        merged_trades = _merge_sorted(all_trades, TradeArrays)
        md.trades = _split(merged_trades, merged_trades.instrument_id)  # type: ignore[assignment]
    if parts.ohlcv:
        merged = _merge_sorted(parts.ohlcv, OhlcvArrays)
        md.ohlcv = _split(merged, merged.instrument_id)  # type: ignore[assignment]
        md.ohlcv_bar_ns = next(iter(parts.ohlcv_schemas)).bar_ns


def _check_primary(md: MarketData, cfg: DataConfig, files: list[Path]) -> None:
    """Refuse inputs without the kind of file ``cfg.data_source`` cannot do without."""
    if cfg.data_source is DataSource.MBP10 and not md.books:
        raise SchemaMismatchError(
            files[0] if files else "--data",
            "no book file among the inputs; data_source 'mbp10' needs one "
            f"({' / '.join(s.value for s in BOOK_SCHEMAS)})",
            f"add the book files or pass {setting('data.data_source=ohlcv')} with OHLCV files",
        )
    if cfg.data_source is DataSource.OHLCV and not md.ohlcv:
        raise SchemaMismatchError(
            files[0] if files else "--data", "no OHLCV file among the inputs", "add OHLCV files"
        )
