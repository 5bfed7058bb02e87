"""Bars per year from the instrument's session calendar, checked against numbers worked by hand.

Finding: bars per year were rows-per-session-in-this-file x 252, so a file of part sessions
inflated or deflated every Sharpe (ES 2020 minute bars: 179,550 instead of 347,760, Sharpe x0.72),
and snapshot rows were annualised at rows-per-session of a 2-hour file.
"""

from __future__ import annotations

import numpy as np
import pytest

from foxhunt.backtest.annualise import (
    NoRowRateError,
    annualisation,
    covered_hours,
    observed_rows_per_hour,
    time_bars_per_year,
)
from foxhunt.data.schemas import BarKind, RowUnit
from foxhunt.domain.config import InstrumentConfig
from foxhunt.domain.instrument import product_instrument, resolve_instrument

ES = product_instrument("ES")  # 23 h sessions, 252 days
HOUR = 3_600_000_000_000


def hours(*h: float) -> np.ndarray:
    return (np.asarray(h) * HOUR).astype(np.int64)


def test_time_bars_from_the_session_calendar() -> None:
    # 23 h x 3600 s / 60 s = 1,380 bars a session x 252 = 347,760; 30 s bars: 695,520
    assert time_bars_per_year(60, ES) == 347_760.0
    assert time_bars_per_year(30, ES) == 695_520.0
    # a 6.5-hour session of 300 s bars over 250 days: 78 x 250 = 19,500
    day = resolve_instrument(["ESH4"], overrides=InstrumentConfig(session_hours=6.5, trading_days=250))
    assert time_bars_per_year(300, day) == 19_500.0


def test_time_bars_do_not_depend_on_how_much_of_a_session_the_file_holds() -> None:
    """The old rule gave a file of 2 hours of one session 120 x 252 = 30,240 one-minute bars a year."""
    two_hours = hours(*np.arange(120) / 60)
    got = annualisation(RowUnit.BAR, BarKind.TIME, 60, two_hours, np.zeros(120, bool), ES)
    assert got.bars_per_year == 347_760.0
    assert got.text == "60-second time bars: ES sessions of 23 h x 252 trading days / 60 s"


def test_snapshot_rows_at_the_observed_rate() -> None:
    # segment A: rows at 0, 5, 10, 20 h (3 intervals over 20 h); segment B: 30, 32 h (1 over 2 h)
    # rate = 4 / 22 rows per hour; x 23 h x 252 = 1,053.8 (the 8 h halt does not count)
    ts = hours(0, 5, 10, 20, 30, 32)
    seg = np.array([True, False, False, False, True, False])
    assert observed_rows_per_hour(ts, seg) == pytest.approx(4 / 22, rel=1e-12)
    got = annualisation(RowUnit.SNAPSHOT, BarKind.TIME, 30, ts, seg, ES)
    assert got.bars_per_year == pytest.approx(4 / 22 * 23 * 252, rel=1e-12)
    assert got.text.startswith("snapshot rows at the observed 0.2 rows per hour")
    # one row per half hour over 21 h or over 46 h: 2 rows per hour either way (11,592), where
    # rows-per-session x 252 gave 10,836 and 23,436
    for n in (43, 93):
        ts, seg = hours(*np.arange(n) / 2), np.arange(n) == 0
        got = annualisation(RowUnit.SNAPSHOT, BarKind.TIME, 30, ts, seg, ES)
        assert got.bars_per_year == pytest.approx(11_592.0, rel=1e-12)


def test_less_than_a_session_is_not_extrapolated_to_a_year() -> None:
    # One holiday hour of MBO snapshot rows (ESH4, 2023-12-25) was annualised at 214 M rows a year:
    # its rate x 23 h x 252. Rows over less than one session (90% of its hours) are refused.
    ts = hours(*np.arange(37_000) / 37_000)
    seg = np.arange(37_000) == 0
    with pytest.raises(NoRowRateError, match=r"cover 1 h .*less than one 23-h ES session") as err:
        annualisation(RowUnit.SNAPSHOT, BarKind.TIME, 30, ts, seg, ES)
    assert "no annualised figure" in str(err.value) and "at least one whole session" in str(err.value)
    with pytest.raises(NoRowRateError, match="less than one 23-h ES session"):  # volume bars alike
        annualisation(RowUnit.BAR, BarKind.VOLUME, 30, hours(0, 10, 20), np.array([True, False, False]), ES)
    three = np.array([True, False, False])
    got = annualisation(RowUnit.BAR, BarKind.VOLUME, 30, hours(0, 10.5, 21), three, ES)
    assert got.bars_per_year == pytest.approx(2 / 21 * 23 * 252, rel=1e-12)  # 21 h: 91% of a session
    assert covered_hours(hours(0, 1, 5, 7), np.array([True, False, True, False])) == 3.0


def test_volume_bars_use_the_observed_rate_too() -> None:
    # 3 bars over 21 h: 2 intervals per 21 hours x 23 x 252 = 552
    seg = np.array([True, False, False])
    got = annualisation(RowUnit.BAR, BarKind.VOLUME, 30, hours(0, 10.5, 21), seg, ES)
    assert got.bars_per_year == pytest.approx(552.0, rel=1e-12) and got.text.startswith("volume bars")


def test_rows_covering_no_time_are_refused() -> None:
    with pytest.raises(ValueError, match="cover no time"):
        observed_rows_per_hour(hours(1, 1, 1), np.array([True, False, False]))
    with pytest.raises(ValueError, match="cover no time"):
        observed_rows_per_hour(hours(1, 2), np.array([True, True]))  # one row per segment
