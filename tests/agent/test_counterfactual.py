"""Counterfactual execution targets in the DQN agent (foxhunt.agent.counterfactual): the replay's ``cf``
column on exactly the entries, the relabelled loss's targets, and the switch that leaves it all off."""

from __future__ import annotations

import torch

from foxhunt.agent.agent import Agent
from foxhunt.agent.config import AgentConfig, CounterfactualConfig, LearnConfig, LossConfig, NetworkConfig
from foxhunt.agent.counterfactual import CF, relabelled_loss
from foxhunt.agent.learner import plan_locked
from foxhunt.agent.network import BranchOut, NetOut
from foxhunt.agent.replay import transition_fields
from foxhunt.domain.actions import Direction
from foxhunt.env.market import AUX_TARGETS
from foxhunt.features.layout import STATE_LAYOUT
from tests.agent.test_agent import SMALL
from tests.env.test_counterfactual import full_config, random_market

L, S = int(Direction.LONG), int(Direction.SHORT)


def _agent(weight: float) -> Agent:
    cfg = AgentConfig(
        network=NetworkConfig(**SMALL),
        learn=LearnConfig(n_step=8, gamma=0.9, bootstrap="decision"),
        counterfactual=CounterfactualConfig(weight=weight),
    )
    return Agent(cfg, full_config().branches, seed=3, replay_capacity=1024)


def _collect(agent: Agent) -> None:
    gen = torch.Generator().manual_seed(11)
    mk = random_market(gen)
    mk.features.normal_(generator=gen)
    agent.collect(mk, full_config(), torch.arange(0, 240, 15), 24)  # 16 episodes x 24 steps


def test_off_by_default_no_column_and_no_term() -> None:
    assert AgentConfig().counterfactual.weight == 0
    agent = _agent(0.0)
    assert set(agent.replay.fields) == set(transition_fields(STATE_LAYOUT.width, 4, len(AUX_TARGETS)))
    _collect(agent)
    seen: list[dict] = []
    agent.learn(1, 32, seen.append)
    assert "loss/counterfactual" not in seen[0]


def test_the_cf_column_holds_windows_on_exactly_the_entries_and_the_loss_trains_them() -> None:
    """Every entry of the epoch (and nothing else) has a window per execution value; the taken value's
    is the replay row's own n-step return and discount (the collector's windows, recomputed on the
    counterfactual path); the relabelled loss trains on them."""
    agent = _agent(1.0)
    _collect(agent)
    rows = len(agent.replay)
    cf = agent.replay.storage[CF][:rows]
    act = agent.replay.storage["action"][:rows]
    state = agent.replay.storage["state"][:rows]
    valid = agent.replay.priorities.leaves[:rows] > 0
    entries = valid & ~plan_locked(state) & ((act[:, 0] == L) | (act[:, 0] == S))
    assert cf.shape[1] == 18
    assert torch.equal(torch.isfinite(cf).all(dim=1), entries)
    assert bool(torch.isnan(cf[~entries]).all())
    assert int(entries.sum()) > 5
    ret, disc = cf[entries].chunk(2, dim=1)
    col = 0
    for b, size in enumerate((3, 3, 3), start=1):
        taken = act[entries, b : b + 1] + col
        torch.testing.assert_close(ret.gather(1, taken)[:, 0], agent.replay.storage["reward"][:rows][entries])
        torch.testing.assert_close(
            disc.gather(1, taken)[:, 0], agent.replay.storage["discount"][:rows][entries]
        )
        col += size
    assert bool((ret != ret[:, :1]).any())  # the alternatives earned something else
    assert bool((disc == 0).any() or (disc != disc[:, :1]).any())  # and their windows differ
    seen: list[dict] = []
    agent.learn(3, 64, lambda s: seen.append({k: float(v) for k, v in s.items() if v.ndim == 0}))
    assert all(s["counterfactual/pairs"] > 0 and 0 < s["loss/counterfactual"] < float("inf") for s in seen)


def _out(b: int, sizes: tuple[int, ...], atoms: int, q: int) -> NetOut:
    g = torch.Generator().manual_seed(0)
    branches = tuple(
        BranchOut(
            logits=torch.randn(b, a, atoms, generator=g, requires_grad=True),
            quantiles=torch.randn(b, a, q, generator=g, requires_grad=True),
            q_mse=torch.randn(b, a, generator=g, requires_grad=True),
        )
        for a in sizes
    )
    z = torch.zeros(b, 1)
    return NetOut(branches, z, z, z[:, 0], z, z)


def test_relabelled_loss_targets_each_values_own_window_on_the_taken_bootstrap() -> None:
    """The MSE head's gradient vanishes where it predicts ``R_v + d_v x bootstrap`` (the bootstrap read
    back from the taken target ``y = R + d x bootstrap``); the taken values and rows with no
    counterfactual add nothing; the pairs are the untaken values of the rows with one."""
    sizes, atoms, q, b = (4, 3, 3, 2), 11, 5, 4
    out = _out(b, sizes, atoms, q)
    g = torch.Generator().manual_seed(1)
    cf = torch.cat([torch.randn(b, 8, generator=g), torch.rand(b, 8, generator=g)], dim=1)
    cf[3] = float("nan")  # no counterfactual on the last row
    action = torch.tensor([[L, 0, 1, 0], [S, 2, 0, 1], [L, 1, 2, 0], [L, 0, 0, 0]])
    probs = [torch.softmax(torch.randn(b, atoms, generator=g), -1) for _ in sizes]
    y_iqn = [torch.randn(b, q, generator=g) for _ in sizes]
    y_mse = [torch.randn(b, generator=g) for _ in sizes]
    reward, discount = torch.full((b,), 0.25), torch.full((b,), 0.5)
    with torch.no_grad():  # the MSE heads predict the relabelled targets exactly
        col = 0
        for j, a in enumerate(sizes[1:], start=1):
            ret, disc = cf[:, col : col + a], cf[:, 8 + col : 8 + col + a]
            boot = (y_mse[j] - reward) / discount
            out.branches[j].q_mse.copy_(torch.nan_to_num(ret + disc * boot[:, None]))
            col += a
    cfg = LossConfig(c51=1.0, magnitude_c51=0.2, iqn=1.0, mse=1.0, magnitude_mse=4.0)
    taus, z = torch.linspace(0.1, 0.9, q), torch.linspace(-5, 5, atoms)
    loss, pairs = relabelled_loss(
        out, cf, action, probs, y_iqn, y_mse, reward, discount, z, lambda x: x, taus, cfg
    )
    assert float(pairs) == 3 * (2 + 2 + 1)  # 3 rows x the untaken values of branches of 3, 3 and 2
    loss.backward()
    for j in range(1, 4):
        torch.testing.assert_close(out.branches[j].q_mse.grad, torch.zeros(b, sizes[j]), rtol=0, atol=1e-6)
        for head in (out.branches[j].quantiles, out.branches[j].logits):
            assert bool((head.grad[3] == 0).all())  # the row without counterfactuals
            assert bool((head.grad[torch.arange(3), action[:3, j]] == 0).all())  # the taken values
            assert bool((head.grad != 0).any())
    assert out.branches[0].q_mse.grad is None  # the direction branch is never relabelled
