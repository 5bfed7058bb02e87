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
