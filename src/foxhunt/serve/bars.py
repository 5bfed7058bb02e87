"""The session's time bars, carried from row close to row close instead of rebuilt.

``build_bars`` over the session's market costs O(states of the session) at every row close (session
dates and halt masks through pandas, the bar keys, the aggregation). :class:`SessionBars` keeps the
bars already closed, the book states and trades behind them, and the last book state; a row close
runs the batch's own steps (foxhunt.data.bars: ``time_bar_index`` and ``_aggregate``) on the records
that arrived since the last close only. The batch is the same kernels run as one chunk from an empty
state, so the two cannot drift.

Why a chunk's bars equal the batch's: a row closes when a record opens a later time bucket, so a
chunk holds whole buckets (checked: a chunk whose first bar continues the last closed one is
rebuilt from scratch) and a time bar depends only on its bucket's records, except for its book at
the close when the bucket has no book state: the last state before it in the session, which is the
carried state (prepended to the chunk outside every bar; ``_aggregate`` checks its session). The
volume mask reads the session's trade coverage, which grows as trades arrive: it is recomputed over
every bar at each close, as the batch would.

Only the common case is carried: one contract in the session (then it is the front month: a session's
only candidate, foxhunt.data.continuous). Anything else (two contracts, a prefix that changed) goes
back to ``build_bars`` on the whole market for the rest of the session.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import numpy as np
import pandas as pd

from foxhunt.data.arrays import BookArrays, TradeArrays
from foxhunt.data.bars import (
    Bars,
    BarSeries,
    _aggregate,
    _empty_trades,
    build_bars,
    time_bar_index,
    volume_known,
)
from foxhunt.data.config import DataConfig
from foxhunt.data.continuous import choose_front
from foxhunt.data.ingest import MarketData
from foxhunt.data.schemas import BarKind, DataSource
from foxhunt.data.sessions import in_halt, session_dates, session_open_ns
from foxhunt.serve.buffers import Appended, Grown

_C = TypeVar("_C", BookArrays, TradeArrays)


class NoBarsYet(Exception):  # noqa: N818 (a state of the session, not an error)
    """The session so far has no bar: no book state yet (an MBO file's snapshot, 33 h before ESH4's live
    records) or only states in the daily halt (a pre-open). A close then makes no row, as a file of
    those records would make none; it is no fault of the stream (the batch refuses such a file: it has
    nothing to train on)."""


class _InBars(Generic[_C]):
    """The session's records in bars: the session market's (which only grows) less the halted ones.
    While the dropped ones are the session's first (records before its open: a file or feed that
    starts early) or its last so far (the halt it is in), the kept ones are one run of the market's
    own rows, ``[start, stop)`` (a view, no copy); from a drop between two kept records on, a copy of
    the kept ones, appended at each close."""

    def __init__(self, appended: Callable[[], Any]) -> None:
        self.appended = appended
        self.start = 0  # the market's rows before this one are dropped
        self.stop: int | None = None  # and from this one on (None: none yet)
        self.kept: Any = None  # foxhunt.serve.buffers.Appended, from a drop between kept rows on

    def add(self, rows: _C, seen: int, keep: np.ndarray) -> None:
        """``rows`` (the session's market) has ``rows[seen:]`` new, of which ``keep`` are in bars."""
        if self.kept is None:
            if self._one_run(seen, keep):
                return
            self.kept = self.appended()
            end = seen if self.stop is None else self.stop
            if end > self.start:
                self.kept.append(rows.take(slice(self.start, end)))
        new = rows.take(slice(seen, None))
        new = new if keep.all() else new.take(keep)
        if len(new):
            self.kept.append(new)

    def _one_run(self, seen: int, keep: np.ndarray) -> bool:
        """Whether the kept rows, with ``rows[seen:]``'s ``keep``, are still one run (noted if so)."""
        if self.stop is not None:  # dropping since ``stop``: a run while nothing more is kept
            return not keep.any()
        if seen == self.start:  # nothing kept yet: leading drops move the start
            first = int(np.argmax(keep)) if keep.any() else len(keep)
            self.start, seen, keep = seen + first, seen + first, keep[first:]
        if keep.all():
            return True
        last = int(np.argmin(keep))  # the first drop: the rest must be dropped too
        if keep[last:].any():
            return False
        self.stop = seen + last
        return True

    def contiguous(self) -> bool:
        """Whether the records in bars are the market's from ``start`` to its end (a view of it)."""
        return self.kept is None and self.stop is None

    def rows(self, rows: _C) -> _C:
        """The records in bars of the session market ``rows`` (all of them added)."""
        if self.kept is None:
            return rows.take(slice(self.start, self.stop)) if self.start or self.stop is not None else rows
        return self.kept.rows() if self.kept.n else rows.take(slice(0, 0))


class _SessionClock:
    """``session_dates`` and ``in_halt`` of a close's new timestamps, the last session's span
    remembered: inside ``[open, next open)`` every timestamp has its trade date and is halted from the
    close on. The two pandas calls (~1 ms each, twice a close) then run once a session, on the span's
    bounds, which check the span; timestamps outside a checked span go to the functions themselves."""

    def __init__(self, cfg: DataConfig) -> None:
        self.cfg = cfg
        self.span: tuple[int, int, int, int] | None = None  # open, halt, next open (ns), trade date

    def dates_and_halts(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cfg = self.cfg
        if not len(ts):
            return np.zeros(0, np.int64), np.zeros(0, bool)
        first, last = int(ts.min()), int(ts.max())
        if self.span is None or not self.span[0] <= first < self.span[2]:
            self.span = self._span(first)
        if self.span is not None and self.span[0] <= first and last < self.span[2]:
            return np.full(len(ts), self.span[3], np.int64), ts >= self.span[1]
        tz, opens = cfg.session_timezone, cfg.session_open
        return session_dates(ts, tz, opens), in_halt(ts, tz, opens, cfg.session_close)

    def _span(self, t: int) -> tuple[int, int, int, int] | None:
        cfg = self.cfg
        tz, opens, close = cfg.session_timezone, cfg.session_open, cfg.session_close
        date = int(session_dates(np.array([t], np.int64), tz, opens)[0])
        day = np.datetime64(f"{date // 10000:04d}-{date // 100 % 100:02d}-{date % 100:02d}")
        lo = session_open_ns(date, tz, opens)
        hi = session_open_ns(int(str(day + 1).replace("-", "")), tz, opens)
        local_day = pd.Timestamp(hi, tz="UTC").tz_convert(tz).date()
        halt = int(pd.Timestamp(dt.datetime.combine(local_day, close)).tz_localize(tz).value)
        bounds = np.array([lo, halt - 1, halt, hi - 1], np.int64)
        checked = (
            lo <= t < hi
            and lo < halt <= hi
            and (session_dates(bounds, tz, opens) == date).all()
            and (in_halt(bounds, tz, opens, close) == [False, False, True, True]).all()
        )
        return (lo, halt, hi, date) if checked else None


class SessionBars:
    """Time bars of one session's book market so far (module docs)."""

    def __init__(self, cfg: DataConfig) -> None:
        self.cfg = cfg
        self.carried = cfg.bar_kind is BarKind.TIME and cfg.data_source is not DataSource.OHLCV
        self.reset()

    def reset(self) -> None:
        """A new session (the carried bars restart from an empty state)."""
        self.bars = Appended()
        # The session's book states and trades in bars: the market's (md.books / md.trades, which only
        # grow) less the halted ones.
        self.book_in = _InBars(Appended)
        self.trade_in = _InBars(Appended)
        self.book_bar = Grown(np.int64)
        self.trade_bar = Grown(np.int64)
        self.book_seen = 0  # states / trades of the session's market already in a bar or dropped
        self.trade_seen = 0
        self.halt_dropped = 0
        self.last: BookArrays | None = None  # the last book state in a bar, and its session
        self.last_date = 0
        self.last_key: tuple[int, int] = (0, -1)  # (session date, ts_open) of the last closed bar
        self.seen_ts = (0, 0)  # ts_event of the last state / trade seen: the market only grows
        # session date -> [volume, book states]: what front_month counts
        self.activity: dict[int, list[int]] = {}
        self.instrument = -1
        self.fallback = not self.carried
        # The bars the last close added, with their book states and trades (bar indices from 0), or
        # None: the next rows are foxhunt.serve.state's chunk (from_bars with its carry).
        self.chunk: BarSeries | None = None
        self.clock = _SessionClock(self.cfg)

    def series(self, md: MarketData) -> BarSeries:
        """The bars of ``md`` (the session's market so far), as ``build_bars(md, cfg)`` gives them."""
        self.chunk = None
        if not self.fallback:
            series = self._update(md)
            if series is not None:
                return series
            self.fallback = True
        return build_bars(md, self.cfg)

    def _update(self, md: MarketData) -> BarSeries | None:
        """The carried bars with the records since the last close, or None where they cannot be."""
        if not md.books:
            raise NoBarsYet  # no book state yet (an MBO snapshot)
        if len(md.books) != 1 or not set(md.trades) <= set(md.books):
            return None
        iid = next(iter(md.books))
        if self.instrument not in (-1, iid):
            return None
        book: BookArrays = md.books[iid]
        trades: TradeArrays = md.trades[iid] if iid in md.trades else _empty_trades()
        if len(book) < self.book_seen or len(trades) < self.trade_seen:
            return None
        if self.seen_ts != self._ends(book, trades):
            return None
        cfg = self.cfg
        new_book = book.take(slice(self.book_seen, None))
        new_trades = trades.take(slice(self.trade_seen, None))
        # ``_continuous`` on the new records alone: the front month is the only contract.
        book_date, book_halt = self.clock.dates_and_halts(new_book.ts_event)
        trade_date, trade_halt = self.clock.dates_and_halts(new_trades.ts_event)
        for dates, counts in ((book_date, None), (trade_date, new_trades.size)):
            for d in np.unique(dates):
                at = self.activity.setdefault(int(d), [0, 0])
                if counts is None:
                    at[1] += int((dates == d).sum())
                else:
                    at[0] += int(counts[dates == d].sum())
        keep_b, keep_t = ~book_halt, ~trade_halt
        self.book_in.add(book, self.book_seen, keep_b)
        self.trade_in.add(trades, self.trade_seen, keep_t)
        dropped = int((~keep_b).sum() + (~keep_t).sum())
        if not keep_b.all():
            new_book, book_date = new_book.take(keep_b), book_date[keep_b]
        if not keep_t.all():
            new_trades, trade_date = new_trades.take(keep_t), trade_date[keep_t]
        book_bar, trade_bar, bar_date, ts_open, ts_close = time_bar_index(
            new_book.ts_event, book_date, new_trades.ts_event, trade_date, cfg
        )
        if len(bar_date) and (int(bar_date[0]), int(ts_open[0])) <= self.last_key:
            return None  # the chunk continues a closed bar: not whole buckets
        # The carried state, outside every bar (index -1), for a bar without a book state of its own.
        agg_book, agg_bar, agg_date = new_book, book_bar, book_date
        if self.last is not None:
            # While the session has dropped none since its first kept state, the market holds it right
            # before the new states: a view.
            if self.book_in.contiguous():
                agg_book = book.take(slice(self.book_seen - 1, None))
            else:
                agg_book = BookArrays.concat([self.last, new_book])
            agg_bar = np.concatenate([[-1], book_bar])
            agg_date = np.concatenate([[self.last_date], book_date])
        n = len(bar_date)
        chunk = _aggregate(
            agg_book,
            agg_bar,
            agg_date,
            new_trades,
            trade_bar,
            ts_open,
            ts_close,
            bar_date,
            np.full(n, iid, np.uint32),
            np.zeros(n, bool),  # the masks are recomputed over every bar below
        )
        offset = self.bars.n
        if n:
            self.bars.append(chunk)
            self.last_key = (int(bar_date[-1]), int(ts_open[-1]))
        if len(new_book):
            self.book_bar.append(book_bar + offset)
            self.last, self.last_date = new_book.take(slice(len(new_book) - 1, None)), int(book_date[-1])
        if len(new_trades):
            self.trade_bar.append(trade_bar + offset)
        self.book_seen, self.trade_seen = len(book), len(trades)
        self.seen_ts = self._ends(book, trades)
        self.halt_dropped += dropped
        self.instrument = iid
        if not self.bars.n:
            raise NoBarsYet  # nothing but the halt yet
        bars: Bars = self.bars.rows()
        traded = volume_known(md, cfg, bars.trade_date, bars.instrument_id)
        bars = dataclasses.replace(bars, flow_mask=traded, volume_mask=traded.copy())
        dates = np.array(sorted(self.activity), np.int64)
        act = np.array([self.activity[int(d)] for d in dates], np.int64).reshape(len(dates), 2)
        front = choose_front(
            dates, np.array([iid], np.uint32), act[:, :1], cfg.roll_rule, md.symbols, act[:, 1:]
        )
        if n:
            mask = traded[offset:]
            self.chunk = BarSeries(
                bars=dataclasses.replace(chunk, flow_mask=mask, volume_mask=mask.copy()),
                front=front,
                halt_dropped=dropped,
                book=new_book,
                book_bar=book_bar,
                trades=new_trades,
                trade_bar=trade_bar,
                book_levels=md.book_levels,
            )
        return BarSeries(
            bars=bars,
            front=front,
            halt_dropped=self.halt_dropped,
            book=self.book_in.rows(book),
            book_bar=self.book_bar.rows(),
            trades=self.trade_in.rows(trades),
            trade_bar=self.trade_bar.rows(),
            book_levels=md.book_levels,
        )

    def _ends(self, book: BookArrays, trades: TradeArrays) -> tuple[int, int]:
        b = int(book.ts_event[self.book_seen - 1]) if self.book_seen else 0
        t = int(trades.ts_event[self.trade_seen - 1]) if self.trade_seen else 0
        return b, t
