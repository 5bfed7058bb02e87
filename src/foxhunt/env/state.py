"""The environment's per-episode state: small dataclasses of named ``[N]`` tensors.

A :class:`Portfolio` is the whole state of N episodes: where each episode is (``row``, ``end``,
``done``) and five parts, each owned by one step of the transition (:mod:`foxhunt.env.transition`):

* :class:`Account` -- position, equity and its peak, costs, the closed-trade counters the Kelly
  fraction reads, and the open trade's running statistics the state shows;
* :class:`RestingOrder` -- the one resting limit order;
* :class:`Plan` -- the triple barrier a new position opens (docs/design.md §5);
* :class:`Risk` -- the net-return ring the CVaR factor is computed from, and the regime EMA the
  regime-shift reward term measures against;
* the open trade in the ledger (:class:`~foxhunt.env.trades.OpenTrade`) and its path for the
  shaping terms (:class:`~foxhunt.env.rewards.TradePath`).

Never a flat list read by offsets: the state handed to the agent is assembled by name through
:data:`foxhunt.features.layout.STATE_SPEC`. A captured step (:mod:`foxhunt.env.graph`) writes the
next state into these tensors in place, so :meth:`Portfolio.tensors` lists every leaf tensor in one
fixed order and :meth:`Portfolio.map` rebuilds the state from a function of each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from foxhunt.env.rewards import TradePath
from foxhunt.env.trades import OpenTrade


@dataclass
class Account:
    """Money, position and counters; every field ``[N]``."""

    position: Tensor  # signed contracts
    equity: Tensor  # $ initial capital + cumulative net PnL
    peak_equity: Tensor  # $
    costs_paid: Tensor  # $ cumulative fees + slippage
    hold_time: Tensor  # int64 rows in the current trade (since its entry reference)
    trade_max: Tensor  # $ intra-trade maximum of the open trade's gross - costs
    trade_min: Tensor  # $ intra-trade minimum
    peak_step: Tensor  # int64 hold_time at the open trade's PnL peak
    time_since_trade: Tensor  # int64 rows since the last fill
    n_trades: Tensor  # int64 closed trades (every close in the ledger)
    n_wins: Tensor  # int64 closed trades with net PnL > 0
    n_losses: Tensor  # int64 closed trades with net PnL < 0 (a breakeven trade is neither: Kelly's odds)
    sum_win: Tensor  # $ per contract, summed over winning trades
    sum_loss: Tensor  # $ per contract, summed over losing trades (positive)

    def __setstate__(self, state: dict[str, Tensor]) -> None:
        # An account pickled before it kept n_losses (a serve ledger's resume state written by an
        # older foxhunt) resumes with the losses that version counted: every trade not a win.
        if "n_losses" not in state:
            state = {**state, "n_losses": state["n_trades"] - state["n_wins"]}
        self.__dict__.update(state)

    @classmethod
    def fresh(cls, n: int, capital: float, *, device: torch.device, dtype: torch.dtype) -> Account:
        z, zi = _zeros(n, device, dtype), _zeros(n, device, torch.int64)
        return cls(
            position=z.clone(),
            equity=z + capital,
            peak_equity=z + capital,
            costs_paid=z.clone(),
            hold_time=zi.clone(),
            trade_max=z.clone(),
            trade_min=z.clone(),
            peak_step=zi.clone(),
            time_since_trade=zi.clone(),
            n_trades=zi.clone(),
            n_wins=zi.clone(),
            n_losses=zi.clone(),
            sum_win=z.clone(),
            sum_loss=z.clone(),
        )


@dataclass
class RestingOrder:
    """The resting limit order (at most one per episode; ``side`` 0: none); every field ``[N]``."""

    side: Tensor  # +1 buy, -1 sell, 0 none
    contracts: Tensor  # contracts (positive)
    price: Tensor  # limit price
    age: Tensor  # int64 rows resting
    urgency: Tensor  # int64 urgency branch (its patience: costs.patience)
    magnitude: Tensor  # int64 magnitude a trade it opens records
    queue: Tensor  # contracts displayed ahead of it when placed (NaN: unknown, trade-through only)
    volume: Tensor  # contracts traded at or through its price since it was placed
    order_type: Tensor  # int64 order type branch (LimitAtTouch, LimitInside) a trade it opens records

    def __setstate__(self, state: dict[str, Tensor]) -> None:
        # An order pickled before it kept its order type (an older serve ledger's resume state): -1,
        # unknown (its price and queue, which decide its fill, were kept).
        if "order_type" not in state:
            state = {**state, "order_type": torch.full_like(state["urgency"], -1)}
        self.__dict__.update(state)

    @classmethod
    def none(cls, n: int, *, device: torch.device, dtype: torch.dtype) -> RestingOrder:
        z, zi = _zeros(n, device, dtype), _zeros(n, device, torch.int64)
        return cls(
            side=z.clone(),
            contracts=z.clone(),
            price=z.clone(),
            age=zi.clone(),
            urgency=zi.clone(),
            magnitude=zi.clone(),
            queue=z.clone(),
            volume=z.clone(),
            order_type=zi.clone(),
        )


@dataclass
class Plan:
    """The triple barrier of the open position (plan lock: while ``active`` the policy holds)."""

    active: Tensor  # bool
    direction: Tensor  # +1 long, -1 short (price dtype)
    profit: Tensor  # profit barrier (price)
    stop: Tensor  # stop barrier (price; moves with the trailing stop)
    best: Tensor  # best price since the entry reference (for the trailing stop)
    vol: Tensor  # per-row volatility at entry (the entry regime)

    @classmethod
    def none(cls, n: int, *, device: torch.device, dtype: torch.dtype) -> Plan:
        z = _zeros(n, device, dtype)
        active = torch.zeros(n, dtype=torch.bool, device=device)
        return cls(active, z.clone(), z.clone(), z.clone(), z.clone(), z.clone())


@dataclass
class Risk:
    """What sizing and the regime-shift reward remember of the episode's past steps."""

    regime_prev: Tensor  # regime (log per-row vol) of the previous row
    regime_ema: Tensor  # adaptive |regime change| scale (rewards.regime_move_ema)
    regime_steps: Tensor  # int64 changes folded into regime_ema
    returns_ring: Tensor  # [N, W] per-step net returns (W = sizing.cvar_window)
    returns_count: Tensor  # int64 returns pushed
    cvar: Tensor  # CVaR factor of returns_ring (sizing.cvar_scale), for the next step's sizing

    @classmethod
    def fresh(cls, regime: Tensor, window: int, *, dtype: torch.dtype) -> Risk:
        n, device = regime.shape[0], regime.device
        z, zi = _zeros(n, device, dtype), _zeros(n, device, torch.int64)
        ring = torch.zeros(n, window, dtype=dtype, device=device)
        return cls(regime, z.clone(), zi.clone(), ring, zi.clone(), z + 1.0)  # no returns yet: factor 1


@dataclass
class Portfolio:
    """The state of N episodes (module docstring); the transition returns a new one."""

    row: Tensor  # int64 current row
    end: Tensor  # int64 last row the episode may reach
    done: Tensor  # bool
    account: Account
    order: RestingOrder
    plan: Plan
    risk: Risk
    trade: OpenTrade  # the open trade in the ledger (its gross - costs: the unrealised PnL)
    path: TradePath  # the open trade's path for the shaping terms

    def __setstate__(self, state: dict[str, object]) -> None:
        # A state pickled before the ledger kept each trade's entry (an older serve ledger's resume
        # state): the open trade's missing fields filled in (OpenTrade.completed).
        trade = state.get("trade")
        if isinstance(trade, OpenTrade):
            state = {**state, "trade": trade.completed()}
        self.__dict__.update(state)

    def tensors(self) -> list[Tensor]:
        """Every leaf tensor, parts in field order (what a captured step writes in place)."""
        return _leaves(self)

    def map(self, fn: Callable[[Tensor], Tensor]) -> Portfolio:
        """A portfolio of ``fn`` applied to every leaf tensor (e.g. ``Tensor.clone``)."""
        return _rebuild(self, fn)  # type: ignore[return-value]


def _zeros(n: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    return torch.zeros(n, dtype=dtype, device=device)


def _leaves(x: object) -> list[Tensor]:
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, tuple):  # OpenTrade, TradePath (NamedTuples)
        return [t for v in x for t in _leaves(v)]
    return [t for f in fields(x) for t in _leaves(getattr(x, f.name))]  # type: ignore[arg-type]


def _rebuild(x: object, fn: Callable[[Tensor], Tensor]) -> object:
    if isinstance(x, Tensor):
        return fn(x)
    if isinstance(x, tuple):
        return type(x)(*(_rebuild(v, fn) for v in x))
    return type(x)(**{f.name: _rebuild(getattr(x, f.name), fn) for f in fields(x)})  # type: ignore[arg-type]
