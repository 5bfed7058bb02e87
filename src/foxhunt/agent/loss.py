"""The learner's loss: named loss terms from the online network's outputs on ``s`` and precomputed targets.

TorchRL's ``LossModule`` convention (``DQNLoss``, ``DistributionalDQNLoss``): :func:`value_terms` (the
online network's value heads on ``s`` against the precomputed targets, and CQL) and
:func:`regulariser_terms` (the regularisers that the learner's adaptive signals switch, and the
auxiliary heads) return dicts whose ``loss_*``
entries are summed as they are into the objective (:func:`total_loss`), beside diagnostics that are not
(``td_error``, ``aux_heads``). The learner updates its signals between the two, from the same forward.
The target network, support growth, PopArt and the soft update stay outside
(:mod:`foxhunt.agent.learner` composes them), so this module is pure functions of tensors: no network,
no optimiser, no state, nothing read back to the host.

Per branch ``b`` (``BRANCHES`` order, ``n`` branches), action ``a_b`` of the batch, importance weights
``w`` (1 for uniform replay), every term a weighted batch mean averaged over the branches::

    loss_c51     = Σ_b c51_b · mean(w · CE(m_b, p(s, a_b))) / n          (m_b the projected target)
    loss_iqn     = Σ_b iqn · mean(w · ρ^κ(θ(s, a_b), ŷ_b)) / n            (quantile-Huber, ŷ normalised)
    loss_mse     = Σ_b mse_b · mean(w · (Q_mse(s, a_b) - ŷ_b)²) / n
    loss_cql     = cql · Σ_b mean(logsumexp_a Q_b(s, a) - Q_b(s, a_b)) / n           (Kumar et al. 2020)
    loss_entropy = -atom_entropy · on · mean_b mean(H(p_b(s, ·)))           (on: utilisation under floor)
    loss_balance = moe_balance · λ · E · Σ_e ḡ_e²                           (:func:`balance.load_loss`)
    loss_aux     = aux · (MSE(next return) + CE(direction) + CE(outcome))   (masked: NaN = no target)
    td_error     = Σ_b CE(m_b, p(s, a_b)) / n   [B], the new priorities (no gradient; a branch whose C51
                   weight is 0 contributes its quantile loss instead)

The magnitude branch has its own C51 and MSE weights (``magnitude_c51``, ``magnitude_mse``).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from foxhunt.agent.balance import load_loss
from foxhunt.agent.config import LossConfig
from foxhunt.agent.distributional import atom_entropy, c51_cross_entropy, quantile_huber
from foxhunt.agent.network import NetOut
from foxhunt.domain.actions import BRANCHES

__all__ = [
    "LOSS_TERMS",
    "Gates",
    "Targets",
    "aux_loss",
    "regulariser_terms",
    "total_loss",
    "value_terms",
]

LOSS_TERMS = (
    "loss_c51",
    "loss_iqn",
    "loss_mse",
    "loss_cql",
    "loss_entropy",
    "loss_balance",
    "loss_aux",
)
"""The terms of the objective, in the order :func:`total_loss` adds them."""

_MAGNITUDE = BRANCHES.index("magnitude")


class Targets(NamedTuple):
    """What the online heads learn, per branch (``BRANCHES`` order), at the batch's actions."""

    c51: Sequence[Tensor]  # m_b [B, K]: the target distribution projected onto the support
    iqn: Sequence[Tensor]  # ŷ_b [B, T]: IQN targets, PopArt-normalised
    mse: Sequence[Tensor]  # ŷ_b [B]: MSE targets, PopArt-normalised


class Gates(NamedTuple):
    """The adaptive regularisers' settings for this update (from the learner's signals)."""

    entropy_on: Tensor  # [] 1.0 while the atom-utilisation EMA is under its floor, else 0.0
    balance_lambda: Tensor  # [] λ of the MoE load-balance loss (:func:`balance.adaptive_lambda`)


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over the rows where ``mask`` is 1 (0 when none is)."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def aux_loss(out: NetOut, aux_B3: Tensor) -> Tensor:
    """The auxiliary heads' loss ``MSE(return) + CE(direction) + CE(outcome)``, unweighted: ``[]``.

    ``aux_B3`` holds the next return, the direction class (0 down, 1 up) and the outcome class (profit,
    stop, timeout); a NaN is no target, and each part is a mean over its own present targets.
    """
    ret, direction, outcome = aux_B3.unbind(dim=1)
    ok_r, ok_d, ok_o = (~torch.isnan(x) for x in (ret, direction, outcome))
    l_ret = _masked_mean((out.aux_return - torch.nan_to_num(ret)).pow(2), ok_r.float())
    d_idx = torch.nan_to_num(direction).long().clamp(0, 1)
    l_dir = _masked_mean(F.cross_entropy(out.aux_direction, d_idx, reduction="none"), ok_d.float())
    o_idx = torch.nan_to_num(outcome).long().clamp(0, out.aux_outcome.shape[1] - 1)
    l_out = _masked_mean(F.cross_entropy(out.aux_outcome, o_idx, reduction="none"), ok_o.float())
    return l_ret + l_dir + l_out


def value_terms(
    out: NetOut,
    expected_q: Callable[[NetOut], Sequence[Tensor]],
    action_BN: Tensor,
    weight_B: Tensor,
    targets: Targets,
    taus_Q: Tensor,
    cfg: LossConfig,
) -> tuple[dict[str, Tensor], Sequence[Tensor]]:
    """``loss_c51``, ``loss_iqn``, ``loss_mse`` (the value heads of ``out`` at the batch's actions
    ``action_BN`` [B, n] against ``targets``, importance-weighted by ``weight_B``), ``loss_cql`` and
    ``td_error`` ``[B]``; and E[Q] per branch ``[B, A_b]`` (``expected_q(out)``, real units), which CQL
    reads and the learner reports. ``taus_Q`` are the IQN fractions of the quantile heads.

    In this order on purpose (each branch's heads read at its actions and its losses, then E[Q]; the
    learner takes the C51 softmax after): autograd adds the gradient contributions of a tensor's
    consumers in the reverse order of their creation, so the order of the logits' three readings fixes
    the rounding of their gradient's sum, and Inductor's fusion follows the program's order (reading
    every branch's heads first costs the compiled update 5 more kernels). This order keeps a run's
    numbers the same bit for bit as they have been and the compiled update's kernels as few.
    """
    rows_B = torch.arange(weight_B.shape[0], device=weight_B.device)
    n_br = len(out.branches)
    zero = torch.zeros((), device=weight_B.device)
    l_c51, l_iqn, l_mse, td_error_B = zero, zero, zero, torch.zeros_like(weight_B)
    for i, b in enumerate(out.branches):
        a_B = action_BN[:, i]
        ce_B = c51_cross_entropy(b.logits[rows_B, a_B], targets.c51[i])
        qh_B = quantile_huber(b.quantiles[rows_B, a_B], targets.iqn[i], taus_Q, cfg.huber_kappa)
        se_B = (b.q_mse[rows_B, a_B] - targets.mse[i]).pow(2)
        c51_w, mse_w = cfg.c51_weight(BRANCHES[i]), (cfg.magnitude_mse if i == _MAGNITUDE else cfg.mse)
        l_c51 = l_c51 + c51_w * (weight_B * ce_B).mean() / n_br
        l_iqn = l_iqn + cfg.iqn * (weight_B * qh_B).mean() / n_br
        l_mse = l_mse + mse_w * (weight_B * se_B).mean() / n_br
        # The priority is the trained head's error: a branch whose C51 weight is 0 (an IQN-only ablation)
        # is prioritised by its quantile loss, not by an untrained head's cross-entropy.
        td_error_B = td_error_B + (ce_B if c51_w > 0 else qh_B).detach() / n_br
    q_BA = expected_q(out)
    l_cql = zero  # off (cql = 0): not even computed
    if cfg.cql > 0:
        # CQL (Kumar et al. 2020, Eq. 4 with the logsumexp regulariser), unweighted: pushes down the Q
        # of the actions the data did not take.
        for i, q in enumerate(q_BA):
            l_cql = l_cql + (torch.logsumexp(q, dim=1) - q[rows_B, action_BN[:, i]]).mean() / n_br
        l_cql = cfg.cql * l_cql
    terms = {"loss_c51": l_c51, "loss_iqn": l_iqn, "loss_mse": l_mse, "loss_cql": l_cql}
    return {**terms, "td_error": td_error_B}, q_BA


def regulariser_terms(
    out: NetOut, probs_BAK: Sequence[Tensor], aux_B3: Tensor, cfg: LossConfig, gates: Gates
) -> dict[str, Tensor]:
    """``loss_entropy`` (the atom-entropy bonus while ``gates.entropy_on``), ``loss_balance`` (the MoE
    load balance at ``gates.balance_lambda``), ``loss_aux`` and ``aux_heads`` (the auxiliary loss
    before its weight, reported even when ``aux = 0`` leaves the heads untrained).

    ``probs_BAK`` is the online C51 softmax per branch, ``aux_B3`` the batch's auxiliary targets.
    """
    entropy = torch.stack([atom_entropy(p).mean() for p in probs_BAK]).mean()  # mean_b mean H(p_b)
    l_aux = aux_loss(out, aux_B3)
    return {
        "loss_entropy": -cfg.atom_entropy * gates.entropy_on * entropy,
        "loss_balance": cfg.moe_balance * load_loss(out.gate, gates.balance_lambda),
        "loss_aux": cfg.aux * l_aux,
        "aux_heads": l_aux,
    }


def total_loss(terms: dict[str, Tensor]) -> Tensor:
    """The objective: the :data:`LOSS_TERMS` of ``terms`` added in that order ``[]``."""
    return functools.reduce(operator.add, (terms[k] for k in LOSS_TERMS))
