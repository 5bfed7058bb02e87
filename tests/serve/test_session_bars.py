"""serve's carried bars (foxhunt.serve.bars): fed the session's market row close by row close, they
are ``build_bars`` of that market bit for bit, while only the new records go through the bar kernel."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from foxhunt.data.bars import BarSeries, build_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.ingest import MarketData
from foxhunt.data.sessions import session_open_ns
from foxhunt.serve.bars import NoBarsYet, SessionBars, _InBars
from foxhunt.serve.buffers import Appended
from tests.factories import make_book, make_trades

S = 10**9
CFG = DataConfig(bar_seconds=10)
OPEN = session_open_ns(20260302, "America/Chicago", CFG.session_open)
HALT = session_open_ns(20260303, "America/Chicago", CFG.session_open) - 1800 * S  # inside the daily halt

# Buckets of 10 s: 0-1 book and trades; 2 no trade yet in the session before it (flow mask grows
# later); bucket 4 has trades and no book state (its book at close is bucket 3's last state, carried
# across the row close at 40 s); 7 only a state; then two records in the halt.
BOOK_T = np.array([1, 4, 12, 15, 21, 33, 36, 71]) * S + OPEN
TRADE_T = np.array([25, 41, 44, 45]) * S + OPEN
CLOSES = [OPEN + 10 * S, OPEN + 30 * S, OPEN + 40 * S, OPEN + 50 * S, OPEN + 80 * S, HALT + 10 * S]


def _whole() -> tuple:
    book = make_book(np.append(BOOK_T, HALT), np.array([0, 2, 1, -1, 3, 4, -2, 1, 0]))
    trades = make_trades(
        np.append(TRADE_T, HALT + S), [5000.25, 5000.0, 5000.5, 5001.0, 5000.0], [3, 2, 5, 1, 4], "BABAB"
    )
    return book, trades


def _prefix(before: int) -> MarketData:
    """The session's market as a row close that ``before`` ends sees it."""
    book, trades = _whole()
    b, t = book.take(book.ts_event < before), trades.take(trades.ts_event < before)
    tr = {1: t} if len(t) else {}
    return MarketData(books={1: b}, crossed={1: b.crossed()}, trades=tr, symbols={1: "ESH6"})


def _assert_same(got: BarSeries, want: BarSeries) -> None:
    for f in dataclasses.fields(want.bars):
        a, b = getattr(got.bars, f.name), getattr(want.bars, f.name)
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), f.name
    assert got.halt_dropped == want.halt_dropped and got.book_levels == want.book_levels
    assert np.array_equal(got.book_bar, want.book_bar) and np.array_equal(got.trade_bar, want.trade_bar)
    assert np.array_equal(got.book.ts_event, want.book.ts_event)
    assert np.array_equal(got.book.bid_px, want.book.bid_px, equal_nan=True)
    assert np.array_equal(got.trades.ts_event, want.trades.ts_event)
    assert np.array_equal(got.front.instrument_id, want.front.instrument_id)
    assert np.array_equal(got.front.trade_dates, want.front.trade_dates)


def test_carried_bars_are_the_batch_bars_at_every_row_close() -> None:
    carried = SessionBars(CFG)
    # A close before the first book state (an MBO stream's snapshot): the batch refuses such data, the
    # carry says no bar yet (no fault of the stream) and stays on.
    with pytest.raises(ValueError):
        build_bars(MarketData(), CFG)
    with pytest.raises(NoBarsYet):
        carried.series(MarketData())
    assert not carried.fallback
    for close in CLOSES:
        md = _prefix(close)
        _assert_same(carried.series(md), build_bars(md, CFG))
        assert not carried.fallback  # the carried path, not a rebuild, gave them
    bars = carried.series(_prefix(CLOSES[-1])).bars
    # The facts the carry must get right: bucket 4 closes on bucket 3's state; the flow mask of the
    # first bars turned True once a trade arrived after them; the halt records were dropped.
    four = int(np.flatnonzero(bars.ts_open == OPEN + 40 * S)[0])
    assert bars.event_count[four] == 0 and bars.book_mask[four] and bars.volume[four] == 8
    assert bars.mid_close[four] == bars.mid_close[four - 1]
    assert bars.flow_mask.all() and carried.halt_dropped == 2
    assert carried.bars.n == len(bars) == 6


def test_a_close_inside_a_bar_is_rebuilt_by_the_batch() -> None:
    carried = SessionBars(CFG)
    carried.series(_prefix(OPEN + 13 * S))  # bucket 1 half in: its next records would split a bar
    md = _prefix(OPEN + 50 * S)
    _assert_same(carried.series(md), build_bars(md, CFG))
    assert carried.fallback
    carried.reset()
    assert not carried.fallback
    _assert_same(carried.series(md), build_bars(md, CFG))


@pytest.mark.parametrize(
    ("chunks", "copied"),
    [
        ([[1, 1, 1], [1, 1]], False),  # none dropped
        ([[0, 0], [0, 1, 1], [1]], False),  # the first dropped (before the open)
        ([[0], [0], [1, 1]], False),
        ([[1, 1], [1, 0], [0, 0]], False),  # the last so far (the halt)
        ([[0, 1], [1, 0], [0]], False),  # both
        ([[1, 0], [1]], True),  # a drop between kept records
        ([[1, 1], [0], [0, 1]], True),
        ([[0, 1, 0, 1], [1]], True),
    ],
)
def test_records_in_bars_are_the_markets_rows_without_a_copy_while_the_drops_are_at_its_ends(
    chunks: list[list[int]], copied: bool
) -> None:
    """A session's records in bars are its market's less the dropped ones after every close; a view of
    the market's rows (no copy) while the dropped ones are the first or the last so far."""
    keep = np.array([k for c in chunks for k in c], bool)
    market = make_book(OPEN + np.arange(len(keep)) * S, np.zeros(len(keep), np.int64))
    in_bars: _InBars = _InBars(Appended)
    seen = 0
    for c in chunks:
        so_far = market.take(slice(0, seen + len(c)))
        in_bars.add(so_far, seen, np.array(c, bool))
        seen += len(c)
        got = in_bars.rows(so_far)
        assert np.array_equal(got.ts_event, so_far.ts_event[keep[:seen]])
        assert np.array_equal(got.bid_px, so_far.bid_px[keep[:seen]])
    assert (in_bars.kept is not None) is copied


@pytest.mark.parametrize("zone", ["America/Chicago", "Europe/London"])
def test_the_session_clock_dates_and_halts_as_the_pandas_functions(zone: str) -> None:
    """The remembered session span gives every timestamp the trade date and halt flag that
    ``session_dates`` and ``in_halt`` give, across the halt and both daylight-saving changes."""
    from foxhunt.data.sessions import in_halt, session_dates
    from foxhunt.serve.bars import _SessionClock

    cfg = CFG.model_copy(update={"session_timezone": zone})
    rng = np.random.default_rng(3)
    clock = _SessionClock(cfg)
    for day in ("2026-03-06", "2026-03-27", "2026-10-23", "2026-10-30"):  # Fridays before the changes
        start = int(np.datetime64(f"{day}T00:00", "ns").astype(np.int64))
        ts = np.sort(start + rng.integers(0, 4 * 86_400 * S, 4000))
        for chunk in np.array_split(ts, 200):  # a close's new records, in time order
            dates, halts = clock.dates_and_halts(chunk)
            assert np.array_equal(dates, session_dates(chunk, zone, cfg.session_open))
            assert np.array_equal(halts, in_halt(chunk, zone, cfg.session_open, cfg.session_close))
    assert clock.span is not None  # the span was taken, not every chunk sent to pandas
