"""Bars per year: how many rows a year of trading holds, from the instrument's session calendar.

Annualised Sharpe, Sortino and return scale per-row figures by ``B`` = bars per year (backtest
metrics). ``B`` is a property of the contract and the row unit, not of the file: a file of part
sessions must not inflate or deflate every Sharpe. With ``S`` the instrument's session seconds per
day (23 h for CME Globex products) and ``D`` its trading days per year (252):

* **time bars** of ``bar_seconds``: ``B = S / bar_seconds x D`` (ES, 60 s bars:
  82,800 / 60 x 252 = 347,760);
* **snapshot rows and volume bars** have no fixed length, so their rate is measured: ``rate`` =
  rows per hour over the time the data covers (per segment, first row to last row, so halts and
  gaps between sessions or contracts do not count; a segment of ``k`` rows spans ``k - 1``
  intervals) and ``B = rate x S / 3600 x D``. A file of two sessions annualises at its own
  activity, not at its rows-per-session x 252. The rate is measured over at least one session
  (:data:`MIN_SESSION_SHARE` of its hours, first row to last): from less, an hour's activity would be
  extrapolated to a year (one holiday hour of ES MBO gave 214 M snapshot rows a year), so the
  annualisation is refused with one line (:class:`NoRowRateError`) naming the hours covered and
  the fix, rather than a wild number.

Every backtest states ``B`` and, as ``annualisation``, the sentence of how it was obtained.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from foxhunt.data.schemas import BarKind, RowUnit
from foxhunt.domain.instrument import Instrument
from foxhunt.errors import DataError, setting

_NS_PER_HOUR = 3_600_000_000_000


class Annualisation(NamedTuple):
    bars_per_year: float
    text: str  # how bars_per_year was obtained, for metrics.json and the report


def time_bars_per_year(bar_seconds: float, instrument: Instrument) -> float:
    """``session seconds / bar_seconds x trading days``."""
    if bar_seconds <= 0:
        raise ValueError(f"bar_seconds must be positive, got {bar_seconds}")
    return instrument.session_seconds / bar_seconds * instrument.trading_days


class NoRowRateError(DataError, ValueError):
    """Rows without a fixed length that cover no time: nothing to annualise their Sharpe with."""


_TIME_BARS = f"use time bars ({setting('data.row_unit=bar', 'data.bar_kind=time')}) or more data"

MIN_SESSION_SHARE = 0.9
"""Share of one session's hours the rows must cover for a measured row rate: a whole session's rows
span a little less than its hours (first to last row; quiet minutes at the open and the close)."""


def _segment_spans(ts_ns: np.ndarray, segment_start: np.ndarray) -> tuple[np.ndarray, int]:
    """``(last - first row time per segment [ns], segments)`` of non-empty rows."""
    ts = np.asarray(ts_ns, dtype=np.int64)
    start = np.asarray(segment_start, dtype=bool).copy()
    start[0] = True
    seg = np.cumsum(start) - 1  # [n] segment index
    n_seg = int(seg[-1]) + 1
    first = np.full(n_seg, np.iinfo(np.int64).max)
    last = np.full(n_seg, np.iinfo(np.int64).min)
    np.minimum.at(first, seg, ts)
    np.maximum.at(last, seg, ts)
    return last - first, n_seg


def covered_hours(ts_ns: np.ndarray, segment_start: np.ndarray) -> float:
    """Hours the rows cover: the sum over segments of first to last row (0 without rows)."""
    if len(ts_ns) == 0:
        return 0.0
    return float(np.sum(_segment_spans(ts_ns, segment_start)[0])) / _NS_PER_HOUR


def observed_rows_per_hour(ts_ns: np.ndarray, segment_start: np.ndarray) -> float:
    """Rows per hour over the time the segments cover: ``sum(k_s - 1) / sum(last_s - first_s)``.

    ``ts_ns`` [n] int64 row times, ``segment_start`` [n] bool (the first row always starts one).
    Raises :class:`NoRowRateError` (a ValueError too) when the rows cover no time (one row per
    segment, or equal timestamps): the CLI prints it as one line.
    """
    ts = np.asarray(ts_ns, dtype=np.int64)
    n = len(ts)
    if n == 0:
        raise NoRowRateError("data.row_unit", "no rows to measure a row rate from", _TIME_BARS)
    spans, n_seg = _segment_spans(ts, segment_start)
    covered_ns = float(np.sum(spans))
    intervals = n - n_seg
    if covered_ns <= 0 or intervals <= 0:
        raise NoRowRateError(
            "data.row_unit",
            f"{n} rows in {n_seg} segments cover no time: no row rate to annualise with",
            _TIME_BARS,
        )
    return intervals / (covered_ns / _NS_PER_HOUR)


def annualisation(
    row_unit: RowUnit,
    bar_kind: BarKind,
    bar_seconds: float,
    ts_ns: np.ndarray,
    segment_start: np.ndarray,
    instrument: Instrument,
) -> Annualisation:
    """Bars per year of rows of ``row_unit`` / ``bar_kind`` of ``instrument`` (module docstring)."""
    hours, days = instrument.session_hours, instrument.trading_days
    calendar = f"{instrument.symbol} sessions of {hours:g} h x {days} trading days"
    if row_unit is RowUnit.BAR and bar_kind is BarKind.TIME:
        bpy = time_bars_per_year(bar_seconds, instrument)
        return Annualisation(bpy, f"{bar_seconds:g}-second time bars: {calendar} / {bar_seconds:g} s")
    what = "snapshot rows" if row_unit is RowUnit.SNAPSHOT else "volume bars"
    rate = observed_rows_per_hour(ts_ns, segment_start)
    covered = covered_hours(ts_ns, segment_start)
    if covered < MIN_SESSION_SHARE * hours:
        raise NoRowRateError(
            "data.row_unit",
            f"the {what} cover {covered:.3g} h (first to last row of each session), less than one "
            f"{hours:g}-h {instrument.symbol} session: their rate ({rate:,.0f} rows per hour) would be "
            "extrapolated to a year, so no annualised figure is given",
            f"{_TIME_BARS} (at least one whole session)",
        )
    bpy = rate * hours * days
    return Annualisation(
        bpy,
        f"{what} at the observed {rate:,.1f} rows per hour of the data's sessions (first to last row "
        f"of each) x {calendar}",
    )
