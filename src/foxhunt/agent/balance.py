"""Mixture-of-experts maths: the gate mixture, the gate entropy, the adaptive load-balance loss
(docs/design.md §6).

Pure batched functions; ``B`` batch, ``K`` experts, ``H`` expert output width. Device and dtype come
from the inputs; no ``.item()`` or host copy.

The load-balance loss ``λ·K·Σ_k ḡ_k²`` (``ḡ_k = mean_b g_bk``, the utilisation of expert ``k``) is
minimal, equal to ``λ``, for a uniformly used gate (Cauchy–Schwarz: ``Σ_k ḡ_k² >= 1/K`` when
``Σ_k ḡ_k = 1``) and grows to ``λ·K`` when one expert takes every sample. Its weight λ rises from 0.01
to 0.10 as the gate entropy EMA falls below 70% of its maximum ``ln K``::

    λ = 0.01 + 0.09 · max(0, 0.7 ln K - H_ema) / (0.7 ln K)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "ENTROPY_TARGET_SHARE",
    "LAMBDA_MAX",
    "LAMBDA_MIN",
    "adaptive_lambda",
    "gate_entropy",
    "load_loss",
    "mix_experts",
]

LAMBDA_MIN = 0.01
"""λ while the gate entropy is at or above its target."""
LAMBDA_MAX = 0.10
"""λ when the gate has collapsed onto one expert (entropy 0)."""
ENTROPY_TARGET_SHARE = 0.7
"""The entropy target as a share of the maximum ``ln K``."""

_LOG_FLOOR = 1e-12


def mix_experts(gate_BK: Tensor, experts_BKH: Tensor) -> Tensor:
    """The mixture ``y_b = Σ_k g_bk · e_bk``: gate ``[B, K]`` (rows on the simplex), experts ``[B, K, H]``.

    Returns ``[B, H]``.
    """
    return torch.einsum("bk,bkh->bh", gate_BK, experts_BKH)  # [B, H]


def gate_entropy(g_BK: Tensor) -> Tensor:
    """Entropy (nats) of the expert utilisation ``ḡ_k = mean_b g_bk``: a scalar in ``[0, ln K]``.

    The entropy of the *batch-mean* gate, not the mean of per-sample entropies: a gate that routes
    each sample sharply to one expert but spreads the samples over all experts is healthy
    (specialised and balanced) and scores ``ln K``; a gate that sends every sample to the same expert
    scores 0. This is the quantity the load loss acts on (``ḡ``) and the one a health reading of the
    diagnostics looks at (no expert under 2% or over 80% utilisation, docs/design.md §6).
    """
    mean_K = g_BK.mean(dim=0)  # ḡ_k   [K]
    return -(mean_K * mean_K.clamp_min(_LOG_FLOOR).log()).sum()  # []


def adaptive_lambda(h_ema: Tensor | float, k: int) -> Tensor | float:
    """``λ = 0.01 + 0.09 · max(0, 0.7 ln K - H_ema) / (0.7 ln K)`` for ``K = k`` experts.

    Takes and returns a tensor (on its device, no host copy) or a float. With one expert there is
    nothing to balance and λ is ``LAMBDA_MIN``. Examples (K = 8, target 0.7 ln 8 = 1.4556): H = 1.381
    gives 0.0146, H = 0.746 gives 0.0539, a uniform gate (H = ln 8) gives 0.01.
    """
    if k < 1:
        raise ValueError(f"adaptive_lambda needs k >= 1 experts, got k={k}")
    target = ENTROPY_TARGET_SHARE * math.log(k)  # 0.7 ln K
    if target == 0.0:  # K = 1
        return h_ema * 0.0 + LAMBDA_MIN if isinstance(h_ema, Tensor) else LAMBDA_MIN
    if isinstance(h_ema, Tensor):
        shortfall = (target - h_ema).clamp_min(0.0)  # max(0, 0.7 ln K - H)
    else:
        shortfall = max(0.0, target - h_ema)
    return LAMBDA_MIN + (LAMBDA_MAX - LAMBDA_MIN) * shortfall / target


def load_loss(g_BK: Tensor, lam: Tensor | float) -> Tensor:
    """Load-balance loss ``λ · K · Σ_k (mean_b g_bk)²``: a scalar, λ for a uniform gate (its minimum)."""
    k = g_BK.shape[-1]
    mean_K = g_BK.mean(dim=0)  # ḡ_k   [K]
    return lam * k * mean_K.square().sum()  # []
