"""Counterfactual execution targets for the DQN learner: hindsight relabelling of the execution branches.

Two parts, both off unless ``agent.counterfactual.weight > 0`` (:class:`CounterfactualConfig`):

* :class:`CounterfactualStage` (collection). Each collection step records the portfolio the action
  was taken from and the policy's sizing inputs (device copies into ``[T, ...]`` buffers, capturable
  like the rest of the step). After the epoch, every entry of the epoch (Short or Long where the
  direction acted) is rolled out once per execution value with the env's own transition
  (:func:`foxhunt.env.counterfactual.counterfactual_deltas`: the decision, then Hold, over a horizon
  that holds the whole entry), all entries at once; the result is the replay's ``cf`` column
  ``[M + O + U]``: per execution branch, what each value would have earned (discounted reward, the
  learner's units) over the value taken, NaN on rows that are no entry.
* :func:`relabelled_loss` (learning). For a replay row with counterfactuals, each execution branch
  ``b`` and each value ``v`` it did not take is trained, with the branch's own heads and loss
  weights, on the taken transition's target shifted by ``Delta_b(v)``::

      C51   m_{b,v} = Phi(R + Delta_b(v) + d Z'_b)        (the taken target's next-state distribution)
      IQN   y_{b,v} = R + Delta_b(v) + d theta'_b          (PopArt-normalised, as the branch's own)
      MSE   y_{b,v} = R + Delta_b(v) + d Q'_b

  i.e. the relabelled transition ``(s, a with b = v, R + Delta_b(v), s')``: the same next state,
  because every variant's trade has closed within the rollout, so what follows differs only by the
  account. Each term is a mean over the relabelled (row, value) pairs of the batch, weighted as the
  branch's own value loss and by ``weight``. The taken value keeps its ordinary target (its delta is
  0), so the relabelling never moves what the data measured, only what it did not try.

For magnitude this is the seeds' "hindsight relabelling of magnitude", made exact (a size's costs,
slippage and queue position are simulated, not scaled) and general (order type and urgency too).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from foxhunt.agent.config import CounterfactualConfig, LossConfig
from foxhunt.agent.distributional import c51_cross_entropy, project_c51, quantile_huber
from foxhunt.agent.network import NetOut
from foxhunt.domain.actions import BRANCHES
from foxhunt.env.core import TradingEnv
from foxhunt.env.counterfactual import counterfactual_deltas, default_horizon, entry_mask, split_blocks
from foxhunt.env.state import Portfolio

CF = "cf"
"""The replay column of the counterfactual deltas ``[M + O + U]`` float32 (NaN: no counterfactual)."""

_CHUNK = 4096  # entries rolled out at once (x (M + O + U) lanes): bounds the rollout's memory


def cf_width(sizes: Sequence[int]) -> int:
    """Columns of the ``cf`` replay field: the execution branches' values, ``M + O + U``."""
    return int(sum(sizes[1:]))


class CounterfactualStage:
    """The collector's counterfactual buffers for ``steps`` x ``n`` episodes of ``env``."""

    def __init__(self, env: TradingEnv, cfg: CounterfactualConfig, gamma: float, steps: int, n: int) -> None:
        self.env, self.gamma = env, gamma
        self.horizon = cfg.horizon or default_horizon(env)
        state = env._state()
        self.states = state.map(lambda x: torch.zeros((steps, *x.shape), dtype=x.dtype, device=x.device))
        f = env.dtype
        self.sizing = torch.zeros(3, steps, n, dtype=f, device=env.device)  # d_conv, m_conv, q_var
        self.entries = 0  # the last epoch's entries (rolled out)

    def record(self, t: Tensor, state: Portfolio, sizing: Sequence[Tensor]) -> None:
        """The state before step ``t`` and the policy's sizing inputs at it (device copies, no host read)."""
        for buf, x in zip(self.states.tensors(), state.tensors(), strict=True):
            buf.index_copy_(0, t, x.unsqueeze(0))
        self.sizing.index_copy_(1, t, torch.stack([s.to(self.sizing.dtype) for s in sizing]).unsqueeze(1))

    def deltas(self, actions_TN4: Tensor, valid_TN: Tensor) -> Tensor:
        """``[T * N, M + O + U]`` float32: each entry's counterfactual deltas (NaN on other rows).

        ``actions_TN4`` are the actions that acted (realised direction and magnitude), as replay
        stores them. One host read (the entries' count) per epoch."""
        flat = self.states.map(lambda x: x.flatten(0, 1))
        acts = actions_TN4.reshape(-1, actions_TN4.shape[-1]).to(self.env.device)
        mask = entry_mask(flat, acts) & valid_TN.reshape(-1).to(self.env.device)
        idx = mask.nonzero().squeeze(1)
        self.entries = int(idx.shape[0])
        out = torch.full(
            (acts.shape[0], cf_width(self.env.codec.sizes)), float("nan"), dtype=torch.float32,
            device=actions_TN4.device,
        )  # fmt: skip
        sizing = self.sizing.flatten(1, 2)
        for lo in range(0, self.entries, _CHUNK):
            rows = idx[lo : lo + _CHUNK]
            state = flat.map(lambda x, r=rows: x.index_select(0, r))
            d_conv, m_conv, q_var = sizing.index_select(1, rows).unbind(0)
            deltas, _ = counterfactual_deltas(
                self.env, state, acts.index_select(0, rows), self.horizon, self.gamma, d_conv, m_conv, q_var
            )
            out.index_copy_(0, rows.to(out.device), deltas.to(out))
        return out


def relabelled_loss(
    out: NetOut,
    cf_BK: Tensor,
    action_BN: Tensor,
    probs: Sequence[Tensor],
    y_iqn: Sequence[Tensor],
    y_mse: Sequence[Tensor],
    reward_B: Tensor,
    discount_B: Tensor,
    z_K: Tensor,
    normalise: Callable[[Tensor], Tensor],
    taus_Q: Tensor,
    cfg: LossConfig,
) -> tuple[Tensor, Tensor]:
    """``(loss, pairs)``: the relabelled targets' loss (module docstring) of the online heads ``out``
    and the number of relabelled (row, value) pairs in the batch. ``probs``, ``y_iqn``, ``y_mse`` are
    the taken transition's per-branch targets in real units (:meth:`Learner._target_values`),
    ``normalise`` PopArt's. Pure tensor arithmetic, no host read (compiled with the loss)."""
    sizes = tuple(b.q_mse.shape[1] for b in out.branches)
    n_br = len(out.branches)
    zero = torch.zeros((), device=reward_B.device)
    loss, pairs = zero, zero
    r, d = reward_B.float(), discount_B.float()
    for j, delta_BA in enumerate(split_blocks(cf_BK.float(), sizes), start=1):
        b, a = out.branches[j], delta_BA.shape[1]
        values = torch.arange(a, device=delta_BA.device)
        mask_BA = (torch.isfinite(delta_BA) & (values != action_BN[:, j : j + 1])).float()
        delta_BA = torch.nan_to_num(delta_BA, nan=0.0)
        count = mask_BA.sum()
        pairs = pairs + count
        denom = count.clamp(min=1.0)
        # C51: the taken target's next-state distribution, shifted by each value's delta and projected
        r_BA = r[:, None] + delta_BA
        m = project_c51(probs[j].repeat_interleave(a, 0), r_BA.reshape(-1), d.repeat_interleave(a), z_K)
        ce = c51_cross_entropy(b.logits.reshape(-1, b.logits.shape[-1]), m).view(-1, a)
        y_q = normalise(y_iqn[j][:, None, :] + delta_BA[:, :, None])  # [B, A, Q]
        q = taus_Q.shape[0]
        qh = quantile_huber(b.quantiles.reshape(-1, q), y_q.reshape(-1, q), taus_Q, cfg.huber_kappa)
        qh = qh.view(-1, a)
        se = (b.q_mse - normalise(y_mse[j][:, None] + delta_BA)).pow(2)
        c51_w = cfg.c51_weight(BRANCHES[j])
        mse_w = cfg.magnitude_mse if BRANCHES[j] == "magnitude" else cfg.mse
        per = c51_w * ce + cfg.iqn * qh + mse_w * se
        loss = loss + (per * mask_BA).sum() / denom / n_br
    return loss, pairs
