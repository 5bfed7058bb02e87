"""``trades.csv``: one row per round trip of a backtest, from the env's trade ledger (docs/design.md §8).

Every trade the env closed (:mod:`foxhunt.env.trades`: a round trip inside one step and both legs of
a reversal included; a position still open at a window's last row is closed there with the reason
``window_end``) becomes one row, in (fold, window, step, fill) order::

    fold, window         the fold and the validation window (episode) it ran in
    side, size           long/short, contracts
    entry_time/exit_time ISO 8601 UTC time of the rows of its opening and closing fills (the time the
                         row is known: a bar's close, a snapshot's event)
    entry_row/exit_row   the rows of the feature cache
    entry_price/exit_price  volume-weighted fill prices
    gross_pnl, costs, net_pnl  $ (net = gross - costs; costs = fees + slippage against the mark)
    magnitude            the magnitude index it was opened with
    exit_reason          profit, stop, timeout, capital_floor, window_end, agent_close or flip
    order_type, urgency  how the order that opened it was placed (market, limit_at_touch,
                         limit_inside; normal, patient, immediate)
    entry_costs          $ the part of ``costs`` its opening fills paid (the rest closed it)

Identities (tests/backtest/test_trades.py): the rows' ``net_pnl`` sums to the backtest's net PnL per
window and in total; their count is ``metrics.json``'s ``trades``; ``2 x sum(size)`` is its
``contracts_traded``.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foxhunt.atomic import atomic_path
from foxhunt.backtest.metrics import StepRecord
from foxhunt.domain.actions import OrderType, Urgency
from foxhunt.domain.exits import ExitReason

TRADE_COLUMNS = (
    "fold",
    "window",
    "side",
    "size",
    "entry_time",
    "exit_time",
    "entry_row",
    "exit_row",
    "entry_price",
    "exit_price",
    "gross_pnl",
    "costs",
    "net_pnl",
    "magnitude",
    "exit_reason",
    "order_type",
    "urgency",
    "entry_costs",
)
"""The columns of ``trades.csv``, in order."""

_UNITS = (("s", 10**9), ("ms", 10**6), ("us", 10**3), ("ns", 1))


def iso_utc(ts_ns: np.ndarray) -> np.ndarray:
    """ISO 8601 UTC strings of nanosecond timestamps, in the coarsest unit that is exact for all."""
    ts = np.asarray(ts_ns, dtype=np.int64)
    unit = next(u for u, k in _UNITS if (ts % k == 0).all())
    return np.datetime_as_string(ts.astype("datetime64[ns]"), unit=unit, timezone="UTC")


def trade_rows(rec: StepRecord, ts_ns: np.ndarray, fold: int) -> list[dict[str, Any]]:
    """The rows of ``trades.csv`` for one fold's record (``ts_ns``: the cache's ``ts`` column)."""
    detail = rec.trade_detail
    if detail is None:
        raise ValueError("the StepRecord keeps no trade detail: record it with StepRecord.blank(ledger=True)")
    closed = rec.trade_closed & rec.written[:, :, None]
    idx = torch.nonzero(closed, as_tuple=True)  # (episode, step, slot) in row-major order
    cols = {
        "window": idx[0],
        "net_pnl": rec.trade_pnl[idx],
        "magnitude": rec.closed_magnitude[idx],
        **{name: getattr(detail, name)[idx] for name in detail._fields},
    }
    host = {k: v.cpu().numpy() for k, v in cols.items()}  # one copy per column, after the run
    entry, exit_ = iso_utc(ts_ns[host["entry_row"]]), iso_utc(ts_ns[host["exit_row"]])
    reasons = {int(r): r.name.lower() for r in ExitReason}
    orders, urgencies = ({int(v): v.name.lower() for v in e} for e in (OrderType, Urgency))
    return [
        {
            "fold": fold,
            "window": int(host["window"][i]),
            "side": "long" if host["side"][i] > 0 else "short",
            "size": float(host["size"][i]),
            "entry_time": str(entry[i]),
            "exit_time": str(exit_[i]),
            "entry_row": int(host["entry_row"][i]),
            "exit_row": int(host["exit_row"][i]),
            "entry_price": float(host["entry_price"][i]),
            "exit_price": float(host["exit_price"][i]),
            "gross_pnl": float(host["gross"][i]),
            "costs": float(host["costs"][i]),
            "net_pnl": float(host["net_pnl"][i]),
            "magnitude": int(host["magnitude"][i]),
            "exit_reason": reasons[int(host["reason"][i])],
            "order_type": orders.get(int(host["order_type"][i]), "unknown"),
            "urgency": urgencies.get(int(host["urgency"][i]), "unknown"),
            "entry_costs": float(host["entry_costs"][i]),
        }
        for i in range(len(host["window"]))
    ]


def exit_reasons(rows: list[dict[str, Any]]) -> dict[str, int]:
    """How many trades closed for each reason (``metrics.json``: why a baseline trades so often)."""
    counts = {r.name.lower(): 0 for r in ExitReason if r is not ExitReason.NONE}
    for row in rows:
        counts[row["exit_reason"]] += 1
    return counts


def write_trades_csv(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Write ``rows`` (:func:`trade_rows`) as ``trades.csv`` (atomically; a header when empty)."""
    with atomic_path(Path(path)) as tmp:
        with tmp.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(TRADE_COLUMNS))
            w.writeheader()
            w.writerows(rows)
