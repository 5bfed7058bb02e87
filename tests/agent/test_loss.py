"""The loss module (agent/loss.py): every named term worked by hand on a 2-sample batch, the TD errors,
the switches at 0, the total, and the readings of a network output."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from foxhunt.agent.config import LossConfig
from foxhunt.agent.loss import LOSS_TERMS, Gates, Targets, regulariser_terms, total_loss, value_terms
from foxhunt.agent.network import BranchOut, NetOut
from foxhunt.domain.actions import BRANCHES

LN2, LN3 = math.log(2.0), math.log(3.0)
N_BR = len(BRANCHES)
NAN = float("nan")
# Non-default weights, so each term's weight is seen in its value; the magnitude branch has its own.
CFG = LossConfig(
    c51=1.0, magnitude_c51=0.2, iqn=0.25, huber_kappa=1.0, mse=1.0, magnitude_mse=4.0, aux=0.5, cql=0.5,
    atom_entropy=0.1, moe_balance=2.0,
)  # fmt: skip


def _out() -> NetOut:
    """Two samples, every branch alike: 2 atoms, one quantile fraction, 2 actions, 2 experts.

    At the taken actions (sample 0 action 0, sample 1 action 1): C51 logits (0, 0) -> p = (1/2, 1/2)
    and (0, ln 3) -> (1/4, 3/4); IQN quantile 0; E[Q] regression 1 and 2. The actions not taken hold
    values (5, 7, 9) that would change every term if they were read. Gate: both samples on expert 0.
    Aux predictions: return (0.5, 1), direction logits 0, outcome logits 0."""
    logits_BAK = torch.full((2, 2, 2), 5.0)
    logits_BAK[0, 0] = torch.tensor([0.0, 0.0])
    logits_BAK[1, 1] = torch.tensor([0.0, LN3])
    quantiles_BAQ = torch.full((2, 2, 1), 7.0)
    quantiles_BAQ[0, 0], quantiles_BAQ[1, 1] = 0.0, 0.0
    q_mse_BA = torch.tensor([[1.0, 9.0], [9.0, 2.0]])
    branches = tuple(BranchOut(logits_BAK.clone(), quantiles_BAQ.clone(), q_mse_BA.clone()) for _ in BRANCHES)
    return NetOut(
        branches=branches,
        gate=torch.tensor([[1.0, 0.0], [1.0, 0.0]]),
        selection=torch.ones(2, 1),
        aux_return=torch.tensor([0.5, 1.0]),
        aux_direction=torch.zeros(2, 2),
        aux_outcome=torch.zeros(2, 3),
    )


def _expected_q(out: NetOut) -> tuple[Tensor, ...]:
    """E[Q] of the two actions: (0, 0) for sample 0, (ln 3, 0) for sample 1, in every branch."""
    return tuple(torch.tensor([[0.0, 0.0], [LN3, 0.0]]) for _ in out.branches)


ACTION = torch.tensor([[0] * N_BR, [1] * N_BR])  # sample 0 took action 0 in every branch, sample 1 action 1
WEIGHT = torch.tensor([1.0, 3.0])  # importance weights
AUX = torch.tensor([[1.5, 1.0, NAN], [NAN, 0.0, NAN]])  # return, direction, outcome targets; NaN = none
TARGETS = Targets(
    c51=[torch.tensor([[0.5, 0.5], [1.0, 0.0]])] * N_BR,  # m
    iqn=[torch.tensor([[0.5], [-3.0]])] * N_BR,  # ŷ, one target sample
    mse=[torch.zeros(2)] * N_BR,
)
TAUS = torch.tensor([0.5])
GATES = Gates(entropy_on=torch.tensor(1.0), balance_lambda=torch.tensor(0.05))


PROBS = [torch.full((2, 2, 2), 0.5) for _ in BRANCHES]  # the full C51 softmax, uniform


def _terms(cfg: LossConfig = CFG, gates: Gates = GATES) -> dict[str, Tensor]:
    """Both halves of the loss, as the learner composes them."""
    out = _out()
    terms, _ = value_terms(out, _expected_q, ACTION, WEIGHT, TARGETS, TAUS, cfg)
    return terms | regulariser_terms(out, PROBS, AUX, cfg, gates)


def test_each_term_worked_by_hand() -> None:
    terms = _terms()
    # C51: CE = -Σ m log p = ln 2 (sample 0), -log(1/4) = 2 ln 2 (sample 1); mean(w CE) = (1 + 6) ln 2 / 2;
    # weights 1, 0.2 (magnitude), 1, 1 over 4 branches: 3.2 / 4 · 3.5 ln 2 = 2.8 ln 2.
    assert float(terms["loss_c51"]) == pytest.approx(2.8 * LN2, rel=1e-6)
    # IQN, τ = 1/2, κ = 1: δ = 0.5 -> ½ δ² · |½ - 0| = 0.0625; δ = -3 -> (3 - ½) · |½ - 1| = 1.25;
    # mean(w ρ) = (0.0625 + 3.75) / 2 = 1.90625, weight 0.25, the same in every branch.
    assert float(terms["loss_iqn"]) == pytest.approx(0.25 * 1.90625, rel=1e-6)
    # MSE: (1 - 0)², (2 - 0)²: mean(w se) = (1 + 12) / 2 = 6.5; weights 1, 4 (magnitude), 1, 1: 7 / 4 · 6.5.
    assert float(terms["loss_mse"]) == pytest.approx(7.0 / 4.0 * 6.5, rel=1e-6)
    # CQL (not importance-weighted): logsumexp(0, 0) - Q(a=0) = ln 2; logsumexp(ln 3, 0) - Q(a=1) = ln 4;
    # mean 1.5 ln 2 per branch, averaged over the branches, weight 0.5.
    assert float(terms["loss_cql"]) == pytest.approx(0.5 * 1.5 * LN2, rel=1e-6)
    # Entropy bonus: H(uniform over 2 atoms) = ln 2 everywhere; -0.1 · on · ln 2.
    assert float(terms["loss_entropy"]) == pytest.approx(-0.1 * LN2, rel=1e-6)
    # Balance: ḡ = (1, 0): λ · E · Σ ḡ² = 0.05 · 2 · 1, weight 2.
    assert float(terms["loss_balance"]) == pytest.approx(2.0 * 0.05 * 2.0, rel=1e-6)
    # Aux: return (0.5 - 1.5)² = 1 (sample 1 has none); direction CE ln 2 for both; no outcome target: 0.
    assert float(terms["aux_heads"]) == pytest.approx(1.0 + LN2, rel=1e-6)
    assert float(terms["loss_aux"]) == pytest.approx(0.5 * (1.0 + LN2), rel=1e-6)
    # TD errors: each sample's CE averaged over the branches.
    torch.testing.assert_close(terms["td_error"], torch.tensor([LN2, 2.0 * LN2]))
    assert not terms["td_error"].requires_grad


def test_total_is_the_sum_of_the_named_terms() -> None:
    terms = _terms()
    assert set(LOSS_TERMS) <= set(terms)
    want = sum(float(terms[k]) for k in LOSS_TERMS)
    assert float(total_loss(terms)) == pytest.approx(want, rel=1e-6)
    by_hand = 2.8 * LN2 + 0.25 * 1.90625 + 7.0 / 4.0 * 6.5 + 0.75 * LN2 - 0.1 * LN2 + 0.2 + 0.5 * (1.0 + LN2)
    assert float(total_loss(terms)) == pytest.approx(by_hand, rel=1e-6)


def test_switches_at_zero() -> None:
    """cql = 0 and moe_balance = 0 remove their terms; the entropy gate off removes the bonus; aux = 0
    removes the aux term from the objective but still reports the heads' loss."""
    off = CFG.model_copy(update={"cql": 0.0, "moe_balance": 0.0, "aux": 0.0})
    terms = _terms(off, Gates(entropy_on=torch.tensor(0.0), balance_lambda=torch.tensor(0.05)))
    for k in ("loss_cql", "loss_balance", "loss_entropy", "loss_aux"):
        assert float(terms[k]) == 0.0, k
    assert float(terms["aux_heads"]) == pytest.approx(1.0 + LN2, rel=1e-6)


def test_gradients_reach_only_the_taken_heads() -> None:
    out = _out()
    logits = out.branches[0].logits.requires_grad_(True)
    terms, q_BA = value_terms(out, _expected_q, ACTION, WEIGHT, TARGETS, TAUS, CFG)
    assert torch.equal(q_BA[0], _expected_q(out)[0])  # E[Q] comes back for the statistics
    total_loss(terms | regulariser_terms(out, PROBS, AUX, CFG, GATES)).backward()
    # d/dlogits of c51_w w CE / (n B): (p - m) · w / (4 · 2) at the taken action (direction, weight 1),
    # 0 at the action not taken.
    p = torch.tensor([[0.5, 0.5], [0.25, 0.75]])
    want = torch.zeros(2, 2, 2)
    want[0, 0], want[1, 1] = (p - TARGETS.c51[0]) * WEIGHT[:, None] / 8.0
    torch.testing.assert_close(logits.grad, want)
