"""The agent (issue 6 §4): the acting policy's exploration coefficients, the evaluation argmax,
n-step collection from a real ``TradingEnv`` into replay, and a short learning run on a rising market."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import Tensor

from foxhunt.agent.actor import AUX_RETURN_BOUND, Mode
from foxhunt.agent.agent import Agent, Restore, nstep
from foxhunt.agent.config import (
    ActConfig,
    AgentConfig,
    CurriculumConfig,
    ExploreConfig,
    LearnConfig,
    NetworkConfig,
    ReplayConfig,
)
from foxhunt.domain.actions import BRANCHES, BranchConfig, Direction
from foxhunt.env.config import ContractConfig, CostConfig, EnvConfig, PositionSizingConfig
from foxhunt.env.core import TradingEnv
from foxhunt.env.market import AUX_TARGETS
from foxhunt.features.layout import STATE_LAYOUT
from tests.env.test_core import market
from tests.factories import plan_config

W = STATE_LAYOUT.width
SMALL = {
    "hidden": 16,
    "trunk_layers": 1,
    "experts": 4,
    "expert_hidden": 4,
    "head_hidden": 16,
    "atoms": 11,
    "quantile_embedding": 8,
    "aux_hidden": 8,
}
LONG = int(Direction.LONG)
OFF = {"epsilon": 0.0, "temperature": 0.0, "thompson": 0.0, "count_bonus": 0.0}
BRANCH_SETS = [
    pytest.param(BranchConfig(), id="4x3x3x3"),
    pytest.param(BranchConfig(direction=3), id="3x3x3x3"),
]


pytestmark = pytest.mark.usefixtures("one_thread")


def make_agent(
    branches: BranchConfig | None = None,
    *,
    seed: int = 0,
    network: dict | None = None,
    explore: dict | None = None,
    learn: dict | None = None,
    replay: dict | None = None,
    act: dict | None = None,
    curriculum: dict | None = None,
    capacity: int = 64,
) -> Agent:
    cfg = AgentConfig(
        network=NetworkConfig(**{**SMALL, **(network or {})}),
        explore=ExploreConfig(**(explore or {})),
        learn=LearnConfig(**(learn or {})),
        replay=ReplayConfig(**(replay or {})),
        act=ActConfig(**(act or {})),
        curriculum=CurriculumConfig(**(curriculum or {})),
    )
    return Agent(cfg, branches or BranchConfig(), seed=seed, replay_capacity=capacity)


def states(n: int, seed: int = 1) -> Tensor:
    return torch.randn(n, W, generator=torch.Generator().manual_seed(seed))


def rising_market(rows: int, step: float = 1.0, seed: int = 0):
    """Mid rising ``step`` points a row (50 $ per contract a row, spread 0.25), random features."""
    mkt = market([100.0 + step * i for i in range(rows)])
    mkt.features.normal_(generator=torch.Generator().manual_seed(seed))
    return mkt


def env_config(episode_rows: int, horizon: int = 2) -> EnvConfig:
    """Two contracts at most, conviction pinned at 1 (sizing never rounds a trade to 0), $1 fees."""
    return EnvConfig(
        branches=BranchConfig(magnitude=2, magnitude_fractions=(0.5, 1.0)),
        costs=CostConfig(
            commission_per_contract=1.0,
            exchange_fee_per_contract=0.0,
            slippage_ticks_per_contract=0.0,
            immediate_slippage_ticks=0.0,
        ),
        contract=ContractConfig(max_position=2, initial_capital=100_000.0),
        plan=plan_config(horizon=horizon, profit_mult=1000.0, stop_mult=1000.0),
        sizing=PositionSizingConfig(conviction_min=1.0, cvar_weight=0.0, kelly_weight=0.0),
        episode_rows=episode_rows,
    )


# --- the acting policy ---------------------------------------------------------------------------


@pytest.mark.parametrize("branches", BRANCH_SETS)
def test_epsilon_one_reaches_every_value_of_every_branch(branches: BranchConfig) -> None:
    agent = make_agent(branches, explore={"epsilon": 1.0})
    actions = agent.policy(states(512), Mode.EXPLORE).actions
    assert actions.shape == (512, len(BRANCHES)) and actions.dtype == torch.int64
    for i, name in enumerate(BRANCHES):
        n = int(getattr(branches, name))
        assert set(actions[:, i].tolist()) == set(range(n)), name


def test_curriculum_holds_the_later_branches_and_releases_them_at_their_epochs() -> None:
    """agent.curriculum: magnitude held at its largest fraction for 1 epoch, order type at Market and
    urgency at Normal for 2; the direction explores from the start; from epoch 2 every branch explores
    (epsilon 1: every value)."""
    agent = make_agent(explore={"epsilon": 1.0}, curriculum={"magnitude": 1, "order_type": 2, "urgency": 2})
    expect_held = {0: (False, True, True, True), 1: (False, False, True, True), 2: (False,) * 4}
    for epoch, held in expect_held.items():
        agent.start_epoch(epoch)
        for mode in (Mode.EXPLORE, Mode.GREEDY):
            actions = agent.policy(states(512, seed=epoch), mode).actions
            for i, name in enumerate(BRANCHES):
                n = int(getattr(BranchConfig(), name))
                values = set(actions[:, i].tolist())
                if held[i]:
                    assert values == {n - 1 if name == "magnitude" else 0}, (epoch, name, mode)
                elif mode is Mode.EXPLORE:
                    assert values == set(range(n)), (epoch, name)


def test_curriculum_off_leaves_the_draws_alone() -> None:
    """The curriculum off (the default) and one released from epoch 0 act alike, draw for draw."""
    a = make_agent(explore={"epsilon": 0.5}, seed=4)
    b = make_agent(explore={"epsilon": 0.5}, seed=4, curriculum={"magnitude": 1})
    a.start_epoch(1)
    b.start_epoch(1)
    s = states(256)
    assert torch.equal(a.policy(s, Mode.EXPLORE).actions, b.policy(s, Mode.EXPLORE).actions)


@pytest.mark.parametrize("branches", BRANCH_SETS)
def test_explore_with_every_coefficient_zero_is_the_greedy_policy(branches: BranchConfig) -> None:
    """epsilon, temperature, Thompson share and count bonus at 0 and no NoisyNet noise: the exploring
    policy picks the evaluation policy's actions (Q-mean centering, on by default, changes no argmax)."""
    agent = make_agent(branches, network={"noisy_sigma": 0.0}, explore=OFF)
    s = states(256)
    greedy = agent.policy(s, Mode.GREEDY).actions
    for _ in range(2):  # the second call sees non-zero action counts
        assert torch.equal(agent.policy(s, Mode.EXPLORE).actions, greedy)


@pytest.mark.parametrize(
    ("network", "explore"),
    [
        pytest.param({"noisy_sigma": 0.0}, {"epsilon": 0.2}, id="epsilon"),
        pytest.param({"noisy_sigma": 0.0}, {"temperature": 1.0}, id="temperature"),
        pytest.param({"noisy_sigma": 0.0}, {"thompson": 1.0}, id="thompson"),
        pytest.param({"noisy_sigma": 0.0}, {"count_bonus": 10.0}, id="count_bonus"),
        pytest.param({"noisy_sigma": 0.5}, {}, id="noisy_sigma"),
    ],
)
def test_each_exploration_coefficient_alone_moves_the_policy_off_greedy(network: dict, explore: dict) -> None:
    """The converse of the test above: each mechanism switched on by itself changes some action."""
    agent = make_agent(network=network, explore={**OFF, **explore})
    s = states(256)
    greedy = agent.policy(s, Mode.GREEDY).actions
    agent.policy(s, Mode.EXPLORE)  # fills the action counts the count bonus reads
    assert not torch.equal(agent.policy(s, Mode.EXPLORE).actions, greedy)


def test_q_mean_centering_is_gone() -> None:
    """Removing a branch's mean Q shifts all its actions equally, so it never changed a choice (issue 22):
    the key is removed, and a config that still sets it is refused rather than silently ignored."""
    with pytest.raises(ValueError, match="q_centering"):
        LearnConfig.model_validate({"q_centering": 1.0})


@torch.no_grad()
def test_the_aux_return_fed_to_the_next_state_is_bounded_and_odd() -> None:
    """The next-return prediction re-enters the state; a runaway aux head (output scaled x1e6) must
    reach the slot saturated at +-AUX_RETURN_BOUND with its sign, and a small one nearly unchanged."""
    agent = make_agent()
    last = agent.policy.net.aux[-1]
    obs = states(256)
    raw = agent.policy.net(obs).aux_return
    slot = agent.policy(obs, Mode.GREEDY).aux[:, 0]
    torch.testing.assert_close(slot, AUX_RETURN_BOUND * torch.tanh(raw / AUX_RETURN_BOUND))
    with torch.no_grad():
        last.weight.mul_(1e6)
        last.bias.mul_(1e6)
    raw = agent.policy.net(obs).aux_return
    slot = agent.policy(obs, Mode.GREEDY).aux[:, 0]
    assert raw.abs().max() > 1e4
    assert slot.abs().max() <= AUX_RETURN_BOUND and torch.equal(torch.sign(slot), torch.sign(raw))


@pytest.mark.parametrize(
    "backend", ["eager", pytest.param("inductor", marks=pytest.mark.slow)]
)
def test_compiled_exploring_policy_equals_the_eager_one(backend: str) -> None:
    """compile_policy changes how the exploring forward runs, not what it picks: the same seed gives
    the same actions, sizing inputs and aux predictions (float32, compiled kernels may sum in another
    order: 1e-5), in a whole graph (fullgraph: a graph break raises), and the compiled graph is
    reused by the next agent (one compile per process, not per fold)."""
    from torch._dynamo.utils import counters

    x = states(64)
    eager, compiled = make_agent(seed=3), make_agent(seed=3)
    compiled.policy.compile(backend)
    for _ in range(3):
        a, b = eager.policy(x, Mode.EXPLORE), compiled.policy(x, Mode.EXPLORE)
        assert torch.equal(a.actions, b.actions)
        for field in ("direction_conviction", "magnitude_conviction", "q_variance", "aux"):
            torch.testing.assert_close(getattr(b, field), getattr(a, field), rtol=1e-5, atol=1e-5)
    assert (a.actions != a.actions[0]).any()  # the draws vary: not a constant policy compared
    graphs = counters["stats"]["unique_graphs"]
    again = make_agent(seed=4)
    again.policy.compile(backend)
    again.policy(x, Mode.EXPLORE)
    assert counters["stats"]["unique_graphs"] == graphs  # a new agent's weights: no new graph


def test_greedy_policy_is_deterministic_and_the_argmax_of_mean_c51_and_iqn() -> None:
    """Mode.GREEDY with NoisyNet layers and non-trivial PopArt statistics (mu 0.3, sigma 5): repeated
    calls, with exploring calls (fresh noise) between them, return the same actions, which are
    argmax_a (E_C51 + sigma E_IQN + mu) / 2 computed from the noise-free network by hand."""
    agent = make_agent(network={"noisy_sigma": 0.5})
    popart = agent.learner.popart
    popart.mu.fill_(0.3)
    popart.nu.fill_(0.3**2 + 5.0**2)
    agent.policy.net.v_max.fill_(2.0)
    s = states(256)
    first = agent.policy(s, Mode.GREEDY)
    agent.policy(s, Mode.EXPLORE)
    second = agent.policy(s, Mode.GREEDY)
    for field in ("actions", "direction_conviction", "magnitude_conviction", "q_variance", "aux"):
        assert torch.equal(getattr(first, field), getattr(second, field)), field
    assert agent.policy.net.training  # the policy restores the mode it found

    net = agent.policy.net
    net.eval()
    out = net(s)
    net.train()
    z = 2.0 * torch.linspace(-1.0, 1.0, agent.cfg.network.atoms)
    for i, b in enumerate(out.branches):
        e_c51 = (torch.softmax(b.logits, dim=-1) * z).sum(-1)  # [N, A]
        e_iqn = 5.0 * b.quantiles.mean(-1) + 0.3
        want = ((e_c51 + e_iqn) / 2).argmax(1)
        assert torch.equal(first.actions[:, i], want), BRANCHES[i]
        if i == 0:  # the hand rule is informative: the heads alone and raw IQN would pick otherwise
            assert not torch.equal(e_c51.argmax(1), want)
            assert not torch.equal(((e_c51 + b.quantiles.mean(-1)) / 2).argmax(1), want)


# --- collection ----------------------------------------------------------------------------------
#
# Agent.collect runs the fused step (collect.Collector: policy, in-place env transition, staging,
# then the n-step windows of the whole epoch at once). The reference below is the plain loop it
# replaces: Agent.policy, TradingEnv.step, NStep push one step at a time, then flush. Two agents
# built alike draw the same random numbers, so the facts checked on the reference's recorded env
# steps are checked on the fast path's replay through their equality.


def _recording(env: TradingEnv) -> list[tuple[Tensor, Tensor, Tensor, Tensor]]:
    """Wrap ``env.step`` to record (picked actions, acted actions, reward, next obs) of every step.

    The acted action is the picked one with the realised direction (Hold under the plan lock) and
    magnitude (Kelly cap) where the episode was live: what replay must learn from."""
    log: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []
    step = env.step

    def recorded(actions: Tensor, *args: Tensor):
        nxt, res = step(actions, *args)
        acted = actions.clone()
        acted[:, 0] = torch.where(res.written, res.realised_direction, acted[:, 0])
        acted[:, 1] = torch.where(res.written, res.realised_magnitude, acted[:, 1])
        log.append((actions.clone(), acted, res.reward.clone(), nxt.clone()))
        return nxt, res

    env.step = recorded  # type: ignore[method-assign]
    return log


def reference_collect(agent: Agent, env: TradingEnv, obs: Tensor, steps: int) -> dict[str, Tensor]:
    """The eager reference of ``Agent.collect``: one policy call, env step and n-step push at a time."""
    acc = nstep(agent.cfg.learn, obs.shape[0], agent.device)
    sums = torch.zeros(5, dtype=torch.float64)
    for _ in range(steps):
        pol = agent.policy(obs, Mode.EXPLORE)
        agent.policy.signals.ema("q_gap", pol.q_gap)
        nxt, res = pol.step(env)
        aux_t = env.market.aux_targets
        rows = env.state.row - res.written.to(torch.int64)
        aux = aux_t[rows] if aux_t is not None else torch.full((obs.shape[0], len(AUX_TARGETS)), float("nan"))
        acted = pol.actions.clone()
        acted[:, 0] = torch.where(res.written, res.realised_direction, acted[:, 0])
        acted[:, 1] = torch.where(res.written, res.realised_magnitude, acted[:, 1])
        done = env.state.done | ~res.written
        out = acc.push(obs, acted, res.reward.float(), done, nxt, aux, valid=res.written)
        if out is not None:
            agent.replay.add(out)
        r, comp = res.reward.double(), res.components.abs().double()
        live = res.written.double().sum()
        sums += torch.stack([r.sum(), (r * r).sum(), live, comp[:, 1:].sum(), comp.sum()])
        obs = nxt
    tail = acc.flush()
    if tail is not None:
        agent.replay.add(tail)
    mean = sums[0] / sums[2].clamp(min=1)
    std = (sums[1] / sums[2].clamp(min=1) - mean * mean).clamp(min=0).sqrt()
    return {"train_sharpe": torch.where(std > 0, mean / std, 0.0), "reward_mean": mean}


def collect_pair(
    mkt, ecfg: EnvConfig, starts: Tensor, steps: int, **agent_kwargs
) -> tuple[Agent, list, Tensor, dict[str, Tensor]]:
    """The fast path's agent, the reference's recorded steps and first obs; asserts the two agents'
    replay, counts, signals and statistics agree (reward sums: float32 rounding of the window sum
    order, 1e-6; everything else exactly)."""
    fast, ref = make_agent(ecfg.branches, **agent_kwargs), make_agent(ecfg.branches, **agent_kwargs)
    env = TradingEnv(mkt, ecfg)
    obs0 = env.reset(starts)
    log = _recording(env)
    want = reference_collect(ref, env, obs0, steps)
    got = fast.collect(mkt, ecfg, starts, steps)
    assert len(fast.replay) == len(ref.replay)
    for k, buf in fast.replay.storage.items():
        if k == "reward":
            torch.testing.assert_close(buf, ref.replay.storage[k], rtol=1e-6, atol=1e-6)
        else:
            assert torch.equal(buf.nan_to_num(-7.0), ref.replay.storage[k].nan_to_num(-7.0)), k
    assert torch.equal(fast.replay.priorities.leaves, ref.replay.priorities.leaves)
    for a, b in zip(fast.policy.counts, ref.policy.counts, strict=True):
        assert torch.equal(a, b)
    assert torch.equal(fast.policy.signals["q_gap"], ref.policy.signals["q_gap"])
    for k, v in want.items():
        torch.testing.assert_close(got[k], v.to(got[k].dtype))
    return fast, log, obs0, got


def test_collect_one_step_transitions_are_the_env_steps() -> None:
    """n = 1: every env step of every episode is one replay row holding the state the action was
    taken in, the action, the env's reward, gamma (0 on the episode's last step) and the next state,
    whose aux slots carry the policy's predictions from that step (the one-step lag)."""
    n_env, steps, gamma = 4, 5, 0.99
    mkt, ecfg = rising_market(24), env_config(episode_rows=5)
    agent, log, obs0, _ = collect_pair(
        mkt, ecfg, torch.tensor([0, 3, 7, 11]), steps,
        explore={"epsilon": 1.0}, learn={"n_step": 1, "gamma": gamma}
    )
    rows = n_env * steps
    assert len(agent.replay) == rows and len(log) == steps
    st = {k: v[:rows].view(steps, n_env, *v.shape[1:]) for k, v in agent.replay.storage.items()}
    seen = [obs0] + [nxt for *_, nxt in log[:-1]]
    rewards = torch.stack([r for _, _, r, _ in log]).float()
    assert bool(rewards.ne(0).any())  # trades happen: the comparison below is not 0 == 0
    assert any(not torch.equal(picked, acted) for picked, acted, _, _ in log)  # the plan lock acted
    for t, (_, acted, _, nxt) in enumerate(log):
        assert torch.equal(st["state"][t], seen[t])
        assert torch.equal(st["action"][t], acted)
        assert torch.equal(st["next_state"][t], nxt)
    assert torch.equal(st["reward"], rewards)
    # Episodes of 5 rows last 4 steps: the fifth step is not written (priority 0, never sampled).
    want_discount = torch.full((steps, n_env), gamma)
    want_discount[3:] = 0.0
    assert torch.equal(st["discount"], want_discount)
    assert bool(st["aux"].isnan().all())  # this market has no auxiliary targets
    leaves = agent.replay.priorities.leaves[:rows].view(steps, n_env)
    assert bool((leaves[:4] > 0).all()) and bool((leaves[4] == 0).all())


def test_collect_three_step_returns() -> None:
    n_env, steps, gamma = 3, 6, 0.9
    mkt, ecfg = rising_market(32), env_config(episode_rows=20)
    agent, log, _, _ = collect_pair(
        mkt, ecfg, torch.tensor([0, 4, 9]), steps,
        explore={"epsilon": 1.0}, learn={"n_step": 3, "gamma": gamma}
    )
    windows = steps - 2
    assert len(agent.replay) == n_env * steps  # the last two steps' windows: the truncated tail
    r = torch.stack([x[2] for x in log]).float()  # [steps, N]
    want = r[:-2] + gamma * r[1:-1] + gamma**2 * r[2:]
    got = agent.replay.storage["reward"][: n_env * windows].view(windows, n_env)
    torch.testing.assert_close(got, want)
    disc = agent.replay.storage["discount"][: n_env * windows]
    torch.testing.assert_close(disc, torch.full_like(disc, gamma**3))
    nxt = agent.replay.storage["next_state"][: n_env * windows].view(windows, n_env, W)
    assert torch.equal(nxt[0], log[2][3]) and torch.equal(nxt[-1], log[-1][3])
    tail = agent.replay.storage["reward"][n_env * windows : n_env * steps].view(2, n_env)
    torch.testing.assert_close(tail, torch.stack([r[-2] + gamma * r[-1], r[-1]]))


def test_collect_decision_windows_run_to_the_next_decision_state() -> None:
    """bootstrap = decision: each replayed window runs from its step to the next plan-free state
    (at most n steps; the epoch's tail truncated), recomputed here from the recorded env steps;
    with 2-bar plans most windows close early, so the check has teeth."""
    n_env, steps, gamma, n = 3, 12, 0.9, 6
    mkt, ecfg = rising_market(40), env_config(episode_rows=30, horizon=2)
    agent, log, obs0, _ = collect_pair(
        mkt,
        ecfg,
        torch.tensor([0, 4, 9]),
        steps,
        explore={"epsilon": 1.0},
        learn={"bootstrap": "decision", "n_step": n, "gamma": gamma},
        capacity=64,
    )
    active = STATE_LAYOUT.index("plan.active")
    obs = [obs0] + [x[3] for x in log]  # [steps + 1] states [N, W]
    r = torch.stack([x[2] for x in log]).float()  # [steps, N]
    want_r, want_d, early = [], [], 0
    for t in range(steps):  # pushed windows first (t < steps - n + 1), then the flushed tail
        for e in range(n_env):
            ret, m = 0.0, 0
            while m < min(n, steps - t):
                ret += gamma**m * float(r[t + m, e])
                m += 1
                if obs[t + m][e, active] < 0.5:  # the next decision state ends the window
                    break
            early += m < min(n, steps - t)
            want_r.append(ret)
            want_d.append(gamma**m)
    got_r = agent.replay.storage["reward"][: steps * n_env]
    got_d = agent.replay.storage["discount"][: steps * n_env]
    torch.testing.assert_close(got_r, torch.tensor(want_r), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_d, torch.tensor(want_d), rtol=1e-5, atol=1e-6)
    assert early > steps * n_env // 2


def test_collect_with_every_exploration_term_and_aux_targets_equals_the_reference() -> None:
    """Noisy layers, Boltzmann, Thompson, count bonus and epsilon all drawing, aux targets present,
    episodes ending inside the epoch and n = 3: the fast path's replay, counts and signals equal the
    plain loop's (collect_pair), and a second epoch on the same collector (state reset in place)
    still does."""
    rows, n_env, steps = 40, 6, 9
    mkt = rising_market(rows)
    mkt = dataclasses.replace(
        mkt, aux_targets=torch.randn(rows, len(AUX_TARGETS), generator=torch.Generator().manual_seed(5))
    )
    ecfg = env_config(episode_rows=7)
    kw = {
        "explore": {"epsilon": 0.2, "temperature": 1.0, "thompson": 0.5, "count_bonus": 0.1},
        "network": {"noisy_sigma": 0.5},
        "learn": {"n_step": 3},
        "capacity": 256,
    }
    starts = torch.tensor([0, 2, 5, 11, 20, 30])
    fast, log, _, stats = collect_pair(mkt, ecfg, starts, steps, **kw)
    assert bool(fast.replay.storage["aux"][: n_env * steps].isfinite().all())
    assert stats["reward_mean"] != 0
    # A second epoch through the same (cached) collector against a reference continued alike.
    ref = make_agent(ecfg.branches, **kw)
    env = TradingEnv(mkt, ecfg)
    reference_collect(ref, env, env.reset(starts), steps)
    starts2 = torch.tensor([1, 3, 8, 13, 22, 31])
    reference_collect(ref, env, env.reset(starts2), steps)
    fast.collect(mkt, ecfg, starts2, steps)
    got, want = fast.replay.storage["reward"], ref.replay.storage["reward"]
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert torch.equal(fast.replay.storage["action"], ref.replay.storage["action"])
    assert torch.equal(fast.replay.storage["next_state"], ref.replay.storage["next_state"])


# --- a known answer ------------------------------------------------------------------------------


def test_short_learning_run_on_a_rising_market_prefers_long() -> None:
    """Mid rises 1 point a row: Long earns $50 per contract a row against $7.25 of costs per contract
    and side; Short loses, Hold and Flat earn nothing. Six epochs of collection (16 episodes x 12
    steps, epsilon 0.5) and 25 updates each move the greedy direction on flat start states from
    almost never Long to Long in most of them."""
    rows, n_env, steps = 48, 16, 12
    mkt, ecfg = rising_market(rows), env_config(episode_rows=steps)
    agent = make_agent(
        ecfg.branches,
        seed=4,
        explore={"epsilon": 0.5, "thompson": 0.0},
        learn={"lr": 1e-3, "polyak": 0.05},
        capacity=4096,
    )
    starts_gen = torch.Generator().manual_seed(4)

    def long_share() -> float:
        obs = TradingEnv(mkt, ecfg).reset(torch.arange(rows - 2))  # flat, no plan: a free choice
        return float((agent.policy(obs, Mode.GREEDY).actions[:, 0] == LONG).float().mean())

    assert long_share() < 0.25
    for _ in range(6):
        agent.collect(mkt, ecfg, torch.randint(0, rows - steps - 1, (n_env,), generator=starts_gen), steps)
        agent.learn(25, 128)
    assert long_share() >= 0.75


@pytest.mark.parametrize("boost", [0.0, 20.0])
def test_decision_boost_draws_free_states_more_often(boost: float) -> None:
    """A replay of 1,024 transitions, one in ten from a state free to choose a direction (the rest
    plan-locked). After updates with ``decision_boost`` the free ones are drawn about
    ``(1 + boost)^alpha`` times as often as their priorities alone would give; without it, about
    at their share."""
    agent = make_agent(learn={"lr": 1e-3}, replay={"decision_boost": boost}, capacity=1024)
    n, active = 1024, STATE_LAYOUT.index("plan.active")
    s = states(n)
    free = torch.arange(n) % 10 == 0
    s[:, active] = (~free).float()
    agent.replay.add(
        {
            "state": s,
            "action": torch.zeros(n, len(BRANCHES), dtype=torch.int64),
            "reward": torch.randn(n, generator=torch.Generator().manual_seed(2)),
            "discount": torch.full((n,), 0.9),
            "next_state": s,
            "aux": torch.full((n, len(AUX_TARGETS)), float("nan")),
        }
    )
    for _ in range(4):  # every slot is drawn and re-prioritised at least once with high probability
        agent.learn(16, 256)
    drawn, _, _ = agent.replay.sample(4096, torch.Generator().manual_seed(3))
    share = float((drawn["state"][:, active] < 0.5).float().mean())
    if boost == 0:
        assert 0.04 < share < 0.2
    else:
        assert share > 0.35  # (1 + 20)^0.6 = 6.2 times their 10%: about 40%


# --- seeding and state ----------------------------------------------------------------------------


def _params_equal(a: Agent, b: Agent) -> bool:
    sa, sb = a.policy.net.state_dict(), b.policy.net.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_same_seed_same_weights_whatever_ran_between_and_the_global_stream_is_untouched() -> None:
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = make_agent(seed=7)
    assert torch.equal(torch.get_rng_state(), before)  # building an agent draws nothing from it
    torch.rand(1000)  # the process's stream moves on ...
    torch.manual_seed(99)  # ... or is reseeded
    second = make_agent(seed=7)
    assert _params_equal(first, second)
    assert not _params_equal(first, make_agent(seed=8))  # and the seed is what sets them
    # The agent's own generator starts from the seed too: the same exploration draws.
    s = states(32)
    explore = {"epsilon": 0.5}
    a, b = make_agent(seed=7, explore=explore), make_agent(seed=7, explore=explore)
    assert torch.equal(a.policy(s, Mode.EXPLORE).actions, b.policy(s, Mode.EXPLORE).actions)


def _trained(seed: int, branches: BranchConfig | None = None) -> tuple[Agent, EnvConfig]:
    """An agent after one collection and a few updates on a rising market (every state part moved)."""
    mkt, ecfg = rising_market(40), env_config(episode_rows=9)
    agent = make_agent(ecfg.branches, seed=seed, explore={"epsilon": 0.3}, learn={"lr": 1e-3}, capacity=256)
    agent.collect(mkt, ecfg, torch.arange(8) * 3, 8)
    agent.learn(3, 32)
    agent.policy.temperature_boost = 1.5
    agent.adjust(lr=2.0)
    return agent, ecfg


def test_state_dict_round_trip_continues_exactly() -> None:
    """An agent of another seed loading a trained one's state_dict acts, samples, learns and collects
    bit for bit as the original does from there on."""
    a, ecfg = _trained(seed=3)
    b = make_agent(ecfg.branches, seed=11, explore={"epsilon": 0.3}, learn={"lr": 1e-3}, capacity=256)
    b.load_state_dict(a.state_dict())
    assert b.policy.temperature_boost == 1.5 and b.learner.lr_scale == a.learner.lr_scale == 2.0
    assert all(torch.equal(x, y) for x, y in zip(a.policy.counts, b.policy.counts, strict=True))
    assert len(b.replay) == len(a.replay) > 0
    s = states(16)
    assert torch.equal(a.policy(s, Mode.EXPLORE).actions, b.policy(s, Mode.EXPLORE).actions)  # generator
    for agent in (a, b):
        # The learner's noisy-layer noise comes from torch's process-wide stream (the run loop seeds
        # it: foxhunt.seeding.seed_process), not from the agent's state: the same for both here.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(5)
            agent.start_epoch(1)
            agent.learn(2, 32)
    assert _params_equal(a, b)
    ta, tb = a.learner.target.state_dict(), b.learner.target.state_dict()
    assert all(torch.equal(ta[k], tb[k]) for k in ta)
    out_a, out_b = a.policy(s, Mode.GREEDY), b.policy(s, Mode.GREEDY)
    assert torch.equal(out_a.direction_conviction, out_b.direction_conviction)  # signals came along


def test_policy_state_is_what_acting_reads_and_load_weights_keeps_the_rest() -> None:
    a, ecfg = _trained(seed=3)
    acting = make_agent(ecfg.branches, seed=11, capacity=16)
    acting.load_state_dict({"policy": a.policy.state_dict()}, Restore.POLICY)
    s = states(16)
    want, got = a.policy(s, Mode.GREEDY), acting.policy(s, Mode.GREEDY)
    assert torch.equal(want.actions, got.actions) and torch.equal(want.q_variance, got.q_variance)
    t, n = acting.learner.target.state_dict(), acting.policy.net.state_dict()
    assert all(torch.equal(t[k], n[k]) for k in n)  # the target starts as the online network

    # The rewind: weights and optimizer back, replay, signals, counts and generator as they were.
    b, _ = _trained(seed=5)
    kept = (
        b.policy.signals.state_dict(),
        [c.clone() for c in b.policy.counts],
        b.gen.get_state(),
        len(b.replay),
    )
    b.load_state_dict(a.state_dict(), Restore.WEIGHTS)
    assert _params_equal(a, b)
    assert all(torch.equal(v, b.policy.signals[k]) for k, v in kept[0].items())
    assert all(torch.equal(x, y) for x, y in zip(kept[1], b.policy.counts, strict=True))
    assert torch.equal(kept[2], b.gen.get_state()) and kept[3] == len(b.replay)


def test_head_parameters_are_the_value_and_advantage_streams() -> None:
    agent = make_agent()
    heads = agent.plateau.head_params
    params = agent.policy.net.named_parameters()
    named = [p for name, p in params if name.split(".")[0] in ("value", "advantage")]
    assert len(heads) == len(named) > 0 and all(x is y for x, y in zip(heads, named, strict=True))
    assert agent.plateau.optimizer is agent.learner.opt


def test_expected_q_is_what_the_greedy_policy_takes_the_argmax_of() -> None:
    agent = make_agent(explore=OFF)
    s = states(32)
    qs = agent.policy.expected_q(s)
    greedy = agent.policy(s, Mode.GREEDY).actions
    assert len(qs) == len(BRANCHES)
    for i, q in enumerate(qs):
        assert torch.equal(q.argmax(1), greedy[:, i])
    assert agent.policy.net.training  # evaluated at the noisy layers' means, then back to training mode


@pytest.mark.parametrize("branches", BRANCH_SETS)
def test_entry_margin_trades_only_where_short_or_long_beats_hold_and_flat_by_the_margin(
    branches: BranchConfig,
) -> None:
    """With ``agent.act.entry_margin = m`` the direction is Short or Long only where its E[Q] beats the
    best of Hold and Flat by more than m running gaps (the q_gap signal, set so the margin is about the
    median advantage of the trades the plain argmax takes), in both modes (exploration off, NoisyNet
    too, so both modes act on the same E[Q]); the other branches and the sizing inputs are those of the
    plain argmax."""
    m = 0.5
    plain = make_agent(branches, explore=OFF, network={"noisy_sigma": 0.0})
    margined = make_agent(branches, explore=OFF, network={"noisy_sigma": 0.0}, act={"entry_margin": m})
    s = states(512)
    q = plain.policy.expected_q(s)[0]
    stay = q[:, [d for d in (Direction.HOLD, Direction.FLAT) if d < q.shape[1]]].max(1)
    trade = q[:, [Direction.SHORT, Direction.LONG]]
    best_trade = trade.max(1)
    advantage = best_trade.values - stay.values
    positive = advantage[advantage > 0].sort().values
    mid = positive.shape[0] // 2  # halfway between two advantages: no row sits on the margin
    gap = float(positive[mid - 1 : mid + 1].mean()) / m
    for agent in (plain, margined):
        agent.policy.signals["q_gap"].fill_(gap)
    want = torch.where(
        best_trade.values - m * gap > stay.values,
        torch.tensor([Direction.SHORT, Direction.LONG])[best_trade.indices],
        torch.tensor([Direction.HOLD, Direction.FLAT])[stay.indices],
    )
    for mode in (Mode.GREEDY, Mode.EXPLORE):
        base, out = plain.policy(s, mode), margined.policy(s, mode)
        assert torch.equal(out.actions[:, 0], want), mode
        assert torch.equal(out.actions[:, 1:], base.actions[:, 1:]), mode
        assert torch.equal(out.direction_conviction, base.direction_conviction), mode
    entries = torch.tensor([Direction.SHORT, Direction.LONG])
    trades_plain = torch.isin(plain.policy(s, Mode.GREEDY).actions[:, 0], entries).sum()
    assert 0 < int(torch.isin(want, entries).sum()) < int(trades_plain)  # the margin bites
