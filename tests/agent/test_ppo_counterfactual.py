"""The counterfactual execution targets and the branch curriculum under PPO (agent.algo = ppo): the
rollout carries every entry's windows, the taken value's window is the real path's, the all-action
term trains on them; a held branch acts at its default and is trained by nothing until released."""

from __future__ import annotations

import pytest
import torch

from foxhunt.agent.config import (
    AgentConfig,
    CounterfactualConfig,
    CurriculumConfig,
    NetworkConfig,
    PPOConfig,
)
from foxhunt.agent.learner import plan_locked
from foxhunt.agent.ppo import PPOAgent
from foxhunt.domain.actions import Direction
from tests.agent.test_agent import SMALL
from tests.env.test_counterfactual import full_config, random_market

L, S = int(Direction.LONG), int(Direction.SHORT)
GAMMA = 0.9

pytestmark = pytest.mark.usefixtures("one_thread")


def _agent(weight: float = 0.0, curriculum: dict | None = None, seed: int = 3) -> PPOAgent:
    cfg = AgentConfig(
        algo="ppo",
        network=NetworkConfig(**SMALL),
        ppo=PPOConfig(gamma=GAMMA, minibatches=2, epochs=2),
        counterfactual=CounterfactualConfig(weight=weight),
        curriculum=CurriculumConfig(**(curriculum or {})),
    )
    return PPOAgent(cfg, full_config().branches, seed=seed, epochs=4)


def _collect(agent: PPOAgent) -> None:
    gen = torch.Generator().manual_seed(11)
    mk = random_market(gen)
    mk.features.normal_(generator=gen)
    agent.collect(mk, full_config(), torch.arange(0, 240, 15), 24)  # 16 episodes x 24 steps


def _stats(agent: PPOAgent) -> list[dict[str, float]]:
    seen: list[dict[str, float]] = []
    agent.learn(0, 0, lambda s: seen.append({k: float(v) for k, v in s.items() if v.ndim == 0}))
    return seen


def test_off_by_default_no_windows_and_no_term() -> None:
    agent = _agent(0.0)
    agent.start_epoch(0)
    _collect(agent)
    assert agent.replay.rollout is not None and agent.replay.rollout.cf is None
    assert all("loss/counterfactual" not in s for s in _stats(agent))


def test_the_rollout_carries_windows_on_exactly_the_entries_and_the_taken_one_is_the_real_path() -> None:
    """The entries with windows are the rows where the execution branches' log-probabilities act
    (Short or Long, no plan lock, a real step); the taken value's window, cut at the next decision state
    or the sequence's end, is the rollout's own discounted rewards over its m steps (discount gamma^m,
    0 where the episode ended inside); the untaken values earned something else; the loss trains on
    them."""
    agent = _agent(1.0)
    agent.start_epoch(0)
    _collect(agent)
    r = agent.replay.rollout
    assert r is not None and r.cf is not None
    steps, n = r.rewards.shape
    act = r.actions.reshape(steps * n, -1)
    state = r.states[:steps].reshape(steps * n, -1)
    entries = r.valid.reshape(-1) & ~plan_locked(state) & ((act[:, 0] == L) | (act[:, 0] == S))
    assert int(entries.sum()) > 5
    assert torch.equal(torch.sort(r.cf.rows).values, entries.nonzero().squeeze(1))
    assert r.cf.ret.shape == (int(entries.sum()), 9)
    col = 0
    for b, size in enumerate((3, 3, 3), start=1):
        taken = act.index_select(0, r.cf.rows)[:, b : b + 1] + col
        m = r.cf.length.gather(1, taken)[:, 0]
        ret = r.cf.ret.gather(1, taken)[:, 0]
        disc = r.cf.discount.gather(1, taken)[:, 0]
        for e, row in enumerate(r.cf.rows.tolist()):
            t, i = divmod(row, n)
            k = int(m[e])
            assert 1 <= k and t + k <= steps
            path = r.rewards[t : t + k, i].double()
            want = float((path * GAMMA ** torch.arange(k, dtype=torch.float64)).sum())
            assert ret[e].item() == pytest.approx(want, rel=1e-4, abs=1e-3)
            ended = bool(r.dones[t : t + k, i].any())
            assert disc[e].item() == pytest.approx(0.0 if ended else GAMMA**k, rel=1e-5)
        col += size
    assert bool((r.cf.ret != r.cf.ret[:, :1]).any())  # the alternatives earned something else
    seen = _stats(agent)
    assert seen and all(s["counterfactual/entries"] > 0 for s in seen)
    assert all(abs(s["loss/counterfactual"]) < float("inf") for s in seen)


def test_counterfactual_term_moves_the_execution_heads_only_through_the_entries() -> None:
    """Same seed, same rollout: with the term on the execution heads end elsewhere than without it
    (the term trains them), the direction head's gradient from it is none (it reads only the execution
    branches' logits)."""
    a, b = _agent(0.0, seed=5), _agent(1.0, seed=5)
    for agent in (a, b):
        agent.start_epoch(0)
        _collect(agent)
        _stats(agent)
    pa, pb = a.policy.net.policy_heads, b.policy.net.policy_heads
    assert any(not torch.equal(x, y) for x, y in zip(pa[1].parameters(), pb[1].parameters(), strict=True))


def test_the_curriculum_holds_branches_at_their_defaults_untrained_then_releases_them() -> None:
    """magnitude held 1 epoch, order type and urgency 2: while held every draw is the default (Full,
    Market, Normal), the held heads get no gradient (no log-probability, entropy or counterfactual
    term) and their entropy statistic is 0; released, they draw and train."""
    agent = _agent(1.0, curriculum={"magnitude": 1, "order_type": 2, "urgency": 2})
    heads = agent.policy.net.policy_heads
    before = [[p.detach().clone() for p in h.parameters()] for h in heads]
    agent.start_epoch(0)
    _collect(agent)
    r = agent.replay.rollout
    assert r is not None
    acts = r.actions[r.valid]
    entries = (acts[:, 0] == L) | (acts[:, 0] == S)
    assert bool(entries.any())
    assert bool((acts[entries, 1] == 2).all() and (acts[:, 2] == 0).all() and (acts[:, 3] == 0).all())
    seen = _stats(agent)
    assert all(s[f"ppo/entropy/{k}"] == 0 for s in seen for k in ("magnitude", "order_type", "urgency"))
    assert all(s["ppo/entropy/direction"] > 0 for s in seen)
    for b in (1, 2, 3):
        assert all(torch.equal(p, q) for p, q in zip(heads[b].parameters(), before[b], strict=True))
    assert not all(torch.equal(p, q) for p, q in zip(heads[0].parameters(), before[0], strict=True))
    agent.start_epoch(1)  # magnitude released, order type and urgency still held
    _collect(agent)
    r = agent.replay.rollout
    assert r is not None
    acts = r.actions[r.valid]
    entries = (acts[:, 0] == L) | (acts[:, 0] == S)
    assert len(set(acts[entries, 1].tolist())) > 1 and bool((acts[:, 2] == 0).all())
    seen = _stats(agent)
    assert all(s["ppo/entropy/order_type"] == 0 for s in seen)
    assert any(s["ppo/entropy/magnitude"] > 0 for s in seen)
    assert not all(torch.equal(p, q) for p, q in zip(heads[1].parameters(), before[1], strict=True))
    assert all(torch.equal(p, q) for p, q in zip(heads[2].parameters(), before[2], strict=True))
    agent.start_epoch(2)  # every branch free
    assert not bool(agent.policy.held.any())


def test_the_curriculum_off_and_one_released_at_epoch_0_act_alike() -> None:
    """A curriculum that holds nothing at epoch 0 changes no draw (the default path is bit-identical)."""
    a, b = _agent(), _agent(curriculum={"magnitude": 0, "order_type": 0, "urgency": 0})
    c = _agent(curriculum={"magnitude": 1})
    for agent in (a, b, c):
        agent.start_epoch(1)
        _collect(agent)
    ra, rb, rc = (x.replay.rollout for x in (a, b, c))
    assert ra is not None and rb is not None and rc is not None
    assert torch.equal(ra.actions, rb.actions) and torch.equal(ra.actions, rc.actions)


@pytest.mark.parametrize("setting", [{"counterfactual": {"weight": 1.0}}, {"curriculum": {"magnitude": 2}}])
def test_ppo_takes_the_counterfactual_targets_and_the_curriculum(setting: dict) -> None:
    """Once refused under PPO (they did nothing there), both now act on either learner."""
    AgentConfig.model_validate({"algo": "ppo", **setting})
    AgentConfig.model_validate({"algo": "dqn", **setting})


def test_ppo_trains_alike_whatever_the_dqn_only_settings() -> None:
    """foxhunt.agent.config.LEARNER_ONLY's DQN keys (what `foxhunt tune` refuses to search under ppo):
    two PPO agents that differ in every such setting collect and learn to the same weights and draws,
    counterfactual targets and curriculum on (the collector's windows are PPO's own)."""
    from foxhunt.agent.config import ActConfig, ExploreConfig, LearnConfig, LossConfig, ReplayConfig

    def agent(dqn: dict) -> PPOAgent:
        cfg = AgentConfig(
            algo="ppo",
            network=NetworkConfig(**{**SMALL, **dqn.get("network", {})}),
            ppo=PPOConfig(gamma=GAMMA, minibatches=2, epochs=2),
            counterfactual=CounterfactualConfig(weight=1.0),
            curriculum=CurriculumConfig(urgency=1),
            loss=LossConfig(**dqn.get("loss", {})),
            learn=LearnConfig(**dqn.get("learn", {})),
            replay=ReplayConfig(**dqn.get("replay", {})),
            explore=ExploreConfig(**dqn.get("explore", {})),
            act=ActConfig(**dqn.get("act", {})),
        )
        return PPOAgent(cfg, full_config().branches, seed=3, epochs=4)

    other = {
        "network": {"atoms": 21, "quantile_embedding": 4, "aux_hidden": 4, "noisy_sigma": 0.1},
        "loss": {"c51": 0.5, "aux": 0.0},
        "learn": {"lr": 0.01, "gamma": 0.5, "n_step": 3, "bootstrap": "steps", "batch": 32},
        "replay": {"capacity": 128, "alpha": 0.0},
        "explore": {"epsilon": 0.9, "temperature": 2.0},
        "act": {"entry_margin": 1.0},
    }
    a, b = agent({}), agent(other)
    for x in (a, b):
        x.start_epoch(0)
        _collect(x)
        _stats(x)
    ra, rb = a.replay.rollout, b.replay.rollout
    assert ra is not None and rb is not None and torch.equal(ra.actions, rb.actions)
    wa, wb = a.policy.net.state_dict(), b.policy.net.state_dict()
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
