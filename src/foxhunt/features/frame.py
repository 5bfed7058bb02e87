"""The one input every feature family reads: :class:`RowInput`, built from bars or snapshots.

Both row units map onto the same arrays, so a family is written once:

* ``row_unit = bar``: one row per bar; the row becomes known at the bar's close (``ts``); its price
  path is the mid's open/high/low/close (the trade price's for ``data_source = ohlcv``); its flows
  are the bar's; its book is the book at the close; ``events`` are the book states inside bars.
* ``row_unit = snapshot``: one row per book state; the price path is the mid (o = h = l = c);
  flows are the trades since the previous state of the segment; ``events`` are the rows.

``segment_start`` marks the first row of each session and contract: no lagged quantity may reach
across it (a return across the daily halt or a roll is not a return). Prices of empty book levels
are NaN and sizes 0; a family turns those into its 0 sentinel.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from foxhunt.data.arrays import ACTION_TRADE, SIDE_ASK, SIDE_BID, BookArrays
from foxhunt.data.bars import BarSeries, SnapshotRows
from foxhunt.data.schemas import DataSource, RowUnit


@dataclass(frozen=True, eq=False)
class EventInput:
    """Book states (events) with the row each belongs to, for per-event flow features."""

    row: np.ndarray  # [m] int64 row index, non-decreasing
    ts: np.ndarray  # [m] int64 ns
    segment_start: np.ndarray  # [m] bool: first event of a session/contract segment
    bid_px: np.ndarray  # [m, L] float64, NaN = empty level
    ask_px: np.ndarray
    bid_sz: np.ndarray  # [m, L] float64
    ask_sz: np.ndarray
    bid_ct: np.ndarray
    ask_ct: np.ndarray
    # [m] float64: the aggressor's sign (+1 buy, -1 sell) where the state is a trade's (action T with
    # side B or A), else 0; None: no event is a trade (a book without trade records)
    trade_sign: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ts)


@dataclass(frozen=True, eq=False)
class RowInput:
    """Everything a feature family may read, one entry per row (shapes ``[n]`` / ``[n, L]``)."""

    row_unit: RowUnit
    data_source: DataSource
    tick_size: float
    ts: np.ndarray  # int64 ns: when the row is complete (bar close / state time)
    trade_date: np.ndarray  # int64 YYYYMMDD
    segment_start: np.ndarray  # bool: first row of a session or contract
    open: np.ndarray  # float64 price path of the row (NaN where unknown)
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray  # float64 contracts traded in the row
    buy_volume: np.ndarray  # float64, buy aggressor (0 and flow_mask False when unknown)
    sell_volume: np.ndarray
    trade_count: np.ndarray  # float64
    event_count: np.ndarray  # float64 book states in the row (1 per snapshot row)
    vwap: np.ndarray  # float64, NaN without trades
    last_trade_ts: np.ndarray  # int64 ns of the last trade at or before ts (-1: none in segment)
    bid_px: np.ndarray  # [n, L] float64 book at the row, NaN = empty level
    ask_px: np.ndarray
    bid_sz: np.ndarray  # [n, L] float64
    ask_sz: np.ndarray
    bid_ct: np.ndarray
    ask_ct: np.ndarray
    book_mask: np.ndarray  # bool: the book fields are real
    flow_mask: np.ndarray  # bool: the aggressor split / trade count are real
    events: EventInput | None  # None without book data
    # What the input lacks, for the stack to mask the columns that need it (0 = no signal):
    # book levels with real data (1 = top of book only; None = all ``levels``), and per row
    # whether traded volume is known (None = every row; False where the session has no trades).
    book_levels: int | None = None
    volume_mask: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def levels(self) -> int:
        return int(self.bid_px.shape[1])

    def volume_known(self) -> np.ndarray:
        """[n] bool: the row's traded volume is known (0 there means nothing traded)."""
        return np.ones(len(self.ts), bool) if self.volume_mask is None else self.volume_mask

    @property
    def top_of_book(self) -> bool:
        """The book has real data at the touch only (MBP-1, TBBO, BBO input)."""
        return self.book_levels == 1

    def prefix(self, k: int) -> RowInput:
        """The first ``k`` rows (and their events): what was known at ``ts[k - 1]``.

        A causal family gives, on ``inp.prefix(k)``, exactly the first ``k`` rows it gives on
        ``inp``; tests use this as a quick causality check (the leak guard is the full one).
        """
        return self.rows(0, k)

    def rows(self, a: int, b: int) -> RowInput:
        """Rows ``a .. b - 1`` and their events (renumbered from 0): a chunk of the rows, as a stream
        delivers them (a family runs it with the carried state of rows ``0 .. a - 1``)."""
        fields = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            fields[f.name] = v[a:b] if isinstance(v, np.ndarray) else v
        if self.events is not None:
            lo, hi = np.searchsorted(self.events.row, [a, b], "left")
            ev = self.events
            part = {f.name: _part(getattr(ev, f.name), lo, hi) for f in dataclasses.fields(EventInput)}
            part["row"] = part["row"] - a
            fields["events"] = EventInput(**part)
        return RowInput(**fields)


def _part(v: np.ndarray | None, lo: int, hi: int) -> np.ndarray | None:
    return None if v is None else v[lo:hi]


def _segment_start(trade_date: np.ndarray, instrument_id: np.ndarray) -> np.ndarray:
    start = np.ones(len(trade_date), bool)
    start[1:] = (trade_date[1:] != trade_date[:-1]) | (instrument_id[1:] != instrument_id[:-1])
    return start


def _f(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _events(book: BookArrays, row: np.ndarray, seg_start: np.ndarray) -> EventInput:
    return EventInput(
        row=row.astype(np.int64),
        ts=book.ts_event,
        segment_start=seg_start,
        bid_px=book.bid_px,
        ask_px=book.ask_px,
        bid_sz=_f(book.bid_sz),
        ask_sz=_f(book.ask_sz),
        bid_ct=_f(book.bid_ct),
        ask_ct=_f(book.ask_ct),
        trade_sign=trade_signs(book),
    )


def trade_signs(book: BookArrays) -> np.ndarray:
    """[n] float64: +1 where the state is a buyer-initiated trade's (action T, side B), -1 a seller's
    (side A), 0 for every other state (a book rebuilt from MBO emits the state of an event's last
    record, which for a trade is its fill or cancel: 0 there)."""
    trade = book.action == ACTION_TRADE
    sell = np.where(trade & (book.side == SIDE_ASK), -1.0, 0.0)
    return np.where(trade & (book.side == SIDE_BID), 1.0, sell)


def _last_trade_ts(trade_ts: np.ndarray, ts: np.ndarray, seg_first_ts: np.ndarray) -> np.ndarray:
    """ns of the last trade at or before ``ts`` within the segment, -1 if none."""
    idx = np.searchsorted(trade_ts, ts, "right") - 1
    out = np.where(idx >= 0, trade_ts[np.clip(idx, 0, None)] if len(trade_ts) else -1, -1)
    return np.where(out >= seg_first_ts, out, -1).astype(np.int64)


def _segment_first(values: np.ndarray, seg_start: np.ndarray) -> np.ndarray:
    """Broadcast the first value of each segment to every row of it."""
    return values[np.maximum.accumulate(np.where(seg_start, np.arange(len(values)), 0))]


@dataclass
class BarsCarry:
    """What :func:`from_bars` carries from one chunk of bars to the next (a stream's bars as they
    close, foxhunt serve): whether the next bar continues a segment, and the last book state's and
    trade's place in it. The batch is one chunk from a fresh one."""

    bars: int = 0  # bars so far
    last_key: tuple[int, int] = (0, 0)  # the last bar's (trade date, instrument)
    segments: int = 0  # segments started so far
    event_segment: int = -1  # segment of the last book state (-1: none yet)
    last_trade: int = -1  # ts_event of the last trade (-1: none yet)
    segment_open: int = 0  # ts_open of the first bar of the last bar's segment


def from_bars(
    series: BarSeries, data_source: DataSource, tick_size: float, carry: BarsCarry | None = None
) -> RowInput:
    """Rows = bars. Book data: mid price path; OHLCV data: trade price path, book masked.

    ``carry``: the bars before ``series`` (its bars, book states and trades are a stream's next ones);
    the rows are then those the batch gives these bars, and ``carry`` is advanced past them."""
    b = series.bars
    seg = _segment_start(b.trade_date, b.instrument_id)
    carry = BarsCarry() if carry is None else carry  # a fresh one: the batch
    going = carry.bars > 0 and len(b) > 0  # these bars follow others
    if going:
        seg[0] = (int(b.trade_date[0]), int(b.instrument_id[0])) != carry.last_key
    book_data = data_source is DataSource.MBP10
    if book_data:
        o, h, lo, c = b.mid_open, b.mid_high, b.mid_low, b.mid_close
    else:
        o, h, lo, c = b.trade_open, b.trade_high, b.trade_low, b.trade_close
    events = None
    last_trade = np.full(len(b), -1, np.int64)
    seg_id = np.cumsum(seg) - 1  # segment number of each bar (-1: the segment of the bars before)
    if series.book is not None and series.book_bar is not None and len(series.book):
        ev_seg = np.ones(len(series.book), bool)
        ev_seg[1:] = seg_id[series.book_bar[1:]] != seg_id[series.book_bar[:-1]]
        if carry.event_segment >= 0:
            ev_seg[0] = carry.segments + seg_id[series.book_bar[0]] != carry.event_segment
        carry.event_segment = carry.segments + int(seg_id[series.book_bar[-1]])
        events = _events(series.book, series.book_bar, ev_seg)
    seg_first = _segment_first(b.ts_open, seg)
    trade_ts = np.zeros(0, np.int64) if series.trades is None else series.trades.ts_event
    if going:
        seg_first[seg_id < 0] = carry.segment_open
        if carry.last_trade >= 0:  # the last trade before these bars, if in their segment
            trade_ts = np.concatenate([[carry.last_trade], trade_ts])
    if len(trade_ts):
        last_trade = _last_trade_ts(trade_ts, b.ts_close, seg_first)
    if len(b):
        carry.bars += len(b)
        carry.last_key = (int(b.trade_date[-1]), int(b.instrument_id[-1]))
        carry.segments += int(seg.sum())
        carry.segment_open = int(seg_first[-1])
        carry.last_trade = int(trade_ts[-1]) if len(trade_ts) else carry.last_trade
    return RowInput(
        row_unit=RowUnit.BAR,
        data_source=data_source,
        tick_size=tick_size,
        ts=b.ts_close,
        trade_date=b.trade_date,
        segment_start=seg,
        open=_f(o),
        high=_f(h),
        low=_f(lo),
        close=_f(c),
        volume=_f(b.volume),
        buy_volume=_f(b.buy_volume),
        sell_volume=_f(b.sell_volume),
        trade_count=_f(b.trade_count),
        event_count=_f(b.event_count),
        vwap=np.where(b.flow_mask, _f(b.vwap), np.nan),
        last_trade_ts=last_trade,
        bid_px=b.bid_px if book_data else np.full(b.bid_px.shape, np.nan),
        ask_px=b.ask_px if book_data else np.full(b.ask_px.shape, np.nan),
        bid_sz=_f(b.bid_sz),
        ask_sz=_f(b.ask_sz),
        bid_ct=_f(b.bid_ct),
        ask_ct=_f(b.ask_ct),
        book_mask=b.book_mask.copy(),
        flow_mask=b.flow_mask.copy(),
        events=events,
        book_levels=series.book_levels or None,
        volume_mask=b.volume_mask.copy(),
    )


def from_snapshots(rows: SnapshotRows, tick_size: float) -> RowInput:
    """Rows = book states. Flows of row t are the trades in (ts[t-1], ts[t]] of the segment."""
    book, trades = rows.book, rows.trades
    n = len(book)
    seg = _segment_start(rows.trade_date, book.instrument_id)
    mid = book.mid()
    # Trades up to each state (inclusive), and up to the previous state of the segment.
    upto = rows.trades_before
    seg_first_ts = _segment_first(book.ts_event, seg)
    before_segment = np.searchsorted(trades.ts_event, seg_first_ts, "left")
    prev = np.empty(n, np.int64)
    prev[0] = before_segment[0]
    prev[1:] = np.where(seg[1:], before_segment[1:], upto[:-1])
    size = _f(trades.size)
    cs = np.concatenate([[0.0], np.cumsum(size)])
    cs_buy = np.concatenate([[0.0], np.cumsum(np.where(trades.side == SIDE_BID, size, 0.0))])
    cs_sell = np.concatenate([[0.0], np.cumsum(np.where(trades.side == SIDE_ASK, size, 0.0))])
    cs_pv = np.concatenate([[0.0], np.cumsum(size * trades.price)])
    volume = cs[upto] - cs[prev]
    with np.errstate(invalid="ignore", divide="ignore"):
        vwap = np.where(volume > 0, (cs_pv[upto] - cs_pv[prev]) / volume, np.nan)
    return RowInput(
        row_unit=RowUnit.SNAPSHOT,
        data_source=DataSource.MBP10,
        tick_size=tick_size,
        ts=book.ts_event,
        trade_date=rows.trade_date,
        segment_start=seg,
        open=mid,
        high=mid,
        low=mid,
        close=mid,
        volume=volume,
        buy_volume=cs_buy[upto] - cs_buy[prev],
        sell_volume=cs_sell[upto] - cs_sell[prev],
        trade_count=(upto - prev).astype(np.float64),
        event_count=np.ones(n),
        vwap=vwap,
        last_trade_ts=_last_trade_ts(trades.ts_event, book.ts_event, seg_first_ts),
        bid_px=book.bid_px,
        ask_px=book.ask_px,
        bid_sz=_f(book.bid_sz),
        ask_sz=_f(book.ask_sz),
        bid_ct=_f(book.bid_ct),
        ask_ct=_f(book.ask_ct),
        book_mask=np.ones(n, bool),
        flow_mask=np.ones(n, bool) if rows.volume_mask is None else rows.volume_mask.copy(),
        events=_events(book, np.arange(n), seg),
        book_levels=rows.book_levels or None,
        volume_mask=rows.volume_mask,
    )
