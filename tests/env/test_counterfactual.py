"""Counterfactual execution (foxhunt.env.counterfactual): the taken action's counterfactual is the env's
real outcome, field for field; limit fills and magnitude costs worked out on paper."""

from __future__ import annotations

import pytest
import torch

from foxhunt.agent.replay import nstep_windows
from foxhunt.domain.actions import Direction, OrderType, Urgency
from foxhunt.env.config import ContractConfig, CostConfig, EnvConfig
from foxhunt.env.core import TradingEnv
from foxhunt.env.counterfactual import (
    Window,
    branch_deltas,
    counterfactual_deltas,
    default_horizon,
    entry_mask,
    execution_advantages,
    execution_variants,
    rollout,
    window_values,
)
from foxhunt.env.market import MarketTensors, state_feature_columns
from foxhunt.env.trades import FillStage
from tests.env.test_core import config, market
from tests.factories import plan_config

L, S, H = int(Direction.LONG), int(Direction.SHORT), int(Direction.HOLD)
MKT, TOUCH, INSIDE = int(OrderType.MARKET), int(OrderType.LIMIT_AT_TOUCH), int(OrderType.LIMIT_INSIDE)
NORMAL, PATIENT = int(Urgency.NORMAL), int(Urgency.PATIENT)
GAMMA = 0.9


def random_market(gen: torch.Generator, rows: int = 300) -> MarketTensors:
    """A random walk on the ES grid with a 1-3 tick spread, touch sizes and volume (queue-aware fills)."""
    steps = torch.randint(-2, 3, (rows,), generator=gen).to(torch.float64) * 0.25
    mid = 4000.0 + steps.cumsum(0)
    half = torch.randint(1, 4, (rows,), generator=gen).to(torch.float64) * 0.125
    wick = torch.randint(0, 3, (rows, 2), generator=gen).to(torch.float64) * 0.25
    cols = state_feature_columns()
    return MarketTensors(
        features=torch.zeros(rows, len(cols)),
        mid=mid,
        high=mid + half + wick[:, 0],
        low=mid - half - wick[:, 1],
        bid=mid - half,
        ask=mid + half,
        vol=torch.full((rows,), 2e-4, dtype=torch.float64),
        segment=torch.zeros(rows, dtype=torch.int64),
        feature_columns=cols,
        bid_size=torch.randint(0, 6, (rows,), generator=gen).to(torch.float64),
        ask_size=torch.randint(0, 6, (rows,), generator=gen).to(torch.float64),
        volume=torch.randint(0, 12, (rows,), generator=gen).to(torch.float64),
    )


def full_config() -> EnvConfig:
    """The full 4 x 3 x 3 x 3 action space, size- and urgency-dependent slippage, a short plan."""
    return EnvConfig(
        costs=CostConfig(slippage_ticks_per_contract=0.1, immediate_slippage_ticks=0.5),
        contract=ContractConfig(max_position=6, initial_capital=100_000.0),
        plan=plan_config(horizon=6, profit_mult=8.0, stop_mult=8.0),
        episode_rows=40,
    )


def _random_actions(gen: torch.Generator, n: int, sizes: tuple[int, ...]) -> torch.Tensor:
    return (torch.rand(n, 4, generator=gen) * torch.tensor(sizes)).to(torch.int64)


def _real(
    env: TradingEnv, actions: torch.Tensor, horizon: int, conv: tuple, window: Window
) -> dict[str, torch.Tensor]:
    """The env's own outcome of ``actions`` then Hold, stepped for real, its window cut by replay's
    own :func:`nstep_windows`: the reference."""
    n = actions.shape[0]
    ret = net = costs = torch.zeros(n, dtype=torch.float64)
    filled = torch.zeros(n, dtype=torch.bool)
    step_of = torch.full((n,), -1)
    price = torch.full((n,), float("nan"), dtype=torch.float64)
    contracts, entry_costs = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    hold = torch.tensor([[H, 0, 0, 0]]).repeat(n, 1)
    rewards, dones, stops = [], [], []
    for k in range(horizon):
        dones.append(env.state.done.clone())
        _, res = env.step(actions if k == 0 else hold, *(conv if k == 0 else (None, None, None)))
        rewards.append(res.reward)
        stops.append(~env.state.plan.active)
        ret, net, costs = ret + GAMMA**k * res.reward, net + res.net, costs + res.costs
        stages = (FillStage.ORDER, FillStage.RESTING) if k == 0 else (FillStage.RESTING,)
        for st in stages:
            new = ~filled & (res.fills[:, st] != 0)
            step_of[new] = k
            price[new] = res.fill_price[new, st]
            contracts[new] = res.fills[new, st]
            entry_costs[new] = res.fill_costs[new, st]
            filled |= new
    w_ret, w_disc, w_len = (
        torch.stack([nstep_windows(torch.stack(rewards)[:, i : i + 1], torch.stack(dones)[:, i : i + 1],
                                   torch.stack(stops)[:, i : i + 1], GAMMA, int(lim))[j][0, 0] for i, lim in
                     enumerate(window.limit.clamp(max=window.n))])
        for j in range(3)
    )  # fmt: skip
    return {
        "ret": ret, "net": net, "costs": costs, "filled": filled, "fill_step": step_of,
        "fill_price": price, "contracts": contracts, "entry_costs": entry_costs,
        "window_ret": w_ret, "window_discount": w_disc, "window_len": w_len,
    }  # fmt: skip


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_taken_actions_counterfactual_is_the_real_outcome_field_for_field(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    cfg = full_config()
    mk = random_market(gen)
    real, what_if = TradingEnv(mk, cfg), TradingEnv(mk, cfg)
    n = 48
    starts = torch.randint(0, 200, (n,), generator=gen)
    real.reset(starts)
    what_if.reset(starts)
    sizes = real.codec.sizes
    # a random history first: positions, plans, resting orders
    for _ in range(int(torch.randint(0, 12, (1,), generator=gen))):
        a = _random_actions(gen, n, sizes)
        real.step(a)
        what_if.step(a)
    state = what_if.state.map(torch.clone)
    actions = _random_actions(gen, n, sizes)
    actions[: n // 2, 0] = torch.where(torch.rand(n // 2, generator=gen) < 0.5, L, S)  # entries among them
    conv = (0.25 + 0.75 * torch.rand(n, generator=gen, dtype=torch.float64),) * 2 + (
        torch.rand(n, generator=gen, dtype=torch.float64),
    )
    horizon = default_horizon(real)
    window = Window(7, decision=True, limit=torch.randint(1, 9, (n,), generator=gen))
    deltas, out = counterfactual_deltas(what_if, state, actions, horizon, GAMMA, conv, window)
    ref = _real(real, actions, horizon, conv, window)
    col = 0
    for b, size in enumerate(sizes[1:], start=1):  # the taken action's column in each block
        taken = col + actions[:, b]
        for name, value in ref.items():
            got = getattr(out, name).gather(1, taken[:, None]).squeeze(1)
            exact = not name.startswith("window_r")  # replay's windows sum in another order
            tol = 0 if exact else 1e-12
            torch.testing.assert_close(got, value, rtol=tol, atol=tol, equal_nan=True, msg=name)
        assert torch.equal(deltas.gather(1, taken[:, None]), torch.zeros(n, 1, dtype=deltas.dtype))
        col += size
    for x, y in zip(what_if.state.tensors(), state.tensors(), strict=True):  # the env's state untouched
        torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)
    assert bool(entry_mask(state, actions).any())
    assert bool(out.filled.any()) and bool((~out.filled).any())  # fills and misses both happened
    assert bool((deltas != 0).any())  # the execution choices mattered somewhere


def _limit_env(low1: float, *, volume: float | None = None) -> TradingEnv:
    """Mid 100 flat, bid 99.875 / ask 100.125 (one ES tick), touch size 3; row 1's low is ``low1``."""
    mid = [100.0] * 8
    low = [99.875] * 8
    low[1] = low1
    vol = None if volume is None else [volume] * 8
    mk = market(mid, low=low, bid_size=[3.0] * 8, volume=vol)
    env = TradingEnv(mk, config())  # fee $1 a contract, no slippage; max position 2, magnitudes 0.5 / 1.0
    env.reset(torch.tensor([0]))
    return env


def test_a_limit_buy_traded_through_fills_at_its_price_and_earns_the_half_spread() -> None:
    env = _limit_env(99.75)
    out = rollout(env, env.state, torch.tensor([[[L, 1, TOUCH, NORMAL], [L, 1, MKT, NORMAL]]]), 4, GAMMA)
    assert out.filled.tolist() == [[True, True]]
    assert out.fill_step.tolist() == [[0, 0]]  # the limit rests from row 1 and fills there
    assert out.fill_price.tolist() == [[99.875, 100.125]]
    assert out.contracts.tolist() == [[2.0, 2.0]]
    # limit: fees 2 x $1, slippage 2 x (99.875 - 100) x 50 = -12.5; market: 2 + 2 x 0.125 x 50 = 14.5
    assert out.entry_costs.tolist() == [[-10.5, 14.5]]
    assert out.cost_per_contract().tolist() == [[-5.25, 7.25]]


def test_a_limit_buy_not_reached_expires_unfilled_and_costs_nothing() -> None:
    env = _limit_env(99.875)  # touches the bid but, with no volume known, only a trade-through fills
    out = rollout(env, env.state, torch.tensor([[[L, 1, TOUCH, NORMAL]]]), 4, GAMMA)
    assert not bool(out.filled[0, 0])
    assert int(out.fill_step[0, 0]) == -1
    assert torch.isnan(out.fill_price[0, 0])
    assert float(out.contracts[0, 0]) == 0.0 and float(out.entry_costs[0, 0]) == 0.0
    assert float(out.ret[0, 0]) == 0.0 and float(out.costs[0, 0]) == 0.0
    assert bool(env.state.order.side[0] == 0)  # the env's own order book untouched


def test_the_queue_fills_one_contract_but_not_two() -> None:
    """At the touch with 3 contracts ahead and 4 traded at the price: 4 >= 3 + 1 fills one contract,
    4 < 3 + 2 leaves two resting: the magnitude changes whether a limit order fills."""
    env = _limit_env(99.875, volume=4.0)
    acts = torch.tensor([[[L, 0, TOUCH, NORMAL], [L, 1, TOUCH, NORMAL]]])
    out = rollout(env, env.state, acts, 1, GAMMA)
    assert out.filled.tolist() == [[True, False]]
    assert out.contracts.tolist() == [[1.0, 0.0]]


def test_magnitude_scales_a_market_orders_cost_by_its_contracts() -> None:
    """No size slippage: each magnitude's market entry costs contracts x (fee + half spread x point value)."""
    cfg = EnvConfig(
        costs=CostConfig(commission_per_contract=0.85, exchange_fee_per_contract=1.40,
                         slippage_ticks_per_contract=0.0, immediate_slippage_ticks=0.0),
        contract=ContractConfig(max_position=10, initial_capital=100_000.0),
        plan=plan_config(horizon=3, profit_mult=1000.0, stop_mult=1000.0),
        episode_rows=6,
    )  # fmt: skip
    env = TradingEnv(market([100.0] * 8), cfg)
    env.reset(torch.tensor([0]))
    out = rollout(env, env.state, torch.tensor([[[L, m, MKT, NORMAL] for m in range(3)]]), 1, GAMMA)
    per_contract = 0.85 + 1.40 + 0.125 * 50.0
    assert out.contracts.tolist() == [[2.0, 5.0, 10.0]]  # round(0.25 x 10) = 2 (half to even), 5, 10
    torch.testing.assert_close(out.entry_costs, out.contracts * per_contract, rtol=0, atol=1e-12)
    torch.testing.assert_close(out.cost_per_contract(), torch.full((1, 3), per_contract, dtype=torch.float64))


def test_variants_vary_one_branch_each_and_deltas_read_against_the_taken_value() -> None:
    sizes = (4, 3, 3, 3)
    taken = torch.tensor([[L, 2, 1, 0]])
    v = execution_variants(taken, sizes)[0]
    assert v.shape == (9, 4)
    assert v[:, 0].tolist() == [L] * 9
    assert v[:3, 1].tolist() == [0, 1, 2] and v[:3, 2:].tolist() == [[1, 0]] * 3
    assert v[3:6, 2].tolist() == [0, 1, 2] and v[3:6, 1].tolist() == [2] * 3
    assert v[6:, 3].tolist() == [0, 1, 2] and v[6:, 1:3].tolist() == [[2, 1]] * 3
    ret = torch.arange(9.0)[None]
    d = branch_deltas(ret, taken, sizes)
    assert d.tolist() == [[-2.0, -1.0, 0.0, -1.0, 0.0, 1.0, 0.0, 1.0, 2.0]]
    probs = tuple(torch.tensor([p]) for p in ([0.0, 0.0, 1.0], [0.5, 0.5, 0.0], [1.0, 0.0, 0.0]))
    adv = execution_advantages(d, probs, sizes)
    assert adv.tolist() == [[-2.0, -1.0, 0.0, -0.5, 0.5, 1.5, 0.0, 1.0, 2.0]]


def test_window_values_add_the_discounted_bootstrap() -> None:
    env = _limit_env(99.875)  # the limit order never fills: its window ends at once, free to act again
    acts = torch.tensor([[[L, 1, TOUCH, NORMAL], [L, 1, MKT, NORMAL]]])
    out = rollout(env, env.state, acts, 6, GAMMA, window=Window(4, decision=True))
    assert out.window_len.tolist() == [[1, 3]]  # the market order's 2-bar plan: entry, 2 bars, timeout
    v = window_values(out, torch.tensor([10.0], dtype=torch.float64))
    torch.testing.assert_close(v, out.window_ret + out.window_discount * 10.0)
    torch.testing.assert_close(out.window_discount, torch.tensor([[GAMMA, GAMMA**3]], dtype=torch.float64))
