"""The learner's update: gradients reach every parameter, losses are mean-reduced, every
coefficient at 0 removes its mechanism, the Adam restart and cosine schedule, Polyak averaging, and a
known-answer bandit learned through ``Learner.update`` alone."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator

import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from foxhunt.agent.config import AgentConfig, LearnConfig, LossConfig, NetworkConfig
from foxhunt.agent.distributional import project_c51
from foxhunt.agent.learner import Batch, Learner
from foxhunt.agent.network import QNetwork, q_parameters
from foxhunt.agent.signals import Signals
from foxhunt.domain.actions import BRANCHES, ActionCodec, BranchConfig, Direction
from foxhunt.features.layout import STATE_LAYOUT

W = STATE_LAYOUT.width
SMALL = {
    "hidden": 16,
    "trunk_layers": 1,
    "experts": 4,
    "expert_hidden": 4,
    "head_hidden": 16,
    "atoms": 11,
    "quantile_embedding": 8,
    "aux_hidden": 8,
}
BRANCH_CFG = BranchConfig()
SIZES = ActionCodec(BRANCH_CFG).sizes
LONG, HOLD = int(Direction.LONG), int(Direction.HOLD)
LOSS_PARTS = ("loss/c51", "loss/iqn", "loss/mse", "loss/cql", "loss/entropy", "loss/balance")


pytestmark = pytest.mark.usefixtures("one_thread")


def agent_cfg(
    network: dict | None = None, loss: dict | None = None, learn: dict | None = None
) -> AgentConfig:
    return AgentConfig(
        network=NetworkConfig(**{**SMALL, **(network or {})}),
        loss=LossConfig(**(loss or {})),
        learn=LearnConfig(**(learn or {})),
    )


def make_learner(cfg: AgentConfig, seed: int = 0, net: QNetwork | None = None) -> Learner:
    if net is None:
        torch.manual_seed(seed)
        net = QNetwork(cfg, BRANCH_CFG)
    return Learner(net, cfg, Signals(cfg.network.experts))


def make_batch(n: int, seed: int, *, base: Tensor | None = None, spread: float = 1.0) -> Batch:
    """``n`` transitions: states ``base + spread * N(0, 1)``, uniform actions, rewards around 0.5,
    every auxiliary target present (a NaN-free ``aux``)."""
    g = torch.Generator().manual_seed(seed)
    centre = torch.zeros(W) if base is None else base
    actions = torch.stack([torch.randint(0, k, (n,), generator=g) for k in SIZES], dim=1)
    aux = torch.stack(
        [
            0.5 + 0.1 * torch.randn(n, generator=g),  # next return
            (torch.rand(n, generator=g) < 0.8).float(),  # direction class
            torch.randint(0, 3, (n,), generator=g).float(),  # outcome class
        ],
        dim=1,
    )
    return Batch(
        state=centre + spread * torch.randn(n, W, generator=g),
        action=actions,
        reward=0.5 + 0.1 * torch.randn(n, generator=g),
        discount=torch.full((n,), 0.9),
        next_state=centre + spread * torch.randn(n, W, generator=g),
        aux=aux,
        weight=torch.ones(n),
    )


def tile(batch: Batch, times: int) -> Batch:
    return Batch(**{k: v.repeat(times, *([1] * (v.dim() - 1))) for k, v in vars(batch).items()})


def update(learner: Learner, batch: Batch, noise_seed: int = 1) -> dict[str, Tensor]:
    torch.manual_seed(noise_seed)  # the NoisyNet draws of update() come from the global generator
    return learner.update(batch)[1]


def grad_norm(params: list[torch.nn.Parameter]) -> float:
    return float(torch.sqrt(sum(p.grad.pow(2).sum() for p in params)))


def flat(params: Iterator[torch.nn.Parameter] | list[torch.nn.Parameter]) -> Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


@torch.no_grad()
def eval_out(learner: Learner, states: Tensor) -> tuple[tuple[Tensor, ...], Tensor]:
    """The evaluation-mode (noise-free) E[Q] per branch and the auxiliary return prediction."""
    net = learner.net
    net.eval()
    try:
        out = net(states)
        return net.expected_q(out, learner.popart.denormalise), out.aux_return
    finally:
        net.train()


# --- gradients -----------------------------------------------------------------------------------


@pytest.mark.parametrize("noisy_sigma", [0.0, 0.5])
def test_one_update_gives_every_parameter_a_gradient(noisy_sigma: float) -> None:
    learner = make_learner(agent_cfg(network={"noisy_sigma": noisy_sigma}))
    update(learner, make_batch(64, seed=2))
    net = learner.net
    assert {id(p) for p in learner.q_params} | {id(p) for p in learner.aux_params} == {
        id(p) for p in net.parameters()
    }
    dead = [n for n, p in net.named_parameters() if p.grad is None or not bool(p.grad.abs().gt(0).any())]
    assert not dead, f"parameters without a gradient after one update: {dead}"


def test_one_update_changes_the_greedy_output() -> None:
    learner = make_learner(agent_cfg(learn={"lr": 1e-3}))
    states = torch.randn(32, W, generator=torch.Generator().manual_seed(9))
    before, aux_before = eval_out(learner, states)
    update(learner, make_batch(64, seed=3))
    after, aux_after = eval_out(learner, states)
    for name, q0, q1 in zip(BRANCHES, before, after, strict=True):
        assert not torch.equal(q0, q1), f"branch {name}: greedy E[Q] unchanged by an update"
    assert not torch.equal(aux_before, aux_after)


def test_q_and_aux_gradients_are_clipped_separately_and_stats_are_pre_clip() -> None:
    """Tiny clip norms: after the update the Q gradient has norm ``clip_norm`` and the auxiliary one
    ``aux_clip_norm`` (clipping them jointly would give another split); the statistics are the norms
    before clipping, equal to the gradients of an identical learner with clipping out of reach."""
    cfg = agent_cfg()
    clipped = agent_cfg(learn={"clip_norm": 1e-3, "aux_clip_norm": 3e-3})
    torch.manual_seed(0)
    net = QNetwork(cfg, BRANCH_CFG)
    free = make_learner(agent_cfg(learn={"clip_norm": 1e9, "aux_clip_norm": 1e9}), net=copy.deepcopy(net))
    tight = make_learner(clipped, net=copy.deepcopy(net))
    batch = make_batch(64, seed=4)
    s_free, s_tight = update(free, batch), update(tight, batch)
    q_raw, aux_raw = grad_norm(free.q_params), grad_norm(free.aux_params)
    assert q_raw > 1e-2 and aux_raw > 1e-2  # both far above their clips
    assert grad_norm(tight.q_params) == pytest.approx(1e-3, rel=1e-3)
    assert grad_norm(tight.aux_params) == pytest.approx(3e-3, rel=1e-3)
    assert float(s_tight["grad/q"]) == pytest.approx(q_raw, rel=1e-4)
    assert float(s_tight["grad/aux"]) == pytest.approx(aux_raw, rel=1e-4)
    assert float(s_tight["grad/total"]) == pytest.approx(math.hypot(q_raw, aux_raw), rel=1e-4)
    assert float(s_free["grad/total"]) == pytest.approx(float(s_tight["grad/total"]), rel=1e-4)


def test_gradient_norm_is_invariant_to_the_batch_size() -> None:
    """Mean-reduced losses (docs/design.md §10.6): one network, batches of 64 and 4096 from the same
    distribution give pre-clip gradient norms within 20% (sum reduction would give 64x); the 64-row
    batch tiled to 4096 rows gives the same norm to float precision."""
    cfg = agent_cfg(network={"support_growth": 1.0})  # a fixed support: the same C51 targets at any size
    torch.manual_seed(0)
    net = QNetwork(cfg, BRANCH_CFG)
    base = torch.randn(W, generator=torch.Generator().manual_seed(123))

    def norm(batch: Batch) -> float:
        return float(update(make_learner(cfg, net=copy.deepcopy(net)), batch)["grad/total"])

    big = norm(make_batch(4096, seed=0, base=base, spread=0.1))
    for seed in (1, 2, 3):
        small = norm(make_batch(64, seed=seed, base=base, spread=0.1))
        assert 0.8 * big <= small <= 1.2 * big, (seed, small, big)
    small = make_batch(64, seed=1, base=base, spread=0.1)
    assert norm(tile(small, 64)) == pytest.approx(norm(small), rel=1e-3)


# --- coefficients at 0 ---------------------------------------------------------------------------


def _perturbed_net(cfg: AgentConfig) -> QNetwork:
    """A network whose gate is not uniform (at the zero initialisation the balance loss is at its
    minimum and has no gradient)."""
    torch.manual_seed(0)
    net = QNetwork(cfg, BRANCH_CFG)
    with torch.no_grad():
        net.moe.gate.weight.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(5))
    return net


@pytest.mark.parametrize(
    ("coef", "on", "stat"),
    [("cql", 1.0, "loss/cql"), ("moe_balance", 1.0, "loss/balance"), ("atom_entropy", 0.5, "loss/entropy")],
)
def test_loss_coefficient_zero_removes_its_term(coef: str, on: float, stat: str) -> None:
    """At 0 the term's statistic is exactly 0 and the total is the sum of the other terms; switched on,
    the same update from the same network lands on different parameters."""
    runs = {}
    for value in (0.0, on):
        cfg = agent_cfg(loss={coef: value})
        learner = make_learner(cfg, net=_perturbed_net(cfg))
        learner.signals.set("atom_utilisation", torch.tensor(0.0))  # under the floor: the bonus may act
        stats = update(learner, make_batch(64, seed=6))
        total = sum(float(stats[k]) for k in LOSS_PARTS) + cfg.loss.aux * float(stats["loss/aux"])
        assert float(stats["loss/total"]) == pytest.approx(total, rel=1e-6, abs=1e-7)
        runs[value] = (stats, flat(q_parameters(learner.net)))
    assert float(runs[0.0][0][stat]) == 0.0
    assert float(runs[on][0][stat]) != 0.0
    assert not torch.equal(runs[0.0][1], runs[on][1]), f"{coef}={on} did not change the update"


def test_atom_entropy_bonus_is_off_while_utilisation_is_above_the_floor() -> None:
    learner = make_learner(agent_cfg(loss={"atom_entropy": 0.5}))  # cold start: utilisation 1.0
    stats = update(learner, make_batch(64, seed=6))
    assert float(stats["loss/entropy"]) == 0.0


def test_aux_zero_leaves_the_aux_trunk_untrained() -> None:
    cfg = agent_cfg(loss={"aux": 0.0})
    learner = make_learner(cfg)
    before = flat(learner.aux_params).clone()
    stats = update(learner, make_batch(64, seed=7))
    assert float(stats["loss/aux"]) > 0.0  # the heads still report their loss ...
    assert all(p.grad is None or not bool(p.grad.any()) for p in learner.aux_params)  # ... but learn nothing
    assert float(stats["grad/aux"]) == 0.0
    assert torch.equal(flat(learner.aux_params), before)
    assert bool(torch.cat([p.grad.reshape(-1) for p in learner.q_params]).abs().gt(0).any())


@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_popart_zero_is_the_identity(beta: float) -> None:
    """``learn.popart = 0``: mu 0 and sigma 1 after several updates, normalising is the identity; at
    0.1 the same updates move the statistics (the rewards are around 0.5)."""
    learner = make_learner(agent_cfg(learn={"popart": beta}))
    for i in range(3):
        update(learner, make_batch(64, seed=10 + i))
    mu, sigma = float(learner.popart.mu), float(learner.popart.sigma)
    if beta == 0.0:
        assert (mu, sigma) == (0.0, 1.0)
        y = torch.randn(5, 3)
        assert torch.equal(learner.popart.normalise(y), y) and torch.equal(learner.popart.denormalise(y), y)
    else:
        assert mu > 0.01 and sigma != 1.0


# --- schedule and target network -----------------------------------------------------------------


def test_restart_halves_adam_momentum_and_lr_follows_the_cosine() -> None:
    """lr 1e-3, floor 10%, restarts every 20 epochs: lr(t) = 1e-4 + 4.5e-4 (1 + cos(pi t / 20)),
    so t = 5, 10, 15 give 8.6819805e-4, 5.5e-4, 2.3180195e-4 and t = 20 is back at 1e-3."""
    learner = make_learner(agent_cfg(learn={"lr": 1e-3, "lr_min_share": 0.1, "restart_epochs": 20}))
    update(learner, make_batch(64, seed=8))
    state = [learner.opt.state[p] for p in learner.net.parameters()]
    m0 = [s["exp_avg"].clone() for s in state]
    v0 = [s["exp_avg_sq"].clone() for s in state]
    assert any(bool(m.any()) for m in m0)

    def lr_now() -> float:
        return learner.opt.param_groups[0]["lr"]

    for epoch, want in ((5, 8.6819805e-4), (10, 5.5e-4), (15, 2.3180195e-4), (19, 1.0554025e-4)):
        assert learner.set_epoch(epoch) == pytest.approx(want, rel=1e-6)
        assert lr_now() == pytest.approx(want, rel=1e-6)
    assert all(torch.equal(s["exp_avg"], m) for s, m in zip(state, m0, strict=True))  # no restart yet

    assert learner.set_epoch(20) == pytest.approx(1e-3) and lr_now() == pytest.approx(1e-3)
    for s, m, v in zip(state, m0, v0, strict=True):
        assert torch.equal(s["exp_avg"], 0.5 * m)  # first moments halved
        assert torch.equal(s["exp_avg_sq"], v)  # second moments kept
    learner.set_epoch(20)  # asking for the same epoch again is not a second restart
    assert all(torch.equal(s["exp_avg"], 0.5 * m) for s, m in zip(state, m0, strict=True))
    assert learner.set_epoch(25) == pytest.approx(8.6819805e-4, rel=1e-6)
    learner.set_epoch(40)
    assert all(torch.equal(s["exp_avg"], 0.25 * m) for s, m in zip(state, m0, strict=True))


@torch.no_grad()
def test_double_q_targets_select_online_and_evaluate_target() -> None:
    """For a target network unlike the online one and PopArt at mu 0.2, sigma 3: per branch the
    action is a* = argmax of the online (E_C51 + E_IQN) / 2 at s', and the MSE target is
    R + d (sigma Q_mse,target(s', a*) + mu), the IQN targets likewise from the target quantiles.
    Where s' is plan-locked (its plan.active slot is 1) the direction's a* is Hold, the only
    direction that can act there."""
    learner = make_learner(agent_cfg(network={"support_growth": 1.0}))
    for p in learner.target.parameters():
        p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    learner.popart.mu.fill_(0.2)
    learner.popart.nu.fill_(0.2**2 + 3.0**2)
    batch = make_batch(128, seed=12)
    locked = torch.arange(128) % 2 == 1
    batch.next_state[:, STATE_LAYOUT.index("plan.active")] = locked.float()
    r, d = batch.reward[:, None], batch.discount[:, None]
    online, target = learner.net(batch.next_state), learner.target(batch.next_state)
    q_online = learner.net.expected_q(online, learner.popart.denormalise)
    q_target = learner.target.expected_q(target, learner.popart.denormalise)
    _, y_iqn, y_mse = learner._targets(batch)
    rows = torch.arange(128)
    for i in range(len(BRANCHES)):
        a_star = q_online[i].argmax(1)
        if i == 0:  # the two networks disagree: the test tells selection from evaluation
            assert not torch.equal(a_star, q_target[i].argmax(1))
            assert (a_star[locked] != HOLD).any()  # the mask changes some targets
            a_star = torch.where(locked, HOLD, a_star)
        b = target.branches[i]
        want_mse = r[:, 0] + d[:, 0] * (3.0 * b.q_mse[rows, a_star] + 0.2)
        want_iqn = r + d * (3.0 * b.quantiles[rows, a_star] + 0.2)
        torch.testing.assert_close(y_mse[i], want_mse)
        torch.testing.assert_close(y_iqn[i], want_iqn)


def test_c51_targets_are_each_branch_projected_on_its_own_bit_for_bit() -> None:
    """The learner projects every branch in one call (rows stacked): the same bits as one
    ``project_c51`` per branch, with rewards and discounts that put targets between atoms, on atoms,
    beyond both ends and (d = 0) at the reward."""
    learner = make_learner(agent_cfg(network={"support_growth": 1.0}))
    batch = make_batch(64, seed=13)
    batch.reward.copy_(torch.linspace(-3.0, 3.0, 64))
    batch.discount[::5] = 0.0
    probs, _, _, _ = learner._target_values(batch)
    c51, _, _ = learner._targets(batch)
    z = learner.net.support()
    assert len(c51) == len(BRANCHES)
    for i, p in enumerate(probs):
        assert torch.equal(c51[i], project_c51(p, batch.reward, batch.discount, z)), BRANCHES[i]


def test_adam_step_is_one_multi_tensor_kernel_on_the_cpu() -> None:
    """Adam runs fused on the CPU too: a handful of ops for the whole step, not torch's default
    per-parameter loop (~9 ops per parameter tensor: 900 of a smoke update's ~3,900 ops)."""
    learner = make_learner(agent_cfg())
    update(learner, make_batch(32, seed=14))  # Adam's state exists; the gradients are in place
    ops: list[str] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            ops.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with Record():
        learner.opt.step()
    n_params = len(list(learner.net.parameters()))
    assert "_fused_adam_" in ops
    assert len(ops) < 10 < n_params, ops


def test_polyak_target_is_the_exact_average_after_one_update() -> None:
    """tau = 0.25, PopArt off (it would also rescale the target's output layers): after one update
    theta' = 0.75 theta'_before + 0.25 theta_after for every parameter, with theta' != theta before."""
    tau = 0.25
    learner = make_learner(agent_cfg(learn={"polyak": tau, "popart": 0.0, "lr": 1e-2}))
    with torch.no_grad():
        for p in learner.target.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    target_before = [p.detach().clone() for p in learner.target.parameters()]
    online_before = [p.detach().clone() for p in learner.net.parameters()]
    update(learner, make_batch(64, seed=9))
    online = list(learner.net.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(online, online_before, strict=True))
    for t_after, t0, th in zip(learner.target.parameters(), target_before, online, strict=True):
        want = (1.0 - tau) * t0 + tau * th.detach()
        torch.testing.assert_close(t_after, want, rtol=1e-6, atol=1e-7)
    assert torch.equal(learner.target.v_max, learner.net.v_max)


# --- state ---------------------------------------------------------------------------------------


def test_state_dict_round_trip_continues_the_same_run() -> None:
    """A learner loaded from another's state (after 3 updates, an epoch of the schedule and an lr bump)
    takes the next update to the same bits: networks, target, PopArt, Adam and the counters all travel.
    NoisyNet and PopArt on, so every part of the state matters."""
    cfg = agent_cfg(network={"noisy_sigma": 0.5}, learn={"popart": 1e-2})
    source = make_learner(cfg, seed=0)
    for i in range(3):
        update(source, make_batch(32, seed=20 + i), noise_seed=i)
    source.lr_scale = 0.5
    source.set_epoch(3)
    state = copy.deepcopy(source.state_dict())
    assert set(state) == {"network", "target", "popart", "optimizer", "epoch", "lr_scale"}

    copy_ = make_learner(cfg, seed=1)  # different weights until it loads
    copy_.load_state_dict(state)
    assert (copy_.epoch, copy_.lr_scale) == (3, 0.5)
    assert copy_.opt.param_groups[0]["lr"] == source.opt.param_groups[0]["lr"]
    torch.manual_seed(9)  # the same NoisyNet draws for both
    ps, ss = source.update(make_batch(32, seed=30))
    torch.manual_seed(9)
    pc, sc = copy_.update(make_batch(32, seed=30))
    assert torch.equal(pc, ps)
    assert all(torch.equal(sc[k], ss[k]) for k in ss)
    for name, learner_state in source.state_dict().items():
        if isinstance(learner_state, dict) and name != "optimizer":
            for k, v in learner_state.items():
                assert torch.equal(copy_.state_dict()[name][k], v), (name, k)


def test_load_state_dict_keeps_a_tensor_learning_rate_and_names_bad_keys() -> None:
    """A captured update reads Adam's learning rate from its tensor (CUDA): loading fills that tensor
    with the saved value instead of replacing it. A dict that is not ``state_dict()``'s is refused."""
    cfg = agent_cfg()
    source, target = make_learner(cfg), make_learner(cfg)
    source.set_epoch(5)
    lr = torch.tensor(1.0)
    target.opt.param_groups[0]["lr"] = lr
    target.load_state_dict(source.state_dict())
    assert target.opt.param_groups[0]["lr"] is lr
    assert float(lr) == pytest.approx(source.opt.param_groups[0]["lr"])
    with pytest.raises(ValueError, match=r"missing keys \['epoch'\], unknown keys \['step'\]"):
        target.load_state_dict({**{k: v for k, v in source.state_dict().items() if k != "epoch"}, "step": 1})


# --- a known answer ------------------------------------------------------------------------------


def test_contextual_bandit_learns_that_long_pays() -> None:
    """Discount 0; reward +1 when the direction is Long, -1 otherwise (the other branches do not
    matter). After 60 updates the evaluation E[Q] of the direction branch is near +1 for Long and
    near -1 for every other direction, and the greedy direction is Long in every state."""
    learner = make_learner(agent_cfg(learn={"lr": 3e-3}), seed=0)
    g = torch.Generator().manual_seed(0)
    states = torch.randn(256, W, generator=g)
    for _ in range(60):
        n = 64
        actions = torch.stack([torch.randint(0, k, (n,), generator=g) for k in SIZES], dim=1)
        batch = Batch(
            state=torch.randn(n, W, generator=g),
            action=actions,
            reward=torch.where(actions[:, 0] == LONG, 1.0, -1.0),
            discount=torch.zeros(n),
            next_state=torch.randn(n, W, generator=g),
            aux=torch.full((n, 3), float("nan")),  # no auxiliary targets
            weight=torch.ones(n),
        )
        learner.update(batch)
    q = eval_out(learner, states)[0][0]  # direction [256, 4]
    assert bool((q.argmax(1) == LONG).all())
    mean = q.mean(0)
    assert float(mean[LONG]) > 0.8
    others = [a for a in range(SIZES[0]) if a != LONG]
    assert float(mean[others].max()) < -0.8


@pytest.mark.slow  # Inductor compiles the forward, loss and backward: minutes on a 2-core CPU
def test_compiled_update_equals_the_eager_update() -> None:
    """``Learner.compile`` (what a CUDA graph replays at large batches) computes the eager update: same
    losses and priorities at every step and the same parameters after 4 updates, NoisyNet and PopArt
    on, up to float32 rounding of differently fused reductions (rtol 1e-5; measured ~1e-7)."""
    cfg = agent_cfg(learn={"popart": 3e-4})
    eager, compiled = make_learner(cfg), make_learner(cfg)
    compiled.compile()
    for step in range(4):
        batch = make_batch(64, 40 + step)
        batch.weight = torch.rand(64, generator=torch.Generator().manual_seed(step)) + 0.5
        torch.manual_seed(100 + step)  # the same NoisyNet draws for both
        pe, se = eager.update(batch)
        torch.manual_seed(100 + step)
        pc, sc = compiled.update(batch)
        torch.testing.assert_close(pc, pe, rtol=1e-5, atol=1e-6)
        for key in ("loss/total", "loss/c51", "loss/iqn", "loss/aux", "atoms/v_max"):
            torch.testing.assert_close(sc[key], se[key], rtol=1e-5, atol=1e-6)
    for pe_, pc_ in zip(eager.net.parameters(), compiled.net.parameters(), strict=True):
        torch.testing.assert_close(pc_, pe_, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(compiled.signals["gate_entropy"], eager.signals["gate_entropy"])


def test_weight_decay_shrinks_the_weight_matrices_by_lr_times_it_and_nothing_else() -> None:
    """AdamW's decoupled decay, hand-worked: with every gradient 0 Adam's own step is 0, so one
    optimiser step multiplies each weight matrix by 1 - lr x weight_decay (0.1 x 0.5: 0.95) and leaves
    the biases and other vectors as they were. Off (0), the step is plain Adam's kernel."""
    learner = make_learner(agent_cfg(learn={"lr": 0.1, "weight_decay": 0.5}))
    before = {n: p.detach().clone() for n, p in learner.net.named_parameters()}
    for p in learner.net.parameters():
        p.grad = torch.zeros_like(p)
    learner.opt.step()
    matrices = 0
    for name, p in learner.net.named_parameters():
        want = before[name] * 0.95 if p.ndim >= 2 else before[name]
        assert torch.allclose(p, want, rtol=1e-6, atol=1e-7), name
        matrices += p.ndim >= 2
    assert 0 < matrices < len(before)  # both kinds were there to check
    assert [g["weight_decay"] for g in learner.opt.param_groups] == [0.5, 0.0]
    assert make_learner(agent_cfg()).opt.param_groups[0]["decoupled_weight_decay"] is False
