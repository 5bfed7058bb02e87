"""The ``[env]`` config section: action branches, contract, costs, sizing, plan, rewards.

Every optional mechanism has a numeric coefficient where 0 switches it off (no boolean flags).
The branch sizes (:class:`~foxhunt.domain.actions.BranchConfig`) and the plan's triple barrier
(:class:`~foxhunt.domain.barrier.BarrierConfig`) are the domain's types, composed here.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from foxhunt.config.base import Frozen
from foxhunt.domain.actions import BranchConfig
from foxhunt.domain.barrier import BarrierConfig


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
        1.0,
        ge=0,
        description="Spread assumed when the book is unknown (ohlcv data), in ticks. A market order fills "
        "at the close +- half of it, on the tick grid against the trader and inside the bar, so a side "
        "costs 0 or 1 whole tick against the close for any value up to 2, not half of it on average "
        "(docs/design.md §5, execution and costs; docs/results/2026-12-07-ohlcv-spread.md).",
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
    they come from the data's instrument (``[instrument]`` overrides; foxhunt.domain.instrument)."""

    max_position: int = Field(
        10, ge=1, le=10_000, description="Largest position in contracts before scaling."
    )
    initial_capital: float = Field(250_000.0, gt=0, description="Account equity at episode start ($).")
    capital_floor: float = Field(
        0.7, ge=0, lt=1, description="Episode ends when equity falls below this share of initial capital."
    )


class PlanConfig(Frozen):
    """The plan a new position opens (docs/design.md §5 plan lock): exits by profit, stop or timeout.

    Its ``barrier`` is the labels' triple barrier too (one home: the labels of the feature cache are
    computed with it, so it is part of the cache's key)."""

    barrier: BarrierConfig = Field(
        default_factory=BarrierConfig,
        description="The triple barrier (profit, stop, volatility window, horizon) of plans and labels.",
    )
    trailing_mult: float = Field(
        0.0,
        ge=0,
        le=1_000,
        description="Trailing stop distance in per-row vols from the best price (0 = off).",
    )
    min_vol: float = Field(
        1e-5, gt=0, le=1, description="Floor of the per-row volatility used for barriers (a flat window)."
    )


class PositionSizingConfig(Frozen):
    """Sizing factors of the effective max position (the formulas: :mod:`foxhunt.env.sizing`); a
    ``*_weight`` of 0 switches that factor off (1)."""

    conviction_min: float = Field(
        0.25, gt=0, le=1, description="Lower clamp of the conviction (Q-gap); also the variance-scale floor."
    )
    conviction_max: float = Field(1.0, gt=0, le=1, description="Upper clamp of the conviction.")
    cvar_weight: float = Field(
        1.0, ge=0, le=1, description="CVaR scale blend: 0 = off (factor 1), 1 = the full CVaR factor."
    )
    cvar_confidence: float = Field(
        0.95, ge=0.5, lt=1, description="CVaR confidence level: the tail is the worst 1 - confidence share."
    )
    cvar_window: int = Field(
        100, ge=2, le=100_000, description="Width W of the per-step return ring buffer the env keeps."
    )
    cvar_min_obs: int = Field(
        20, ge=1, le=100_000, description="Returns needed before the CVaR factor applies (1 before)."
    )
    cvar_budget: float = Field(
        0.005,
        gt=0,
        le=1,
        description="Per-step expected tail loss allowed at full size, as a share of equity.",
    )
    cvar_floor: float = Field(0.25, gt=0, le=1, description="Smallest CVaR factor.")
    kelly_weight: float = Field(
        1.0, ge=0, le=1, description="Kelly factor blend: 0 = off (factor 1), 1 = the full Kelly factor."
    )
    kelly_fraction: float = Field(
        0.5, gt=0, le=1, description="Fractional Kelly multiplier on f* (0.5 = half Kelly)."
    )
    kelly_min_trades: int = Field(
        20, ge=1, le=1_000_000, description="Closed trades of history before Kelly applies (1 before)."
    )
    kelly_floor: float = Field(0.25, gt=0, le=1, description="Smallest Kelly factor.")

    @model_validator(mode="after")
    def _ranges(self) -> PositionSizingConfig:
        if self.conviction_min > self.conviction_max:
            raise ValueError(
                f"conviction_min {self.conviction_min} exceeds conviction_max {self.conviction_max}"
            )
        if self.cvar_min_obs > self.cvar_window:
            raise ValueError(
                f"cvar_min_obs {self.cvar_min_obs} exceeds cvar_window {self.cvar_window}: "
                "the CVaR factor could never apply (raise cvar_window or lower cvar_min_obs)"
            )
        return self


class RewardConfig(Frozen):
    """Reward normalisation and shaping (the terms: :mod:`foxhunt.env.rewards`); every shaping
    coefficient lies in [0, 1], 0 = off."""

    pnl_scale: float = Field(
        1e-3,
        gt=0,
        le=1,
        description="Reward unit as a share of initial capital: reward = PnL / (capital * pnl_scale).",
    )
    entry_bonus: float = Field(
        0.0, ge=0, le=1, description="Entry quality (MFE - MAE)/(MFE + MAE) x |trade PnL|, paid at exit."
    )
    exit_timing_bonus: float = Field(
        0.0, ge=0, le=1, description="(1 - 2 bars_since_peak / hold) x |trade PnL|, paid at exit."
    )
    drawdown_recovery_bonus: float = Field(
        0.0, ge=0, le=1, description="|min_pnl| tanh(trade PnL / |min_pnl|) on a recovered trade, at exit."
    )
    regime_shift_penalty: float = Field(
        0.0, ge=0, le=1, description="-(bars held after a regime shift / hold) x |trade PnL|, at exit."
    )
    regime_ema_alpha: float = Field(
        0.02, gt=0, le=1, description="EMA rate of |regime change| per step (the adaptive threshold)."
    )
    regime_threshold_mult: float = Field(
        3.0,
        gt=0,
        le=100,
        description="Regime shift when drift since entry > mult x EMA|change| x sqrt(bars held).",
    )


class EnvConfig(Frozen):
    branches: BranchConfig = Field(default_factory=BranchConfig, description="Action branches.")
    costs: CostConfig = Field(default_factory=CostConfig, description="Execution and costs.")
    contract: ContractConfig = Field(default_factory=ContractConfig, description="Contract and account.")
    plan: PlanConfig = Field(default_factory=PlanConfig, description="Plan lock: profit, stop, timeout.")
    sizing: PositionSizingConfig = Field(
        default_factory=PositionSizingConfig, description="Effective max position."
    )
    rewards: RewardConfig = Field(default_factory=RewardConfig, description="Reward and shaping terms.")
    episode_rows: int = Field(512, ge=2, le=10_000_000, description="Rows per episode window.")
