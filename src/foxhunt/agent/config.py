"""The ``[agent]`` config section: network widths, losses, learning, replay and exploration
(docs/design.md §6).

Every optional mechanism has a numeric coefficient where 0 switches it off (no boolean flags). The
defaults are the production sizes; the smoke profile shrinks the widths.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, model_validator

from foxhunt.config.base import Frozen
from foxhunt.domain.actions import BRANCHES


class Symmetry(StrEnum):
    """What the network's Q function is constrained to respect."""

    NONE = "none"
    # Long/short mirror equivariance: Q(s, Long) = Q(M s, Short) exactly (STATE_MIRROR, the network's
    # docstring). No unconditional drift, and no edge from even features (volatility, spread, time)
    # alone, can be learned as a preference for one side.
    MIRROR = "mirror"


class Bootstrap(StrEnum):
    """Where an n-step window stops and bootstraps from the target network."""

    # A fixed n steps after the transition (fewer at an episode's end).
    STEPS = "steps"
    # At the next decision state (plan-free: the direction acts again), at most n steps later. A
    # plan is one option (semi-MDP): the entry's target is the plan's discounted PnL plus the next
    # decision's value, learned without a chain of bootstraps through the locked states between.
    DECISION = "decision"


class NetworkConfig(Frozen):
    """Widths of the branching, dueling, distributional network (docs/design.md §6)."""

    hidden: int = Field(256, ge=4, le=8192, description="Width of the GRN trunk and of each expert's in/out.")
    trunk_layers: int = Field(2, ge=1, le=16, description="Gated residual blocks in the trunk.")
    selection_hidden: int = Field(
        16, ge=1, le=1024, description="Hidden width of each feature group's selection (VSN) gate."
    )
    experts: int = Field(8, ge=1, le=64, description="Experts in the mixture (K).")
    expert_hidden: int = Field(64, ge=1, le=4096, description="Bottleneck width of each expert.")
    head_hidden: int = Field(128, ge=4, le=4096, description="Hidden width of the value and branch heads.")
    atoms: int = Field(51, ge=3, le=1001, description="C51 atoms per action.")
    quantiles: tuple[float, ...] = Field(
        (0.1, 0.3, 0.5, 0.7, 0.9),
        description="The IQN head's fixed quantile fractions (strictly inside (0, 1)).",
    )
    quantile_embedding: int = Field(
        64, ge=1, le=1024, description="Cosine embedding size of the IQN fractions."
    )
    aux_hidden: int = Field(64, ge=4, le=4096, description="Width of the auxiliary heads' separate trunk.")
    order_flow_features: tuple[str, ...] = Field(
        ("ofi.ofi_l0", "ofi.l1_imbalance_ema", "ofi.trade_flow"),
        description="State columns the order-type and urgency branches also see (three order-flow features).",
    )
    input_screen: int = Field(
        0,
        ge=0,
        le=4096,
        description="Feature columns the network reads: 0 = all; K = the K with the largest |rank IC| "
        "against the plan-horizon move on each fold's training rows (foxhunt.validation.screen), their "
        "mirror partners with them; the agent's own portfolio, plan and aux slots are always read.",
    )
    noisy_sigma: float = Field(
        0.5,
        ge=0,
        le=10,
        description="NoisyNet initial sigma (factorised, x 1/sqrt(fan_in)); 0 = plain linear.",
    )
    advantage_init: float = Field(
        0.01,
        gt=0,
        le=1,
        description="Scale of the advantage streams' output layers at init (1 = PyTorch's default): "
        "near 0 every branch starts indifferent between its actions.",
    )
    symmetry: Symmetry = Field(
        Symmetry.NONE,
        description="none, or mirror: Q is long/short equivariant (the outputs on a state and on its "
        "mirror image averaged; twice the forward cost).",
    )
    support_init: float = Field(
        1.0, gt=0, le=1e6, description="Initial half-width of the C51 support (normalised-reward units)."
    )
    support_growth: float = Field(
        1.5, ge=1, le=10, description="Factor the support grows by when |targets| exceed it (never shrinks)."
    )

    @model_validator(mode="after")
    def _quantiles(self) -> NetworkConfig:
        if not self.quantiles or any(not 0.0 < q < 1.0 for q in self.quantiles):
            raise ValueError("quantiles must be non-empty and strictly inside (0, 1)")
        if list(self.quantiles) != sorted(self.quantiles):
            raise ValueError("quantiles must be increasing")
        return self


class LossConfig(Frozen):
    """Loss weights; all losses are mean-reduced (docs/design.md §6, §10 invariant 6)."""

    c51: float = Field(1.0, ge=0, description="C51 cross-entropy weight (direction, order, urgency).")
    iqn: float = Field(0.25, ge=0, description="IQN quantile-Huber weight.")
    huber_kappa: float = Field(1.0, gt=0, description="Quantile-Huber threshold kappa.")
    mse: float = Field(1.0, ge=0, description="MSE on E[Q] weight (direction, order, urgency).")
    magnitude_c51: float = Field(0.2, ge=0, description="Magnitude branch C51 weight.")
    magnitude_mse: float = Field(4.0, ge=0, description="Magnitude branch MSE weight.")
    aux: float = Field(1.0, ge=0, description="Auxiliary heads' loss weight (0 = aux heads untrained).")
    cql: float = Field(0.0, ge=0, description="Conservative Q-learning penalty weight (0 = off).")
    atom_entropy: float = Field(
        0.01, ge=0, description="Atom-entropy bonus weight while atom utilisation < atom_utilisation_floor."
    )
    atom_utilisation_floor: float = Field(
        0.5, ge=0, le=1, description="Utilisation under which the bonus acts."
    )
    moe_balance: float = Field(
        1.0, ge=0, description="Multiplier of the adaptive MoE load-balance loss (0 = off)."
    )

    def c51_weight(self, branch: str) -> float:
        """The C51 loss weight of ``branch`` (a name of ``BRANCHES``): the magnitude branch has its own."""
        return self.magnitude_c51 if branch == "magnitude" else self.c51

    @model_validator(mode="after")
    def _a_trained_value_head(self) -> LossConfig:
        """Actions are chosen on the trained heads' E[Q] only (``QNetwork.expected_q``): a branch whose
        C51 and IQN weights are both 0 would have none to choose with."""
        untrained = [b for b in BRANCHES if self.c51_weight(b) == 0]
        if self.iqn == 0 and untrained:
            keys = [k for k in ("c51", "magnitude_c51") if getattr(self, k) == 0]
            raise ValueError(
                f"agent.loss.iqn and {' and '.join(f'agent.loss.{k}' for k in keys)} are 0: no value head "
                f"(C51 or IQN) is trained to choose the actions of {', '.join(untrained)}; "
                f"set agent.loss.iqn > 0 (or {' and '.join(f'agent.loss.{k}' for k in keys)} > 0)"
            )
        return self


class LearnConfig(Frozen):
    """Optimisation and targets."""

    gamma: float = Field(0.99, gt=0, le=1, description="Discount per step.")
    n_step: int = Field(
        3, ge=1, le=1000, description="n of the n-step returns (the longest window under decision)."
    )
    bootstrap: Bootstrap = Field(
        Bootstrap.STEPS,
        description="steps: bootstrap n steps later; decision: at the next plan-free state, at most n "
        "steps later (set n_step above env.plan.barrier.horizon so a whole plan fits one window).",
    )
    batch: int = Field(16_384, ge=2, le=1 << 20, description="Learner batch size.")
    lr: float = Field(3e-5, gt=0, le=1, description="Adam learning rate (peak of the cosine schedule).")
    lr_min_share: float = Field(0.1, ge=0, le=1, description="Cosine schedule floor as a share of lr.")
    restart_epochs: int = Field(20, ge=1, description="Warm restart period of the cosine schedule (epochs).")
    restart_momentum: float = Field(
        0.5, ge=0, le=1, description="Adam first moments are multiplied by this at each restart (0.5 halves)."
    )
    polyak: float = Field(0.005, gt=0, le=1, description="Target network update rate tau (lerp).")
    clip_norm: float = Field(10.0, gt=0, description="Gradient-norm clip of the Q network.")
    aux_clip_norm: float = Field(
        10.0, gt=0, description="Gradient-norm clip of the auxiliary trunk and heads."
    )
    popart: float = Field(3e-4, ge=0, lt=1, description="PopArt statistics rate beta (0 = off).")
    updates_per_epoch: int = Field(200, ge=1, description="Learner updates per epoch.")
    weight_decay: float = Field(
        0.0,
        ge=0,
        le=10,
        description="Decoupled (AdamW) weight decay of the network's weight matrices (not its biases or "
        "norm gains): each update shrinks them by lr x this (0 = off).",
    )


class ReplayConfig(Frozen):
    capacity: int = Field(
        1 << 20, ge=16, le=1 << 28, description="Transitions held (rounded up to a power of 2)."
    )
    alpha: float = Field(0.6, ge=0, le=1, description="Priority exponent (0 = uniform sampling).")
    beta: float = Field(0.4, ge=0, le=1, description="Importance-weight exponent.")
    eps: float = Field(1e-6, gt=0, description="Priority floor added to |TD|.")
    decision_boost: float = Field(
        0.0,
        ge=0,
        le=1000,
        description="Priority x (1 + boost) for transitions from a state free to choose a direction (no "
        "plan lock); under a long lock they are a few % of replay (0 = off).",
    )


class BranchEpsilonConfig(Frozen):
    """Epsilon-greedy probability of each branch; a branch left unset (None) takes
    ``agent.explore.epsilon``. A branch of one value has nothing to explore whatever its epsilon."""

    direction: float | None = Field(None, ge=0, le=1, description="Direction epsilon (None = epsilon).")
    magnitude: float | None = Field(None, ge=0, le=1, description="Magnitude epsilon (None = epsilon).")
    order_type: float | None = Field(None, ge=0, le=1, description="Order-type epsilon (None = epsilon).")
    urgency: float | None = Field(None, ge=0, le=1, description="Urgency epsilon (None = epsilon).")


class ExploreConfig(Frozen):
    epsilon: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Epsilon-greedy probability of every branch that branch_epsilon leaves unset (0 = off).",
    )
    branch_epsilon: BranchEpsilonConfig = Field(
        default_factory=BranchEpsilonConfig,
        description="Per-branch epsilon, e.g. [agent.explore.branch_epsilon] order_type = 0.3; unset "
        "branches take epsilon.",
    )
    temperature: float = Field(
        0.0, ge=0, description="Boltzmann temperature over E[Q] / |Q| reference (0 = off)."
    )
    temperature_floor: float = Field(0.05, gt=0, description="Lowest Boltzmann temperature when it is on.")
    count_bonus: float = Field(
        0.0, ge=0, description="Count bonus c / sqrt(1 + n(action)) on E[Q] (0 = off)."
    )
    thompson: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of direction choices made by Thompson sampling (0 = off). Off by default: on "
        "half the choices (0.5) the smoke profile captured 30.9% of the planted edge over seeds 101-108 "
        "(7 of 8 beat flat), off 47% (8 of 8), docs/results/2026-12-02-entry-margin-trade-flow.md.",
    )

    def epsilon_of(self, branch: str) -> float:
        """The epsilon-greedy probability of ``branch`` (a name of ``BRANCHES``)."""
        own = getattr(self.branch_epsilon, branch)
        return self.epsilon if own is None else float(own)


class ActConfig(Frozen):
    """How E[Q] becomes a direction: the greedy evaluation policy and the choice that exploration
    perturbs (``Agent.policy``, both modes)."""

    entry_margin: float = Field(
        0.0,
        ge=0,
        le=4,
        description="Short and Long are chosen only when their E[Q] beats Hold's and Flat's by this many "
        "running direction gaps (the q_gap signal: the mean best-minus-second E[Q] gap of collection); "
        "0 = plain argmax. A margin against the learned Q's noise, where an argmax over near-equal "
        "values trades the noise and pays the round trip. Off by default: on the smoke profile (seeds "
        "101-108) 0.5 halved the trades (88 against 148 a seed) and captured 43% of the planted edge "
        "(8 of 8 beat flat), 1.0 captured 17% (7 of 8), against 47% (8 of 8) at 0 "
        "(docs/results/2026-12-02-entry-margin-trade-flow.md).",
    )


class Algo(StrEnum):
    """The learner that trains the agent (``agent.algo``)."""

    DQN = "dqn"  # the branching distributional Q learner (docs/design.md §6)
    PPO = "ppo"  # the factored actor-critic of foxhunt.agent.ppo (docs/ppo.md)


LEARNER_ONLY: dict[Algo, tuple[str, ...]] = {
    Algo.DQN: (
        "agent.loss",
        "agent.learn",  # PPO's lr, discount, batches: agent.ppo (its counterfactual windows its own)
        "agent.replay",
        "agent.explore",
        "agent.act",
        *(
            f"agent.network.{name}"  # the Q heads': distributional atoms and quantiles, noise, aux heads
            for name in (
                "atoms",
                "quantiles",
                "quantile_embedding",
                "aux_hidden",
                "noisy_sigma",
                "advantage_init",
                "support_init",
                "support_growth",
            )
        ),
    ),
    Algo.PPO: ("agent.ppo",),
}
"""The ``agent`` settings (key paths, as ``--set`` names them; a section covers its keys) that one
learner alone reads: the other trains alike whatever they are (``foxhunt tune`` refuses to search one,
:func:`foxhunt.tune.space.check_space`). The encoder (``agent.network``'s selection, trunk, experts,
head width, symmetry, input screen), the curriculum and the counterfactual targets are both learners'."""


def only_for(key: str) -> Algo | None:
    """The learner that alone reads setting ``key`` (:data:`LEARNER_ONLY`), or None: both read it, or it
    is no learner's."""
    for algo, keys in LEARNER_ONLY.items():
        if any(key == k or key.startswith(k + ".") for k in keys):
            return algo
    return None


class PPOConfig(Frozen):
    """The on-policy learner of ``agent.algo = "ppo"`` (docs/ppo.md): a factored (multi-discrete)
    policy over the four branches and a value head on the network's encoder, trained by the clipped
    objective on GAE advantages (normalised per minibatch), CleanRL's ``ppo.py`` recipe. Read only
    when ``agent.algo = "ppo"``; the rollout is the epoch's collection (``train.envs`` episodes x
    ``train.steps_per_epoch`` steps)."""

    gamma: float = Field(0.99, gt=0, le=1, description="Discount per step of the returns and GAE.")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE lambda (0: one-step TD, 1: Monte Carlo).")
    clip: float = Field(0.2, gt=0, le=1, description="Clip of the probability ratio (1 - clip, 1 + clip).")
    value_clip: float = Field(
        0.2,
        ge=0,
        le=100,
        description="Clip of the value's move from its rollout value (normalised-return units); 0 = "
        "unclipped value loss.",
    )
    epochs: int = Field(4, ge=1, le=100, description="Passes over each rollout.")
    minibatches: int = Field(4, ge=1, le=4096, description="Minibatches per pass (the rollout split evenly).")
    entropy: tuple[float, float, float, float] = Field(
        (0.01, 0.01, 0.01, 0.01),
        description="Entropy bonus per branch (direction, magnitude, order_type, urgency), each over the "
        "rows where that branch acts.",
    )
    value_coef: float = Field(0.5, ge=0, le=100, description="Weight of the value loss.")
    lr: float = Field(3e-4, gt=0, le=1, description="Adam learning rate at the fold's first epoch.")
    anneal: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Share of the learning rate annealed away, linearly, by the fold's last epoch (1 = to "
        "0 as CleanRL does; 0 = constant).",
    )
    max_grad_norm: float = Field(0.5, gt=0, description="Gradient-norm clip.")
    target_kl: float = Field(
        0.0, ge=0, le=10, description="Stop an update's passes once the approximate KL exceeds it (0 = off)."
    )
    reward_scale_rate: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Rate of the running scale the rewards are divided by (the std of the rollouts' "
        "discounted returns, an EMA; 0 = rewards as they are).",
    )


class CurriculumConfig(Frozen):
    """A curriculum over the action branches (off by default: every field 0). Each execution branch is
    held at its default choice (magnitude: the largest fraction; order type: Market; urgency: Normal)
    for its first ``N`` epochs of every fold, exploring and greedy, then released: the direction is
    learned first, then the branches in the order their epochs give. Held, a branch's choice never
    varies, so its replayed transitions all carry the default (``foxhunt.agent.actor``); under
    ``agent.algo = ppo`` a held branch's log-probability, entropy and counterfactual terms are masked
    out of the loss (``foxhunt.agent.ppo``) until it is released."""

    magnitude: int = Field(
        0,
        ge=0,
        le=100_000,
        description="Epochs of a fold the magnitude is held at its largest fraction (0 = never).",
    )
    order_type: int = Field(
        0, ge=0, le=100_000, description="Epochs of a fold the order type is held at Market (0 = never)."
    )
    urgency: int = Field(
        0, ge=0, le=100_000, description="Epochs of a fold the urgency is held at Normal (0 = never)."
    )

    def held(self, epoch: int) -> tuple[bool, bool, bool, bool]:
        """Per branch (``BRANCHES`` order; the direction never) whether it is held at fold epoch ``epoch``."""
        return (False, epoch < self.magnitude, epoch < self.order_type, epoch < self.urgency)

    @property
    def on(self) -> bool:
        return max(self.magnitude, self.order_type, self.urgency) > 0


class CounterfactualConfig(Frozen):
    """Counterfactual execution targets (docs/design.md §6): at every
    entry of a collected epoch, the env rolls out each magnitude, order type and urgency on the same
    market path (:mod:`foxhunt.env.counterfactual`), and the learner trains every untaken execution
    value's heads on the taken transition's target shifted by what that value would have earned
    (hindsight relabelling of the execution branches; :mod:`foxhunt.agent.counterfactual`). Under
    ``agent.algo = ppo`` the same rollouts give every execution value's advantage, and the loss adds
    a clipped all-action policy-gradient term (``foxhunt.agent.ppo_loss.all_action_loss``; docs/ppo.md)."""

    weight: float = Field(
        0.0,
        ge=0,
        le=100,
        description="Weight of the relabelled execution targets' loss, relative to the branch's own value "
        "losses (PPO: of the all-action term beside the clipped objective; 0 = off: no rollout, no "
        "replay column, the update as before).",
    )
    horizon: int = Field(
        0,
        ge=0,
        le=10_000,
        description="Steps each counterfactual is rolled out (the decision, then Hold); 0 = the learner's "
        "n_step, the longest window its targets read (PPO: the env's longest entry, patience + plan "
        "horizon + 2).",
    )


class AgentConfig(Frozen):
    algo: Algo = Field(
        Algo.DQN,
        description="The learner: dqn (the branching distributional Q learner) or ppo (the factored "
        "actor-critic, agent.ppo; docs/ppo.md).",
    )
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    loss: LossConfig = Field(default_factory=LossConfig)
    learn: LearnConfig = Field(default_factory=LearnConfig)
    replay: ReplayConfig = Field(default_factory=ReplayConfig)
    explore: ExploreConfig = Field(default_factory=ExploreConfig)
    act: ActConfig = Field(default_factory=ActConfig)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)
    counterfactual: CounterfactualConfig = Field(default_factory=CounterfactualConfig)
