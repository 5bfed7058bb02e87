"""The branching, dueling, distributional Q network (docs/design.md §6).

Data flow and shapes (B batch, W = ``STATE_LAYOUT.width``, G feature groups, H = ``hidden``,
E = ``experts``, A_b the values of branch b, K = ``atoms``, Q = ``len(quantiles)``)::

    state [B, W]  (x input_mask [W]: 1, or 0 at the feature columns the input screen left out)
      ├─ variable selection: emb_g = Linear_g(state[:, group g's real slots])   [B, G, H]
      │                      w = softmax(MLP(state))                           [B, G]   -> NetOut.selection
      │                      x = Σ_g w_g · emb_g                                [B, H]
      ├─ GRN trunk: trunk_layers gated residual blocks (Lim et al. 2021)        [B, H]
      ├─ mixture of experts: gate = softmax(Linear(state)) (zero-initialised)   [B, E]   -> NetOut.gate
      │                      h = x + Σ_k gate_k · expert_k(x)  (residual)       [B, H]
      ├─ value stream V(h)                                     C51 [B, 1, K], IQN [B, 1, Q], MSE [B, 1]
      ├─ advantage streams, BRANCHES order (direction, magnitude, order_type, urgency):
      │     direction   A(h)
      │     magnitude   A(h ‖ E_C51[Q_direction] / Δz)  (detached; E_IQN if C51 off) [B, H + A_direction]
      │     order_type  A(h ‖ state[:, order-flow columns])               [B, H + 3]
      │     urgency     A(h ‖ state[:, order-flow columns])               [B, H + 3]
      │   each: C51 [B, A_b, K], IQN [B, A_b, Q], MSE [B, A_b];  dueling: V + A - mean_A(A)
      └─ auxiliary trunk (separate, shares nothing with the Q trunk): MLP(state) [B, aux_hidden]
            next-bar return [B], direction logits [B, 2], outcome logits [B, 3] (profit/stop/timeout)

Units: the C51 support ``z = v_max · linspace(-1, 1, K)`` is in the environment's reward units
(``v_max`` is a buffer that only grows, :class:`~foxhunt.agent.support.SupportGrowth`); the IQN
quantiles and the MSE E[Q] are in PopArt-normalised units, de-normalised by the caller
(:meth:`QNetwork.expected_q` takes the de-normaliser). NoisyNet (factorised Gaussian) replaces the
head's hidden and C51 layers when ``noisy_sigma > 0``; in ``eval()`` mode they use their mean weights
only.

With ``symmetry = mirror`` all of the above runs once on ``[state; M state]`` (``STATE_MIRROR``,
``[2B, W]``) and every output is the mean of its two halves, the mirror's relabelled
(:meth:`QNetwork._equivariant`): the network is long/short equivariant by construction.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from foxhunt.agent.config import AgentConfig, LossConfig, NetworkConfig, Symmetry
from foxhunt.agent.distributional import expectation, support
from foxhunt.domain.actions import BRANCHES, BranchConfig, Direction
from foxhunt.domain.exits import BARRIER_EXITS, ExitReason, outcome_class
from foxhunt.features.layout import STATE_FEATURE_GROUPS, STATE_LAYOUT, STATE_MIRROR

AUX_OUTPUTS = (1, 2, 3)
"""Widths of the auxiliary outputs: next-bar return, direction logits, outcome logits."""


def input_mask(kept: Iterable[str] | None) -> Tensor:
    """[W] float32: the state columns the network reads (``agent.network.input_screen``). ``kept``
    None: every column. Otherwise 1 at the named feature columns and at every column outside the
    feature groups (portfolio, plan, aux: the agent's own state is never screened out), 0 at the other
    feature columns; closed under the long/short mirror (a kept column's mirror partner is kept), so
    masking commutes with :data:`STATE_MIRROR` and the mirrored network stays exactly equivariant."""
    mask = torch.ones(STATE_LAYOUT.width, dtype=torch.float32)
    if kept is None:
        return mask
    for g in STATE_FEATURE_GROUPS:
        mask[STATE_LAYOUT.group(g).slice] = 0.0
    for name in kept:
        mask[STATE_LAYOUT.index(name)] = 1.0
    return torch.maximum(mask, mask[torch.tensor(STATE_MIRROR.source)])


@dataclass
class BranchOut:
    """One action branch's heads, dueling-combined."""

    logits: Tensor  # [B, A, K] C51 logits, V + A - mean_A(A)
    quantiles: Tensor  # [B, A, Q] IQN at the fixed fractions, PopArt-normalised units
    q_mse: Tensor  # [B, A] E[Q] regression, PopArt-normalised units


@dataclass
class NetOut:
    branches: tuple[BranchOut, ...]  # BRANCHES order
    gate: Tensor  # [B, E] softmax mixture-of-experts gate
    selection: Tensor  # [B, G] feature-group selection weights
    aux_return: Tensor  # [B] next-bar return prediction
    aux_direction: Tensor  # [B, 2] logits (down, up)
    aux_outcome: Tensor  # [B, 3] logits (profit, stop, timeout)


@dataclass(frozen=True)
class TrainedHeads:
    """Which heads the loss trains (weight > 0), read from the config once: the one answer every reader
    of the heads takes, so a head switched off by its loss weight acts nowhere.

    An untrained head still runs (the forward is the same network), but its output is whatever its
    initial weights make of the trunk: a C51 or IQN E[Q] that would shift every choice in a C51-only or
    IQN-only ablation, aux predictions that would feed noise into the next state.
    """

    c51: tuple[bool, ...]  # per branch, BRANCHES order: LossConfig.c51_weight(branch) > 0
    iqn: tuple[bool, ...]  # per branch: LossConfig.iqn > 0 (one weight for every branch)
    aux: bool  # LossConfig.aux > 0

    @classmethod
    def of(cls, loss: LossConfig) -> TrainedHeads:
        return cls(
            c51=tuple(loss.c51_weight(name) > 0 for name in BRANCHES),
            iqn=tuple(loss.iqn > 0 for _ in BRANCHES),
            aux=loss.aux > 0,
        )


def _scaled_noise(eps: Tensor) -> Tensor:
    """f(x) = sign(x)·sqrt(|x|), the factorised-noise transform of Fortunato et al. (2018), Eq. 11."""
    return eps.sign() * eps.abs().sqrt()


class NoisyLinear(nn.Module):
    """Factorised Gaussian NoisyNet layer: y = (μ_w + σ_w ⊙ f(ε_out) f(ε_in)ᵀ) x + μ_b + σ_b ⊙ f(ε_out).

    μ ~ U(-1/√p, 1/√p) and σ = sigma0/√p with p = in_features (Fortunato et al. 2018, §3.2). The noise
    is held in buffers and changes only in :meth:`reset_noise`; ``eval()`` mode uses μ alone.
    """

    def __init__(self, in_features: int, out_features: int, sigma0: float) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        sigma = sigma0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma))
        self.register_buffer("eps_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("eps_out", torch.zeros(out_features), persistent=False)
        self.reset_noise()

    @torch.no_grad()
    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw new factorised noise (``generator`` must live on the layer's device)."""
        dev = self.eps_in.device
        self.eps_in.copy_(_scaled_noise(torch.randn(self.in_features, generator=generator, device=dev)))
        self.eps_out.copy_(_scaled_noise(torch.randn(self.out_features, generator=generator, device=dev)))

    def forward(self, x: Tensor) -> Tensor:
        if not self.training:
            return F.linear(x, self.weight_mu, self.bias_mu)
        weight = self.weight_mu + self.weight_sigma * torch.outer(self.eps_out, self.eps_in)
        return F.linear(x, weight, self.bias_mu + self.bias_sigma * self.eps_out)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


@torch.no_grad()
def reset_noise(modules: list[nn.Module], generator: torch.Generator | None = None) -> None:
    """New factorised noise in every :class:`NoisyLinear` of ``modules`` from one draw.

    One ``randn`` for all the layers' ``eps_in`` and ``eps_out`` (in module order, ``eps_in`` then
    ``eps_out`` per layer), one transform and one multi-tensor copy: a handful of kernels instead of
    about ten per layer (the learner resets the online and the target network before each update;
    per layer that was 3.2 ms of its 50 ms eager update at batch 16,384 on the H200, bench/learner.py).
    The values differ from drawing layer by layer with the same generator; the distribution is the same.
    """
    layers = [m for module in modules for m in module.modules() if isinstance(m, NoisyLinear)]
    if not layers:
        return
    buffers = [b for m in layers for b in (m.eps_in, m.eps_out)]
    flat = _scaled_noise(
        torch.randn(sum(b.numel() for b in buffers), generator=generator, device=buffers[0].device)
    )
    torch._foreach_copy_(buffers, list(flat.split([b.numel() for b in buffers])))


def _head_linear(in_features: int, out_features: int, sigma0: float) -> nn.Module:
    return (
        NoisyLinear(in_features, out_features, sigma0) if sigma0 > 0 else nn.Linear(in_features, out_features)
    )


class GatedResidualBlock(nn.Module):
    """GRN of the Temporal Fusion Transformer (Lim et al. 2021, Eqs. 2-5), without context:
    η2 = ELU(W2 a + b2); η1 = W1 η2 + b1; out = LayerNorm(a + GLU(η1)), GLU(γ) = σ(W4 γ + b4) ⊙ (W5 γ + b5).
    """

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc2 = nn.Linear(width, width)
        self.fc1 = nn.Linear(width, width)
        self.glu = nn.Linear(width, 2 * width)  # [W5 | W4] stacked: F.glu gates the first half by the second
        self.norm = nn.LayerNorm(width)

    def forward(self, a_BH: Tensor) -> Tensor:
        eta1_BH = self.fc1(F.elu(self.fc2(a_BH)))
        return self.norm(a_BH + F.glu(self.glu(eta1_BH), dim=-1))


class VariableSelection(nn.Module):
    """Embeds each feature group's real slots with its own linear and mixes the embeddings with
    softmax weights from a small network on the full state (the TFT's variable selection, per group)."""

    def __init__(self, cfg: NetworkConfig) -> None:
        super().__init__()
        groups = STATE_LAYOUT.groups
        self.slices = tuple(g.slice for g in groups)
        self.embed = nn.ModuleList(nn.Linear(g.width, cfg.hidden) for g in groups)
        self.weights = nn.Sequential(
            nn.Linear(STATE_LAYOUT.width, cfg.selection_hidden),
            nn.ELU(),
            nn.Linear(cfg.selection_hidden, len(groups)),
        )

    def forward(self, state_BW: Tensor) -> tuple[Tensor, Tensor]:
        emb_BGH = torch.stack(
            [lin(state_BW[:, sl]) for lin, sl in zip(self.embed, self.slices, strict=True)], 1
        )
        sel_BG = torch.softmax(self.weights(state_BW), dim=-1)
        return (sel_BG[..., None] * emb_BGH).sum(1), sel_BG


class MixtureOfExperts(nn.Module):
    """``experts`` bottleneck MLPs (H -> expert_hidden -> H, ELU between) mixed by a softmax gate on
    the full state. The gate's weight and bias start at zero, so every expert has weight 1/E at first."""

    def __init__(self, cfg: NetworkConfig) -> None:
        super().__init__()
        e, h, x = cfg.experts, cfg.hidden, cfg.expert_hidden
        self.gate = nn.Linear(STATE_LAYOUT.width, e)
        nn.init.zeros_(self.gate.weight)
        nn.init.zeros_(self.gate.bias)
        # All experts' weights in one tensor each (one batched matmul instead of E small ones); nn.Linear's
        # default initialisation, U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
        self.w1_EHX = nn.Parameter(torch.empty(e, h, x).uniform_(-1 / math.sqrt(h), 1 / math.sqrt(h)))
        self.b1_EX = nn.Parameter(torch.empty(e, x).uniform_(-1 / math.sqrt(h), 1 / math.sqrt(h)))
        self.w2_EXH = nn.Parameter(torch.empty(e, x, h).uniform_(-1 / math.sqrt(x), 1 / math.sqrt(x)))
        self.b2_EH = nn.Parameter(torch.empty(e, h).uniform_(-1 / math.sqrt(x), 1 / math.sqrt(x)))

    def forward(self, x_BH: Tensor, state_BW: Tensor) -> tuple[Tensor, Tensor]:
        e, h, x = self.w1_EHX.shape
        gate_BE = torch.softmax(self.gate(state_BW), dim=-1)
        # Every expert's first layer in one matmul, [B, H] @ [H, E·X]; then the gate folded into the
        # second layers: Σ_e g_e (hid_e W2_e + b2_e) = (g ⊙ hid) [B, E·X] @ W2 [E·X, H] + g @ b2. Two
        # matmuls, no [B, E, H] expert outputs (same maths, float32 rounding).
        w1_HEX = self.w1_EHX.permute(1, 0, 2).reshape(h, e * x)
        hid_BEX = F.elu(torch.addmm(self.b1_EX.flatten(), x_BH, w1_HEX)).view(-1, e, x)
        gated_BEX = gate_BE[..., None] * hid_BEX
        mix_BH = torch.addmm(gate_BE @ self.b2_EH, gated_BEX.flatten(1), self.w2_EXH.flatten(0, 1))
        return mix_BH, gate_BE


class DuelingStream(nn.Module):
    """One stream of the dueling head (the value stream has one action): a hidden layer, then C51
    logits, IQN quantiles (hidden ⊙ φ(τ), as in Dabney et al. 2018, Eq. 4) and E[Q] per action.

    The hidden and C51 layers are noisy when ``noisy_sigma > 0``; the IQN and MSE output layers are
    plain :class:`nn.Linear` so that PopArt can rescale them exactly (their input is already noisy).
    """

    def __init__(self, in_features: int, n_actions: int, cfg: NetworkConfig) -> None:
        super().__init__()
        self.n_actions, self.atoms = n_actions, cfg.atoms
        self.hidden = _head_linear(in_features, cfg.head_hidden, cfg.noisy_sigma)
        self.c51 = _head_linear(cfg.head_hidden, n_actions * cfg.atoms, cfg.noisy_sigma)
        self.iqn = nn.Linear(cfg.head_hidden, n_actions)
        self.mse = nn.Linear(cfg.head_hidden, n_actions)

    def forward(self, x_BI: Tensor, phi_QF: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        f_BF = F.elu(self.hidden(x_BI))
        logits_BAK = self.c51(f_BF).view(-1, self.n_actions, self.atoms)
        # θ_a(τ_q) = w_a · (f ⊙ φ_q) + b_a = (w_a ⊙ φ_q) · f + b_a: the IQN layer's weight modulated by each
        # fraction's embedding, [A·Q, F], in one matmul on f; no [B, Q, F] products and no transposed
        # gradient (same maths, float32 rounding; on a CPU the stream's forward+backward ~2x faster).
        q = phi_QF.shape[0]
        w_AQF = self.iqn.weight[:, None, :] * phi_QF
        b_AQ = self.iqn.bias[:, None].expand(-1, q)
        quantiles_BAQ = F.linear(f_BF, w_AQF.flatten(0, 1), b_AQ.flatten()).view(-1, self.n_actions, q)
        return logits_BAK, quantiles_BAQ, self.mse(f_BF)


def _dueling(v: Tensor, a: Tensor) -> Tensor:
    """V + A - mean_A(A); ``v`` has a singleton action axis 1."""
    return v + a - a.mean(1, keepdim=True)


class QNetwork(nn.Module):
    """The agent's network (docs/design.md §6); see the module docstring for the data flow."""

    v_max: Tensor
    unit_support: Tensor
    taus: Tensor
    tau_cos: Tensor
    order_flow_index: Tensor
    input_mask: Tensor

    def __init__(self, cfg: AgentConfig, branches: BranchConfig) -> None:
        super().__init__()
        net = cfg.network
        self.cfg = net
        self.trained = TrainedHeads.of(cfg.loss)  # which heads act (expected_q, the magnitude input)
        self.branch_sizes = tuple(int(getattr(branches, name)) for name in BRANCHES)
        real = [c for g in STATE_LAYOUT.groups for c in g.names]
        missing = [n for n in net.order_flow_features if n not in real]
        if missing:
            raise ValueError(
                f"network.order_flow_features {missing} are not columns of the state layout; pick from {real}"
            )
        self.register_buffer(
            "order_flow_index",
            torch.tensor([STATE_LAYOUT.index(n) for n in net.order_flow_features], dtype=torch.long),
        )
        self.register_buffer("v_max", torch.tensor(net.support_init, dtype=torch.float32))
        # The input screen's mask (:func:`input_mask`; all ones until a trainer sets it): a buffer, so
        # checkpoints, weights-only exports and serve carry the columns the network was trained on.
        self.register_buffer("input_mask", input_mask(None))
        # The long/short mirror (Symmetry.MIRROR): the state's permutation and signs, and each
        # output's relabelling (Long <-> Short; aux direction down <-> up; a long's profit <-> stop).
        self.register_buffer("mirror_source", torch.tensor(STATE_MIRROR.source, dtype=torch.long))
        self.register_buffer("mirror_sign", torch.tensor(STATE_MIRROR.sign, dtype=torch.float32))
        swap = list(range(self.branch_sizes[BRANCHES.index("direction")]))
        swap[Direction.LONG], swap[Direction.SHORT] = int(Direction.SHORT), int(Direction.LONG)
        self.register_buffer("mirror_direction", torch.tensor(swap, dtype=torch.long))
        self.register_buffer("mirror_up_down", torch.tensor([1, 0], dtype=torch.long))
        outcome = [outcome_class(int(r)) for r in BARRIER_EXITS]  # class k's mirror: profit <-> stop
        profit, stop = outcome_class(int(ExitReason.PROFIT)), outcome_class(int(ExitReason.STOP))
        outcome[profit], outcome[stop] = stop, profit
        self.register_buffer("mirror_outcome", torch.tensor(outcome, dtype=torch.long))
        # The support at v_max = 1, built once: :meth:`support` scales it (one multiply per call in
        # the captured update instead of rebuilding the grid's four kernels).
        self.register_buffer("unit_support", support(torch.ones(()), net.atoms))
        taus = torch.tensor(net.quantiles, dtype=torch.float32)
        self.register_buffer("taus", taus)
        # cos(π i τ), i = 0 .. n-1 (Dabney et al. 2018, Eq. 4)                                 [Q, n]
        self.register_buffer(
            "tau_cos", torch.cos(math.pi * torch.arange(net.quantile_embedding) * taus[:, None])
        )

        self.selection = VariableSelection(net)
        self.trunk = nn.Sequential(*(GatedResidualBlock(net.hidden) for _ in range(net.trunk_layers)))
        self.moe = MixtureOfExperts(net)
        self.tau_embed = nn.Linear(net.quantile_embedding, net.head_hidden)  # φ(τ), shared by every stream
        self.value = DuelingStream(net.hidden, 1, net)
        extra = {
            "magnitude": self.branch_sizes[BRANCHES.index("direction")],
            "order_type": len(net.order_flow_features),
            "urgency": len(net.order_flow_features),
        }
        self.advantage = nn.ModuleList(
            DuelingStream(net.hidden + extra.get(name, 0), size, net)
            for name, size in zip(BRANCHES, self.branch_sizes, strict=True)
        )
        # Like the zero-initialised gate: a branch starts (nearly) indifferent between its actions.
        # At PyTorch's default scale the random advantages differ by about as much as a learned edge
        # and correlate with the state (-0.38 with the planted signal for one seed), so which seed
        # won decided the sign of the early policy. The output layers' mean weights are scaled down;
        # the NoisyNet sigmas are left as they are, so exploration is unchanged.
        with torch.no_grad():
            for stream in self.advantage:
                for layer in (stream.c51, stream.iqn, stream.mse):
                    for name, p in layer.named_parameters():
                        if not name.endswith("sigma"):
                            p.mul_(net.advantage_init)
        self.aux = nn.Sequential(
            nn.Linear(STATE_LAYOUT.width, net.aux_hidden),
            nn.ELU(),
            nn.Linear(net.aux_hidden, net.aux_hidden),
            nn.ELU(),
            nn.Linear(net.aux_hidden, sum(AUX_OUTPUTS)),  # [return | direction logits | outcome logits]
        )

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:  # noqa: ANN001
        # A checkpoint from before the input screen has no mask: that network read every column.
        state_dict.setdefault(prefix + "input_mask", input_mask(None).to(self.input_mask.device))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # -- support ------------------------------------------------------------------------------------

    def support(self) -> Tensor:
        """The C51 atoms ``z_i = v_max · (2i / (K - 1) - 1)``, reward units: :func:`distributional.support`
        of ``v_max`` (bit for bit: the same unit grid times ``v_max``)                              [K]."""
        return self.v_max * self.unit_support

    def atom_spacing(self) -> Tensor:
        """Δz = 2 v_max / (K - 1)                                                                    []."""
        return 2.0 * self.v_max / (self.cfg.atoms - 1)

    # -- forward ------------------------------------------------------------------------------------

    def encode(self, state_BW: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Variable selection, GRN trunk and the expert mixture: (h [B, H], gate [B, E], selection [B, G])."""
        x_BH, sel_BG = self.selection(state_BW)
        x_BH = self.trunk(x_BH)
        mix_BH, gate_BE = self.moe(x_BH, state_BW)
        return x_BH + mix_BH, gate_BE, sel_BG  # residual: the experts refine the trunk, not replace it

    def heads(self, h_BH: Tensor, state_BW: Tensor) -> tuple[BranchOut, ...]:
        """The dueling heads on the trunk output ``h``; ``state`` supplies the order-flow columns."""
        phi_QF = F.relu(self.tau_embed(self.tau_cos))
        v_logits, v_quant, v_mse = self.value(h_BH, phi_QF)
        flow_BF = state_BW.index_select(1, self.order_flow_index)
        outs: list[BranchOut] = []
        for name, stream in zip(BRANCHES, self.advantage, strict=True):
            if name == "magnitude":
                # Direction's expected C51 Q per direction in atom units, E[Z]/Δz (scale-free as v_max
                # grows). Detached: the magnitude losses (MSE x 4) must not reshape the direction
                # distribution to make sizing easier; direction learns only from its own targets.
                # With direction's C51 untrained (TrainedHeads) it is the mean of its IQN quantiles
                # instead, in PopArt-normalised units (scale-free too), not an untrained head's output.
                direction = outs[BRANCHES.index("direction")]
                if self.trained.c51[BRANCHES.index("direction")]:
                    probs_BAK = torch.softmax(direction.logits, dim=-1)
                    e_dir_BA = expectation(probs_BAK, self.support()) / self.atom_spacing()
                else:
                    e_dir_BA = direction.quantiles.mean(-1)
                x_BI = torch.cat([h_BH, e_dir_BA.detach()], dim=1)
            elif name in ("order_type", "urgency"):
                x_BI = torch.cat([h_BH, flow_BF], dim=1)
            else:
                x_BI = h_BH
            a_logits, a_quant, a_mse = stream(x_BI, phi_QF)
            outs.append(
                BranchOut(
                    logits=_dueling(v_logits, a_logits),
                    quantiles=_dueling(v_quant, a_quant),
                    q_mse=_dueling(v_mse, a_mse),
                )
            )
        return tuple(outs)

    def aux_heads(self, state_BW: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Auxiliary predictions on their own trunk: return [B], direction logits [B, 2], outcome [B, 3]."""
        return self._aux_heads(state_BW * self.input_mask)

    def _aux_heads(self, state_BW: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        # on a state already masked (forward masks once for the trunk, the heads and these)
        ret_B1, dir_B2, out_B3 = self.aux(state_BW).split(AUX_OUTPUTS, dim=-1)
        return ret_B1.squeeze(-1), dir_B2, out_B3

    def forward(self, state_BW: Tensor) -> NetOut:
        state_BW = state_BW * self.input_mask  # the screened-out columns read as 0, "no signal"
        if self.cfg.symmetry is Symmetry.MIRROR:
            return self._equivariant(state_BW)
        return self._forward(state_BW)

    def mirror_state(self, state_BW: Tensor) -> Tensor:
        """The long/short mirror image of states (:data:`STATE_MIRROR`)                          [B, W]."""
        return state_BW.index_select(1, self.mirror_source) * self.mirror_sign

    def _equivariant(self, state_BW: Tensor) -> NetOut:
        """Outputs symmetrised over the mirror group {I, M}: ``out(s) = (f(s) + P f(M s)) / 2``.

        ``P`` relabels the mirrored outputs: Long <-> Short in the direction branch (its C51 logits,
        IQN quantiles and E[Q]), up <-> down in the aux direction logits, profit <-> stop in the aux
        outcome of a long (exact with equal profit and stop multiples), and the aux return negated.
        Then ``out(M s) = P out(s)`` holds exactly, whatever the weights: the gap Q(Long) - Q(Short) is
        an odd function of the state, 0 on a state that is its own mirror image. Averaging logits (a
        geometric mixture) keeps every output a valid logit; gate and selection weights are averaged.
        """
        b = state_BW.shape[0]
        both = self._forward(torch.cat([state_BW, self.mirror_state(state_BW)]))

        def sym(x: Tensor, perm: Tensor | None = None) -> Tensor:
            # unbind or mean over the pair axis, not two slices: a slice's gradient is a zero-filled
            # full-size copy (the mean is (own + image) / 2 bit for bit)
            pair = x.unflatten(0, (2, b))
            if perm is None:
                return pair.mean(0)
            own, image = pair.unbind(0)
            return 0.5 * (own + image.index_select(1, perm))

        branches = tuple(
            BranchOut(
                logits=sym(o.logits, perm),
                quantiles=sym(o.quantiles, perm),
                q_mse=sym(o.q_mse, perm),
            )
            for o, perm in zip(
                both.branches,
                [self.mirror_direction if n == "direction" else None for n in BRANCHES],
                strict=True,
            )
        )
        return NetOut(
            branches=branches,
            gate=sym(both.gate),
            selection=sym(both.selection),
            aux_return=0.5 * torch.sub(*both.aux_return.unflatten(0, (2, b)).unbind(0)),
            aux_direction=sym(both.aux_direction, self.mirror_up_down),
            aux_outcome=sym(both.aux_outcome, self.mirror_outcome),
        )

    def _forward(self, state_BW: Tensor) -> NetOut:
        h_BH, gate_BE, sel_BG = self.encode(state_BW)
        aux_return, aux_direction, aux_outcome = self._aux_heads(state_BW)
        return NetOut(
            branches=self.heads(h_BH, state_BW),
            gate=gate_BE,
            selection=sel_BG,
            aux_return=aux_return,
            aux_direction=aux_direction,
            aux_outcome=aux_outcome,
        )

    def expected_q(self, out: NetOut, denorm: Callable[[Tensor], Tensor] | None = None) -> tuple[Tensor, ...]:
        """Per branch [B, A], reward units: the mean of the trained heads' E[Q] (:class:`TrainedHeads`),
        (E_C51 + E_IQN) / 2 with both losses on, E_C51 alone with the IQN weight at 0, E_IQN alone with
        the branch's C51 weight at 0. What every reader takes: the policy, the learner's double-Q argmax,
        CQL and the Q statistics, ``Actor.expected_q`` (diagnostics, serving).

        E_C51 = Σ_k softmax(logits)_k z_k with the current support; E_IQN = the mean of the IQN
        quantiles, de-normalised by ``denorm`` (PopArt's; ``None`` = identity, i.e. PopArt off). The
        de-normaliser is affine, so de-normalising the mean equals the mean of de-normalised quantiles.
        """
        z_K = self.support()
        result = []
        for i, b in enumerate(out.branches):  # BRANCHES order
            e_c51 = expectation(torch.softmax(b.logits, dim=-1), z_K) if self.trained.c51[i] else None
            e_iqn = b.quantiles.mean(-1) if self.trained.iqn[i] else None
            if e_iqn is not None and denorm is not None:
                e_iqn = denorm(e_iqn)
            heads = [e for e in (e_c51, e_iqn) if e is not None]  # LossConfig refuses a branch with none
            result.append(0.5 * (heads[0] + heads[1]) if len(heads) == 2 else heads[0])
        return tuple(result)

    # -- parameter groups ---------------------------------------------------------------------------

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """New noise in every NoisyNet layer (no-op when ``noisy_sigma == 0``): :func:`reset_noise`."""
        reset_noise([self], generator)

    def param_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


# -- parameter groups (what the learner clips and PopArt rescales) ---------------------------------


def popart_layers(net: QNetwork) -> list[nn.Linear]:
    """The IQN and MSE output layers (value stream, then each advantage stream in BRANCHES order).

    PopArt rescales each by σ/σ' (weights and biases) and adds (μ - μ')/σ' to each bias. Dueling's
    mean subtraction cancels the shift added to an advantage stream (A + c - mean(A + c) = A - mean A),
    so the combined output moves by the shift exactly once, through V, as PopArt requires.
    """
    streams = [net.value, *net.advantage]
    return [layer for s in streams for layer in (s.iqn, s.mse)]


def aux_parameters(net: QNetwork) -> list[nn.Parameter]:
    """The auxiliary trunk and heads (clipped separately from the Q network)."""
    return list(net.aux.parameters())


def q_parameters(net: QNetwork) -> list[nn.Parameter]:
    """Every parameter not in :func:`aux_parameters`."""
    aux = {id(p) for p in net.aux.parameters()}
    return [p for p in net.parameters() if id(p) not in aux]
