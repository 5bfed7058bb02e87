"""The in-place step (what the CUDA graph replays, compiled or not) gives the eager step's results."""

from __future__ import annotations

import pytest
import torch

from foxhunt.env.core import TradingEnv
from foxhunt.env.graph import COMPILE_OPTIONS, advance, own_storage
from foxhunt.env.market import MarketTensors
from tests.env.test_core import config, market


def _market(device: str) -> MarketTensors:
    """A zig-zag market with touch sizes and volume (so the queue-aware fills run)."""
    mid = [100.0 + 0.25 * ((i * 7) % 11) for i in range(400)]
    low = [m - 0.125 * (i % 3 == 0) for i, m in enumerate(mid)]
    sizes = [float(1 + (i * 5) % 9) for i in range(400)]
    volume = [float((i * 3) % 7) for i in range(400)]
    mk = market(mid, low=low, bid_size=sizes, volume=volume)
    moved = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in mk.__dict__.items()}
    return type(mk)(**moved)


def _envs(device: str) -> tuple[TradingEnv, TradingEnv, torch.Tensor]:
    cfg = config(horizon=5).model_copy(update={"episode_rows": 64})
    mk = _market(device)
    eager, inplace = TradingEnv(mk, cfg), TradingEnv(mk, cfg)
    starts = torch.arange(0, 320, 10, device=device)
    eager.reset(starts)
    inplace.reset(starts)
    own_storage(inplace)
    return eager, inplace, starts


def _actions(gen: torch.Generator, n: int, env: TradingEnv) -> torch.Tensor:
    sizes = torch.tensor(env.codec.sizes, device=env.device)
    return (torch.rand(n, 4, generator=gen, device=env.device) * sizes).to(torch.int64)


def test_in_place_advance_traces_whole_and_matches_the_step() -> None:
    eager, inplace, starts = _envs("cpu")
    step = torch.compile(advance, backend="eager", fullgraph=True)  # fullgraph: no graph break
    gen = torch.Generator().manual_seed(0)
    for _ in range(40):
        a = _actions(gen, len(starts), eager)
        obs_e, r_e = eager.step(a)
        r_i, obs_i = step(inplace, inplace.state, a, True)
        assert torch.equal(r_e.net, r_i.net) and torch.equal(r_e.written, r_i.written)
        assert torch.equal(obs_e, obs_i)
    assert torch.equal(eager.state.account.equity, inplace.state.account.equity)
    assert torch.equal(eager.state.risk.returns_ring, inplace.state.risk.returns_ring)
    assert int(eager.state.account.n_trades.sum()) > 0  # trades happened


def test_advance_without_the_ledger_keeps_the_state_and_what_collection_reads() -> None:
    """``ledger=False`` (training collection, the recorded-policy backtest) changes only the result:
    the same next state and obs, the same rewards, PnL, closed flags and closed-trade PnL; the trade
    detail and per-stage fills are empty (a reader of them fails loudly instead of reading zeros)."""
    full, lean_env, starts = _envs("cpu")
    own_storage(full)
    gen = torch.Generator().manual_seed(2)
    closed = 0
    for _ in range(40):
        a = _actions(gen, len(starts), full)
        r_f, obs_f = advance(full, full.state, a, True)
        r_l, obs_l = advance(lean_env, lean_env.state, a, True, ledger=False)
        assert torch.equal(obs_f, obs_l)
        for name in ("gross", "costs", "net", "reward", "written", "realised_direction", "components"):
            assert torch.equal(getattr(r_f, name), getattr(r_l, name)), name
        assert torch.equal(r_f.trades.closed, r_l.trades.closed)
        assert torch.equal(r_f.trades.pnl, r_l.trades.pnl)
        assert r_l.trades.entry_price.numel() == 0 and r_l.fills.numel() == 0
        closed += int(r_f.trades.closed.sum())
    assert closed > 0  # trades closed: the comparison above is not of zeros only
    assert torch.equal(full.state.account.equity, lean_env.state.account.equity)
    assert torch.equal(full.state.account.n_trades, lean_env.state.account.n_trades)


@pytest.mark.slow
def test_inductor_step_matches_eager_on_cpu() -> None:
    eager, inplace, starts = _envs("cpu")
    step = torch.compile(advance, fullgraph=True, options=COMPILE_OPTIONS)
    gen = torch.Generator().manual_seed(1)
    for _ in range(20):
        a = _actions(gen, len(starts), eager)
        obs_e, r_e = eager.step(a)
        r_i, obs_i = step(inplace, inplace.state, a, True)
        torch.testing.assert_close(r_i.net, r_e.net, rtol=1e-12, atol=1e-9)
        torch.testing.assert_close(obs_i, obs_e, rtol=1e-5, atol=1e-5)
    assert torch.equal(eager.state.account.position, inplace.state.account.position)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("compiled", [False, True])
def test_graphed_step_matches_eager(compiled: bool) -> None:
    from foxhunt.env.graph import GraphedStep

    eager, graphed_env, starts = _envs("cuda")
    graphed = GraphedStep(graphed_env, compile=compiled, observe=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(40):
        a = _actions(gen, len(starts), eager)
        obs_e, r_e = eager.step(a)
        r_g = graphed.step(a)
        if compiled:  # Inductor may contract a * b + c into one rounding
            torch.testing.assert_close(r_g.net, r_e.net, rtol=1e-12, atol=1e-9)
            torch.testing.assert_close(graphed.obs, obs_e, rtol=1e-5, atol=1e-5)
        else:
            assert torch.equal(r_e.net, r_g.net) and torch.equal(graphed.obs, obs_e)
        assert torch.equal(r_e.written, r_g.written)
    assert torch.equal(eager.state.account.position, graphed_env.state.account.position)
    equity_g, equity_e = graphed_env.state.account.equity, eager.state.account.equity
    torch.testing.assert_close(equity_g, equity_e, rtol=1e-12, atol=1e-6)
