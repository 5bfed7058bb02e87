"""The agent: network, learner, replay and exploration behind a pure ``policy`` (SPEC §7).

``policy(states, mode)`` maps ``[N, W]`` states to the four branch actions plus what the
environment's sizing needs (direction and magnitude convictions, Q-variance) and the auxiliary
heads' predictions, which the caller writes into the environment's aux slots before stepping, so
they appear in the *next* state (a one-step lag, identical in training and evaluation:
:meth:`PolicyOut.step`). ``Mode.GREEDY`` is the evaluation policy: argmax of (E_C51 + E_IQN) / 2 per
branch with the noisy layers at their means and no exploration. ``Mode.EXPLORE`` adds, each with
its coefficient (0 = off): Q-mean centering, a count bonus, Boltzmann sampling with a temperature
floor, Thompson sampling for the direction branch, and per-branch epsilon-greedy.

Conviction (the sizing's ``q_gap`` input, clamped there to ``[conviction_min, 1]``) is the gap
between a branch's best and second-best E[Q] over twice its running mean (the ``q_gap`` signal),
so a typical decision sizes at one half and a decisive one at full. The Q-variance is the variance
of the chosen direction's C51 distribution in units of the running ``|Q|`` reference squared.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum

import torch
from torch import Tensor

from foxhunt.agent import explore as ex
from foxhunt.agent.config import AgentConfig, Bootstrap
from foxhunt.agent.graph import GraphedUpdate
from foxhunt.agent.learner import Batch, Learner, plan_locked
from foxhunt.agent.network import QNetwork
from foxhunt.agent.replay import NStep, PrioritizedReplay, transition_fields
from foxhunt.agent.signals import Signals
from foxhunt.env.actions import ActionCodec
from foxhunt.env.config import BranchConfig
from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.market import AUX_TARGETS
from foxhunt.env.rewards import BRANCHES
from foxhunt.features.layout import STATE_LAYOUT
from foxhunt.train.diagnostics import q_key

_DIRECTION, _MAGNITUDE = BRANCHES.index("direction"), BRANCHES.index("magnitude")

AUX_RETURN_BOUND = 4.0
"""Soft bound (per-row vols) of the next-return prediction written into the next state's
``aux.next_return`` slot: ``b tanh(x / b)``. The slot feeds the network's own output back as an
input, and unbounded that loop can run away: a prediction out of the training range gives an input
out of range, answered by a larger prediction (alpha-6 market, seed 14, fold 2: the slot reached 3e11
within an epoch and the aux gradient overflowed at lr 3e-3). The targets have unit scale (|x| > 4 is
rare); tanh is odd, so the long/short mirror of the slot still holds. The loss sees the raw output."""


class UpdateMode(StrEnum):
    """How ``Agent.learn`` runs the learner update."""

    AUTO = "auto"  # a replayed CUDA graph on CUDA, eager elsewhere
    EAGER = "eager"  # always eager (benchmarks compare the two)
    GRAPH = "graph"  # always the CUDA graph (CUDA only)


class Mode(StrEnum):
    EXPLORE = "explore"  # training collection
    GREEDY = "greedy"  # evaluation: argmax, no noise, no exploration


@dataclass
class PolicyOut:
    actions: Tensor  # [N, n_branches] int64
    direction_conviction: Tensor  # [N] q_gap for the sizing (clamped there)
    magnitude_conviction: Tensor  # [N]
    q_variance: Tensor  # [N]
    aux: Tensor  # [N, aux slots] float32: the aux heads' predictions for the next state
    q_gap: Tensor  # [] mean best-minus-second direction gap (feeds the q_gap signal)

    def step(self, env: TradingEnv) -> tuple[Tensor, StepResult]:
        """Write the aux predictions (seen in the next state: a one-step lag), then step the env."""
        env.aux = self.aux
        return env.step(self.actions, self.direction_conviction, self.magnitude_conviction, self.q_variance)


@contextmanager
def _eval_mode(net: torch.nn.Module):
    was = net.training
    net.eval()
    try:
        yield
    finally:
        net.train(was)


class Agent:
    """One fold's agent on one device (a fresh one per fold: walk-forward folds are independent)."""

    def __init__(
        self,
        cfg: AgentConfig,
        branches: BranchConfig,
        *,
        device: torch.device | str = "cpu",
        seed: int = 0,
        replay_capacity: int | None = None,
    ) -> None:
        self.cfg = cfg
        self.branches = branches
        self.device = torch.device(device)
        torch.manual_seed(seed)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.net = QNetwork(cfg, branches).to(self.device)
        self.signals = Signals(cfg.network.experts, self.device)
        self.learner = Learner(self.net, cfg, self.signals)
        self.sizes = ActionCodec(branches).sizes
        self.counts = [torch.zeros(n, device=self.device) for n in self.sizes]
        self.replay = PrioritizedReplay(
            replay_capacity or cfg.replay.capacity,
            transition_fields(STATE_LAYOUT.width, len(self.sizes), len(AUX_TARGETS)),
            alpha=cfg.replay.alpha,
            beta=cfg.replay.beta,
            eps=cfg.replay.eps,
            device=self.device,
        )
        self.taus = torch.tensor(cfg.network.quantiles, dtype=torch.float32, device=self.device)
        self.temperature_boost = 1.0  # plateau response multiplies the Boltzmann temperature
        self.update_mode = UpdateMode.AUTO
        self._graph: GraphedUpdate | None = None  # CUDA: the captured learner update

    # --- acting ---------------------------------------------------------------------------

    @torch.no_grad()
    def policy(self, states: Tensor, mode: Mode) -> PolicyOut:
        """Branch actions, sizing inputs and aux predictions for ``states`` ``[N, W]``."""
        net, e = self.net, self.cfg.explore
        if mode is Mode.GREEDY:
            with _eval_mode(net):
                out = net(states)
        else:
            net.reset_noise(self.gen)
            out = net(states)
        z = net.support()
        qs = net.expected_q(out, self.learner.popart.denormalise)  # per branch [N, A], real units
        actions = []
        for i, q in enumerate(qs):
            if mode is Mode.GREEDY:
                actions.append(ex.greedy(q))
                continue
            q = q - self.cfg.learn.q_centering * q.mean(dim=1, keepdim=True)  # Q-mean centering
            q = ex.count_bonus(q, self.counts[i], e.count_bonus)
            if e.temperature > 0:
                scale = self.signals["q_abs"].clamp(min=1e-6)
                a = ex.boltzmann(
                    q / scale, e.temperature * self.temperature_boost, e.temperature_floor, self.gen
                )
            else:
                a = ex.greedy(q)
            if i == _DIRECTION and e.thompson > 0:
                b = out.branches[i]
                a = ex.thompson_direction(
                    torch.softmax(b.logits, -1),
                    z,
                    self.learner.popart.denormalise(b.quantiles),
                    self.taus,
                    e.thompson,
                    self.gen,
                    fallback_B=a,  # the share not sampled keeps its Boltzmann / count-bonus choice
                )
            a = ex.epsilon_greedy(a, q.shape[1], e.epsilon, self.gen)
            # index_add_ rather than bincount: bincount syncs with the host to size its output.
            self.counts[i].index_add_(0, a, torch.ones_like(a, dtype=self.counts[i].dtype))
            actions.append(a)
        acts = torch.stack(actions, dim=1)

        gap_ref = 2.0 * self.signals["q_gap"].clamp(min=1e-6)
        d_gap = _top2_gap(qs[_DIRECTION])
        m_gap = _top2_gap(qs[_MAGNITUDE]) if qs[_MAGNITUDE].shape[1] > 1 else torch.ones_like(d_gap) * gap_ref
        rows = torch.arange(states.shape[0], device=states.device)
        p_dir = torch.softmax(out.branches[_DIRECTION].logits, -1)[rows, acts[:, _DIRECTION]]
        mean = (p_dir * z).sum(-1)
        var = (p_dir * (z - mean[:, None]).pow(2)).sum(-1)
        q_var = var / self.signals["q_abs"].clamp(min=1e-6).pow(2)
        p_up = torch.softmax(out.aux_direction, -1)[:, 1]
        ret = AUX_RETURN_BOUND * torch.tanh(out.aux_return / AUX_RETURN_BOUND)  # bounded: see the constant
        aux = torch.cat(
            [ret[:, None], (2.0 * p_up - 1.0)[:, None], torch.softmax(out.aux_outcome, -1)], dim=1
        )
        return PolicyOut(
            actions=acts,
            direction_conviction=d_gap / gap_ref,
            magnitude_conviction=m_gap / gap_ref,
            q_variance=q_var,
            aux=aux.float(),
            q_gap=d_gap.mean(),
        )

    # --- collection and learning ----------------------------------------------------------

    def nstep(self, n_envs: int) -> NStep:
        """The n-step accumulator of this agent's learn config for ``n_envs`` parallel episodes."""
        learn = self.cfg.learn
        stop = _decision_state if learn.bootstrap is Bootstrap.DECISION else None
        return NStep(n_envs, learn.n_step, learn.gamma, self.device, stop=stop)

    def collect(
        self, env: TradingEnv, obs: Tensor, nstep: NStep, steps: int
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``steps`` steps of all env episodes into replay (n-step), on the device; returns the last obs."""
        reward_sum = torch.zeros((), device=self.device, dtype=torch.float64)
        sq_sum = torch.zeros_like(reward_sum)
        live_sum = torch.zeros_like(reward_sum)
        bonus_abs, total_abs = torch.zeros_like(reward_sum), torch.zeros_like(reward_sum)
        for _ in range(steps):
            pol = self.policy(obs, Mode.EXPLORE)
            self.signals.ema("q_gap", pol.q_gap)  # acting statistics feed the signals (collection only)
            nxt, res = pol.step(env)
            aux_t = env.market.aux_targets
            rows = env.state.row - res.written.to(torch.int64)  # the row the action was taken on
            aux = (
                aux_t[rows]
                if aux_t is not None
                else torch.full((obs.shape[0], len(AUX_TARGETS)), float("nan"), device=obs.device)
            )
            done = env.state.done | ~res.written
            # Replay learns from the action that acted: under the plan lock the picked direction was
            # ignored (realised Hold) and the Kelly cap may have lowered the magnitude.
            acted = pol.actions.clone()
            acted[:, _DIRECTION] = torch.where(res.written, res.realised_direction, acted[:, _DIRECTION])
            acted[:, _MAGNITUDE] = torch.where(res.written, res.realised_magnitude, acted[:, _MAGNITUDE])
            out = nstep.push(obs, acted, res.reward.float(), done, nxt, aux, valid=res.written)
            if out is not None:
                self.replay.add(out)
            r = res.reward.to(torch.float64)
            comp = res.components.abs().to(torch.float64)  # [N, len(COMPONENTS)], column 0 the PnL
            bonus_abs += comp[:, 1:].sum()
            total_abs += comp.sum()
            reward_sum += r.sum()
            sq_sum += (r * r).sum()
            live_sum += res.written.to(torch.float64).sum()
            obs = nxt
        mean = reward_sum / live_sum.clamp(min=1)
        std = (sq_sum / live_sum.clamp(min=1) - mean * mean).clamp(min=0).sqrt()
        sharpe = torch.where(std > 0, mean / std, torch.zeros_like(std))
        self.signals.ema("sharpe", sharpe.float())
        share = torch.where(
            total_abs > 0, bonus_abs / total_abs.clamp(min=1e-12), torch.zeros_like(total_abs)
        )
        self.signals.ema("bonus_share", share.float())  # the shaping terms' share of |reward|
        return obs, {"train_sharpe": sharpe, "reward_mean": mean, "bonus_share": share}

    def learn(
        self, updates: int, batch_size: int, sink: Callable[[dict[str, Tensor]], None] | None = None
    ) -> None:
        """``updates`` learner steps from replay. ``sink`` receives each update's statistics (device
        tensors, valid until the next update: on CUDA the update is a replayed graph,
        :class:`~foxhunt.agent.graph.GraphedUpdate`)."""
        for _ in range(updates):
            data, idx, weight = self.replay.sample(batch_size, self.gen)
            batch = Batch(weight=weight, **data)
            graph = self.update_mode is UpdateMode.GRAPH or (
                self.update_mode is UpdateMode.AUTO and self.device.type == "cuda"
            )
            if graph:
                if self._graph is None or self._graph.batch_size != batch_size:
                    self._graph = GraphedUpdate(self.learner, batch)
                priority, stats = self._graph.update(batch)
            else:
                priority, stats = self.learner.update(batch)
            boost = self.cfg.replay.decision_boost
            if boost > 0:  # decisions are rare under a plan lock: draw them more often (ReplayConfig)
                free = _decision_state(batch.state)
                priority = priority * (1.0 + boost * free.to(priority.dtype))
            self.replay.update_priorities(idx, priority)
            self.signals.ema("q_abs", stats[q_key(BRANCHES[_DIRECTION], "spread")].abs() + 1e-3)
            if sink is not None:
                sink(stats)


def _decision_state(state_NW: Tensor) -> Tensor:
    """States where the direction acts again (no plan lock): where a ``Bootstrap.DECISION`` window ends."""
    return ~plan_locked(state_NW)


def _top2_gap(q_NA: Tensor) -> Tensor:
    top = torch.topk(q_NA, 2, dim=1).values
    return top[:, 0] - top[:, 1]
