"""The service's causal view of the stream: rows, features and the environment's market.

Every record that passes the monitor is appended to a log, one per stream, as raw DBN bytes. A row
closes when a record opens a later time bucket (or the replay ends): the log, which then holds
exactly the records of the closed rows, is run through the batch path itself (the market of its
records, below; ``rows_from_market`` for bars, every feature family through ``compute_features``,
the cache's column table, the fold's normaliser from the checkpoint and ``market_tensors``), and the
rows the pipeline now has beyond the last ones served are handed out with that market.

Why this equals the batch result: the rows and features are causal (the leak guard's property: a
row depends on records at or before its close, and every window and recursion restarts at a
session or contract segment, foxhunt.features._kernels), so the rows of a prefix of the records
are the first rows of the whole file's, value for value: the same kernels run on the same
numbers in the same order. The exceptions are two look-backs from the future that the batch
applies to its *first* rows only: the price path's leading NaNs are back-filled with the first
finite price (env.market._ffill), and a session's volume counts as known once its trades file has
a trade (ingest's trade coverage). A row before the first book state, or before the first trade
of a trades stream, can therefore differ; tests/serve compares the rows after them.

The market: book streams alone (MBO or MBP-10 files, the common case) skip DBN files; their records are
decoded once, as they arrive, into the book states and carried trades of the session so far
(:class:`BookStream`, one per stream; an MBO book through the batch builder's own kernel, resumed
from the state the last chunk left, foxhunt.data.book.BookState), and a row close assembles the
session's market from them with ingest's own steps (:func:`book_market`). The MBO book is carried
across the session cut, so an MBO log is cut at every session as an MBP-10 one is. One book stream's
bars are carried too: a row close builds only the new bars, with the batch's bar kernel
(:class:`foxhunt.serve.bars.SessionBars`). A row close then costs the new records' bars plus
O(book states of the session) in assembling the market (crossed flags, the merge by time) and the
features and normaliser of the session's rows: the feature families are not yet resumable per row
(docs/serve.md; EMA-type recursions run from the session's start). Other mixes (a book file beside
a trades file) write the logs as DBN files and run ``load_market`` on them.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foxhunt.config.data import DataConfig
from foxhunt.config.models import FoxhuntConfig
from foxhunt.data.arrays import BookArrays, TradeArrays
from foxhunt.data.book import BookState, rebuild_book
from foxhunt.data.dbn_read import book_from_records, mbo_from_records
from foxhunt.data.dbn_write import record_dtype, write_records
from foxhunt.data.ingest import (
    ACCEPTED,
    BOOK_SCHEMAS,
    FileReport,
    MarketData,
    _apply_crossed_policy,
    _cover,
    _merge_sorted,
    _split,
    check_trade_prices,
    load_market,
    trades_in,
)
from foxhunt.data.instrument import Instrument
from foxhunt.data.schemas import BarKind, RowUnit, Schema
from foxhunt.data.sessions import session_dates, session_open_ns
from foxhunt.env.market import MarketTensors, market_tensors
from foxhunt.errors import ConfigError
from foxhunt.features.cache import FeatureCache, compute_features
from foxhunt.features.cache import _table as cache_table  # the cache's own columns, not a copy
from foxhunt.features.frame import from_bars
from foxhunt.features.pipeline import rows_from_market
from foxhunt.serve.bars import SessionBars
from foxhunt.serve.source import StreamMeta
from foxhunt.train.checkpoint import CheckpointError
from foxhunt.validation.normalise import RobustScaler, apply

NS = 1_000_000_000


@dataclass(frozen=True)
class _Fold:
    """What ``market_tensors`` asks of a fold: its normaliser (the checkpoint's)."""

    scaler: RobustScaler

    def normalise(self, x: np.ndarray) -> np.ndarray:
        return apply(self.scaler, x)


@dataclass(frozen=True, eq=False)
class Rows:
    """The rows of the records so far: the market the environment steps over and the raw rows."""

    market: MarketTensors  # rows 0 .. count-1, normalised features, prices (env.market)
    ts: np.ndarray  # [count] the rows' ts column
    features: np.ndarray  # [count, F] raw (unnormalised) feature values, cache column order
    columns: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.ts)

    def then(self, later: Rows) -> Rows:
        """These rows followed by ``later``'s (a later session's), one market indexed by global row."""
        a, b = self.market, later.market

        def cat(x: torch.Tensor | None, y: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None or y is None else torch.cat([x, y])

        market = dataclasses.replace(
            b,
            **{
                f.name: cat(getattr(a, f.name), getattr(b, f.name))
                for f in dataclasses.fields(b)
                if f.name not in ("feature_columns", "instrument", "segment")
            },
            segment=torch.cat([a.segment, b.segment + a.segment[-1] + 1]),
        )
        ts = np.concatenate([self.ts, later.ts])
        return Rows(market, ts, np.concatenate([self.features, later.features]), later.columns)


def check_servable(cfg: FoxhuntConfig) -> None:
    """``serve`` closes rows on the time grid of time bars; other row units are refused in one line."""
    if cfg.data.row_unit is not RowUnit.BAR or cfg.data.bar_kind is not BarKind.TIME:
        raise ConfigError(
            "data.row_unit / data.bar_kind",
            f"the checkpoint uses {cfg.data.row_unit.value} rows ({cfg.data.bar_kind.value} bars); "
            "foxhunt serve closes rows on time bars only",
            "serve a checkpoint trained on time bars (data.row_unit=bar, data.bar_kind=time)",
        )


class Appended:
    """The rows of a columns container (foxhunt.data.arrays) appended chunk by chunk into buffers of
    doubling capacity, so that a row close sees the session's rows without copying them all again.
    :meth:`rows` are read-only views: a kernel that wrote into its input would raise, not corrupt
    the session."""

    def __init__(self) -> None:
        self.kind: type | None = None
        self.buffers: dict[str, np.ndarray] = {}
        self.n = 0

    def append(self, part: Any) -> None:
        names = [f.name for f in dataclasses.fields(part)]
        if self.kind is None:
            self.kind = type(part)
            first = {k: getattr(part, k) for k in names}
            self.buffers = {k: np.empty((1024, *a.shape[1:]), a.dtype) for k, a in first.items()}
        m = self.n + len(part)
        cap = len(next(iter(self.buffers.values())))
        if m > cap:
            cap = max(m, 2 * cap)
            for k, a in self.buffers.items():
                grown = np.empty((cap, *a.shape[1:]), a.dtype)
                grown[: self.n] = a[: self.n]
                self.buffers[k] = grown
        for k in names:
            self.buffers[k][self.n : m] = getattr(part, k)
        self.n = m

    def rows(self) -> Any:
        assert self.kind is not None
        views = {k: a[: self.n] for k, a in self.buffers.items()}
        for v in views.values():
            v.flags.writeable = False
        return self.kind(**views)


class BookStream:
    """The session so far of one book stream (MBO or MBP-10 ...): its book states and the trades it
    carries, decoded once per record; the MBO book's state carries on across sessions.

    :meth:`market` is what ``load_market`` makes of a file of the session's records, with ingest's
    own steps (the crossed policy, the trade checks and coverage, the split by instrument)."""

    def __init__(self, meta: StreamMeta, cfg: DataConfig) -> None:
        self.meta, self.cfg = meta, cfg
        self.where = Path(f"the {meta.schema.value} stream")
        self.states: dict[int, BookState] = {}  # MBO: each instrument's book, across chunks and sessions
        self.books = Appended()
        self.trades = Appended()
        self.records = 0

    def feed(self, recs: np.ndarray) -> None:
        """The next records of the stream (a structured array of its record dtype)."""
        if self.meta.schema is Schema.MBO:
            arrays = mbo_from_records(recs)
            where, states = str(self.where), self.states
            book = rebuild_book(arrays, levels=self.cfg.levels, where=where, states=states).book
        else:
            arrays = book_from_records(self.where, recs, self.meta.schema.levels)
            book = arrays.with_levels(self.cfg.levels)
        self.books.append(book)
        self.trades.append(trades_in(arrays))
        self.records += len(recs)

    def end_session(self) -> None:
        self.books, self.trades, self.records = Appended(), Appended(), 0

    def part(self, md: MarketData) -> tuple[BookArrays, np.ndarray, TradeArrays]:
        """What ``load_market`` takes from a file of the session's records: its book states after
        the crossed policy, their crossed flags and its trades; its symbols, depth, trade coverage and
        report go into ``md``."""
        cfg = self.cfg
        book: BookArrays = self.books.rows()
        carried: TradeArrays = self.trades.rows()
        md.symbols.update(self.meta.symbols)
        ts = book.ts_event if len(book) else carried.ts_event
        report = FileReport(
            path=str(self.where),
            schema=self.meta.schema.value,
            dataset=self.meta.dataset,
            records=self.records,
            instruments={},
            start=int(ts.min()) if len(ts) else 0,
            end=int(ts.max()) if len(ts) else 0,
        )
        depth = 1 if self.meta.schema.is_top_of_book else cfg.levels
        md.book_levels = min(md.book_levels, depth) if md.book_levels else depth
        book, crossed = _apply_crossed_policy(self.where, book, cfg, report)
        check_trade_prices(self.where, carried)
        _cover(md, carried, cfg)
        md.files.append(report)
        return book, crossed, carried


def book_market(streams: list[BookStream]) -> MarketData:
    """The market of the book streams' sessions so far, merged as ``load_market`` merges files."""
    md = MarketData(trade_coverage=[])
    parts = [s.part(md) for s in streams if s.records]
    book = BookArrays.concat([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    crossed = np.concatenate([p[1] for p in parts])
    # The same values as load_market's, without its copies where nothing moves (one stream, one
    # instrument: each row close would copy the whole session's states again).
    order = np.argsort(book.ts_event, kind="stable")
    if not np.array_equal(order, np.arange(len(order))):
        book, crossed = book.take(order), crossed[order]
    instruments = np.unique(book.instrument_id)
    for iid in instruments:
        sel = book.instrument_id == iid
        md.books[int(iid)] = book if len(instruments) == 1 else book.take(sel)
        md.crossed[int(iid)] = crossed if len(instruments) == 1 else crossed[sel]
    trades = [p[2] for p in parts if len(p[2])]
    if trades:
        merged = _merge_sorted(trades, TradeArrays)
        md.trades = _split(merged, merged.instrument_id)  # type: ignore[assignment]
    return md


class RowState:
    """The record logs and the rows built from them (module docs)."""

    def __init__(
        self,
        streams: list[StreamMeta],
        cfg: FoxhuntConfig,
        scaler: RobustScaler,
        instrument: Instrument,
        workdir: Path | None = None,
    ) -> None:
        check_servable(cfg)
        self.streams, self.cfg, self.instrument = streams, cfg, instrument
        self.fold = _Fold(scaler)
        self.dtypes = [record_dtype(s.schema) for s in streams]
        self.logs = [bytearray() for _ in streams]
        self.records = 0  # records appended, all streams
        # The logs are rewritten as DBN files at every row close: in memory (tmpfs) where there is one.
        shm = Path("/dev/shm")
        self._tmp = tempfile.TemporaryDirectory(prefix="foxhunt-serve-", dir=shm if shm.is_dir() else workdir)
        self.bucket: tuple[int, int] | None = None  # (session date, bar index since its open)
        self._session: tuple[int, int, int] = (0, 0, 0)  # [open, next open) ns and date of the last session
        # Rows of the sessions before the current one. Every feature window and recursion restarts at a
        # session (a segment), so a session's rows need only its own records, and the log is cut there;
        # an MBO stream is never cut (its book is the sum of every order since the snapshot).
        self.done: Rows | None = None
        # Book streams only (MBO, MBP-10 ...: one per file, each MBO file its own book, as ingest
        # rebuilds them) are decoded as they arrive; other mixes go through load_market.
        accepted = ACCEPTED[cfg.data.data_source]
        self.books: list[BookStream] | None = None
        if all(s.schema in BOOK_SCHEMAS and s.schema in accepted for s in streams):
            self.books = [BookStream(s, cfg.data) for s in streams]
        self.fed = [0] * len(streams)  # bytes of each log already fed to its book stream
        # One book stream: its session's bars are carried from close to close (foxhunt.serve.bars); with
        # several, a merge by time could insert a record before those already in a bar.
        self.bars = SessionBars(cfg.data) if self.books is not None and len(streams) == 1 else None
        self.cuttable = self.books is not None or all(s.schema is not Schema.MBO for s in streams)

    def decode(self, stream: int, payload: bytes) -> np.ndarray:
        """One record as a structured scalar array; ValueError when the bytes are not one record."""
        if not 0 <= stream < len(self.dtypes):
            raise ValueError(f"record of unknown stream {stream}")
        dt = self.dtypes[stream]
        if len(payload) != dt.itemsize:
            schema = self.streams[stream].schema.value
            raise ValueError(f"{len(payload)} bytes where a {schema} record has {dt.itemsize}")
        return np.frombuffer(payload, dtype=dt)

    def bucket_of(self, ts_event: int) -> tuple[int, int]:
        """The time bar a record falls in: (session date, bars since the session open), as ingest
        keys bars (foxhunt.data.bars). The session's span is remembered: dates cost a pandas call."""
        d = self.cfg.data
        lo, hi, date = self._session
        if not lo <= ts_event < hi:
            date = int(session_dates(np.array([ts_event], np.int64), d.session_timezone, d.session_open)[0])
            lo = session_open_ns(date, d.session_timezone, d.session_open)
            day = np.datetime64(f"{date // 10000:04d}-{date // 100 % 100:02d}-{date % 100:02d}")
            following = int(str(day + 1).replace("-", ""))
            hi = session_open_ns(following, d.session_timezone, d.session_open)
            self._session = (lo, hi, date)
        return date, (int(ts_event) - lo) // (d.bar_seconds * NS)

    def append(self, stream: int, payload: bytes) -> None:
        self.logs[stream] += payload
        self.records += 1

    def _market(self) -> MarketData:
        """The market of the records logged since the last cut: from the book stream, else through
        ``load_market`` on the logs written as DBN files."""
        if self.books is not None:
            for i, (book, log) in enumerate(zip(self.books, self.logs, strict=True)):
                if len(log) > self.fed[i]:
                    book.feed(np.frombuffer(bytes(log[self.fed[i] :]), dtype=self.dtypes[i]))
                    self.fed[i] = len(log)
            return book_market(self.books)
        paths = []
        for i, (meta, log) in enumerate(zip(self.streams, self.logs, strict=True)):
            if not log:
                continue  # a stream that has sent nothing yet (a DBN file of no records is refused)
            recs = np.frombuffer(bytes(log), dtype=self.dtypes[i])
            path = Path(self._tmp.name) / f"stream{i}.{meta.schema.value}.dbn"
            write_records(path, meta.schema, recs, dataset=meta.dataset, symbols=meta.symbols)
            paths.append(path)
        return load_market(paths, self.cfg.data)

    def rows(self) -> Rows:
        """Rows, features and market of every record logged so far (the batch path, module docs)."""
        cfg = self.cfg
        md = self._market()
        tick = self.instrument.tick_size
        if self.bars is not None:
            inp = from_bars(self.bars.series(md), cfg.data.data_source, float(tick))
        else:
            inp = rows_from_market(md, cfg.data, tick_size=tick)
        fm = compute_features(inp, cfg)
        if tuple(fm.columns) != tuple(self.fold.scaler.columns):
            raise CheckpointError(
                "--checkpoint",
                f"its normaliser scales {len(self.fold.scaler.columns)} feature columns, this foxhunt "
                f"computes {len(fm.columns)} for its config (another feature layout)",
                "serve a checkpoint trained and exported with this version's features",
            )
        meta = {"columns": list(fm.columns), "row_unit": cfg.data.row_unit.value}
        cache = FeatureCache(Path(self._tmp.name), cache_table(inp, fm, {}, meta), meta)
        vol_window = cfg.env.plan.vol_window
        market = market_tensors(cache, self.fold, vol_window=vol_window, instrument=self.instrument)
        here = Rows(market, cache.column("ts"), cache.features(), tuple(cache.columns))
        return here if self.done is None else self.done.then(here)

    def end_session(self, rows: Rows) -> None:
        """The session whose records are logged has ended with ``rows``: keep them, cut the logs."""
        if self.cuttable:
            self.done = rows
            self.logs = [bytearray() for _ in self.streams]
            self.fed = [0] * len(self.streams)
            for book in self.books or ():
                book.end_session()
            if self.bars is not None:
                self.bars.reset()

    def close(self) -> None:
        self._tmp.cleanup()

