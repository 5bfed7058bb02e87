"""PopArt: adaptive normalisation of scalar value targets that preserves the network's outputs.

van Hasselt, Guez, Hessel, Mnih & Silver (2016), *Learning values across many orders of magnitude*.
The value heads predict in normalised units ``ŷ``; the real-unit value is ``σ ŷ + μ``. The statistics
are exponential moving averages of the targets' first and second moments (rate β,
``LearnConfig.popart``)::

    μ' = (1 - β) μ + β mean(y)        ν' = (1 - β) ν + β mean(y²)        σ' = sqrt(ν' - μ'²)

*Art* updates ``μ, σ``; *Pop* then rescales the last linear layer(s) ``ŷ = W h + b`` so that every
de-normalised output is unchanged (PopArt Eq. 2–3)::

    W' = W σ / σ'        b' = (σ b + μ - μ') / σ'      =>   σ' (W' h + b') + μ' = σ (W h + b) + μ

β = 0 switches it off: ``μ = 0, σ = 1`` for ever, ``normalise`` and ``denormalise`` are the identity and
``update`` changes nothing. Everything stays on the device (buffers updated in place, no ``.item()``),
so ``update`` can run inside a compiled or graph-captured learner step.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["PopArt"]


class PopArt(nn.Module):
    """Scalar-target normaliser with buffers ``mu`` (first moment) and ``nu`` (second moment).

    ``sigma = sqrt(nu - mu²)`` clamped to ``[sigma_min, sigma_max]`` (a constant target would give 0).
    """

    mu: Tensor
    nu: Tensor

    def __init__(self, beta: float, sigma_min: float = 1e-6, sigma_max: float = 1e6) -> None:
        super().__init__()
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"PopArt beta must be in [0, 1), got {beta} (LearnConfig.popart; 0 = off)")
        if not 0.0 < sigma_min <= 1.0 <= sigma_max:
            raise ValueError(f"PopArt needs 0 < sigma_min <= 1 <= sigma_max, got {sigma_min}, {sigma_max}")
        self.beta = beta
        self.sigma_min = sigma_min
        self.sigma_max = sigma_max
        self.register_buffer("mu", torch.zeros(()))  # μ: running mean of the targets (real units)
        self.register_buffer("nu", torch.ones(()))  # ν: running mean of the squared targets

    @property
    def sigma(self) -> Tensor:
        """``σ = sqrt(ν - μ²)``, clamped: a scalar tensor."""
        return self._sigma(self.mu, self.nu)

    def _sigma(self, mu: Tensor, nu: Tensor) -> Tensor:
        return (nu - mu.square()).clamp_min(self.sigma_min**2).sqrt().clamp(self.sigma_min, self.sigma_max)

    def normalise(self, y: Tensor) -> Tensor:
        """Real units -> normalised units: ``(y - μ) / σ``."""
        return (y - self.mu) / self.sigma

    def denormalise(self, y_hat: Tensor) -> Tensor:
        """Normalised units -> real units: ``σ ŷ + μ``."""
        return y_hat * self.sigma + self.mu

    @torch.no_grad()
    def update(self, targets_B: Tensor, layers: list[nn.Linear]) -> None:
        """Move ``μ, ν`` towards the moments of ``targets_B`` (real units, ``[B]``) and rescale ``layers``.

        ``layers`` are the output layers whose outputs are in normalised units (the IQN and MSE heads):
        plain ``nn.Linear`` layers with a bias, whose weight and bias define the output exactly. Their
        weights and biases are rescaled in place so that their de-normalised outputs are the same before
        and after (optimizer state is left as it is, as in the paper).
        """
        if self.beta == 0.0:  # off: μ = 0, σ = 1 for ever
            return
        targets_B = targets_B.detach().to(self.mu.dtype)
        mu_old, sigma_old = self.mu.clone(), self.sigma
        mu_new = torch.lerp(self.mu, targets_B.mean(), self.beta)  # μ' = (1-β) μ + β mean(y)
        nu_new = torch.lerp(self.nu, targets_B.square().mean(), self.beta)  # ν' = (1-β) ν + β mean(y²)
        sigma_new = self._sigma(mu_new, nu_new)  # σ'
        missing = [layer for layer in layers if layer.bias is None]
        if missing:
            raise ValueError(
                f"PopArt needs output layers with a bias (it absorbs the shift of mu): {missing[0]}"
            )
        if layers:
            # Multi-tensor products over all the layers at once (two kernels instead of two per layer):
            # W' = W σ / σ';  b' = (σ b + μ - μ') / σ' = b σ / σ' + (μ - μ') / σ'.
            ratio, shift = sigma_old / sigma_new, (mu_old - mu_new) / sigma_new
            weights, biases = [la.weight for la in layers], [la.bias for la in layers]
            torch._foreach_mul_(weights, ratio.to(weights[0].dtype))
            torch._foreach_mul_(biases, ratio.to(biases[0].dtype))
            for b in biases:  # (_foreach_add_ of a 0-dim tensor reads it back to the host: no capture)
                b.add_(shift.to(b.dtype))
        self.mu.copy_(mu_new)
        self.nu.copy_(nu_new)
