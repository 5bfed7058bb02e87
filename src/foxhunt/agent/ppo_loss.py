"""The PPO learner's pure parts: GAE, the branch masks and the clipped loss (docs/ppo.md).

Each is a function of tensors, hand-tested in ``tests/agent/test_ppo_loss.py``; the learner
(:class:`foxhunt.agent.ppo.PPOLearner`) only composes them. The recipe is CleanRL's ``ppo.py``
(Huang et al. 2022, "The 37 implementation details of PPO"): GAE advantages, normalised per
minibatch; the clipped surrogate ``max(-A r, -A clip(r, 1 - c, 1 + c))``; the value loss
``0.5 max((V - R)^2, (V_old + clip(V - V_old, -c_v, c_v) - R)^2)``; an entropy bonus. Two things are
the project's own:

* **A factored policy.** The action is four branches (:data:`~foxhunt.domain.actions.BRANCHES`), each
  its own categorical given the state; the joint log-probability is the sum of the branches' that
  can matter (:func:`branch_masks`), the entropy bonus is per branch, each averaged over the rows
  where that branch acts.
* **Choices that cannot matter are masked.** Hold trades nothing and Flat closes with a market order
  (``foxhunt.env.transition``), so for them the magnitude, order type and urgency change nothing: their
  log-probability and entropy terms are dropped (they would train the branches on noise). While a plan
  is locked (``foxhunt.agent.learner.plan_locked``) the environment ignores the whole action: the row
  contributes no policy or entropy term at all, only its value (the critic still learns the locked
  state's value, which the decision before it bootstraps from).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from foxhunt.domain.actions import BRANCHES, Direction

_SHORT, _LONG = int(Direction.SHORT), int(Direction.LONG)


def gae(
    rewards: Tensor, values: Tensor, dones: Tensor, last_value: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over ``[T, N]`` steps (Schulman et al. 2016), CleanRL's loop:

    ``delta_t = r_t + gamma V(s_{t+1}) (1 - done_t) - V(s_t)``,
    ``A_t = delta_t + gamma lam (1 - done_t) A_{t+1}``, ``V(s_T) = last_value`` (the epoch's tail is
    truncated, not terminal: it bootstraps). ``done_t``: step t ended its episode (no bootstrap across).
    Returns ``(advantages, returns = advantages + values)``, both ``[T, N]``."""
    steps = rewards.shape[0]
    nonterminal = 1.0 - dones.to(values.dtype)
    nxt = torch.cat([values[1:], last_value.unsqueeze(0)], dim=0)
    deltas = rewards + gamma * nxt * nonterminal - values
    adv = torch.zeros_like(values)
    running = torch.zeros_like(last_value)
    for t in range(steps - 1, -1, -1):
        running = deltas[t] + gamma * lam * nonterminal[t] * running
        adv[t] = running
    return adv, adv + values


def branch_masks(direction: Tensor, decision: Tensor, n_branches: int = len(BRANCHES)) -> Tensor:
    """``[B, branches]`` float: 1 where a branch's choice acted. ``decision`` [B] bool: the row is free to
    choose (no plan lock) and a real step; ``direction`` [B]: the direction chosen there. Direction acts
    on every decision row; magnitude, order type and urgency only on a Short or Long entry."""
    dec = decision.to(torch.float32)
    entry = dec * ((direction == _SHORT) | (direction == _LONG)).to(torch.float32)
    return torch.stack([dec] + [entry] * (n_branches - 1), dim=1)


def log_probs_entropy(logits: tuple[Tensor, ...], actions: Tensor, masks: Tensor) -> tuple[Tensor, Tensor]:
    """The joint log-probability of ``actions`` [B, branches] (the masked sum of the branches') [B] and
    each branch's entropy [B, branches] (unmasked: :func:`ppo_loss` averages each over its rows)."""
    logp, ent = [], []
    for i, lg in enumerate(logits):
        lsm = torch.log_softmax(lg, dim=-1)
        logp.append(lsm.gather(1, actions[:, i : i + 1]).squeeze(1))
        ent.append(-(lsm.exp() * lsm).sum(-1))
    return (torch.stack(logp, 1) * masks).sum(1), torch.stack(ent, 1)


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """``sum(x mask) / max(sum(mask), 1)``: the mean over the rows ``mask`` keeps, 0 where it keeps none."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def advantage_moments(advantages: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
    """``(mean, std + 1e-8)`` of ``advantages`` over the rows ``rows`` keeps: what a minibatch's
    advantages are normalised by (:func:`ppo_loss`), and the unit the counterfactual advantages are
    read in (:func:`all_action_loss`)."""
    mean = masked_mean(advantages, rows)
    var = masked_mean((advantages - mean) ** 2, rows)
    return mean, var.sqrt() + 1e-8


@dataclass(frozen=True)
class LossWeights:
    """The clipped loss's constants (from :class:`~foxhunt.agent.config.PPOConfig`)."""

    clip: float
    value_clip: float
    value_coef: float
    entropy: tuple[float, ...]  # per branch


def ppo_loss(
    new_logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    entropy: Tensor,
    masks: Tensor,
    new_value: Tensor,
    old_value: Tensor,
    returns: Tensor,
    valid: Tensor,
    w: LossWeights,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The clipped PPO loss of one minibatch and its statistics (0-dim tensors, no host read).

    Policy rows are the decision rows (``masks[:, 0]``); advantages are normalised over them (mean 0,
    std 1) and the clipped surrogate averaged over them. Entropy: branch b's averaged over the rows
    where it acts (``masks[:, b]``), weighted by ``w.entropy[b]``. Value: every ``valid`` row, clipped
    against ``old_value`` by ``w.value_clip`` (0: plain squared error)."""
    dec = masks[:, 0]
    mean, scale = advantage_moments(advantages, dec)
    adv = (advantages - mean) / scale
    logratio = new_logp - old_logp
    ratio = logratio.exp()
    pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(1.0 - w.clip, 1.0 + w.clip))
    pg_loss = masked_mean(pg, dec)
    live = valid.to(new_value.dtype)
    err = (new_value - returns) ** 2
    if w.value_clip > 0:
        clipped = old_value + (new_value - old_value).clamp(-w.value_clip, w.value_clip)
        err = torch.maximum(err, (clipped - returns) ** 2)
    v_loss = 0.5 * masked_mean(err, live)
    ent_b = torch.stack([masked_mean(entropy[:, b], masks[:, b]) for b in range(entropy.shape[1])])
    coefs = torch.tensor(w.entropy[: entropy.shape[1]], dtype=ent_b.dtype, device=ent_b.device)
    loss = pg_loss - (coefs * ent_b).sum() + w.value_coef * v_loss
    with torch.no_grad():
        stats = {
            "loss/total": loss.detach(),
            "loss/policy": pg_loss.detach(),
            "loss/value": v_loss.detach(),
            "ppo/approx_kl": masked_mean((ratio - 1.0) - logratio, dec),
            "ppo/clip_frac": masked_mean(((ratio - 1.0).abs() > w.clip).to(ratio.dtype), dec),
            "ppo/decision_share": dec.mean(),
        }
        for b, name in enumerate(BRANCHES[: entropy.shape[1]]):
            stats[f"ppo/entropy/{name}"] = ent_b[b].detach()
    return loss, stats


def counterfactual_advantages(
    ret: Tensor, discount: Tensor, bootstrap: Tensor, old_probs: tuple[Tensor, ...]
) -> Tensor:
    """``[E, K]``: each entry's advantage of every execution value over the policy's expectation in its
    branch (the columns ``[magnitude | order type | urgency]``, ``K`` in all)::

        Q_b(v) = R_v + d_v V(s_end)                 the variant's window return, bootstrapped
        A_b(v) = Q_b(v) - sum_w pi_b(w | s) Q_b(w)  centred under the sampling policy

    ``ret`` ``[E, K]`` are the variants' window returns (the decision, then Hold, to the next decision
    state: ``foxhunt.env.counterfactual.rollout``), in the critic's (scaled) units; ``discount``
    ``[E, K]`` their ``gamma^m`` (0 where the episode ended); ``bootstrap`` ``[E]`` the critic's value of
    the *taken* window's end state, which every variant's continuation is valued by (a variant's window
    ends flat at a decision state of the same market, a few bars from the taken one's: the stated
    approximation); ``old_probs`` the sampling policy's ``[E, A_b]`` per execution branch."""
    q = ret + discount * bootstrap[:, None]
    sizes = [p.shape[1] for p in old_probs]
    out = [
        qb - (p * qb).sum(-1, keepdim=True) for qb, p in zip(q.split(sizes, dim=1), old_probs, strict=True)
    ]
    return torch.cat(out, dim=1)


def all_action_loss(
    logits: tuple[Tensor, ...],
    old_log_probs: tuple[Tensor, ...],
    advantages: Tensor,
    masks: Tensor,
    clip: float,
    scale: Tensor,
) -> tuple[Tensor, Tensor]:
    """``(loss, per-branch losses)``: the clipped all-action ("expected") policy-gradient term of the
    execution branches (docs/ppo.md, "Counterfactual execution targets"). Per branch ``b``, row and
    value ``v``, with ``rho_v = pi_b(v | s) / pi_old_b(v | s)`` and ``a_v = A_b(v) / scale``::

        L_b = mean over the rows masks[:, b] keeps of  sum_v pi_old_b(v) max(-a_v rho_v, -a_v clip(rho_v))

    Unclipped, ``pi_old(v) rho_v = pi(v)``: the term is ``-sum_v pi_b(v | s) a_v`` and its gradient the
    expected policy gradient ``-sum_v a_v grad pi_b(v | s)`` over every value the simulator evaluated,
    not only the one sampled; the clip is PPO's own, per value, so a value the update has already moved
    past ``1 +- clip`` in its advantage's direction pushes no further. ``logits`` and ``old_log_probs``
    ``[B, A_b]`` per execution branch; ``advantages`` ``[B, K]`` (:func:`counterfactual_advantages`, 0
    on rows without); ``masks`` ``[B, execution branches]`` where each one acted and has
    counterfactuals; ``scale`` the minibatch's sampled-advantage std (:func:`advantage_moments`), so the
    counterfactual advantages are read in the unit the clipped sampled objective reads its own."""
    sizes = [lg.shape[1] for lg in logits]
    per_branch = []
    for b, (lg, old, a) in enumerate(zip(logits, old_log_probs, advantages.split(sizes, dim=1), strict=True)):
        ratio = (torch.log_softmax(lg, dim=-1) - old).exp()
        a = a / scale
        per = (old.exp() * torch.maximum(-a * ratio, -a * ratio.clamp(1.0 - clip, 1.0 + clip))).sum(-1)
        per_branch.append(masked_mean(per, masks[:, b]))
    losses = torch.stack(per_branch)
    return losses.sum(), losses
