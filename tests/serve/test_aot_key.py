"""serve.aot.policy_key: a compiled library is found again only for the policy it was built from."""

from __future__ import annotations

import torch

from foxhunt.serve.aot import policy_key
from tests.agent.test_agent import make_agent, states


def test_the_policy_key_tells_apart_what_the_export_bakes_in() -> None:
    """Same weights, config and batch: the same key. The curriculum's held branches (an early epoch's
    checkpoint holds what a later one does not, weights and config alike), other weights, another
    batch shape: another key."""
    curriculum = {"magnitude": 1, "order_type": 2, "urgency": 2}
    a, b = make_agent(curriculum=curriculum), make_agent(curriculum=curriculum)
    obs = states(1)
    a.start_epoch(0)
    b.start_epoch(0)
    assert policy_key([a], obs) == policy_key([b], obs)
    b.start_epoch(1)  # magnitude released; the weights are untouched
    assert bool(a.policy.held[1]) and not bool(b.policy.held[1])
    assert policy_key([a], obs) != policy_key([b], obs)
    b.start_epoch(0)
    assert policy_key([a], obs) == policy_key([b], obs)
    with torch.no_grad():
        next(b.policy.net.parameters()).add_(1e-3)
    assert policy_key([a], obs) != policy_key([b], obs)
    assert policy_key([a], obs) != policy_key([a], states(2))
