"""Counterfactual execution targets: hindsight relabelling of the execution branches.

Two parts, both off unless ``agent.counterfactual.weight > 0`` (:class:`CounterfactualConfig`); the
PPO learner reads the first (:meth:`CounterfactualStage.entry_windows`, the same windows with their
lengths, under PPO's discount: :mod:`foxhunt.agent.ppo`) and has its own loss
(:func:`foxhunt.agent.ppo_loss.all_action_loss`):

* :class:`CounterfactualStage` (collection). Each collection step records the portfolio the action
  was taken from and the policy's sizing inputs (device copies into ``[T, ...]`` buffers, capturable
  like the rest of the step). After the epoch, every entry of the epoch (Short or Long where the
  direction acted) is rolled out once per execution value with the env's own transition
  (:func:`foxhunt.env.counterfactual.rollout`: the decision, then Hold), all entries at once, and
  each path is cut into the learner's own n-step window (:class:`~foxhunt.env.counterfactual.Window`:
  at most ``n_step`` steps, to the next decision state under ``bootstrap = decision``, to the end of
  the collected sequence, discount 0 where the episode ended). The replay's ``cf`` column holds, per
  execution value ``v`` (columns ``[magnitude | order type | urgency]``, ``K = M + O + U``), the
  window's return ``R_v`` and its discount ``d_v``: ``[R_v (K) | d_v (K)]``, NaN on rows that are no
  entry. For the value taken they are the replay row's own ``R`` and ``d``.
* :func:`relabelled_loss` (learning). For a replay row with counterfactuals, each execution branch
  ``b`` and each value ``v`` it did not take is trained, with the branch's own heads and loss
  weights, on the relabelled transition ``(s, a with b = v, R_v, d_v, s')``::

      C51   m_{b,v} = Phi(R_v + d_v Z'_b)        Z'_b the taken target's next-state distribution
      IQN   y_{b,v} = R_v + d_v theta'_b         (PopArt-normalised, as the branch's own)
      MSE   y_{b,v} = R_v + d_v Q'_b

  The bootstrap is the taken transition's (the target network at its ``s'`` and the online network's
  action there): under ``bootstrap = decision`` every window ends at a state free to act again, flat
  (a plan holds the position), so what follows a variant's window differs from what follows the
  taken one's by the account and the time, not the position. Each term is a mean over the relabelled
  (row, value) pairs of the batch, weighted as the branch's own value loss and by ``weight``; the
  taken value keeps its ordinary target, so the relabelling never moves what the data measured, only
  what it did not try.

For magnitude this is the seeds' "hindsight relabelling of magnitude", made exact (a size's costs,
slippage and queue position are simulated, not scaled) and general (order type and urgency too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from foxhunt.agent.config import Bootstrap, CounterfactualConfig, LearnConfig, LossConfig
from foxhunt.agent.distributional import c51_cross_entropy, project_c51, quantile_huber
from foxhunt.agent.network import NetOut
from foxhunt.domain.actions import BRANCHES
from foxhunt.env.core import TradingEnv
from foxhunt.env.counterfactual import (
    ExecutionOutcome,
    Window,
    entry_mask,
    execution_variants,
    rollout,
    split_blocks,
)
from foxhunt.env.state import Portfolio

CF = "cf"
"""The replay column of the counterfactual windows ``[R_v (K) | d_v (K)]`` float32 (NaN: none)."""

_CHUNK = 4096  # entries rolled out at once (x (M + O + U) lanes): bounds the rollout's memory


def cf_width(sizes: Sequence[int]) -> int:
    """Columns of the ``cf`` replay field: a return and a discount per execution value, ``2 (M + O + U)``."""
    return 2 * int(sum(sizes[1:]))


class CounterfactualStage:
    """The collector's counterfactual buffers for ``steps`` x ``n`` episodes of ``env``; the windows
    are ``learn``'s (``n_step``, ``gamma``, ``bootstrap``)."""

    def __init__(
        self, env: TradingEnv, cfg: CounterfactualConfig, learn: LearnConfig, steps: int, n: int
    ) -> None:
        self.env, self.gamma, self.steps = env, learn.gamma, steps
        self.n_step, self.decision = learn.n_step, learn.bootstrap is Bootstrap.DECISION
        self.horizon = cfg.horizon or learn.n_step
        state = env._state()
        self.states = state.map(lambda x: torch.zeros((steps, *x.shape), dtype=x.dtype, device=x.device))
        self.sizing = torch.zeros(3, steps, n, dtype=env.dtype, device=env.device)  # d_conv, m_conv, q_var
        self.entries = 0  # the last epoch's entries (rolled out)

    def record(self, t: Tensor, state: Portfolio, sizing: Sequence[Tensor]) -> None:
        """The state before step ``t`` and the policy's sizing inputs at it (device copies, no host read)."""
        for buf, x in zip(self.states.tensors(), state.tensors(), strict=True):
            buf.index_copy_(0, t, x.unsqueeze(0))
        self.sizing.index_copy_(1, t, torch.stack([s.to(self.sizing.dtype) for s in sizing]).unsqueeze(1))

    def windows(self, actions_TN4: Tensor, valid_TN: Tensor) -> Tensor:
        """``[T * N, 2 K]`` float32: each entry's counterfactual windows ``[R_v | d_v]`` (NaN on the
        other rows). ``actions_TN4`` are the actions that acted (realised direction and magnitude), as
        replay stores them. One host read (the entries' count) per epoch."""
        out = torch.full(
            (actions_TN4.shape[0] * actions_TN4.shape[1], cf_width(self.env.codec.sizes)),
            float("nan"),
            device=actions_TN4.device,
        )
        for rows, got in self._rollouts(actions_TN4, valid_TN):
            both = torch.cat([got.window_ret, got.window_discount], dim=1)
            out.index_copy_(0, rows.to(out.device), both.to(out))
        return out

    def entry_windows(self, actions_TN4: Tensor, valid_TN: Tensor) -> EntryWindows:
        """The same windows per entry, with their lengths (an on-policy learner's critic bootstraps the
        taken window's end state, ``m`` steps on): :class:`EntryWindows`."""
        parts = list(self._rollouts(actions_TN4, valid_TN))
        k = cf_width(self.env.codec.sizes) // 2
        dev = actions_TN4.device
        if not parts:
            empty = torch.zeros(0, k, device=dev)
            return EntryWindows(torch.zeros(0, dtype=torch.int64, device=dev), empty, empty, empty.long())
        return EntryWindows(
            torch.cat([rows for rows, _ in parts]).to(dev),
            torch.cat([got.window_ret for _, got in parts]).to(dev, torch.float32),
            torch.cat([got.window_discount for _, got in parts]).to(dev, torch.float32),
            torch.cat([got.window_len for _, got in parts]).to(dev),
        )

    def _rollouts(self, actions_TN4: Tensor, valid_TN: Tensor) -> Iterator[tuple[Tensor, ExecutionOutcome]]:
        """Every entry's rows ``[E]`` (flat ``t * N + i``) and their variants' outcomes, in chunks."""
        env, n = self.env, actions_TN4.shape[1]
        flat = self.states.map(lambda x: x.flatten(0, 1))
        acts = actions_TN4.reshape(-1, actions_TN4.shape[-1]).to(env.device)
        mask = entry_mask(flat, acts) & valid_TN.reshape(-1).to(env.device)
        idx = mask.nonzero().squeeze(1)
        self.entries = int(idx.shape[0])
        sizing = self.sizing.flatten(1, 2)
        for lo in range(0, self.entries, _CHUNK):
            rows = idx[lo : lo + _CHUNK]
            state = flat.map(lambda x, r=rows: x.index_select(0, r))
            window = Window(self.n_step, self.decision, limit=self.steps - rows // n)  # the sequence's end
            variants = execution_variants(acts.index_select(0, rows), env.codec.sizes)
            conv = sizing.index_select(1, rows).unbind(0)
            yield rows, rollout(env, state, variants, self.horizon, self.gamma, conv, window, ledger=False)


class EntryWindows(NamedTuple):
    """Each entry's counterfactual windows (:meth:`CounterfactualStage.entry_windows`): ``rows`` ``[E]``
    the entries' flat rows ``t * N + i`` of the collected sequence; per execution value (columns ``[M |
    O | U]``, ``K`` in all) the window's return ``ret``, discount ``discount`` (``gamma^m``, 0 where the
    episode ended) and length ``length`` ``m``, each ``[E, K]``."""

    rows: Tensor
    ret: Tensor
    discount: Tensor
    length: Tensor


def relabelled_loss(
    out: NetOut,
    cf_B2K: Tensor,
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
    the taken transition's per-branch targets in real units (:meth:`Learner._target_values`: ``y =
    R + d x bootstrap``, whose bootstrap is read back as ``(y - R) / d``, 0 where ``d`` is 0),
    ``normalise`` PopArt's. Pure tensor arithmetic, no host read (compiled with the loss)."""
    sizes = tuple(b.q_mse.shape[1] for b in out.branches)
    n_br = len(out.branches)
    zero = torch.zeros((), device=reward_B.device)
    loss, pairs = zero, zero
    r, d = reward_B.float(), discount_B.float()
    live = d > 0
    inv_d = torch.where(live, 1.0 / d.clamp(min=1e-30), torch.zeros_like(d))
    ret_BK, disc_BK = cf_B2K.float().chunk(2, dim=1)
    blocks = zip(split_blocks(ret_BK, sizes), split_blocks(disc_BK, sizes), strict=True)
    for j, (ret_BA, disc_BA) in enumerate(blocks, start=1):
        b, a = out.branches[j], ret_BA.shape[1]
        values = torch.arange(a, device=ret_BA.device)
        mask_BA = (torch.isfinite(ret_BA) & (values != action_BN[:, j : j + 1])).float()
        ret_BA, disc_BA = torch.nan_to_num(ret_BA, nan=0.0), torch.nan_to_num(disc_BA, nan=0.0)
        count = mask_BA.sum()
        pairs = pairs + count
        # C51: the taken target's next-state distribution, under each value's own return and discount
        m = project_c51(probs[j].repeat_interleave(a, 0), ret_BA.reshape(-1), disc_BA.reshape(-1), z_K)
        ce = c51_cross_entropy(b.logits.reshape(-1, b.logits.shape[-1]), m).view(-1, a)
        boot_iqn = (y_iqn[j] - r[:, None]) * inv_d[:, None]  # [B, Q] theta'(s', a*)
        y_q = normalise(ret_BA[:, :, None] + disc_BA[:, :, None] * boot_iqn[:, None, :])  # [B, A, Q]
        q = taus_Q.shape[0]
        qh = quantile_huber(b.quantiles.reshape(-1, q), y_q.reshape(-1, q), taus_Q, cfg.huber_kappa)
        boot_mse = (y_mse[j] - r) * inv_d  # [B]
        se = (b.q_mse - normalise(ret_BA + disc_BA * boot_mse[:, None])).pow(2)
        c51_w = cfg.c51_weight(BRANCHES[j])
        mse_w = cfg.magnitude_mse if BRANCHES[j] == "magnitude" else cfg.mse
        per = c51_w * ce + cfg.iqn * qh.view(-1, a) + mse_w * se
        loss = loss + (per * mask_BA).sum() / count.clamp(min=1.0) / n_br
    return loss, pairs
