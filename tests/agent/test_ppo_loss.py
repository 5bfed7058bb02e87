"""The PPO learner's pure parts against hand-worked numbers (foxhunt.agent.ppo_loss)."""

from __future__ import annotations

import math

import pytest
import torch

from foxhunt.agent.ppo_loss import (
    LossWeights,
    all_action_loss,
    branch_masks,
    counterfactual_advantages,
    gae,
    log_probs_entropy,
    ppo_loss,
)
from foxhunt.domain.actions import Direction


def test_gae_matches_the_hand_worked_example() -> None:
    # gamma = lam = 0.5; r = (1, 0, 2), V = (0.5, 1, 0), the episode ends at step 1, V(s_3) = 4.
    # deltas: 1 + .5*1 - .5 = 1;  0 + 0 - 1 = -1;  2 + .5*4 - 0 = 4
    # A_2 = 4;  A_1 = -1 (done: nothing from A_2);  A_0 = 1 + .25 * (-1) = 0.75
    r = torch.tensor([[1.0], [0.0], [2.0]])
    v = torch.tensor([[0.5], [1.0], [0.0]])
    done = torch.tensor([[False], [True], [False]])
    adv, ret = gae(r, v, done, torch.tensor([4.0]), gamma=0.5, lam=0.5)
    assert adv.squeeze(1).tolist() == pytest.approx([0.75, -1.0, 4.0])
    assert ret.squeeze(1).tolist() == pytest.approx([1.25, 0.0, 4.0])


def test_gae_lambda_one_is_the_discounted_return_minus_the_value() -> None:
    torch.manual_seed(0)
    r, v = torch.randn(5, 3), torch.randn(5, 3)
    last = torch.randn(3)
    adv, ret = gae(r, v, torch.zeros(5, 3, dtype=torch.bool), last, gamma=0.9, lam=1.0)
    g = last.clone()
    for t in range(4, -1, -1):
        g = r[t] + 0.9 * g
        assert torch.allclose(ret[t], g, atol=1e-5)


ROWS = [Direction.LONG, Direction.HOLD, Direction.FLAT, Direction.SHORT]
DECISION = [True, True, True, False]  # the last row's plan is locked


def _logits(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(4, n, generator=g, requires_grad=True) for n in (4, 3, 3, 3))


def test_masks_drop_execution_choices_of_hold_and_flat_and_everything_when_locked() -> None:
    direction = torch.tensor([int(d) for d in ROWS])
    masks = branch_masks(direction, torch.tensor(DECISION))
    assert masks.tolist() == [[1, 1, 1, 1], [1, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]]


def test_masked_rows_contribute_no_log_prob_or_entropy_gradient() -> None:
    logits = _logits()
    actions = torch.tensor([[int(d), 1, 2, 0] for d in ROWS])
    masks = branch_masks(actions[:, 0], torch.tensor(DECISION))
    logp, ent = log_probs_entropy(logits, actions, masks)
    # row 1 (Hold): its log-prob is the direction's alone
    assert logp[1].item() == pytest.approx(torch.log_softmax(logits[0][1], -1)[int(Direction.HOLD)].item())
    assert logp[3].item() == 0.0  # locked: nothing
    w = LossWeights(clip=0.2, value_clip=0.0, value_coef=0.0, entropy=(0.1, 0.1, 0.1, 0.1))
    z = torch.zeros(4)
    loss, _ = ppo_loss(
        logp,
        logp.detach() - 0.1,
        torch.tensor([1.0, -1.0, 0.5, 3.0]),
        ent,
        masks,
        z,
        z,
        z,
        torch.ones(4, dtype=torch.bool),
        w,
    )
    loss.backward()
    for b in (1, 2, 3):  # magnitude, order type, urgency: no gradient on Hold, Flat and locked rows
        assert torch.all(logits[b].grad[1:] == 0), b
        assert torch.any(logits[b].grad[0] != 0), b
    assert torch.all(logits[0].grad[3] == 0)  # the locked row's direction too
    assert torch.any(logits[0].grad[1] != 0)


def test_clipped_loss_matches_the_hand_worked_example() -> None:
    # two decision rows, advantages (1, -1): normalised they stay (1, -1)
    # row 0: ratio 1.5, clipped at 1.2, A = 1:  max(-1.5, -1.2) = -1.2
    # row 1: ratio 0.5, clipped at 0.8, A = -1: max(0.5, 0.8) = 0.8      -> policy loss -0.2
    # value (clip 0.5): row 0 V 1, V_old 0, R 2: max((1-2)^2, (0.5-2)^2) = 2.25; row 1: 0 -> 0.5 * 1.125
    masks = torch.tensor([[1.0, 0, 0, 0], [1.0, 0, 0, 0]])
    old = torch.zeros(2)
    new = torch.tensor([math.log(1.5), math.log(0.5)])
    w = LossWeights(clip=0.2, value_clip=0.5, value_coef=0.5, entropy=(0.0, 0.0, 0.0, 0.0))
    loss, stats = ppo_loss(
        new,
        old,
        torch.tensor([1.0, -1.0]),
        torch.zeros(2, 4),
        masks,
        torch.tensor([1.0, 0.0]),
        torch.zeros(2),
        torch.tensor([2.0, 0.0]),
        torch.ones(2, dtype=torch.bool),
        w,
    )
    assert stats["loss/policy"].item() == pytest.approx(-0.2)
    assert stats["loss/value"].item() == pytest.approx(0.5625)
    assert loss.item() == pytest.approx(-0.2 + 0.5 * 0.5625)
    assert stats["ppo/clip_frac"].item() == pytest.approx(1.0)


def test_entropy_bonus_is_per_branch_over_its_own_rows() -> None:
    masks = torch.tensor([[1.0, 1, 1, 1], [1.0, 0, 0, 0]])
    ent = torch.tensor([[1.0, 2.0, 3.0, 4.0], [3.0, 100.0, 100.0, 100.0]])
    w = LossWeights(clip=0.2, value_clip=0.0, value_coef=0.0, entropy=(1.0, 0.5, 0.0, 0.0))
    z = torch.zeros(2)
    loss, stats = ppo_loss(z, z, z, ent, masks, z, z, z, torch.ones(2, dtype=torch.bool), w)
    assert stats["ppo/entropy/direction"].item() == pytest.approx(2.0)
    assert stats["ppo/entropy/magnitude"].item() == pytest.approx(2.0)  # row 1's 100 masked
    assert loss.item() == pytest.approx(-(1.0 * 2.0 + 0.5 * 2.0))


# --- counterfactual execution targets (agent.counterfactual under agent.algo = ppo) -----------------


def test_counterfactual_advantages_match_the_hand_worked_example() -> None:
    """Two execution branches of two values. Q = R + d V(s_end): with V = 2, returns [1, 2 | 0, 4] and
    discounts [0.5, 0.5 | 0, 0.25] give Q = [2, 3 | 0, 4.5]; centred under pi = [0.5, 0.5] (mean 2.5)
    and [0.25, 0.75] (mean 3.375): A = [-0.5, 0.5 | -3.375, 1.125]."""
    ret = torch.tensor([[1.0, 2.0, 0.0, 4.0]])
    disc = torch.tensor([[0.5, 0.5, 0.0, 0.25]])
    probs = (torch.tensor([[0.5, 0.5]]), torch.tensor([[0.25, 0.75]]))
    adv = counterfactual_advantages(ret, disc, torch.tensor([2.0]), probs)
    torch.testing.assert_close(adv, torch.tensor([[-0.5, 0.5, -3.375, 1.125]]))
    for a, p in zip(adv.split([2, 2], 1), probs, strict=True):  # zero mean under the policy
        torch.testing.assert_close((a * p).sum(1), torch.zeros(1))


def test_all_action_loss_is_the_expected_policy_gradient_by_hand() -> None:
    """One branch, two values, logits 0 (pi = [0.5, 0.5]) and old = new: ratio 1, loss -sum_v pi_v a_v =
    0 for centred a = [-1, 1]; its gradient is -sum_v a_v grad pi_v with dpi_0/dl_0 = 0.25, dpi_1/dl_0 =
    -0.25: d/dl_0 = -(-1 x 0.25 + 1 x -0.25) = 0.5, d/dl_1 = -0.5 (every value pushed, not only the one
    sampled). With scale 2 the advantages halve and so does the gradient."""
    old = (torch.log(torch.tensor([[0.5, 0.5]])),)
    adv = torch.tensor([[-1.0, 1.0]])
    mask = torch.ones(1, 1)
    for scale, want in ((1.0, 0.5), (2.0, 0.25)):
        logits = torch.zeros(1, 2, requires_grad=True)
        loss, per = all_action_loss((logits,), old, adv, mask, 0.2, torch.tensor(scale))
        assert abs(float(loss.detach())) < 1e-7 and per.shape == (1,)
        loss.backward()
        assert logits.grad is not None
        torch.testing.assert_close(logits.grad, torch.tensor([[want, -want]]))


def test_all_action_loss_clips_per_value_and_masks_rows() -> None:
    """Once the update moved both values past the clip in their advantages' direction (the good value's
    ratio above 1.2, the bad one's below 0.8) nothing pushes further; a masked row adds nothing."""
    old = (torch.log(torch.tensor([[0.5, 0.5]])),)
    adv = torch.tensor([[-1.0, 1.0]])
    logits = torch.tensor([[-0.5, 0.5]], requires_grad=True)  # pi = [0.27, 0.73]: ratios 0.54, 1.46
    loss, _ = all_action_loss((logits,), old, adv, torch.ones(1, 1), 0.2, torch.tensor(1.0))
    loss.backward()
    assert logits.grad is not None and torch.equal(logits.grad, torch.zeros(1, 2))
    # value 0.5 x max(0.8 x 1, ...) + 0.5 x max(-1.2, -1.46): 0.4 - 0.6 = -0.2
    torch.testing.assert_close(loss, torch.tensor(-0.2))
    two = torch.zeros(2, 2, requires_grad=True)
    loss2, _ = all_action_loss(
        (two,), (old[0].repeat(2, 1),), adv.repeat(2, 1), torch.tensor([[1.0], [0.0]]), 0.2, torch.tensor(1.0)
    )
    loss2.backward()
    assert two.grad is not None
    torch.testing.assert_close(two.grad[0], torch.tensor([0.5, -0.5]))
    assert torch.equal(two.grad[1], torch.zeros(2))
