"""The learner update replayed as a CUDA graph equals the eager update (CUDA only)."""

from __future__ import annotations

import pytest
import torch

from foxhunt.agent.agent import Agent, UpdateMode
from foxhunt.agent.config import AgentConfig, LearnConfig, NetworkConfig, Symmetry
from foxhunt.agent.learner import Batch
from foxhunt.domain.actions import BranchConfig
from foxhunt.features.layout import STATE_LAYOUT

pytestmark = pytest.mark.gpu

SMALL = dict(hidden=32, trunk_layers=1, experts=4, expert_hidden=8, head_hidden=32, atoms=21, noisy_sigma=0.0)


def _agent(device: str, popart: float = 3e-4, symmetry: Symmetry = Symmetry.NONE) -> Agent:
    cfg = AgentConfig(network=NetworkConfig(**SMALL, symmetry=symmetry), learn=LearnConfig(popart=popart))
    return Agent(cfg, BranchConfig(), device=device, seed=3, replay_capacity=4096)


def _batches(n: int, size: int, device: str) -> list[Batch]:
    g = torch.Generator(device=device).manual_seed(11)
    w = STATE_LAYOUT.width

    def one() -> Batch:
        return Batch(
            state=torch.randn(size, w, device=device, generator=g),
            action=torch.stack(
                [torch.randint(0, k, (size,), device=device, generator=g) for k in (4, 3, 3, 3)], 1
            ),
            reward=torch.randn(size, device=device, generator=g) * 0.1,
            discount=torch.full((size,), 0.97, device=device),
            next_state=torch.randn(size, w, device=device, generator=g),
            aux=torch.full((size, 3), float("nan"), device=device),
            weight=torch.ones(size, device=device),
        )

    return [one() for _ in range(n)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("symmetry", list(Symmetry))
def test_graphed_update_equals_eager_update(symmetry: Symmetry) -> None:
    from foxhunt.agent.graph import GraphedUpdate

    eager, graphed = _agent("cuda", symmetry=symmetry), _agent("cuda", symmetry=symmetry)
    batches = _batches(6, 256, "cuda")
    # The graph's warm-up updates change the agent: warm the eager twin with the same batches.
    for _ in range(3):
        eager.learner.update(batches[0])
    g = GraphedUpdate(graphed.learner, batches[0])  # its 3 warm-up updates; the capture runs none
    for b in batches[1:]:
        pe, _ = eager.learner.update(b)
        pg, _ = g.update(b)
        torch.testing.assert_close(pg, pe, rtol=1e-4, atol=1e-5)
    for pe, pg in zip(eager.policy.net.parameters(), graphed.policy.net.parameters(), strict=True):
        torch.testing.assert_close(pg, pe, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_learn_uses_the_graph_on_cuda_and_schedule_reaches_it() -> None:
    agent = _agent("cuda", popart=0.0)  # PopArt rescales output layers: off, so lr 0 moves nothing
    for b in _batches(4, 256, "cuda"):
        agent.replay.add(
            {k: getattr(b, k) for k in ("state", "action", "reward", "discount", "next_state", "aux")}
        )
    assert agent.update_mode is UpdateMode.AUTO
    agent.learn(2, 128)
    assert agent._graph is not None
    before = [p.detach().clone() for p in agent.policy.net.parameters()]
    for group in agent.learner.opt.param_groups:  # lr 0 through the schedule's tensor: no change
        group["lr"].fill_(0.0)
    agent.learn(2, 128)
    for p, q in zip(before, agent.policy.net.parameters(), strict=True):
        torch.testing.assert_close(q, p)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_compiled_graphed_update_equals_eager_update() -> None:
    """The compiled update (Learner.compile, Inductor kernels) captured as a graph follows the eager
    update within float32 rounding of differently fused reductions (rtol 1e-4 over 5 updates)."""
    from foxhunt.agent.graph import GraphedUpdate

    eager, graphed = _agent("cuda"), _agent("cuda")
    batches = _batches(6, 256, "cuda")
    for _ in range(3):
        eager.learner.update(batches[0])
    g = GraphedUpdate(graphed.learner, batches[0], compile=True)
    assert graphed.learner.compiled
    for b in batches[1:]:
        pe, se = eager.learner.update(b)
        pg, sg = g.update(b)
        torch.testing.assert_close(pg, pe, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(sg["loss/total"], se["loss/total"], rtol=1e-4, atol=1e-6)
    for pe, pg in zip(eager.policy.net.parameters(), graphed.policy.net.parameters(), strict=True):
        torch.testing.assert_close(pg, pe, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_graphed_learn_step_equals_eager_learn_steps() -> None:
    """On CUDA ``Agent.learn`` replays the whole step (replay sample from the agent's generator, the
    update, the priority write, the q_abs EMA) as one graph: it draws the same batches and leaves the
    same network, priorities and signals as the same number of eager steps (its 3 warm-up steps are
    steps too). A graph that replayed its first draw, or skipped the priority write, would differ."""
    from foxhunt.agent.graph import GraphedLearn

    eager, graphed = _agent("cuda"), _agent("cuda")
    eager.update_mode = UpdateMode.EAGER
    for agent in (eager, graphed):
        for b in _batches(4, 256, "cuda"):
            agent.replay.add(
                {k: getattr(b, k) for k in ("state", "action", "reward", "discount", "next_state", "aux")}
            )
    eager.learn(3 + 5, 128)
    graphed.learn(5, 128)
    assert isinstance(graphed._graph, GraphedLearn) and eager._graph is None
    moved = eager.replay.priorities.leaves[: len(eager.replay)] != 1.0
    assert int(moved.sum()) > 128  # the steps drew different batches and re-prioritised them
    torch.testing.assert_close(graphed.replay.priorities.leaves, eager.replay.priorities.leaves)
    torch.testing.assert_close(graphed.policy.signals["q_abs"], eager.policy.signals["q_abs"])
    for pe, pg in zip(eager.policy.net.parameters(), graphed.policy.net.parameters(), strict=True):
        torch.testing.assert_close(pg, pe, rtol=1e-4, atol=1e-5)
