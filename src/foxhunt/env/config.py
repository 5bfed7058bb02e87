"""The ``[env]`` config section: action branches, contract, costs, sizing, plan, rewards.

Every optional mechanism has a numeric coefficient where 0 switches it off (no boolean flags).
Branch sizes are read from here by the action codec; nothing else may assume 4 x 3 x 3 x 3.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from foxhunt.config.base import Frozen
from foxhunt.env.rewards import RewardParams
from foxhunt.env.sizing import SizingParams


class BranchConfig(Frozen):
    """How many values each action branch has (SPEC §6: 4 x 3 x 3 x 3 = 108 joint actions)."""

    direction: int = Field(
        4, ge=3, le=4, description="Short, Hold, Long, Flat (3: without Flat; test variant)."
    )
    magnitude: int = Field(3, ge=1, le=16, description="Fractions of the effective max position.")
    order_type: int = Field(3, ge=1, le=3, description="Market, LimitAtTouch, LimitInside (a prefix).")
    urgency: int = Field(3, ge=1, le=3, description="Normal, Patient, Immediate (a prefix).")
    magnitude_fractions: tuple[float, ...] = Field(
        (0.25, 0.5, 1.0), description="Target exposure per magnitude value, as a fraction of max position."
    )

    @model_validator(mode="after")
    def _fractions(self) -> BranchConfig:
        if len(self.magnitude_fractions) != self.magnitude:
            raise ValueError(
                f"magnitude_fractions needs {self.magnitude} values, got {len(self.magnitude_fractions)}"
            )
        if any(not 0.0 < f <= 1.0 for f in self.magnitude_fractions):
            raise ValueError("magnitude_fractions must lie in (0, 1]")
        return self


class CostConfig(Frozen):
    """ES defaults: CME exchange and clearing fees plus a retail-institutional commission (per contract,
    in the contract's currency; set them for another product)."""

    commission_per_contract: float = Field(
        0.85, ge=0, description="Broker commission per contract per side ($)."
    )
    exchange_fee_per_contract: float = Field(
        1.40, ge=0, description="Exchange + clearing + NFA fees per contract per side ($)."
    )
    spread_model_ticks: float = Field(
        1.0, ge=0, description="Spread assumed when the book is unknown (ohlcv data), in ticks."
    )
    slippage_ticks_per_contract: float = Field(
        0.02, ge=0, description="Market-order slippage per contract traded beyond the first (ticks)."
    )
    immediate_slippage_ticks: float = Field(
        0.5, ge=0, description="Extra slippage of urgency Immediate (ticks), paid on market orders."
    )
    patience_bars: tuple[int, ...] = Field(
        (2, 5, 1),
        description="Rows a limit order rests before it expires, per urgency (Normal, Patient, Immediate).",
    )


class ContractConfig(Frozen):
    """Position limit and account. The contract's tick size and point value are not settings here:
    they come from the data's instrument (``[instrument]`` overrides; foxhunt.data.instrument)."""

    max_position: int = Field(
        10, ge=1, le=10_000, description="Largest position in contracts before scaling."
    )
    initial_capital: float = Field(250_000.0, gt=0, description="Account equity at episode start ($).")
    capital_floor: float = Field(
        0.7, ge=0, lt=1, description="Episode ends when equity falls below this share of initial capital."
    )


class PlanConfig(Frozen):
    """The plan a new position opens (SPEC §6 plan lock): exits by profit, stop or timeout."""

    target_bars: int = Field(
        60, ge=1, le=100_000, description="Rows a plan may last before its timeout exit."
    )
    profit_mult: float = Field(
        8.0,
        gt=0,
        le=1_000,
        description="Profit level = entry x (1 + mult x per-row vol) (long; mirrored short).",
    )
    stop_mult: float = Field(
        8.0, gt=0, le=1_000, description="Stop level = entry x (1 - mult x per-row vol)."
    )
    trailing_mult: float = Field(
        0.0,
        ge=0,
        le=1_000,
        description="Trailing stop distance in per-row vols from the best price (0 = off).",
    )
    vol_window: int = Field(100, ge=2, le=100_000, description="Trailing window of the per-row volatility.")
    min_vol: float = Field(
        1e-5, gt=0, le=1, description="Floor of the per-row volatility used for barriers (a flat window)."
    )


class EnvConfig(Frozen):
    branches: BranchConfig = Field(default_factory=BranchConfig, description="Action branches.")
    costs: CostConfig = Field(default_factory=CostConfig, description="Execution and costs.")
    contract: ContractConfig = Field(default_factory=ContractConfig, description="Contract and account.")
    plan: PlanConfig = Field(default_factory=PlanConfig, description="Plan lock: profit, stop, timeout.")
    sizing: SizingParams = Field(default_factory=SizingParams, description="Effective max position.")
    rewards: RewardParams = Field(default_factory=RewardParams, description="Reward and shaping terms.")
    episode_rows: int = Field(512, ge=2, le=10_000_000, description="Rows per episode window.")
