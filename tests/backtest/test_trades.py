"""``trades.csv``: one row per round trip, summing exactly to the backtest's net PnL.

On hand-made markets (fast) and on the real ES files (slow): the rows' net PnL sums to the net PnL
per window and in total (a position open at a window's end is closed there and says so), their
count is the metrics' trade count, and twice their contracts is the contracts traded.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from foxhunt.backtest.evaluate import ScriptedPolicy, evaluate, evaluate_many, scripted, scripted_env, windows
from foxhunt.backtest.metrics import UNDEFINED, branch_sizes, compute_metrics
from foxhunt.backtest.trades import TRADE_COLUMNS, exit_reasons, iso_utc, trade_rows, write_trades_csv
from foxhunt.domain.actions import BranchConfig
from foxhunt.env.config import ContractConfig, CostConfig, EnvConfig
from foxhunt.env.market import MarketTensors, state_feature_columns
from tests.factories import plan_config

pytestmark = pytest.mark.usefixtures("one_thread")

T0 = 1_357_140_660_000_000_000  # 2013-01-02T15:31:00Z in ns


def _market(mid: list[float], low: list[float], high: list[float]) -> MarketTensors:
    m = torch.tensor(mid, dtype=torch.float64)
    cols = state_feature_columns()
    n = len(mid)
    return MarketTensors(
        features=torch.zeros(n, len(cols)),
        mid=m,
        high=torch.tensor(high, dtype=torch.float64),
        low=torch.tensor(low, dtype=torch.float64),
        bid=m - 0.125,
        ask=m + 0.125,
        vol=torch.full((n,), 1e-3, dtype=torch.float64),
        segment=torch.zeros(n, dtype=torch.int64),
        feature_columns=cols,
    )


def _config(**plan) -> EnvConfig:
    return EnvConfig(
        branches=BranchConfig(magnitude=2, magnitude_fractions=(0.5, 1.0)),
        costs=CostConfig(commission_per_contract=1.0, exchange_fee_per_contract=0.0),
        contract=ContractConfig(max_position=3, initial_capital=100_000.0),
        plan=plan_config(**({"horizon": 4, "profit_mult": 3.0, "stop_mult": 3.0} | plan)),
        episode_rows=9,
    )


def _random_market(seed: int, rows: int = 120) -> MarketTensors:
    rng = np.random.default_rng(seed)
    mid = 100.0 + 0.25 * np.cumsum(rng.integers(-2, 3, rows))
    return _market(
        mid.tolist(),
        (mid - 0.25 * rng.integers(0, 4, rows)).tolist(),
        (mid + 0.25 * rng.integers(0, 4, rows)).tolist(),
    )


@pytest.mark.parametrize("policy", [ScriptedPolicy.LONG, ScriptedPolicy.RANDOM, ScriptedPolicy.FLAT])
def test_trade_rows_sum_to_net_pnl_per_window(policy: ScriptedPolicy, tmp_path: Path) -> None:
    cfg = _config()
    mk = _random_market(3)
    rec = evaluate(mk, cfg, 0, mk.rows, scripted(policy, cfg, seed=1))
    ts = T0 + 60_000_000_000 * np.arange(mk.rows, dtype=np.int64)  # one-minute rows
    rows = trade_rows(rec, ts, fold=2)
    assert sum(exit_reasons(rows).values()) == len(rows)
    write_trades_csv(tmp_path / "trades.csv", rows)
    back = list(csv.DictReader((tmp_path / "trades.csv").open()))
    assert tuple(back[0].keys() if back else TRADE_COLUMNS) == TRADE_COLUMNS
    m = compute_metrics(rec, bars_per_year=1000.0, initial_capital=100_000.0, **branch_sizes(cfg.branches))
    assert len(back) == m["trades"]
    net_window = ((rec.gross_pnl - rec.costs) * rec.written).sum(dim=1).tolist()
    for e, want in enumerate(net_window):
        got = sum(float(r["net_pnl"]) for r in back if int(r["window"]) == e)
        assert math.isclose(got, want, abs_tol=1e-9)
    assert math.isclose(sum(float(r["net_pnl"]) for r in back), m["net_pnl"], abs_tol=1e-9)
    assert 2 * sum(float(r["size"]) for r in back) == m["contracts_traded"]
    for r in back:
        assert r["fold"] == "2" and r["side"] in ("long", "short")
        assert int(r["exit_row"]) >= int(r["entry_row"])  # a limit fill can exit on its own row
        assert math.isclose(float(r["gross_pnl"]) - float(r["costs"]), float(r["net_pnl"]), abs_tol=1e-9)
        minute = (int(r["entry_row"]) + 31) % 60
        assert r["entry_time"] == f"2013-01-02T{15 + (int(r['entry_row']) + 31) // 60:02d}:{minute:02d}:00Z"
    if policy is ScriptedPolicy.FLAT:
        assert back == [] and m["win_rate"] == UNDEFINED
    else:
        assert len(back) > 5
        assert {r["exit_reason"] for r in back} <= {"profit", "stop", "timeout", "window_end"}


def test_a_position_open_at_the_window_end_is_closed_there() -> None:
    # Rising prices, barriers out of reach, a plan longer than the window: one trade per window.
    cfg = _config(horizon=100, profit_mult=1000.0, stop_mult=1000.0)
    mid = [100.0 + 0.25 * i for i in range(25)]
    rec = evaluate(_market(mid, mid, mid), cfg, 0, 25, scripted(ScriptedPolicy.LONG, cfg))
    rows = trade_rows(rec, T0 + np.arange(25, dtype=np.int64), fold=0)
    assert [(r["window"], r["exit_reason"]) for r in rows] == [(w, "window_end") for w in range(3)]
    assert [(r["entry_row"], r["exit_row"]) for r in rows] == [(0, 8), (8, 16), (16, 24)]
    assert rows[0]["entry_time"] == "2013-01-02T15:31:00.000000000Z"  # ns rows: ns precision


def test_buy_hold_buys_once_a_window_and_sells_at_its_end_where_long_re_enters_each_plan() -> None:
    # A random walk whose 4-row plans with barriers 3 vol away exit many times within a 9-row window:
    # long re-enters after each exit, buy-and-hold (the same Full long under scripted_env's plan) never.
    cfg = _config()
    mk = _random_market(5, rows=41)
    ts = T0 + np.arange(mk.rows, dtype=np.int64)
    held_cfg = scripted_env(ScriptedPolicy.BUY_HOLD, cfg)
    assert scripted_env(ScriptedPolicy.LONG, cfg) is cfg  # every other policy runs under the config
    held = trade_rows(evaluate(mk, held_cfg, 0, mk.rows, scripted(ScriptedPolicy.BUY_HOLD, cfg)), ts, 0)
    starts, ends = windows(0, mk.rows, cfg.episode_rows)
    assert [(r["entry_row"], r["exit_row"], r["exit_reason"]) for r in held] == [
        (s, e, "window_end") for s, e in zip(starts.tolist(), ends.tolist(), strict=True)
    ]
    long = trade_rows(evaluate(mk, cfg, 0, mk.rows, scripted(ScriptedPolicy.LONG, cfg)), ts, 0)
    assert len(long) > len(held) and {r["exit_reason"] for r in long} & {"profit", "stop"}
    # One round trip per window: the costs of each are a round trip's, as long's first trade pays.
    assert {float(r["costs"]) for r in held} == {float(long[0]["costs"])}


def test_iso_utc_picks_the_coarsest_exact_unit() -> None:
    assert iso_utc(np.array([T0]))[0] == "2013-01-02T15:31:00Z"
    assert iso_utc(np.array([T0, T0 + 1_000_000]))[1] == "2013-01-02T15:31:00.001Z"


def test_evaluate_many_win_rate_is_undefined_without_trades() -> None:
    # Policy 0 stays flat (Hold), policy 1 goes long: -1 (the undefined sentinel), not 0, for the first.
    cfg = _config()
    mk = _random_market(4, rows=40)
    acts = torch.zeros(2, 40, 4, dtype=torch.int64)
    acts[0, :, 0], acts[1, :, 0] = 1, 2  # Hold, Long
    acts[:, :, 1] = 1
    out = evaluate_many(mk, cfg, 0, 40, acts)
    assert out["trades"][0].item() == 0 and out["win_rate"][0].item() == UNDEFINED
    assert out["trades"][1].item() > 0 and 0.0 <= out["win_rate"][1].item() <= 1.0


# --- the real ES files --------------------------------------------------------------------------

ES2013 = "cme-es/es-2013-lean.ohlcv-1m.dbn.zst"
ESH4 = "cme-es/esh4-glbx-mdp3-20231225.mbo.dbn.zst"


def _backtest(real: Path, rel: str, sets: list[str], out: Path) -> tuple[dict, list[dict]]:
    from foxhunt.backtest.run import run_backtest
    from foxhunt.backtest.settings import BacktestSettings
    from foxhunt.config.loader import load_config
    from foxhunt.dataset.build import get_or_build

    cfg = load_config(None, overrides=sets)
    cache = get_or_build([real / rel], cfg, out / "cache")
    body = run_backtest(cache, BacktestSettings.of(cfg), ScriptedPolicy.LONG, out / "long")
    assert json.loads((out / "long" / "metrics.json").read_text())["trades"] == body["trades"]
    return body, list(csv.DictReader((out / "long" / "trades.csv").open()))


@pytest.mark.slow
def test_es_minute_bars_long_trades_sum_to_net(real_data_dir: Path, tmp_path: Path) -> None:
    """ES 2013 minute bars, ``long``: every round trip is a row (those opened and closed within one
    step included) and the rows add up to the backtest exactly."""
    body, rows = _backtest(real_data_dir, ES2013, ["data.data_source=ohlcv", "data.bar_seconds=60"], tmp_path)
    assert len(rows) == body["trades"] > 100
    assert math.isclose(sum(float(r["net_pnl"]) for r in rows), body["net_pnl"], rel_tol=1e-12, abs_tol=1e-6)
    assert 2 * sum(float(r["size"]) for r in rows) == body["all"]["contracts_traded"]
    assert any(int(r["exit_row"]) - int(r["entry_row"]) == 1 for r in rows)  # one-step round trips counted


@pytest.mark.slow
def test_snapshot_long_holds_one_plan_at_a_time(real_data_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """ESH4 MBO snapshot rows, ``long``: the baseline holds one long position and re-enters only when
    the plan forces it out. Snapshot rows carry no traded range (high = low = mid), so the plan's
    profit and stop levels are reached only by the mid itself; here every exit is the plan's timeout
    (``plan.barrier.horizon`` rows, a few seconds of book updates) or a window's end, so the trade count
    is the number of plans the windows hold: a few hundred, each paying the spread and fees.

    The file holds 2 holiday hours, less than the session that a snapshot row rate is measured over
    (foxhunt.backtest.annualise): this test is about the ledger, so it lowers that floor."""
    import foxhunt.backtest.annualise

    monkeypatch.setattr(foxhunt.backtest.annualise, "MIN_SESSION_SHARE", 0.0)
    body, rows = _backtest(real_data_dir, ESH4, ["data.row_unit=snapshot"], tmp_path)
    reasons = Counter(r["exit_reason"] for r in rows)
    assert {k: v for k, v in body["exit_reasons"].items() if v} == dict(reasons)
    assert len(rows) == body["trades"] and set(reasons) <= {"timeout", "window_end", "profit", "stop"}
    assert math.isclose(sum(float(r["net_pnl"]) for r in rows), body["net_pnl"], rel_tol=1e-12, abs_tol=1e-6)
    # Never two positions at once, never flat longer than the step after an exit.
    by_window: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by_window.setdefault((r["fold"], r["window"]), []).append(r)
    for trades in by_window.values():
        assert all(r["side"] == "long" for r in trades)
        for a, b in zip(trades, trades[1:], strict=False):
            assert a["exit_reason"] != "window_end" and b["entry_row"] == a["exit_row"]
        assert trades[-1]["exit_reason"] == "window_end"
    assert reasons["window_end"] == len(by_window)
