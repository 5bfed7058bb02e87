"""Exchange trading sessions: which session a timestamp belongs to, and the daily halt.

CME Globex equity futures trade from 17:00 to 16:00 Chicago time the next day; 16:00-17:00 is
the daily halt. A session is named by its *trade date*, the local date on which it closes: the
session that opens Sunday 17:00 CT is Monday's. With ``open`` at 17:00 the trade date is the local
date of ``t + (24h - 17:00)`` = ``t + 7h``, which handles daylight-saving changes because the shift
is applied in local time.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd


def _local(ts_ns: np.ndarray, zone: str) -> pd.DatetimeIndex:
    return pd.DatetimeIndex(np.asarray(ts_ns, dtype="datetime64[ns]")).tz_localize("UTC").tz_convert(zone)


def _seconds(t: dt.time) -> int:
    return t.hour * 3600 + t.minute * 60 + t.second


def session_dates(ts_ns: np.ndarray, zone: str, session_open: dt.time) -> np.ndarray:
    """[n] int64 trade date ``YYYYMMDD`` of each timestamp's session."""
    if len(ts_ns) == 0:
        return np.zeros(0, np.int64)
    shift = (
        pd.Timedelta(seconds=86_400 - _seconds(session_open)) if _seconds(session_open) else pd.Timedelta(0)
    )
    local = _local(ts_ns, zone).tz_localize(None) + shift
    return (local.year.to_numpy() * 10_000 + local.month.to_numpy() * 100 + local.day.to_numpy()).astype(
        np.int64
    )


def in_halt(ts_ns: np.ndarray, zone: str, session_open: dt.time, session_close: dt.time) -> np.ndarray:
    """[n] bool: the timestamp falls in the daily halt ``[close, open)`` local time."""
    if len(ts_ns) == 0:
        return np.zeros(0, bool)
    local = _local(ts_ns, zone)
    sec = local.hour.to_numpy() * 3600 + local.minute.to_numpy() * 60 + local.second.to_numpy()
    lo, hi = _seconds(session_close), _seconds(session_open)
    if lo <= hi:
        return (sec >= lo) & (sec < hi)
    return (sec >= lo) | (sec < hi)


def session_open_ns(trade_date: int, zone: str, session_open: dt.time) -> int:
    """UTC ns of the open of the session with trade date ``YYYYMMDD``."""
    day = dt.date(trade_date // 10_000, trade_date // 100 % 100, trade_date % 100)
    start_day = day - dt.timedelta(days=1) if _seconds(session_open) else day
    local = pd.Timestamp(dt.datetime.combine(start_day, session_open)).tz_localize(zone)
    return int(local.tz_convert("UTC").value)


def iso_utc(ts_ns: int, unit: str = "ns") -> str:
    """ISO-8601 UTC text of a ns timestamp, to ``unit`` (``"ns"``, ``"s"``, ...), with a ``Z``."""
    return str(np.datetime_as_string(np.datetime64(int(ts_ns), "ns"), unit=unit)) + "Z"
