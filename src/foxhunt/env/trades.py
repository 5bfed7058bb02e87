"""The trade ledger: every fill that opens or closes a position is a trade event (docs/design.md §5, §8).

A **trade** is one round trip: it opens when a fill takes the position away from 0 (or reverses
it) and closes when a fill brings it back to 0 (or reverses it). A reversal is two events, the old
trade's close and the new trade's open, in one fill. Fills in the same direction as the open trade
add to it, fills against it that leave it on the same side reduce it; neither opens or closes one.

One env step has up to three fills, in this order (:class:`FillStage`), and a trade can open and
close within the same step (bought at row r, stopped out or closed at the window's end at r+1)::

    ORDER    the policy's market order at row r          (reference price mid[r])
             -- the position held after it is marked from mid[r] to mid[r+1] (gross) --
    RESTING  a resting limit order filled against row r+1 (reference mid[r+1])
    EXIT     the plan's exit, the capital floor or the window's end at row r+1 (reference mid[r+1])

so each stage closes at most one trade and a step at most :data:`STAGES`; the step's closed trades
are ``[N, STAGES]`` tensors (:class:`ClosedTrades`, slot = stage). (Under the plan lock a position
leaves 0 only by ORDER or RESTING and returns to it only by EXIT, so today's env closes at most one
trade a step and never reverses or reduces one; the ledger does not rely on that.)

Accounting (per fill of ``q`` signed contracts on a position ``p``, costs ``c`` = fees + slippage
against the reference price)::

    closing  = min(|q|, |p|) if q is against p, else 0        opening = |q| - closing
    the open trade takes   c * closing / |q|  and the mark of every step it is held (gross)
    the new or grown trade takes  c * opening / |q|

so every dollar of the step's net PnL (gross - costs) belongs to exactly one trade and the closed
trades' net PnL sums to the net PnL of the steps (a window's last step closes whatever is open).
A closed trade reports its side, its size (contracts opened = contracts closed), the volume-weighted
entry and exit fill prices, the rows of its first and last fill, how it was entered (:class:`Entry`:
the magnitude, order type and urgency of the order whose fill opened it), the costs of its opening
fills (``entry_costs``; ``costs - entry_costs`` is what closing it cost) and why it closed
(:class:`ExitReason`). Without partial fills its net PnL is exactly
``side * size * (exit_price - entry_price) * point_value - fees``: the marks telescope.

Pure batched functions on ``[N]`` tensors: no host copy, no data-dependent Python branch.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

import torch
from torch import Tensor

from foxhunt.domain.exits import ExitReason


class FillStage(IntEnum):
    """The fills of one step, in order; also the slot of a closed trade in ``[N, STAGES]``."""

    ORDER = 0
    RESTING = 1
    EXIT = 2


STAGES = len(FillStage)

LIMIT_EVENTS = ("placed", "filled", "expired", "cancelled", "open_at_end")
"""What a step can do to a limit order, the columns of ``StepResult.limit_orders``
(:func:`foxhunt.env.transition.limit_events`): every order placed ends filled, expired (its urgency's
patience used up), cancelled (replaced by a new order, cancelled by a market order or the capital
floor) or still resting when its episode ends, so ``placed = filled + expired + cancelled +
open_at_end`` over whole episodes."""

_AGENT_CLOSE, _FLIP = int(ExitReason.AGENT_CLOSE), int(ExitReason.FLIP)


class Entry(NamedTuple):
    """How the order whose fill opens a trade was placed: its branches, ``[N]`` int64 each (-1: none).

    What the ledger keeps of the entry for the execution summary (:mod:`foxhunt.backtest.execution`):
    a market order's are the step's decision, a limit order's those it was placed with
    (:class:`~foxhunt.env.state.RestingOrder`); an exit opens nothing (-1 throughout)."""

    magnitude: Tensor  # magnitude index (after the Kelly cap)
    order_type: Tensor  # foxhunt.domain.actions.OrderType
    urgency: Tensor  # foxhunt.domain.actions.Urgency


class OpenTrade(NamedTuple):
    """The trade open in each episode (zeros and -1 while flat), one ``[N]`` tensor per field.

    The last three fields default to None only so that a state pickled before they existed (a serve
    ledger's resume state) loads; :meth:`foxhunt.env.state.Portfolio.__setstate__` fills them."""

    side: Tensor  # +1 long, -1 short, 0 none (price dtype)
    entry_row: Tensor  # int64 row of the opening fill (-1 none)
    magnitude: Tensor  # int64 magnitude index the trade was opened with (-1 none)
    opened: Tensor  # contracts bought (long) or sold (short) to open and grow it
    entry_value: Tensor  # sum of contracts x fill price of those fills
    closed: Tensor  # contracts closed so far (reductions)
    exit_value: Tensor  # sum of contracts x fill price of the closing fills
    gross: Tensor  # $ marks while held
    costs: Tensor  # $ its share of the fills' fees and slippage
    order_type: Tensor = None  # type: ignore[assignment]  # int64 OrderType of the opening order (-1 none)
    urgency: Tensor = None  # type: ignore[assignment]  # int64 Urgency of the opening order (-1 none)
    entry_costs: Tensor = None  # type: ignore[assignment]  # $ the part of ``costs`` its opening fills paid

    @classmethod
    def flat(cls, n: int, *, device: torch.device | str | None, dtype: torch.dtype) -> OpenTrade:
        def z() -> Tensor:  # one tensor per field: a captured step writes the fields in place
            return torch.zeros(n, dtype=dtype, device=device)

        def none() -> Tensor:
            return torch.full((n,), -1, dtype=torch.int64, device=device)

        return cls(z(), none(), none(), z(), z(), z(), z(), z(), z(), none(), none(), z())

    def completed(self) -> OpenTrade:
        """This trade with the fields a state of an older foxhunt lacks filled in (flat: -1 and 0;
        an open trade's entry is unknown: -1, its costs all counted as entry costs)."""
        if self.entry_costs is not None:
            return self
        none = torch.full_like(self.entry_row, -1)
        return self._replace(order_type=none, urgency=none.clone(), entry_costs=self.costs.clone())


class ClosedTrades(NamedTuple):
    """Trades closed by a step (``[N, STAGES]``, slot = :class:`FillStage`) or recorded by a
    backtest (``[E, T, STAGES]``); every field is 0 (-1 for the int fields) where ``closed`` is False."""

    closed: Tensor  # bool
    pnl: Tensor  # $ net PnL = gross - costs
    gross: Tensor  # $ marks while held
    costs: Tensor  # $ fees and slippage of its opening and closing fills
    side: Tensor  # +1 long, -1 short
    size: Tensor  # contracts opened (= contracts closed)
    entry_price: Tensor  # volume-weighted fill price of the opening fills
    exit_price: Tensor  # volume-weighted fill price of the closing fills
    entry_row: Tensor  # int64 row of the first opening fill
    exit_row: Tensor  # int64 row of the closing fill
    magnitude: Tensor  # int64 magnitude index it was opened with
    reason: Tensor  # int64 ExitReason
    order_type: Tensor  # int64 OrderType of the order that opened it
    urgency: Tensor  # int64 Urgency of the order that opened it
    entry_costs: Tensor  # $ the part of ``costs`` its opening fills paid


def book_fill(
    trade: OpenTrade,
    position: Tensor,
    contracts: Tensor,
    price: Tensor,
    costs: Tensor,
    row: Tensor,
    entry: Entry,
    close_reason: Tensor,
    detail: bool = True,
) -> tuple[OpenTrade, ClosedTrades]:
    """Book one fill of ``contracts`` (signed, 0 = none) at ``price`` with ``costs`` ($) on ``row``.

    ``position``: the position before the fill; ``entry``: the order's branches, which a trade opened
    by this fill records; ``close_reason``: the :class:`ExitReason` of a trade this fill brings to 0
    (:data:`ExitReason.FLIP` replaces it where the fill reverses the position).
    Returns ``(open trade after the fill, the trade it closed [N])``. Without ``detail`` the record
    keeps only :data:`LEAN_FIELDS` (the others are empty tensors): what the env's accounting reads,
    without the ledger's other nine selections and two divisions.
    """
    size = contracts.abs()
    against = (position != 0) & (torch.sign(contracts) == -torch.sign(position))
    closing = torch.where(against, torch.minimum(size, position.abs()), torch.zeros_like(size))
    opening = size - closing
    close_costs = costs * closing / torch.clamp(size, min=1.0)  # |q| >= 1 wherever a fill happened
    after = position + contracts
    ends = against & (torch.sign(after) != torch.sign(position))  # back to 0 or reversed

    # The closing leg belongs to the trade open before the fill.
    done_closed = trade.closed + closing
    done_exit_value = trade.exit_value + closing * price
    done_costs = trade.costs + close_costs
    open_costs = costs - close_costs
    zero = torch.zeros_like(size)
    none = torch.full_like(trade.entry_row, -1)
    if detail:
        reason = torch.where(after != 0, torch.full_like(close_reason, _FLIP), close_reason)
        record = ClosedTrades(
            closed=ends,
            pnl=torch.where(ends, trade.gross - done_costs, zero),
            gross=torch.where(ends, trade.gross, zero),
            costs=torch.where(ends, done_costs, zero),
            side=torch.where(ends, trade.side, zero),
            size=torch.where(ends, trade.opened, zero),
            entry_price=torch.where(ends, trade.entry_value / torch.clamp(trade.opened, min=1.0), zero),
            exit_price=torch.where(ends, done_exit_value / torch.clamp(done_closed, min=1.0), zero),
            entry_row=torch.where(ends, trade.entry_row, none),
            exit_row=torch.where(ends, row, none),
            magnitude=torch.where(ends, trade.magnitude, none),
            reason=torch.where(ends, reason, torch.zeros_like(reason)),
            order_type=torch.where(ends, trade.order_type, none),
            urgency=torch.where(ends, trade.urgency, none),
            entry_costs=torch.where(ends, trade.entry_costs, zero),
        )
    else:
        pnl = torch.where(ends, trade.gross - done_costs, zero)
        record = lean_record(ends, pnl, torch.where(ends, trade.opened, zero))

    # The opening leg starts a trade (from flat or after a reversal) or grows the open one.
    fresh = (opening > 0) & ((position == 0) | ends)
    keep = ~ends
    nxt = OpenTrade(
        side=torch.where(fresh, torch.sign(contracts), torch.where(keep, trade.side, zero)),
        entry_row=torch.where(fresh, row, torch.where(keep, trade.entry_row, none)),
        magnitude=torch.where(fresh, entry.magnitude, torch.where(keep, trade.magnitude, none)),
        opened=torch.where(keep, trade.opened, zero) + opening,
        entry_value=torch.where(keep, trade.entry_value, zero) + opening * price,
        closed=torch.where(keep, done_closed, zero),
        exit_value=torch.where(keep, done_exit_value, zero),
        gross=torch.where(keep, trade.gross, zero),
        costs=torch.where(keep, done_costs, zero) + open_costs,
        order_type=torch.where(fresh, entry.order_type, torch.where(keep, trade.order_type, none)),
        urgency=torch.where(fresh, entry.urgency, torch.where(keep, trade.urgency, none)),
        entry_costs=torch.where(keep, trade.entry_costs, zero) + open_costs,
    )
    return nxt, record


def mark(trade: OpenTrade, gross: Tensor) -> OpenTrade:
    """Add the step's mark-to-market ``gross`` ($, 0 where flat) to the open trade."""
    # Every field spelled out (no NamedTuple._replace): the step is traced by torch.compile.
    return OpenTrade(
        side=trade.side,
        entry_row=trade.entry_row,
        magnitude=trade.magnitude,
        opened=trade.opened,
        entry_value=trade.entry_value,
        closed=trade.closed,
        exit_value=trade.exit_value,
        gross=trade.gross + gross,
        costs=trade.costs,
        order_type=trade.order_type,
        urgency=trade.urgency,
        entry_costs=trade.entry_costs,
    )


def lean_record(closed: Tensor, pnl: Tensor, size: Tensor) -> ClosedTrades:
    """A :class:`ClosedTrades` of only :data:`LEAN_FIELDS`; every other field an empty tensor."""
    empty, empty_int = pnl.new_empty(0), torch.empty(0, dtype=torch.int64, device=pnl.device)
    return ClosedTrades(
        closed=closed,
        pnl=pnl,
        gross=empty,
        costs=empty,
        side=empty,
        size=size,
        entry_price=empty,
        exit_price=empty,
        entry_row=empty_int,
        exit_row=empty_int,
        magnitude=empty_int,
        reason=empty_int,
        order_type=empty_int,
        urgency=empty_int,
        entry_costs=empty,
    )


LEAN_FIELDS = ("closed", "pnl", "size")
"""The closed-trade fields the env's own accounting reads (trade counts, wins, per-contract PnL)."""


def by_stage(records: list[ClosedTrades], detail: bool = True) -> ClosedTrades:
    """The ``[N]`` records of :func:`book_fill`, one per :class:`FillStage`, as ``[N, STAGES]``;
    without ``detail`` only :data:`LEAN_FIELDS` (the records' others are empty already)."""
    if detail:
        return ClosedTrades(*(torch.stack(f, dim=1) for f in zip(*records, strict=True)))
    closed, pnl, size = (torch.stack([getattr(r, f) for r in records], dim=1) for f in LEAN_FIELDS)
    return lean_record(closed, pnl, size)
