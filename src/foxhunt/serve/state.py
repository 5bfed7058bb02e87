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
decoded once, as they arrive (and not kept: only records the decoder refuses wait in the log for the
close to report), into the book states and carried trades of the session so far
(:class:`BookStream`, one per stream; an MBO book through the batch builder's own kernel, resumed
from the state the last chunk left, foxhunt.data.book.BookState), and a row close assembles the
session's market from them with ingest's own steps (:func:`book_market`: the crossed policy and the
trade checks on the states and trades that arrived since the last close, their counts carried).
The MBO book is carried across the session cut, so an MBO log is cut at every session as an MBP-10
one is. Other mixes (a book file beside a trades file) write the logs as DBN files and run
``load_market`` on them, and run the batch path over the session at every close.

One book stream of time bars (the usual replay or live feed) goes further: each close computes its
new rows only (:class:`IncrementalRows`). The session's bars are carried and a close builds the bars
of its new records with the batch's bar kernel (:class:`foxhunt.serve.bars.SessionBars`);
``from_bars`` makes their rows with the state of the bars before (foxhunt.features.frame.BarsCarry);
every feature family computes those rows with its carried state (foxhunt.features._kernels.Carry:
EMAs, running sums, window histories, the last book event; the batch is the one-chunk case, the same
kernels); the normaliser and ``market_tensors`` run on the new rows and the one before them, and the
rows are appended to buffers the environment's market is a view of. A close then costs O(its new
records) plus two cheap 1-d passes over the session's rows (the plan's trailing volatility, a
Welford recursion whose rounding depends on every row before, and the flow masks' comparison),
instead of the session's records again; the price path carries its last price forward once the
session has one (before, the leading NaNs are back-filled over the session).

Records reach the log in blocks (foxhunt.serve.source.StreamBlock; the service's ``on_block``):
the monitor checks a block with array operations (foxhunt.serve.monitor.Monitor.clean), a block's
run of clean records of one time bar is found by a binary search (:meth:`RowState.in_bucket`) and
appended at once (:meth:`RowState.append_block`); a record with a fault goes alone through the
per-record path, so faults, closes and resume points are those of the records one by one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from foxhunt.config.models import FoxhuntConfig
from foxhunt.data.arrays import BookArrays, TradeArrays
from foxhunt.data.book import BookState, rebuild_book
from foxhunt.data.config import DataConfig
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
from foxhunt.data.returns import trailing_volatility
from foxhunt.data.schemas import BarKind, RowUnit, Schema
from foxhunt.data.sessions import session_dates, session_open_ns
from foxhunt.dataset.cache import _families, compute_features, row_columns
from foxhunt.dataset.cache import _table as cache_table  # the cache's own columns, not a copy
from foxhunt.domain.instrument import Instrument
from foxhunt.env.market import MarketTensors, _ffill, market_tensors
from foxhunt.errors import ConfigError
from foxhunt.features._kernels import Carry
from foxhunt.features.cache_file import FeatureCache
from foxhunt.features.frame import BarsCarry, RowInput, from_bars
from foxhunt.features.pipeline import rows_from_market
from foxhunt.features.plugins import load_plugins, with_plugins
from foxhunt.features.stack import FeatureMatrix, resumable
from foxhunt.policy.checkpoint import CheckpointError
from foxhunt.serve.bars import SessionBars, _SessionClock
from foxhunt.serve.buffers import Appended, Grown
from foxhunt.serve.source import StreamMeta
from foxhunt.validation.normalise import RobustScaler, apply

NS = 1_000_000_000


@dataclass(frozen=True)
class _Fold:
    """What ``market_tensors`` asks of a fold: its normaliser (the checkpoint's)."""

    scaler: RobustScaler

    def normalise(self, x: np.ndarray) -> np.ndarray:
        return apply(self.scaler, x)


@dataclass(frozen=True, eq=False)
class RecordRows:
    """The rows of the records so far: the market the environment steps over and the raw rows."""

    market: MarketTensors  # rows 0 .. count-1, normalised features, prices (env.market)
    ts: np.ndarray  # [count] the rows' ts column
    features: np.ndarray  # [count, F] raw (unnormalised) feature values, cache column order
    columns: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.ts)

    def then(self, later: RecordRows) -> RecordRows:
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
        return RecordRows(market, ts, np.concatenate([self.features, later.features]), later.columns)


def check_servable(cfg: FoxhuntConfig) -> None:
    """``serve`` closes rows on the time grid of time bars; other row units are refused in one line."""
    if cfg.data.row_unit is not RowUnit.BAR or cfg.data.bar_kind is not BarKind.TIME:
        raise ConfigError(
            "data.row_unit / data.bar_kind",
            f"the checkpoint uses {cfg.data.row_unit.value} rows ({cfg.data.bar_kind.value} bars); "
            "foxhunt serve closes rows on time bars only",
            "serve a checkpoint trained on time bars (data.row_unit=bar, data.bar_kind=time)",
        )


class BookStream:
    """The session so far of one book stream (MBO or MBP-10 ...): its book states and the trades it
    carries, decoded once per record; the MBO book's state carries on across sessions.

    :meth:`part` is what ``load_market`` makes of a file of the session's records, with ingest's
    own steps (the crossed policy, the trade checks and coverage), run on the states and trades that
    arrived since the last close only: the policy's counts and the states it kept are carried."""

    def __init__(self, meta: StreamMeta, cfg: DataConfig) -> None:
        self.meta, self.cfg = meta, cfg
        self.where = Path(f"the {meta.schema.value} stream")
        self.states: dict[int, BookState] = {}  # MBO: each instrument's book, across chunks and sessions
        self.clock = _SessionClock(cfg)
        self.end_session()

    def feed(self, recs: np.ndarray) -> None:
        """The next records of the stream (a structured array of its record dtype)."""
        if self.meta.schema is Schema.MBO:
            arrays = mbo_from_records(recs)
            where, states = str(self.where), self.states
            book = rebuild_book(arrays, levels=self.cfg.levels, where=where, states=states).book
        else:
            arrays = book_from_records(self.where, recs, self.meta.schema.levels)
            book = arrays.with_levels(self.cfg.levels)
        # Into one buffer as they arrive (a paced feed's blocks are often one record): a close, or a
        # close made ahead after each record, then takes the bar's states as one chunk.
        self.unchecked.append(book)
        self.fed_states += len(book)
        self.trades.append(trades_in(arrays))
        self.records += len(recs)

    def end_session(self) -> None:
        self.trades, self.records = Appended(), 0
        # The states fed since the last part() that passed (only they are checked again: the session's
        # states are ``kept``, after the crossed policy), and how many states the session was fed.
        self.unchecked = Appended()  # of BookArrays
        self.fed_states = 0
        self.no_states: BookArrays | None = None  # none of the stream's states (a close without new ones)
        # What the last part() made of the states and trades before ``traded``.
        self.kept, self.kept_crossed = Appended(), Grown(np.bool_)  # states after the crossed policy
        self.traded = 0
        self.counts = (0, 0, 0)  # states, crossed states and those outside the halt so far (the share)
        self.span: tuple[int, int] | None = None  # first and last ts_event of the states (or trades)
        self.instruments: set[int] = set()  # of the kept states
        self.trade_instruments: set[int] = set()
        self.in_order = True  # the kept states and the trades each by ts_event (as a file's usually are)

    def part(self, md: MarketData) -> tuple[BookArrays, np.ndarray, TradeArrays]:
        """What ``load_market`` takes from a file of the session's records: its book states after
        the crossed policy, their crossed flags and its trades; its symbols, depth, trade coverage and
        report go into ``md``."""
        cfg = self.cfg
        # The new states go into the session's buffer at once (the chunks fed since the last part, not
        # concatenated first) and are checked there; a refusal takes them out again.
        start = self.kept.n
        last_kept = self.kept.rows().ts_event[-1:] if start else np.zeros(0, np.int64)
        if self.unchecked.n:
            self.kept.append(self.unchecked.rows())
            new = self.kept.rows().take(slice(start, None))
        else:  # no state since the last part (a part follows a feed: the first has some)
            new = self.unchecked.rows() if self.unchecked.kind is not None else self.no_states
            assert new is not None
        carried: TradeArrays = self.trades.rows()
        new_trades = carried.take(slice(self.traded, None))
        md.symbols.update(self.meta.symbols)
        span = self._span(new.ts_event if self.fed_states else new_trades.ts_event)
        report = FileReport(
            path=str(self.where),
            schema=self.meta.schema.value,
            dataset=self.meta.dataset,
            records=self.records,
            instruments={},
            start=span[0] if span else 0,
            end=span[1] if span else 0,
        )
        depth = 1 if self.meta.schema.is_top_of_book else cfg.levels
        md.book_levels = min(md.book_levels, depth) if md.book_levels else depth
        try:
            kept, crossed = _apply_crossed_policy(self.where, new, cfg, report, before=self.counts)
            check_trade_prices(self.where, new_trades)
        except Exception:
            self.kept.truncate(start)
            raise
        if kept is not new:  # the policy dropped crossed states
            self.kept.truncate(start)
            if len(kept):
                self.kept.append(kept)
        # Both checks passed: the new states and trades are the session's (a refusal repeats at the
        # next close, as a batch over the session's records would refuse them again).
        self.span, self.counts = span, (report.book_states, report.crossed, report.crossed_trading)
        self.no_states, self.traded = new.take(slice(0, 0)), len(carried)
        self.unchecked.truncate(0)
        last_trade = carried.ts_event[self.traded - len(new_trades) - 1 : self.traded - len(new_trades)]
        self._see(kept, last_kept, self.instruments)
        self._see(new_trades, last_trade, self.trade_instruments)
        if len(kept):
            self.kept_crossed.append(crossed)
        if len(carried):
            # The coverage of a session's first and last trade is that of all of them.
            one = len(self.trade_instruments) == 1
            ends = carried.take(np.array([0, len(carried) - 1])) if one else carried
            _cover(md, ends, cfg, dates=lambda ts: self.clock.dates_and_halts(ts)[0])
        md.files.append(report)
        return (self.kept.rows() if self.kept.n else kept), self.kept_crossed.rows(), carried

    def _see(self, part: Any, last: np.ndarray, instruments: set[int]) -> None:
        """Note a part's instruments and whether it follows ``last`` (the ts before it) in order."""
        if len(part):
            ids = part.instrument_id
            one = bool((ids == ids[0]).all())  # the usual part: one contract (np.unique sorts)
            instruments.update((int(ids[0]),) if one else (int(i) for i in np.unique(ids)))
            self.in_order &= bool((np.diff(np.concatenate([last, part.ts_event])) >= 0).all())

    def _span(self, ts: np.ndarray) -> tuple[int, int] | None:
        if not len(ts):
            return self.span
        lo, hi = int(ts.min()), int(ts.max())
        return (lo, hi) if self.span is None else (min(self.span[0], lo), max(self.span[1], hi))


def book_market(streams: list[BookStream]) -> MarketData:
    """The market of the book streams' sessions so far, merged as ``load_market`` merges files."""
    md = MarketData(trade_coverage=[])
    live = [s for s in streams if s.records]
    parts = [s.part(md) for s in live]
    if len(live) == 1 and live[0].in_order and len(live[0].instruments | live[0].trade_instruments) == 1:
        # One stream of one contract, in order: the merge below moves nothing (no copy of the session).
        book, crossed, trades = parts[0]
        iid = next(iter(live[0].instruments | live[0].trade_instruments))
        if len(book):
            md.books[iid], md.crossed[iid] = book, crossed
        if len(trades):
            md.trades[iid] = trades
        return md
    book = BookArrays.concat([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    crossed = np.concatenate([p[1] for p in parts])
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


class _CacheRows:
    """Some rows of a feature cache, in memory: what ``market_tensors`` reads of a FeatureCache (its
    feature matrix, its columns by name), without writing and hashing an Arrow table per close."""

    def __init__(
        self, cols: dict[str, np.ndarray], values: np.ndarray, columns: tuple[str, ...] | _Indexed
    ) -> None:
        indexed = columns if isinstance(columns, _Indexed) else _Indexed(columns)
        self.cols, self.values, self.columns = cols, values, indexed
        self.meta = {"columns": self.columns}
        self.table = SimpleNamespace(column_names=[*cols, *columns])

    def features(self) -> np.ndarray:
        return self.values

    def column(self, name: str) -> np.ndarray:
        return self.cols[name] if name in self.cols else self.values[:, self.columns.index(name)]


class _Indexed(list):
    """A list of distinct names whose ``in`` and ``index`` are dict look-ups, not scans (market_tensors
    asks both for every state column at every close)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        super().__init__(names)
        self._at = {c: j for j, c in enumerate(names)}

    def __contains__(self, name: object) -> bool:
        return name in self._at

    def __fork__(self, memo: dict[int, Any]) -> _Indexed:
        return self  # made once, never changed

    def index(self, name: str, *_: Any) -> int:  # type: ignore[override]
        if name not in self._at:
            raise ValueError(f"{name!r} is not in list")
        return self._at[name]


class _RowBuffers:
    """Row buffers of doubling capacity (numpy or torch), appended and rewritten from a row on.
    Every buffer holds the rows before the one a write starts at (fields may be written apart). A
    fork (foxhunt.serve.fork) shares the storage and copies a buffer before its first write below
    the rows it was forked with (a close rewrites the session's last row); its original must not
    change while the fork lives (serve keeps one of them)."""

    first = 1024  # rows of a new buffer

    def __init__(self) -> None:
        self.buffers: dict[str, Any] = {}
        self.n = 0
        self.shared: dict[str, int] = {}  # a forked buffer its original holds too: the rows it holds

    def __fork__(self, memo: dict[int, Any]) -> _RowBuffers:
        twin = _RowBuffers()
        twin.buffers, twin.n = dict(self.buffers), self.n
        twin.shared = dict.fromkeys(self.buffers, self.n)
        return twin

    def write(self, at: int, parts: dict[str, Any]) -> None:
        """Rows ``at ..`` become ``parts`` (rows from ``at`` on are dropped first)."""
        m = at + len(next(iter(parts.values())))
        for k, v in parts.items():
            buf = self.buffers.get(k)
            if at < self.shared.pop(k, 0):  # rows the twin holds: written into a buffer of its own
                buf = self.buffers[k] = buf.clone() if isinstance(buf, torch.Tensor) else buf.copy()
            if buf is None or len(buf) < m:
                cap = max(m, 2 * (0 if buf is None else len(buf)), self.first)
                if isinstance(v, torch.Tensor):
                    grown = torch.empty((cap, *v.shape[1:]), dtype=v.dtype, device=v.device)
                else:
                    grown = np.empty((cap, *v.shape[1:]), v.dtype)
                if buf is not None:
                    grown[:at] = buf[:at]
                self.buffers[k] = buf = grown
            buf[at:m] = v
        self.n = m

    def rows(self, name: str, a: int = 0) -> Any:
        return self.buffers[name][a : self.n]


# MarketTensors' per-row fields (the rest: columns, instrument).
_TENSOR_FIELDS = tuple(
    f.name for f in dataclasses.fields(MarketTensors) if f.name not in ("feature_columns", "instrument")
)


class IncrementalRows:
    """The rows of a one-stream time-bar replay computed as they close: O(new records) per close.

    Each close takes the bars the carried session bars added (foxhunt.serve.bars.SessionBars.chunk)
    and runs the batch's own steps on them alone, with the state of the rows before them carried:
    ``from_bars`` (:class:`foxhunt.features.frame.BarsCarry`), every feature family through
    ``compute_features`` (each family's :class:`foxhunt.features._kernels.Carry`: the batch is the
    one-chunk case, tests/features/test_chunks.py), the fold's normaliser and ``market_tensors`` on the
    new rows and the one before them (``_CacheRows``), appended to the rows of the sessions so far.
    Two of market_tensors' quantities look back over the whole session: the price path, whose
    leading NaNs are back-filled (over the session until it has a price, then carried forward from
    its last one), and the plan's trailing volatility (a running Welford sum, computed over the
    session: 1-d, cheap). The session is recomputed from its start, as one chunk,
    when the bars so far are not those it has rows for (the bars fell back to ``build_bars``) or the
    session's trade coverage changed the flow masks of rows it has (its first trade)."""

    def __init__(
        self, cfg: FoxhuntConfig, fold: _Fold, instrument: Instrument, device: torch.device | str = "cpu"
    ) -> None:
        self.cfg, self.fold, self.instrument = cfg, fold, instrument
        self.device = torch.device(device)  # of the market tensors (the raw rows stay numpy)
        self.rows = _RowBuffers()  # every row so far: raw features and ts (numpy), market tensors (torch)
        self.session_start = 0  # first row of the current session
        self.checked = False
        self._new_session()

    def _new_session(self) -> None:
        self.carry: dict[str, Carry] = {}
        self.frame = BarsCarry()
        self.session = _RowBuffers()  # the session's cache columns before the features (row_columns)
        self.priced = False  # whether the session's rows so far have a finite close

    def end_session(self) -> None:
        self.session_start = self.rows.n
        self._new_session()

    def update(self, bars: SessionBars, series: Any) -> RecordRows:
        """The rows after a close, given the session's bars (``bars.series``) and their new chunk."""
        have = self.rows.n - self.session_start
        chunk = bars.chunk
        added = 0 if chunk is None else len(chunk.bars)
        flow = series.bars.flow_mask
        same = (
            not bars.fallback
            and len(series.bars) - added == have
            and np.array_equal(flow[:have], self.session.rows("flow") if have else flow[:0])
        )
        if not same:  # the session from its start, as one chunk
            self.rows.n = self.session_start
            self._new_session()
            chunk = series
        if chunk is not None and len(chunk.bars):
            tick = float(self.instrument.tick_size)
            inp = from_bars(chunk, self.cfg.data.data_source, tick, self.frame)
            self._append(inp, compute_features(inp, self.cfg, carry=self.carry))
        return self.view()

    def _append(self, inp: RowInput, fm: FeatureMatrix) -> None:
        if not self.checked:
            check_layout(fm.columns, self.fold.scaler)
            self.columns, self.checked = tuple(fm.columns), True
            self.indexed = _Indexed(self.columns)  # built once: a close asks it ~200 times
        k = self.session.n  # the session's rows before these
        cols = row_columns(inp)
        self.session.write(k, {**cols, "flow": inp.flow_mask})
        at = self.session_start + k
        self.rows.write(at, {"ts": cols["ts"], "raw": fm.values})
        # The session's price path and plan volatility, as market_tensors makes them of its rows. Once
        # the session has a finite price the path of the new rows carries the last one forward (the
        # same values as the back-filled path over the session); before, it is made over the session.
        close = self.session.rows("close")
        if k and self.priced:
            last = self.session.rows("mid", k - 1)[:1]
            self.session.write(k, {"mid": _ffill(np.concatenate([last, close[k:]]))[1:]})
        else:
            k = 0  # the back-fill of the leading NaNs reaches rows already made: make them again
            self.priced = bool(np.isfinite(close).any())
            self.session.write(0, {"mid": _ffill(close)})
        mid = self.session.rows("mid")
        window = self.cfg.env.plan.barrier.vol_window
        vol = np.nan_to_num(trailing_volatility(mid, self.session.rows("segment_start"), window))
        h = 1 if k else 0  # the row before, for its look-ahead aux target and the segment numbers
        a = k - h
        part = {name: self.session.rows(name, a) for name in cols}
        part["close"] = mid[a:]
        raw = self.rows.rows("raw", self.session_start + a)
        rows = _CacheRows(part, raw, self.indexed)
        # With the session's volatility, which the aux targets read too (next return / volatility).
        mt = market_tensors(
            rows,
            self.fold,
            vol_window=window,
            instrument=self.instrument,
            vol=vol[a:],  # type: ignore[arg-type]
            device=self.device,
        )
        self.state_columns = mt.feature_columns
        tensors = {f: getattr(mt, f) for f in _TENSOR_FIELDS if getattr(mt, f) is not None}
        # market_tensors numbers the segments of its rows from 0; the rows before go on from theirs.
        seg = tensors["segment"]
        if h:
            tensors["segment"] = seg - seg[0] + self.rows.rows("segment")[at - 1]
        elif self.session_start:
            tensors["segment"] = seg + self.rows.rows("segment")[self.session_start - 1] + 1
        self.rows.write(self.session_start + a, tensors)

    def view(self) -> RecordRows:
        """The rows so far (views of the buffers, valid until the next close)."""
        if not self.rows.n:
            return _no_rows(self.columns if self.checked else (), self.device)
        fields = {f: self.rows.rows(f) if f in self.rows.buffers else None for f in _TENSOR_FIELDS}
        market = MarketTensors(**fields, feature_columns=self.state_columns, instrument=self.instrument)
        return RecordRows(market, self.rows.rows("ts"), self.rows.rows("raw"), self.columns)


def _no_rows(columns: tuple[str, ...], device: torch.device) -> RecordRows:
    empty = torch.zeros(0, dtype=torch.float64, device=device)
    market = MarketTensors(
        features=torch.zeros((0, 0), device=device),
        mid=empty, high=empty, low=empty, bid=empty, ask=empty, vol=empty,
        segment=torch.zeros(0, dtype=torch.int64, device=device),
        feature_columns=(),
    )  # fmt: skip
    return RecordRows(market, np.zeros(0, np.int64), np.zeros((0, len(columns)), np.float32), columns)


def check_layout(columns: tuple[str, ...], scaler: RobustScaler) -> None:
    """Refuse a normaliser of another feature layout (one line, exit 2)."""
    if tuple(columns) != tuple(scaler.columns):
        raise CheckpointError(
            "--checkpoint",
            f"its normaliser scales {len(scaler.columns)} feature columns, this foxhunt "
            f"computes {len(columns)} for its config (another feature layout)",
            "serve a checkpoint trained and exported with this version's features",
        )


class RowState:
    """The record logs and the rows built from them (module docs)."""

    def __init__(
        self,
        streams: list[StreamMeta],
        cfg: FoxhuntConfig,
        scaler: RobustScaler,
        instrument: Instrument,
        workdir: Path | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        check_servable(cfg)
        self.streams, self.cfg, self.instrument = streams, cfg, instrument
        self.device = torch.device(device)  # the market tensors' (the rows are made on the CPU)
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
        self.done: RecordRows | None = None
        # Book streams only (MBO, MBP-10 ...: one per file, each MBO file its own book, as ingest
        # rebuilds them) are decoded as they arrive; other mixes go through load_market.
        accepted = ACCEPTED[cfg.data.data_source]
        self.books: list[BookStream] | None = None
        if all(s.schema in BOOK_SCHEMAS and s.schema in accepted for s in streams):
            self.books = [BookStream(s, cfg.data) for s in streams]
        # One book stream: its session's bars are carried from close to close (foxhunt.serve.bars); with
        # several, a merge by time could insert a record before those already in a bar.
        self.bars = SessionBars(cfg.data) if self.books is not None and len(streams) == 1 else None
        self.cuttable = self.books is not None or all(s.schema is not Schema.MBO for s in streams)
        # Carried bars and families that all take a carry: each close computes its new rows only.
        families = with_plugins(load_plugins(cfg.features))
        chunked = self.bars is not None and all(resumable(families[f]) for f in _families(cfg))
        self.incremental = IncrementalRows(cfg, self.fold, instrument, self.device) if chunked else None

    def decode(self, stream: int, payload: bytes) -> np.ndarray:
        """One record as a structured scalar array; ValueError when the bytes are not one record."""
        if not 0 <= stream < len(self.dtypes):
            raise ValueError(f"record of unknown stream {stream}")
        dt = self.dtypes[stream]
        if len(payload) != dt.itemsize:
            schema = self.streams[stream].schema.value
            raise ValueError(f"{len(payload)} bytes where a {schema} record has {dt.itemsize}")
        return np.frombuffer(payload, dtype=dt)

    def decode_block(self, stream: int, payload: bytes, size: int) -> np.ndarray:
        """Records of one stream as a structured array (no copy); ValueError when they are not its
        schema's (then each is decoded alone, and found corrupt, by :meth:`decode`)."""
        if not 0 <= stream < len(self.dtypes):
            raise ValueError(f"records of unknown stream {stream}")
        dt = self.dtypes[stream]
        if size != dt.itemsize or len(payload) % size:
            schema = self.streams[stream].schema.value
            raise ValueError(f"{size} bytes a record where a {schema} record has {dt.itemsize}")
        return np.frombuffer(payload, dtype=dt)

    def in_bucket(self, ts_event: np.ndarray) -> int:
        """How many leading timestamps (non-decreasing) fall in the time bar of the first one."""
        self.bucket_of(int(ts_event[0]))  # the session's span
        lo, hi, _ = self._session
        step = self.cfg.data.bar_seconds * NS
        end = min(lo + ((int(ts_event[0]) - lo) // step + 1) * step, hi)
        return int(np.searchsorted(ts_event, np.uint64(end), side="left"))

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

    def bucket_start(self, bucket: tuple[int, int]) -> int:
        """The ns the time bar ``bucket`` of the current session (:meth:`bucket_of`'s last) opens at."""
        lo, _, date = self._session
        assert bucket[0] == date, "a bucket of another session"
        return lo + bucket[1] * self.cfg.data.bar_seconds * NS

    def append(self, stream: int, payload: bytes) -> None:
        self.logs[stream] += payload
        self.records += 1

    def append_block(self, stream: int, recs: np.ndarray) -> None:
        """Records of one stream (a structured array of its dtype), as many ``append`` calls. A book
        stream decodes them now, not at the row close: a close's latency then starts at its own
        record (the records before it are decoded as they arrive)."""
        self.records += len(recs)
        if self.books is None:
            self.logs[stream] += recs.data
            return
        if not self.logs[stream]:  # nothing of the stream waits to be decoded: these records, uncopied
            # A refusal (raised before the book changes) leaves them to the log and the close below.
            with contextlib.suppress(Exception):
                self.books[stream].feed(recs)
                return
        self.logs[stream] += recs.data
        # A stream the decoder refuses (it raises before it changes the book) is left to the close,
        # which decodes the same records again and reports the failure as a fault.
        with contextlib.suppress(Exception):
            self._feed(stream)

    def has_records(self) -> bool:
        """Whether any record has come since the last cut (a book stream's decoded ones included)."""
        return any(self.logs) or any(b.records for b in self.books or ())

    def _feed(self, stream: int) -> None:
        """Decode the stream's logged records into its book stream. Decoded, they leave the log: only
        records the decoder has refused wait there (a session's log of decoded records would be its
        whole feed, hundreds of MB on a full ES session of MBP-10 records)."""
        assert self.books is not None
        log = self.logs[stream]
        if log:
            with memoryview(log) as view:  # one copy (released: the log is cleared below)
                new = bytes(view)
            self.books[stream].feed(np.frombuffer(new, dtype=self.dtypes[stream]))
            log.clear()

    def _market(self) -> MarketData:
        """The market of the records logged since the last cut: from the book stream, else through
        ``load_market`` on the logs written as DBN files."""
        if self.books is not None:
            for i in range(len(self.books)):
                self._feed(i)  # what append_block has not decoded (single records, a refused block)
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

    def rows(self) -> RecordRows:
        """Rows, features and market of every record logged so far (the batch path, module docs)."""
        cfg = self.cfg
        md = self._market()
        tick = self.instrument.tick_size
        if self.incremental is not None:
            assert self.bars is not None
            return self.incremental.update(self.bars, self.bars.series(md))
        if self.bars is not None:
            inp = from_bars(self.bars.series(md), cfg.data.data_source, float(tick))
        else:
            inp = rows_from_market(md, cfg.data, tick_size=tick)
        fm = compute_features(inp, cfg)
        check_layout(fm.columns, self.fold.scaler)
        meta = {"columns": list(fm.columns), "row_unit": cfg.data.row_unit.value}
        cache = FeatureCache(Path(self._tmp.name), cache_table(inp, fm, {}, meta), meta)
        vol_window = cfg.env.plan.barrier.vol_window
        market = market_tensors(
            cache, self.fold, vol_window=vol_window, instrument=self.instrument, device=self.device
        )
        here = RecordRows(market, cache.column("ts"), cache.features(), tuple(cache.columns))
        return here if self.done is None else self.done.then(here)

    def end_session(self, rows: RecordRows) -> None:
        """The session whose records are logged has ended with ``rows``: keep them, cut the logs."""
        if self.incremental is not None:
            self.incremental.end_session()
        if self.cuttable:
            self.done = rows
            self.logs = [bytearray() for _ in self.streams]
            for book in self.books or ():
                book.end_session()
            if self.bars is not None:
                self.bars.reset()

    def close(self) -> None:
        self._tmp.cleanup()
