"""Session dates and the daily halt, hand-checked against CME hours (17:00-16:00 CT)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd

from foxhunt.data.sessions import in_halt, session_dates, session_open_ns

CT = "America/Chicago"
OPEN, CLOSE = dt.time(17), dt.time(16)


def _ns(s: str) -> int:
    return int(pd.Timestamp(s).value)


def test_session_dates_and_halt_in_winter_and_summer() -> None:
    ts = np.array(
        [
            _ns("2023-12-25T21:59:59Z"),  # 15:59:59 CST Monday -> Monday's session, trading
            _ns("2023-12-25T22:30:00Z"),  # 16:30 CST -> halt
            _ns("2023-12-25T23:00:00Z"),  # 17:00 CST -> Tuesday's session opens
            _ns("2024-07-01T21:00:00Z"),  # 16:00 CDT -> halt
            _ns("2024-07-01T22:00:00Z"),  # 17:00 CDT -> Tuesday 2024-07-02
        ]
    )
    assert session_dates(ts, CT, OPEN).tolist() == [
        20231225,
        20231225,
        20231226,
        20240701,
        20240702,
    ]
    assert in_halt(ts, CT, OPEN, CLOSE).tolist() == [False, True, False, True, False]


def test_session_open_ns() -> None:
    assert session_open_ns(20231226, CT, OPEN) == _ns("2023-12-25T23:00:00Z")
    assert session_open_ns(20240702, CT, OPEN) == _ns("2024-07-01T22:00:00Z")
