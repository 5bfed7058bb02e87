"""The plan's exits are the labels' triple barrier: same entry reference, first checked row and horizon.

A market order filled on step row ``r`` takes its plan's entry reference at ``mid[r+1]`` (the close
of the row the step moves to); the label of row ``t = r+1`` (:func:`foxhunt.validation.labels.
triple_barrier`, the barrier of :mod:`foxhunt.domain.barrier`) enters at ``close[t]`` and scans
rows ``t+1 .. t+horizon``. Row ``t``'s own range traded before that close, so neither may be
stopped or paid by it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.data.returns import trailing_volatility
from foxhunt.domain.actions import BranchConfig, Direction, OrderType, Urgency
from foxhunt.domain.exits import ExitReason, outcome_reason
from foxhunt.env.config import ContractConfig, CostConfig, EnvConfig, PositionSizingConfig
from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.market import MarketTensors, state_feature_columns
from foxhunt.validation.labels import triple_barrier
from tests.factories import plan_config

pytestmark = pytest.mark.usefixtures("one_thread")

L, S, H = int(Direction.LONG), int(Direction.SHORT), int(Direction.HOLD)
MKT, N_ = int(OrderType.MARKET), int(Urgency.NORMAL)
VOL = 1e-3  # per-row vol of the hand-made markets: a mult of 5 puts a level 0.5% from the entry


def _market(mid, high=None, low=None, vol=None) -> MarketTensors:
    mid_t = torch.tensor(mid, dtype=torch.float64)
    n = len(mid)
    cols = state_feature_columns()

    def col(x, default):
        return default if x is None else torch.tensor(x, dtype=torch.float64)

    return MarketTensors(
        features=torch.zeros(n, len(cols)),
        mid=mid_t,
        high=col(high, mid_t.clone()),
        low=col(low, mid_t.clone()),
        bid=mid_t - 0.125,
        ask=mid_t + 0.125,
        vol=col(vol, torch.full((n,), VOL, dtype=torch.float64)),
        segment=torch.zeros(n, dtype=torch.int64),
        feature_columns=cols,
    )


def _config(episode_rows: int, **plan) -> EnvConfig:
    return EnvConfig(
        branches=BranchConfig(magnitude=2, magnitude_fractions=(0.5, 1.0)),
        costs=CostConfig(
            commission_per_contract=1.0,
            exchange_fee_per_contract=0.0,
            slippage_ticks_per_contract=0.0,
            immediate_slippage_ticks=0.0,
        ),
        contract=ContractConfig(max_position=1, initial_capital=1e9),  # never near the capital floor
        plan=plan_config(**({"horizon": 50, "profit_mult": 5.0, "stop_mult": 5.0} | plan)),
        sizing=PositionSizingConfig(kelly_weight=0.0),  # a losing record must not size the next entry to 0
        episode_rows=episode_rows,
    )


def _act(d: int, n: int = 1) -> torch.Tensor:
    return torch.tensor([[d, 1, MKT, N_]] * n)


def _one_segment(n: int) -> np.ndarray:
    """``segment_start`` of n rows in one session."""
    start = np.zeros(n, bool)
    start[0] = True
    return start


def _run(env: TradingEnv, direction: int, starts: list[int]) -> list[list[tuple[int, int, int]]]:
    """Step every episode with ``direction`` to its end: each one's ``(entry_row, exit_row, reason)``."""
    env.reset(torch.tensor(starts))
    out: list[list[tuple[int, int, int]]] = [[] for _ in starts]
    while not env.state.done.all():
        _, r = env.step(_act(direction, len(starts)))
        for e in range(len(starts)):
            out[e].extend(_closed(r, e))
    return out


def _closed(r: StepResult, e: int) -> list[tuple[int, int, int]]:
    """Episode ``e``'s trades closed in a step: ``(entry_row, exit_row, reason)`` in fill order."""
    t = r.trades
    rows = t.closed[e].nonzero()[:, 0].tolist()
    return [(t.entry_row[e, k].item(), t.exit_row[e, k].item(), t.reason[e, k].item()) for k in rows]


def _run_on(env: TradingEnv, directions: list[int]) -> list[tuple[int, int, int]]:
    """Continue one episode with ``directions``: its closed trades ``(entry_row, exit_row, reason)``."""
    out = []
    for d in directions:
        _, r = env.step(_act(d))
        out.extend(_closed(r, 0))
    return out


def test_entry_rows_range_does_not_stop_the_plan() -> None:
    """Long at row 0 (entry reference mid[1] = 100, stop 99.5): row 1's low 99 traded before that
    close, so the plan survives it; rows 2.. stay above the stop and the plan times out at 1 + 3."""
    mid = [100.0] * 8
    low = [100.0, 99.0, 99.75, 99.75, 99.75, 99.75, 99.75, 99.75]
    env = TradingEnv(_market(mid, low=low), _config(8, horizon=3))
    env.reset(torch.tensor([0]))
    _, r = env.step(_act(L))
    assert r.exit_reason.item() == 0 and env.state.account.position.item() == 1.0
    assert env.state.plan.active.item()
    assert env.state.plan.best.item() == 100.0  # row 1's range is not folded into the best price
    assert env.state.plan.stop.item() == pytest.approx(99.5)
    trades = _run_on(env, [H, H, H])
    assert trades == [(0, 4, ExitReason.TIMEOUT)]


def test_trailing_stop_ignores_the_entry_rows_high() -> None:
    """A trailing stop trails the best price since the entry reference: row 1's high 110 is older
    than mid[1] = 100 and must not drag the stop up to 110 x (1 - 0.005) (which row 2 would hit)."""
    mid = [100.0, 100.0, 100.0, 100.0, 100.0, 100.0]
    high = [100.0, 110.0, 100.0, 100.0, 100.0, 100.0]
    env = TradingEnv(_market(mid, high=high), _config(6, stop_mult=1000.0, trailing_mult=5.0))
    env.reset(torch.tensor([0]))
    env.step(_act(L))
    _, r = env.step(_act(H))
    assert r.exit_reason.item() == 0 and env.state.plan.active.item()
    assert env.state.plan.stop.item() == pytest.approx(100.0 * (1 - 0.005))


def test_profit_on_the_second_row_after_the_fill_exits_there() -> None:
    """Short at row 2 (entry reference mid[3] = 100, profit 99.5): row 4 trades to 99.5, the exit."""
    mid = [100.0, 100.0, 100.0, 100.0, 99.75, 99.75, 99.75]
    low = [100.0, 100.0, 100.0, 100.0, 99.5, 99.75, 99.75]
    env = TradingEnv(_market(mid, low=low), _config(5, horizon=3))
    env.reset(torch.tensor([2]))
    _, r0 = env.step(_act(S))
    assert r0.exit_reason.item() == 0 and env.state.account.position.item() == -1.0
    assert _run_on(env, [H]) == [(2, 4, ExitReason.PROFIT)]
    o, off, _ = triple_barrier(mid, mid, low, _one_segment(7), [VOL] * 7, 5.0, 5.0, 3, side=-1)
    assert (outcome_reason(o[3]), 3 + off[3]) == (ExitReason.PROFIT, 4)  # the label of the entry row agrees


def test_timeout_after_exactly_the_label_horizon() -> None:
    """horizon = 3: a long filled on row 0 (entry reference row 1) exits on row 1 + 3, which is
    horizon + 1 rows after the fill row, and the label of row 1 times out at offset 3."""
    mid = [100.0] * 8
    env = TradingEnv(_market(mid), _config(8, horizon=3))
    env.reset(torch.tensor([0]))
    assert _run_on(env, [L, H, H, H]) == [(0, 4, ExitReason.TIMEOUT)]
    o, off, _ = triple_barrier(mid, mid, mid, _one_segment(8), [VOL] * 8, 5.0, 5.0, 3)
    assert (outcome_reason(o[1]), off[1]) == (ExitReason.TIMEOUT, 3)


@pytest.mark.parametrize("direction", [L, S])
def test_every_plan_exit_is_the_triple_barrier_label_of_its_entry_row(direction: int) -> None:
    """Always-long (always-short) episodes on a random walk with wicks: each trade opens on row r,
    so its label row is t = r + 1 (the entry reference), and its exit reason and row are the label's
    outcome and t + exit offset. A trade the window's end closed has a label exit past that row."""
    rng = np.random.default_rng(7)
    n = 400
    mid = 100.0 + 0.25 * np.cumsum(rng.integers(-2, 3, n))
    high = mid + 0.25 * rng.integers(0, 6, n)
    low = mid - 0.25 * rng.integers(0, 6, n)
    seg = _one_segment(n)
    vol = trailing_volatility(mid, seg, 20)
    horizon, mult = 4, 3.0
    market = _market(mid.tolist(), high.tolist(), low.tolist(), np.nan_to_num(vol).tolist())
    env = TradingEnv(market, _config(60, horizon=horizon, profit_mult=mult, stop_mult=mult))
    starts = list(range(25, n - 60, 47))
    side = 1 if direction == L else -1
    outcome, offset, valid = triple_barrier(mid, high, low, seg, vol, mult, mult, horizon, side)
    seen = set()
    for start, trades in zip(starts, _run(env, direction, starts), strict=True):
        # Always in the market: each trade opens on the row the last one exited and the last one
        # exits on the window's last row; so every plan of the window is compared below.
        assert trades[0][0] == start and trades[-1][1] == start + 59
        assert all(b[0] == a[1] for a, b in zip(trades, trades[1:], strict=False))
        for entry, exit_row, reason in trades:
            t = entry + 1
            assert valid[t] and vol[t] > env.cfg.plan.min_vol  # the env used the label's own vol
            if reason == ExitReason.WINDOW_END:
                assert exit_row == start + 59 and t + offset[t] > exit_row
                continue
            assert (reason, exit_row) == (outcome_reason(outcome[t]), t + offset[t])
            seen.add(reason)
    assert seen == {ExitReason.PROFIT, ExitReason.STOP, ExitReason.TIMEOUT}  # every class exercised
