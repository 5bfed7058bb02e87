"""Distributional maths: C51 projection and IQN quantile-Huber against hand-worked numbers, inverse CDFs."""

from __future__ import annotations

import math

import pytest
import torch

from foxhunt.agent.distributional import (
    UTILISATION_SHARE,
    atom_entropy,
    atom_utilisation,
    c51_cross_entropy,
    expectation,
    project_c51,
    quantile_huber,
    sample_c51,
    sample_quantiles,
    support,
)

Z5 = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0])  # Δz = 1


def _project(probs: list[float], reward: float, discount: float, z: torch.Tensor = Z5) -> torch.Tensor:
    return project_c51(torch.tensor([probs]), torch.tensor([reward]), torch.tensor([discount]), z)


# --- support -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("atoms", [3, 5, 51, 52])
def test_support_is_exactly_symmetric_with_the_right_ends(atoms: int) -> None:
    z = support(torch.tensor(1.5), atoms)
    assert z.shape == (atoms,)
    assert z[0] == -1.5
    assert z[-1] == 1.5
    assert torch.equal(z, -z.flip(0))
    assert torch.allclose(z.diff(), torch.full((atoms - 1,), 3.0 / (atoms - 1)))
    if atoms % 2:
        assert z[atoms // 2] == 0.0


# --- C51 projection, worked by hand ------------------------------------------------------------------


def test_projection_dopamine_style_split_between_two_atoms() -> None:
    # all mass on z = -2; r + d z = 0.3 - 2 = -1.7 lies 0.3 above -2: 0.7 stays on -2, 0.3 goes to -1
    out = _project([1.0, 0.0, 0.0, 0.0, 0.0], reward=0.3, discount=1.0)
    assert torch.allclose(out, torch.tensor([[0.7, 0.3, 0.0, 0.0, 0.0]]), atol=1e-6)


def test_projection_of_a_spread_distribution() -> None:
    # r = 0.5, d = 0.5: atoms move to 0.5 + 0.5 z = [-0.5, 0, 0.5, 1, 1.5] carrying [.1, .2, .3, .2, .2]
    #   -0.5 -> .05 on -1, .05 on 0;   0 -> .2 on 0;   0.5 -> .15 on 0, .15 on 1;   1 -> .2 on 1;
    #   1.5 -> .1 on 1, .1 on 2        total: [0, .05, .40, .45, .10]
    out = _project([0.1, 0.2, 0.3, 0.2, 0.2], reward=0.5, discount=0.5)
    assert torch.allclose(out, torch.tensor([[0.0, 0.05, 0.40, 0.45, 0.10]]), atol=1e-6)


def test_projection_clips_at_the_support_ends() -> None:
    probs = [0.1, 0.2, 0.3, 0.2, 0.2]
    assert torch.allclose(_project(probs, 10.0, 0.9), torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]]))
    assert torch.allclose(_project(probs, -10.0, 0.9), torch.tensor([[1.0, 0.0, 0.0, 0.0, 0.0]]))
    # r = 1, d = 1: [-1, 0, 1, 2, 3] -> the mass of z=1 and z=2 both end on the top atom
    assert torch.allclose(_project(probs, 1.0, 1.0), torch.tensor([[0.0, 0.1, 0.2, 0.3, 0.4]]), atol=1e-6)


@pytest.mark.parametrize("probs", [[0.1, 0.2, 0.3, 0.2, 0.2], [0.0, 0.0, 0.0, 0.0, 1.0], [0.2] * 5])
def test_projection_with_discount_zero_is_a_point_mass_at_the_reward(probs: list[float]) -> None:
    # terminal: the target is δ(r) whatever the next distribution; r = 0.25 splits .75 on 0, .25 on 1
    out = _project(probs, reward=0.25, discount=0.0)
    assert torch.allclose(out, torch.tensor([[0.0, 0.0, 0.75, 0.25, 0.0]]), atol=1e-6)


def test_projection_identity_for_r0_d1() -> None:
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.2, 0.2]])
    assert torch.allclose(project_c51(probs, torch.zeros(1), torch.ones(1), Z5), probs)


def test_projection_batch_conserves_mass_and_mean_inside_the_support() -> None:
    g = torch.Generator().manual_seed(0)
    z = support(torch.tensor(3.0), 51)
    probs = torch.softmax(torch.randn(256, 51, generator=g), -1)
    rewards = 0.5 * torch.randn(256, generator=g)
    discounts = torch.rand(256, generator=g) * (torch.rand(256, generator=g) > 0.2)  # some terminal
    out = project_c51(probs, rewards, discounts, z)
    assert out.shape == (256, 51)
    assert (out >= 0).all()
    assert torch.allclose(out.sum(-1), torch.ones(256), atol=1e-5)  # mass conserved
    # each row equals the projection of that row alone (no mixing across the batch)
    assert torch.allclose(out[7], project_c51(probs[7:8], rewards[7:8], discounts[7:8], z)[0])
    # where no target atom is clipped, linear interpolation keeps the mean: E = r + d E[Z]
    inside = (rewards.abs() + discounts * 3.0) <= 3.0
    assert inside.sum() > 50
    expected_mean = rewards + discounts * expectation(probs, z)
    assert torch.allclose(expectation(out, z)[inside], expected_mean[inside], atol=1e-5)


# --- cross-entropy -----------------------------------------------------------------------------------


def test_c51_cross_entropy_matches_the_definition_and_is_minimal_at_the_target() -> None:
    target = torch.tensor([[0.0, 0.05, 0.40, 0.45, 0.10]])
    logits = torch.tensor([[0.3, -1.0, 2.0, 0.5, 0.0]])
    p = torch.exp(logits) / torch.exp(logits).sum()
    expected = -sum(t * math.log(pi) for t, pi in zip(target[0].tolist(), p[0].tolist(), strict=True))
    assert c51_cross_entropy(logits, target).item() == pytest.approx(expected, rel=1e-5)
    # at logits = log(target) the loss is the target's entropy H(m) (KL = 0), its minimum
    at_target = c51_cross_entropy(target.clamp_min(1e-30).log(), target)
    assert at_target.item() == pytest.approx(atom_entropy(target).item(), abs=1e-5)
    assert at_target < c51_cross_entropy(logits, target)


# --- IQN quantile-Huber against the paper's formula as a double loop ---------------------------------


def _quantile_huber_loop(pred: list[float], target: list[float], taus: list[float], kappa: float) -> float:
    total = 0.0
    for tau, theta in zip(taus, pred, strict=True):  # i over predicted fractions: sum
        acc = 0.0
        for t in target:  # j over target samples: mean
            delta = t - theta
            huber = 0.5 * delta * delta if abs(delta) <= kappa else kappa * (abs(delta) - 0.5 * kappa)
            acc += abs(tau - (1.0 if delta < 0 else 0.0)) * huber / kappa
        total += acc / len(target)
    return total


@pytest.mark.parametrize("kappa", [1.0, 0.3, 2.5])
def test_quantile_huber_matches_the_double_loop(kappa: float) -> None:
    g = torch.Generator().manual_seed(1)
    taus = torch.tensor([0.1, 0.3, 0.5, 0.7, 0.9], dtype=torch.float64)
    pred = 2.0 * torch.randn(6, 5, generator=g, dtype=torch.float64)  # errors on both sides of kappa
    target = 2.0 * torch.randn(6, 7, generator=g, dtype=torch.float64)
    out = quantile_huber(pred, target, taus, kappa)
    assert out.shape == (6,)
    for b in range(6):
        expected = _quantile_huber_loop(pred[b].tolist(), target[b].tolist(), taus.tolist(), kappa)
        assert out[b].item() == pytest.approx(expected, rel=1e-12)


def test_quantile_huber_hand_case() -> None:
    # one fraction τ = 0.25, prediction 0, targets [2, -0.5], κ = 1:
    #   δ = 2  : |0.25 - 0| · 1 · (2 - 0.5) / 1 = 0.375;   δ = -0.5: |0.25 - 1| · 0.125 = 0.09375
    #   mean over the two targets = 0.234375
    out = quantile_huber(torch.zeros(1, 1), torch.tensor([[2.0, -0.5]]), torch.tensor([0.25]), 1.0)
    assert out.item() == pytest.approx(0.234375)


def test_quantile_huber_is_minimised_at_the_fractions_quantile() -> None:
    # targets on a uniform grid over [0, 1]: the loss of fraction τ, as a function of the prediction,
    # is smallest near the τ-quantile of the targets, i.e. near τ (κ small: close to the pinball loss)
    target = torch.linspace(0.0, 1.0, 201)
    candidates = torch.linspace(0.0, 1.0, 101)  # predictions tried
    for tau in (0.1, 0.5, 0.9):
        loss = quantile_huber(
            candidates[:, None], target.expand(101, 201), torch.tensor([tau]), 0.01
        )  # [101]
        assert candidates[loss.argmin()].item() == pytest.approx(tau, abs=0.015)


# --- inverse-CDF samples -----------------------------------------------------------------------------


def test_sample_c51_inverse_cdf_hand_cases() -> None:
    probs = torch.tensor([0.1, 0.0, 0.4, 0.5])  # F = [0.1, 0.1, 0.5, 1.0]
    z = torch.tensor([-1.0, 0.0, 1.0, 2.0])
    u = torch.tensor([0.0, 0.0999, 0.1, 0.3, 0.4999, 0.5, 0.9999])
    out = sample_c51(probs.expand(7, 4), z, u)
    assert out.tolist() == [-1.0, -1.0, 1.0, 1.0, 1.0, 2.0, 2.0]  # the zero-mass atom 0 is never drawn
    # broadcasting one distribution against many u, and a u at the rounding edge
    assert sample_c51(probs, z, torch.tensor([0.05, 1.0])).tolist() == [-1.0, 2.0]


def test_sample_c51_reproduces_the_mean() -> None:
    g = torch.Generator().manual_seed(2)
    z = support(torch.tensor(1.0), 51)
    probs = torch.softmax(torch.randn(3, 51, generator=g) * 2, -1)  # [3, K]
    u = torch.rand(200_000, 3, generator=g)
    draws = sample_c51(probs, z, u)  # [N, 3]
    assert torch.allclose(draws.mean(0), expectation(probs, z), atol=5e-3)


def test_sample_quantiles_piecewise_linear_and_flat_outside() -> None:
    taus = torch.tensor([0.1, 0.3, 0.5, 0.7, 0.9])
    q = torch.tensor([-2.0, -1.0, 0.0, 1.0, 4.0])
    u = torch.tensor([0.0, 0.05, 0.1, 0.2, 0.4, 0.5, 0.8, 0.9, 0.95, 0.999])
    out = sample_quantiles(q, taus, u)
    expected = [-2.0, -2.0, -2.0, -1.5, -0.5, 0.0, 2.5, 4.0, 4.0, 4.0]
    assert torch.allclose(out, torch.tensor(expected), atol=1e-6)
    # crossed quantiles are sorted first (monotone rearrangement)
    crossed = torch.tensor([-1.0, -2.0, 0.0, 4.0, 1.0])
    assert torch.allclose(sample_quantiles(crossed, taus, u), torch.tensor(expected), atol=1e-6)
    # a single fraction is a point mass
    assert torch.equal(
        sample_quantiles(torch.tensor([[3.0]]), torch.tensor([0.5]), torch.rand(1, 4)), 3 * torch.ones(1, 4)
    )


def test_sample_quantiles_reproduces_the_mean_of_the_interpolated_distribution() -> None:
    g = torch.Generator().manual_seed(3)
    taus = torch.tensor([0.1, 0.3, 0.5, 0.7, 0.9])
    q = torch.tensor([[-2.0, -1.0, 0.0, 1.0, 4.0], [0.0, 0.1, 0.15, 0.3, 0.31]])  # [2, Q]
    # mean of the inverse CDF: flat ends + trapezoids between the fractions
    ends = taus[0] * q[:, 0] + (1 - taus[-1]) * q[:, -1]
    trapezoids = (taus.diff() * 0.5 * (q[:, 1:] + q[:, :-1])).sum(-1)
    u = torch.rand(200_000, 2, generator=g)
    draws = sample_quantiles(q, taus, u)  # [N, 2]
    assert torch.allclose(draws.mean(0), ends + trapezoids, atol=5e-3)
    # and the draws are distributed as the inverse CDF says: P(X <= q_i) = τ_i
    for i in range(4):
        assert (draws[:, 0] <= q[0, i]).float().mean().item() == pytest.approx(taus[i].item(), abs=5e-3)
    assert (draws[:, 0] < q[0, 4]).float().mean().item() == pytest.approx(0.9, abs=5e-3)  # flat top: 0.1


# --- atom statistics ---------------------------------------------------------------------------------


def test_atom_utilisation_rule() -> None:
    k = 10
    uniform = torch.full((4, 2, k), 1.0 / k)
    assert atom_utilisation(uniform).item() == 1.0
    # all mass on 3 atoms of action 0 and 5 atoms of action 1: (3 + 5) / 20 used
    probs = torch.zeros(4, 2, k)
    probs[:, 0, :3] = 1 / 3
    probs[:, 1, 2:7] = 1 / 5
    assert atom_utilisation(probs).item() == pytest.approx(8 / 20)
    # an atom is used on the batch mean: one sample of four with mass on atom 9 counts when > 0.1 / K
    probs[0, 0, :3] = 0.3
    probs[0, 0, 9] = 0.1  # batch mean 0.025 > 0.01
    assert atom_utilisation(probs).item() == pytest.approx(9 / 20)
    just_under = torch.full((1, 1, k), UTILISATION_SHARE / k)
    assert atom_utilisation(just_under).item() == 0.0  # strictly greater than the threshold


def test_atom_entropy() -> None:
    probs = torch.tensor([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
    assert torch.allclose(atom_entropy(probs), torch.tensor([math.log(4), 0.0, math.log(2)]))
    p = torch.tensor([0.7, 0.3, 0.0], requires_grad=True)
    atom_entropy(p).backward()
    assert torch.isfinite(p.grad).all()


def _dense_projection(probs_BK: torch.Tensor, r_B: torch.Tensor, d_B: torch.Tensor, z_K: torch.Tensor):
    """Dopamine's dense form of Eq. 7 (every target atom against every support atom), the reference."""
    delta_z = z_K[1] - z_K[0]
    target_BK = (r_B[:, None] + d_B[:, None] * z_K[None, :]).clamp(z_K[0], z_K[-1])
    weight_BKK = (1.0 - (target_BK[:, None, :] - z_K[None, :, None]).abs() / delta_z).clamp(0.0, 1.0)
    return (weight_BKK * probs_BK[:, None, :]).sum(-1)


@pytest.mark.parametrize("atoms", [2, 5, 51])
def test_scatter_projection_equals_the_dense_formula(atoms: int) -> None:
    """The scatter form adds each target atom's mass to its two neighbours only: the same numbers as
    the dense ``Σ_j clamp(1 - |T̂z_j - z_i| / Δz, 0, 1) p_j``, targets on atoms, between atoms and
    clipped at both ends included."""
    g = torch.Generator().manual_seed(atoms)
    z = support(torch.tensor(2.0, dtype=torch.float64), atoms)
    probs = torch.softmax(torch.randn(512, atoms, generator=g, dtype=torch.float64), -1)
    rewards = 3.0 * torch.randn(512, generator=g, dtype=torch.float64)
    rewards[:64] = z[torch.randint(0, atoms, (64,), generator=g)]  # exactly on an atom
    discounts = torch.rand(512, generator=g, dtype=torch.float64) * (torch.rand(512, generator=g) > 0.2)
    discounts[:64] = 0.0  # a point mass exactly on an atom
    out = project_c51(probs, rewards, discounts, z)
    torch.testing.assert_close(out, _dense_projection(probs, rewards, discounts, z), rtol=0, atol=1e-12)
