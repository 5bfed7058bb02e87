"""The batched trading environment: N episodes stepped together as ``[N]`` tensors (SPEC §6).

One :class:`TradingEnv` steps N episodes over windows of consecutive rows of one fold's data
(:class:`~foxhunt.env.market.MarketTensors`), on the market's device. The same ``step`` and the
same state assembly serve training and evaluation; nothing inside ``step`` copies to the host.

A step at row ``r`` (the agent has seen rows <= r):

1. **Decide.** The action's four branches are decoded; while a plan is active the action is
   ignored (plan lock: the realised direction is Hold). Short/Long/Flat set a target exposure of
   ``sign x fraction x effective max position`` contracts; Hold trades nothing.
2. **Execute.** A market order fills now at row r's touch plus slippage (reference: mid[r]). A
   limit order rests (replacing any resting one) and is checked against each later row; it fills
   at its limit price when a row trades through it, or trades at it with more volume (summed since
   placement) than the queue displayed ahead of it at placement (costs.limit_fill; trade-through
   only where the book's sizes or the volume are unknown), or expires after its urgency's patience.
3. **Move.** The position held through r -> r+1 is marked to market: gross = pos x (mid[r+1] -
   mid[r]) x point value. Resting orders fill against row r+1 (reference: mid[r+1]).
4. **Exit.** A plan exits at row r+1 by profit, stop (trailing when configured) or timeout, as a
   market order at row r+1's touch; these are the outcome labels' classes, under the labels'
   convention (:mod:`foxhunt.validation.labels`): a plan opened in this step has its entry
   reference at row r+1's close and is first checked on row r+2. Equity below the capital floor
   flattens the position and ends the episode.
5. **Record.** Gross PnL, costs (fees + slippage vs the mark) and net PnL are separate. Every fill
   is booked in the trade ledger (:mod:`foxhunt.env.trades`): a fill that takes the position to 0
   or reverses it closes a trade, one that leaves 0 or reverses it opens one, so a round trip
   inside one step and both legs of a reversal are trades too. The step's closed trades
   (``[N, STAGES]``, one slot per fill) carry their net PnL, side, size, prices, rows and exit
   reason, and their PnL sums to the steps' net PnL.

Prices and money are float64 by default (``dtype``); the state handed to the agent is float32.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor

from foxhunt.env.actions import ActionCodec, Direction, OrderType
from foxhunt.env.config import EnvConfig
from foxhunt.env.costs import (
    Quote,
    limit_expired,
    limit_order,
    limit_price,
    market_order_quoted,
    queue_ahead,
    quote,
    volume_at_price,
)
from foxhunt.env.market import MarketTensors
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
from foxhunt.env.trades import ClosedTrades, ExitReason, OpenTrade, book_fill, by_stage, lean_record, mark
from foxhunt.features.layout import STATE_FEATURE_GROUPS, STATE_LAYOUT
from foxhunt.validation.labels import barrier_prices, barrier_touch

_HOLD, _FLAT, _MARKET = int(Direction.HOLD), int(Direction.FLAT), int(OrderType.MARKET)
_PROFIT, _STOP, _TIMEOUT = int(ExitReason.PROFIT), int(ExitReason.STOP), int(ExitReason.TIMEOUT)
_FLOOR, _WINDOW_END, _AGENT_CLOSE = (
    int(ExitReason.CAPITAL_FLOOR),
    int(ExitReason.WINDOW_END),
    int(ExitReason.AGENT_CLOSE),
)


@dataclass
class Portfolio:
    """Every per-episode quantity, as named ``[N]`` tensors (SPEC §6: never a flat offset list)."""

    row: Tensor  # int64 current row
    end: Tensor  # int64 last row the episode may reach
    done: Tensor  # bool
    position: Tensor  # signed contracts
    equity: Tensor  # $ (initial capital + cumulative net PnL)
    peak_equity: Tensor  # $
    costs_paid: Tensor  # $ cumulative
    hold_time: Tensor  # int64 rows in the current trade
    trade: OpenTrade  # the open trade in the ledger (its gross - costs: the unrealised PnL)
    trade_max: Tensor  # $ intra-trade maximum of the open trade's gross - costs
    trade_min: Tensor  # $ intra-trade minimum
    peak_step: Tensor  # int64 hold_time at the trade's PnL peak
    time_since_trade: Tensor  # int64 rows since the last fill
    n_trades: Tensor  # int64 closed trades (every close in the ledger)
    n_wins: Tensor  # int64
    sum_win: Tensor  # $
    sum_loss: Tensor  # $ (positive)
    plan_active: Tensor  # bool
    plan_dir: Tensor  # +1 long, -1 short
    plan_profit: Tensor  # price level
    plan_stop: Tensor  # price level (moves with the trailing stop)
    plan_best: Tensor  # best price since entry (for the trailing stop)
    plan_vol: Tensor  # per-row vol at entry (the entry regime)
    order_side: Tensor  # resting limit order: +1 buy, -1 sell, 0 none
    order_contracts: Tensor  # contracts (positive)
    order_price: Tensor  # limit price
    order_age: Tensor  # int64 rows resting
    order_urgency: Tensor  # int64
    order_magnitude: Tensor  # int64
    order_queue: Tensor  # contracts displayed ahead of the order when it was placed (NaN: unknown)
    order_volume: Tensor  # contracts traded at or through the order's price since it was placed
    trade_path: TradePath  # the open trade's path for the shaping terms (rewards module)
    regime_prev: Tensor  # regime value (log per-row vol) of the previous row
    regime_ema: Tensor  # adaptive |regime change| scale
    regime_steps: Tensor  # int64 changes folded into regime_ema
    returns_ring: Tensor  # [N, W] per-step net return ring buffer (CVaR sizing)
    returns_count: Tensor  # int64 returns pushed
    cvar: Tensor  # CVaR factor of returns_ring (sizing.cvar_scale), computed when a return is pushed


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

    def lean(self) -> StepResult:
        """This result without the trade ledger's detail: ``trades`` keeps ``closed`` and ``pnl``; its
        other fields and ``fills``, ``fill_price``, ``fill_costs`` are empty tensors. What training
        collection and the recorded-policy backtest read; returned by a compiled step
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
        last = self.market.rows - 1
        end = starts + self.cfg.episode_rows - 1 if ends is None else ends.to(self.device, torch.int64)
        end = torch.clamp(end, max=last)
        z = torch.zeros(n, dtype=self.dtype, device=self.device)
        zi = torch.zeros(n, dtype=torch.int64, device=self.device)
        capital = self.cfg.contract.initial_capital
        self.state = Portfolio(
            row=starts.clone(),
            end=end,
            done=starts >= end,
            position=z.clone(),
            equity=z + capital,
            peak_equity=z + capital,
            costs_paid=z.clone(),
            hold_time=zi.clone(),
            trade=OpenTrade.flat(n, device=self.device, dtype=self.dtype),
            trade_max=z.clone(),
            trade_min=z.clone(),
            peak_step=zi.clone(),
            time_since_trade=zi.clone(),
            n_trades=zi.clone(),
            n_wins=zi.clone(),
            sum_win=z.clone(),
            sum_loss=z.clone(),
            plan_active=torch.zeros(n, dtype=torch.bool, device=self.device),
            plan_dir=z.clone(),
            plan_profit=z.clone(),
            plan_stop=z.clone(),
            plan_best=z.clone(),
            plan_vol=z.clone(),
            order_side=z.clone(),
            order_contracts=z.clone(),
            order_price=z.clone(),
            order_age=zi.clone(),
            order_urgency=zi.clone(),
            order_magnitude=zi.clone(),
            order_queue=z.clone(),
            order_volume=z.clone(),
            trade_path=TradePath.zeros(n, device=self.device, dtype=self.dtype),
            regime_prev=self.regime[starts],
            regime_ema=z.clone(),
            regime_steps=zi.clone(),
            returns_ring=torch.zeros(n, self.cfg.sizing.cvar_window, dtype=self.dtype, device=self.device),
            returns_count=zi.clone(),
            cvar=z + 1.0,  # no returns yet: factor 1
        )
        self.aux = torch.zeros(n, STATE_LAYOUT.group("aux").width, dtype=torch.float32, device=self.device)
        return self.observe()

    def observe(self) -> Tensor:
        """The agent's state ``[N, STATE_LAYOUT.width]`` float32, assembled through the layout."""
        s = self._state()
        n = s.row.shape[0]
        obs = torch.zeros(n, STATE_LAYOUT.width, dtype=torch.float32, device=self.device)
        feats = self.market.features[s.row]  # [N, F] the row's normalised feature groups
        col = 0
        for name in STATE_FEATURE_GROUPS:
            g = STATE_LAYOUT.group(name)
            obs[:, g.slice] = feats[:, col : col + g.width]
            col += g.width
        obs[:, STATE_LAYOUT.group("portfolio").slice] = self._portfolio_slots(s)
        obs[:, STATE_LAYOUT.group("plan").slice] = self._plan_slots(s)
        obs[:, STATE_LAYOUT.group("aux").slice] = self.aux
        return obs

    def _state(self) -> Portfolio:
        if self.state is None:
            raise RuntimeError("call reset() before step() or observe()")
        return self.state

    def _portfolio_slots(self, s: Portfolio) -> Tensor:
        c = self.cfg.contract
        capital = c.initial_capital
        unreal = s.trade.gross - s.trade.costs
        slots = torch.stack(
            [
                s.position / c.max_position,
                unreal / (0.01 * capital),  # in % of capital
                s.hold_time.to(self.dtype) / self.cfg.plan.target_bars,
                s.trade_max / (0.01 * capital),
                s.trade_min / (0.01 * capital),
                (s.peak_equity - s.equity) / s.peak_equity,
                s.costs_paid / (0.001 * capital),
                torch.log1p(s.time_since_trade.to(self.dtype)),
            ],
            dim=1,
        )
        return torch.clamp(slots, -10.0, 10.0).to(torch.float32)

    def _plan_slots(self, s: Portfolio) -> Tensor:
        mid = self.market.mid[s.row]
        vol_px = torch.clamp(s.plan_vol, min=self.cfg.plan.min_vol) * mid
        active = s.plan_active.to(self.dtype)
        target = float(self.cfg.plan.target_bars)
        slots = torch.stack(
            [
                active,
                s.plan_dir * active,
                active * target / 100.0,
                active * torch.clamp((target - s.hold_time.to(self.dtype)) / target, 0.0, 1.0),
                active * (s.plan_profit - mid) / vol_px * s.plan_dir,
                active * (mid - s.plan_stop) / vol_px * s.plan_dir,
                active * s.plan_vol * 1e3,
            ],
            dim=1,
        )
        return torch.clamp(torch.nan_to_num(slots), -20.0, 20.0).to(torch.float32)

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
        """The pure step from ``s`` (no state change): ``(next portfolio, result)``; :meth:`step`'s maths."""
        return self._transition(s, actions, direction_conviction, magnitude_conviction, q_variance, ledger)

    def _transition(
        self,
        s: Portfolio,
        actions: Tensor,
        direction_conviction: Tensor | None,
        magnitude_conviction: Tensor | None,
        q_variance: Tensor | None,
        ledger: bool = True,
    ) -> tuple[Portfolio, StepResult]:
        """The pure transition: ``(portfolio, actions) -> (next portfolio, step result)``; without
        ``ledger`` the result is :meth:`StepResult.lean` and the ledger's detail is never computed."""
        m, cfg, c = self.market, self.cfg, self.cfg.contract
        ins = m.instrument  # tick grid and point value of the data's contract
        n = s.row.shape[0]
        one = torch.ones(n, dtype=self.dtype, device=self.device)
        d_conv = one if direction_conviction is None else direction_conviction.to(self.dtype)
        m_conv = one if magnitude_conviction is None else magnitude_conviction.to(self.dtype)
        q_var = torch.zeros_like(one) if q_variance is None else q_variance.to(self.dtype)
        live = ~s.done
        r, r1 = s.row, torch.clamp(s.row + 1, max=m.rows - 1)
        mid, mid1 = m.mid[r], m.mid[r1]
        q, q1 = self._quote(r), self._quote(r1)
        bid, ask = q.bid, q.ask

        # 1. Decide: plan lock, target exposure, sizing.
        direction, magnitude, order, urgency = actions.to(self.device).unbind(dim=1)  # codec branches
        locked = s.plan_active
        realised_dir = torch.where(locked | ~live, torch.full_like(direction, _HOLD), direction)
        conv = conviction(d_conv, cfg.sizing)
        magnitude_eff = torch.minimum(magnitude, self._kelly_cap(self._kelly(s, d_conv, m_conv)))
        eff_max = effective_max_position(  # Kelly applied once: through the magnitude cap above
            c.max_position,
            s.cvar,  # cvar_scale of the ring as the last step left it
            conv,
            1.0,
            variance_scale(q_var, conv),
        )
        frac = self.codec.target_exposure(
            realised_dir, magnitude_eff, s.position / torch.clamp(eff_max, min=1e-9)
        )
        target = torch.where(realised_dir == _HOLD, s.position, torch.round(frac * eff_max))
        delta = torch.where(live, target - s.position, torch.zeros_like(target))
        side = torch.sign(delta)
        is_market = (order == _MARKET) | (realised_dir == _FLAT)  # closing to flat is a market order

        # 2a. Market orders fill now at row r (reference mid[r]).
        mkt_side = torch.where(is_market, side, torch.zeros_like(side))
        # Where the raw book is unknown (q.known) the fill is modelled on the grid, inside [low, high].
        fill_now = market_order_quoted(
            mkt_side, delta.abs(), q, mid, urgency, cfg.costs, ins, m.low[r], m.high[r]
        )
        # 2b. A new limit order replaces the resting one.
        new_limit = live & ~is_market & (side != 0)
        lim_px = limit_price(side, order, bid, ask, ins.tick_size, book=q.known)
        order_side = torch.where(new_limit, side, s.order_side)
        order_contracts = torch.where(new_limit, delta.abs(), s.order_contracts)
        order_price = torch.where(new_limit, lim_px, s.order_price)
        order_age = torch.where(new_limit, torch.zeros_like(s.order_age), s.order_age)
        order_urgency = torch.where(new_limit, urgency, s.order_urgency)
        order_magnitude = torch.where(new_limit, magnitude_eff, s.order_magnitude)
        order_queue = torch.where(new_limit, self._queue_ahead(side, lim_px, r, q), s.order_queue)
        # A market order (or a Hold while flat) cancels a resting limit order.
        cancel = live & is_market & (side != 0)
        order_side = torch.where(cancel, torch.zeros_like(order_side), order_side)

        pos0 = s.position
        pos_a = pos0 + fill_now.contracts
        order_costs = fill_now.fees + fill_now.slippage_cost
        costs = order_costs
        agent_close = torch.full_like(s.hold_time, _AGENT_CLOSE)
        trade, closed_order = book_fill(
            s.trade, pos0, fill_now.contracts, fill_now.price, order_costs, r, magnitude_eff, agent_close,
            ledger,
        )

        # 3. Move to row r+1: mark to market, then resting limit orders against row r+1.
        gross = torch.where(live, pos_a * (mid1 - mid) * ins.point_value, torch.zeros_like(mid))
        trade = mark(trade, gross)
        resting = torch.where(live, order_side, torch.zeros_like(order_side))
        lo1, hi1 = m.low[r1], m.high[r1]
        row_volume = torch.full_like(mid, float("nan")) if m.volume is None else m.volume[r1]
        order_volume = torch.where(new_limit, torch.zeros_like(s.order_volume), s.order_volume)
        order_volume = order_volume + volume_at_price(resting, order_price, lo1, hi1, row_volume)
        lim = limit_order(
            resting, order_contracts, order_price, lo1, hi1, order_queue, order_volume, mid1, cfg.costs, ins
        )
        lim_filled, lim_contracts = lim.filled, lim.contracts
        pos_b = pos_a + lim_contracts
        lim_costs = lim.fees + lim.slippage_cost
        costs = costs + lim_costs
        trade, closed_resting = book_fill(
            trade, pos_a, lim_contracts, lim.price, lim_costs, r1, order_magnitude, agent_close, ledger
        )
        order_age = torch.where(order_side != 0, order_age + 1, order_age)
        expired = limit_expired(order_age, order_urgency, cfg.costs)
        order_side = torch.where(lim_filled | expired, torch.zeros_like(order_side), order_side)

        # A position opened or reversed starts a plan (volatility-scaled levels, SPEC §6).
        opened = (pos_b != 0) & ((pos0 == 0) | (torch.sign(pos_b) != torch.sign(pos0)))
        vol = self.vol[r1]
        entry = mid1
        pdir = torch.sign(pos_b)
        plan_active = torch.where(opened, torch.ones_like(s.plan_active), s.plan_active & (pos_b != 0))
        plan_dir = torch.where(opened, pdir, s.plan_dir)
        profit_px, stop_px = barrier_prices(entry, vol, cfg.plan.profit_mult, cfg.plan.stop_mult, pdir)
        plan_profit = torch.where(opened, profit_px, s.plan_profit)
        plan_stop = torch.where(opened, stop_px, s.plan_stop)
        plan_best = torch.where(opened, entry, s.plan_best)
        plan_vol = torch.where(opened, vol, s.plan_vol)
        hold = torch.where(opened, torch.zeros_like(s.hold_time), s.hold_time + (pos_b != 0).to(torch.int64))

        # 4. Exits at row r+1: profit, stop (trailing), timeout; then the capital floor.
        # The triple barrier's convention (foxhunt.validation.labels): a plan opened this step takes
        # its entry reference at row r+1's close, so row r+1's range (traded before that close) is
        # neither checked nor folded into the best price; the first check is the next step's row.
        # ``hold`` counts rows since the entry reference: the timeout exits at entry + target_bars.
        checked = plan_active & ~opened
        hi, lo = m.high[r1], m.low[r1]
        best = torch.where(plan_dir > 0, torch.maximum(plan_best, hi), torch.minimum(plan_best, lo))
        plan_best = torch.where(checked, best, plan_best)
        if cfg.plan.trailing_mult > 0:
            trail = plan_best * (1 - plan_dir * cfg.plan.trailing_mult * plan_vol)
            better = torch.where(plan_dir > 0, trail > plan_stop, trail < plan_stop)
            plan_stop = torch.where(checked & better, trail, plan_stop)
        long_profit, long_stop = barrier_touch(hi, lo, plan_profit, plan_stop, 1)
        short_profit, short_stop = barrier_touch(hi, lo, plan_profit, plan_stop, -1)
        hit_profit = checked & torch.where(plan_dir > 0, long_profit, short_profit)
        hit_stop = checked & torch.where(plan_dir > 0, long_stop, short_stop)
        timeout = checked & (hold >= cfg.plan.target_bars)
        exit_reason = torch.zeros_like(s.hold_time)
        exit_reason = torch.where(timeout, torch.full_like(exit_reason, _TIMEOUT), exit_reason)
        exit_reason = torch.where(hit_profit, torch.full_like(exit_reason, _PROFIT), exit_reason)
        # The stop wins ties.
        exit_reason = torch.where(hit_stop, torch.full_like(exit_reason, _STOP), exit_reason)
        equity_b = s.equity + gross - costs
        floor = live & (equity_b < cfg.contract.capital_floor * c.initial_capital)
        exit_reason = torch.where(floor, torch.full_like(exit_reason, _FLOOR), exit_reason)
        # The episode's last row closes whatever is open, so every trade is accounted for.
        last = live & (r1 >= s.end) & (exit_reason == 0)
        exit_reason = torch.where(last, torch.full_like(exit_reason, _WINDOW_END), exit_reason)
        exiting = live & (exit_reason > 0) & (pos_b != 0)
        exit_fill = market_order_quoted(
            torch.where(exiting, -torch.sign(pos_b), torch.zeros_like(pos_b)),
            pos_b.abs(),
            q1,
            mid1,
            torch.zeros_like(urgency),
            cfg.costs,
            ins,
            lo1,
            hi1,
        )
        pos_c = pos_b + exit_fill.contracts
        exit_costs = exit_fill.fees + exit_fill.slippage_cost
        costs = costs + exit_costs
        no_open = torch.full_like(s.trade.magnitude, -1)  # an exit opens nothing
        trade, closed_exit = book_fill(
            trade, pos_b, exit_fill.contracts, exit_fill.price, exit_costs, r1, no_open, exit_reason, ledger
        )
        plan_active = plan_active & ~exiting
        order_side = torch.where(floor, torch.zeros_like(order_side), order_side)

        # 5. Accounting: trades, equity, the record.
        net = gross - costs
        trades = by_stage([closed_order, closed_resting, closed_exit], ledger)  # [N, STAGES]
        win_NS = trades.closed & (trades.pnl > 0)
        lost_NS = trades.closed & (trades.pnl < 0)
        per_contract_NS = trades.pnl / torch.clamp(trades.size, min=1.0)
        # `closed`: the trade held into the step closed (the shaping terms are paid on it). The trade
        # open after the step is that same trade only where nothing closed.
        any_closed = trades.closed.any(dim=1)
        closed = live & (pos0 != 0) & any_closed
        continuing = (pos0 != 0) & ~any_closed
        trade_net = trade.gross - trade.costs  # the open trade's unrealised PnL after costs
        base_max = torch.where(continuing, s.trade_max, torch.zeros_like(s.trade_max))
        base_min = torch.where(continuing, s.trade_min, torch.zeros_like(s.trade_min))
        reset_trade = pos_c == 0
        new_max = torch.maximum(base_max, trade_net)
        peak_step = torch.where(
            trade_net >= base_max, hold, torch.where(continuing, s.peak_step, torch.zeros_like(s.peak_step))
        )
        traded = (fill_now.contracts != 0) | (lim_contracts != 0) | (exit_fill.contracts != 0)
        equity = torch.where(live, equity_b - exit_costs, s.equity)
        # Rewards: advance the held trade, pay the step (and the shaping terms on a close), then
        # open the new trade's path (rewards module: this order handles a reversal in one step).
        regime = self.regime[r1]
        regime_ema = torch.where(
            live,
            regime_move_ema(s.regime_ema, regime - s.regime_prev, s.regime_steps, cfg.rewards),
            s.regime_ema,
        )
        holding = live & (pos0 != 0)
        path = advance_trade(s.trade_path, holding, net, regime, regime_ema, cfg.rewards)
        reward, components = step_reward(net, closed, path, c.initial_capital, cfg.rewards)
        reward = torch.where(live, reward, torch.zeros_like(reward))
        components = torch.where(live[:, None], components, torch.zeros_like(components))
        new_trade = live & (pos_c != 0) & ((pos0 == 0) | closed)
        path = open_trade(path, new_trade, torch.where(pos0 == 0, net, torch.zeros_like(net)), regime)
        step_return = net / torch.clamp(s.equity, min=1.0)
        ring, count = push_return(s.returns_ring, s.returns_count, step_return, live)
        # The next step's CVaR factor, computed here from the updated ring: the row reduction then
        # feeds only this field. (Computed at the start of the step under torch.compile, Inductor
        # fused the whole decide stage into the reduction kernel, where it ran once per lane of a
        # row: about 10x slower than the rest of the step together.)
        cvar = cvar_scale(ring, count, cfg.sizing)
        if ledger:
            fills = torch.stack([fill_now.contracts, lim_contracts, exit_fill.contracts], dim=1)
            fill_price = torch.stack([fill_now.price, lim.price, exit_fill.price], dim=1)
            fill_costs = torch.stack([order_costs, lim_costs, exit_costs], dim=1)
        else:
            fills = fill_price = fill_costs = mid.new_empty(0)
        result = StepResult(
            gross=torch.where(live, gross, 0.0),
            costs=torch.where(live, costs, 0.0),
            net=torch.where(live, net, 0.0),
            reward=reward,
            written=live,
            picked=torch.where(live[:, None], actions.to(self.device), -1),
            realised_direction=torch.where(live, realised_dir, -1),
            realised_magnitude=torch.where(live, magnitude_eff, -1),
            trades=trades,
            fills=fills,
            fill_price=fill_price,
            fill_costs=fill_costs,
            exit_reason=torch.where(live, exit_reason, 0),
            components=components,
        )
        if not ledger:
            result = result.lean()
        row = torch.where(live, r + 1, r)
        new = Portfolio(
            row=row,
            end=s.end,
            done=s.done | floor | (row >= s.end),
            position=torch.where(live, pos_c, s.position),
            equity=equity,
            peak_equity=torch.maximum(s.peak_equity, equity),
            costs_paid=s.costs_paid + torch.where(live, costs, 0.0),
            hold_time=torch.where(pos_c == 0, torch.zeros_like(hold), hold),
            trade=trade,
            trade_max=torch.where(reset_trade, torch.zeros_like(new_max), new_max),
            trade_min=torch.where(reset_trade, torch.zeros_like(new_max), torch.minimum(base_min, trade_net)),
            peak_step=torch.where(reset_trade, torch.zeros_like(peak_step), peak_step),
            time_since_trade=torch.where(
                traded, torch.zeros_like(s.time_since_trade), s.time_since_trade + 1
            ),
            n_trades=s.n_trades + trades.closed.sum(dim=1),
            n_wins=s.n_wins + win_NS.sum(dim=1),
            sum_win=s.sum_win + torch.where(win_NS, per_contract_NS, 0.0).sum(dim=1),
            sum_loss=s.sum_loss + torch.where(lost_NS, -per_contract_NS, 0.0).sum(dim=1),
            plan_active=plan_active & (pos_c != 0),
            plan_dir=plan_dir,
            plan_profit=plan_profit,
            plan_stop=plan_stop,
            plan_best=plan_best,
            plan_vol=plan_vol,
            order_side=order_side,
            order_contracts=order_contracts,
            order_price=order_price,
            order_age=order_age,
            order_urgency=order_urgency,
            order_magnitude=order_magnitude,
            order_queue=order_queue,
            order_volume=order_volume,
            trade_path=path,
            regime_prev=torch.where(live, regime, s.regime_prev),
            regime_ema=regime_ema,
            regime_steps=s.regime_steps + live.to(torch.int64),
            returns_ring=ring,
            returns_count=count,
            cvar=cvar,
        )
        return new, result

    def _quote(self, r: Tensor) -> Quote:
        return Quote(self.quotes.bid[r], self.quotes.ask[r], self.quotes.known[r])

    def _queue_ahead(self, side: Tensor, price: Tensor, r: Tensor, q: Quote) -> Tensor:
        """Queue displayed ahead of a limit order placed at ``price`` on row ``r`` (NaN: unknown)."""
        m = self.market
        if m.bid_size is None or m.ask_size is None:
            return torch.full_like(price, float("nan"))  # no sizes: trade-through only
        return queue_ahead(side, price, q.bid, q.ask, m.bid_size[r], m.ask_size[r], known=q.known)

    def _kelly(self, s: Portfolio, d_conv: Tensor, m_conv: Tensor) -> Tensor:
        losses = s.n_trades - s.n_wins
        return kelly_fraction(
            s.n_wins,
            losses,
            s.sum_win,
            s.sum_loss,
            s.n_trades,
            d_conv,
            m_conv,
            s.equity,
            float(self.cfg.contract.max_position),
            self.cfg.sizing,
        )

    def _kelly_cap(self, kelly: Tensor) -> Tensor:
        return kelly_cap_by_magnitude(kelly, self.cfg.branches.magnitude_fractions)

    def portfolio_fields(self) -> list[str]:
        return [f.name for f in fields(Portfolio)]
