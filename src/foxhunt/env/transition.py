"""The steps of one environment transition, as pure functions of ``[N]`` tensors and dataclasses.

:meth:`foxhunt.env.core.TradingEnv.transition` composes them, at row ``r`` (the agent has seen
rows <= r; ``r1 = r + 1``, the row the step moves to)::

    decide         plan lock, target exposure, sizing           -> Decision
    execute        the market order fills at row r; a limit order replaces the resting one
    mark_position  the position held through r -> r1 is marked to market (gross PnL)
    fill_resting   the resting order against row r1 (queue-aware), its age and expiry
    open_plan      a position opened or reversed starts a plan (the triple barrier)
    check_barriers profit, (trailing) stop, timeout at row r1
    forced_exits   the capital floor and the window's end
    exit_position  the exit's market order at row r1
    settle         the account: equity, costs, counters, the open trade's statistics
    pay            the reward and its components from the trade's path
    update_risk    the returns ring, its CVaR factor, the regime EMA

Every fill is booked in the trade ledger (:func:`book`, :mod:`foxhunt.env.trades`) in
:class:`~foxhunt.env.trades.FillStage` order (order, resting, exit). Nothing here reads the host
or branches on a tensor's value, so the composed step runs under ``torch.compile(fullgraph=True)``
and CUDA-graph capture (:mod:`foxhunt.env.graph`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from foxhunt.domain.actions import ActionCodec, Direction, OrderType
from foxhunt.domain.barrier import barrier_prices, barrier_touch
from foxhunt.domain.exits import ExitReason
from foxhunt.domain.instrument import Instrument
from foxhunt.env.config import CostConfig, EnvConfig, PlanConfig, PositionSizingConfig, RewardConfig
from foxhunt.env.costs import (
    Fill,
    Quote,
    limit_expired,
    limit_order,
    limit_price,
    market_order_quoted,
    queue_ahead,
    volume_at_price,
)
from foxhunt.env.rewards import TradePath, advance_trade, open_trade, regime_move_ema, step_reward
from foxhunt.env.sizing import (
    conviction,
    cvar_scale,
    effective_max_position,
    kelly_cap_by_magnitude,
    kelly_fraction,
    push_return,
    variance_scale,
)
from foxhunt.env.state import Account, Plan, Portfolio, RestingOrder, Risk
from foxhunt.env.trades import LIMIT_EVENTS, ClosedTrades, Entry, OpenTrade, book_fill, mark

_HOLD, _FLAT, _MARKET = int(Direction.HOLD), int(Direction.FLAT), int(OrderType.MARKET)
_PROFIT, _STOP, _TIMEOUT = int(ExitReason.PROFIT), int(ExitReason.STOP), int(ExitReason.TIMEOUT)
_FLOOR, _WINDOW_END, _AGENT_CLOSE = (
    int(ExitReason.CAPITAL_FLOOR),
    int(ExitReason.WINDOW_END),
    int(ExitReason.AGENT_CLOSE),
)


class StepRows(NamedTuple):
    """The market values one step reads, gathered once: row ``r`` and ``r1 = min(r + 1, last)``."""

    r: Tensor
    r1: Tensor
    mid: Tensor
    mid1: Tensor
    quote: Quote  # row r's effective quote
    quote1: Quote
    low: Tensor
    high: Tensor
    low1: Tensor
    high1: Tensor
    volume1: Tensor  # contracts traded on row r1 (NaN: unknown)
    bid_size: Tensor | None  # row r's touch sizes (None: the data has none)
    ask_size: Tensor | None
    vol1: Tensor  # row r1's per-row volatility, floored at plan.min_vol
    regime1: Tensor  # its log (the regime of the regime-shift term)


class Decision(NamedTuple):
    """What the policy's action becomes after the plan lock and sizing; ``[N]`` each."""

    direction: Tensor  # int64 realised direction (Hold while a plan is active or the episode is over)
    magnitude: Tensor  # int64 magnitude after the Kelly cap
    delta: Tensor  # contracts to trade toward the target (0 where not live)
    side: Tensor  # sign(delta)
    market: Tensor  # bool: a market order (closing to flat always is)
    order: Tensor  # int64 order type branch
    urgency: Tensor  # int64 urgency branch


class Leg(NamedTuple):
    """One booked fill of the step (one :class:`~foxhunt.env.trades.FillStage`)."""

    contracts: Tensor  # signed contracts (0: nothing filled)
    price: Tensor  # fill price (the reference where nothing filled)
    costs: Tensor  # $ fees + slippage against the reference
    position: Tensor  # the position after it
    closed: ClosedTrades  # the trade it closed ([N])


def decide(
    p: Portfolio,
    actions: Tensor,
    live: Tensor,
    direction_conviction: Tensor,
    magnitude_conviction: Tensor,
    q_variance: Tensor,
    codec: ActionCodec,
    cfg: EnvConfig,
) -> Decision:
    """Plan lock, Kelly cap and the target exposure ``sign x fraction x effective max position``.

    ``actions`` ``[N, 4]`` int64 branch indices. Kelly enters once: through the magnitude cap, or with
    one magnitude (nothing smaller to cap at) as a factor of the effective max position; that takes
    the CVaR factor the previous step left (docs/design.md §5).
    """
    a = p.account
    direction, magnitude, order, urgency = actions.unbind(dim=1)  # the codec's branches
    realised = torch.where(p.plan.active | ~live, torch.full_like(direction, _HOLD), direction)
    conv = conviction(direction_conviction, cfg.sizing)
    kelly = kelly_fraction(
        a.n_wins,
        a.n_losses,  # not n_trades - n_wins: a breakeven trade is no loss (Kelly's odds, env/sizing.py)
        a.sum_win,
        a.sum_loss,
        a.n_trades,
        direction_conviction,
        magnitude_conviction,
        a.equity,
        float(cfg.contract.max_position),
        cfg.sizing,
    )
    fractions = cfg.branches.magnitude_fractions
    if len(fractions) > 1:  # Kelly caps the magnitude (the factor then stays out of the max position)
        magnitude = torch.minimum(magnitude, kelly_cap_by_magnitude(kelly, fractions))
    # One magnitude: no smaller one to cap at, so Kelly scales the effective max position instead.
    kelly_factor = kelly if len(fractions) == 1 else 1.0
    eff_max = effective_max_position(
        cfg.contract.max_position, p.risk.cvar, conv, kelly_factor, variance_scale(q_variance, conv)
    )
    frac = codec.target_exposure(realised, magnitude, a.position / torch.clamp(eff_max, min=1e-9))
    target = torch.where(realised == _HOLD, a.position, torch.round(frac * eff_max))
    delta = torch.where(live, target - a.position, torch.zeros_like(target))
    market = (order == _MARKET) | (realised == _FLAT)
    return Decision(realised, magnitude, delta, torch.sign(delta), market, order, urgency)


def book(
    trade: OpenTrade,
    position: Tensor,
    fill: Fill,
    row: Tensor,
    entry: Entry,
    reason: Tensor,
    ledger: bool,
) -> tuple[OpenTrade, Leg]:
    """Book ``fill`` on ``position`` into the ledger (:func:`~foxhunt.env.trades.book_fill`); ``entry``:
    the order's branches, recorded by a trade the fill opens."""
    costs = fill.fees + fill.slippage_cost
    trade, closed = book_fill(trade, position, fill.contracts, fill.price, costs, row, entry, reason, ledger)
    return trade, Leg(fill.contracts, fill.price, costs, position + fill.contracts, closed)


def execute(
    p: Portfolio,
    d: Decision,
    rows: StepRows,
    live: Tensor,
    costs: CostConfig,
    instrument: Instrument,
    ledger: bool,
) -> tuple[RestingOrder, OpenTrade, Leg]:
    """The decision's order at row ``r``: a market order fills now at the touch plus slippage
    (reference ``mid[r]``; modelled inside ``[low, high]`` where the book is unknown); a limit order
    replaces the resting one; a market order cancels it. Returns ``(order, trade, leg)``."""
    size = d.delta.abs()
    fill = market_order_quoted(
        torch.where(d.market, d.side, torch.zeros_like(d.side)),
        size,
        rows.quote,
        rows.mid,
        d.urgency,
        costs,
        instrument,
        rows.low,
        rows.high,
    )
    order = place_limit(p.order, d, size, rows, live, instrument.tick_size)
    agent_close = torch.full_like(p.account.hold_time, _AGENT_CLOSE)
    entry = Entry(d.magnitude, torch.full_like(d.order, _MARKET), d.urgency)  # a market order's fill
    trade, leg = book(p.trade, p.account.position, fill, rows.r, entry, agent_close, ledger)
    return order, trade, leg


def place_limit(
    order: RestingOrder, d: Decision, size: Tensor, rows: StepRows, live: Tensor, tick_size: float
) -> RestingOrder:
    """A new limit order (at the touch or inside, its queue from row ``r``'s book) replaces the
    resting one; a market order with something to trade cancels it."""
    trades = live & (d.side != 0)
    new = trades & ~d.market
    q = rows.quote
    price = limit_price(d.side, d.order, q.bid, q.ask, tick_size, book=q.known)
    if rows.bid_size is None or rows.ask_size is None:
        ahead = torch.full_like(price, float("nan"))  # no sizes: it fills on a trade-through only
    else:
        ahead = queue_ahead(d.side, price, q.bid, q.ask, rows.bid_size, rows.ask_size, known=q.known)
    side = torch.where(new, d.side, order.side)
    return RestingOrder(
        side=torch.where(trades & d.market, torch.zeros_like(side), side),
        contracts=torch.where(new, size, order.contracts),
        price=torch.where(new, price, order.price),
        age=torch.where(new, torch.zeros_like(order.age), order.age),
        urgency=torch.where(new, d.urgency, order.urgency),
        magnitude=torch.where(new, d.magnitude, order.magnitude),
        queue=torch.where(new, ahead, order.queue),
        volume=torch.where(new, torch.zeros_like(order.volume), order.volume),
        order_type=torch.where(new, d.order, order.order_type),
    )


def mark_position(
    trade: OpenTrade, position: Tensor, rows: StepRows, live: Tensor, point_value: float
) -> tuple[Tensor, OpenTrade]:
    """``(gross, trade)``: ``gross = position x (mid[r1] - mid[r]) x point value`` ($, 0 where not
    live), added to the open trade's marks."""
    gross = torch.where(live, position * (rows.mid1 - rows.mid) * point_value, torch.zeros_like(rows.mid))
    return gross, mark(trade, gross)


def fill_resting(
    order: RestingOrder,
    trade: OpenTrade,
    position: Tensor,
    rows: StepRows,
    live: Tensor,
    costs: CostConfig,
    instrument: Instrument,
    ledger: bool,
) -> tuple[RestingOrder, OpenTrade, Leg]:
    """The resting order against row ``r1`` (reference ``mid[r1]``): it fills at its price on a
    trade-through, or when the volume traded at its price since placement exceeds the queue ahead
    of it (:func:`~foxhunt.env.costs.limit_fill`); it ages a row and expires after its patience."""
    resting = torch.where(live, order.side, torch.zeros_like(order.side))
    volume = order.volume + volume_at_price(resting, order.price, rows.low1, rows.high1, rows.volume1)
    fill = limit_order(
        resting,
        order.contracts,
        order.price,
        rows.low1,
        rows.high1,
        order.queue,
        volume,
        rows.mid1,
        costs,
        instrument,
    )
    agent_close = torch.full_like(order.age, _AGENT_CLOSE)
    entry = Entry(order.magnitude, order.order_type, order.urgency)
    trade, leg = book(trade, position, fill, rows.r1, entry, agent_close, ledger)
    age = torch.where(order.side != 0, order.age + 1, order.age)
    expired = limit_expired(age, order.urgency, costs)
    side = torch.where(fill.filled | expired, torch.zeros_like(order.side), order.side)
    o = order
    left = RestingOrder(
        side, o.contracts, o.price, age, o.urgency, o.magnitude, o.queue, volume, o.order_type
    )
    return left, trade, leg


def open_plan(
    plan: Plan,
    before: Tensor,
    after: Tensor,
    hold_time: Tensor,
    entry: Tensor,
    vol: Tensor,
    params: PlanConfig,
) -> tuple[Plan, Tensor, Tensor]:
    """A position ``before -> after`` that opened or reversed starts a plan at ``entry`` (row r1's
    close) with barriers ``entry x (1 +- mult x vol)``; a plan ends with its position.

    Returns ``(plan, opened, hold)``: ``hold`` counts rows since the entry reference (0 on opening).
    """
    holding = after != 0
    direction = torch.sign(after)
    opened = holding & ((before == 0) | (direction != torch.sign(before)))
    b = params.barrier
    profit, stop = barrier_prices(entry, vol, b.profit_mult, b.stop_mult, direction)
    plan = Plan(
        active=torch.where(opened, torch.ones_like(plan.active), plan.active & holding),
        direction=torch.where(opened, direction, plan.direction),
        profit=torch.where(opened, profit, plan.profit),
        stop=torch.where(opened, stop, plan.stop),
        best=torch.where(opened, entry, plan.best),
        vol=torch.where(opened, vol, plan.vol),
    )
    hold = torch.where(opened, torch.zeros_like(hold_time), hold_time + holding.to(torch.int64))
    return plan, opened, hold


def check_barriers(
    plan: Plan, opened: Tensor, hold: Tensor, high: Tensor, low: Tensor, params: PlanConfig
) -> tuple[Plan, Tensor]:
    """``(plan, reason)``: the plan's barriers against row r1's range ``[low, high]``.

    The triple barrier's convention (:mod:`foxhunt.domain.barrier`): a plan opened this step takes
    its entry reference at row r1's close, so row r1's range (traded before that close) is neither
    checked nor folded into the best price; its first check is the next step's row. ``reason``:
    :class:`ExitReason` PROFIT, STOP (trailing when configured; it wins a row touching both) or
    TIMEOUT (``hold`` reached the horizon), 0 for none.
    """
    checked = plan.active & ~opened
    long = plan.direction > 0
    best = torch.where(long, torch.maximum(plan.best, high), torch.minimum(plan.best, low))
    best = torch.where(checked, best, plan.best)
    stop = plan.stop
    if params.trailing_mult > 0:
        trail = best * (1 - plan.direction * params.trailing_mult * plan.vol)
        better = torch.where(long, trail > stop, trail < stop)
        stop = torch.where(checked & better, trail, stop)
    long_profit, long_stop = barrier_touch(high, low, plan.profit, stop, 1)
    short_profit, short_stop = barrier_touch(high, low, plan.profit, stop, -1)
    hit_profit = checked & torch.where(long, long_profit, short_profit)
    hit_stop = checked & torch.where(long, long_stop, short_stop)
    timeout = checked & (hold >= params.barrier.horizon)
    reason = torch.zeros_like(hold)
    reason = torch.where(timeout, torch.full_like(reason, _TIMEOUT), reason)
    reason = torch.where(hit_profit, torch.full_like(reason, _PROFIT), reason)
    reason = torch.where(hit_stop, torch.full_like(reason, _STOP), reason)  # the stop wins ties
    return Plan(plan.active, plan.direction, plan.profit, stop, best, plan.vol), reason


def forced_exits(
    reason: Tensor, equity: Tensor, live: Tensor, r1: Tensor, end: Tensor, floor: float
) -> tuple[Tensor, Tensor]:
    """``(reason, floored)``: equity below ``floor`` ($) flattens the position and ends the episode
    (CAPITAL_FLOOR, over any barrier); the episode's last row closes whatever is open (WINDOW_END),
    so every trade is accounted for."""
    floored = live & (equity < floor)
    reason = torch.where(floored, torch.full_like(reason, _FLOOR), reason)
    last = live & (r1 >= end) & (reason == 0)
    return torch.where(last, torch.full_like(reason, _WINDOW_END), reason), floored


def exit_position(
    trade: OpenTrade,
    position: Tensor,
    reason: Tensor,
    live: Tensor,
    rows: StepRows,
    costs: CostConfig,
    instrument: Instrument,
    ledger: bool,
) -> tuple[OpenTrade, Leg, Tensor]:
    """``(trade, leg, exiting)``: a position with an exit ``reason`` closes by a market order at row
    r1's touch (urgency Normal, reference ``mid[r1]``); the trade it closes records ``reason``."""
    exiting = live & (reason > 0) & (position != 0)
    fill = market_order_quoted(
        torch.where(exiting, -torch.sign(position), torch.zeros_like(position)),
        position.abs(),
        rows.quote1,
        rows.mid1,
        torch.zeros_like(reason),
        costs,
        instrument,
        rows.low1,
        rows.high1,
    )
    no_open = torch.full_like(trade.magnitude, -1)  # an exit opens nothing
    trade, leg = book(trade, position, fill, rows.r1, Entry(no_open, no_open, no_open), reason, ledger)
    return trade, leg, exiting


def close_out(
    plan: Plan, order: RestingOrder, exiting: Tensor, floored: Tensor, after: Tensor
) -> tuple[Plan, RestingOrder]:
    """A plan ends with its exit and with its position (``after`` the step); the capital floor also
    cancels the resting order (the episode is over)."""
    active = plan.active & ~exiting & (after != 0)
    o = order
    side = torch.where(floored, torch.zeros_like(o.side), o.side)
    return (
        Plan(active, plan.direction, plan.profit, plan.stop, plan.best, plan.vol),
        RestingOrder(
            side, o.contracts, o.price, o.age, o.urgency, o.magnitude, o.queue, o.volume, o.order_type
        ),
    )


def limit_events(
    before: Tensor,
    d: Decision,
    placed: Tensor,
    rested: Tensor,
    filled: Tensor,
    floored: Tensor,
    final: Tensor,
    ends: Tensor,
    live: Tensor,
) -> Tensor:
    """``[N, len(LIMIT_EVENTS)]`` int64: what the step did to limit orders, one column per
    :data:`~foxhunt.env.trades.LIMIT_EVENTS` event, from the resting order's side ``before`` the step,
    after :func:`execute` (``placed``), after :func:`fill_resting` (``rested``) and after
    :func:`close_out` (``final``), the resting fill (``filled``), the capital floor and ``ends`` (the
    episode's last step). Each order placed ends in exactly one of the other four, so over a whole
    episode ``placed = filled + expired + cancelled + open_at_end``::

        placed       a limit order was placed (live, something to trade, not a market order)
        filled       the resting order filled against row r1
        expired      it reached its patience unfilled and was dropped
        cancelled    the order resting before the step was replaced by a new one or cancelled by a
                     market order (+1), and the capital floor cancelled the one left (+1)
        open_at_end  an order still rests when the episode's last step ends (left unfilled)
    """

    def count(x: Tensor) -> Tensor:
        return (live & x).to(torch.int64)

    cancelled = count((before != 0) & (d.side != 0)) + count(floored & (rested != 0))
    events = {
        "placed": count((d.side != 0) & ~d.market),
        "filled": count(filled),
        "expired": count((placed != 0) & (rested == 0) & ~filled),
        "cancelled": cancelled,
        "open_at_end": count(ends & (final != 0)),
    }
    return torch.stack([events[k] for k in LIMIT_EVENTS], dim=1)


def settle(
    a: Account,
    trade: OpenTrade,
    closed: ClosedTrades,
    legs: tuple[Leg, Leg, Leg],
    equity: Tensor,
    costs: Tensor,
    hold: Tensor,
    live: Tensor,
) -> Account:
    """The account after the step: ``equity`` and ``costs`` ($, the step's), the closed trades
    ``[N, STAGES]`` counted (wins and losses per contract, for the Kelly fraction), and the open
    trade's running max/min of its gross - costs and the hold time at its peak (reset when flat)."""
    before, after = a.position, legs[-1].position
    win_NS = closed.closed & (closed.pnl > 0)
    lost_NS = closed.closed & (closed.pnl < 0)
    per_contract_NS = closed.pnl / torch.clamp(closed.size, min=1.0)
    # The trade open after the step is the one held into it only where nothing closed.
    continuing = (before != 0) & ~closed.closed.any(dim=1)
    trade_net = trade.gross - trade.costs  # the open trade's unrealised PnL after costs
    base_max = torch.where(continuing, a.trade_max, torch.zeros_like(a.trade_max))
    base_min = torch.where(continuing, a.trade_min, torch.zeros_like(a.trade_min))
    flat = after == 0
    new_max = torch.maximum(base_max, trade_net)
    peak_step = torch.where(
        trade_net >= base_max, hold, torch.where(continuing, a.peak_step, torch.zeros_like(a.peak_step))
    )
    traded = (legs[0].contracts != 0) | (legs[1].contracts != 0) | (legs[2].contracts != 0)
    return Account(
        position=torch.where(live, after, before),
        equity=equity,
        peak_equity=torch.maximum(a.peak_equity, equity),
        costs_paid=a.costs_paid + torch.where(live, costs, 0.0),
        hold_time=torch.where(flat, torch.zeros_like(hold), hold),
        trade_max=torch.where(flat, torch.zeros_like(new_max), new_max),
        trade_min=torch.where(flat, torch.zeros_like(new_max), torch.minimum(base_min, trade_net)),
        peak_step=torch.where(flat, torch.zeros_like(peak_step), peak_step),
        time_since_trade=torch.where(traded, torch.zeros_like(a.time_since_trade), a.time_since_trade + 1),
        n_trades=a.n_trades + closed.closed.sum(dim=1),
        n_wins=a.n_wins + win_NS.sum(dim=1),
        n_losses=a.n_losses + lost_NS.sum(dim=1),
        sum_win=a.sum_win + torch.where(win_NS, per_contract_NS, 0.0).sum(dim=1),
        sum_loss=a.sum_loss + torch.where(lost_NS, -per_contract_NS, 0.0).sum(dim=1),
    )


def pay(
    path: TradePath,
    risk: Risk,
    net: Tensor,
    closed: Tensor,
    before: Tensor,
    after: Tensor,
    live: Tensor,
    regime: Tensor,
    capital: float,
    params: RewardConfig,
) -> tuple[Tensor, Tensor, TradePath, Tensor]:
    """``(reward, components, path, regime_ema)`` of the step's ``net`` PnL ($).

    The trade held into the step (position ``before``) advances its path and, where it ``closed``,
    is paid its shaping terms; then a trade open after the step (``after``) that is new starts its
    path (this order handles a reversal in one step, :mod:`foxhunt.env.rewards`).
    """
    ema = regime_move_ema(risk.regime_ema, regime - risk.regime_prev, risk.regime_steps, params)
    regime_ema = torch.where(live, ema, risk.regime_ema)
    path = advance_trade(path, live & (before != 0), net, regime, regime_ema, params)
    reward, components = step_reward(net, closed, path, capital, params)
    reward = torch.where(live, reward, torch.zeros_like(reward))
    components = torch.where(live[:, None], components, torch.zeros_like(components))
    new_trade = live & (after != 0) & ((before == 0) | closed)
    path = open_trade(path, new_trade, torch.where(before == 0, net, torch.zeros_like(net)), regime)
    return reward, components, path, regime_ema


def update_risk(
    risk: Risk,
    regime_ema: Tensor,
    regime: Tensor,
    net: Tensor,
    equity: Tensor,
    live: Tensor,
    params: PositionSizingConfig,
) -> Risk:
    """The step's return ``net / equity before the step`` pushed into the ring, and the next step's
    CVaR factor computed from it here, where the ring changes (under torch.compile a factor computed
    at the start of the next step had Inductor fuse the whole decide stage into the ring's row
    reduction, run once per lane: about 10x slower than the rest of the step)."""
    ring, count = push_return(risk.returns_ring, risk.returns_count, net / torch.clamp(equity, min=1.0), live)
    return Risk(
        regime_prev=torch.where(live, regime, risk.regime_prev),
        regime_ema=regime_ema,
        regime_steps=risk.regime_steps + live.to(torch.int64),
        returns_ring=ring,
        returns_count=count,
        cvar=cvar_scale(ring, count, params),
    )
