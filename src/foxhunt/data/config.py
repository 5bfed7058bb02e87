"""The data stage's config sections: ``[data]`` (the source, row unit, bars, sessions) and
``[synth]`` (the synthetic ES market of :mod:`foxhunt.data.synth`, a data source of its own).

As every stage's sections do, they live beside the stage's code (docs/design.md §9): the data and
feature stages import them from here, and :mod:`foxhunt.config.models` composes them into the root.

The synthetic market's rates are intensities in the simulator's *business time*; only their ratios
matter, because the event times of a session are rescaled to span its wall-clock hours (see the
simulator's docstring for the equations each field enters). With the defaults, about 3% of book
updates move the mid, about 10% are trades, the spread is one tick in about 95% of states, and the
touch holds about 18 orders (about 130 contracts), the deeper levels about 30 orders (about 220
contracts).
"""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator

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
        description="Refuse a file whose share of crossed/locked states outside the daily halt exceeds this "
        "(a corrupt book; a pre-open auction's indicative book crosses by design and is not counted).",
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
        "counts spreads in its data's own instrument tick ([instrument]; foxhunt.domain.instrument).",
    )

    @field_validator("session_timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown IANA time zone {value!r} (e.g. America/Chicago)") from exc
        return value


# --- [synth]: the synthetic market ---------------------------------------------------------------------

SESSION_HOURS = 23.0  # CME Globex: 17:00 CT to 16:00 CT the next day
BOOK_LEVELS = 10  # MBP-10
MAX_TARGET_ORDERS = 120  # mean orders per level the simulator's queues (256 slots) can hold
# The simulator's manifest beside the market's files (foxhunt.data.synth writes it). Named here, not in
# .synth, so that asking "is this market synthetic?" (foxhunt.backtest.reference.planted_column, run on
# real data too) never imports the simulator, whose eager-signature kernels compile on import (~10 s
# on a cold numba cache).
MANIFEST_NAME = "synth.json"
MOMENTUM_HORIZON_MOVES = 100  # the momentum carrier's default horizon, in mid changes
# At alpha >= 1/2 the momentum carrier feeds itself (E[next sign | M] = 2 alpha M >= M): a trend, once
# started, never decays. Below it the carrier reverts to 0 at rate (1 - 2 alpha) / K a mid change.
MAX_MOMENTUM_ALPHA = 0.5


class PlantedSignal(StrEnum):
    """Where the synthetic market plants its edge (the carrier ``S`` of P(up move) = 1/2 + alpha S).

    Three feature families and horizons, so an agent tuned on one market is checked on another; each
    has its reference rule (:mod:`foxhunt.backtest.reference`)."""

    IMBALANCE = "imbalance"
    """S = EMA over ``alpha_horizon_events`` book events of the level-1 imbalance (the book family)."""
    TRADE_FLOW = "trade_flow"
    """S = EMA over the last ``flow_horizon_trades`` market orders of their aggressor sign (+1 buy,
    -1 sell): the order-flow family, a horizon counted in trades."""
    MOMENTUM = "momentum"
    """S = EMA over the last ``momentum_horizon_moves`` changes of the mid of their sign (+1 up, -1
    down): the price's own recent direction persists (momentum across bars, seen by the market
    family's trailing returns), a horizon counted in mid changes."""


class RegimeConfig(Frozen):
    """One state of the calm/volatile Markov chain: multipliers of the base intensities."""

    activity: float = Field(
        1.0, gt=0, le=100, description="Events per unit of session time, relative to the calm state."
    )
    move_mult: float = Field(
        1.0, gt=0, le=100, description="Multiplier of move_rate (price moves per unit business time)."
    )
    gap_prob: float = Field(
        0.03, ge=0, le=1, description="Chance that a price move leaves a two-tick spread behind."
    )
    cancel_mult: float = Field(1.0, gt=0, le=100, description="Multiplier of cancel_rate.")
    market_mult: float = Field(1.0, ge=0, le=100, description="Multiplier of market_rate.")
    depth_mult: float = Field(
        1.0, gt=0, le=3, description="Multiplier of the target order count of every level."
    )
    mean_spell_minutes: float = Field(
        90.0, gt=0, le=100_000, description="Mean time spent in this state before switching (minutes)."
    )


def _calm() -> RegimeConfig:
    return RegimeConfig()


def _volatile() -> RegimeConfig:
    return RegimeConfig(
        activity=2.5,
        move_mult=2.5,
        gap_prob=0.35,
        cancel_mult=1.6,
        market_mult=2.0,
        depth_mult=0.6,
        mean_spell_minutes=20.0,
    )


# (hours since the 17:00 CT open, relative event rate from then on): Asia is quiet, Europe busier,
# the US cash open (08:30 CT = 15.5 h) and close (15:00 CT = 22 h) busiest.
DEFAULT_ACTIVITY_PROFILE: tuple[tuple[float, float], ...] = (
    (0.0, 1.2),  # 17:00 reopen
    (1.0, 0.5),  # 18:00 Asia
    (9.0, 1.0),  # 02:00 Europe
    (14.0, 1.6),  # 07:00 US pre-open (07:30 data)
    (15.5, 6.0),  # 08:30 cash open
    (16.5, 3.0),  # 09:30 US morning
    (21.0, 4.0),  # 14:00 afternoon
    (22.0, 6.0),  # 15:00 cash close
    (22.25, 1.0),  # 15:15-16:00 post-close
)


class SynthConfig(Frozen):
    """The synthetic ES limit-order-book market: sessions, planted alpha, book and flow model."""

    # --- run ----------------------------------------------------------------------------------
    seed: int = Field(0, ge=0, le=2**63 - 1, description="Seed of every random draw (same seed, same bytes).")
    sessions: int = Field(
        1, ge=1, le=10_000, description="Number of trading sessions (weekdays) to simulate."
    )
    events_per_session: int = Field(
        1_000_000, ge=1_000, le=100_000_000, description="Book updates (MBP-10 rows) per session."
    )
    start_date: dt.date = Field(
        dt.date(2026, 3, 2), description="Trade date of the first session (a weekday, ISO YYYY-MM-DD)."
    )
    # --- planted alpha ------------------------------------------------------------------------
    alpha: float = Field(
        0.0,
        ge=0,
        le=20,
        description="Planted signal strength: P(up move) = clip(1/2 + alpha*S, 0.02, 0.98); 0 = none.",
    )
    alpha_horizon_events: int = Field(
        50,
        ge=2,
        le=100_000,
        description="Rows H of the EMA S of the level-1 imbalance that carries the alpha (its horizon).",
    )
    signal: PlantedSignal = Field(
        PlantedSignal.IMBALANCE,
        description="Carrier of the planted alpha: imbalance (book), trade_flow (market-order signs; "
        "stronger per unit of alpha: the smoke market's edge of alpha 4 on the imbalance is alpha 1 here) "
        "or momentum (the signs of the mid's own changes; alpha below 0.5).",
    )
    flow_horizon_trades: int = Field(
        200,
        ge=2,
        le=100_000,
        description="Market orders N of the EMA of aggressor signs that carries the trade_flow alpha.",
    )
    momentum_horizon_moves: int = Field(
        MOMENTUM_HORIZON_MOVES,
        ge=2,
        le=100_000,
        description="Mid changes K of the EMA of their signs that carries the momentum alpha.",
    )
    # --- instrument ---------------------------------------------------------------------------
    symbol: str = Field(
        "ESZ6", pattern=r"^[A-Za-z0-9.]{1,20}$", description="Raw symbol written into the DBN files."
    )
    instrument_id: int = Field(183_748, ge=1, le=2**32 - 1, description="DBN instrument_id of the contract.")
    tick_size: float = Field(
        0.25, gt=0, le=1_000, description="Minimum price increment (ES: 0.25 index points)."
    )
    start_price: float = Field(5_500.0, gt=0, le=1e9, description="Mid price at the first session's open.")
    open_gap_ticks: float = Field(
        40.0,
        ge=0,
        le=10_000,
        description="Std. dev. of the open-to-open price change between sessions (ticks).",
    )
    # --- book ---------------------------------------------------------------------------------
    depth_orders: tuple[float, ...] = Field(
        (20.0, 26.0, 30.0, 34.0, 36.0, 38.0, 38.0, 37.0, 36.0, 34.0),
        description="Target resting-order count at book levels 0..9 (the depth profile).",
    )
    level_turnover: tuple[float, ...] = Field(
        (6.0, 3.0, 2.0, 1.5, 1.2, 1.0, 1.0, 1.0, 1.0, 1.0),
        description="Add and cancel activity of levels 0..9 relative to the deep book (touch churn).",
    )
    order_size_log_mean: float = Field(
        1.5, ge=-2, le=6, description="Order size is 1 + floor(exp(N(mean, sd))) contracts: the mean."
    )
    order_size_log_sd: float = Field(0.9, ge=0, le=3, description="Order size log-normal: the sd.")
    max_order_size: int = Field(250, ge=1, le=100_000, description="Cap on one order's size (contracts).")
    # --- base intensities (business time, calm state) -----------------------------------------
    cancel_rate: float = Field(
        0.0005,
        gt=0,
        le=1,
        description="Cancel intensity per resting order (the last order of a level stays).",
    )
    refill_boost: float = Field(
        2.0, ge=0, le=100, description="Queue-reactive add boost: adds x (1 + boost*max(0, 1 - n/target))."
    )
    modify_rate: float = Field(
        0.0001, ge=0, le=1, description="Intensity per resting order of a price modify to a neighbour level."
    )
    market_rate: float = Field(
        0.04,
        ge=0,
        le=100,
        description="Intensity of market orders per side that fill inside the touch queue.",
    )
    move_rate: float = Field(
        0.03, gt=0, le=100, description="Intensity of price moves (sweeps of a whole touch level)."
    )
    gap_fill_rate: float = Field(
        0.15, gt=0, le=100, description="Intensity of an order improving a two-tick spread back to one tick."
    )
    calm: RegimeConfig = Field(default_factory=_calm, description="Calm regime multipliers.")
    volatile: RegimeConfig = Field(default_factory=_volatile, description="Volatile regime multipliers.")
    # --- clock --------------------------------------------------------------------------------
    activity_profile: tuple[tuple[float, float], ...] = Field(
        DEFAULT_ACTIVITY_PROFILE,
        description="(hours since the 17:00 CT open, relative event rate) steps over the 23-hour session.",
    )
    latency_ns: int = Field(
        4_000, ge=0, le=10**9, description="Mean capture latency ts_recv - ts_event (ns, exponential)."
    )

    @field_validator("start_date")
    @classmethod
    def _weekday(cls, value: dt.date) -> dt.date:
        if value.weekday() >= 5:
            raise ValueError(f"{value.isoformat()} is a {value:%A}; a CME trade date is a weekday (Mon-Fri)")
        return value

    @field_validator("tick_size")
    @classmethod
    def _tick_fixed_point(cls, value: float) -> float:
        raw = value * 1e9
        if abs(raw - round(raw)) > 1e-6:
            raise ValueError(f"tick_size {value} is not a whole number of 1e-9 DBN price units")
        return value

    @field_validator("depth_orders")
    @classmethod
    def _depth(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if len(value) != BOOK_LEVELS:
            raise ValueError(f"depth_orders needs {BOOK_LEVELS} values (levels 0..9), got {len(value)}")
        if any(not 1.0 <= v <= 100.0 for v in value):
            raise ValueError("every depth_orders value must lie in [1, 100] orders")
        return value

    @field_validator("level_turnover")
    @classmethod
    def _turnover(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if len(value) != BOOK_LEVELS:
            raise ValueError(f"level_turnover needs {BOOK_LEVELS} values (levels 0..9), got {len(value)}")
        if any(not 0.0 < v <= 1_000.0 for v in value):
            raise ValueError("every level_turnover value must lie in (0, 1000]")
        return value

    @field_validator("activity_profile")
    @classmethod
    def _profile(cls, value: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
        hours = [h for h, _ in value]
        if not value or hours[0] != 0.0:
            raise ValueError("activity_profile must start at hour 0.0 (the 17:00 CT open)")
        if any(b <= a for a, b in zip(hours, hours[1:], strict=False)) or hours[-1] >= SESSION_HOURS:
            raise ValueError(f"activity_profile hours must increase strictly and stay below {SESSION_HOURS}")
        if any(not 0.0 < w <= 1e6 for _, w in value):
            raise ValueError("activity_profile weights must be positive")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> SynthConfig:
        if self.signal is PlantedSignal.MOMENTUM and self.alpha >= MAX_MOMENTUM_ALPHA:
            raise ValueError(
                f"alpha {self.alpha:g} with signal = momentum: below {MAX_MOMENTUM_ALPHA:g}, or a trend "
                "feeds itself and never ends (the carrier is the price's own direction)"
            )
        if self.start_price / self.tick_size < 1_000:
            raise ValueError("start_price must be at least 1000 ticks (room for the book to move)")
        deepest = max(self.depth_orders) * max(self.calm.depth_mult, self.volatile.depth_mult)
        if deepest > MAX_TARGET_ORDERS:
            raise ValueError(
                f"depth_orders x depth_mult reaches {deepest:g} orders per level; the simulator "
                f"keeps at most {MAX_TARGET_ORDERS} on average (lower one of them)"
            )
        return self
