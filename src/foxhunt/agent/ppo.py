"""PPO, the second learner (``agent.algo = "ppo"``, docs/ppo.md): a factored actor-critic on the
project's encoder, collected through the same :class:`~foxhunt.agent.collect.Collector` as DQN.

* :class:`ActorCritic` -- the network: the DQN network's encoder (variable selection, GRN trunk,
  mixture of experts: :mod:`foxhunt.agent.network`'s modules, so the state layout stays one source of
  truth), then one categorical head per action branch (the order-type and urgency heads also read the
  order-flow columns, as the Q network's streams do) and a value head. With ``symmetry = mirror`` the
  outputs are averaged over a state and its long/short mirror image (Long <-> Short relabelled): the
  policy is equivariant, the value invariant.
* :class:`PPOActor` -- the policy as training, the backtest, committees, checkpoints and serving
  read it: ``actor(states, mode)`` samples each branch (``Mode.EXPLORE``, Gumbel-max draws from the
  agent's generator: a capturable step) or takes each branch's argmax (``Mode.GREEDY``). Its "values"
  (what a committee averages and the diagnostics read as E[Q]) are the branches' log-probabilities.
  The sizing inputs are neutral (conviction 1, Q-variance 0): the magnitude branch sizes.
* :class:`RolloutStore` -- the collector's sink: the epoch's staged sequence
  (:class:`~foxhunt.agent.collect.Rollout`).
* :class:`PPOLearner` -- ``update(rollout)``: the old log-probabilities and values in one no-grad pass,
  GAE on scaled rewards, then ``epochs`` passes of ``minibatches`` shuffled minibatches of the clipped
  loss (:mod:`foxhunt.agent.ppo_loss`), Adam with a clipped gradient.
* :class:`PPOAgent` -- the bundle training drives, with :class:`~foxhunt.agent.agent.Agent`'s public
  surface (collect, learn, start_epoch, adjust, the plateau handles, state_dict / load_state_dict).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from foxhunt import seeding
from foxhunt.agent import explore as ex
from foxhunt.agent.actor import CompiledExploring, CompileScope, Mode, PolicyOut, _eval_mode, _top2_gap
from foxhunt.agent.agent import PlateauHandles, Restore, UpdateMode
from foxhunt.agent.collect import CachedCollector, Rollout, StepMode
from foxhunt.agent.config import AgentConfig, Bootstrap, CurriculumConfig, LearnConfig, Symmetry
from foxhunt.agent.learner import plan_locked
from foxhunt.agent.network import GatedResidualBlock, MixtureOfExperts, VariableSelection, input_mask
from foxhunt.agent.ppo_loss import (
    LossWeights,
    advantage_moments,
    all_action_loss,
    branch_masks,
    counterfactual_advantages,
    gae,
    log_probs_entropy,
    ppo_loss,
)
from foxhunt.agent.signals import Signals
from foxhunt.domain.actions import BRANCHES, ActionCodec, BranchConfig, Direction
from foxhunt.env.config import EnvConfig
from foxhunt.env.core import TradingEnv
from foxhunt.env.counterfactual import default_horizon
from foxhunt.env.graph import CapturablePolicy
from foxhunt.env.market import MarketTensors
from foxhunt.features.layout import STATE_LAYOUT, STATE_MIRROR

PPO_POLICY_ENTRIES = ("actor_critic", "signals")
"""The entries of :meth:`PPOActor.state_dict` (a DQN policy's are ``network``, ``popart``, ``signals``:
a checkpoint's entries say which learner made it, :class:`foxhunt.policy.checkpoint.Fingerprint`)."""

_DIRECTION, _MAGNITUDE = BRANCHES.index("direction"), BRANCHES.index("magnitude")
_CHUNK = 65_536  # rows per no-grad forward over a rollout


@dataclass
class ACOut:
    logits: tuple[Tensor, ...]  # per branch [B, A_b]
    value: Tensor  # [B], scaled-return units
    gate: Tensor  # [B, E]


def _layer(n_in: int, n_out: int, std: float) -> nn.Linear:
    """Orthogonal weights at gain ``std``, zero bias (CleanRL's ``layer_init``)."""
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.zeros_(layer.bias)
    return layer


def _head(n_in: int, hidden: int, n_out: int, out_std: float) -> nn.Sequential:
    return nn.Sequential(_layer(n_in, hidden, 2**0.5), nn.ELU(), _layer(hidden, n_out, out_std))


class ActorCritic(nn.Module):
    """The PPO network (module docstring): encoder, a logit head per branch, a value head."""

    input_mask: Tensor
    order_flow_index: Tensor

    def __init__(self, cfg: AgentConfig, branches: BranchConfig) -> None:
        super().__init__()
        net = cfg.network
        self.cfg = net
        self.branch_sizes = tuple(int(getattr(branches, name)) for name in BRANCHES)
        self.register_buffer(
            "order_flow_index",
            torch.tensor([STATE_LAYOUT.index(n) for n in net.order_flow_features], dtype=torch.long),
        )
        self.register_buffer("input_mask", input_mask(None))
        self.register_buffer("mirror_source", torch.tensor(STATE_MIRROR.source, dtype=torch.long))
        self.register_buffer("mirror_sign", torch.tensor(STATE_MIRROR.sign, dtype=torch.float32))
        swap = list(range(self.branch_sizes[_DIRECTION]))
        swap[Direction.LONG], swap[Direction.SHORT] = int(Direction.SHORT), int(Direction.LONG)
        self.register_buffer("mirror_direction", torch.tensor(swap, dtype=torch.long))
        self.selection = VariableSelection(net)
        self.trunk = nn.Sequential(*(GatedResidualBlock(net.hidden) for _ in range(net.trunk_layers)))
        self.moe = MixtureOfExperts(net)
        flow = len(net.order_flow_features)
        extra = {"order_type": flow, "urgency": flow}
        # CleanRL's initialisation: the policy's output layers at gain 0.01 (every branch starts near
        # uniform), the value's at 1.
        self.policy_heads = nn.ModuleList(
            _head(net.hidden + extra.get(name, 0), net.head_hidden, size, 0.01)
            for name, size in zip(BRANCHES, self.branch_sizes, strict=True)
        )
        self.value = _head(net.hidden, net.head_hidden, 1, 1.0)

    def forward(self, state_BW: Tensor) -> ACOut:
        state_BW = state_BW * self.input_mask
        if self.cfg.symmetry is not Symmetry.MIRROR:
            return self._forward(state_BW)
        b = state_BW.shape[0]
        image = state_BW.index_select(1, self.mirror_source) * self.mirror_sign
        both = self._forward(torch.cat([state_BW, image]))

        def sym(x: Tensor, perm: Tensor | None = None) -> Tensor:
            own, mirrored = x.unflatten(0, (2, b)).unbind(0)
            return 0.5 * (own + (mirrored if perm is None else mirrored.index_select(1, perm)))

        logits = tuple(
            sym(lg, self.mirror_direction if i == _DIRECTION else None) for i, lg in enumerate(both.logits)
        )
        return ACOut(logits=logits, value=sym(both.value), gate=sym(both.gate))

    def _forward(self, state_BW: Tensor) -> ACOut:
        x_BH, _ = self.selection(state_BW)
        x_BH = self.trunk(x_BH)
        mix_BH, gate_BE = self.moe(x_BH, state_BW)
        h_BH = x_BH + mix_BH
        flow_BF = state_BW.index_select(1, self.order_flow_index)
        logits = tuple(
            head(torch.cat([h_BH, flow_BF], 1) if name in ("order_type", "urgency") else h_BH)
            for name, head in zip(BRANCHES, self.policy_heads, strict=True)
        )
        return ACOut(logits=logits, value=self.value(h_BH).squeeze(-1), gate=gate_BE)


def _log_probs(out: ACOut) -> tuple[Tensor, ...]:
    return tuple(F.log_softmax(lg, dim=-1) for lg in out.logits)


class PPOActor:
    """The PPO policy on one device: ``actor(states, mode) -> PolicyOut`` (module docstring); what the
    backtest, committees (:func:`foxhunt.agent.committee.committee_decision`: the members' mean
    log-probabilities), checkpoints and serving read, as they read :class:`~foxhunt.agent.actor.Actor`."""

    def __init__(
        self,
        net: ActorCritic,
        signals: Signals,
        branches: BranchConfig,
        generator: torch.Generator,
        curriculum: CurriculumConfig | None = None,
    ):
        self.net, self.signals, self.gen = net, signals, generator
        self.sizes = ActionCodec(branches).sizes
        self._greedy: CapturablePolicy | None = None
        self._forward: Callable[[Tensor], ACOut] = net
        self.compiled = False
        # agent.curriculum, as the DQN actor's: the held branches (set per epoch by hold, in place, so
        # a captured step reads the current mask) at their default choice (Full, Market, Normal).
        self.curriculum = curriculum if curriculum is not None and curriculum.on else None
        device = signals.device
        self.held = torch.zeros(len(self.sizes), dtype=torch.bool, device=device)
        self.held_at = torch.tensor([0, self.sizes[_MAGNITUDE] - 1, 0, 0], device=device)

    @torch.no_grad()
    def __call__(self, states: Tensor, mode: Mode) -> PolicyOut:
        if mode is Mode.EXPLORE:
            return self.explore(states, self.gen)
        out, lp = self.greedy_values(states)
        acts = torch.stack([x.argmax(-1) for x in lp], dim=1)
        if self.curriculum is not None:  # the held branches at their default choice (agent.curriculum)
            acts = torch.where(self.held, self.held_at, acts)
        return self.decision(out, lp, acts)

    def explore(self, states: Tensor, draws: torch.Generator | ex.Dice) -> PolicyOut:
        """:attr:`Mode.EXPLORE`'s decision, each branch sampled with uniforms from ``draws``: the agent's
        generator, or a :class:`~foxhunt.agent.explore.Dice` (:class:`foxhunt.agent.actor.CompiledExploring`
        compiles this on numbers drawn before)."""
        out = self._forward(states)
        lp = _log_probs(out)
        acts = torch.stack([self._sample(x, draws) for x in lp], dim=1)
        if self.curriculum is not None:
            acts = torch.where(self.held, self.held_at, acts)
        return self.decision(out, lp, acts)

    def hold(self, epoch: int) -> None:
        """The curriculum's mask at fold epoch ``epoch`` (``agent.curriculum``; in place)."""
        if self.curriculum is not None:
            self.held.copy_(torch.tensor(self.curriculum.held(epoch), device=self.held.device))

    def _sample(self, log_probs: Tensor, draws: torch.Generator | ex.Dice) -> Tensor:
        """One draw per row (Gumbel-max: argmax(log p - log(-log u))): device-only, from the agent's
        generator, so a captured collection step replays it."""
        u = ex.uniform(draws, log_probs.shape, log_probs.device)
        return (log_probs - torch.log(-torch.log(u.clamp(1e-20, 1.0 - 1e-7)))).argmax(-1)

    def greedy_values(self, states: Tensor) -> tuple[ACOut, tuple[Tensor, ...]]:
        """The network's outputs and each branch's log-probabilities ``[N, A]`` (the "values" a committee
        averages and the greedy mode takes the argmax of)."""
        with _eval_mode(self.net):
            out = self.net(states)
        return out, _log_probs(out)

    @torch.no_grad()
    def expected_q(self, states: Tensor) -> tuple[Tensor, ...]:
        """Per branch ``[N, A]`` log-probabilities of the greedy network: the diagnostics' direction gap
        reads log pi(Long) - log pi(Short), the committee their mean."""
        return self.greedy_values(states)[1]

    def acting_q(self, qs: tuple[Tensor, ...]) -> list[Tensor]:
        """The values a choice is made on: the log-probabilities as they are (no entry margin)."""
        return list(qs)

    def decision(self, out: ACOut, qs: tuple[Tensor, ...], acts: Tensor) -> PolicyOut:
        """The decision for ``acts``: neutral sizing inputs (conviction 1, Q-variance 0; the magnitude
        branch sizes), no aux predictions (zeros, the value the environment starts its slots at)."""
        n = acts.shape[0]
        one = torch.ones(n, device=acts.device)
        return PolicyOut(
            actions=acts,
            direction_conviction=one,
            magnitude_conviction=one,
            q_variance=torch.zeros_like(one),
            aux=torch.zeros(n, STATE_LAYOUT.group("aux").width, device=acts.device),
            q_gap=_top2_gap(qs[_DIRECTION]).mean(),
        )

    def greedy(self) -> CapturablePolicy:
        """The evaluation policy ``(state, env) -> PolicyOut`` (argmax per branch), capturable."""
        if self._greedy is None:
            self._greedy = CapturablePolicy(lambda obs, env: self(obs, Mode.GREEDY))
        return self._greedy

    def compile(self, backend: str = "inductor") -> None:
        """``torch.compile`` the exploring forward (the draws stay eager), as the DQN actor's."""
        if not self.compiled:
            self._forward = torch.compile(self.net, fullgraph=True, dynamic=False, backend=backend)
            self.compiled = True

    def state_dict(self) -> dict[str, dict[str, Tensor]]:
        """What acting reads (:data:`PPO_POLICY_ENTRIES`)."""
        return {"actor_critic": self.net.state_dict(), "signals": self.signals.state_dict()}

    def load_state_dict(self, state: Mapping[str, Mapping[str, Tensor]]) -> None:
        self.net.load_state_dict(state["actor_critic"])
        self.signals.load_state_dict(dict(state["signals"]))


class PPOExploring:
    """The PPO policy as the collector calls it (:class:`~foxhunt.agent.collect.CollectingPolicy`)."""

    def __init__(self, actor: PPOActor) -> None:
        self.actor = actor
        self.generator = actor.gen
        self.lean: CompiledExploring | None = None  # compile(CompileScope.DECISION)

    def __call__(self, obs: Tensor) -> PolicyOut:
        return self.actor(obs, Mode.EXPLORE) if self.lean is None else self.lean(obs)

    def mutable(self) -> list[Tensor]:
        return []  # the draws change only the generator, which a capture registers

    def capture_key(self) -> int:
        return 0

    def compile(self, scope: CompileScope = CompileScope.FORWARD, backend: str = "inductor") -> None:
        """The forward compiled (:meth:`PPOActor.compile`), or the whole decision, the sampling on the
        device included (:class:`~foxhunt.agent.actor.CompiledExploring`: no value head)."""
        if scope is CompileScope.FORWARD:
            self.actor.compile(backend)
        elif self.lean is None:
            self.lean = CompiledExploring(self.actor, None, backend)


class RolloutStore:
    """The collector's sink for PPO (:class:`~foxhunt.agent.collect.RolloutSink`): the last rollout."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.rollout: Rollout | None = None

    def take(self, rollout: Rollout) -> None:
        self.rollout = rollout

    def __len__(self) -> int:
        return 0 if self.rollout is None else int(self.rollout.rewards.numel())


@dataclass
class _Batch:
    """A flattened rollout: what the minibatches index."""

    state: Tensor
    action: Tensor
    masks: Tensor
    old_logp: Tensor
    old_value: Tensor
    advantage: Tensor
    ret: Tensor
    valid: Tensor
    cf_adv: Tensor | None = None  # [R, K] counterfactual advantages (0 off the entries)
    cf_old: tuple[Tensor, ...] = ()  # per execution branch [R, A_b] old log-probabilities
    cf_mask: Tensor | None = None  # [R, execution branches]: the branch acted and has counterfactuals


class PPOLearner:
    """``update(rollout, generator, sink)``: CleanRL's PPO update on one rollout (module docstring).

    Rewards are divided by a running scale, the standard deviation of the rollouts' discounted returns
    (an EMA at ``reward_scale_rate``, CleanRL's reward normalisation), so the value head learns returns
    of unit scale and the value clip means the same on every market.

    With ``agent.counterfactual.weight > 0`` the rollout carries every entry's counterfactual windows
    and the loss adds the clipped all-action term of the execution branches
    (:func:`~foxhunt.agent.ppo_loss.all_action_loss`) at that weight; ``held`` (the actor's
    curriculum mask) drops a held branch's log-probability, entropy and counterfactual terms."""

    def __init__(
        self,
        net: ActorCritic,
        cfg: AgentConfig,
        signals: Signals,
        epochs: int,
        held: Tensor | None = None,
    ) -> None:
        self.net, self.cfg, self.signals = net, cfg.ppo, signals
        self.cf_weight = cfg.counterfactual.weight
        self.held = held
        self.epochs = max(1, epochs)
        self.opt = torch.optim.Adam(net.parameters(), lr=self.cfg.lr, eps=1e-5)
        self.return_scale = torch.zeros((), device=signals.device)  # 0: not measured yet
        self.lr_scale = 1.0
        p = self.cfg
        self.weights = LossWeights(p.clip, p.value_clip, p.value_coef, p.entropy)

    def set_epoch(self, epoch: int) -> float:
        """The learning rate of epoch ``epoch``: annealed linearly by ``anneal`` over the fold's epochs."""
        lr = self.cfg.lr * (1.0 - self.cfg.anneal * epoch / self.epochs) * self.lr_scale
        for group in self.opt.param_groups:
            group["lr"] = lr
        return lr

    @torch.no_grad()
    def _prepare(self, r: Rollout) -> _Batch:
        """Old log-probabilities and values (one no-grad pass), the scaled rewards' GAE, flattened."""
        steps, n = r.rewards.shape
        flat = r.states.reshape((steps + 1) * n, -1)
        outs = [self.net(flat[i : i + _CHUNK]) for i in range(0, flat.shape[0], _CHUNK)]
        values = torch.cat([o.value for o in outs]).view(steps + 1, n)
        logits = tuple(torch.cat([o.logits[b] for o in outs])[: steps * n] for b in range(len(BRANCHES)))
        state = flat[: steps * n]
        action = r.actions.reshape(steps * n, -1)
        valid = r.valid.reshape(-1)
        masks = branch_masks(action[:, _DIRECTION], ~plan_locked(state) & valid)
        if self.held is not None:  # agent.curriculum: a held branch chose nothing (its default)
            masks = masks * (~self.held).to(masks.dtype)
        old_logp, _ = log_probs_entropy(logits, action, masks)
        rewards = torch.where(r.valid, r.rewards, torch.zeros_like(r.rewards))
        scale = self._scale(rewards, r.dones)
        adv, ret = gae(
            rewards / scale, values[:steps], r.dones, values[steps], self.cfg.gamma, self.cfg.gae_lambda
        )
        batch = _Batch(
            state,
            action,
            masks,
            old_logp,
            values[:steps].reshape(-1),
            adv.reshape(-1),
            ret.reshape(-1),
            valid,
        )
        if self.cf_weight > 0 and r.cf is not None:
            self._counterfactuals(batch, r, logits, values, scale)
        return batch

    def _counterfactuals(
        self, b: _Batch, r: Rollout, logits: tuple[Tensor, ...], values: Tensor, scale: Tensor
    ) -> None:
        """Each entry's counterfactual advantages (:func:`~foxhunt.agent.ppo_loss.counterfactual_advantages`)
        into ``b``: the variants' window returns in the critic's units (divided by the return scale),
        bootstrapped by the critic's old value of the taken window's end state, centred under the old
        policy."""
        assert r.cf is not None
        n = r.rewards.shape[1]
        old = tuple(torch.log_softmax(lg, dim=-1) for lg in logits[1:])
        rows = r.cf.rows
        taken = b.action.index_select(0, rows)[:, _MAGNITUDE : _MAGNITUDE + 1]  # any block's taken column
        m = r.cf.length[:, : old[0].shape[1]].gather(1, taken).squeeze(1)
        end = rows + m * n  # s_{t+m} of the same episode (t + m <= T: windows stop at the sequence's end)
        adv = counterfactual_advantages(
            r.cf.ret / scale,
            r.cf.discount,
            values.reshape(-1).index_select(0, end),
            tuple(o.index_select(0, rows).exp() for o in old),
        )
        b.cf_adv = torch.zeros(b.state.shape[0], adv.shape[1], device=adv.device).index_copy_(0, rows, adv)
        has = torch.zeros(b.state.shape[0], device=adv.device).index_fill_(0, rows, 1.0)
        b.cf_old = old
        b.cf_mask = b.masks[:, 1:] * has[:, None]

    def _scale(self, rewards: Tensor, dones: Tensor) -> Tensor:
        """The running return scale, updated with this rollout's discounted returns (no host read)."""
        rate = self.cfg.reward_scale_rate
        if rate == 0:
            return torch.ones((), device=rewards.device)
        g = torch.zeros_like(rewards[0])
        returns = torch.empty_like(rewards)
        for t in range(rewards.shape[0] - 1, -1, -1):
            g = rewards[t] + self.cfg.gamma * g * (~dones[t]).to(g.dtype)
            returns[t] = g
        std = returns.std().clamp(min=1e-8)
        s = self.return_scale
        s.copy_(torch.where(s > 0, (1 - rate) * s + rate * std, std))
        return s

    def update(
        self, rollout: Rollout, generator: torch.Generator, sink: Callable[[dict[str, Tensor]], None] | None
    ) -> None:
        """``epochs`` passes of ``minibatches`` minibatches over ``rollout``; each step's statistics to
        ``sink``."""
        self.net.train()
        b = self._prepare(rollout)
        rows = b.state.shape[0]
        size = max(1, rows // self.cfg.minibatches)
        for _ in range(self.cfg.epochs):
            order = torch.randperm(rows, generator=generator, device=generator.device).to(b.state.device)
            kl = None
            for lo in range(0, rows - size + 1, size):
                idx = order[lo : lo + size]
                stats = self._step(b, idx)
                kl = stats["ppo/approx_kl"]
                if sink is not None:
                    sink(stats)
            if self.cfg.target_kl > 0 and kl is not None and float(kl) > self.cfg.target_kl:
                break  # a host read, only with the early stop on

    def _step(self, b: _Batch, idx: Tensor) -> dict[str, Tensor]:
        out = self.net(b.state[idx])
        masks = b.masks[idx]
        logp, ent = log_probs_entropy(out.logits, b.action[idx], masks)
        loss, stats = ppo_loss(
            logp,
            b.old_logp[idx],
            b.advantage[idx],
            ent,
            masks,
            out.value,
            b.old_value[idx],
            b.ret[idx],
            b.valid[idx],
            self.weights,
        )
        if b.cf_adv is not None and b.cf_mask is not None:
            _, unit = advantage_moments(b.advantage[idx], masks[:, 0])
            old = tuple(o[idx] for o in b.cf_old)
            l_cf, per = all_action_loss(
                out.logits[1:], old, b.cf_adv[idx], b.cf_mask[idx], self.cfg.clip, unit
            )
            loss = loss + self.cf_weight * l_cf
            stats["loss/total"] = loss.detach()
            stats["loss/counterfactual"] = l_cf.detach()
            stats["counterfactual/entries"] = b.cf_mask[idx].amax(1).sum()  # rows with a branch trained
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        stats["grad/total"] = torch.nn.utils.clip_grad_norm_(
            self.net.parameters(), self.cfg.max_grad_norm
        ).detach()
        self.opt.step()
        self.signals.ema("expert_utilisation", out.gate.detach().mean(0))
        stats["ppo/return_scale"] = self.return_scale.clone()
        return stats

    def state_dict(self) -> dict[str, Any]:
        return {
            "network": self.net.state_dict(),
            "optimizer": self.opt.state_dict(),
            "return_scale": self.return_scale,
            "lr_scale": self.lr_scale,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.net.load_state_dict(state["network"])
        self.opt.load_state_dict(state["optimizer"])
        self.return_scale.copy_(state["return_scale"])
        self.lr_scale = float(state["lr_scale"])


class PPOAgent:
    """One fold's PPO agent on one device, driven through :class:`~foxhunt.agent.agent.Agent`'s public
    surface (so the training loop, checkpoints and the trained-policy readers take either)."""

    def __init__(
        self,
        cfg: AgentConfig,
        branches: BranchConfig,
        *,
        device: torch.device | str = "cpu",
        seed: int = 0,
        epochs: int = 1,
    ) -> None:
        self.cfg, self.branches = cfg, branches
        self.device = torch.device(device)
        self.gen = seeding.generator(seed, self.device)
        with seeding.seeded_torch(seed):
            net = ActorCritic(cfg, branches).to(self.device)
            self.noise_rng_state = torch.get_rng_state()
        signals = Signals(cfg.network.experts, self.device)
        self.policy = PPOActor(net, signals, branches, self.gen, cfg.curriculum)
        held = self.policy.held if cfg.curriculum.on else None
        self.learner = PPOLearner(net, cfg, signals, epochs, held)
        self.replay = RolloutStore(self.device)
        self.plateau = PlateauHandles(self.learner.opt, list(net.policy_heads.parameters()), self.gen)
        self.update_mode = UpdateMode.AUTO
        self.step_mode = StepMode.AUTO
        self._collection = CachedCollector(
            lambda: PPOExploring(self.policy),
            self.replay,
            signals,
            learn=self._windows,  # the counterfactual windows depend on the env (its longest entry)
            counterfactual=cfg.counterfactual,
        )

    def collect(
        self, market: MarketTensors, env_cfg: EnvConfig, starts: Tensor, steps: int
    ) -> dict[str, Tensor]:
        """One rollout of ``steps`` steps of the sampling policy from rows ``starts`` into :attr:`replay`
        (the collector of the DQN agent, its sink the rollout store)."""
        return self._collection.collect(market, env_cfg, starts, steps, self.step_mode)

    def _windows(self, env: TradingEnv) -> LearnConfig:
        """The counterfactual windows of ``env`` (``agent.counterfactual``): PPO's discount, each cut
        at the next decision state (an entry's plan closed, flat) within ``horizon`` steps (0: the
        env's longest entry, :func:`~foxhunt.env.counterfactual.default_horizon`), or the sequence's
        end. Only the counterfactual stage reads it (the rollout sink has no n-step windows)."""
        if self.cfg.counterfactual.weight == 0:
            return self.cfg.learn
        horizon = self.cfg.counterfactual.horizon or default_horizon(env)
        update = {"gamma": self.cfg.ppo.gamma, "n_step": horizon, "bootstrap": Bootstrap.DECISION}
        return self.cfg.learn.model_copy(update=update)

    def learn(
        self, updates: int, batch_size: int, sink: Callable[[dict[str, Tensor]], None] | None = None
    ) -> None:
        """The PPO update on the epoch's rollout (``agent.ppo.epochs`` x ``minibatches`` steps; the DQN
        arguments ``updates`` and ``batch_size`` are not read)."""
        del updates, batch_size
        if self.replay.rollout is not None:
            self.learner.update(self.replay.rollout, self.gen, sink)

    def start_epoch(self, epoch: int) -> float:
        """Start epoch ``epoch`` of the learning-rate annealing and of the branch curriculum
        (``agent.curriculum``); returns its learning rate."""
        self.policy.hold(epoch)
        return self.learner.set_epoch(epoch)

    def adjust(self, *, lr: float = 1.0, temperature: float = 1.0) -> None:
        """The plateau ladder's lasting responses: the learning rate (a temperature has nothing to act on)."""
        del temperature
        self.learner.lr_scale *= lr

    def set_input_mask(self, mask: Tensor) -> None:
        self.policy.net.input_mask.copy_(mask)

    def expert_utilisation(self) -> Tensor:
        return self.policy.signals["expert_utilisation"]

    def state_dict(self) -> dict[str, Any]:
        """``{"policy": ..., "training": ...}`` as :meth:`Agent.state_dict`: no replay (on-policy: a
        resumed fold collects afresh)."""
        training = {"learner": self.learner.state_dict(), "generator": self.gen.get_state()}
        return {"policy": self.policy.state_dict(), "training": training}

    def load_state_dict(self, state: Mapping[str, Any], restore: Restore = Restore.ALL) -> None:
        if restore is Restore.POLICY:
            self.policy.load_state_dict(state["policy"])
            return
        training = state["training"]
        self.learner.load_state_dict(_copied(training["learner"]))
        if restore is Restore.WEIGHTS:
            return
        self.gen.set_state(training["generator"].cpu())
        self.policy.signals.load_state_dict(dict(state["policy"]["signals"]))


def _copied(tree: Any) -> Any:
    if isinstance(tree, Tensor):
        return tree.clone()
    if isinstance(tree, Mapping):
        return {k: _copied(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(_copied(v) for v in tree)
    return tree
