"""The execution block (foxhunt.backtest.execution): a hand-worked window, its identities on a random
policy over many windows, and pooling."""

from __future__ import annotations

import math

import pytest
import torch

from foxhunt.backtest.evaluate import ScriptedPolicy, evaluate, recorded, scripted
from foxhunt.backtest.execution import execution_summary, pool_execution
from foxhunt.backtest.metrics import StepRecord, branch_sizes, compute_metrics
from foxhunt.domain.actions import BranchConfig, Direction, OrderType, Urgency
from foxhunt.env.config import ContractConfig, CostConfig, EnvConfig
from foxhunt.env.market import MarketTensors, state_feature_columns
from foxhunt.env.trades import LIMIT_EVENTS
from tests.factories import plan_config

L, H = int(Direction.LONG), int(Direction.HOLD)
MKT, TOUCH = int(OrderType.MARKET), int(OrderType.LIMIT_AT_TOUCH)
NORMAL, PATIENT = int(Urgency.NORMAL), int(Urgency.PATIENT)


def _market(mid: list[float], low: list[float] | None = None, high: list[float] | None = None):  # noqa: ANN202
    m = torch.tensor(mid, dtype=torch.float64)
    cols = state_feature_columns()

    def opt(x: list[float] | None) -> torch.Tensor:
        return m.clone() if x is None else torch.tensor(x, dtype=torch.float64)

    return MarketTensors(
        features=torch.zeros(len(mid), len(cols)),
        mid=m,
        high=opt(high),
        low=opt(low),
        bid=m - 0.125,
        ask=m + 0.125,
        vol=torch.full((len(mid),), 1e-4, dtype=torch.float64),
        segment=torch.zeros(len(mid), dtype=torch.int64),
        feature_columns=cols,
    )


def _config(episode_rows: int = 6, horizon: int = 2) -> EnvConfig:
    return EnvConfig(
        branches=BranchConfig(magnitude=2, magnitude_fractions=(0.5, 1.0)),
        costs=CostConfig(
            commission_per_contract=1.0,
            exchange_fee_per_contract=0.0,
            slippage_ticks_per_contract=0.0,
            immediate_slippage_ticks=0.0,
        ),
        contract=ContractConfig(max_position=2, initial_capital=100_000.0),
        plan=plan_config(horizon=horizon, profit_mult=1000.0, stop_mult=1000.0),
        episode_rows=episode_rows,
    )


def test_a_hand_worked_window() -> None:
    """One window of rows 0-5 (tick 0.25, spread 0.25, $50 a point, fee $1 a contract a side).

    step 0: a LimitAtTouch buy of 0.5 x 2 = 1 contract (Patient) at the bid 99.875; row 1 trades
        through it: bought at 99.875 against the mark 100: entry costs 1 x -0.125 x 50 + 1 = -5.25
    steps 1-2: held 100 -> 100.5: gross 25; the timeout (2 rows) sells at row 3's bid 100.375 against
        100.5: 6.25 + 1 = 7.25. Trade 1: net 25 - 2 = 23, costs 2, magnitude 0.5x.
    step 3: a market buy of 1.0 x 2 = 2 contracts (Normal) at the ask 100.625 against 100.5:
        2 x 0.125 x 50 + 2 = 14.5; the window's end sells 2 at row 5's bid: 14.5 more, gross 0.
        Trade 2: net -29, costs 29, magnitude 1x.

    contracts 1 + 1 + 2 + 2 = 6, costs -5.25 + 7.25 + 14.5 + 14.5 = 31, cost per contract 31 / 6.
    """
    mid = [100.0, 100.0, 100.5, 100.5, 100.5, 100.5]
    low = [100.0, 99.75, 100.5, 100.5, 100.5, 100.5]
    cfg = _config()
    actions = torch.tensor([[[L, 0, TOUCH, PATIENT], [H, 0, MKT, NORMAL], [H, 0, MKT, NORMAL],
                             [L, 1, MKT, NORMAL], [H, 0, MKT, NORMAL]]])  # fmt: skip
    rec = evaluate(_market(mid, low), cfg, 0, 6, recorded(actions))
    x = execution_summary(rec, cfg.branches)
    assert (x["entries"], x["contracts"], x["costs"], x["net_pnl"]) == (2, 6.0, 31.0, -6.0)
    assert x["cost_per_contract"] == pytest.approx(31.0 / 6.0)
    assert x["limit_orders"] == {
        "placed": 1, "filled": 1, "expired": 0, "cancelled": 0, "open_at_end": 0, "fill_rate": 1.0
    }  # fmt: skip
    keys = ("entries", "share", "contracts", "entry_costs", "entry_cost_per_contract", "costs", "net_pnl")
    none = dict(zip(keys, (0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0), strict=True))
    market = dict(zip(keys, (1, 0.5, 2.0, 14.5, 7.25, 29.0, -29.0), strict=True))
    limit = dict(zip(keys, (1, 0.5, 1.0, -5.25, -5.25, 2.0, 23.0), strict=True))
    assert x["by_order_type"] == {"Market": market, "Limit_At_Touch": limit, "Limit_Inside": none}
    assert x["by_urgency"] == {"Normal": market, "Patient": limit, "Immediate": none}
    assert x["by_magnitude"] == {"0.5x": limit, "1x": market}


def _random_record(seed: int = 3) -> tuple[StepRecord, EnvConfig]:
    """A random policy (every branch uniform) over 40 windows of a random walk whose rows range a tick
    either side of the mid: market and limit entries, fills, expiries and replacements."""
    g = torch.Generator().manual_seed(seed)
    n = 800
    mid = (100.0 + 0.25 * torch.randint(-1, 2, (n,), generator=g).cumsum(0).to(torch.float64)).tolist()
    low = [m - 0.25 for m in mid]
    high = [m + 0.25 for m in mid]
    cfg = _config(episode_rows=21, horizon=5)
    branches = BranchConfig(magnitude=2, magnitude_fractions=(0.5, 1.0))  # 4 x 2 x 3 x 3
    cfg = cfg.model_copy(update={"branches": branches})
    rec = evaluate(_market(mid, low, high), cfg, 0, n, scripted(ScriptedPolicy.RANDOM, cfg, seed=seed))
    return rec, cfg


def test_the_identities_hold_on_a_random_policy() -> None:
    rec, cfg = _random_record()
    x = execution_summary(rec, cfg.branches)
    m = compute_metrics(rec, bars_per_year=1e5, initial_capital=1e5, **branch_sizes(cfg.branches))
    assert x["entries"] == m["trades"] > 20
    assert x["contracts"] == pytest.approx(m["contracts_traded"]) and x["costs"] == pytest.approx(m["costs"])
    assert x["net_pnl"] == pytest.approx(m["net_pnl"], abs=1e-6)
    assert x["cost_per_contract"] * x["contracts"] == pytest.approx(x["costs"])
    for branch in ("order_type", "urgency", "magnitude"):
        rows = x[f"by_{branch}"].values()
        assert sum(r["entries"] for r in rows) == x["entries"]
        assert sum(r["share"] for r in rows) == pytest.approx(1.0)
        assert sum(r["net_pnl"] for r in rows) == pytest.approx(x["net_pnl"], abs=1e-6)
        assert 2 * sum(r["contracts"] for r in rows) == pytest.approx(x["contracts"])
        for r in rows:
            assert r["entry_cost_per_contract"] * r["contracts"] == pytest.approx(r["entry_costs"])
    lim = x["limit_orders"]
    assert lim["placed"] == lim["filled"] + lim["expired"] + lim["cancelled"] + lim["open_at_end"]
    assert min(lim[e] for e in LIMIT_EVENTS if e != "open_at_end") > 0  # (open at the end: test_core)
    # every limit fill opened a trade (the plan lock: orders rest only while flat)
    limit_entries = sum(r["entries"] for k, r in x["by_order_type"].items() if k != "Market")
    assert lim["filled"] == limit_entries
    assert lim["fill_rate"] == lim["filled"] / lim["placed"]
    # a market entry pays at least the half spread and the fee (a limit fill is marked against the row
    # it fills on, which a trade-through has moved against it: its cost may have either sign)
    assert x["by_order_type"]["Market"]["entry_cost_per_contract"] >= 0.125 * 50 + 1.0 - 1e-9


def test_pooling_adds_the_sums_and_derives_the_ratios_again() -> None:
    rec, cfg = _random_record()
    a = execution_summary(rec, cfg.branches)
    rec2, _ = _random_record(seed=4)
    b = execution_summary(rec2, cfg.branches)
    both = StepRecord.concat([rec, rec2])
    pooled = pool_execution([a, None, b])
    whole = execution_summary(both, cfg.branches)
    assert pooled is not None
    assert pooled["entries"] == whole["entries"] == a["entries"] + b["entries"]
    assert pooled["limit_orders"] == whole["limit_orders"]
    for key in ("contracts", "costs", "net_pnl", "cost_per_contract"):
        assert pooled[key] == pytest.approx(whole[key]), key
    for branch in ("by_order_type", "by_urgency", "by_magnitude"):
        for label, row in whole[branch].items():
            for k, v in row.items():
                assert pooled[branch][label][k] == pytest.approx(v), (branch, label, k)
    assert pool_execution([None]) is None and pool_execution([]) is None
    assert pool_execution([a]) == a


def test_no_trades_no_limit_orders() -> None:
    cfg = _config()
    rec = evaluate(_market([100.0] * 6), cfg, 0, 6, scripted(ScriptedPolicy.FLAT, cfg))
    x = execution_summary(rec, cfg.branches)
    assert (x["entries"], x["contracts"], x["costs"], x["cost_per_contract"]) == (0, 0.0, 0.0, 0.0)
    assert x["limit_orders"]["fill_rate"] is None and not math.isnan(x["by_urgency"]["Normal"]["share"])


def test_a_record_without_the_ledger_is_refused() -> None:
    rec = StepRecord.blank(1, 3)
    with pytest.raises(ValueError, match="ledger"):
        execution_summary(rec, _config().branches)
