"""The committee of agents (foxhunt.agent.committee): the argmax of the members' mean E[Q], the
sizing inputs each member's at the committee's actions, and one member exactly the agent."""

from __future__ import annotations

import pytest
import torch

from foxhunt.agent.actor import Mode
from foxhunt.agent.committee import committee_decision
from foxhunt.domain.actions import Direction
from tests.agent.test_agent import make_agent, states

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_committee_of_one_is_the_agents_greedy_policy() -> None:
    agent = make_agent(seed=3)
    agent.policy.signals["q_gap"].fill_(0.7)
    agent.policy.signals["q_abs"].fill_(2.0)
    x = states(32)
    want, got = agent.policy(x, Mode.GREEDY), committee_decision([agent.policy], x)
    for field in ("actions", "direction_conviction", "magnitude_conviction", "q_variance", "aux", "q_gap"):
        assert torch.equal(getattr(got, field), getattr(want, field)), field


def test_two_copies_of_an_agent_decide_as_the_agent() -> None:
    agent = make_agent(seed=4)
    x = states(32, seed=2)
    want, got = agent.policy(x, Mode.GREEDY), committee_decision([agent.policy, agent.policy], x)
    assert torch.equal(got.actions, want.actions)
    for field in ("direction_conviction", "magnitude_conviction", "q_variance", "aux"):
        assert torch.allclose(getattr(got, field), getattr(want, field), rtol=1e-6, atol=1e-7), field


def test_the_committee_takes_the_argmax_of_the_mean_q_hand_worked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A: direction E[Q] [0, 2, 3, -4] (argmax 2, Long), B: [0, 2, -4, 3] (argmax 3); the mean [0, 2,
    -0.5, -0.5] picks 1, which neither member picks. The conviction is the mean's best-minus-second
    gap (2) over each member's 2 q_gap (2 x 1 and 2 x 0.5): 1 and 2, averaged 1.5."""
    a, b = make_agent(seed=5), make_agent(seed=6)
    a.policy.signals["q_gap"].fill_(1.0)
    b.policy.signals["q_gap"].fill_(0.5)
    x = states(1, seed=3)
    direction = {a: [0.0, 2.0, 3.0, -4.0], b: [0.0, 2.0, -4.0, 3.0]}
    magnitude = {a: [1.0, 0.0, 0.0], b: [0.0, 0.0, 3.0]}  # mean [0.5, 0, 1.5]: 2

    def crafted(agent):
        real = agent.policy.greedy_values

        def values(s):
            out, qs = real(s)
            q = [torch.tensor([direction[agent]]), torch.tensor([magnitude[agent]])]
            return out, (*q, *qs[2:])

        return values

    for m in (a, b):
        monkeypatch.setattr(m.policy, "greedy_values", crafted(m))
    d = committee_decision([a.policy, b.policy], x)
    assert d.actions[0, 0].item() == 1 and d.actions[0, 1].item() == 2
    assert list(direction[a]).index(max(direction[a])) == int(Direction.LONG) == 2  # A alone: Long
    assert d.direction_conviction.item() == pytest.approx(1.5)
    assert d.q_gap.item() == pytest.approx(2.0)
    # magnitude: the mean's gap 1.5 - 0.5 = 1 over 2 q_gap (2 and 1): 0.5 and 1, averaged 0.75
    assert d.magnitude_conviction.item() == pytest.approx(0.75)
    # the members' own choices, to show the committee overrules both
    pa, pb = committee_decision([a.policy], x), committee_decision([b.policy], x)
    assert pa.actions[0, 0].item() == 2 and pb.actions[0, 0].item() == 3


def test_an_empty_committee_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one agent"):
        committee_decision([], states(2))


# --- agent.curriculum: a member abstains on the branches it holds -----------------------------------

CURRICULUM = {"magnitude": 1, "order_type": 2, "urgency": 2}
EXECUTION = slice(1, None)  # magnitude, order type, urgency


def _dqn(seed: int, epoch: int):
    agent = make_agent(seed=seed, curriculum=CURRICULUM)
    agent.start_epoch(epoch)  # 0: every execution branch held; 1: magnitude released; 2: all
    return agent


def _ppo(seed: int, epoch: int):
    from tests.agent.test_ppo_counterfactual import _agent

    agent = _agent(curriculum=CURRICULUM, seed=seed)
    agent.start_epoch(epoch)
    return agent


def _defaults(agent) -> torch.Tensor:
    """The held choices (largest magnitude, Market, Normal) of the execution branches."""
    return agent.policy.held_at[EXECUTION]


@pytest.mark.parametrize("make", [_dqn, _ppo], ids=["dqn", "ppo"])
def test_members_that_all_hold_a_branch_vote_its_default(make) -> None:
    """Two members at epoch 0 hold every execution branch: the committee acts Full, Market, Normal on
    every row, as each member alone does; the mean of their untrained heads would not."""
    a, b = make(5, 0), make(6, 0)
    x = states(256, seed=7)
    got = committee_decision([a.policy, b.policy], x).actions
    assert bool((got[:, EXECUTION] == _defaults(a)).all())
    for m in (a, b):
        assert bool((m.policy(x, Mode.GREEDY).actions[:, EXECUTION] == _defaults(a)).all())
    # what the committee chose before it honoured the hold: the argmax of the plain mean, not the default
    mean = [(qa + qb) / 2 for qa, qb in zip(a.policy.expected_q(x), b.policy.expected_q(x), strict=True)]
    plain = torch.stack([q.argmax(-1) for q in mean[EXECUTION]], dim=1)
    assert not bool((plain == _defaults(a)).all())


@pytest.mark.parametrize("make", [_dqn, _ppo], ids=["dqn", "ppo"])
def test_the_members_that_released_a_branch_decide_it_alone(make) -> None:
    """A member at epoch 0 (held) and one at epoch 2 (released): the execution branches are the released
    member's own greedy choices; the direction (never held) is the argmax of both members' mean."""
    held, free = make(5, 0), make(6, 2)
    x = states(256, seed=8)
    got = committee_decision([held.policy, free.policy], x).actions
    alone = free.policy(x, Mode.GREEDY).actions
    assert torch.equal(got[:, EXECUTION], alone[:, EXECUTION])
    assert not bool((alone[:, EXECUTION] == _defaults(free)).all())  # released: it does not act held
    qa, qb = held.policy.expected_q(x)[0], free.policy.expected_q(x)[0]
    acting = [held.policy.acting_q((qa,))[0], free.policy.acting_q((qb,))[0]]
    assert torch.equal(got[:, 0], ((acting[0] + acting[1]) / 2).argmax(-1))


@pytest.mark.parametrize("make", [_dqn, _ppo], ids=["dqn", "ppo"])
@pytest.mark.parametrize("epoch", [0, 1, 2])
def test_a_committee_of_one_held_member_is_that_member(make, epoch: int) -> None:
    agent = make(3, epoch)
    x = states(64, seed=9)
    want, got = agent.policy(x, Mode.GREEDY), committee_decision([agent.policy], x)
    for field in ("actions", "direction_conviction", "magnitude_conviction", "q_variance", "aux", "q_gap"):
        assert torch.equal(getattr(got, field), getattr(want, field)), field
