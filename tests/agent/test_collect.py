"""The fused collection step (agent/collect.py) and the whole-sequence n-step windows it writes.

On the CPU the step runs eagerly and tests/agent/test_agent.py compares it with the plain loop; here
the vectorised n-step windows are checked against ``NStep`` pushed and flushed, and on CUDA (gpu
marker) the captured graphs (eager step and Inductor-compiled step) against the eager step.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from foxhunt.agent.agent import Agent
from foxhunt.agent.collect import StepMode, compiled_stage, stage
from foxhunt.agent.replay import NStep, nstep_windows
from foxhunt.env.market import AUX_TARGETS
from tests.agent.test_agent import env_config, make_agent, rising_market


@pytest.mark.parametrize(("T", "N", "n"), [(12, 5, 3), (2, 4, 5), (30, 7, 6), (5, 3, 1)])
def test_nstep_windows_equal_nstep_pushed_then_flushed(T: int, N: int, n: int) -> None:
    """Random rewards, dones and stop states (about a third), windows longer and shorter than the
    sequence: returns within float32 rounding of the sum order (1e-6), discounts and bootstrap
    states exactly."""
    g = torch.Generator().manual_seed(T * 100 + n)
    W = 4
    states = torch.randn(T + 1, N, W, generator=g)
    states[..., 0] = (torch.rand(T + 1, N, generator=g) < 0.3).float()

    def stop(s: torch.Tensor) -> torch.Tensor:
        return s[:, 0] > 0.5

    r = torch.randn(T, N, generator=g)
    d = torch.rand(T, N, generator=g) < 0.15
    acc, outs = NStep(N, n, 0.9, stop=stop), []
    for t in range(T):
        o = acc.push(states[t], torch.zeros(N, 2), r[t], d[t], states[t + 1], torch.zeros(N, 3))
        if o is not None:
            outs.append(o)
    tail = acc.flush()
    outs += [tail] if tail is not None else []
    want = {k: torch.cat([o[k] for o in outs]) for k in ("reward", "discount", "next_state")}
    ret, disc, m = nstep_windows(r, d, stop(states[1:].reshape(-1, W)).view(T, N), 0.9, n)
    nxt = states[torch.arange(T).unsqueeze(1) + m, torch.arange(N)]
    torch.testing.assert_close(ret.reshape(-1), want["reward"], rtol=1e-6, atol=1e-6)
    assert torch.equal(disc.reshape(-1), want["discount"])
    assert torch.equal(nxt.reshape(-1, W), want["next_state"])
    assert bool((m < torch.arange(T, 0, -1).clamp(max=n).unsqueeze(1)).any()) or n == 1  # some end early


@pytest.mark.parametrize("mode", [StepMode.GRAPH, StepMode.FUSED])
def test_graph_modes_need_cuda(mode: StepMode) -> None:
    agent = make_agent()
    agent.step_mode = mode
    with pytest.raises(ValueError, match="needs a CUDA device"):
        agent.collect(rising_market(20), env_config(episode_rows=5), torch.tensor([0, 3]), 4)


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_an_agent_builds_its_collector_once_per_market_config_and_shape(algo: str) -> None:
    """Both learners collect through one CachedCollector: the collector is built at the first
    collection and reused while the market, env config, batch shape, steps and step mode stay; any
    of them changed builds another. Each collection feeds the epoch's Sharpe and shaping share to the
    policy's signals."""
    from foxhunt.agent.build import build_agent

    ecfg = env_config(episode_rows=5)
    cfg = make_agent(ecfg.branches).cfg.model_copy(update={"algo": algo})
    agent = build_agent(cfg, ecfg.branches, seed=1, replay_capacity=256)
    mkt, starts = rising_market(30), torch.tensor([0, 3, 7])
    before = agent.policy.signals["sharpe"].clone()
    agent.collect(mkt, ecfg, starts, 4)
    first = agent._collection.collector
    assert first is not None and first.policy.actor is agent.policy and first.replay is agent.replay
    assert not torch.equal(agent.policy.signals["sharpe"], before)  # fed: the rising market pays
    agent.collect(mkt, ecfg, starts + 1, 4)  # other rows of the same market: the same collector
    assert agent._collection.collector is first
    changed = [
        (rising_market(30), ecfg, starts, 4),
        (mkt, env_config(episode_rows=5), starts, 4),  # an equal config, another object
        (mkt, ecfg, starts[:2], 4),
        (mkt, ecfg, starts, 3),
    ]
    built = [first]  # kept alive: a collected object's id may be taken again
    for args in changed:
        agent.collect(*args)
        assert all(agent._collection.collector is not c for c in built)
        built.append(agent._collection.collector)
    agent.step_mode = StepMode.EAGER  # another step mode than AUTO
    agent.collect(*changed[-1])
    assert all(agent._collection.collector is not c for c in built)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [StepMode.GRAPH, StepMode.COMPILED_GRAPH, StepMode.FUSED])
def test_graphed_collection_equals_the_eager_step_on_cuda(mode: StepMode) -> None:
    """Two epochs through the captured step (its random draws from the agent's registered
    generator) give the eager step's actions and replay: actions, states and discounts exactly for
    the graph of the eager step and of the fused step (foxhunt.env.fused: the eager step's
    roundings); rewards to 1e-5 relative for the compiled step (Inductor's fused float64 arithmetic
    rounds differently) and its actions equal on at least 99% of rows."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    rows, n_env, steps = 200, 64, 12
    mkt = rising_market(rows)
    mkt = dataclasses.replace(
        mkt, aux_targets=torch.randn(rows, len(AUX_TARGETS), generator=torch.Generator().manual_seed(5))
    )
    mkt = dataclasses.replace(mkt, **{f.name: _cuda(getattr(mkt, f.name)) for f in dataclasses.fields(mkt)})
    ecfg = env_config(episode_rows=9)
    kw = {
        "explore": {"epsilon": 0.2, "temperature": 1.0, "thompson": 0.5, "count_bonus": 0.1},
        "network": {"noisy_sigma": 0.5},
        "learn": {"n_step": 3},
        "capacity": 4096,
    }
    agents = []
    for m in (StepMode.EAGER, mode):
        agent = Agent(make_agent(ecfg.branches, **kw).cfg, ecfg.branches, device="cuda", replay_capacity=4096)
        agent.step_mode = m
        for e in range(2):
            starts = (torch.arange(n_env, device="cuda") * 2 + e) % (rows - 12)
            agent.collect(mkt, ecfg, starts, steps)
        agents.append(agent)
    eager, fast = agents
    got, want = fast.replay.storage, eager.replay.storage
    if mode in (StepMode.GRAPH, StepMode.FUSED):
        for k in ("state", "action", "discount", "next_state"):
            assert torch.equal(got[k], want[k]), k
        torch.testing.assert_close(got["reward"], want["reward"], rtol=1e-6, atol=1e-6)
    else:
        same = (got["action"] == want["action"]).all(dim=1).float().mean()
        assert float(same) >= 0.99
        torch.testing.assert_close(got["reward"], want["reward"], rtol=1e-5, atol=1e-5)


def _cuda(x: object) -> object:
    return x.cuda() if isinstance(x, torch.Tensor) else x


@pytest.mark.gpu
def test_tf32_exploring_forward_stays_within_its_tolerance_on_cuda() -> None:
    """The collection's forward runs with TF32 matmuls on CUDA (tf32_matmuls). At production sizes
    (1.4 M parameters, weights drawn so that actions' Q-values differ) its Q-values stay within 1e-2
    of the float32 ones relative to each branch's Q scale, and the greedy choice is the same wherever
    float32's best-minus-second gap exceeds twice the largest difference seen; the Q-values do differ
    (TF32 really was on inside the block)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from foxhunt.agent.actor import Mode
    from foxhunt.agent.collect import tf32_matmuls
    from foxhunt.agent.config import AgentConfig, NetworkConfig
    from foxhunt.domain.actions import BranchConfig
    from foxhunt.features.layout import STATE_LAYOUT

    tol = 1e-2
    agent = Agent(AgentConfig(network=NetworkConfig(noisy_sigma=0.0)), BranchConfig(), device="cuda", seed=1)
    gen = torch.Generator("cuda").manual_seed(2)
    with torch.no_grad():  # an initialised network's heads start near zero: every action alike
        for p in agent.policy.net.parameters():
            scale = p.shape[-1] ** -0.5 if p.ndim > 1 else 0.1
            p.copy_(torch.randn(p.shape, device="cuda", generator=gen) * scale)
    obs = torch.randn(4096, STATE_LAYOUT.width, device="cuda", generator=gen)

    def q_values() -> list[torch.Tensor]:
        with torch.no_grad():
            return agent.policy.net.expected_q(agent.policy.net(obs), agent.learner.popart.denormalise)

    q32 = q_values()
    with tf32_matmuls():
        q_tf = q_values()
        greedy_tf = agent.policy(obs, Mode.GREEDY).actions
    assert torch.get_float32_matmul_precision() == "highest"  # restored
    differs = False
    for i, (a, b) in enumerate(zip(q32, q_tf, strict=True)):
        diff = (b - a).abs().max()
        assert float(diff / a.abs().max()) < tol, i
        differs |= bool(diff > 0)
        top = torch.topk(a, 2, dim=1).values
        decisive = (top[:, 0] - top[:, 1]) > 2 * diff
        assert bool(decisive.float().mean() > 0.5), i  # the check below covers most rows
        assert torch.equal(b.argmax(1)[decisive], a.argmax(1)[decisive])
        assert torch.equal(greedy_tf[decisive, i], a.argmax(1)[decisive])
    assert differs


def _stage_inputs(n: int, aux: bool) -> tuple:
    g = torch.Generator().manual_seed(n)
    written = torch.rand(n, generator=g) < 0.8
    return (
        torch.randint(0, 4, (n, 4), generator=g),
        written,
        torch.randint(0, 4, (n,), generator=g),
        torch.randint(0, 3, (n,), generator=g),
        torch.randn(n, generator=g, dtype=torch.float64),
        torch.randn(n, 6, generator=g, dtype=torch.float64),
        torch.rand(n, generator=g) < 0.1,
        torch.randint(1, 50, (n,), generator=g),
        torch.randn(60, len(AUX_TARGETS), generator=g) if aux else None,
        torch.full((n, len(AUX_TARGETS)), float("nan")),
    )


def test_stage_by_hand() -> None:
    """Two episodes: the first written (its realised direction and magnitude replace the picked ones,
    its aux targets those of the row before), the second not (its picks kept, its window ended)."""
    acted, reward, done, aux, sums = stage(
        torch.tensor([[1, 2, 0, 1], [2, 0, 1, 0]]),
        torch.tensor([True, False]),
        torch.tensor([0, 3]),
        torch.tensor([1, 1]),
        torch.tensor([0.5, -2.0], dtype=torch.float64),
        torch.tensor([[0.5, 0.25, -0.25], [-2.0, 1.0, 0.0]], dtype=torch.float64),
        torch.tensor([False, False]),
        torch.tensor([3, 7]),
        torch.arange(30, dtype=torch.float32).view(10, 3),
        torch.zeros(2, 3),
    )
    assert acted.tolist() == [[0, 1, 0, 1], [2, 0, 1, 0]]
    assert reward.dtype == torch.float32 and reward.tolist() == [0.5, -2.0]
    assert done.tolist() == [False, True]
    assert aux.tolist() == [[6.0, 7.0, 8.0], [21.0, 22.0, 23.0]]  # rows 2 and 7
    assert sums.tolist() == [-1.5, 4.25, 1.0, 1.5, 4.0]


@pytest.mark.slow
@pytest.mark.parametrize("aux", [True, False])
def test_compiled_stage_equals_the_eager_one(aux: bool) -> None:
    """Inductor's staging (StepMode.FUSED from COMPILE_MIN_BATCH episodes) gives the eager staging's
    actions, rewards, dones and aux exactly, the float64 sums within 1e-12 relative."""
    args = _stage_inputs(3000, aux)
    want, got = stage(*args), compiled_stage()(*args)
    for w, x in zip(want[:4], got[:4], strict=True):
        assert torch.equal(w, x) or (torch.isnan(w).all() and torch.isnan(x).all())
    torch.testing.assert_close(got[4], want[4], rtol=1e-12, atol=0)
