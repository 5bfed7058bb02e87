"""Small hand-built market data for tests and env plans (no files, no randomness unless a seed is given)."""

from __future__ import annotations

from typing import Any

import numpy as np

from foxhunt.backtest.execution import pool_execution
from foxhunt.data.arrays import (
    ACTION_ADD,
    ACTION_TRADE,
    SIDE_ASK,
    SIDE_BID,
    BookArrays,
    TradeArrays,
)
from foxhunt.domain.barrier import BarrierConfig
from foxhunt.env.config import PlanConfig

TICK = 0.25


def make_book(
    ts: np.ndarray,
    mid_ticks: np.ndarray,
    *,
    instrument_id: int = 1,
    levels: int = 10,
    spread_ticks: int = 1,
    size: int = 10,
    base_price: float = 5000.0,
) -> BookArrays:
    """A book per timestamp: best bid at ``base + mid_ticks*TICK``, ask ``spread_ticks`` above,
    then one tick per level, ``size`` contracts and 2 orders at every level."""
    ts = np.asarray(ts, np.int64)
    n = len(ts)
    bid0 = base_price + np.asarray(mid_ticks, np.float64) * TICK
    step = np.arange(levels) * TICK
    bid_px = bid0[:, None] - step[None, :]
    ask_px = bid0[:, None] + spread_ticks * TICK + step[None, :]
    full = np.full((n, levels), size, np.int64)
    return BookArrays(
        ts_event=ts,
        ts_recv=ts + 1000,
        instrument_id=np.full(n, instrument_id, np.uint32),
        action=np.full(n, ACTION_ADD, np.uint8),
        side=np.full(n, SIDE_BID, np.uint8),
        flags=np.full(n, 128, np.uint8),
        price=bid_px[:, 0].copy(),
        size=np.ones(n, np.int64),
        depth=np.zeros(n, np.uint8),
        sequence=np.arange(n, dtype=np.uint32),
        bid_px=bid_px,
        ask_px=ask_px,
        bid_sz=full.copy(),
        ask_sz=full.copy(),
        bid_ct=np.full((n, levels), 2, np.int64),
        ask_ct=np.full((n, levels), 2, np.int64),
    )


def make_trades(ts, price, size, side, *, instrument_id: int = 1) -> TradeArrays:
    """Trades; ``side`` is a string of 'B' (buy aggressor) / 'A' (sell aggressor) per trade."""
    ts = np.asarray(ts, np.int64)
    n = len(ts)
    return TradeArrays(
        ts_event=ts,
        ts_recv=ts + 1000,
        instrument_id=np.full(n, instrument_id, np.uint32),
        price=np.asarray(price, np.float64),
        size=np.asarray(size, np.int64),
        side=np.array([SIDE_BID if c == "B" else SIDE_ASK for c in side], np.uint8),
        flags=np.zeros(n, np.uint8),
        sequence=np.arange(n, dtype=np.uint32),
    )


def trade_action() -> int:
    return ACTION_TRADE


def plan_config(**fields: Any) -> PlanConfig:
    """An env plan from flat keywords: the triple barrier's fields (:class:`BarrierConfig`: ``horizon``,
    ``profit_mult``, ``stop_mult``, ``vol_window``) go to ``plan.barrier``, the others
    (``trailing_mult``, ``min_vol``) to the plan itself."""
    barrier = {k: fields.pop(k) for k in list(fields) if k in BarrierConfig.model_fields}
    return PlanConfig(barrier=BarrierConfig(**barrier), **fields)


def execution_block(market: int, limit: int, net: float) -> dict[str, Any]:
    """A minimal execution block (foxhunt.backtest.execution): ``market`` + ``limit`` entries of one
    contract each at Normal urgency and Full size, ``net`` $ split evenly, $2 a contract a side."""
    row = {"entries": 0, "contracts": 0.0, "entry_costs": 0.0, "costs": 0.0, "net_pnl": 0.0}
    n = market + limit

    def used(k: int) -> dict[str, Any]:
        return row | {"entries": k, "contracts": float(k), "entry_costs": 2.0 * k, "costs": 4.0 * k} | {
            "net_pnl": net * k / n
        }

    raw = {
        "contracts": 2.0 * n,
        "costs": 4.0 * n,
        "limit_orders": dict(placed=2 * limit, filled=limit, expired=limit, cancelled=0, open_at_end=0),
        "by_order_type": {"Market": used(market), "Limit_At_Touch": used(limit)},
        "by_urgency": {"Normal": used(n), "Patient": row},
        "by_magnitude": {"1x": used(n)},
    }
    block = pool_execution([raw])
    assert block is not None
    return block
