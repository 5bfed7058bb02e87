"""The ``[data]`` config section: data source, row unit, bars, sessions, contract.

Kept in its own module so that the data and feature stages can import it without the root model.
"""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator

from foxhunt.config.base import Frozen
from foxhunt.data.schemas import BarKind, CrossedPolicy, DataSource, RollRule, RowUnit


class DataConfig(Frozen):
    data_source: DataSource = Field(
        DataSource.MBP10,
        description="mbp10: 10-level book (MBP-10 or MBO rebuilt) plus trades; ohlcv: OHLCV bars only.",
    )
    row_unit: RowUnit = Field(RowUnit.BAR, description="bar: one row per bar; snapshot: one per book state.")
    bar_kind: BarKind = Field(BarKind.TIME, description="time bars (bar_seconds) or volume bars.")
    bar_seconds: int = Field(30, ge=1, le=86_400, description="Length of a time bar in seconds.")
    volume_bar_contracts: int = Field(
        500, ge=1, description="Traded contracts per volume bar (bar_kind = volume)."
    )
    levels: int = Field(10, ge=1, le=10, description="Book levels kept per side.")
    crossed_policy: CrossedPolicy = Field(
        CrossedPolicy.FLAG,
        description="Crossed/locked end-of-event book states: flag (keep, mark) or drop; both counted.",
    )
    max_crossed_share: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="Refuse a file whose share of crossed/locked states exceeds this (corrupt book).",
    )
    roll_rule: RollRule = Field(
        RollRule.PRIOR_SESSION_VOLUME,
        description="Front-month choice per session: prior_session_volume (causal) or same_session_volume.",
    )
    session_timezone: str = Field("America/Chicago", description="Exchange time zone of the session clock.")
    session_open: dt.time = Field(
        dt.time(17, 0), description="Session open, exchange local time (CME: 17:00 CT)."
    )
    session_close: dt.time = Field(
        dt.time(16, 0),
        description="Session close, exchange local time; the daily halt runs close..open.",
    )
    tick_size: float = Field(
        0.25,
        gt=0,
        description="Tick of hand-built markets and of the leak guard's recomputation; a feature cache "
        "counts spreads in its data's own instrument tick ([instrument]; foxhunt.data.instrument).",
    )

    @field_validator("session_timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown IANA time zone {value!r} (e.g. America/Chicago)") from exc
        return value
