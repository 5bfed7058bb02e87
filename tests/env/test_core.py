"""The batched environment on hand-made markets: PnL, costs and positions worked out on paper."""

from __future__ import annotations

import pytest
import torch

from foxhunt.backtest.evaluate import ScriptedPolicy, evaluate, scripted
from foxhunt.backtest.metrics import branch_sizes, compute_metrics
from foxhunt.domain.actions import BranchConfig, Direction, OrderType, Urgency
from foxhunt.domain.exits import ExitReason
from foxhunt.env.config import ContractConfig, CostConfig, EnvConfig
from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.market import MarketTensors, state_feature_columns
from foxhunt.env.trades import ClosedTrades
from foxhunt.features.layout import STATE_LAYOUT
from tests.factories import plan_config

L, S, H, F = int(Direction.LONG), int(Direction.SHORT), int(Direction.HOLD), int(Direction.FLAT)
MKT, TOUCH = int(OrderType.MARKET), int(OrderType.LIMIT_AT_TOUCH)
N_ = int(Urgency.NORMAL)


def market(mid, *, low=None, high=None, vol=1e-4, bid_size=None, volume=None) -> MarketTensors:
    mid = torch.tensor(mid, dtype=torch.float64)
    n = len(mid)
    cols = state_feature_columns()

    def opt(x):
        return None if x is None else torch.tensor(x, dtype=torch.float64)

    return MarketTensors(
        features=torch.zeros(n, len(cols)),
        mid=mid,
        high=mid.clone() if high is None else torch.tensor(high, dtype=torch.float64),
        low=mid.clone() if low is None else torch.tensor(low, dtype=torch.float64),
        bid=mid - 0.125,
        ask=mid + 0.125,
        vol=torch.full((n,), vol, dtype=torch.float64),
        segment=torch.zeros(n, dtype=torch.int64),
        feature_columns=cols,
        bid_size=opt(bid_size),
        ask_size=opt(bid_size),
        volume=opt(volume),
    )


def config(**plan) -> EnvConfig:
    return EnvConfig(
        branches=BranchConfig(magnitude=2, magnitude_fractions=(0.5, 1.0)),
        costs=CostConfig(
            commission_per_contract=1.0,
            exchange_fee_per_contract=0.0,
            slippage_ticks_per_contract=0.0,
            immediate_slippage_ticks=0.0,
        ),
        contract=ContractConfig(max_position=2, initial_capital=100_000.0),
        plan=plan_config(**({"horizon": 2, "profit_mult": 1000.0, "stop_mult": 1000.0} | plan)),
        episode_rows=6,
    )


def act(d: int, m: int = 1, o: int = MKT, u: int = N_) -> torch.Tensor:
    return torch.tensor([[d, m, o, u]])


def _one_trade(r: StepResult) -> ClosedTrades:
    """The one trade a single-episode step closed, as Python numbers."""
    assert int(r.trades.closed.sum()) == 1
    k = int(r.trades.closed[0].nonzero()[0, 0])
    return ClosedTrades(*(x[0, k].item() for x in r.trades))


def test_hand_worked_market_round_trip() -> None:
    """Long 2 at the ask at row 0, held through 100 -> 100.5 -> 101, timeout exit at row 3's bid.

    fill 100.125 vs mark 100: slippage 2 x 0.125 x 50 = 12.5, fees 2 x $1 = 2 -> costs 14.5
    gross: 2 x 0.5 x 50 = 50 (row 0 -> 1), 50 (1 -> 2), 0 (2 -> 3)
    exit at row 3: sell 2 at the bid 100.875 vs mark 101: 12.5 + 2 = 14.5
    trade net = 100 - 29 = 71
    """
    env = TradingEnv(market([100.0, 100.5, 101.0, 101.0, 101.0, 101.0]), config())
    env.reset(torch.tensor([0]))
    _, r0 = env.step(act(L))
    assert env.state.account.position.item() == 2 and env.state.plan.active.item()
    assert (r0.gross.item(), r0.costs.item(), r0.net.item()) == (50.0, 14.5, 35.5)
    _, r1 = env.step(act(F))  # plan lock: Flat is ignored
    assert r1.realised_direction.item() == H and env.state.account.position.item() == 2
    assert (r1.gross.item(), r1.costs.item()) == (50.0, 0.0)
    _, r2 = env.step(act(H))
    assert r2.exit_reason.item() == 3 and env.state.account.position.item() == 0  # timeout after 2 rows
    assert (r2.gross.item(), r2.costs.item()) == (0.0, 14.5)
    t = _one_trade(r2)
    assert (t.pnl, t.magnitude, t.size, t.side, t.reason) == (71.0, 1, 2.0, 1.0, ExitReason.TIMEOUT)
    assert (t.entry_price, t.exit_price, t.entry_row, t.exit_row) == (100.125, 100.875, 0, 3)
    assert env.state.account.equity.item() == 100_071.0 and env.state.account.n_wins.item() == 1


def test_limit_order_fills_only_on_trade_through() -> None:
    # A buy limit at the bid (99.875) rests; row 1 touches but does not go through, row 2 does.
    mid = [100.0, 100.0, 100.0, 100.0, 100.0, 100.0]
    low = [100.0, 99.875, 99.75, 100.0, 100.0, 100.0]
    env = TradingEnv(market(mid, low=low), config(horizon=50))
    env.reset(torch.tensor([0]))
    _, r0 = env.step(act(L, 0, TOUCH, int(Urgency.PATIENT)))  # 0.5 x 2 = 1 contract
    assert env.state.account.position.item() == 0 and env.state.order.side.item() == 1
    assert r0.costs.item() == 0.0
    _, r1 = env.step(act(H))
    assert env.state.account.position.item() == 1  # filled on row 2's trade-through
    # Booked at the limit 99.875 against the mark 100: earns the half spread (negative cost) - fee.
    assert r1.costs.item() == pytest.approx(1.0 - 0.125 * 50)


def test_limit_at_touch_fills_after_the_queue_ahead_trades() -> None:
    """Buy 1 at the bid 99.875 behind the 5 contracts displayed there when the order is placed.

    Rows 1-4 trade at 99.875 (low = bid, never through) with 2, 3, 1, 4 contracts: 2, 5, 6 traded
    at the price after rows 1, 2, 3. The order fills on row 3, the first time more than the 5 ahead
    have traded (6 >= 5 + 1, costs.limit_fill), whatever the later rows display (50). Booked at
    99.875 against the mark 100: slippage -6.25 + fee 1 = -5.25. Unknown sizes (None) or unknown
    volume: the same rows never fill (trade-through only) and the order expires after 5 rows.
    """
    mid = [100.0] * 6
    low = [100.0, 99.875, 99.875, 99.875, 99.875, 99.875]
    sizes = [5.0, 50.0, 50.0, 50.0, 50.0, 50.0]
    volume = [0.0, 2.0, 3.0, 1.0, 4.0, 4.0]
    patient = act(L, 0, TOUCH, int(Urgency.PATIENT))
    env = TradingEnv(market(mid, low=low, bid_size=sizes, volume=volume), config(horizon=50))
    env.reset(torch.tensor([0]))
    env.step(patient)
    assert env.state.order.queue.item() == 5.0 and env.state.order.volume.item() == 2.0
    _, r1 = env.step(act(H))
    assert env.state.account.position.item() == 0
    assert env.state.order.volume.item() == 5.0  # 5 traded: not > 5
    _, r2 = env.step(act(H))
    assert env.state.account.position.item() == 1 and env.state.order.side.item() == 0
    assert (r1.costs.item(), r2.gross.item(), r2.costs.item()) == (0.0, 0.0, -5.25)
    for sized, traded in ((None, volume), (sizes, None)):
        blind = TradingEnv(market(mid, low=low, bid_size=sized, volume=traded), config(horizon=50))
        blind.reset(torch.tensor([0]))
        blind.step(patient)
        for _ in range(4):
            blind.step(act(H))
        assert blind.state.account.position.item() == 0 and blind.state.order.side.item() == 0  # expired


def test_trade_through_fills_behind_any_queue() -> None:
    # 1000 displayed ahead and no volume at the price, but row 1 trades through the bid: filled.
    low = [100.0, 99.75, 100.0, 100.0, 100.0, 100.0]
    env = TradingEnv(market([100.0] * 6, low=low, bid_size=[1000.0] * 6, volume=[0.0] * 6), config())
    env.reset(torch.tensor([0]))
    env.step(act(L, 0, TOUCH, int(Urgency.PATIENT)))
    assert env.state.account.position.item() == 1


def test_limit_order_expires_after_its_patience() -> None:
    env = TradingEnv(market([100.0] * 6), config(horizon=50))
    env.reset(torch.tensor([0]))
    env.step(act(L, 0, TOUCH, int(Urgency.IMMEDIATE)))  # patience 1 row
    assert env.state.order.side.item() == 0 and env.state.account.position.item() == 0


def test_profit_stop_and_capital_floor() -> None:
    up = [100.0, 100.0, 100.5, 100.5, 100.5, 100.5]
    env = TradingEnv(
        market(up, high=[100.0, 100.0, 100.6, 100.5, 100.5, 100.5]),
        config(horizon=50, profit_mult=1000.0),
    )
    env.reset(torch.tensor([0]))
    env.step(act(L))  # plan: profit at 100 x (1 + 1000 x 1e-4) = 110: not reached
    assert env.state.plan.active.item()
    env2 = TradingEnv(
        market(up, high=[100.0, 100.0, 100.6, 100.5, 100.5, 100.5]), config(horizon=50, profit_mult=5.0)
    )
    env2.reset(torch.tensor([0]))
    env2.step(act(L))  # profit at 100 x (1 + 5e-4) = 100.05
    _, r = env2.step(act(H))
    assert r.exit_reason.item() == 1 and env2.state.account.position.item() == 0
    crash = [100.0, 100.0, 40.0, 40.0, 40.0, 40.0]
    cfg = config(horizon=50, stop_mult=1000.0)
    cfg = cfg.model_copy(update={"contract": ContractConfig(max_position=2, initial_capital=1_000.0)})
    env3 = TradingEnv(market(crash), cfg)
    env3.reset(torch.tensor([0]))
    env3.step(act(L))
    _, r = env3.step(act(H))
    assert r.exit_reason.item() == 4 and env3.state.done.item() and env3.state.account.position.item() == 0


def test_flat_long_and_costs_on_a_rising_series() -> None:
    rising = [100.0 + 0.25 * i for i in range(40)]
    cfg = config(horizon=5)
    mk = market(rising)
    flat = compute_metrics(
        evaluate(mk, cfg, 0, 40, scripted(ScriptedPolicy.FLAT, cfg)),
        bars_per_year=1000.0,
        initial_capital=cfg.contract.initial_capital,
        **branch_sizes(cfg.branches),
    )
    assert flat["trades"] == 0 and flat["net_pnl"] == 0.0 and flat["costs"] == 0.0
    rec = evaluate(mk, cfg, 0, 40, scripted(ScriptedPolicy.LONG, cfg))
    long = compute_metrics(
        rec, bars_per_year=1000.0, initial_capital=cfg.contract.initial_capital, **branch_sizes(cfg.branches)
    )
    assert long["gross_pnl"] > 0 and long["trades"] > 0
    per_trade = 2 * (2 * 1.0 + 2 * 0.125 * 50)  # entry + exit: fees 2 x $1, half spread on 2 contracts
    assert long["costs"] == pytest.approx(long["trades"] * per_trade)


def test_early_end_leaves_unwritten_steps_that_metrics_skip() -> None:
    crash = [100.0, 100.0, 40.0] + [40.0] * 9
    cfg = config(horizon=50, stop_mult=1000.0)
    cfg = cfg.model_copy(
        update={"contract": ContractConfig(max_position=2, initial_capital=1_000.0), "episode_rows": 12}
    )
    rec = evaluate(market(crash), cfg, 0, 12, scripted(ScriptedPolicy.LONG, cfg))
    assert rec.written[0].tolist()[:3] == [True, True, False]
    assert (rec.picked_direction[0, 2:] == -1).all()  # never written: -1, not "Short"
    m = compute_metrics(rec, bars_per_year=1000.0, initial_capital=1_000.0, **branch_sizes(cfg.branches))
    assert m["steps"] == 2 and m["picked"]["direction"][S] == 0.0


def test_state_assembly_and_determinism() -> None:
    mk = market([100.0 + 0.25 * (i % 7) for i in range(64)])
    cfg = config(horizon=4).model_copy(update={"episode_rows": 32})
    a, b = TradingEnv(mk, cfg), TradingEnv(mk, cfg)
    sa, sb = a.reset(torch.tensor([0, 10, 20])), b.reset(torch.tensor([0, 10, 20]))
    assert sa.shape == (3, STATE_LAYOUT.width) and torch.equal(sa, sb)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        acts = torch.stack([torch.randint(0, k, (3,), generator=gen) for k in a.codec.sizes], dim=1)
        sa, ra = a.step(acts)
        sb, rb = b.step(acts)
        assert torch.equal(sa, sb) and torch.equal(ra.net, rb.net)
    port = STATE_LAYOUT.group("portfolio")
    assert torch.equal(sa[:, port.offset], (a.state.account.position / cfg.contract.max_position).float())


def test_every_branch_value_is_reachable() -> None:
    cfg = config(horizon=3)
    mk = market([100.0 + 0.25 * ((i * 7) % 5) for i in range(400)])
    rec = evaluate(mk, cfg, 0, 400, scripted(ScriptedPolicy.RANDOM, cfg, seed=3))
    for field, k in (
        ("picked_direction", 4),
        ("picked_magnitude", 2),
        ("picked_order", 3),
        ("picked_urgency", 3),
    ):
        values = getattr(rec, field)[rec.written]
        assert set(values.unique().tolist()) == set(range(k)), field


def test_reward_components() -> None:
    from foxhunt.env.config import RewardConfig

    mid = [100.0, 100.5, 101.0, 100.5, 101.5, 101.0, 102.0, 101.5]
    cfg = config(horizon=3).model_copy(update={"episode_rows": 8})
    env = TradingEnv(market(mid), cfg)
    env.reset(torch.tensor([0]))
    _, r = env.step(act(L))
    # Coefficients off: the reward is the normalised net PnL, the only non-zero component.
    scale = cfg.contract.initial_capital * cfg.rewards.pnl_scale
    assert r.reward.item() == pytest.approx(r.net.item() / scale)
    assert torch.equal(r.components[:, 1:], torch.zeros_like(r.components[:, 1:]))
    on = cfg.model_copy(
        update={
            "rewards": RewardConfig(exit_timing_bonus=1.0, drawdown_recovery_bonus=1.0)
        }
    )
    env = TradingEnv(market(mid), on)
    env.reset(torch.tensor([0]))
    for a in (act(L, 0, TOUCH), act(H), act(H), act(H), act(S)):
        _, r = env.step(a)
        closed_pnl = r.trades.pnl.abs().sum().item() / scale
        assert (r.components[:, 1:].abs() <= closed_pnl + 1e-12).all()  # shaping bounded by |trade PnL|


def test_many_recorded_policies_match_one_by_one_runs() -> None:
    from foxhunt.backtest.evaluate import evaluate_many, recorded, windows

    mid = [100.0 + 0.25 * ((i * 7) % 11) for i in range(120)]
    cfg = config(horizon=3).model_copy(update={"episode_rows": 25})
    mk = market(mid)
    gen = torch.Generator().manual_seed(5)
    sizes = (4, 2, 3, 3)
    acts = torch.stack([torch.randint(0, k, (3, 120), generator=gen) for k in sizes], dim=-1)
    many = evaluate_many(mk, cfg, 0, 120, acts)
    starts, _ = windows(0, 120, cfg.episode_rows)
    for p in range(3):
        # The same policy alone: its per-row actions laid out per window and step.
        per_step = torch.stack([acts[p, int(s) : int(s) + cfg.episode_rows - 1] for s in starts])
        rec = evaluate(mk, cfg, 0, 120, recorded(per_step))
        net = ((rec.gross_pnl - rec.costs) * rec.written).sum()
        assert many["net_pnl"][p].item() == pytest.approx(net.item())
        assert many["trades"][p].item() == rec.trades()[0].sum().item()


def test_stop_and_trailing_stop_exits() -> None:
    down = [100.0, 100.0, 99.5, 99.0, 99.0, 99.0]
    env = TradingEnv(market(down), config(horizon=50, stop_mult=5.0))  # stop at 100 x (1 - 5e-4)
    env.reset(torch.tensor([0]))
    env.step(act(L))
    _, r = env.step(act(H))
    assert r.exit_reason.item() == 2 and env.state.account.position.item() == 0
    up_then_down = [100.0, 100.0, 101.0, 102.0, 101.5, 101.5]
    trail = config(horizon=50, stop_mult=1000.0, trailing_mult=50.0)  # trail 0.5% below the best
    env = TradingEnv(market(up_then_down), trail)
    env.reset(torch.tensor([0]))
    env.step(act(L))
    env.step(act(H))
    _, r = env.step(act(H))  # best 102: trailing stop at 102 x (1 - 0.005) = 101.49
    assert r.exit_reason.item() == 0
    _, r = env.step(act(H))  # 101.5 stays above 101.49
    assert r.exit_reason.item() == 0 and env.state.plan.stop.item() == pytest.approx(102 * (1 - 0.005))


def test_training_and_evaluation_paths_are_bit_identical() -> None:
    """A collector stepping the env directly (training) and the backtester replaying the same
    actions (evaluation) see bit-identical states, rewards and PnL: one step, one state assembly."""
    from foxhunt.backtest.evaluate import recorded, windows

    mid = [100.0 + 0.25 * ((i * 5) % 13) for i in range(200)]
    cfg = config(horizon=4).model_copy(update={"episode_rows": 50})
    mk = market(mid)
    starts, ends = windows(0, 200, cfg.episode_rows)
    steps = int((ends - starts).max())
    gen = torch.Generator().manual_seed(9)
    acts = torch.stack([torch.randint(0, k, (len(starts), steps), generator=gen) for k in (4, 2, 3, 3)], -1)
    train = TradingEnv(mk, cfg)
    states = [train.reset(starts, ends)]
    nets = []
    for t in range(steps):
        s, r = train.step(acts[:, t])
        states.append(s)
        nets.append(r.net)
    evaluation = TradingEnv(mk, cfg)
    seen = [evaluation.reset(starts, ends)]
    policy = recorded(acts)

    def watching(obs, env):
        return policy(obs, env)

    for t in range(steps):
        s, r = evaluation.step(watching(seen[-1], evaluation))
        seen.append(s)
        assert torch.equal(r.net, nets[t])
    assert all(torch.equal(a, b) for a, b in zip(states, seen, strict=True))
    rec = evaluate(mk, cfg, 0, 200, recorded(acts))
    assert torch.equal((rec.gross_pnl - rec.costs)[:, :steps], torch.stack(nets, 1) * rec.written[:, :steps])


def test_hand_worked_limit_entry_then_market_exit() -> None:
    """Buy 1 at the bid with a resting limit, filled on row 1's trade-through; timeout exit at market.

    step 0 (row 0 -> 1): nothing held while the order rests; row 1 trades through 99.875: bought 1
        at 99.875 against the mark 100: slippage 1 x (99.875 - 100) x 50 = -6.25, fee 1 -> -5.25
    step 1 (row 1 -> 2): gross 1 x 0.5 x 50 = 25
    step 2 (row 2 -> 3): gross 0; timeout: sell 1 at row 3's bid 100.375 vs mark 100.5:
        slippage 6.25 + fee 1 = 7.25
    trade net = 25 - (-5.25 + 7.25) = 23
    """
    mid = [100.0, 100.0, 100.5, 100.5, 100.5, 100.5]
    low = [100.0, 99.75, 100.5, 100.5, 100.5, 100.5]
    env = TradingEnv(market(mid, low=low), config(horizon=2))
    env.reset(torch.tensor([0]))
    _, r0 = env.step(act(L, 0, TOUCH, int(Urgency.PATIENT)))
    assert (r0.gross.item(), r0.costs.item(), env.state.account.position.item()) == (0.0, -5.25, 1.0)
    _, r1 = env.step(act(H))
    assert (r1.gross.item(), r1.costs.item()) == (25.0, 0.0)
    _, r2 = env.step(act(H))
    assert r2.exit_reason.item() == 3 and (r2.gross.item(), r2.costs.item()) == (0.0, 7.25)
    t = _one_trade(r2)
    assert (t.pnl, t.magnitude, t.size, t.entry_price, t.exit_price) == (23.0, 0, 1.0, 99.875, 100.375)
    assert env.state.account.equity.item() == 100_023.0
    # the ledger keeps how it was entered: the limit order's type and urgency, its fill's -5.25
    assert (t.order_type, t.urgency, t.entry_costs, t.costs) == (TOUCH, int(Urgency.PATIENT), -5.25, 2.0)
    assert r0.limit_orders.tolist() == [[1, 1, 0, 0, 0]]  # placed and filled in one step (LIMIT_EVENTS)


def test_limit_order_events_account_for_every_order_placed() -> None:
    """On a flat market no buy at the bid fills (low = mid = 100 > 99.875); LIMIT_EVENTS per step.

    A: Patient (placed) | Normal replaces it (placed, cancelled) | hold: the Normal order's 2 rows are
       up (expired) | Patient (placed) | a market buy cancels it (cancelled), the window's end sells.
    B: Patient (placed) | hold | hold | Patient replaces it (placed, cancelled) | hold: it still rests
       when the episode ends (open_at_end).
    Over each episode placed = filled + expired + cancelled + open_at_end.
    """
    patient, normal = act(L, 0, TOUCH, int(Urgency.PATIENT)), act(L, 0, TOUCH, N_)
    runs = {
        "A": (
            [patient, normal, act(H), patient, act(L, 0)],
            [[1, 0, 0, 0, 0], [1, 0, 0, 1, 0], [0, 0, 1, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 1, 0]],
        ),
        "B": (
            [patient, act(H), act(H), patient, act(H)],
            [[1, 0, 0, 0, 0], [0] * 5, [0] * 5, [1, 0, 0, 1, 0], [0, 0, 0, 0, 1]],
        ),
    }
    for name, (actions, want) in runs.items():
        env = TradingEnv(market([100.0] * 6), config(horizon=50))
        env.reset(torch.tensor([0]))
        got = [env.step(a)[1].limit_orders[0].tolist() for a in actions]
        assert got == want, name
        placed, filled, expired, cancelled, left = (sum(col) for col in zip(*got, strict=True))
        assert placed == filled + expired + cancelled + left, name
        assert env.state.done.item()
    # A's market entry is a trade entered by a market order at Normal urgency, its fill's costs
    # (half spread 6.25 + fee 1) its entry costs; the window's end paid the same to close it.
    env = TradingEnv(market([100.0] * 6), config(horizon=50))
    env.reset(torch.tensor([0]))
    results = [env.step(a)[1] for a in runs["A"][0]]
    t = _one_trade(results[-1])
    assert (t.order_type, t.urgency, t.entry_costs, t.costs, t.reason) == (
        MKT,
        N_,
        7.25,
        14.5,
        ExitReason.WINDOW_END,
    )
