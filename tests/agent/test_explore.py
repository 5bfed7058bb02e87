"""Exploration: ε-greedy reaches every value, Boltzmann limits, count bonus, Thompson sampling on a bandit."""

from __future__ import annotations

import pytest
import torch

from foxhunt.agent.distributional import expectation, project_c51, sample_c51, support
from foxhunt.agent.explore import boltzmann, count_bonus, epsilon_greedy, greedy, thompson_direction
from foxhunt.domain.actions import ActionCodec, BranchConfig

BRANCH_CONFIGS = [
    pytest.param(BranchConfig(), id="4x3x3x3"),
    pytest.param(BranchConfig(direction=3), id="3x3x3x3"),
]


# --- ε-greedy --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", BRANCH_CONFIGS)
def test_epsilon_greedy_reaches_every_value_of_every_branch(cfg: BranchConfig) -> None:
    g = torch.Generator().manual_seed(0)
    b, eps = 4000, 0.3
    for n in ActionCodec(cfg).sizes:
        greedy_B = torch.zeros(b, dtype=torch.int64)  # greedy always picks value 0
        out = epsilon_greedy(greedy_B, n, eps, g)
        assert out.dtype == torch.int64
        assert set(out.tolist()) == set(range(n))  # every value of the branch, including the last
        # a different action with probability ε (n-1)/n, each non-greedy value ε/n
        assert (out != 0).float().mean().item() == pytest.approx(eps * (n - 1) / n, abs=0.03)
        for v in range(1, n):
            assert (out == v).float().mean().item() == pytest.approx(eps / n, abs=0.02)


def test_epsilon_zero_is_greedy_exactly_and_one_is_uniform() -> None:
    g = torch.Generator().manual_seed(1)
    greedy_B = torch.randint(0, 4, (1000,), generator=g)
    assert torch.equal(epsilon_greedy(greedy_B, 4, 0.0, g), greedy_B)
    assert torch.equal(epsilon_greedy(greedy_B, 4, torch.tensor(0.0), g), greedy_B)
    out = epsilon_greedy(greedy_B, 4, 1.0, g)
    counts = torch.bincount(out, minlength=4).float() / 1000
    assert torch.allclose(counts, torch.full((4,), 0.25), atol=0.05)


def test_epsilon_greedy_is_repeatable_with_a_seeded_generator() -> None:
    greedy_B = torch.zeros(500, dtype=torch.int64)
    a = epsilon_greedy(greedy_B, 3, 0.5, torch.Generator().manual_seed(7))
    b = epsilon_greedy(greedy_B, 3, 0.5, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


# --- Boltzmann -----------------------------------------------------------------------------------------


def test_boltzmann_limits() -> None:
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2000, 4, generator=g).round().clamp(-2.0, 2.0)
    q[torch.arange(2000), torch.randint(0, 4, (2000,), generator=g)] += 5.0  # a best action, gap >= 1
    best = greedy(q)
    # temperature 0 = off (greedy exactly); at the floor 0.05 a gap of 1 is e^-20: greedy
    assert torch.equal(boltzmann(q, 0.0, 0.05, g), best)
    assert torch.equal(boltzmann(q, torch.tensor(0.0), 0.05, g), best)
    assert torch.equal(boltzmann(q, 0.01, 0.05, g), best)  # below the floor: the floor
    # high temperature: uniform
    hot = boltzmann(q, 1e6, 0.05, g)
    assert torch.allclose(torch.bincount(hot, minlength=4).float() / 2000, torch.full((4,), 0.25), atol=0.04)
    # below the floor, a tensor temperature is floored too; it is not greedy at a moderate floor
    warm = boltzmann(q, torch.tensor(1e-9), 5.0, g)
    assert (warm != best).float().mean().item() > 0.2


def test_boltzmann_samples_the_softmax() -> None:
    g = torch.Generator().manual_seed(3)
    q = torch.tensor([[0.0, 1.0, 2.0]]).expand(100_000, 3)
    out = boltzmann(q, 0.8, 0.05, g)
    freq = torch.bincount(out, minlength=3).float() / 100_000
    assert torch.allclose(freq, torch.softmax(q[0] / 0.8, -1), atol=0.006)


# --- count bonus ---------------------------------------------------------------------------------------


def test_count_bonus() -> None:
    q = torch.tensor([[1.0, 2.0, 3.0], [0.5, -0.5, 0.0]])
    counts = torch.tensor([0, 3, 8])
    assert torch.equal(count_bonus(q, counts, 0.0), q)  # coefficient 0: no change
    expected = q + torch.tensor([0.5, 0.25, 0.5 / 3])  # c / sqrt(1 + n)
    assert torch.allclose(count_bonus(q, counts, 0.5), expected)
    assert torch.allclose(count_bonus(q, counts[None].expand(2, 3), torch.tensor(0.5)), expected)


# --- Thompson sampling ---------------------------------------------------------------------------------


def test_thompson_share_zero_is_the_evaluation_argmax_and_share_one_samples() -> None:
    g = torch.Generator().manual_seed(4)
    z = support(torch.tensor(1.0), 11)
    taus = torch.tensor([0.1, 0.3, 0.5, 0.7, 0.9])
    probs = torch.softmax(torch.randn(256, 4, 11, generator=g), -1)
    quantiles = torch.randn(256, 4, 5, generator=g).sort(-1).values
    mean = 0.5 * (expectation(probs, z) + quantiles.mean(-1))
    assert torch.equal(thompson_direction(probs, z, quantiles, taus, 0.0, g), mean.argmax(-1))
    fallback = torch.full((256,), 3)
    assert torch.equal(thompson_direction(probs, z, quantiles, taus, 0.0, g, fallback), fallback)
    sampled = thompson_direction(probs, z, quantiles, taus, 1.0, g, fallback)
    assert set(sampled.tolist()) == {0, 1, 2, 3}  # draws, not the fallback
    assert (sampled != mean.argmax(-1)).any()
    # the same u feeds both heads: when C51 and IQN describe the same point masses, Thompson = argmax
    point = torch.zeros(256, 4, 11)
    point[..., 5] = 1.0  # δ(0) everywhere ...
    point[:, 2] = 0.0
    point[:, 2, 7] = 1.0  # ... except action 2, δ(z_7)
    point_q = expectation(point, z)[..., None].expand(256, 4, 5)
    assert (thompson_direction(point, z, point_q, taus, 1.0, g) == 2).all()


def test_thompson_bandit_discovers_long_and_argmax_never_does(one_thread: None) -> None:
    """Flat = δ(0); Long = a wide belief with mean slightly below 0, true edge +0.005.

    ``B`` independent bandits run side by side. Each iteration every bandit picks Flat (0) or Long (1)
    with ``thompson_direction`` (share 1: Thompson; share 0: the evaluation argmax of the means, which
    prefers Flat at the start), and when it picks Long it observes ``r ~ N(0.005, 0.005²)`` and moves its
    Long belief towards it with a tabular C51 step ``p <- (1 - α) p + α Φ δ(r)`` (the projection of the
    observed reward onto the atoms). The IQN head reads the quantiles of the same belief at the fixed
    fractions. Nothing else explores, so only sampling from the distribution can find the edge.
    """
    b, atoms, alpha, iterations = 64, 51, 0.1, 100
    g = torch.Generator().manual_seed(5)
    z = support(torch.tensor(1.0), atoms)  # atoms over [-1, 1], Δz = 0.04
    taus = torch.tensor([0.1, 0.3, 0.5, 0.7, 0.9])
    flat_K = project_c51(torch.full((1, atoms), 1 / atoms), torch.zeros(1), torch.zeros(1), z)[0]  # δ(0)
    assert flat_K[atoms // 2] == 1.0
    prior_K = torch.exp(-0.5 * ((z + 0.01) / 0.3).square())
    prior_K = prior_K / prior_K.sum()  # wide, mean slightly under 0: argmax prefers Flat

    def run(share: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        long_BK = prior_K.expand(b, atoms).clone()
        first_preferred = torch.full((b,), iterations + 1)  # iteration at which argmax first picks Long
        chosen_long = torch.zeros(b, dtype=torch.int64)
        for it in range(1, iterations + 1):
            probs_BAK = torch.stack([flat_K.expand(b, atoms), long_BK], dim=1)  # [B, 2, K]
            quantiles_BAQ = sample_c51(probs_BAK[:, :, None, :], z, taus)  # belief quantiles   [B, 2, Q]
            action_B = thompson_direction(probs_BAK, z, quantiles_BAQ, taus, share, g)
            long_B = action_B == 1
            reward_B = 0.005 + 0.005 * torch.randn(b, generator=g)
            observed_BK = project_c51(long_BK, reward_B, torch.zeros(b), z)  # Φ δ(r)
            long_BK = torch.where(long_B[:, None], (1 - alpha) * long_BK + alpha * observed_BK, long_BK)
            chosen_long += long_B
            # the evaluation policy after this iteration (no exploration): (E_C51 + E_IQN) / 2
            probs_BAK = torch.stack([flat_K.expand(b, atoms), long_BK], dim=1)
            quantiles_BAQ = sample_c51(probs_BAK[:, :, None, :], z, taus)
            evaluation_B = thompson_direction(probs_BAK, z, quantiles_BAQ, taus, 0.0, g)
            newly = (evaluation_B == 1) & (first_preferred > iterations)
            first_preferred = torch.where(newly, torch.full_like(first_preferred, it), first_preferred)
        return first_preferred, chosen_long, evaluation_B

    first, chosen, final = run(share=1.0)
    assert (first <= iterations).all()  # every Thompson bandit discovers Long within 100 iterations
    assert (final == 1).all()  # and prefers it at the end
    assert (chosen >= 10).all()  # it kept trying Long (about a third of the iterations)
    first, chosen, final = run(share=0.0)
    assert (chosen == 0).all()  # argmax never tries Long ...
    assert (first > iterations).all()  # ... so it never learns that Long is better
    assert (final == 0).all()


# --- per-branch ε (agent.explore.branch_epsilon) --------------------------------------------------------


def test_branch_epsilon_draws_each_branch_at_its_own_rate() -> None:
    """A branch's own ε replaces the common one in its exploration table; unset branches keep it."""
    from foxhunt.agent.config import ExploreConfig
    from foxhunt.agent.explore import Context, Draw, exploration
    from foxhunt.domain.actions import BRANCHES

    cfg = ExploreConfig(epsilon=0.1, branch_epsilon={"magnitude": 0.0, "order_type": 0.6, "urgency": 1.0})
    assert [cfg.epsilon_of(b) for b in BRANCHES] == [0.1, 0.0, 0.6, 1.0]
    b, n = 20_000, 3
    g = torch.Generator().manual_seed(3)
    ctx = Context(
        counts=torch.zeros(n),
        q_abs=torch.tensor(1.0),
        temperature_boost=1.0,
        generator=g,
        probs=lambda: None,
        z=torch.zeros(3),
        quantiles=lambda: None,
        taus=torch.tensor([0.5]),
    )
    q = torch.zeros(b, n)
    q[:, 0] = 1.0  # greedy: value 0
    for branch in BRANCHES:
        draw = Draw(q, None)
        for step in exploration(cfg, branch):
            draw = step(draw, ctx)
        moved = (draw.chosen() != 0).float().mean().item()
        assert moved == pytest.approx(cfg.epsilon_of(branch) * (n - 1) / n, abs=0.015), branch


def test_branch_epsilon_unset_is_the_common_epsilon() -> None:
    from foxhunt.agent.config import ExploreConfig
    from foxhunt.domain.actions import BRANCHES

    cfg = ExploreConfig(epsilon=0.25)
    assert all(cfg.epsilon_of(b) == 0.25 for b in BRANCHES)
    with pytest.raises(ValueError):
        ExploreConfig(branch_epsilon={"order_type": 1.5})


def test_the_conviction_gap_is_topks_two_values_exactly() -> None:
    """``actor._top2_gap`` (two row maxima, which Inductor fuses) is ``topk(q, 2)``'s best minus
    second, bit for bit, ties included (a tied best: gap 0), on a hand-worked row and random ones."""
    from foxhunt.agent.actor import _top2_gap

    q = torch.tensor([[1.0, 3.0, 2.0], [2.0, 2.0, -1.0], [-5.0, -4.0, -4.5], [0.1, 0.1, 0.1]])
    assert _top2_gap(q).tolist() == pytest.approx([1.0, 0.0, 0.5, 0.0], abs=0)
    g = torch.Generator().manual_seed(0)
    for width in (2, 3, 4):
        q = torch.randint(-3, 4, (500, width), generator=g).float() * 0.37  # many ties
        q = torch.cat([q, torch.randn(500, width, generator=g, dtype=torch.float64).float()])
        top = torch.topk(q, 2, dim=1).values
        assert torch.equal(_top2_gap(q), top[:, 0] - top[:, 1])
