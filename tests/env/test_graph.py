"""The CUDA-graph step gives the eager step's results (GPU only)."""

from __future__ import annotations

import pytest
import torch

from foxhunt.env.core import TradingEnv
from tests.env.test_core import config, market

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_graphed_step_matches_eager() -> None:
    from foxhunt.env.graph import GraphedStep

    mid = [100.0 + 0.25 * ((i * 7) % 11) for i in range(400)]
    cfg = config(target_bars=5).model_copy(update={"episode_rows": 64})
    mk = market(mid)
    mk_gpu = type(mk)(**{k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in mk.__dict__.items()})
    eager, graphed_env = TradingEnv(mk_gpu, cfg), TradingEnv(mk_gpu, cfg)
    starts = torch.arange(0, 320, 10, device="cuda")
    eager.reset(starts)
    graphed_env.reset(starts)
    graphed = GraphedStep(graphed_env)
    gen = torch.Generator(device="cuda").manual_seed(0)
    sizes = torch.tensor(eager.codec.sizes, device="cuda")
    for _ in range(40):
        a = (torch.rand(len(starts), 4, generator=gen, device="cuda") * sizes).to(torch.int64)
        _, r_e = eager.step(a)
        r_g = graphed.step(a)
        assert torch.equal(r_e.net, r_g.net) and torch.equal(r_e.written, r_g.written)
    assert torch.equal(eager.state.equity, graphed_env.state.equity)
    assert torch.equal(eager.state.position, graphed_env.state.position)
