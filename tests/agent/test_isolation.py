"""A head switched off by its loss weight acts nowhere (issue 22, the ablation's iqn_off / c51_off /
aux_off rows): with the IQN weight at 0 the IQN head's parameters change no action and no target, with
the C51 weights at 0 the C51 head's do not, and with the aux weight at 0 the aux slots written into the
next state are zeros, whatever the aux heads hold. Each fact is checked against its converse: with the
head's loss on, the same change of parameters does change the choices (so the test would catch a
reader that still took the head)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import Tensor, nn

from foxhunt.agent.actor import Mode
from foxhunt.agent.agent import Agent
from foxhunt.agent.config import AgentConfig, ExploreConfig, LossConfig, NetworkConfig, Symmetry
from foxhunt.agent.network import QNetwork, TrainedHeads
from foxhunt.config.loader import load_config
from foxhunt.domain.actions import BRANCHES, BranchConfig
from foxhunt.errors import ConfigError
from foxhunt.features.layout import STATE_LAYOUT
from tests.agent.test_agent import SMALL
from tests.agent.test_learner import make_batch

W = STATE_LAYOUT.width
BOTH: dict[str, float] = {}
IQN_OFF = {"iqn": 0.0}
C51_OFF = {"c51": 0.0, "magnitude_c51": 0.0}
AUX_OFF = {"aux": 0.0}
_DIRECTION = BRANCHES.index("direction")

pytestmark = pytest.mark.usefixtures("one_thread")


def make_agent(loss: dict[str, float], symmetry: Symmetry = Symmetry.NONE, thompson: float = 0.0) -> Agent:
    cfg = AgentConfig(
        network=NetworkConfig(**SMALL, symmetry=symmetry),
        loss=LossConfig(**loss),
        explore=ExploreConfig(epsilon=0.0, thompson=thompson),
    )
    agent = Agent(cfg, BranchConfig(), seed=3, replay_capacity=64)
    # Non-trivial PopArt statistics (mu 0.3, sigma 5) and support (v_max 2): the heads' units differ.
    agent.learner.popart.mu.fill_(0.3)
    agent.learner.popart.nu.fill_(0.3**2 + 5.0**2)
    agent.policy.net.v_max.fill_(2.0)
    agent.learner.target.v_max.fill_(2.0)
    return agent


def states(n: int = 256, seed: int = 1) -> Tensor:
    return torch.randn(n, W, generator=torch.Generator().manual_seed(seed))


def _layers(net: QNetwork, head: str) -> Iterator[nn.Module]:
    """The output layers of ``head`` in every stream: "c51", "iqn" (with the shared fraction embedding
    phi(tau)), or "aux" (the auxiliary trunk and heads)."""
    if head == "aux":
        yield net.aux
        return
    if head == "iqn":
        yield net.tau_embed
    for stream in (net.value, *net.advantage):
        yield getattr(stream, head)


@torch.no_grad()
def scramble(agent: Agent, head: str, seed: int = 11) -> None:
    """Redraw every parameter of ``head`` (online and target network) at 3x PyTorch's default scale."""
    g = torch.Generator().manual_seed(seed)
    for net in (agent.policy.net, agent.learner.target):
        for layer in _layers(net, head):
            for p in layer.parameters():
                p.copy_(3.0 * torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)


@torch.no_grad()
def readings(agent: Agent, head_off: str) -> dict[str, Tensor]:
    """What acting and learning read of the agent, less what belongs to the switched-off head itself
    (its own targets, which its zero loss weight ignores)."""
    s = states()
    greedy = agent.policy(s, Mode.GREEDY)
    got = {
        "greedy actions": greedy.actions,
        "direction conviction": greedy.direction_conviction,
        "magnitude conviction": greedy.magnitude_conviction,
        "q variance": greedy.q_variance,
        "aux slots": greedy.aux,
        **{f"E[Q] {name}": q for name, q in zip(BRANCHES, agent.policy.expected_q(s), strict=True)},
    }
    batch = make_batch(128, seed=5)
    probs, y_iqn, y_mse, reach = agent.learner._target_values(batch)
    a_star = agent.policy.net.expected_q(agent.policy.net(batch.next_state), agent.learner.popart.denormalise)
    got |= {f"target argmax {n}": q.argmax(1) for n, q in zip(BRANCHES, a_star, strict=True)}
    got |= {f"MSE target {n}": y for n, y in zip(BRANCHES, y_mse, strict=True)}
    got["support reach"] = reach
    if head_off != "c51":
        got |= {f"C51 target {n}": p for n, p in zip(BRANCHES, probs, strict=True)}
    if head_off != "iqn":
        got |= {f"IQN target {n}": y for n, y in zip(BRANCHES, y_iqn, strict=True)}
    return got


def _changed(before: dict[str, Tensor], after: dict[str, Tensor]) -> list[str]:
    return [k for k in before if not torch.equal(before[k], after[k])]


@pytest.mark.parametrize("symmetry", [Symmetry.NONE, Symmetry.MIRROR])
@pytest.mark.parametrize(("loss", "head"), [(IQN_OFF, "iqn"), (C51_OFF, "c51")], ids=["iqn_off", "c51_off"])
def test_an_untrained_value_head_changes_no_action_and_no_target(
    loss: dict[str, float], head: str, symmetry: Symmetry
) -> None:
    agent = make_agent(loss, symmetry)
    before = readings(agent, head)
    scramble(agent, head)
    assert _changed(before, readings(agent, head)) == []


@pytest.mark.parametrize("head", ["iqn", "c51"])
def test_with_both_losses_on_the_same_change_moves_actions_and_targets(head: str) -> None:
    """The converse: both heads trained, both act, so scrambling either moves the greedy choices and the
    learner's targets (the facts above are not vacuous)."""
    agent = make_agent(BOTH)
    before = readings(agent, "none")
    scramble(agent, head)
    changed = _changed(before, readings(agent, "none"))
    assert "greedy actions" in changed and "target argmax direction" in changed, changed


@pytest.mark.parametrize(("loss", "head"), [(IQN_OFF, "iqn"), (C51_OFF, "c51")], ids=["iqn_off", "c51_off"])
def test_the_exploring_policy_draws_from_the_trained_head_only(loss: dict[str, float], head: str) -> None:
    """Thompson sampling on every direction choice, NoisyNet noise on: two agents built alike draw the
    same random numbers, so the one whose untrained head is scrambled must explore alike."""
    agents = [make_agent(loss, thompson=1.0) for _ in range(2)]
    scramble(agents[1], head)
    s = states()
    for _ in range(2):
        one, two = (a.policy(s, Mode.EXPLORE) for a in agents)
        assert torch.equal(one.actions, two.actions)
        assert torch.equal(one.q_variance, two.q_variance)


def test_with_both_losses_on_a_scrambled_c51_head_moves_the_thompson_draw() -> None:
    agents = [make_agent(BOTH, thompson=1.0) for _ in range(2)]
    scramble(agents[1], "c51")
    s = states()
    one, two = (a.policy(s, Mode.EXPLORE) for a in agents)
    assert not torch.equal(one.actions[:, _DIRECTION], two.actions[:, _DIRECTION])


@torch.no_grad()
def test_expected_q_is_the_trained_heads_mean_worked_by_hand() -> None:
    """(E_C51 + E_IQN) / 2 with both on, E_C51 alone with IQN off, E_IQN (de-normalised) with C51 off."""
    for loss, want in ((BOTH, "both"), (IQN_OFF, "c51"), (C51_OFF, "iqn")):
        agent = make_agent(loss)
        net, s = agent.policy.net, states(64)
        net.eval()
        out = net(s)
        z = 2.0 * torch.linspace(-1.0, 1.0, SMALL["atoms"])
        for b, q in zip(out.branches, net.expected_q(out, agent.learner.popart.denormalise), strict=True):
            e_c51 = (torch.softmax(b.logits, -1) * z).sum(-1)
            e_iqn = 5.0 * b.quantiles.mean(-1) + 0.3
            hand = {"both": (e_c51 + e_iqn) / 2, "c51": e_c51, "iqn": e_iqn}[want]
            torch.testing.assert_close(q, hand)


@torch.no_grad()
def test_with_c51_off_the_q_variance_is_the_iqn_quantiles_variance() -> None:
    """The chosen direction's de-normalised quantiles (sigma 5, mu 0.3), their population variance over
    the running |Q| reference squared."""
    agent = make_agent(C51_OFF)
    agent.policy.signals.set("q_abs", torch.tensor(2.0))
    s = states(64)
    pol = agent.policy(s, Mode.GREEDY)
    agent.policy.net.eval()
    q_NAQ = agent.policy.net(s).branches[_DIRECTION].quantiles
    chosen_NQ = 5.0 * q_NAQ[torch.arange(64), pol.actions[:, _DIRECTION]] + 0.3
    hand = ((chosen_NQ - chosen_NQ.mean(-1, keepdim=True)) ** 2).mean(-1) / 2.0**2
    torch.testing.assert_close(pol.q_variance, hand)
    assert (hand > 0).all()


@torch.no_grad()
def _two_steps(agent: Agent) -> tuple[Tensor, Tensor]:
    """The aux slots the policy writes for ``states()``, and the greedy actions on the next state that
    carries them (PolicyOut.step writes them into the environment's aux group)."""
    s = states()
    first = agent.policy(s, Mode.GREEDY)
    nxt = s.clone()
    nxt[:, STATE_LAYOUT.group("aux").slice] = first.aux
    return first.aux, agent.policy(nxt, Mode.GREEDY).actions


def test_with_the_aux_loss_off_the_aux_slots_are_zero_and_the_aux_heads_change_no_action() -> None:
    agent = make_agent(AUX_OFF)
    aux, actions = _two_steps(agent)
    assert aux.shape == (256, STATE_LAYOUT.group("aux").width) and aux.dtype == torch.float32
    assert torch.equal(aux, torch.zeros_like(aux))
    scramble(agent, "aux")
    aux2, actions2 = _two_steps(agent)
    assert torch.equal(aux2, aux) and torch.equal(actions2, actions)


def test_with_the_aux_loss_on_the_aux_heads_reach_the_next_action() -> None:
    agent = make_agent(BOTH)
    aux, actions = _two_steps(agent)
    scramble(agent, "aux")
    aux2, actions2 = _two_steps(agent)
    assert not torch.equal(aux2, aux) and not torch.equal(actions2, actions)


@pytest.mark.parametrize("loss", [IQN_OFF, C51_OFF, AUX_OFF], ids=["iqn_off", "c51_off", "aux_off"])
def test_a_learner_update_runs_with_a_head_off(loss: dict[str, float]) -> None:
    agent = make_agent(loss)
    priority, stats = agent.learner.update(make_batch(32, seed=2))
    assert torch.isfinite(priority).all() and torch.isfinite(stats["loss/total"])


def test_with_c51_off_the_priorities_do_not_read_the_untrained_c51_head() -> None:
    """The replay priority (``td_error``) is the trained head's error: with the C51 weights at 0 a
    scrambled C51 head leaves the new priorities as they were; with C51 on, the same change moves them."""

    def priorities(loss: dict[str, float], scrambled: bool) -> Tensor:
        agent = make_agent(loss)
        if scrambled:
            scramble(agent, "c51")
        torch.manual_seed(0)  # the NoisyNet draws of the update
        return agent.learner.update(make_batch(32, seed=2))[0]

    assert torch.equal(priorities(C51_OFF, False), priorities(C51_OFF, True))
    assert not torch.equal(priorities(BOTH, False), priorities(BOTH, True))


def test_trained_heads_follow_the_loss_weights() -> None:
    assert TrainedHeads.of(LossConfig()) == TrainedHeads(c51=(True,) * 4, iqn=(True,) * 4, aux=True)
    off = TrainedHeads.of(LossConfig(c51=0.0, aux=0.0))  # the magnitude branch keeps its own C51 weight
    assert off.c51 == tuple(name == "magnitude" for name in BRANCHES) and not off.aux


@pytest.mark.parametrize(
    ("loss", "names"),
    [
        ({"iqn": 0.0, "c51": 0.0}, "agent.loss.iqn and agent.loss.c51"),
        ({"iqn": 0.0, "magnitude_c51": 0.0}, "agent.loss.iqn and agent.loss.magnitude_c51"),
    ],
)
def test_a_branch_with_no_trained_value_head_is_refused(loss: dict[str, float], names: str) -> None:
    with pytest.raises(ValueError, match=names):
        LossConfig(**loss)
    sets = [f"agent.loss.{k}={v}" for k, v in loss.items()]
    with pytest.raises(ConfigError, match="set agent.loss.iqn > 0"):
        load_config("smoke", overrides=sets)
