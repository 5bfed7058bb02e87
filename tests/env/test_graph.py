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
    cfg = config(target_bars=5).model_copy(update={"episode_rows": 64})
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
    assert torch.equal(eager.state.equity, inplace.state.equity)
    assert torch.equal(eager.state.returns_ring, inplace.state.returns_ring)
    assert int(eager.state.n_trades.sum()) > 0  # trades happened


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
    assert torch.equal(eager.state.position, inplace.state.position)


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
    assert torch.equal(eager.state.position, graphed_env.state.position)
    torch.testing.assert_close(graphed_env.state.equity, eager.state.equity, rtol=1e-12, atol=1e-6)
