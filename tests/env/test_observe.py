"""The state spec: the portfolio and plan slots written by name, scaled and clamped as declared."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from foxhunt.env.core import TradingEnv
from foxhunt.env.observe import clamp_bounds, scale_group
from foxhunt.features.layout import (
    PLAN_SPEC,
    PORTFOLIO_SPEC,
    STATE_LAYOUT,
    STATE_SPEC,
    GroupSpec,
    StateSpec,
    Unit,
)
from tests.env.test_core import config, market

UNITS = {Unit.ONE: 1.0, Unit.CAPITAL: 100_000.0, Unit.MAX_POSITION: 2.0, Unit.HORIZON: 4.0}

# Each slot's value for a raw 3.0 under UNITS, worked by hand, and its clamp.
AT_THREE = {
    "portfolio": {
        "position": (3 / 2, 10),  # contracts / max position
        "unrealised_pnl": (3 / 1_000, 10),  # $ / 1% of capital
        "hold_time": (3 / 4, 10),  # rows / horizon
        "max_pnl": (3 / 1_000, 10),
        "min_pnl": (3 / 1_000, 10),
        "drawdown": (3, 10),
        "cost_paid": (3 / 100, 10),  # $ / 0.1% of capital
        "time_since_trade": (3, 10),
    },
    "plan": {
        "active": (3, 20),
        "direction": (3, 20),
        "target_bars": (3 / 100, 20),
        "remaining_fraction": (3, 20),
        "distance_to_profit": (3, 20),
        "distance_to_stop": (3, 20),
        "entry_regime": (20, 20),  # 3 x 1e3, clamped
    },
}


@pytest.mark.parametrize("group", [PORTFOLIO_SPEC, PLAN_SPEC], ids=lambda g: g.name)
def test_each_slot_name_scale_and_clamp_round_trip(group: GroupSpec) -> None:
    """A raw value put under one slot's name comes back in that slot's column only, scaled as worked
    by hand, and a huge one comes back as exactly +-clamp."""
    assert set(AT_THREE[group.name]) == set(group.names)
    bounds = clamp_bounds(group, device=torch.device("cpu"), dtype=torch.float64)
    for k, name in enumerate(group.names):
        values = {n: torch.zeros(2, dtype=torch.float64) for n in group.names}
        values[name] = torch.tensor([3.0, -1e9], dtype=torch.float64)
        out = scale_group(values, group, UNITS, bounds)  # [2, S]
        expected, clamp = AT_THREE[group.name][name]
        assert out[0, k].item() == pytest.approx(expected, rel=1e-15), name
        assert out[1, k].item() == -clamp, name
        assert torch.count_nonzero(out[:, torch.arange(out.shape[1]) != k]) == 0, name


def test_nan_becomes_zero_only_where_the_group_says() -> None:
    """The plan's NaN (a distance on a row without a price) is 0, "no signal"; the portfolio's is kept."""
    cpu = torch.device("cpu")
    for group, zeroed in ((PLAN_SPEC, True), (PORTFOLIO_SPEC, False)):
        nan = {n: torch.full((1,), float("nan"), dtype=torch.float64) for n in group.names}
        out = scale_group(nan, group, UNITS, clamp_bounds(group, device=cpu, dtype=torch.float64))
        assert bool((out == 0).all()) is zeroed and bool(out.isnan().all()) is not zeroed


def test_spec_and_layout_must_list_the_same_slots_in_the_same_order() -> None:
    assert STATE_SPEC.layout is STATE_LAYOUT
    for g in STATE_SPEC.env_groups:
        assert g.names == STATE_LAYOUT.group(g.name).slots
    swapped = (PORTFOLIO_SPEC.slots[1], PORTFOLIO_SPEC.slots[0], *PORTFOLIO_SPEC.slots[2:])
    with pytest.raises(ValueError, match="portfolio"):
        StateSpec(STATE_LAYOUT, (GroupSpec("portfolio", swapped),))
    with pytest.raises(ValueError, match="plan"):
        StateSpec(STATE_LAYOUT, (GroupSpec("plan", PLAN_SPEC.slots[:-1]),))


def test_observe_writes_the_portfolio_and_plan_by_hand() -> None:
    """Capital 100,000, max position 2, horizon 2; row 0's mid 100.
    env 0: long 1, open trade gross 600 - costs 100 = 500 (0.5% of capital), held 1 row (0.5 of the
    horizon), max 1,000 (1.0), min -200 (-0.2), peak 110,000 vs equity 99,000 (drawdown 0.1), costs
    paid 50 (0.5 per mille); a long plan, vol 1% (vol x mid = 1 point): profit 102 is 2 vols away,
    stop 99 one; remaining (2 - 1) / 2 = 0.5; target 2 / 100; entry regime 1e-2 x 1e3 = 10.
    env 1: flat, no plan: every slot 0."""
    env = TradingEnv(market([100.0, 100.0, 100.0]), config())
    env.reset(torch.zeros(2, dtype=torch.int64))
    s = env._state()

    def t(a: float, b: float) -> torch.Tensor:
        return torch.tensor([a, b], dtype=torch.float64)

    account = replace(s.account, position=t(1, 0), hold_time=torch.tensor([1, 0]), trade_max=t(1000, 0))
    account = replace(account, trade_min=t(-200, 0), peak_equity=t(110_000, 100_000))
    account = replace(account, equity=t(99_000, 100_000))
    account = replace(account, costs_paid=t(50, 0))
    plan = replace(s.plan, active=torch.tensor([True, False]), direction=t(1, 0), profit=t(102, 0))
    plan = replace(plan, stop=t(99, 0), vol=t(1e-2, 0))
    trade = s.trade._replace(gross=t(600, 0), costs=t(100, 0))
    env.state = replace(s, account=account, plan=plan, trade=trade)
    obs = env.observe()
    col = {c: STATE_LAYOUT.index(c) for c in STATE_LAYOUT.columns}
    want = {
        "portfolio.position": 0.5,
        "portfolio.unrealised_pnl": 0.5,
        "portfolio.hold_time": 0.5,
        "portfolio.max_pnl": 1.0,
        "portfolio.min_pnl": -0.2,
        "portfolio.drawdown": 0.1,
        "portfolio.cost_paid": 0.5,
        "portfolio.time_since_trade": 0.0,
        "plan.active": 1.0,
        "plan.direction": 1.0,
        "plan.target_bars": 0.02,
        "plan.remaining_fraction": 0.5,
        "plan.distance_to_profit": 2.0,
        "plan.distance_to_stop": 1.0,
        "plan.entry_regime": 10.0,
    }
    for name, value in want.items():
        assert obs[0, col[name]].item() == pytest.approx(value, rel=1e-6), name
        assert obs[1, col[name]].item() == 0.0, name
