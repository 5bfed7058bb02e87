"""Mixture-of-experts maths: the mixture and its gradients, the gate entropy, the adaptive load loss."""

from __future__ import annotations

import math

import pytest
import torch

from foxhunt.agent.balance import adaptive_lambda, gate_entropy, load_loss, mix_experts

K = 8


# --- adaptive lambda (docs/design.md §6) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("entropy", "expected"),
    [(1.381, 0.0146), (0.746, 0.0539), (math.log(K), 0.01), (0.7 * math.log(K), 0.01), (0.0, 0.10)],
)
def test_adaptive_lambda_reproduces_the_formula(entropy: float, expected: float) -> None:
    assert round(adaptive_lambda(entropy, K), 4) == expected
    as_tensor = adaptive_lambda(torch.tensor(entropy, dtype=torch.float64), K)
    assert isinstance(as_tensor, torch.Tensor)
    assert round(as_tensor.item(), 4) == expected


def test_adaptive_lambda_values_to_more_digits() -> None:
    target = 0.7 * math.log(8)  # 1.45561...
    assert adaptive_lambda(1.381, K) == pytest.approx(0.01 + 0.09 * (target - 1.381) / target, rel=1e-12)
    assert adaptive_lambda(1.381, K) == pytest.approx(0.014613, abs=1e-6)
    assert adaptive_lambda(0.746, K) == pytest.approx(0.053875, abs=1e-6)
    # monotone: less entropy -> more balancing; one expert -> the floor
    hs = torch.linspace(0.0, math.log(K), 50)
    lams = adaptive_lambda(hs, K)
    assert (lams.diff() <= 0).all()
    assert adaptive_lambda(0.0, 1) == 0.01
    assert adaptive_lambda(torch.tensor(0.3), 1).item() == pytest.approx(0.01)


def test_uniform_gate_gives_the_floor_lambda() -> None:
    gate = torch.softmax(torch.zeros(32, K), -1)  # the zero-initialised gate
    h = gate_entropy(gate)
    assert h.item() == pytest.approx(math.log(K))
    assert adaptive_lambda(h, K).item() == pytest.approx(0.01)


# --- gate entropy --------------------------------------------------------------------------------------


def test_gate_entropy_reads_utilisation_not_per_sample_sharpness() -> None:
    # sharp but balanced: sample b goes wholly to expert b mod K -> utilisation uniform -> ln K
    balanced = torch.eye(K).repeat(4, 1)  # [32, K]
    assert gate_entropy(balanced).item() == pytest.approx(math.log(K))
    # collapsed: every sample to expert 3 -> 0
    collapsed = torch.zeros(32, K)
    collapsed[:, 3] = 1.0
    assert gate_entropy(collapsed).item() == pytest.approx(0.0, abs=1e-9)
    # hand case: utilisation [0.5, 0.5, 0, ...] -> ln 2
    half = torch.zeros(2, K)
    half[0, 0] = half[1, 1] = 1.0
    assert gate_entropy(half).item() == pytest.approx(math.log(2))


# --- load loss ---------------------------------------------------------------------------------------


def test_load_loss_hand_value_and_extremes() -> None:
    # utilisation [0.5, 0.25, 0.25], λ = 0.1: 0.1 · 3 · (0.25 + 0.0625 + 0.0625) = 0.1125
    g = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]])
    assert load_loss(g, 0.1).item() == pytest.approx(0.1125)
    lam = 0.05
    uniform = torch.full((16, K), 1.0 / K)
    assert load_loss(uniform, lam).item() == pytest.approx(lam)  # the minimum: λ K (1/K²) K = λ
    collapsed = torch.zeros(16, K)
    collapsed[:, 0] = 1.0
    assert load_loss(collapsed, lam).item() == pytest.approx(lam * K)  # the maximum


def test_load_loss_is_minimal_for_a_uniform_gate() -> None:
    g = torch.Generator().manual_seed(0)
    lam = torch.tensor(0.03)
    uniform_loss = load_loss(torch.full((64, K), 1.0 / K), lam)
    for scale in (0.1, 1.0, 5.0):
        gates = torch.softmax(scale * torch.randn(200, 64, K, generator=g), -1)
        losses = torch.stack([load_loss(gate, lam) for gate in gates])
        assert (losses > uniform_loss).all()
    # and it is stationary there: the gradient with respect to the gate logits vanishes at the uniform gate
    logits = torch.zeros(64, K, requires_grad=True)
    load_loss(torch.softmax(logits, -1), lam).backward()
    assert logits.grad.abs().max().item() < 1e-9


# --- mixture and gradients ---------------------------------------------------------------------------


def test_mix_experts_matches_a_loop() -> None:
    g = torch.Generator().manual_seed(1)
    gate = torch.softmax(torch.randn(5, K, generator=g), -1)
    experts = torch.randn(5, K, 7, generator=g)
    out = mix_experts(gate, experts)
    assert out.shape == (5, 7)
    for b in range(5):
        expected = sum(gate[b, k] * experts[b, k] for k in range(K))
        assert torch.allclose(out[b], expected, atol=1e-6)
    # a one-hot gate selects its expert; a uniform gate averages
    assert torch.equal(mix_experts(torch.eye(K)[[2] * 5], experts), experts[:, 2])
    assert torch.allclose(mix_experts(torch.full((5, K), 1 / K), experts), experts.mean(1), atol=1e-6)


def test_mixture_and_gate_gradients_against_finite_differences(one_thread: None) -> None:
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(4, K, generator=g, dtype=torch.float64, requires_grad=True)
    experts = torch.randn(4, K, 6, generator=g, dtype=torch.float64, requires_grad=True)

    def mixture(logits_BK: torch.Tensor, experts_BKH: torch.Tensor) -> torch.Tensor:
        return mix_experts(torch.softmax(logits_BK, -1), experts_BKH)

    assert torch.autograd.gradcheck(mixture, (logits, experts), eps=1e-6, atol=1e-8)

    def balance(logits_BK: torch.Tensor) -> torch.Tensor:
        gate = torch.softmax(logits_BK, -1)
        return load_loss(gate, adaptive_lambda(gate_entropy(gate), K))

    assert torch.autograd.gradcheck(balance, (logits,), eps=1e-6, atol=1e-8)
