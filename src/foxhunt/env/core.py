"""The batched trading environment: N episodes stepped together as ``[N]`` tensors (docs/design.md §5).

One :class:`TradingEnv` steps N episodes over windows of consecutive rows of one fold's data
(:class:`~foxhunt.env.market.MarketTensors`), on the market's device. The same ``step`` and the
same state assembly serve training and evaluation; nothing inside ``step`` copies to the host.

A step at row ``r`` (the agent has seen rows <= r) is a sequence of pure steps
(:mod:`foxhunt.env.transition`, each hand-tested in ``tests/env/test_transition.py``):

1. **Decide.** The action's four branches are decoded; while a plan is active the action is
   ignored (plan lock: the realised direction is Hold). Short/Long/Flat set a target exposure of
   ``sign x fraction x effective max position`` contracts; Hold trades nothing.
2. **Execute.** A market order fills now at row r's touch plus slippage (reference: mid[r]). A
   limit order rests (replacing any resting one) and is checked against each later row; it fills
   at its limit price when a row trades through it, or trades at it with more volume (summed since
   placement) than the queue displayed ahead of it at placement (costs.limit_fill; trade-through
   only where the book's sizes or the volume are unknown), or expires after its urgency's patience.
3. **Mark.** The position held through r -> r+1 is marked to market: gross = pos x (mid[r+1] -
   mid[r]) x point value. Resting orders fill against row r+1 (reference: mid[r+1]).
4. **Exit.** A plan exits at row r+1 by profit, stop (trailing when configured) or timeout, as a
   market order at row r+1's touch; these are the outcome labels' classes, under the labels'
   convention (:mod:`foxhunt.domain.barrier`): a plan opened in this step has its entry
   reference at row r+1's close and is first checked on row r+2. Equity below the capital floor
   flattens the position and ends the episode.
5. **Account.** Gross PnL, costs (fees + slippage vs the mark) and net PnL are separate. Every fill
   is booked in the trade ledger (:mod:`foxhunt.env.trades`): a fill that takes the position to 0
   or reverses it closes a trade, one that leaves 0 or reverses it opens one, so a round trip
   inside one step and both legs of a reversal are trades too. The step's closed trades
   (``[N, STAGES]``, one slot per fill) carry their net PnL, side, size, prices, rows and exit
   reason, and their PnL sums to the steps' net PnL.

The state is a :class:`~foxhunt.env.state.Portfolio`; the agent sees it through the layout, the
portfolio and plan slots scaled as :data:`~foxhunt.features.layout.STATE_SPEC` declares
(:mod:`foxhunt.env.observe`). Prices and money are float64 by default (``dtype``); the state
handed to the agent is float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from foxhunt.domain.actions import ActionCodec
from foxhunt.env.config import EnvConfig
from foxhunt.env.costs import Quote, quote
from foxhunt.env.market import MarketTensors
from foxhunt.env.observe import clamp_bounds, plan_values, portfolio_values, scale_group, unit_values
from foxhunt.env.rewards import TradePath
from foxhunt.env.state import Account, Plan, Portfolio, RestingOrder, Risk
from foxhunt.env.trades import ClosedTrades, OpenTrade, by_stage, lean_record
from foxhunt.env.transition import (
    Decision,
    Leg,
    StepRows,
    check_barriers,
    close_out,
    decide,
    execute,
    exit_position,
    fill_resting,
    forced_exits,
    limit_events,
    mark_position,
    open_plan,
    pay,
    settle,
    update_risk,
)
from foxhunt.features.layout import STATE_FEATURE_GROUPS, STATE_LAYOUT, STATE_SPEC


@dataclass
class StepResult:
    """What one step produced, per episode (``[N]``); the backtester records these."""

    gross: Tensor
    costs: Tensor
    net: Tensor
    reward: Tensor
    written: Tensor  # bool: the episode was live at this step
    picked: Tensor  # [N, 4] int64 branch choices
    realised_direction: Tensor  # int64 direction after the plan lock
    realised_magnitude: Tensor  # int64 magnitude after the Kelly cap
    trades: ClosedTrades  # [N, STAGES] the trades this step closed, one slot per fill stage
    fills: Tensor  # [N, STAGES] signed contracts of the step's fills (FillStage order: order, resting, exit)
    fill_price: Tensor  # [N, STAGES] their prices (the reference where nothing filled)
    fill_costs: Tensor  # [N, STAGES] $ their fees + slippage against the reference
    exit_reason: Tensor  # int64 ExitReason of the forced exit at row r+1 (0 none, 1-5)
    components: Tensor  # [N, len(COMPONENTS)] reward terms (pnl, entry, exit timing, ...)
    limit_orders: Tensor  # [N, len(LIMIT_EVENTS)] int64 limit-order events (transition.limit_events)

    def lean(self) -> StepResult:
        """This result without the trade ledger's detail: ``trades`` keeps ``closed`` and ``pnl``; its
        other fields and ``fills``, ``fill_price``, ``fill_costs``, ``limit_orders`` are empty tensors.
        What training collection and the recorded-policy backtest read; returned by a compiled step
        (:func:`foxhunt.env.graph.advance` with ``ledger=False``) it lets Inductor drop the ten
        ``[N, STAGES]`` ledger outputs and the stores of their intermediates (bench/env.py)."""
        t = self.trades
        empty = t.pnl.new_empty(0)
        return StepResult(
            gross=self.gross,
            costs=self.costs,
            net=self.net,
            reward=self.reward,
            written=self.written,
            picked=self.picked,
            realised_direction=self.realised_direction,
            realised_magnitude=self.realised_magnitude,
            trades=lean_record(t.closed, t.pnl, empty),
            fills=empty,
            fill_price=empty,
            fill_costs=empty,
            exit_reason=self.exit_reason,
            components=self.components,
            limit_orders=torch.empty(0, dtype=torch.int64, device=empty.device),
        )


class TradingEnv:
    """N episodes over ``market``; ``starts`` [N] are the first rows, ``episode_rows`` long."""

    def __init__(self, market: MarketTensors, cfg: EnvConfig) -> None:
        self.cfg = cfg
        self.market = market  # after cfg: the setter builds the per-row tables from both
        self.codec = ActionCodec(cfg.branches)
        self.device = market.device
        self.dtype = market.mid.dtype
        # Fill the codec's per-device cache now: filling it inside the first compiled step would
        # change a guard and make torch.compile recompile the whole transition once more.
        self.codec.fractions(self.device, self.dtype)
        # The state spec's units under this config and its clamp bounds, resolved once (observe()
        # then allocates nothing but its output).
        self.units = unit_values(cfg)
        self.bounds = {
            g.name: clamp_bounds(g, device=self.device, dtype=self.dtype) for g in STATE_SPEC.env_groups
        }
        self.state: Portfolio | None = None
        self.aux = None  # [N, aux width] written by the agent (one-step-lagged predictions)

    @property
    def market(self) -> MarketTensors:
        return self._market

    @market.setter
    def market(self, market: MarketTensors) -> None:
        """Set the market and the per-row tables the step gathers from. Computed once per market row
        rather than for the step's rows on every step: the effective quote and whether the book is
        known (eleven operators, needed on rows r and r+1 by four callers), the volatility floored at
        ``plan.min_vol`` and its log, the regime (serve swaps the market in place: hence a setter)."""
        self._market = market
        self.quotes = quote(market.bid, market.ask, market.mid, self.cfg.costs, market.instrument.tick_size)
        self.vol = torch.clamp(market.vol, min=self.cfg.plan.min_vol)
        self.regime = torch.log(self.vol)

    # --- reset and state -------------------------------------------------------------------

    def reset(self, starts: Tensor, ends: Tensor | None = None) -> Tensor:
        """Start episodes at rows ``starts`` (each runs to ``ends`` or ``episode_rows`` rows)."""
        starts = starts.to(self.device, torch.int64)
        n = starts.shape[0]
        end = starts + self.cfg.episode_rows - 1 if ends is None else ends.to(self.device, torch.int64)
        end = torch.clamp(end, max=self.market.rows - 1)
        dev, dt = self.device, self.dtype
        self.state = Portfolio(
            row=starts.clone(),
            end=end,
            done=starts >= end,
            account=Account.fresh(n, self.cfg.contract.initial_capital, device=dev, dtype=dt),
            order=RestingOrder.none(n, device=dev, dtype=dt),
            plan=Plan.none(n, device=dev, dtype=dt),
            risk=Risk.fresh(self.regime[starts], self.cfg.sizing.cvar_window, dtype=dt),
            trade=OpenTrade.flat(n, device=dev, dtype=dt),
            path=TradePath.zeros(n, device=dev, dtype=dt),
        )
        self.aux = torch.zeros(n, STATE_LAYOUT.group("aux").width, dtype=torch.float32, device=self.device)
        return self.observe()

    def observe(self) -> Tensor:
        """The agent's state ``[N, STATE_LAYOUT.width]`` float32, assembled through the state spec:
        the row's feature groups, the portfolio and plan slots scaled and clamped, the aux inputs."""
        s = self._state()
        obs = torch.zeros(s.row.shape[0], STATE_LAYOUT.width, dtype=torch.float32, device=self.device)
        feats = self.market.features[s.row]  # [N, F] the row's normalised feature groups
        col = 0
        for name in STATE_FEATURE_GROUPS:
            g = STATE_LAYOUT.group(name)
            obs[:, g.slice] = feats[:, col : col + g.width]
            col += g.width
        plan = self.cfg.plan
        values = {
            "portfolio": portfolio_values(s),
            "plan": plan_values(s, self.market.mid[s.row], plan.barrier.horizon, plan.min_vol),
        }
        for spec in STATE_SPEC.env_groups:  # float64 slots rounded to float32 by the copy
            scaled = scale_group(values[spec.name], spec, self.units, self.bounds[spec.name])
            obs[:, STATE_LAYOUT.group(spec.name).slice] = scaled
        obs[:, STATE_LAYOUT.group("aux").slice] = self.aux
        return obs

    def _state(self) -> Portfolio:
        if self.state is None:
            raise RuntimeError("call reset() before step() or observe()")
        return self.state

    # --- the step --------------------------------------------------------------------------

    def step(
        self,
        actions: Tensor,
        direction_conviction: Tensor | None = None,
        magnitude_conviction: Tensor | None = None,
        q_variance: Tensor | None = None,
        ledger: bool = True,
    ) -> tuple[Tensor, StepResult]:
        """Advance every live episode one row. ``actions`` ``[N, 4]`` int64 branch indices.

        Convictions (Q-gaps) and the Q-variance come from the policy; scripted policies pass None
        (neutral: conviction 1, variance 0). Returns ``(next state [N, W], StepResult)``; without
        ``ledger`` the result is :meth:`StepResult.lean`, and the step skips the ledger's work.
        """
        new, result = self.transition(
            self._state(), actions, direction_conviction, magnitude_conviction, q_variance, ledger
        )
        self.state = new
        return self.observe(), result

    def transition(
        self,
        s: Portfolio,
        actions: Tensor,
        direction_conviction: Tensor | None = None,
        magnitude_conviction: Tensor | None = None,
        q_variance: Tensor | None = None,
        ledger: bool = True,
    ) -> tuple[Portfolio, StepResult]:
        """The pure step from ``s`` (no state change): ``(next portfolio, result)``; :meth:`step`'s
        maths, composed of :mod:`foxhunt.env.transition`'s steps. Without ``ledger`` the result is
        :meth:`StepResult.lean` and the ledger's detail is never computed."""
        cfg, ins, a = self.cfg, self.market.instrument, s.account
        one = torch.ones(s.row.shape[0], dtype=self.dtype, device=self.device)
        d_conv = one if direction_conviction is None else direction_conviction.to(self.dtype)
        m_conv = one if magnitude_conviction is None else magnitude_conviction.to(self.dtype)
        q_var = torch.zeros_like(one) if q_variance is None else q_variance.to(self.dtype)
        live, rows, actions = ~s.done, self._rows(s.row), actions.to(self.device)

        d = decide(s, actions, live, d_conv, m_conv, q_var, self.codec, cfg)
        placed, trade, now = execute(s, d, rows, live, cfg.costs, ins, ledger)
        gross, trade = mark_position(trade, now.position, rows, live, ins.point_value)
        rested, trade, resting = fill_resting(placed, trade, now.position, rows, live, cfg.costs, ins, ledger)
        plan, opened, hold = open_plan(
            s.plan, a.position, resting.position, a.hold_time, rows.mid1, rows.vol1, cfg.plan
        )
        plan, reason = check_barriers(plan, opened, hold, rows.high1, rows.low1, cfg.plan)
        costs = now.costs + resting.costs
        equity = a.equity + gross - costs  # before the exit's costs: what the capital floor checks
        floor = cfg.contract.capital_floor * cfg.contract.initial_capital
        reason, floored = forced_exits(reason, equity, live, rows.r1, s.end, floor)
        trade, out, exiting = exit_position(
            trade, resting.position, reason, live, rows, cfg.costs, ins, ledger
        )
        plan, order = close_out(plan, rested, exiting, floored, out.position)

        legs = (now, resting, out)
        costs = costs + out.costs
        net = gross - costs
        closed = by_stage([leg.closed for leg in legs], ledger)  # [N, STAGES]
        # The trade held into the step closed: its shaping terms are paid (rewards module).
        held_closed = live & (a.position != 0) & closed.closed.any(dim=1)
        equity = torch.where(live, equity - out.costs, a.equity)
        account = settle(a, trade, closed, legs, equity, costs, hold, live)
        reward, components, path, regime_ema = pay(
            s.path,
            s.risk,
            net,
            held_closed,
            a.position,
            out.position,
            live,
            rows.regime1,
            cfg.contract.initial_capital,
            cfg.rewards,
        )
        risk = update_risk(s.risk, regime_ema, rows.regime1, net, a.equity, live, cfg.sizing)
        row = torch.where(live, rows.r + 1, rows.r)
        done = s.done | floored | (row >= s.end)
        new = Portfolio(row, s.end, done, account, order, plan, risk, trade, path)
        money = (gross, costs, net, reward, components)
        limits = None
        if ledger:  # what the step did to limit orders, for the execution summary
            limits = limit_events(
                s.order.side,
                d,
                placed.side,
                rested.side,
                resting.contracts != 0,
                floored,
                order.side,
                row >= s.end,
                live,
            )
        return new, _record(live, actions, d, money, closed, reason, legs, limits)

    def _rows(self, r: Tensor) -> StepRows:
        """The market values the step at rows ``r`` reads (:class:`~foxhunt.env.transition.StepRows`)."""
        m, q = self.market, self.quotes
        r1 = torch.clamp(r + 1, max=m.rows - 1)
        mid = m.mid[r]
        sizes = m.bid_size is not None and m.ask_size is not None
        return StepRows(
            r=r,
            r1=r1,
            mid=mid,
            mid1=m.mid[r1],
            quote=Quote(q.bid[r], q.ask[r], q.known[r]),
            quote1=Quote(q.bid[r1], q.ask[r1], q.known[r1]),
            low=m.low[r],
            high=m.high[r],
            low1=m.low[r1],
            high1=m.high[r1],
            volume1=torch.full_like(mid, float("nan")) if m.volume is None else m.volume[r1],
            bid_size=m.bid_size[r] if sizes else None,  # type: ignore[index]
            ask_size=m.ask_size[r] if sizes else None,  # type: ignore[index]
            vol1=self.vol[r1],
            regime1=self.regime[r1],
        )


def _record(
    live: Tensor,
    actions: Tensor,
    d: Decision,
    money: tuple[Tensor, Tensor, Tensor, Tensor, Tensor],
    closed: ClosedTrades,
    reason: Tensor,
    legs: tuple[Leg, Leg, Leg],
    limits: Tensor | None,
) -> StepResult:
    """The step's :class:`StepResult` (``money``: gross, costs, net, reward, components), 0 or -1
    where the episode was over; :meth:`StepResult.lean` without the ledger (``limits`` None: no
    limit-order events, :func:`~foxhunt.env.transition.limit_events`)."""
    gross, costs, net, reward, components = money
    ledger = limits is not None
    if ledger:  # the fills [N, STAGES] in FillStage order
        fills = torch.stack([leg.contracts for leg in legs], dim=1)
        fill_price = torch.stack([leg.price for leg in legs], dim=1)
        fill_costs = torch.stack([leg.costs for leg in legs], dim=1)
    else:
        fills = fill_price = fill_costs = gross.new_empty(0)
    result = StepResult(
        gross=torch.where(live, gross, 0.0),
        costs=torch.where(live, costs, 0.0),
        net=torch.where(live, net, 0.0),
        reward=reward,
        written=live,
        picked=torch.where(live[:, None], actions, -1),
        realised_direction=torch.where(live, d.direction, -1),
        realised_magnitude=torch.where(live, d.magnitude, -1),
        trades=closed,
        fills=fills,
        fill_price=fill_price,
        fill_costs=fill_costs,
        exit_reason=torch.where(live, reason, 0),
        components=components,
        limit_orders=limits if limits is not None else torch.empty(0, dtype=torch.int64, device=gross.device),
    )
    return result if ledger else result.lean()
