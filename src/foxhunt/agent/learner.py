"""The learner: one ``update(batch)`` of the branching distributional Q network (docs/design.md §6).

For a replay batch of n-step transitions ``(s, a, R, d, s', aux)`` (``R`` the discounted n-step
reward, ``d = gamma^n`` or 0 when the episode ended inside the n steps), :meth:`Learner.update`
composes small parts, each with its own home and test:

1. **Double-Q targets** (:meth:`Learner._target_values`). The online network picks
   ``a*_b = argmax_a Q_b(s', a)`` per branch b (Q = the trained heads' E[Q], :meth:`QNetwork.expected_q`);
   the Polyak-averaged target network evaluates it. Each branch has its own target (branching dueling
   Q, Tavakoli et al. 2018). The argmax runs over the *legal* actions only: in a plan-locked next state
   (its ``plan.active`` slot) the environment turns every direction into Hold (a hard constraint,
   docs/design.md §5), so Hold is the only direction that can act there, and the only one replay ever
   trains there; a max over the untrained others would bootstrap every position's value from noise.
   C51 ``m_b = Phi(R + d z, p_target(s', a*_b))`` (projection, :func:`project_c51`),
   IQN ``y_b,i = R + d theta_target,i(s', a*_b)``, MSE ``y_b = R + d Q_mse,target(s', a*_b)``.
2. **Support and PopArt.** The C51 support grows (never shrinks) to cover ``|y|``
   (:class:`~foxhunt.agent.support.SupportGrowth`); PopArt updates its target statistics and rescales
   the IQN/MSE output layers of both networks so their real outputs are unchanged (Art + Pop); IQN and
   MSE learn ``normalise(y)``. Both act before the loss, which learns on the grown support.
3. **Loss and signals** (:meth:`Learner._losses`). On the online forward on s,
   :func:`~foxhunt.agent.loss.value_terms` gives the value heads' loss terms (and CQL) and the
   per-sample TD errors (the new priorities); the adaptive signals (atom utilisation, gate entropy,
   the load-balance lambda) take this batch's readings and switch the regularisers, whose terms
   :func:`~foxhunt.agent.loss.regulariser_terms` gives.
4. **Step.** One backward; the Q network's gradient is clipped at ``clip_norm`` and the auxiliary
   trunk's separately at ``aux_clip_norm``; Adam; the soft update
   ``theta' <- theta' + tau (theta - theta')`` (:class:`~foxhunt.agent.soft_update.SoftUpdate`).

Nothing here reads a value back to the host: the statistics come back as 0-dim tensors that the
diagnostics read once per epoch. The update is eager Python around two pure stretches (the targets,
:meth:`Learner._target_values`, and the loss, :meth:`Learner._losses`) that :meth:`Learner.compile`
hands to ``torch.compile``; :class:`~foxhunt.agent.graph.GraphedLearn` then captures the whole step.
The learning-rate schedule (cosine with warm restarts, Adam's first moments halved at each restart)
changes once per epoch, outside ``update``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from foxhunt.agent.balance import adaptive_lambda, gate_entropy
from foxhunt.agent.config import AgentConfig
from foxhunt.agent.counterfactual import relabelled_loss
from foxhunt.agent.distributional import atom_utilisation, project_c51
from foxhunt.agent.loss import (
    LOSS_TERMS,
    Gates,
    Targets,
    regulariser_terms,
    total_loss,
    value_terms,
)
from foxhunt.agent.network import QNetwork, aux_parameters, popart_layers, q_parameters, reset_noise
from foxhunt.agent.popart import PopArt
from foxhunt.agent.signals import Signals
from foxhunt.agent.soft_update import SoftUpdate
from foxhunt.agent.stats import q_key
from foxhunt.agent.support import SupportGrowth, target_reach
from foxhunt.domain.actions import BRANCHES, Direction
from foxhunt.features.layout import STATE_LAYOUT

_DIRECTION = BRANCHES.index("direction")
_PLAN_ACTIVE = STATE_LAYOUT.index("plan.active")  # 1 while a plan locks the direction
_STATE_KEYS = ("network", "target", "popart", "optimizer", "epoch", "lr_scale")
# Adam's kernel choices, set by the device the learner runs on, not by the state it loads.
_KERNEL_KEYS = ("capturable", "fused", "foreach", "differentiable")


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


@dataclass
class CounterfactualBatch(Batch):
    """A batch with the replay's counterfactual execution deltas (``agent.counterfactual``)."""

    cf: Tensor  # [B, 2 (M + O + U)] per execution value its window's return, then discount (NaN: none)


def plan_locked(state_BW: Tensor) -> Tensor:
    """Rows whose plan locks the direction (its ``plan.active`` slot is 1): only Hold acts there [B]."""
    return state_BW[:, _PLAN_ACTIVE] > 0.5


def decision_state(state_BW: Tensor) -> Tensor:
    """States where the direction acts again (no plan lock): where a ``Bootstrap.DECISION`` window ends."""
    return ~plan_locked(state_BW)


def cosine_lr(epoch: int, lr: float, floor_share: float, period: int) -> float:
    """Cosine annealing with warm restarts every ``period`` epochs (SGDR, Loshchilov & Hutter)."""
    t = epoch % period
    lo = lr * floor_share
    return lo + (lr - lo) * 0.5 * (1.0 + math.cos(math.pi * t / period))


@torch.no_grad()
def _project(probs: list[Tensor], batch: Batch, z: Tensor) -> list[Tensor]:
    """Each branch's target distribution of ``R + d Z`` projected onto the support ``z`` [B, K].

    Every branch in one call, rows stacked branch after branch ([n B, K], each row's ``R`` and ``d``
    repeated): the projection works row by row, so each row is the same bits as one call per branch,
    for ~20 ops instead of ~20 per branch (a quarter of the ops at 4 branches)."""
    r, d = batch.reward.float(), batch.discount.float()
    n = len(probs)
    return list(project_c51(torch.cat(probs), r.repeat(n), d.repeat(n), z).chunk(n))


def _decay_groups(net: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Adam's parameter groups: one without decay when ``weight_decay`` is 0 (the optimiser then is
    plain Adam, step for step); else the weight matrices (``ndim >= 2``) decayed and the rest (biases,
    norm gains, vectors) not, as weight decay is meant: a prior on the maps, not on their offsets."""
    params = list(net.parameters())
    if weight_decay == 0:
        return [{"params": params, "weight_decay": 0.0}]
    return [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]


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
        self.support_growth = SupportGrowth(net, self.target)
        self.soft_update = SoftUpdate(net, self.target, cfg.learn.polyak)
        self.taus = torch.tensor(cfg.network.quantiles, dtype=torch.float32, device=self.device)
        self.q_params = list(q_parameters(net))
        self.aux_params = list(aux_parameters(net))
        cuda = self.device.type == "cuda"
        # On CUDA the update is replayed as a graph: capturable Adam with the learning rate as a
        # device tensor, so the schedule can change it between replays without a recapture.
        lr = torch.tensor(cfg.learn.lr, device=self.device) if cuda else cfg.learn.lr
        # Fused: one multi-tensor kernel for the whole step, instead of a dozen foreach passes on CUDA and,
        # on the CPU, torch's default Python loop of ~9 ops per parameter tensor (900 of the smoke
        # update's ~3,900 ops; its Adam 5.5 -> 1.7 ms). The same steps up to float32 rounding.
        self.opt = torch.optim.Adam(
            _decay_groups(net, cfg.learn.weight_decay),
            lr=lr,
            capturable=cuda,
            fused=True,
            eps=1e-6,
            # AdamW: the decay apart from the adaptive step, not an L2 term in the gradient; off, the
            # plain Adam kernel as before.
            decoupled_weight_decay=cfg.learn.weight_decay > 0,
        )
        self.epoch = 0
        self.lr_scale = 1.0  # multiplies the schedule (the plateau ladder's learning-rate bumps)
        # The update's pure stretches; :meth:`compile` swaps in their torch.compile-d versions.
        self._target_values_fn = self._target_values
        self._losses_fn = self._losses
        self.compiled = False

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

    # --- state -----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything the learner owns: the online and target networks (their ``v_max`` buffers are the
        C51 support), PopArt's statistics, Adam's state and the schedule's counters (``epoch``,
        ``lr_scale``). Tensors are the live ones (as ``nn.Module.state_dict``): copy them to keep them."""
        return {
            "network": self.net.state_dict(),
            "target": self.target.state_dict(),
            "popart": self.popart.state_dict(),
            "optimizer": self.opt.state_dict(),
            "epoch": self.epoch,
            "lr_scale": self.lr_scale,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output in place (tensors copied onto this learner's device).

        Adam keeps this learner's kernel choices (capturable and fused on CUDA) and, on CUDA, its own
        learning-rate tensor filled with the saved value, so a captured update keeps seeing it.
        """
        missing, unknown = set(_STATE_KEYS) - set(state), set(state) - set(_STATE_KEYS)
        if missing or unknown:
            raise ValueError(
                f"Learner.load_state_dict: missing keys {sorted(missing)}, unknown keys {sorted(unknown)}; "
                "pass the dict Learner.state_dict() returned"
            )
        self.net.load_state_dict(state["network"])
        self.target.load_state_dict(state["target"])
        self.popart.load_state_dict(state["popart"])
        self._load_optimizer(state["optimizer"])
        self.epoch = int(state["epoch"])
        self.lr_scale = float(state["lr_scale"])

    def _load_optimizer(self, saved: Mapping[str, Any]) -> None:
        """Adam's saved moments and hyperparameters under this optimiser's kernel choices and lr kind."""
        groups = []
        for g_saved, g_now in zip(saved["param_groups"], self.opt.param_groups, strict=True):
            g = {**g_saved, **{k: g_now[k] for k in _KERNEL_KEYS if k in g_now}}
            g["lr"] = float(g_saved["lr"])  # a float here; a tensor learning rate is refilled below
            groups.append(g)
        lr_tensors = [g["lr"] for g in self.opt.param_groups]
        self.opt.load_state_dict({**saved, "param_groups": groups})
        for g, lr in zip(self.opt.param_groups, lr_tensors, strict=True):
            if isinstance(lr, Tensor):
                lr.fill_(g["lr"])
                g["lr"] = lr

    # --- the update ----------------------------------------------------------------------

    @torch.no_grad()
    def _target_values(self, batch: Batch) -> tuple[list[Tensor], list[Tensor], list[Tensor], Tensor]:
        """Per branch: the target network's next-state distributions [B, K] at the online network's
        actions, IQN targets [B, Q] and MSE targets [B] (real units); and the reach the support must
        cover (:func:`~foxhunt.agent.support.target_reach`). Pure (reads the networks and PopArt,
        writes nothing): compiled by :meth:`compile`."""
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
        # The support covers the targets of the trained heads: an untrained IQN head's (IQN weight 0)
        # must not widen the C51 support it does not share.
        trained_iqn = [y for y, on in zip(y_iqn, self.net.trained.iqn, strict=True) if on]
        return probs, y_iqn, y_mse, target_reach(trained_iqn + y_mse)

    @torch.no_grad()
    def _targets(self, batch: Batch) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
        """Per branch: C51 target distributions [B, K] (projected onto the grown support), IQN targets
        [B, Q], MSE targets [B] (real units). ``update`` runs the same steps, the projection inside the
        loss (:meth:`_losses`)."""
        probs, y_iqn, y_mse, reach = self._target_values_fn(batch)
        self.support_growth.step(reach)
        return _project(probs, batch, self.net.support()), y_iqn, y_mse

    def compile(self) -> None:
        """``torch.compile`` the update's two pure stretches: the target computation (both networks'
        forwards on s', the double-Q selection, the targets, their quantile) and the loss (the online
        forward on s, the signals, every loss term, the priorities and statistics, and its backward
        through AOTAutograd). Replayed as a CUDA graph, the eager update is bound by launching
        thousands of small kernels; Inductor fuses their elementwise chains. The support growth,
        PopArt, clipping, Adam and the soft update stay eager (multi-tensor kernels already). Compile
        once per learner, before a CUDA-graph capture (the first call of each compiles; the capture
        must not)."""
        self._target_values_fn = torch.compile(self._target_values, fullgraph=True, dynamic=False)
        self._losses_fn = torch.compile(self._losses, fullgraph=True, dynamic=False)
        self.compiled = True

    def update(self, batch: Batch) -> tuple[Tensor, dict[str, Tensor]]:
        """One learner step; returns ``(new priorities [B], statistics as 0-dim tensors)``."""
        self.net.train()
        reset_noise([self.net, self.target])
        probs, y_iqn, y_mse, reach = self._target_values_fn(batch)
        self.support_growth.step(reach)
        self.popart.update(torch.cat(y_mse), popart_layers(self.net) + popart_layers(self.target))
        loss, priority, stats = self._losses_fn(batch, probs, y_iqn, y_mse, self.net.support())
        stats.update(self._optimise(loss))
        self.soft_update.step()
        stats["atoms/v_max"] = self.net.v_max.detach().clone()
        stats["experts/lambda"] = self.signals["balance_lambda"].clone()
        return priority, stats

    def _optimise(self, loss: Tensor) -> dict[str, Tensor]:
        """Backward, the two clipped gradients, Adam; the gradient norms before clipping."""
        learn = self.cfg.learn
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        g_q = torch.nn.utils.clip_grad_norm_(self.q_params, learn.clip_norm).detach()
        g_aux = torch.nn.utils.clip_grad_norm_(self.aux_params, learn.aux_clip_norm).detach()
        self.opt.step()
        return {"grad/q": g_q, "grad/aux": g_aux, "grad/total": torch.sqrt(g_q**2 + g_aux**2)}

    def _losses(
        self, batch: Batch, probs: list[Tensor], y_iqn: list[Tensor], y_mse: list[Tensor], z: Tensor
    ) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        """The C51 projection of ``probs`` onto the support ``z``, the online forward on s, the signals
        and the loss; ``(loss, priorities [B], statistics)``. Compiled by :meth:`compile`."""
        targets = Targets(
            c51=_project(probs, batch, z),
            iqn=[self.popart.normalise(y) for y in y_iqn],
            mse=[self.popart.normalise(y) for y in y_mse],
        )
        out = self.net(batch.state)
        terms, q_BA = value_terms(
            out,
            lambda o: self.net.expected_q(o, self.popart.denormalise),
            batch.action,
            batch.weight.float(),
            targets,
            self.taus,
            self.cfg.loss,
        )
        probs_BAK = [torch.softmax(b.logits, dim=-1) for b in out.branches]
        gates, stats = self._update_signals(out.gate, probs_BAK)
        terms |= regulariser_terms(out, probs_BAK, batch.aux, self.cfg.loss, gates)
        loss = total_loss(terms)
        cf_stats = {}
        if self.cfg.counterfactual.weight > 0 and isinstance(batch, CounterfactualBatch):  # relabelled
            l_cf, pairs = relabelled_loss(
                out, batch.cf, batch.action, probs, y_iqn, y_mse, batch.reward, batch.discount, z,
                self.popart.normalise, self.taus, self.cfg.loss,
            )  # fmt: skip
            loss = loss + self.cfg.counterfactual.weight * l_cf
            cf_stats = {"loss/counterfactual": l_cf.detach(), "counterfactual/pairs": pairs}
        stats = {
            "loss/total": loss.detach(),
            **{f"loss/{k.removeprefix('loss_')}": terms[k].detach() for k in LOSS_TERMS},
            "loss/aux": terms["aux_heads"].detach(),  # reported before its weight (aux = 0 still reads)
            **stats,
            **cf_stats,
        }
        for name, q in zip(BRANCHES, q_BA, strict=True):
            qd = q.detach()
            stats[q_key(name, "mean")] = qd.mean()
            stats[q_key(name, "spread")] = (qd.amax(1) - qd.amin(1)).mean()
        return loss, terms["td_error"], stats

    def _update_signals(self, gate_BE: Tensor, probs_BAK: list[Tensor]) -> tuple[Gates, dict[str, Tensor]]:
        """The adaptive signals' EMAs from this batch, in place, and the regularisers' gates they set:
        the atom-entropy bonus acts while the atom-utilisation EMA is under its floor; the MoE load
        balance's lambda follows the gate-entropy EMA (docs/design.md §6). Also the batch's readings
        (``atoms/utilisation``, ``experts/gate_entropy``) as statistics."""
        sig = self.signals
        util = torch.stack([atom_utilisation(p.detach()) for p in probs_BAK]).mean()
        sig.ema("atom_utilisation", util)
        entropy_on = (sig["atom_utilisation"] < self.cfg.loss.atom_utilisation_floor).to(util.dtype)
        h = gate_entropy(gate_BE)
        sig.ema("gate_entropy", h)
        lam = adaptive_lambda(sig["gate_entropy"], gate_BE.shape[1])
        sig.set("balance_lambda", torch.as_tensor(lam, dtype=torch.float32, device=gate_BE.device))
        sig.ema("expert_utilisation", gate_BE.detach().mean(0))
        stats = {"atoms/utilisation": util, "experts/gate_entropy": h.detach()}
        return Gates(entropy_on=entropy_on, balance_lambda=lam), stats
