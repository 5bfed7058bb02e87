"""PopArt: the statistics follow the targets while the rescaled layers' real-unit outputs stay the same."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from foxhunt.agent.popart import PopArt


def _heads(dtype: torch.dtype = torch.float64) -> tuple[nn.Linear, nn.Linear, torch.Tensor]:
    torch.manual_seed(0)
    iqn, mse = nn.Linear(16, 5).to(dtype), nn.Linear(16, 1).to(dtype)
    h = torch.randn(32, 16, dtype=dtype)
    return iqn, mse, h


def test_update_preserves_the_denormalised_outputs() -> None:
    iqn, mse, h = _heads()
    popart = PopArt(beta=0.1).to(torch.float64)
    g = torch.Generator().manual_seed(1)
    for step in range(20):
        with torch.no_grad():
            before_iqn = popart.denormalise(iqn(h))
            before_mse = popart.denormalise(mse(h))
        mu, sigma = popart.mu.clone(), popart.sigma.clone()
        targets = 3.0 + 0.02 * step + 0.1 * torch.randn(64, generator=g, dtype=torch.float64)  # real units
        popart.update(targets, [iqn, mse])
        assert not torch.equal(popart.mu, mu)  # Art: the statistics moved ...
        assert not torch.equal(popart.sigma, sigma)
        with torch.no_grad():  # ... Pop: every output in real units is unchanged
            assert torch.allclose(popart.denormalise(iqn(h)), before_iqn, rtol=1e-10, atol=1e-10)
            assert torch.allclose(popart.denormalise(mse(h)), before_mse, rtol=1e-10, atol=1e-10)
    # the normalised outputs did change (the layers were really rescaled)
    iqn0, _, _ = _heads()
    assert not torch.allclose(iqn0(h), iqn(h))


def test_update_preserves_outputs_in_float32() -> None:
    iqn, mse, h = _heads(torch.float32)
    popart = PopArt(beta=0.3)
    before = popart.denormalise(mse(h)).detach()
    popart.update(torch.tensor([0.01, -0.02, 0.005, 0.0]), [iqn, mse])
    assert popart.sigma.item() < 1.0
    assert torch.allclose(popart.denormalise(mse(h)).detach(), before, rtol=1e-5, atol=1e-6)


def test_statistics_hand_values_and_convergence() -> None:
    popart = PopArt(beta=0.5).to(torch.float64)
    layer = nn.Linear(2, 1).to(torch.float64)
    popart.update(torch.tensor([1.0, 3.0], dtype=torch.float64), [layer])
    # μ = 0.5·0 + 0.5·2 = 1;  ν = 0.5·1 + 0.5·5 = 3;  σ = sqrt(3 - 1) = sqrt 2
    assert popart.mu.item() == pytest.approx(1.0)
    assert popart.nu.item() == pytest.approx(3.0)
    assert popart.sigma.item() == pytest.approx(math.sqrt(2.0))
    x = torch.tensor([1.0, 1 + math.sqrt(2.0)], dtype=torch.float64)
    assert torch.allclose(popart.normalise(x), torch.tensor([0.0, 1.0], dtype=torch.float64))
    assert torch.allclose(popart.denormalise(popart.normalise(x)), x)
    # many updates from a fixed distribution: μ, σ approach its mean and standard deviation
    g = torch.Generator().manual_seed(2)
    slow = PopArt(beta=0.05).to(torch.float64)
    for _ in range(400):
        slow.update(0.004 + 0.01 * torch.randn(256, generator=g, dtype=torch.float64), [layer])
    assert slow.mu.item() == pytest.approx(0.004, abs=5e-4)
    assert slow.sigma.item() == pytest.approx(0.01, rel=0.05)


def test_beta_zero_is_the_identity() -> None:
    iqn, mse, h = _heads()
    w, b = iqn.weight.clone(), iqn.bias.clone()
    popart = PopArt(beta=0.0).to(torch.float64)
    x = torch.randn(10, dtype=torch.float64)
    popart.update(100.0 + 50.0 * x, [iqn, mse])
    assert popart.mu.item() == 0.0
    assert popart.sigma.item() == 1.0
    assert torch.equal(popart.normalise(x), x)
    assert torch.equal(popart.denormalise(x), x)
    assert torch.equal(iqn.weight, w)
    assert torch.equal(iqn.bias, b)


def test_constant_targets_keep_sigma_positive_and_outputs_preserved() -> None:
    _, mse, h = _heads()
    popart = PopArt(beta=0.9).to(torch.float64)
    for _ in range(30):
        before = popart.denormalise(mse(h)).detach()
        popart.update(torch.full((8,), 2.0, dtype=torch.float64), [mse])
        assert torch.allclose(popart.denormalise(mse(h)).detach(), before, rtol=1e-8, atol=1e-8)
    assert popart.sigma.item() >= popart.sigma_min
    assert torch.isfinite(mse.weight).all()


def test_bad_arguments_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="beta"):
        PopArt(beta=1.0)
    with pytest.raises(ValueError, match="bias"):
        PopArt(beta=0.1).update(torch.ones(3), [nn.Linear(2, 1, bias=False)])


def test_state_dict_carries_the_statistics() -> None:
    popart = PopArt(beta=0.2)
    popart.update(torch.tensor([1.0, 2.0]), [nn.Linear(2, 1)])
    other = PopArt(beta=0.2)
    other.load_state_dict(popart.state_dict())
    assert torch.equal(other.mu, popart.mu)
    assert torch.equal(other.sigma, popart.sigma)
