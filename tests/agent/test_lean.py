"""The exploring decision compiled whole (``foxhunt.agent.actor.CompiledExploring``: collection's
policy under ``StepMode.FUSED``) against the eager decision, for DQN and PPO.

Its random numbers are the eager decision's (the same draws from the same generator, made before the
compiled function and handed to it), so:

* traced with the ``eager`` backend (the graph ``torch.compile`` captures, run without generated code)
  every output, the visit counts and the generator's state equal the eager call's exactly, call after
  call, with every exploration method on (count bonus, Boltzmann, Thompson, epsilon), NoisyNet, the
  entry margin and the curriculum;
* compiled by Inductor on the CPU (``slow``: a C++ compile) the actions are the same and the sizing
  inputs and aux predictions within 1e-4 of their scale (float32 arithmetic fused and reordered);
* on CUDA (``gpu``) the same within 1e-4 and the actions equal on at least 99% of rows (an argmax may
  flip on a near-tie), and a ``fused`` collection of 1,024 episodes acts through it.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from foxhunt.agent.actor import CompiledExploring, CompileScope, Exploring
from foxhunt.agent.agent import Agent
from foxhunt.agent.collect import StepMode
from foxhunt.agent.config import AgentConfig, Algo
from foxhunt.agent.ppo import PPOAgent, PPOExploring
from foxhunt.domain.actions import BranchConfig
from foxhunt.env.market import AUX_TARGETS
from foxhunt.features.layout import STATE_LAYOUT
from tests.agent.test_agent import env_config, make_agent, rising_market
from tests.agent.test_collect import _cuda

EVERY_METHOD = {"epsilon": 0.3, "temperature": 0.5, "thompson": 0.5, "count_bonus": 0.2}
FIELDS = ("actions", "direction_conviction", "magnitude_conviction", "q_variance", "aux", "q_gap")


def _dqn_pair(**kw: object) -> tuple[Exploring, Exploring]:
    """Two identical agents' exploring policies (same seed: same weights, same generator state)."""
    return Exploring(make_agent(seed=3, **kw).policy), Exploring(make_agent(seed=3, **kw).policy)


def _ppo_pair(curriculum: bool) -> tuple[PPOExploring, PPOExploring]:
    cfg = AgentConfig(algo=Algo.PPO)
    if curriculum:
        cfg = cfg.model_copy(
            update={"curriculum": cfg.curriculum.model_copy(update={"magnitude": 3, "urgency": 2})}
        )
    agents = [PPOAgent(cfg, BranchConfig(), seed=3) for _ in range(2)]
    for a in agents:
        a.start_epoch(0)
    return PPOExploring(agents[0].policy), PPOExploring(agents[1].policy)


def _same_calls(ref: object, lean: object, calls: int = 4, n: int = 48) -> None:
    """``calls`` decisions of each on the same states: every output, exactly."""
    g = torch.Generator().manual_seed(11)
    for k in range(calls):
        obs = torch.randn(n if k != 2 else n // 2, STATE_LAYOUT.width, generator=g)  # a second shape too
        want, got = ref(obs), lean(obs)  # type: ignore[operator]
        for f in FIELDS:
            assert torch.equal(getattr(got, f), getattr(want, f)), (k, f)
    assert torch.equal(ref.generator.get_state(), lean.generator.get_state())  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "kw",
    [
        {"explore": EVERY_METHOD, "network": {"noisy_sigma": 0.5}},
        {
            "explore": {"epsilon": 0.2},
            "act": {"entry_margin": 0.5},
            "curriculum": {"magnitude": 3, "order_type": 2},
        },
        {"explore": {"thompson": 1.0}, "network": {"symmetry": "mirror", "noisy_sigma": 0.0}},
    ],
)
def test_dqn_decision_traced_whole_is_the_eager_decision_exactly(kw: dict) -> None:
    ref, lean = _dqn_pair(**kw)
    for p in (ref, lean):
        p.actor.hold(0)
    lean.compile(CompileScope.DECISION, backend="eager")
    assert isinstance(lean.lean, CompiledExploring)
    _same_calls(ref, lean)
    for a, b in zip(ref.actor.counts, lean.actor.counts, strict=True):  # the visit counts alike
        assert torch.equal(a, b)
    assert torch.equal(ref.actor.signals["q_gap"], lean.actor.signals["q_gap"])
    assert len(lean.lean.plans) == 2  # one recorded plan a batch shape


@pytest.mark.parametrize("curriculum", [False, True])
def test_ppo_decision_traced_whole_is_the_eager_decision_exactly(curriculum: bool) -> None:
    ref, lean = _ppo_pair(curriculum)
    lean.compile(CompileScope.DECISION, backend="eager")
    _same_calls(ref, lean)
    assert [s.shape[1] for s in lean.lean.plans[(48, STATE_LAYOUT.width)]] == list(lean.actor.sizes)  # type: ignore[union-attr]


def test_the_recorded_plan_is_what_the_eager_decision_draws() -> None:
    """The plan of epsilon-greedy alone: per branch a randint over the branch's values, then a coin."""
    _, lean = _dqn_pair(explore={"epsilon": 0.1})
    lean.compile(CompileScope.DECISION, backend="eager")
    lean(torch.zeros(5, STATE_LAYOUT.width))
    plan = lean.lean.plans[(5, STATE_LAYOUT.width)]  # type: ignore[union-attr]
    sizes = lean.actor.sizes
    assert [(s.shape, s.high) for s in plan] == [x for a in sizes for x in (((5,), a), ((5,), 0))]


def _close(got: object, want: object, rows_equal: float) -> None:
    """Actions equal on ``rows_equal`` of the rows; the sizing inputs, aux and q_gap within 1e-4 of
    each field's largest magnitude (a conviction is a difference of two E[Q] over a running gap: its
    error is E[Q]'s rounding, not a share of itself)."""
    same = (got.actions == want.actions).all(-1).float().mean()  # type: ignore[attr-defined]
    assert float(same) >= rows_equal, float(same)
    for f in FIELDS[1:]:
        w = getattr(want, f)
        scale = float(w.abs().max()) if w.numel() else 0.0
        torch.testing.assert_close(getattr(got, f), w, rtol=1e-4, atol=1e-4 * scale + 1e-7, msg=f)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_decision_compiled_by_inductor_acts_as_the_eager_one_on_the_cpu(algo: str) -> None:
    ref, lean = _dqn_pair(explore=EVERY_METHOD) if algo == "dqn" else _ppo_pair(False)
    lean.compile(CompileScope.DECISION)
    g = torch.Generator().manual_seed(5)
    for _ in range(3):
        obs = torch.randn(64, STATE_LAYOUT.width, generator=g)
        _close(lean(obs), ref(obs), 1.0)


@pytest.mark.gpu
@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_decision_compiled_by_inductor_acts_as_the_eager_one_on_cuda(algo: str) -> None:
    """Default network, 4,096 states, full float32 (no TF32): weights drawn so that actions' values
    differ (an initialised network's heads start near zero, every action alike)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    cfg = AgentConfig(algo=Algo(algo))
    agents = [
        Agent(cfg, BranchConfig(), device="cuda", seed=1, replay_capacity=64)
        if algo == "dqn"
        else PPOAgent(cfg, BranchConfig(), device="cuda", seed=1)
        for _ in range(2)
    ]
    gen = torch.Generator("cuda").manual_seed(2)
    with torch.no_grad():
        for p, q in zip(agents[0].policy.net.parameters(), agents[1].policy.net.parameters(), strict=True):
            scale = p.shape[-1] ** -0.5 if p.ndim > 1 else 0.1
            p.copy_(torch.randn(p.shape, device="cuda", generator=gen) * scale)
            q.copy_(p)
    wrap = Exploring if algo == "dqn" else PPOExploring
    ref, lean = wrap(agents[0].policy), wrap(agents[1].policy)  # type: ignore[arg-type]
    lean.compile(CompileScope.DECISION)
    for _ in range(3):
        obs = torch.randn(4096, STATE_LAYOUT.width, device="cuda", generator=gen)
        _close(lean(obs), ref(obs), 0.99)


@pytest.mark.gpu
@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_a_fused_collection_of_1024_episodes_acts_through_the_compiled_decision(algo: str) -> None:
    """``StepMode.FUSED`` from COMPILE_MIN_BATCH episodes: the collector's policy is the compiled
    decision, two epochs run through the captured step, every action in its branch's range."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    rows = 200
    mkt = rising_market(rows)
    aux = torch.randn(rows, len(AUX_TARGETS), generator=torch.Generator().manual_seed(5))
    mkt = dataclasses.replace(mkt, aux_targets=aux)
    mkt = dataclasses.replace(mkt, **{f.name: _cuda(getattr(mkt, f.name)) for f in dataclasses.fields(mkt)})
    ecfg = env_config(episode_rows=9)
    cfg = AgentConfig(algo=Algo(algo))
    agent = (
        Agent(cfg, ecfg.branches, device="cuda", seed=0, replay_capacity=1 << 15)
        if algo == "dqn"
        else PPOAgent(cfg, ecfg.branches, device="cuda", seed=0)
    )
    agent.step_mode = StepMode.FUSED
    for e in range(2):
        starts = (torch.arange(1024, device="cuda") * 3 + e) % (rows - 12)
        stats = agent.collect(mkt, ecfg, starts, 8)
        assert bool(torch.isfinite(stats["reward_mean"]))
    coll = agent._collection.collector
    assert coll is not None and coll.graph is not None
    assert isinstance(coll.policy.lean, CompiledExploring)  # type: ignore[attr-defined]
    sizes = torch.tensor(agent.policy.sizes, device="cuda")
    assert bool((coll.actions >= 0).all()) and bool((coll.actions < sizes).all())
