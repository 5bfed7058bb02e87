"""Distributional RL maths: the C51 support and projection, the IQN quantile-Huber loss, inverse-CDF samples.

Pure batched functions (docs/design.md §6). Device and dtype come from the inputs; no ``.item()``, no host
copy, no data-dependent Python branch, so they can sit inside a ``torch.compile``-d ``update`` or ``policy``.

Shape letters: ``B`` batch, ``A`` actions of a branch, ``K`` C51 atoms, ``Q`` IQN quantile fractions of
the prediction, ``T`` target samples; ``...`` any leading shape.

References
----------
* C51: Bellemare, Dabney & Munos (2017), *A Distributional Perspective on Reinforcement Learning*
  (Eq. 7 is the projection ``Φ T z``); the dense form follows Dopamine's ``project_distribution``.
* IQN: Dabney, Ostrovski, Silver & Munos (2018), *Implicit Quantile Networks* (Eq. 3 and the loss
  below it).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "UTILISATION_SHARE",
    "atom_entropy",
    "atom_utilisation",
    "c51_cross_entropy",
    "expectation",
    "project_c51",
    "quantile_huber",
    "sample_c51",
    "sample_quantiles",
    "support",
]

UTILISATION_SHARE = 0.1
"""An atom counts as *used* when its batch-mean probability exceeds ``UTILISATION_SHARE / K`` (a tenth
of the uniform distribution's mass per atom); see :func:`atom_utilisation`."""

_LOG_FLOOR = 1e-12  # p below this contributes p·ln(1e-12) ≈ 0 to the entropy and keeps its gradient finite


def support(v_max: Tensor, atoms: int) -> Tensor:
    """The C51 atoms ``z_i = v_max · (2i / (K - 1) - 1)``, ``i = 0 .. K-1``: ``[K]``, on ``v_max``'s device.

    Built from integer offsets so the grid is exactly symmetric (``z_i == -z_{K-1-i}``, the middle atom
    of an odd ``K`` is exactly 0), which ``torch.linspace`` does not guarantee in float32.
    """
    if atoms < 2:
        raise ValueError(f"a C51 support needs at least 2 atoms, got atoms={atoms}")
    half = (atoms - 1) / 2
    offsets_K = torch.arange(atoms, device=v_max.device, dtype=v_max.dtype) - half  # [K] -half .. half
    return v_max * (offsets_K / half)  # [K]


def project_c51(probs_BK: Tensor, rewards_B: Tensor, discounts_B: Tensor, z_K: Tensor) -> Tensor:
    """Project the distribution of ``r + d·Z`` back onto the support ``z`` (C51 Eq. 7, Φ T̂ Z): ``[B, K]``.

    ``probs_BK[b, j]`` is the probability of atom ``z_j`` of the (next-state, chosen-action) distribution;
    ``discounts_B`` already holds ``γ^n`` and the terminal mask (0 when the episode ended), so a
    discount of 0 projects a point mass at the reward. The target atoms ``r + d·z_j`` are clipped to
    ``[z_0, z_{K-1}]`` and each one's mass is split between its two neighbouring atoms in proportion
    to proximity::

        (Φ T̂ Z)_i = Σ_j clamp(1 - |clamp(r + d z_j, z_0, z_{K-1}) - z_i| / Δz, 0, 1) · p_j

    Computed in scatter form, ``O(B·K)``: target atom ``j`` sits at ``b_j = (T̂ z_j - z_0) / Δz`` atoms
    from the bottom, between ``l_j = floor(b_j)`` (kept ``<= K-2``) and ``l_j + 1``, the only atoms
    where its term of the sum above is non-zero; those two terms are scatter-added. Dopamine's dense
    form builds ``B·K²`` terms: with the target softmax and the cross-entropy, at 16,384 x 51 on the
    H200, dense 0.86 ms eager and 0.18 ms compiled, scatter 0.31 and 0.11 ms (bench/kernels.py). The
    projection conserves mass (rows of ``probs_BK`` that sum to 1 give rows that sum to 1) and, for
    targets inside the support, the mean.
    On CUDA the two scatter-adds accumulate in an unspecified order (float32 rounding, no more).
    """
    atoms = z_K.shape[0]
    delta_z = z_K[1] - z_K[0]  # Δz in Eq. 7 (uniform support)
    target_BK = rewards_B[:, None] + discounts_B[:, None] * z_K[None, :]  # T̂ z_j = r + d z_j   [B, K(j)]
    target_BK = target_BK.clamp(z_K[0], z_K[-1])  # [V_min, V_max] clip
    position_BK = (target_BK - z_K[0]) / delta_z  # b_j in [0, K-1]   [B, K(j)]
    # l_j, kept <= K-2 so that l_j + 1 is an atom (b_j = K-1 then puts all its mass on l_j + 1)
    lower_BK = position_BK.floor().clamp(0, atoms - 2).to(torch.int64)
    upper_BK = lower_BK + 1
    # The dense formula's two terms, computed from the atoms themselves (not from b_j - l_j) so that a
    # target exactly on an atom puts exactly all of its mass there.
    lower_w_BK = (1.0 - (target_BK - z_K[lower_BK]).abs() / delta_z).clamp(0.0, 1.0)
    upper_w_BK = (1.0 - (target_BK - z_K[upper_BK]).abs() / delta_z).clamp(0.0, 1.0)
    out_BK = torch.zeros_like(probs_BK)
    out_BK.scatter_add_(1, lower_BK, probs_BK * lower_w_BK)  # [B, K(i)]
    out_BK.scatter_add_(1, upper_BK, probs_BK * upper_w_BK)
    return out_BK


def c51_cross_entropy(logits_BK: Tensor, target_BK: Tensor) -> Tensor:
    """Cross-entropy ``-Σ_i m_i log softmax(logits)_i`` of the prediction against a target: ``[B]``.

    ``target_BK`` is the projected target distribution ``m`` (:func:`project_c51`); the caller detaches
    it (it comes from the target network). Equals ``KL(m || p) + H(m)``: same gradient as the KL.
    """
    return -(target_BK * torch.log_softmax(logits_BK, dim=-1)).sum(-1)  # [B]


def quantile_huber(pred_BQ: Tensor, target_BT: Tensor, taus_Q: Tensor, kappa: float) -> Tensor:
    """The IQN quantile-Huber loss per sample: ``[B]``.

    With ``δ_ij = target_j - pred_i`` (TD error of quantile ``i`` against target sample ``j``)::

        L_κ(δ)     = ½ δ²              if |δ| <= κ,   κ (|δ| - ½ κ) otherwise    (Huber)
        ρ^κ_τ(δ)   = |τ - 1{δ < 0}| · L_κ(δ) / κ                                 (IQN Eq. 3)
        loss       = Σ_i (1/T) Σ_j ρ^κ_{τ_i}(δ_ij)                               (IQN, below Eq. 3)

    i.e. the *sum* over the predicted fractions ``i`` and the *mean* over the ``T`` target samples, as
    in the IQN paper (``N`` predicted, ``N'`` target samples) and Dopamine. ``taus_Q`` are the fractions
    of ``pred_BQ``'s columns; the caller detaches the targets. Batch reduction is left to the caller
    (mean, or importance-weighted mean under prioritised replay).
    """
    delta_BQT = target_BT[:, None, :] - pred_BQ[:, :, None]  # δ_ij = θ'_j - θ_i   [B, Q, T]
    abs_delta = delta_BQT.abs()
    huber_BQT = torch.where(
        abs_delta <= kappa, 0.5 * delta_BQT.square(), kappa * (abs_delta - 0.5 * kappa)
    )  # L_κ(δ)   [B, Q, T]
    below_BQT = (delta_BQT.detach() < 0).to(pred_BQ.dtype)  # 1{δ < 0} (no gradient through the indicator)
    weight_BQT = (taus_Q[None, :, None] - below_BQT).abs()  # |τ_i - 1{δ_ij < 0}|   [B, Q, T]
    rho_BQT = weight_BQT * huber_BQT / kappa  # ρ^κ_τ(δ)   [B, Q, T]
    return rho_BQT.mean(dim=2).sum(dim=1)  # mean over targets j, sum over fractions i   [B]


def expectation(probs_K: Tensor, z_K: Tensor) -> Tensor:
    """``E[Z] = Σ_i p_i z_i`` over the last axis: ``probs [..., K] -> [...]``."""
    return (probs_K * z_K).sum(-1)


def sample_c51(probs_K: Tensor, z_K: Tensor, u: Tensor) -> Tensor:
    """Inverse-CDF sample of the categorical distribution: ``z_k`` with ``F_{k-1} <= u < F_k``: ``[...]``.

    ``probs [..., K]`` and ``u [...]`` (uniform on ``[0, 1)``) broadcast against each other; ``F`` is the
    cumulative sum of ``probs``. Atoms of zero mass are never returned; a ``u`` at or above the
    rounded-down total mass returns the last atom.
    """
    cdf_K = probs_K.cumsum(-1)  # F_k   [..., K]
    index = (cdf_K <= u[..., None]).sum(-1)  # k = #{F_k <= u}, the first atom whose F exceeds u   [...]
    index = index.clamp(max=z_K.shape[-1] - 1)  # float rounding can leave F_{K-1} < 1 <= u
    return z_K[index]  # [...]


def sample_quantiles(q_Q: Tensor, taus_Q: Tensor, u: Tensor) -> Tensor:
    """Inverse-CDF sample through the quantiles: piecewise linear through ``(τ_i, q_i)``, flat outside.

    ``q [..., Q]`` holds the values at the fractions ``taus [Q]`` (increasing); ``u [...]`` (uniform on
    ``[0, 1)``) broadcasts against ``q[..., 0]``. ``F^{-1}(u) = q_0`` for ``u <= τ_0``, ``q_{Q-1}`` for
    ``u >= τ_{Q-1}``, and the linear interpolation between the two neighbouring fractions in between.
    The predicted quantiles are sorted first (the monotone rearrangement of crossed quantiles), so the
    result is a proper inverse CDF even when the IQN head's outputs cross. Returns ``[...]``.
    """
    q_sorted = q_Q.sort(dim=-1).values  # [..., Q]
    n = taus_Q.shape[0]
    if n == 1:  # a single fraction: a point mass at q_0
        return q_sorted[..., 0].expand(torch.broadcast_shapes(q_sorted.shape[:-1], u.shape))
    q_sorted, u = torch.broadcast_tensors(q_sorted, u[..., None])  # [..., Q] both
    u = u[..., 0]  # [...]
    above = (taus_Q <= u[..., None]).sum(-1)  # #{τ_i <= u} in [0, Q]   [...]
    lo = (above - 1).clamp(0, n - 2)  # left end of the segment (the first or last segment outside)
    hi = lo + 1
    tau_lo, tau_hi = taus_Q[lo], taus_Q[hi]  # [...]
    q_lo = q_sorted.gather(-1, lo[..., None])[..., 0]  # [...]
    q_hi = q_sorted.gather(-1, hi[..., None])[..., 0]
    w = ((u - tau_lo) / (tau_hi - tau_lo)).clamp(0.0, 1.0)  # 0 left of τ_0, 1 right of τ_{Q-1}: flat ends
    return q_lo + w * (q_hi - q_lo)  # [...]


def atom_utilisation(probs_BAK: Tensor) -> Tensor:
    """Share of atoms in use: a scalar in ``[0, 1]``.

    Rule: average the probabilities over the batch (axis 0), giving one distribution per action
    (``[A, K]``, or ``[K]`` for a ``[B, K]`` input); an atom is *used* when that mean probability exceeds
    ``UTILISATION_SHARE / K``; the result is the share of used (action, atom) pairs. A support much
    wider than the returns puts all mass on a few central atoms and scores low; the learner's
    atom-entropy bonus acts while this is under ``LossConfig.atom_utilisation_floor``.
    """
    k = probs_BAK.shape[-1]
    mean_AK = probs_BAK.mean(dim=0)  # batch-mean distribution per action   [A, K]
    return (mean_AK > UTILISATION_SHARE / k).to(probs_BAK.dtype).mean()  # []


def atom_entropy(probs_K: Tensor) -> Tensor:
    """Entropy ``H = -Σ_i p_i ln p_i`` (nats) over the last axis: ``[..., K] -> [...]``.

    Zero-probability atoms contribute 0; the log is floored so the gradient stays finite.
    """
    return -(probs_K * probs_K.clamp_min(_LOG_FLOOR).log()).sum(-1)
