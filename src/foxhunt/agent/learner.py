"""The learner: one pure ``update(batch)`` of the branching distributional Q network (SPEC §7).

For a replay batch of n-step transitions ``(s, a, R, d, s', aux)`` (``R`` the discounted n-step
reward, ``d = gamma^n`` or 0 when the episode ended inside the n steps):

1. **Double-Q targets.** The online network picks ``a*_b = argmax_a Q_b(s', a)`` per branch b
   (Q = (E_C51 + E_IQN) / 2, :meth:`QNetwork.expected_q`); the Polyak-averaged target network evaluates it.
   Each branch has its own target (branching dueling Q, Tavakoli et al. 2018). The argmax runs
   over the *legal* actions only: in a plan-locked next state (its ``plan.active`` slot) the
   environment turns every direction into Hold (SPEC §6 hard constraint), so Hold is the only
   direction that can act there, and the only one replay ever trains there; a max over the
   untrained others would bootstrap every position's value from noise.
   C51 ``m_b = Phi(R + d z, p_target(s', a*_b))`` (projection, :func:`project_c51`),
   IQN ``y_b,i = R + d theta_target,i(s', a*_b)``, MSE ``y_b = R + d Q_mse,target(s', a*_b)``.
2. **Support and PopArt.** The C51 support grows (never shrinks) to cover ``|y|``; PopArt updates
   its target statistics and rescales the IQN/MSE output layers of both networks so their real
   outputs are unchanged (Art + Pop); IQN and MSE learn ``normalise(y)``.
3. **Losses, all mean-reduced** over the batch and averaged over branches, importance-weighted:
   ``c51 * CE + iqn * quantile-Huber + mse * (Q_mse - y)^2`` per branch (magnitude: ``magnitude_c51``
   and ``magnitude_mse``), plus the CQL penalty ``logsumexp_a Q_b(s, a) - Q_b(s, a_b)``, the
   atom-entropy bonus while atom utilisation is under its floor, the MoE load-balance loss with the
   adaptive lambda, and the auxiliary heads' losses (next return MSE, direction and outcome CE).
4. **Step.** One backward; the Q network's gradient is clipped at ``clip_norm`` and the auxiliary
   trunk's separately at ``aux_clip_norm``; Adam; Polyak ``theta' <- theta' + tau (theta - theta')``.
5. **Priorities.** The per-sample C51 cross-entropy (averaged over branches) is the new priority.

Nothing here reads a value back to the host: the statistics come back as 0-dim tensors that the
diagnostics read once per epoch. The update is eager Python around two pure stretches (the targets,
:meth:`Learner._target_values`, and the loss, :meth:`Learner._losses`) that :meth:`Learner.compile`
hands to ``torch.compile``; :class:`~foxhunt.agent.graph.GraphedLearn` then captures the whole step.
The learning-rate schedule (cosine with warm restarts, Adam's
first moments halved at each restart) changes once per epoch, outside ``update``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from foxhunt.agent.balance import adaptive_lambda, gate_entropy, load_loss
from foxhunt.agent.config import AgentConfig
from foxhunt.agent.distributional import (
    atom_entropy,
    atom_utilisation,
    c51_cross_entropy,
    project_c51,
    quantile_huber,
)
from foxhunt.agent.network import NetOut, QNetwork, reset_noise
from foxhunt.agent.popart import PopArt
from foxhunt.agent.signals import Signals
from foxhunt.env.actions import Direction
from foxhunt.env.rewards import BRANCHES
from foxhunt.features.layout import STATE_LAYOUT
from foxhunt.train.diagnostics import q_key

_DIRECTION, _MAGNITUDE = BRANCHES.index("direction"), BRANCHES.index("magnitude")
_PLAN_ACTIVE = STATE_LAYOUT.index("plan.active")  # 1 while a plan locks the direction
SUPPORT_QUANTILE = 0.99  # share of |targets| the C51 support must cover


@dataclass
class Batch:
    """A replay batch (the transition record), ``B`` rows on the learner's device."""

    state: Tensor  # [B, W] float32
    action: Tensor  # [B, n_branches] int64
    reward: Tensor  # [B] n-step discounted reward
    discount: Tensor  # [B] gamma^k, 0 when the episode ended inside the n steps
    next_state: Tensor  # [B, W]
    aux: Tensor  # [B, 3] next_return, direction (0/1), outcome (0/1/2); NaN = no target
    weight: Tensor  # [B] importance-sampling weights (1 for uniform replay)


def plan_locked(state_BW: Tensor) -> Tensor:
    """Rows whose plan locks the direction (its ``plan.active`` slot is 1): only Hold acts there [B]."""
    return state_BW[:, _PLAN_ACTIVE] > 0.5


def cosine_lr(epoch: int, lr: float, floor_share: float, period: int) -> float:
    """Cosine annealing with warm restarts every ``period`` epochs (SGDR, Loshchilov & Hutter)."""
    t = epoch % period
    lo = lr * floor_share
    return lo + (lr - lo) * 0.5 * (1.0 + math.cos(math.pi * t / period))


@torch.no_grad()
def _project(probs: list[Tensor], batch: Batch, z: Tensor) -> list[Tensor]:
    """Each branch's target distribution of ``R + d Z`` projected onto the support ``z`` [B, K]."""
    r, d = batch.reward.float(), batch.discount.float()
    return [project_c51(p, r, d, z) for p in probs]


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


class Learner:
    """Online and target networks, PopArt, Adam and the adaptive signals of one agent."""

    def __init__(self, net: QNetwork, cfg: AgentConfig, signals: Signals) -> None:
        self.net = net
        self.cfg = cfg
        self.signals = signals
        self.device = next(net.parameters()).device
        self.target = copy.deepcopy(net)
        for p in self.target.parameters():
            p.requires_grad_(False)
        self.popart = PopArt(cfg.learn.popart).to(self.device)
        self.taus = torch.tensor(cfg.network.quantiles, dtype=torch.float32, device=self.device)
        self.q_params = list(net.q_parameters())
        self.aux_params = list(net.aux_parameters())
        cuda = self.device.type == "cuda"
        # On CUDA the update is replayed as a graph: capturable Adam with the learning rate as a
        # device tensor, so the schedule can change it between replays without a recapture.
        lr = torch.tensor(cfg.learn.lr, device=self.device) if cuda else cfg.learn.lr
        # Fused on CUDA: one multi-tensor kernel for the whole step instead of a dozen foreach passes.
        self.opt = torch.optim.Adam(net.parameters(), lr=lr, capturable=cuda, fused=cuda or None, eps=1e-6)
        self.epoch = 0
        self.lr_scale = 1.0
        # The update's pure stretches; :meth:`compile` swaps in their torch.compile-d versions.
        self._target_values_fn = self._target_values
        self._losses_fn = self._losses
        self.compiled = False  # multiplies the schedule (the plateau ladder's learning-rate bumps)

    # --- schedule ------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> float:
        """The epoch's learning rate (schedule x ``lr_scale``); at a warm restart Adam's first moments
        are scaled down. A tensor learning rate (CUDA graphs) is filled in place, so a captured update
        sees it."""
        learn = self.cfg.learn
        if epoch > 0 and epoch % learn.restart_epochs == 0 and epoch != self.epoch:
            for state in self.opt.state.values():
                if "exp_avg" in state:
                    state["exp_avg"].mul_(learn.restart_momentum)
        self.epoch = epoch
        lr = cosine_lr(epoch, learn.lr, learn.lr_min_share, learn.restart_epochs) * self.lr_scale
        for g in self.opt.param_groups:
            if isinstance(g["lr"], Tensor):
                g["lr"].fill_(lr)
            else:
                g["lr"] = lr
        return lr

    # --- the update ----------------------------------------------------------------------

    @torch.no_grad()
    def _target_values(
        self, batch: Batch
    ) -> tuple[list[Tensor], list[Tensor], list[Tensor], Tensor]:
        """Per branch: the target network's next-state distributions [B, K] at the online network's
        actions, IQN targets [B, Q] and MSE targets [B] (real units); and the reach the support must
        cover. Pure (reads the networks and PopArt, writes nothing): compiled by :meth:`compile`."""
        nxt = self.net(batch.next_state)  # double Q: the online network selects
        a_star = [q.argmax(dim=1) for q in self.net.expected_q(nxt, self.popart.denormalise)]
        locked = plan_locked(batch.next_state)  # only Hold is legal there
        a_star[_DIRECTION] = torch.where(locked, int(Direction.HOLD), a_star[_DIRECTION])
        tgt = self.target(batch.next_state)  # ... the target network evaluates
        r, d = batch.reward.float(), batch.discount.float()
        ar = torch.arange(r.shape[0], device=r.device)
        probs, y_iqn, y_mse = [], [], []
        for b, a in zip(tgt.branches, a_star, strict=True):
            probs.append(torch.softmax(b.logits[ar, a], dim=-1))  # [B, K]
            y_iqn.append(r[:, None] + d[:, None] * self.popart.denormalise(b.quantiles[ar, a]))  # [B, Q]
            y_mse.append(r + d * self.popart.denormalise(b.q_mse[ar, a]))  # [B]
        # The support covers the targets (grows, never shrinks), then C51 projects onto it. Their
        # 99th percentile, not their maximum: one wild early bootstrap would otherwise widen the
        # support for good and coarsen its resolution (SPEC §7: spacing must resolve the Q scale);
        # the rarer tail is clipped onto the end atoms by the projection.
        reach = torch.quantile(
            torch.cat([y.abs().flatten() for y in y_iqn + y_mse]).float(), SUPPORT_QUANTILE
        )
        return probs, y_iqn, y_mse, reach

    @torch.no_grad()
    def _targets(self, batch: Batch) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
        """Per branch: C51 target distributions [B, K] (projected onto the grown support), IQN targets
        [B, Q], MSE targets [B] (real units). ``update`` runs the same steps, the projection inside the
        loss (:meth:`_losses`)."""
        probs, y_iqn, y_mse, reach = self._target_values_fn(batch)
        self.net.grow_support(reach)
        self.target.v_max.copy_(self.net.v_max)
        return _project(probs, batch, self.net.support()), y_iqn, y_mse

    def compile(self) -> None:
        """``torch.compile`` the update's two pure stretches (issue 16: the update as a CUDA graph was
        bound by launching ~2,900 small kernels): the target computation (both networks' forwards on
        s', the double-Q selection, the targets, their quantile) and the loss (the online forward on
        s, every loss, the priorities, statistics and signal EMAs, and its backward through
        AOTAutograd). The support growth, PopArt, clipping, Adam and Polyak stay eager (multi-tensor
        kernels already). Compile once per learner, before a CUDA-graph capture (the first call of
        each compiles; the capture must not)."""
        self._target_values_fn = torch.compile(self._target_values, fullgraph=True, dynamic=False)
        self._losses_fn = torch.compile(self._losses, fullgraph=True, dynamic=False)
        self.compiled = True

    def update(self, batch: Batch) -> tuple[Tensor, dict[str, Tensor]]:
        """One learner step; returns ``(new priorities [B], statistics as 0-dim tensors)``."""
        cfg = self.cfg
        self.net.train()
        reset_noise([self.net, self.target])
        probs, y_iqn, y_mse, reach = self._target_values_fn(batch)
        self.net.grow_support(reach)
        self.target.v_max.copy_(self.net.v_max)
        self.popart.update(torch.cat(y_mse), self.net.popart_layers() + self.target.popart_layers())

        loss, priority, stats = self._losses_fn(batch, probs, y_iqn, y_mse, self.net.support())

        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        g_q = torch.nn.utils.clip_grad_norm_(self.q_params, cfg.learn.clip_norm)
        g_aux = torch.nn.utils.clip_grad_norm_(self.aux_params, cfg.learn.aux_clip_norm)
        self.opt.step()
        self._polyak()

        stats.update(
            {
                "grad/q": g_q.detach(),
                "grad/aux": g_aux.detach(),
                "grad/total": torch.sqrt(g_q.detach() ** 2 + g_aux.detach() ** 2),
                "atoms/v_max": self.net.v_max.detach().clone(),
                "experts/lambda": self.signals["balance_lambda"].clone(),
            }
        )
        return priority, stats

    def _losses(
        self, batch: Batch, probs: list[Tensor], y_iqn: list[Tensor], y_mse: list[Tensor], z: Tensor
    ) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        """The C51 projection of ``probs`` onto the support ``z``, the online forward on s and the total
        loss; ``(loss, priorities [B], statistics)``.

        Updates the atom-utilisation, gate-entropy, lambda and expert-utilisation signals in place
        (the losses read them); compiled by :meth:`compile`."""
        loss_cfg, sig = self.cfg.loss, self.signals
        m = _project(probs, batch, z)
        out = self.net(batch.state)
        w = batch.weight.float()
        ar = torch.arange(w.shape[0], device=w.device)
        n_br = len(out.branches)
        zero = torch.zeros((), device=w.device)
        l_c51, l_iqn, l_mse, priority = zero, zero, zero, torch.zeros_like(w)
        for i, b in enumerate(out.branches):
            a = batch.action[:, i]
            ce = c51_cross_entropy(b.logits[ar, a], m[i])  # [B]
            qh = quantile_huber(
                b.quantiles[ar, a], self.popart.normalise(y_iqn[i]), self.taus, loss_cfg.huber_kappa
            )  # [B]
            se = (b.q_mse[ar, a] - self.popart.normalise(y_mse[i])).pow(2)  # [B]
            c51_w, mse_w = (
                (loss_cfg.magnitude_c51, loss_cfg.magnitude_mse)
                if i == _MAGNITUDE
                else (loss_cfg.c51, loss_cfg.mse)
            )
            l_c51 = l_c51 + c51_w * (w * ce).mean() / n_br
            l_iqn = l_iqn + loss_cfg.iqn * (w * qh).mean() / n_br
            l_mse = l_mse + mse_w * (w * se).mean() / n_br
            priority = priority + ce.detach() / n_br

        q_all = self.net.expected_q(out, self.popart.denormalise)
        l_cql = zero
        if loss_cfg.cql > 0:
            for i, q in enumerate(q_all):
                l_cql = l_cql + (torch.logsumexp(q, dim=1) - q[ar, batch.action[:, i]]).mean() / n_br
            l_cql = loss_cfg.cql * l_cql

        # Atom-entropy bonus, on while the atom-utilisation EMA is under its floor.
        probs = [torch.softmax(b.logits, dim=-1) for b in out.branches]
        util = torch.stack([atom_utilisation(p.detach()) for p in probs]).mean()
        sig.ema("atom_utilisation", util)
        ent = torch.stack([atom_entropy(p).mean() for p in probs]).mean()
        low = (sig["atom_utilisation"] < loss_cfg.atom_utilisation_floor).to(ent.dtype)
        l_entropy = -loss_cfg.atom_entropy * low * ent

        # MoE load balance with the adaptive lambda of SPEC §7 (gate-entropy EMA).
        h = gate_entropy(out.gate)
        sig.ema("gate_entropy", h)
        lam = adaptive_lambda(sig["gate_entropy"], out.gate.shape[1])
        sig.set("balance_lambda", torch.as_tensor(lam, dtype=torch.float32, device=w.device))
        sig.ema("expert_utilisation", out.gate.detach().mean(0))
        l_balance = loss_cfg.moe_balance * load_loss(out.gate, lam)

        l_aux = self._aux_loss(out, batch.aux)
        loss = l_c51 + l_iqn + l_mse + l_cql + l_entropy + l_balance + loss_cfg.aux * l_aux
        stats = {
            "loss/total": loss.detach(),
            "loss/c51": l_c51.detach(),
            "loss/iqn": l_iqn.detach(),
            "loss/mse": l_mse.detach(),
            "loss/cql": l_cql.detach(),
            "loss/entropy": l_entropy.detach(),
            "loss/balance": l_balance.detach(),
            "loss/aux": l_aux.detach(),
            "atoms/utilisation": util,
            "experts/gate_entropy": h.detach(),
        }
        for name, q in zip(BRANCHES, q_all, strict=True):
            qd = q.detach()
            stats[q_key(name, "mean")] = qd.mean()
            stats[q_key(name, "spread")] = (qd.amax(1) - qd.amin(1)).mean()
        return loss, priority, stats

    def _aux_loss(self, out: NetOut, aux: Tensor) -> Tensor:
        """Masked means of the auxiliary heads' losses (a NaN target is no target)."""
        ret, direction, outcome = aux.unbind(dim=1)
        ok_r, ok_d, ok_o = (~torch.isnan(x) for x in (ret, direction, outcome))
        l_ret = _masked_mean((out.aux_return - torch.nan_to_num(ret)).pow(2), ok_r.float())
        d_idx = torch.nan_to_num(direction).long().clamp(0, 1)
        l_dir = _masked_mean(F.cross_entropy(out.aux_direction, d_idx, reduction="none"), ok_d.float())
        o_idx = torch.nan_to_num(outcome).long().clamp(0, out.aux_outcome.shape[1] - 1)
        l_out = _masked_mean(F.cross_entropy(out.aux_outcome, o_idx, reduction="none"), ok_o.float())
        return l_ret + l_dir + l_out

    @torch.no_grad()
    def _polyak(self) -> None:
        tau = self.cfg.learn.polyak
        torch._foreach_lerp_(list(self.target.parameters()), list(self.net.parameters()), tau)
