"""Each step of the transition on 2-3 hand-made episodes, the expected numbers worked out by hand.

Market (tests/env/test_core.py): ES (tick 0.25, $50 a point), bid/ask = mid -/+ 0.125, $1 commission
per contract, no size slippage; max position 2, capital $100,000, plan horizon 2 rows.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from foxhunt.domain.actions import Direction, OrderType, Urgency
from foxhunt.domain.exits import ExitReason
from foxhunt.env.core import TradingEnv
from foxhunt.env.state import Portfolio
from foxhunt.env.trades import OpenTrade, lean_record
from foxhunt.env.transition import (
    Decision,
    Leg,
    check_barriers,
    close_out,
    decide,
    execute,
    exit_position,
    fill_resting,
    forced_exits,
    mark_position,
    open_plan,
    pay,
    settle,
    update_risk,
)
from tests.env.test_core import config, market

L, S, H, F = (int(d) for d in (Direction.LONG, Direction.SHORT, Direction.HOLD, Direction.FLAT))
MKT, TOUCH = int(OrderType.MARKET), int(OrderType.LIMIT_AT_TOUCH)
NORMAL, IMMEDIATE = int(Urgency.NORMAL), int(Urgency.IMMEDIATE)
f64, i64 = torch.float64, torch.int64


def t(*x: float) -> torch.Tensor:
    return torch.tensor(x, dtype=f64)


def ti(*x: int) -> torch.Tensor:
    return torch.tensor(x, dtype=i64)


def tb(*x: bool) -> torch.Tensor:
    return torch.tensor(x)


def _env(n: int = 3, mid=(100.0, 101.0, 102.0, 103.0), plan=None, **kw) -> tuple[TradingEnv, Portfolio]:
    env = TradingEnv(market(list(mid), **kw), config(**(plan or {})))
    env.reset(torch.zeros(n, dtype=i64))
    return env, env._state()


def _with(p: Portfolio, **parts: dict[str, torch.Tensor]) -> Portfolio:
    """``p`` with fields of its parts replaced: ``_with(p, account={"position": ...})``."""
    return replace(p, **{name: replace(getattr(p, name), **fields) for name, fields in parts.items()})


def test_decide_locks_sizes_and_closes_by_market() -> None:
    """env 0: Long, magnitude 0 (half of max 2) -> buy 1 at market; env 1: the same under an active
    plan -> Hold, nothing; env 2: holding 2, Flat with a limit order -> sell 2, by market order."""
    env, p = _env()
    p = _with(p, account={"position": t(0, 0, 2)}, plan={"active": tb(False, True, False)})
    actions = ti(L, 0, MKT, NORMAL, L, 0, MKT, NORMAL, F, 1, TOUCH, NORMAL).reshape(3, 4)
    one = t(1, 1, 1)
    d = decide(p, actions, tb(True, True, True), one, one, t(0, 0, 0), env.codec, env.cfg)
    assert d.direction.tolist() == [L, H, F]
    assert d.delta.tolist() == [1.0, 0.0, -2.0] and d.side.tolist() == [1.0, 0.0, -1.0]
    assert d.market.tolist() == [True, True, True]  # closing to flat is a market order
    # an episode that is over decides nothing
    d = decide(p, actions, tb(False, True, True), one, one, t(0, 0, 0), env.codec, env.cfg)
    assert d.direction.tolist()[0] == H and d.delta.tolist()[0] == 0.0


def _decision(delta, market_, order=(MKT, MKT, MKT), urgency=(NORMAL, NORMAL, NORMAL)) -> Decision:
    delta = t(*delta)
    n = len(order)
    side = torch.sign(delta)
    return Decision(ti(*[L] * n), ti(*[1] * n), delta, side, tb(*market_), ti(*order), ti(*urgency))


def test_execute_fills_at_market_places_and_cancels_limits() -> None:
    """Row 0: mid 100, bid 99.875, ask 100.125.
    env 0: market buy 2 at 100.125: slippage 2 x 0.125 x $50 = 12.5, fees 2 -> costs 14.5.
    env 1: limit buy 1 at the touch: rests at the bid 99.875 (no sizes: queue unknown), no fill.
    env 2: market buy 1 while a sell limit rests: fills at 100.125 (6.25 + 1 = 7.25), cancels it."""
    env, p = _env()
    p = _with(p, order={"side": t(0, 0, -1), "price": t(0, 0, 101.0), "contracts": t(0, 0, 1)})
    d = _decision((2, 1, 1), (True, False, True), order=(MKT, TOUCH, MKT))
    live = tb(True, True, True)
    ins = env.market.instrument
    order, trade, leg = execute(p, d, env._rows(p.row), live, env.cfg.costs, ins, True)
    assert leg.contracts.tolist() == [2.0, 0.0, 1.0] and leg.position.tolist() == [2.0, 0.0, 1.0]
    assert leg.price.tolist() == [100.125, 100.0, 100.125]  # the reference where nothing filled
    assert leg.costs.tolist() == [14.5, 0.0, 7.25]
    assert order.side.tolist() == [0.0, 1.0, 0.0]
    assert order.price.tolist()[1] == 99.875 and order.contracts.tolist()[1] == 1.0
    assert torch.isnan(order.queue[1]) and order.age.tolist() == [0, 0, 0]
    assert trade.side.tolist() == [1.0, 0.0, 1.0] and trade.costs.tolist() == [14.5, 0.0, 7.25]


def test_mark_position_is_position_times_the_move() -> None:
    """mid 100 -> 101: position 2 earns 2 x 1 x $50 = 100; -1 loses 50 (but env 2 is not live: 0)."""
    env, p = _env()
    gross, trade = mark_position(p.trade, t(2, 0, -1), env._rows(p.row), tb(True, True, False), 50.0)
    assert gross.tolist() == [100.0, 0.0, 0.0] and trade.gross.tolist() == [100.0, 0.0, 0.0]


def test_fill_resting_through_at_price_and_expiry() -> None:
    """Row 1: mid 101, low 100.5, high 101.5.
    env 0: buy 1 at 100.75, traded through (low 100.5): fills at 100.75 against the mark 101, slippage
    1 x (100.75 - 101) x $50 = -12.5, fees 1 -> costs -11.5; the order is gone.
    env 1: buy 1 at 100.5 = the low, queue unknown: no fill; age 1 < patience 2 (Normal): rests.
    env 2: sell 1 at 102 above the high, age 1, Immediate (patience 1): age 2, expired."""
    mid = (100.0, 101.0, 102.0, 103.0)
    env, p = _env(mid=mid, low=[100.0, 100.5, 102.0, 103.0], high=[100.0, 101.5, 102.0, 103.0])
    order = replace(
        p.order,
        side=t(1, 1, -1),
        contracts=t(1, 1, 1),
        price=t(100.75, 100.5, 102.0),
        age=ti(0, 0, 1),
        urgency=ti(NORMAL, NORMAL, IMMEDIATE),
        queue=t(float("nan"), float("nan"), float("nan")),
    )
    rows, live = env._rows(p.row), tb(True, True, True)
    ins = env.market.instrument
    order, _, leg = fill_resting(order, p.trade, t(0, 0, 0), rows, live, env.cfg.costs, ins, True)
    assert leg.contracts.tolist() == [1.0, 0.0, 0.0] and leg.price.tolist() == [100.75, 101.0, 101.0]
    assert leg.costs.tolist() == [-11.5, 0.0, 0.0] and leg.position.tolist() == [1.0, 0.0, 0.0]
    assert order.side.tolist() == [0.0, 1.0, 0.0] and order.age.tolist() == [1, 1, 2]


def test_open_plan_on_entry_and_reversal() -> None:
    """Entry 100, vol 1e-3, profit 2 vols, stop 1 vol.
    env 0: 0 -> 1 opens a long: profit 100 x 1.002 = 100.2, stop 100 x 0.999 = 99.9, hold 0.
    env 1: 1 -> 1 keeps its plan; hold 3 -> 4.  env 2: 1 -> -1 reverses: short, profit 99.8, stop 100.1."""
    env, p = _env(plan={"profit_mult": 2.0, "stop_mult": 1.0})
    plan = replace(p.plan, active=tb(False, True, True), direction=t(0, 1, 1), profit=t(0, 105, 105))
    entry, vol = t(100, 100, 100), t(1e-3, 1e-3, 1e-3)
    plan, opened, hold = open_plan(plan, t(0, 1, 1), t(1, 1, -1), ti(0, 3, 3), entry, vol, env.cfg.plan)
    assert opened.tolist() == [True, False, True] and hold.tolist() == [0, 4, 0]
    assert plan.active.tolist() == [True, True, True] and plan.direction.tolist() == [1.0, 1.0, -1.0]
    assert plan.profit.tolist() == pytest.approx([100.2, 105.0, 99.8], abs=1e-12)
    assert plan.stop.tolist()[::2] == pytest.approx([99.9, 100.1], abs=1e-12)
    assert plan.best.tolist()[::2] == [100.0, 100.0]


def test_check_barriers_profit_stop_tie_and_fresh_plan() -> None:
    """Long plans with profit 101, stop 99; row r1's range per env:
    env 0: [100.5, 101.2] -> PROFIT, best 101.2; env 1: [98.9, 101.2] touches both -> STOP (wins ties);
    env 2: the same range, but its plan opened this step -> not checked, best unchanged."""
    env, p = _env()
    plan = replace(
        p.plan, active=tb(True, True, True), direction=t(1, 1, 1), profit=t(101, 101, 101), stop=t(99, 99, 99)
    )
    plan = replace(plan, best=t(100, 100, 100))
    high, low = t(101.2, 101.2, 101.2), t(100.5, 98.9, 98.9)
    plan, reason = check_barriers(plan, tb(False, False, True), ti(1, 1, 0), high, low, env.cfg.plan)
    assert reason.tolist() == [int(ExitReason.PROFIT), int(ExitReason.STOP), 0]
    assert plan.best.tolist() == [101.2, 101.2, 100.0]


def test_check_barriers_timeout_and_trailing_stop() -> None:
    """Trailing 2 vols (vol 1e-3). env 0: long, high 102 -> best 102, stop trails up to 102 x 0.998 =
    101.796; env 1: short, best 100, stop trails down to 100 x 1.002 = 100.2, high 100 below it; hold
    2 = the horizon -> TIMEOUT."""
    env, p = _env(n=2, plan={"trailing_mult": 2.0})
    plan = replace(p.plan, active=tb(True, True), direction=t(1, -1), profit=t(103, 90), stop=t(99, 110))
    plan = replace(plan, best=t(100, 100), vol=t(1e-3, 1e-3))
    plan, reason = check_barriers(plan, tb(False, False), ti(1, 2), t(102, 100), t(101.9, 100), env.cfg.plan)
    assert reason.tolist() == [0, int(ExitReason.TIMEOUT)]
    assert plan.stop.tolist() == pytest.approx([101.796, 100.2], abs=1e-12)


def test_forced_exits_floor_over_a_barrier_and_the_window_end() -> None:
    """Floor $70,000. env 0: equity 50,000 with a STOP -> CAPITAL_FLOOR; env 1: at its last row ->
    WINDOW_END; env 2: neither."""
    equity, live = t(50_000, 80_000, 80_000), tb(True, True, True)
    reason, floored = forced_exits(ti(2, 0, 0), equity, live, ti(3, 5, 3), ti(10, 5, 10), 70_000.0)
    assert reason.tolist() == [int(ExitReason.CAPITAL_FLOOR), int(ExitReason.WINDOW_END), 0]
    assert floored.tolist() == [True, False, False]


def test_exit_position_closes_at_the_touch_and_records_the_reason() -> None:
    """Row 1: mid 101, bid 100.875, ask 101.125. env 0 (long 2, PROFIT): sells 2 at 100.875, slippage
    2 x 0.125 x $50 = 12.5 + fees 2 = 14.5; env 1 (short 1, WINDOW_END): buys 1 at 101.125, 7.25;
    env 2 (long 1, no reason): nothing."""
    env, p = _env()
    zero = t(0, 0, 0)
    # long 2 entered at 100, short 1 and long 1 at 100; marks 100, -50, 50; entry fees 2, 1, 1
    trade = OpenTrade(
        side=t(1, -1, 1),
        entry_row=ti(0, 0, 0),
        magnitude=ti(1, 1, 1),
        opened=t(2, 1, 1),
        entry_value=t(200, 100, 100),
        closed=zero,
        exit_value=zero,
        gross=t(100, -50, 50),
        costs=t(2, 1, 1),
        order_type=ti(0, 0, 0),
        urgency=ti(0, 0, 0),
        entry_costs=t(2, 1, 1),
    )
    reason = ti(int(ExitReason.PROFIT), int(ExitReason.WINDOW_END), 0)
    rows, live = env._rows(p.row), tb(True, True, True)
    ins = env.market.instrument
    trade, leg, exiting = exit_position(trade, t(2, -1, 1), reason, live, rows, env.cfg.costs, ins, True)
    assert exiting.tolist() == [True, True, False] and leg.position.tolist() == [0.0, 0.0, 1.0]
    assert leg.price.tolist() == [100.875, 101.125, 101.0] and leg.costs.tolist() == [14.5, 7.25, 0.0]
    assert leg.closed.closed.tolist() == [True, True, False]
    assert leg.closed.reason.tolist() == [int(ExitReason.PROFIT), int(ExitReason.WINDOW_END), 0]
    # the trade's net: marks 100 - costs (2 + 14.5) = 83.5; short: -50 - (1 + 7.25) = -58.25
    assert leg.closed.pnl.tolist() == [83.5, -58.25, 0.0]


def test_close_out_ends_plans_and_the_floor_cancels_orders() -> None:
    env, p = _env()
    plan = replace(p.plan, active=tb(True, True, True))
    order = replace(p.order, side=t(1, 1, -1))
    plan, order = close_out(plan, order, tb(True, False, False), tb(False, False, True), t(0, 1, 0))
    assert plan.active.tolist() == [False, True, False]  # exited; still held; flat
    assert order.side.tolist() == [1.0, 1.0, 0.0]


def test_settle_counts_trades_and_tracks_the_open_trade() -> None:
    """env 0: held 2, closed a trade of +100 on 2 contracts at the exit -> 1 trade, 1 win, $50 per
    contract; equity 100,100, peak too. env 1: holds on, trade net 130 - 10 = 120 above its max 80
    -> max 120, peak at hold 3; traded nothing -> time since trade 5 -> 6."""
    env, p = _env(n=2)
    a = replace(p.account, position=t(2, 1), trade_max=t(0, 80), trade_min=t(0, -20))
    a = replace(a, time_since_trade=ti(0, 5))
    closed_NS = tb(False, False, True, False, False, False).reshape(2, 3)  # env 0's EXIT stage
    closed = lean_record(closed_NS, t(0, 0, 100, 0, 0, 0).reshape(2, 3), t(0, 0, 2, 0, 0, 0).reshape(2, 3))
    trade = OpenTrade.flat(2, device="cpu", dtype=f64)._replace(gross=t(0, 130), costs=t(0, 10))
    none = lean_record(tb(False, False), t(0, 0), t(0, 0))
    legs = (Leg(t(0, 0), t(0, 0), t(0, 0), t(2, 1), none), Leg(t(0, 0), t(0, 0), t(0, 0), t(2, 1), none))
    legs += (Leg(t(-2, 0), t(0, 0), t(2, 0), t(0, 1), none),)
    acc = settle(a, trade, closed, legs, t(100_100, 100_050), t(2, 0), ti(3, 3), tb(True, True))
    assert acc.n_trades.tolist() == [1, 0] and acc.n_wins.tolist() == [1, 0]
    assert acc.sum_win.tolist() == [50.0, 0.0] and acc.sum_loss.tolist() == [0.0, 0.0]
    assert acc.position.tolist() == [0.0, 1.0] and acc.peak_equity.tolist() == [100_100.0, 100_050.0]
    assert acc.trade_max.tolist() == [0.0, 120.0] and acc.trade_min.tolist() == [0.0, -20.0]
    assert acc.peak_step.tolist() == [0, 3] and acc.hold_time.tolist() == [0, 3]
    assert acc.time_since_trade.tolist() == [0, 6] and acc.costs_paid.tolist() == [2.0, 0.0]


def test_pay_normalises_the_net_pnl() -> None:
    """Shaping off: reward = net / (capital x pnl_scale) = net / 100; an episode that is over: 0."""
    env, p = _env()
    net, closed, before, after = t(50, -20, 30), tb(False, False, False), t(0, 1, 0), t(1, 1, 0)
    live, regime = tb(True, True, False), t(0, 0, 0)
    rewards = env.cfg.rewards
    reward, comp, path, _ = pay(p.path, p.risk, net, closed, before, after, live, regime, 100_000.0, rewards)
    assert reward.tolist() == [0.5, -0.2, 0.0] and comp[:, 0].tolist() == [0.5, -0.2, 0.0]
    assert path.pnl.tolist() == [50.0, -20.0, 0.0]  # env 0 opened (its entry step), env 1 held


def test_update_risk_pushes_the_return_and_the_regime() -> None:
    """net 100 on 100,000 -> return 1e-3 in slot 0; net -50 on 50,000 -> -1e-3; regime remembered."""
    env, p = _env(n=2)
    ema = t(0.5, 0.25)
    net, equity = t(100, -50), t(100_000, 50_000)
    risk = update_risk(p.risk, ema, t(-9.0, -8.0), net, equity, tb(True, True), env.cfg.sizing)
    assert risk.returns_ring[:, 0].tolist() == [1e-3, -1e-3] and risk.returns_count.tolist() == [1, 1]
    assert risk.regime_prev.tolist() == [-9.0, -8.0] and risk.regime_steps.tolist() == [1, 1]
    assert risk.cvar.tolist() == [1.0, 1.0]  # fewer returns than cvar_min_obs: factor 1


@pytest.mark.parametrize("one_magnitude", [True, False], ids=["one-magnitude", "three-magnitudes"])
def test_kelly_acts_once_with_one_magnitude_too(one_magnitude: bool) -> None:
    """A losing record of 20 trades (f* < 0: the Kelly floor 0.25) entering Long, max position 8:
    with magnitudes (0.25, 0.5, 1.0) Kelly caps Full at Quarter (2 contracts, the max position
    untouched); with the one magnitude (1.0) there is nothing smaller to cap at, so Kelly scales the
    effective max position instead: 8 x 0.25 = 2 contracts, where it once left all 8."""
    from foxhunt.domain.actions import BranchConfig
    from foxhunt.env.config import ContractConfig

    branches = BranchConfig(magnitude=1, magnitude_fractions=(1.0,)) if one_magnitude else BranchConfig()
    env, p = _env(1)
    cfg = env.cfg.model_copy(
        update={"branches": branches, "contract": ContractConfig(max_position=8, initial_capital=100_000.0)}
    )
    env = TradingEnv(env.market, cfg)
    env.reset(torch.zeros(1, dtype=i64))
    p = _with(
        env._state(),
        account={
            "n_trades": ti(20),
            "n_wins": ti(5),
            "n_losses": ti(15),
            "sum_win": t(500.0),
            "sum_loss": t(-1500.0),
        },
    )
    full = branches.magnitude - 1
    actions = ti(L, full, MKT, NORMAL).reshape(1, 4)
    one = t(1)
    d = decide(p, actions, tb(True), one, one, t(0), env.codec, env.cfg)
    assert d.delta.tolist() == [2.0]
    assert d.magnitude.tolist() == [0]  # the one magnitude, or Full capped at Quarter
    off = env.cfg.model_copy(update={"sizing": env.cfg.sizing.model_copy(update={"kelly_weight": 0.0})})
    assert decide(p, actions, tb(True), one, one, t(0), env.codec, off).delta.tolist() == [8.0]
