"""The step's cheaper paths give the full step's numbers: the lean step (no ledger), the per-row quote
tables (kept in step with a swapped market), and float32 money against float64 (the bound in
docs/design.md, "The env's dtype")."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from foxhunt.env.core import TradingEnv
from foxhunt.env.trades import LEAN_FIELDS
from tests.env.test_core import MKT, N_, L, config, market
from tests.env.test_graph import _actions, _market

REPO = Path(__file__).resolve().parents[2]


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.n += 0 if func.is_view else 1
        return func(*args, **(kwargs or {}))


def _pair() -> tuple[TradingEnv, TradingEnv]:
    cfg = config(horizon=5).model_copy(update={"episode_rows": 32})
    mk = _market("cpu")
    full, lean = TradingEnv(mk, cfg), TradingEnv(mk, cfg)
    starts = torch.arange(0, 320, 10)
    full.reset(starts)
    lean.reset(starts)
    return full, lean


def test_lean_step_gives_the_full_steps_state_and_money_with_fewer_operators() -> None:
    full, lean = _pair()
    gen = torch.Generator().manual_seed(7)
    trades = 0
    for _ in range(34):  # past the 32-row windows: every episode ends, so every trade closes
        a = _actions(gen, 32, full)
        obs_f, r_f = full.step(a)
        obs_l, r_l = lean.step(a, ledger=False)
        trades += int(r_f.trades.closed.sum())
        assert torch.equal(obs_f, obs_l)
        for name in ("gross", "costs", "net", "reward", "written", "exit_reason", "components"):
            assert torch.equal(getattr(r_f, name), getattr(r_l, name)), name
        assert torch.equal(r_f.trades.closed, r_l.trades.closed)
        assert torch.equal(r_f.trades.pnl, r_l.trades.pnl)
        assert r_l.fills.numel() == r_l.trades.size.numel() == 0  # lean: StepResult.lean's shape
    for x, y in zip(full.state.tensors(), lean.state.tensors(), strict=True):  # the whole next portfolio
        torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)  # (NaN: an unknown queue)
    assert trades > 10  # the ledger's detail mattered: trades closed
    with _Ops() as ops_full:
        full.step(a)
    with _Ops() as ops_lean:
        lean.step(a, ledger=False)
    assert "size" in LEAN_FIELDS  # the accounting's per-contract PnL reads it
    assert ops_lean.n <= ops_full.n - 50, (ops_lean.n, ops_full.n)


def test_swapped_market_rebuilds_the_quote_tables() -> None:
    # serve swaps env.market in place: a market order must fill at the new market's touch
    cfg = config()
    env = TradingEnv(market([100.0] * 8), cfg)
    env.market = market([200.0] * 8)
    env.reset(torch.tensor([0]))
    _, r = env.step(torch.tensor([[L, 1, MKT, N_]]))
    assert r.fills[0, 0].item() == 2.0
    assert r.fill_price[0, 0].item() == 200.125  # the new ask, not 100.125
    assert env.regime.shape == (8,)


def test_float32_money_error_against_float64_is_within_the_stated_bound() -> None:
    """The same recorded random policy in float64 and float32 (bench/env_dtype.py, short): the
    float32 equity is within 1e-7 of the traded notional of the float64 one and its own float32
    accumulation within 1e-8 of it, with no decision changed (docs/design.md states the long run)."""
    sys.path.insert(0, str(REPO / "bench"))
    from env_dtype import compare

    out = compare(8, 60)
    assert out["notional_mean"] > 1e6  # it traded
    assert out["diverged_envs"] == 0
    assert out["vs_float64_rel_notional_max"] < 1e-7, out
    assert out["accumulator_rel_notional_max"] < 1e-8, out
    assert out["vs_float64_max"] < 1.0, out  # $ on 250,000 of equity
