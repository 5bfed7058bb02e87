"""Contracts of the Q network (docs/design.md §6): shapes, initial gate, gradients, noise, branch wiring,
support."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor, nn

from foxhunt.agent.config import AgentConfig, NetworkConfig
from foxhunt.agent.distributional import support
from foxhunt.agent.network import (
    BranchOut,
    NetOut,
    NoisyLinear,
    QNetwork,
    aux_parameters,
    input_mask,
    popart_layers,
    q_parameters,
    reset_noise,
)
from foxhunt.agent.support import growth_factor
from foxhunt.domain.actions import BRANCHES, BranchConfig, Direction
from foxhunt.features.layout import STATE_FEATURE_GROUPS, STATE_LAYOUT, STATE_MIRROR

W = STATE_LAYOUT.width
SMALL = {
    "hidden": 16,
    "trunk_layers": 2,
    "selection_hidden": 8,
    "experts": 4,
    "expert_hidden": 8,
    "head_hidden": 16,
    "atoms": 11,
    "quantile_embedding": 8,
    "aux_hidden": 8,
}
DIRECTION, MAGNITUDE = BRANCHES.index("direction"), BRANCHES.index("magnitude")
ORDER, URGENCY = BRANCHES.index("order_type"), BRANCHES.index("urgency")


pytestmark = pytest.mark.usefixtures("one_thread")


def make_net(seed: int = 0, branches: BranchConfig | None = None, **network: object) -> QNetwork:
    torch.manual_seed(seed)
    cfg = AgentConfig(network=NetworkConfig(**{**SMALL, **network}))
    return QNetwork(cfg, branches or BranchConfig())


def states(n: int = 32, seed: int = 1) -> Tensor:
    return torch.randn(n, W, generator=torch.Generator().manual_seed(seed))


def branch_tensors(b: BranchOut) -> list[Tensor]:
    return [b.logits, b.quantiles, b.q_mse]


def out_tensors(out: NetOut) -> list[Tensor]:
    heads = [t for b in out.branches for t in branch_tensors(b)]
    return [*heads, out.gate, out.selection, out.aux_return, out.aux_direction, out.aux_outcome]


def flat(out: NetOut) -> Tensor:
    return torch.cat([t.reshape(t.shape[0], -1) for t in out_tensors(out)], dim=1)


def branches_equal(a: BranchOut, b: BranchOut) -> bool:
    return all(torch.equal(x, y) for x, y in zip(branch_tensors(a), branch_tensors(b), strict=True))


def branches_differ(a: BranchOut, b: BranchOut) -> bool:
    return all((x - y).abs().max() > 1e-6 for x, y in zip(branch_tensors(a), branch_tensors(b), strict=True))


# -- shapes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("branches", "atoms", "quantiles"),
    [
        (BranchConfig(), 51, (0.1, 0.3, 0.5, 0.7, 0.9)),
        (BranchConfig(direction=3), 51, (0.1, 0.3, 0.5, 0.7, 0.9)),
        (BranchConfig(), 7, (0.25, 0.5, 0.75)),
        (
            BranchConfig(direction=3, magnitude=5, magnitude_fractions=(0.2, 0.4, 0.6, 0.8, 1.0), urgency=2),
            21,
            (0.05, 0.5, 0.6, 0.95),
        ),
    ],
    ids=["4x3x3x3", "3x3x3x3", "atoms7-q3", "3x5x3x2-atoms21-q4"],
)
def test_output_shapes(branches: BranchConfig, atoms: int, quantiles: tuple[float, ...]) -> None:
    net = make_net(branches=branches, atoms=atoms, quantiles=quantiles)
    b = 5
    out = net(states(b))
    sizes = [getattr(branches, name) for name in BRANCHES]
    assert len(out.branches) == len(BRANCHES)
    for br, a in zip(out.branches, sizes, strict=True):
        assert br.logits.shape == (b, a, atoms)
        assert br.quantiles.shape == (b, a, len(quantiles))
        assert br.q_mse.shape == (b, a)
    assert out.gate.shape == (b, SMALL["experts"])
    assert out.selection.shape == (b, len(STATE_LAYOUT.groups))
    torch.testing.assert_close(out.gate.sum(1), torch.ones(b))
    torch.testing.assert_close(out.selection.sum(1), torch.ones(b))
    assert out.aux_return.shape == (b,)
    assert out.aux_direction.shape == (b, 2)
    assert out.aux_outcome.shape == (b, 3)
    assert net.support().shape == (atoms,)
    assert [q.shape for q in net.expected_q(out)] == [(b, a) for a in sizes]


# -- mixture of experts -----------------------------------------------------------------------------


@pytest.mark.parametrize("experts", [4, 8, 5])
def test_gate_uniform_at_init(experts: int) -> None:
    net = make_net(experts=experts)
    gate = net(100.0 * states(64)).gate
    assert torch.equal(gate, torch.full_like(gate, 1.0 / experts))


def test_mixture_is_residual_gate_weighted_sum_of_experts() -> None:
    """h = trunk(x) + Σ_k g_k · expert_k(trunk(x)), each expert computed on its own, gate non-uniform."""
    net = make_net(seed=3)
    with torch.no_grad():
        net.moe.gate.weight.normal_(0, 0.3)
    s = states(8)
    h, gate, _ = net.encode(s)
    x, _ = net.selection(s)
    x = net.trunk(x)
    moe = net.moe
    expected = x.clone()
    for k in range(gate.shape[1]):
        expert_k = torch.nn.functional.elu(x @ moe.w1_EHX[k] + moe.b1_EX[k]) @ moe.w2_EXH[k] + moe.b2_EH[k]
        expected += gate[:, k : k + 1] * expert_k
    assert gate.std(1).min() > 0  # really non-uniform
    torch.testing.assert_close(h, expected)


# -- gradients and parameters -----------------------------------------------------------------------


def touch_all(out: NetOut, seed: int = 7) -> Tensor:
    """A loss with a non-zero gradient on every output entry (random projection plus a square)."""
    g = torch.Generator().manual_seed(seed)
    return sum(
        ((t * torch.randn(t.shape, generator=g).to(t.device)).sum() + t.square().mean())
        for t in out_tensors(out)
    )


@pytest.mark.parametrize("noisy_sigma", [0.0, 0.5])
def test_every_parameter_gets_a_gradient(noisy_sigma: float) -> None:
    net = make_net(noisy_sigma=noisy_sigma).train()
    assert any(isinstance(m, NoisyLinear) for m in net.modules()) == (noisy_sigma > 0)
    touch_all(net(states())).backward()
    dead = [n for n, p in net.named_parameters() if p.grad is None or not p.grad.abs().max() > 0]
    assert dead == []


@pytest.mark.parametrize("noisy_sigma", [0.0, 0.5])
def test_perturbing_each_parameter_changes_the_output(noisy_sigma: float) -> None:
    net = make_net(noisy_sigma=noisy_sigma).train()
    s = states(16)
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        base = flat(net(s))
        inert = []
        for name, p in net.named_parameters():
            saved = p.clone()
            p.add_(0.1 * torch.randn(p.shape, generator=g))
            if not (flat(net(s)) - base).abs().max() > 1e-6:
                inert.append(name)
            p.copy_(saved)
    assert inert == []


def test_q_and_aux_parameters_split_the_network() -> None:
    """Disjoint, covering, and the aux trunk shares nothing with the Q trunk in either direction."""
    net = make_net()
    q, aux = q_parameters(net), aux_parameters(net)
    assert {id(p) for p in q}.isdisjoint(id(p) for p in aux)
    assert len(q) + len(aux) == len(list(net.parameters()))
    out = net(states())
    sum(t.sum() for b in out.branches for t in branch_tensors(b)).backward(retain_graph=True)
    assert all(p.grad is None for p in aux)
    net.zero_grad(set_to_none=True)
    (out.aux_return.sum() + out.aux_direction.sum() + out.aux_outcome.sum()).backward()
    assert all(p.grad is None for p in q)
    assert all(p.grad is not None for p in aux)


def test_param_count_at_production_defaults() -> None:
    """Production widths (NetworkConfig defaults, 4x3x3x3): 1,326,277 parameters whatever the state
    layout (4,614 of them auxiliary), plus ``hidden`` per real state slot (its group's row of the
    selection embedding) and ``selection_hidden + experts + aux_hidden`` per state column, padding
    included (the selection weights, the MoE gate and the aux trunk read the whole state): 1,370,501
    (13,318 auxiliary) at the 126 slots and 136 columns of the layout today.

    NoisyNet's σ parameters are included (noisy_sigma 0.5 by default).
    """
    torch.manual_seed(0)
    cfg = AgentConfig()
    net = QNetwork(cfg, BranchConfig())
    print(f"QNetwork parameters at production defaults: {net.param_count():,}")
    n, width = cfg.network, STATE_LAYOUT.width
    slots = sum(g.width for g in STATE_LAYOUT.groups)
    by_layout = slots * n.hidden + width * (n.selection_hidden + n.experts + n.aux_hidden)
    assert net.param_count() == sum(p.numel() for p in net.parameters()) == 1_326_277 + by_layout
    assert sum(p.numel() for p in aux_parameters(net)) == 4_614 + width * n.aux_hidden


# -- NoisyNet ---------------------------------------------------------------------------------------


def test_eval_is_deterministic_mean_weights_and_train_is_noisy() -> None:
    net = make_net(noisy_sigma=0.5)
    s = states()
    net.eval()
    with torch.no_grad():
        e1 = net(s)
        net.reset_noise()
        e2 = net(s)
        assert torch.equal(flat(e1), flat(e2))
        # eval() == the same network in train() with every σ set to 0 (mean weights only)
        mean_net = copy.deepcopy(net).train()
        for name, p in mean_net.named_parameters():
            if name.endswith("_sigma"):
                p.zero_()
        torch.testing.assert_close(flat(mean_net(s)), flat(e1), rtol=0, atol=0)

        net.train()
        t1, t1_again = net(s), net(s)
        assert torch.equal(flat(t1), flat(t1_again))  # noise changes only at reset_noise
        assert not branches_equal(t1.branches[0], e1.branches[0])
        net.reset_noise()
        t2 = net(s)
        assert all(branches_differ(a, b) for a, b in zip(t1.branches, t2.branches, strict=True))
        # the noise lives in the heads only
        for x, y in [(t1.gate, t2.gate), (t1.selection, t2.selection), (t1.aux_outcome, t2.aux_outcome)]:
            assert torch.equal(x, y)
        net.reset_noise(torch.Generator().manual_seed(5))
        r1 = net(s)
        net.reset_noise(torch.Generator().manual_seed(5))
        assert torch.equal(flat(r1), flat(net(s)))


def test_one_draw_resets_every_noisy_layer_of_both_networks() -> None:
    """``reset_noise([online, target])`` (the learner's, one randn for all layers): every layer's
    eps_in and eps_out get fresh factorised noise f(x) = sign(x)·sqrt(|x|) from one draw, in module
    order, the two networks' noise independent of each other."""
    net = make_net(noisy_sigma=0.5)
    twin = copy.deepcopy(net)
    reset_noise([net, twin], torch.Generator().manual_seed(9))
    layers = [m for n in (net, twin) for m in n.modules() if isinstance(m, NoisyLinear)]
    buffers = [b for m in layers for b in (m.eps_in, m.eps_out)]
    x = torch.randn(sum(b.numel() for b in buffers), generator=torch.Generator().manual_seed(9))
    expected = (x.sign() * x.abs().sqrt()).split([b.numel() for b in buffers])
    for got, want in zip(buffers, expected, strict=True):
        assert torch.equal(got, want)
    half = len(buffers) // 2
    assert not torch.equal(buffers[0], buffers[half])  # the twin's first layer drew other values


def test_noise_scale_follows_fortunato() -> None:
    layer = NoisyLinear(64, 3, sigma0=0.5)
    assert torch.all(layer.weight_sigma == 0.5 / 8) and torch.all(layer.bias_sigma == 0.5 / 8)
    assert layer.weight_mu.abs().max() <= 1 / 8


# -- branch wiring ----------------------------------------------------------------------------------


def capture_input(module: nn.Module) -> tuple[list[Tensor], torch.utils.hooks.RemovableHandle]:
    seen: list[Tensor] = []
    handle = module.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach().clone()))
    return seen, handle


def test_magnitude_sees_direction_expected_q_in_atom_units() -> None:
    net = make_net(noisy_sigma=0.0).eval()
    with torch.no_grad():
        net.v_max.fill_(3.7)  # E[Z]/Δz must not be the raw E[Z]
    s = states()
    n_dir = net.branch_sizes[DIRECTION]
    seen, handle = capture_input(net.advantage[MAGNITUDE].hidden)
    with torch.no_grad():
        h, _, _ = net.encode(s)
        base = net.heads(h, s)
    handle.remove()
    probs = torch.softmax(base[DIRECTION].logits, -1)
    expected = (probs * net.support()).sum(-1) / (2 * 3.7 / (SMALL["atoms"] - 1))
    torch.testing.assert_close(seen[0][:, -n_dir:], expected)
    torch.testing.assert_close(seen[0][:, :-n_dir], h)

    with torch.no_grad():  # change only the direction head's C51 output: its E[Q] moves
        bias = net.advantage[DIRECTION].c51.bias
        bias.add_(torch.randn(bias.shape, generator=torch.Generator().manual_seed(2)))
        moved = net.heads(h, s)
    assert (base[DIRECTION].logits - moved[DIRECTION].logits).abs().max() > 1e-3
    assert branches_differ(base[MAGNITUDE], moved[MAGNITUDE])
    assert branches_equal(base[ORDER], moved[ORDER])
    assert branches_equal(base[URGENCY], moved[URGENCY])


def test_direction_expected_q_is_detached_for_magnitude() -> None:
    net = make_net(noisy_sigma=0.5).train()
    out = net(states())
    mag = out.branches[MAGNITUDE]
    (mag.logits.square().sum() + mag.quantiles.sum() + mag.q_mse.sum()).backward()
    assert all(p.grad is None for p in net.advantage[DIRECTION].parameters())
    assert all(p.grad is not None for p in net.advantage[MAGNITUDE].parameters())


def test_order_and_urgency_see_the_order_flow_columns() -> None:
    net = make_net(noisy_sigma=0.0).eval()
    cols = [STATE_LAYOUT.index(n) for n in NetworkConfig().order_flow_features]
    assert len(cols) == 3
    s = states()
    seen, handle = capture_input(net.advantage[ORDER].hidden)
    with torch.no_grad():
        h, _, _ = net.encode(s)  # the trunk output is held fixed: only the direct path can act
        base = net.heads(h, s)
        handle.remove()
        torch.testing.assert_close(seen[0], torch.cat([h, s[:, cols]], 1), rtol=0, atol=0)

        flow = s.clone()
        flow[:, cols] += 1.0
        moved = net.heads(h, flow)
        others = s.clone()
        keep = torch.zeros(W, dtype=torch.bool)
        keep[cols] = True
        others[:, ~keep] += 1.0
        unmoved = net.heads(h, others)
    assert branches_differ(base[ORDER], moved[ORDER])
    assert branches_differ(base[URGENCY], moved[URGENCY])
    assert branches_equal(base[DIRECTION], moved[DIRECTION])
    assert branches_equal(base[MAGNITUDE], moved[MAGNITUDE])
    assert all(branches_equal(a, b) for a, b in zip(base, unmoved, strict=True))


@pytest.mark.parametrize("bad", ["ofi.not_a_feature", "plan._pad0"])
def test_unknown_order_flow_feature_raises(bad: str) -> None:
    with pytest.raises(ValueError, match=rf"order_flow_features \['{bad}'\]"):
        make_net(order_flow_features=("ofi.ofi_l0", bad, "ofi.trade_flow"))


def test_dueling_heads_centre_advantages() -> None:
    """Adding a constant to an advantage stream's outputs leaves every head unchanged (A - mean_A A)."""
    net = make_net(noisy_sigma=0.0).eval()
    s = states()
    with torch.no_grad():
        base = net(s)
        for layer in (net.advantage[ORDER].c51, net.advantage[ORDER].iqn, net.advantage[ORDER].mse):
            layer.bias.add_(0.7)
        assert branches_equal(base.branches[DIRECTION], net(s).branches[DIRECTION])
        torch.testing.assert_close(flat(net(s)), flat(base))
        net.value.mse.bias.add_(0.7)  # the same shift on V moves every action's E[Q]
        torch.testing.assert_close(net(s).branches[ORDER].q_mse, base.branches[ORDER].q_mse + 0.7)


@pytest.mark.parametrize("noisy_sigma", [0.0, 0.5])
def test_iqn_quantiles_are_the_linear_of_the_embedding_modulated_hidden(noisy_sigma: float) -> None:
    """θ(τ_q) = IQN(f ⊙ φ(τ_q)) per fraction (Dabney et al. 2018, Eq. 4), the stream's one-matmul form
    against the definition, per fraction, for every stream; and the same gradient to the IQN layer."""
    net = make_net(seed=4, noisy_sigma=noisy_sigma)
    phi_QF = torch.relu(net.tau_embed(net.tau_cos))
    x = torch.randn(16, SMALL["hidden"], generator=torch.Generator().manual_seed(5))
    stream = net.value
    f_BF = torch.nn.functional.elu(stream.hidden(x))
    _, quantiles_BAQ, _ = stream(x, phi_QF)
    expected = torch.stack([stream.iqn(f_BF * phi_QF[q]) for q in range(phi_QF.shape[0])], dim=2)
    torch.testing.assert_close(quantiles_BAQ, expected)
    (g_fast,) = torch.autograd.grad(quantiles_BAQ.square().sum(), stream.iqn.weight)
    (g_def,) = torch.autograd.grad(expected.square().sum(), stream.iqn.weight)
    torch.testing.assert_close(g_fast, g_def)


# -- support, expected Q, PopArt layers -------------------------------------------------------------


def test_support_is_symmetric_linspace_of_v_max() -> None:
    net = make_net(atoms=11, support_init=2.5)
    z = net.support()
    assert z[0] == -2.5 and z[-1] == 2.5
    assert torch.equal(z, -z.flip(0))
    torch.testing.assert_close(z.diff(), torch.full((10,), 0.5))
    assert net.atom_spacing() == 0.5
    assert net.v_max.dtype == torch.float32 and net.v_max.dim() == 0


@pytest.mark.parametrize("atoms", [3, 4, 11, 51, 101])
@pytest.mark.parametrize("v_max", [1.0, 2.5, 1.5**7, 0.1])
def test_support_is_the_distributional_support_bit_for_bit(atoms: int, v_max: float) -> None:
    """The network's atoms are :func:`distributional.support`'s, not a copy of its formula that could
    drift from it (its grid is built once, then scaled by ``v_max``)."""
    net = make_net(atoms=atoms)
    net.v_max.fill_(v_max)
    assert torch.equal(net.support(), support(net.v_max, atoms))


def test_expected_q_averages_c51_and_denormalised_iqn() -> None:
    net = make_net(atoms=3, support_init=2.0)  # z = (-2, 0, 2)
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.0, 0.0, 1.0]]]).clamp_min(1e-30))
    quant = torch.tensor([[[1.0, 2.0, 3.0, 4.0, 5.0], [0.0, 0.0, 0.0, 0.0, 5.0]]])
    branch = BranchOut(logits=logits, quantiles=quant, q_mse=torch.zeros(1, 2))
    z = torch.zeros(1, 1)
    out = NetOut((branch,), z, z, z[:, 0], z, z)
    # E_C51 = (-1 + 0.5, 2) = (-0.5, 2); E_IQN = (3, 1) -> denorm 2x + 1 = (7, 3)
    (q,) = net.expected_q(out, denorm=lambda x: 2 * x + 1)
    torch.testing.assert_close(q, torch.tensor([[3.25, 2.5]]))
    (q_plain,) = net.expected_q(out)
    torch.testing.assert_close(q_plain, torch.tensor([[1.25, 1.5]]))


def test_popart_layers_rescale_iqn_and_mse_exactly() -> None:
    """W, b <- s·W, s·b + c on every returned layer maps IQN and MSE outputs to s·y + c, C51 untouched."""
    net = make_net(noisy_sigma=0.5).eval()
    layers = popart_layers(net)
    assert len(layers) == 2 * (1 + len(BRANCHES))
    assert all(type(m) is nn.Linear for m in layers)
    s = states()
    with torch.no_grad():
        base = net(s)
        for m in layers:
            m.weight.mul_(2.0)
            m.bias.mul_(2.0).add_(0.3)
        new = net(s)
    for a, b in zip(base.branches, new.branches, strict=True):
        assert torch.equal(a.logits, b.logits)
        torch.testing.assert_close(b.quantiles, 2.0 * a.quantiles + 0.3)
        torch.testing.assert_close(b.q_mse, 2.0 * a.q_mse + 0.3)


@pytest.mark.gpu
def test_cuda_matches_cpu() -> None:
    net = make_net(noisy_sigma=0.5).eval()
    s = states()
    cpu = flat(net(s))
    gpu_net = copy.deepcopy(net).cuda()
    torch.testing.assert_close(flat(gpu_net(s.cuda())).cpu(), cpu, rtol=1e-4, atol=1e-5)
    gpu_net.train().reset_noise(torch.Generator(device="cuda").manual_seed(0))
    touch_all(gpu_net(s.cuda())).backward()
    assert all(p.grad is not None for p in gpu_net.parameters())
    gpu_net.v_max.mul_(growth_factor(gpu_net.v_max, torch.tensor([5.0, float("nan")], device="cuda"), 1.5))
    assert gpu_net.v_max.item() == 1.5**5


# -- long/short mirror symmetry ---------------------------------------------------------------------


def _relabelled(out: NetOut, net: QNetwork) -> list[Tensor]:
    """``P out``: what the outputs on the mirror image must be for an equivariant network."""
    heads = []
    for name, b in zip(BRANCHES, out.branches, strict=True):
        perm = net.mirror_direction if name == "direction" else None
        heads += [t if perm is None else t.index_select(1, perm) for t in branch_tensors(b)]
    return [
        *heads,
        out.gate,
        out.selection,
        -out.aux_return,
        out.aux_direction.flip(1),  # (down, up) -> (up, down)
        out.aux_outcome.index_select(1, torch.tensor([1, 0, 2])),  # a long's profit <-> stop
    ]


@pytest.mark.parametrize("branches", [BranchConfig(), BranchConfig(direction=3)], ids=["4 dirs", "3 dirs"])
def test_mirror_symmetry_makes_every_output_equivariant(branches: BranchConfig) -> None:
    net = make_net(branches=branches, symmetry="mirror").eval()
    s = states()
    expected = _relabelled(net(s), net)
    got = out_tensors(net(net.mirror_state(s)))
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    # without the constraint the same check fails: the test has teeth
    plain = make_net(branches=branches).eval()
    e0, g0 = _relabelled(plain(s), plain)[0], out_tensors(plain(plain.mirror_state(s)))[0]
    assert (e0 - g0).abs().max() > 1e-4


def test_mirror_symmetry_gives_no_side_a_preference_on_a_symmetric_state() -> None:
    """A state that is its own mirror image (every odd slot 0, swapped pairs equal) has
    Q(Long) = Q(Short) exactly: a drift of the training window cannot tilt it."""
    net = make_net(symmetry="mirror")
    s = states()
    s = 0.5 * (s + net.mirror_state(s))  # the projection onto mirror-invariant states
    for out in (net.eval()(s), net.train()(s)):  # noisy or not
        q = out.branches[DIRECTION].q_mse.detach()
        long_, short = int(Direction.LONG), int(Direction.SHORT)
        torch.testing.assert_close(q[:, long_], q[:, short], rtol=0, atol=1e-6)


def test_mirror_symmetry_trains_every_parameter() -> None:
    net = make_net(symmetry="mirror")
    flat(net(states())).pow(2).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in net.parameters())


# -- the input screen's mask (agent.network.input_screen) ---------------------------------------------

FEATURE_COLUMNS = [c for g in STATE_FEATURE_GROUPS for c in STATE_LAYOUT.group(g).names]
SWAPPED = next(
    c for c in FEATURE_COLUMNS if STATE_MIRROR.source[STATE_LAYOUT.index(c)] != STATE_LAYOUT.index(c)
)
PARTNER = STATE_LAYOUT.columns[STATE_MIRROR.source[STATE_LAYOUT.index(SWAPPED)]]


def test_input_mask_keeps_the_named_columns_their_partners_and_the_agents_own_slots() -> None:
    assert torch.equal(input_mask(None), torch.ones(W))
    mask = input_mask(["ofi.trade_sign_ema", SWAPPED])
    kept = {c for c in STATE_LAYOUT.columns if mask[STATE_LAYOUT.index(c)] == 1}
    own = {c for g in ("portfolio", "plan", "aux") for c in STATE_LAYOUT.group(g).names}
    assert {"ofi.trade_sign_ema", SWAPPED, PARTNER} | own <= kept
    assert not kept & (set(FEATURE_COLUMNS) - {"ofi.trade_sign_ema", SWAPPED, PARTNER})
    # closed under the mirror: masking a state, then mirroring it, equals mirroring, then masking
    src = torch.tensor(STATE_MIRROR.source)
    assert torch.equal(mask[src], mask)


def test_a_screened_out_column_changes_nothing_and_a_kept_one_does() -> None:
    net = make_net(symmetry="mirror").eval()
    net.input_mask.copy_(input_mask(["ofi.trade_sign_ema"]))
    s = states()
    base = flat(net(s))
    dropped, kept = s.clone(), s.clone()
    dropped[:, STATE_LAYOUT.index("ofi.l1_imbalance_ema_slow")] += 3.0
    kept[:, STATE_LAYOUT.index("ofi.trade_sign_ema")] += 3.0
    assert torch.equal(flat(net(dropped)), base)
    assert (flat(net(kept)) - base).abs().max() > 1e-4
    # the aux heads read the masked state too
    ret, _, _ = net.aux_heads(dropped)
    assert torch.equal(ret, net.aux_heads(s)[0])


def test_the_masked_network_stays_mirror_equivariant() -> None:
    net = make_net(symmetry="mirror").eval()
    net.input_mask.copy_(input_mask([SWAPPED, "ofi.trade_sign_ema"]))
    s = states()
    for e, g in zip(_relabelled(net(s), net), out_tensors(net(net.mirror_state(s))), strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def test_the_mask_travels_in_the_state_dict_and_an_old_one_reads_every_column() -> None:
    net = make_net()
    net.input_mask.copy_(input_mask(["ofi.trade_sign_ema"]))
    other = make_net(seed=1)
    other.load_state_dict(net.state_dict())
    assert torch.equal(other.input_mask, net.input_mask)
    old = {k: v for k, v in net.state_dict().items() if k != "input_mask"}  # before the screen existed
    other.load_state_dict(old)
    assert torch.equal(other.input_mask, torch.ones(W))
