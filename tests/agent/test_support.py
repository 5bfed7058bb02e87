"""Support growth (agent/support.py): the reach quantile, the growth factor worked by hand, and the rule
applied to an online network and its target."""

from __future__ import annotations

import math

import pytest
import torch

from foxhunt.agent.config import AgentConfig, NetworkConfig
from foxhunt.agent.network import QNetwork
from foxhunt.agent.support import SUPPORT_COVER, SupportGrowth, growth_factor, target_reach
from foxhunt.domain.actions import BranchConfig

SMALL = {
    "hidden": 8,
    "trunk_layers": 1,
    "selection_hidden": 4,
    "experts": 2,
    "expert_hidden": 4,
    "head_hidden": 8,
    "atoms": 5,
    "quantile_embedding": 4,
    "aux_hidden": 4,
}

pytestmark = pytest.mark.usefixtures("one_thread")


def make_net(**network: object) -> QNetwork:
    torch.manual_seed(0)
    return QNetwork(AgentConfig(network=NetworkConfig(**{**SMALL, **network})), BranchConfig())


def test_reach_is_the_quantile_of_every_absolute_target() -> None:
    """|y| over both lists = 0..100 (101 values, in two shapes): the 0.99 quantile is 99 exactly and
    the 0.5 quantile 50; a sign does not matter."""
    iqn = [-torch.arange(0.0, 60.0).reshape(20, 3)]  # 0, -1, .. -59
    mse = [torch.arange(60.0, 101.0)]  # 60 .. 100
    assert float(target_reach(iqn + mse)) == 99.0
    assert float(target_reach(iqn + mse, quantile=0.5)) == 50.0


@pytest.mark.parametrize(
    ("v_max", "reach", "growth", "want"),
    [
        (1.0, 0.5, 2.0, 1.0),  # covered (0.5 <= 0.9): no growth
        (1.0, 0.9, 2.0, 1.0),  # exactly c·v: covered
        (1.0, 1.0, 2.0, 2.0),  # 0.9 < 1 <= 1.8: one step
        (1.0, 7.0, 2.0, 8.0),  # 0.9·4 = 3.6 < 7 <= 0.9·8 = 7.2: three steps
        (2.0, 7.3, 2.0, 8.0),  # 0.9·2·4 = 7.2 < 7.3 <= 14.4
        (1.0, 50.0, 1.0, 1.0),  # growth 1: the fixed support
    ],
)
def test_growth_factor_hand_worked(v_max: float, reach: float, growth: float, want: float) -> None:
    assert float(growth_factor(torch.tensor(v_max), torch.tensor(reach), growth)) == want


def test_growth_factor_ignores_non_finite_and_takes_the_largest() -> None:
    """max |finite reach| = 7 (nan and inf ignored, the sign dropped): 0.9·4 < 7 <= 0.9·8, factor 8."""
    reach = torch.tensor([-7.0, 2.0, float("nan"), float("inf")])
    assert float(growth_factor(torch.tensor(1.0), reach, 2.0)) == 8.0


@pytest.mark.parametrize(
    "target", [0.0, 0.5, 0.9, 0.9001, 1.0, 1.35, 0.9 * 1.5**3, 0.9 * 1.5**3 * (1 + 2e-5), 5.0, 1e3, 1e6]
)
def test_growth_covers_minimally(target: float) -> None:
    """Whole growth steps, covering the target, and one step fewer would not."""
    v = float(growth_factor(torch.tensor(1.0), torch.tensor(target), 1.5))
    steps = math.log(v) / math.log(1.5)
    assert abs(steps - round(steps)) < 1e-4
    assert SUPPORT_COVER * v >= target * (1 - 1e-6)
    if v > 1.0:
        assert SUPPORT_COVER * v / 1.5 < target * (1 + 1e-6)


def test_step_grows_the_online_support_never_shrinks_and_copies_it_to_the_target() -> None:
    online, target = make_net(support_init=1.0, support_growth=2.0), make_net(support_init=1.0)
    growth = SupportGrowth(online, target)
    assert float(growth.step(torch.tensor(7.0))) == 8.0
    assert float(online.v_max) == 8.0 and float(target.v_max) == 8.0
    for reach in (0.1, 0.0, 7.2, -3.0):  # covered: unchanged
        assert float(growth.step(torch.tensor(reach))) == 1.0
        assert float(online.v_max) == 8.0
    growth.step(torch.tensor(7.3))
    assert float(online.v_max) == 16.0 and float(target.v_max) == 16.0
    assert torch.equal(online.support(), target.support())


def test_fixed_support_still_keeps_the_target_on_the_online_support() -> None:
    """growth 1: v_max never moves, and a target whose v_max differs is put back on the online one."""
    online, target = make_net(support_init=1.0, support_growth=1.0), make_net(support_init=1.0)
    target.v_max.fill_(3.0)
    SupportGrowth(online, target).step(torch.tensor(50.0))
    assert float(online.v_max) == 1.0 and float(target.v_max) == 1.0
