"""The soft (Polyak) target update (agent/soft_update.py), worked by hand."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from foxhunt.agent.soft_update import SoftUpdate


def _pair() -> tuple[nn.Linear, nn.Linear]:
    online, target = nn.Linear(2, 1), nn.Linear(2, 1)
    with torch.no_grad():
        online.weight.copy_(torch.tensor([[1.0, 2.0]]))
        online.bias.fill_(4.0)
        target.weight.copy_(torch.tensor([[0.0, -2.0]]))
        target.bias.fill_(0.0)
    return online, target


def test_one_step_moves_the_target_a_share_tau_of_the_way() -> None:
    """tau = 0.25: w' = 0.75 w' + 0.25 w = (0.25, -1.0), b' = 0 + 0.25·4 = 1.0, the online net untouched;
    a second step from there: w' = (0.75·0.25 + 0.25, 0.75·-1 + 0.5) = (0.4375, -0.25), b' = 1.75."""
    online, target = _pair()
    soft = SoftUpdate(online, target, tau=0.25)
    soft.step()
    assert torch.equal(target.weight, torch.tensor([[0.25, -1.0]]))
    assert torch.equal(target.bias, torch.tensor([1.0]))
    assert torch.equal(online.weight, torch.tensor([[1.0, 2.0]]))
    assert torch.equal(online.bias, torch.tensor([4.0]))
    soft.step()
    assert torch.equal(target.weight, torch.tensor([[0.4375, -0.25]]))
    assert torch.equal(target.bias, torch.tensor([1.75]))


def test_tau_one_copies_and_bad_arguments_say_what_is_wrong() -> None:
    online, target = _pair()
    SoftUpdate(online, target, tau=1.0).step()
    assert torch.equal(target.weight, online.weight) and torch.equal(target.bias, online.bias)
    with pytest.raises(ValueError, match="LearnConfig.polyak"):
        SoftUpdate(online, target, tau=0.0)
    with pytest.raises(ValueError, match="shaped like the online"):
        SoftUpdate(online, nn.Linear(3, 1), tau=0.5)
