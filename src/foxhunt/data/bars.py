"""Bars and snapshot rows of the continuous front-month series.

Bars (``row_unit = bar``):

* **time bars** of ``bar_seconds``, anchored at the session open (17:00 CT), so a bar never spans
  the daily halt or two sessions;
* **volume bars** of ``volume_bar_contracts``: trades are assigned whole to the bar in which they
  start (a bar can overshoot by at most one trade); a bar closes at its last trade; book states
  after a session's last complete volume bar are not part of any bar.

Only bars in which something happened (a book state or a trade) are emitted. Fields per bar:
open/high/low/close of the mid price and of the trade price (NaN when the bar has no trade),
volume, buy and sell volume by aggressor side, trade count, VWAP, event count (book states) and
the book state at the bar's close (the last state at or before it, within the session).

Book data without trade records (MBP-10 rebuilt from MBO, BBO files): time bars are built from
the book states alone (mid OHLC); in a session that no input carrying trades covers, volume, trade
prices, trade count and VWAP are 0/NaN with ``volume_mask`` and ``flow_mask`` False. Volume bars
need trades.

``data_source = ohlcv``: bars are aggregated from OHLCV records (the bar length must be a
multiple of the OHLCV interval); book fields and the mid are 0 with ``book_mask`` False, and the
aggressor split, trade count and VWAP are 0 with ``flow_mask`` False.

Book states and trades inside the daily halt are not used (counted in ``halt_dropped``): pre-open
order entry is not tradable, and each book state is a full snapshot, so the first state after the
open already shows what the halt changed.

A roll only happens at a session boundary (see :mod:`foxhunt.data.continuous`), so no bar mixes
contracts; ``Bars.instrument_id`` says which contract each bar is.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass

import numpy as np

from foxhunt.data.arrays import SIDE_ASK, SIDE_BID, BookArrays, TradeArrays, _Columns
from foxhunt.data.config import DataConfig
from foxhunt.data.continuous import FrontMonth, front_month
from foxhunt.data.ingest import MarketData, as_flags, ohlcv_settings, trade_coverage
from foxhunt.data.schemas import BarKind, DataSource
from foxhunt.data.sessions import in_halt, session_dates, session_open_ns
from foxhunt.errors import BarSpecError, DataError, setting

NS = 1_000_000_000


@dataclass(frozen=True, eq=False)
class Bars(_Columns):
    """One row per bar. Shapes: ``[n]`` unless marked ``[n, L]``."""

    ts_open: np.ndarray  # int64 ns: bar start (time bars) or first event (volume bars)
    ts_close: np.ndarray  # int64 ns: when the bar is complete and may be used
    trade_date: np.ndarray  # int64 YYYYMMDD session
    instrument_id: np.ndarray  # uint32 contract of the bar
    mid_open: np.ndarray  # float64
    mid_high: np.ndarray
    mid_low: np.ndarray
    mid_close: np.ndarray
    trade_open: np.ndarray  # float64, NaN without trades
    trade_high: np.ndarray
    trade_low: np.ndarray
    trade_close: np.ndarray
    vwap: np.ndarray  # float64, NaN without trades
    volume: np.ndarray  # int64 contracts
    buy_volume: np.ndarray  # int64, buy aggressor
    sell_volume: np.ndarray  # int64, sell aggressor
    trade_count: np.ndarray  # int64
    event_count: np.ndarray  # int64 book states in the bar
    bid_px: np.ndarray  # [n, L] float64 book at close, NaN for an empty level
    ask_px: np.ndarray  # [n, L]
    bid_sz: np.ndarray  # [n, L] int64
    ask_sz: np.ndarray  # [n, L]
    bid_ct: np.ndarray  # [n, L]
    ask_ct: np.ndarray  # [n, L]
    book_mask: np.ndarray  # bool: mid and book fields are real (False for ohlcv data, or no book yet)
    flow_mask: np.ndarray  # bool: aggressor split, trade count, vwap are real
    volume_mask: np.ndarray  # bool: volume is real (False: no input with trades covers the session)

    def starts_segment(self) -> np.ndarray:
        """[n] bool: the bar opens a new session or contract (always True for the first bar).

        A return from bar t-1 to bar t is only meaningful where this is False: it would
        otherwise span the daily halt or a roll (prices of two contracts differ by the carry).
        """
        new = np.ones(len(self.ts_open), bool)
        new[1:] = (self.trade_date[1:] != self.trade_date[:-1]) | (
            self.instrument_id[1:] != self.instrument_id[:-1]
        )
        return new


def bar_log_returns(bars: Bars, price: np.ndarray) -> np.ndarray:
    """[n] log(price_t / price_{t-1}), 0 where the bar starts a session or contract segment.

    0 is the "no signal" sentinel: a return never spans a roll or the daily halt.
    """
    out = np.zeros(len(price))
    with np.errstate(divide="ignore", invalid="ignore"):
        out[1:] = np.log(price[1:] / price[:-1])
    out[bars.starts_segment() | ~np.isfinite(out)] = 0.0
    return out


@dataclass(frozen=True)
class BarSeries:
    bars: Bars
    front: FrontMonth
    halt_dropped: int  # book states + trades inside the daily halt, not used
    # The event-level inputs behind the bars (None for ohlcv data), for features that aggregate
    # per-event quantities (order-flow imbalance) within each bar.
    book: BookArrays | None = None  # [m] continuous book states that fell into a bar
    book_bar: np.ndarray | None = None  # [m] int64 bar index of each state (non-decreasing)
    trades: TradeArrays | None = None  # [k] continuous trades that fell into a bar
    trade_bar: np.ndarray | None = None  # [k] int64 bar index of each trade
    book_levels: int = 0  # levels per side with real data (1: top of book, 0: no book)


@dataclass(frozen=True)
class SnapshotRows:
    """One row per book state of the continuous series (halt excluded)."""

    book: BookArrays
    trade_date: np.ndarray  # [n] int64
    crossed: np.ndarray  # [n] bool
    trades: TradeArrays  # the continuous series' trades
    trades_before: np.ndarray  # [n] int64: trades with ts_event <= the state's ts_event
    front: FrontMonth
    halt_dropped: int
    volume_mask: np.ndarray | None = None  # [n] bool: an input with trades covers the session
    book_levels: int = 0  # levels per side with real data (1: top of book)


def volume_known(md: MarketData, cfg: DataConfig, dates: np.ndarray, instruments: np.ndarray) -> np.ndarray:
    """[n] bool: rows whose session and contract an input carrying trades covers (a volume of 0
    there means nothing traded; elsewhere there is no trade data: book-only input)."""
    out = np.zeros(len(dates), bool)
    for iid, first, last in trade_coverage(md, cfg):
        out |= (instruments == iid) & (dates >= first) & (dates <= last)
    return out


def _continuous(parts: dict[int, object], front: FrontMonth, cfg: DataConfig, cls):
    """Rows of each instrument in the sessions where it is the front month, merged by time."""
    pieces, dates, dropped = [], [], 0
    for iid, arr in parts.items():
        ts = arr.ts_event  # type: ignore[attr-defined]
        d = session_dates(ts, cfg.session_timezone, cfg.session_open)
        halt = in_halt(ts, cfg.session_timezone, cfg.session_open, cfg.session_close)
        keep = (front.front_for(d) == iid) & ~halt
        dropped += int((halt & (front.front_for(d) == iid)).sum())
        # Copies only where rows go: one front month without a halted row (every row of a session's
        # stream in foxhunt serve, which calls this at each row close) is kept as it is.
        pieces.append(arr if keep.all() else arr.take(keep))  # type: ignore[attr-defined]
        dates.append(d[keep])
    merged = cls.concat(pieces) if len(pieces) > 1 else pieces[0]
    date = np.concatenate(dates)
    order = np.argsort(merged.ts_event, kind="stable")
    if np.array_equal(order, np.arange(len(order))):
        return merged, date, dropped
    return merged.take(order), date[order], dropped


def _open_ns(dates: np.ndarray, cfg: DataConfig) -> np.ndarray:
    uniq = np.unique(dates)
    opens = np.array([_session_open(int(d), cfg.session_timezone, cfg.session_open) for d in uniq], np.int64)
    return opens[np.searchsorted(uniq, dates)]


@functools.lru_cache(maxsize=4096)
def _session_open(date: int, zone: str, opens: dt.time) -> int:
    """``session_open_ns``, remembered: foxhunt serve asks it for the same session at every row close."""
    return session_open_ns(date, zone, opens)


def _segments(bar_of: np.ndarray, n_bars: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.arange(n_bars)
    return np.searchsorted(bar_of, ids, "left"), np.searchsorted(bar_of, ids, "right")


def _seg_reduce(ufunc: np.ufunc, values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``ufunc`` over each segment ``values[lo:hi]``; NaN for empty segments."""
    out = np.full(len(lo), np.nan)
    full = hi > lo
    if full.any() and len(values):
        out[full] = ufunc.reduceat(values, lo[full])[: full.sum()]
        # reduceat runs to the next start; cut each non-empty segment at its own end instead.
        # Segments are contiguous and ordered, so the next start equals this end except where an
        # empty bar sits between them; handle that by recomputing those few directly.
        nxt = np.append(lo[full][1:], len(values))
        fix = np.flatnonzero(nxt != hi[full])
        idx = np.flatnonzero(full)
        for k in fix:
            i = idx[k]
            out[i] = ufunc.reduce(values[lo[i] : hi[i]])
    return out


def _seg_sum(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    cs = np.concatenate([[0], np.cumsum(values, dtype=np.float64 if values.dtype.kind == "f" else np.int64)])
    return cs[hi] - cs[lo]


def _aggregate(
    book: BookArrays,
    book_bar: np.ndarray,
    book_date: np.ndarray,
    trades: TradeArrays,
    trade_bar: np.ndarray,
    ts_open: np.ndarray,
    ts_close: np.ndarray,
    bar_date: np.ndarray,
    bar_instrument: np.ndarray,
    traded: np.ndarray,
) -> Bars:
    n = len(ts_open)
    mid = book.mid()
    blo, bhi = _segments(book_bar, n)
    tlo, thi = _segments(trade_bar, n)
    has_book = bhi > blo
    # The last state at or before each bar's close, if it is in the same session.
    last = bhi - 1
    last_ok = (
        (last >= 0) & (book_date[np.clip(last, 0, None)] == bar_date) if len(book) else np.zeros(n, bool)
    )
    last_c = np.clip(last, 0, max(len(book) - 1, 0))
    close_mid = np.where(last_ok, mid[last_c] if len(book) else np.nan, np.nan)
    mid_open = np.where(
        has_book, mid[np.clip(blo, 0, max(len(book) - 1, 0))] if len(book) else np.nan, close_mid
    )
    mid_high = np.where(has_book, _seg_reduce(np.fmax, mid, blo, bhi), close_mid)
    mid_low = np.where(has_book, _seg_reduce(np.fmin, mid, blo, bhi), close_mid)
    levels = book.bid_px.shape[1]

    def at_close(a: np.ndarray, fill: float) -> np.ndarray:
        out = a[last_c] if len(book) else np.full((n, levels), fill)
        return np.where(last_ok[:, None], out, fill).astype(a.dtype)

    size = trades.size
    px = trades.price
    has_trade = thi > tlo
    tmax = max(len(trades) - 1, 0)
    volume = _seg_sum(size, tlo, thi)
    pv = _seg_sum(px * size, tlo, thi)
    return Bars(
        ts_open=ts_open,
        ts_close=ts_close,
        trade_date=bar_date,
        instrument_id=bar_instrument.astype(np.uint32),
        mid_open=mid_open,
        mid_high=mid_high,
        mid_low=mid_low,
        mid_close=close_mid,
        trade_open=np.where(has_trade, px[np.clip(tlo, 0, tmax)] if len(trades) else np.nan, np.nan),
        trade_high=np.where(has_trade, _seg_reduce(np.maximum, px, tlo, thi), np.nan),
        trade_low=np.where(has_trade, _seg_reduce(np.minimum, px, tlo, thi), np.nan),
        trade_close=np.where(has_trade, px[np.clip(thi - 1, 0, tmax)] if len(trades) else np.nan, np.nan),
        vwap=np.where(volume > 0, pv / np.maximum(volume, 1), np.nan),
        volume=volume.astype(np.int64),
        buy_volume=_seg_sum(np.where(trades.side == SIDE_BID, size, 0), tlo, thi).astype(np.int64),
        sell_volume=_seg_sum(np.where(trades.side == SIDE_ASK, size, 0), tlo, thi).astype(np.int64),
        trade_count=(thi - tlo).astype(np.int64),
        event_count=(bhi - blo).astype(np.int64),
        bid_px=at_close(book.bid_px, np.nan),
        ask_px=at_close(book.ask_px, np.nan),
        bid_sz=at_close(book.bid_sz, 0),
        ask_sz=at_close(book.ask_sz, 0),
        bid_ct=at_close(book.bid_ct, 0),
        ask_ct=at_close(book.ask_ct, 0),
        book_mask=last_ok.copy(),  # False until the session has a book state
        flow_mask=traded,
        volume_mask=traded.copy(),
    )


def _empty_trades() -> TradeArrays:
    z = np.zeros(0, np.int64)
    return TradeArrays(
        z,
        z,
        z.astype(np.uint32),
        z.astype(np.float64),
        z,
        z.astype(np.uint8),
        z.astype(np.uint8),
        z.astype(np.uint32),
    )


def time_bar_index(
    book_ts: np.ndarray, book_date: np.ndarray, trade_ts: np.ndarray, trade_date: np.ndarray, cfg: DataConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Time bars of book states and trades (continuous, halt excluded): (book_bar, trade_bar, bar_date,
    ts_open, ts_close), one bar per bucket in which something happened. A bar depends only on its own
    bucket, so ``foxhunt serve`` runs this on the records of each closed row alone (foxhunt.serve.bars)."""
    all_dates = np.unique(np.concatenate([book_date, trade_date]))
    bar_ns = cfg.bar_seconds * NS
    # Key = (session index, bucket since the session open): ordered like time.
    span = np.int64(2 * 86_400 * NS // bar_ns + 1)

    def keys(ts: np.ndarray, dates: np.ndarray) -> np.ndarray:
        since_open = (ts - _open_ns(dates, cfg)) // bar_ns
        return np.searchsorted(all_dates, dates).astype(np.int64) * span + since_open

    kb, kt = keys(book_ts, book_date), keys(trade_ts, trade_date)
    bar_keys = np.union1d(kb, kt)
    book_bar, trade_bar = np.searchsorted(bar_keys, kb), np.searchsorted(bar_keys, kt)
    bar_date = all_dates[bar_keys // span]
    ts_open = _open_ns(bar_date, cfg) + (bar_keys % span) * bar_ns
    return book_bar, trade_bar, bar_date, ts_open, ts_open + bar_ns


def _book_bars(md: MarketData, cfg: DataConfig, front: FrontMonth) -> BarSeries:
    book, book_date, dropped_b = _continuous(md.books, front, cfg, BookArrays)
    if md.trades:
        trades, trade_date, dropped_t = _continuous(md.trades, front, cfg, TradeArrays)
    else:
        trades, trade_date, dropped_t = _empty_trades(), np.zeros(0, np.int64), 0
    all_dates = np.unique(np.concatenate([book_date, trade_date]))
    if cfg.bar_kind is BarKind.VOLUME and not len(trades):
        raise BarSpecError(
            "data.bar_kind",
            "volume bars need trades and the book data has no trade records",
            f"pass {setting(f'data.bar_kind={BarKind.TIME.value}')} (time bars from the book states) "
            "or add trades files",
        )
    if cfg.bar_kind is BarKind.TIME:
        book_bar, trade_bar, bar_date, ts_open, ts_close = time_bar_index(
            book.ts_event, book_date, trades.ts_event, trade_date, cfg
        )
    else:
        v = cfg.volume_bar_contracts
        ends, end_dates, trade_bar = [], [], np.zeros(len(trades), np.int64)
        n_done = 0
        for d in all_dates:
            sel = np.flatnonzero(trade_date == d)
            if not len(sel):
                continue
            size = trades.size[sel]
            local = (np.cumsum(size) - size) // v  # bar in which each trade starts
            # Every bar but the session's last is complete; the last only if it reached v.
            complete = (local < local[-1]) | (int(size.sum()) >= (int(local[-1]) + 1) * v)
            # A trade larger than v can skip bar numbers: renumber densely.
            uniq, dense = np.unique(local[complete], return_inverse=True)
            trade_bar[sel[~complete]] = -1
            trade_bar[sel[complete]] = n_done + dense
            last_in_bar = np.searchsorted(local[complete], uniq, "right") - 1
            ends.extend(trades.ts_event[sel[complete]][last_in_bar].tolist())
            end_dates.extend([d] * len(uniq))
            n_done += len(uniq)
        keep_t = trade_bar >= 0
        trades, trade_bar, trade_date = trades.take(keep_t), trade_bar[keep_t], trade_date[keep_t]
        bar_end = np.array(ends, np.int64)
        bar_date = np.array(end_dates, np.int64)
        cand = np.searchsorted(bar_end, book.ts_event, "left")
        ok = cand < len(bar_end)
        ok[ok] = bar_date[cand[ok]] == book_date[ok]
        book, book_date, book_bar = book.take(ok), book_date[ok], cand[ok]
        tlo, _ = _segments(trade_bar, len(bar_end))
        blo, bhi = _segments(book_bar, len(bar_end))
        first_t = trades.ts_event[np.clip(tlo, 0, max(len(trades) - 1, 0))]
        first_b = np.where(bhi > blo, book.ts_event[np.clip(blo, 0, max(len(book) - 1, 0))], first_t)
        ts_open, ts_close = np.minimum(first_t, first_b), bar_end
    bar_instrument = front.front_for(bar_date)
    bars = _aggregate(
        book,
        book_bar,
        book_date,
        trades,
        trade_bar,
        ts_open,
        ts_close,
        bar_date,
        bar_instrument,
        volume_known(md, cfg, bar_date, bar_instrument),
    )
    return BarSeries(
        bars=bars,
        front=front,
        halt_dropped=dropped_b + dropped_t,
        book=book,
        book_bar=book_bar.astype(np.int64),
        trades=trades,
        trade_bar=trade_bar.astype(np.int64),
        book_levels=md.book_levels,
    )


def _ohlcv_bars(md: MarketData, cfg: DataConfig, front: FrontMonth) -> BarSeries:
    from foxhunt.data.arrays import OhlcvArrays

    bar_ns = cfg.bar_seconds * NS
    src_ns = md.ohlcv_bar_ns
    sets = ohlcv_settings(src_ns, cfg)  # every setting at once, so one round trip fixes them
    if sets:
        raise BarSpecError(
            "data.bar_kind" if cfg.bar_kind is not BarKind.TIME else "data.bar_seconds",
            f"{'volume bars' if cfg.bar_kind is BarKind.VOLUME else f'{cfg.bar_seconds} s bars'} cannot be "
            f"built from {src_ns // NS} s OHLCV records (time bars of a multiple of {src_ns // NS} s can)",
            f"pass {as_flags(sets)}",
        )
    src, dates, dropped = _continuous(md.ohlcv, front, cfg, OhlcvArrays)
    all_dates = np.unique(dates)
    span = np.int64(2 * 86_400 * NS // bar_ns + 1)
    k = (
        np.searchsorted(all_dates, dates).astype(np.int64) * span
        + (src.ts_event - _open_ns(dates, cfg)) // bar_ns
    )
    bar_keys = np.unique(k)
    b = np.searchsorted(bar_keys, k)
    n = len(bar_keys)
    lo, hi = _segments(b, n)
    bar_date = all_dates[bar_keys // span]
    ts_open = _open_ns(bar_date, cfg) + (bar_keys % span) * bar_ns
    zeros_l = np.zeros((n, cfg.levels))
    zf = np.zeros(n)
    zi = np.zeros(n, np.int64)
    bars = Bars(
        ts_open=ts_open,
        # An OHLCV record is stamped with its open; it is only known at open + interval.
        ts_close=ts_open + bar_ns,
        trade_date=bar_date,
        instrument_id=front.front_for(bar_date),
        mid_open=zf,
        mid_high=zf,
        mid_low=zf,
        mid_close=zf,
        trade_open=src.open[lo],
        trade_high=_seg_reduce(np.maximum, src.high, lo, hi),
        trade_low=_seg_reduce(np.minimum, src.low, lo, hi),
        trade_close=src.close[hi - 1],
        vwap=zf,
        volume=_seg_sum(src.volume, lo, hi).astype(np.int64),
        buy_volume=zi,
        sell_volume=zi,
        trade_count=zi,
        event_count=(hi - lo).astype(np.int64),
        bid_px=zeros_l,
        ask_px=zeros_l,
        bid_sz=zeros_l.astype(np.int64),
        ask_sz=zeros_l.astype(np.int64),
        bid_ct=zeros_l.astype(np.int64),
        ask_ct=zeros_l.astype(np.int64),
        book_mask=np.zeros(n, bool),
        flow_mask=np.zeros(n, bool),
        volume_mask=np.ones(n, bool),
    )
    return BarSeries(bars=bars, front=front, halt_dropped=dropped)


def _no_rows(md: MarketData, what: str, dropped: int) -> DataError:
    where = md.files[0].path if len(md.files) == 1 else f"{len(md.files)} input files"
    return DataError(
        where,
        f"no {what}: every one of the {dropped:,} book states and trades of the front-month series lies "
        "in the daily halt (data.session_close .. data.session_open)",
        "check data.session_timezone, data.session_open and data.session_close for this market",
    )


def build_bars(md: MarketData, cfg: DataConfig) -> BarSeries:
    """Bars of the continuous front-month series for ``cfg.data_source``."""
    front = front_month(md, cfg)
    if cfg.data_source is DataSource.OHLCV:
        series = _ohlcv_bars(md, cfg, front)
    else:
        series = _book_bars(md, cfg, front)
    if not len(series.bars):
        raise _no_rows(md, "bars", series.halt_dropped)
    return series


def build_snapshots(md: MarketData, cfg: DataConfig) -> SnapshotRows:
    """Snapshot rows (one per book state) of the continuous front-month series."""
    if cfg.data_source is DataSource.OHLCV:
        raise BarSpecError(
            "data.row_unit",
            "snapshot rows need book data and data_source is 'ohlcv'",
            f"pass {as_flags(ohlcv_settings(md.ohlcv_bar_ns, cfg))} for OHLCV bars, or "
            f"{setting(f'data.data_source={DataSource.MBP10.value}')} with book files",
        )
    front = front_month(md, cfg)
    book, date, dropped = _continuous(md.books, front, cfg, BookArrays)
    # Recomputed on the selected rows: cheap, and cannot drift from the book it describes.
    crossed = book.crossed()
    if md.trades:
        trades, _, dropped_t = _continuous(md.trades, front, cfg, TradeArrays)
    else:
        trades, dropped_t = _empty_trades(), 0
    if not len(book):
        raise _no_rows(md, "snapshot rows", dropped + dropped_t)
    before = np.searchsorted(trades.ts_event, book.ts_event, "right").astype(np.int64)
    return SnapshotRows(
        book=book,
        trade_date=date,
        crossed=crossed,
        trades=trades,
        trades_before=before,
        front=front,
        halt_dropped=dropped + dropped_t,
        volume_mask=volume_known(md, cfg, date, book.instrument_id),
        book_levels=md.book_levels,
    )
