"""The PPO learner (agent.algo = ppo) through the project's paths: the collector's rollout sink, the
training run, checkpoints (round trip, cross-algo refusal), the trained-policy readers and committees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from foxhunt.agent.actor import Mode
from foxhunt.agent.agent import Agent, Restore
from foxhunt.agent.build import build_agent
from foxhunt.agent.ppo import ActorCritic, PPOAgent
from foxhunt.config.models import FoxhuntConfig
from foxhunt.domain.actions import BranchConfig, Direction
from foxhunt.errors import FoxhuntError
from foxhunt.features.cache_file import FeatureCache
from foxhunt.features.layout import STATE_LAYOUT
from foxhunt.policy.checkpoint import CheckpointMismatchError, Fingerprint, load_checkpoint
from foxhunt.policy.trained import CheckpointPolicy, CommitteePolicy
from foxhunt.train.run import Interrupted, train
from tests.train.test_run import canon, quiet, tiny_cfg

pytestmark = pytest.mark.usefixtures("one_thread")

PPO = ("agent.algo=ppo", "agent.ppo.minibatches=2", "agent.ppo.epochs=2")


def ppo_cfg(*overrides: str) -> FoxhuntConfig:
    return tiny_cfg(*PPO, *overrides)


@pytest.fixture(scope="module")
def ppo_run(tiny_cache: FeatureCache, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ppo_run")
    train(tiny_cache, ppo_cfg(), out, log=quiet)
    return out


def test_build_agent_picks_the_learner() -> None:
    cfg = ppo_cfg()
    assert isinstance(build_agent(cfg.agent, cfg.env.branches), PPOAgent)
    dqn = tiny_cfg()
    assert isinstance(build_agent(dqn.agent, dqn.env.branches, replay_capacity=64), Agent)


def test_mirror_policy_is_equivariant() -> None:
    cfg = ppo_cfg("agent.network.symmetry=mirror")
    net = ActorCritic(cfg.agent, BranchConfig())
    s = torch.randn(5, STATE_LAYOUT.width)
    out, image = net(s), net(s.index_select(1, net.mirror_source) * net.mirror_sign)
    d = out.logits[0]
    assert torch.allclose(d[:, Direction.LONG], image.logits[0][:, Direction.SHORT], atol=1e-5)
    assert torch.allclose(d[:, Direction.HOLD], image.logits[0][:, Direction.HOLD], atol=1e-5)
    assert torch.allclose(out.value, image.value, atol=1e-5)


def test_greedy_is_the_argmax_per_branch_and_exploring_samples() -> None:
    cfg = ppo_cfg()
    agent = build_agent(cfg.agent, BranchConfig(), seed=3)
    s = torch.randn(64, STATE_LAYOUT.width)
    greedy = agent.policy(s, Mode.GREEDY)
    lp = agent.policy.expected_q(s)
    assert torch.equal(greedy.actions, torch.stack([x.argmax(-1) for x in lp], 1))
    drawn = agent.policy(s, Mode.EXPLORE).actions
    assert drawn.shape == (64, 4) and not torch.equal(drawn, greedy.actions)  # near-uniform at init
    assert torch.all(greedy.direction_conviction == 1) and torch.all(greedy.q_variance == 0)


def test_a_ppo_run_trains_every_fold_and_reports(ppo_run: Path) -> None:
    folds = json.loads((ppo_run / "folds.json").read_text())
    assert len(folds) == 2
    for f in folds:
        assert all(h["loss"] == h["loss"] for h in f["history"])  # finite losses, every epoch
        assert "net_pnl" in f and "baselines" in f


def test_an_interrupted_ppo_run_resumes_to_the_same_result(
    ppo_run: Path, tiny_cache: FeatureCache, tmp_path: Path
) -> None:
    """The learner's network, optimizer and return scale, the generator and the signals come back
    from the last checkpoint: on the CPU the resumed run is the uninterrupted one, number for number."""
    with pytest.raises(Interrupted):
        train(tiny_cache, ppo_cfg(), tmp_path / "r", log=quiet, stop_after=(1, 0))
    train(tiny_cache, ppo_cfg(), tmp_path / "r", resume=True, log=quiet)
    whole = json.loads((ppo_run / "folds.json").read_text())
    resumed = json.loads((tmp_path / "r" / "folds.json").read_text())
    assert canon(resumed) == canon(whole)


def test_checkpoint_round_trip_and_it_backtests_as_its_agent(ppo_run: Path) -> None:
    path = ppo_run / "checkpoints" / "fold_0" / "last.safetensors"
    if not path.exists():
        path = next((ppo_run / "checkpoints").rglob("last*.safetensors"))
    cfg = ppo_cfg()
    ckpt = CheckpointPolicy(path, cfg)
    agent = ckpt.agent("cpu")
    assert isinstance(agent, PPOAgent)
    again = build_agent(cfg.agent, cfg.env.branches)
    again.load_state_dict({"policy": agent.policy.state_dict()}, Restore.POLICY)
    s = torch.randn(32, STATE_LAYOUT.width)
    assert torch.equal(agent.policy(s, Mode.GREEDY).actions, again.policy(s, Mode.GREEDY).actions)
    # a committee of one PPO member is that member
    one = CommitteePolicy([path], cfg).policy("cpu")
    assert torch.equal(one(s, None).actions, agent.policy(s, Mode.GREEDY).actions)


def test_a_ppo_checkpoint_refuses_a_dqn_agent_with_one_line(ppo_run: Path) -> None:
    path = next((ppo_run / "checkpoints").rglob("last*.safetensors"))
    dqn = tiny_cfg()
    agent = Agent(dqn.agent, dqn.env.branches, replay_capacity=64)
    expect = Fingerprint.of(agent.policy.state_dict(), dqn.env.branches)
    with pytest.raises(CheckpointMismatchError) as e:
        load_checkpoint(path, expect=expect)
    assert e.value.differences == ["made by agent.algo = ppo, this agent is agent.algo = dqn"]


def test_a_committee_refuses_to_mix_learners(ppo_run: Path, tmp_path: Path, tiny_cache: FeatureCache) -> None:
    dqn_run = tmp_path / "dqn"
    train(tiny_cache, tiny_cfg("folds.n_folds=2", "train.epochs=1"), dqn_run, log=quiet)
    a = next((ppo_run / "checkpoints").rglob("last*.safetensors"))
    b = next(dqn_run.glob("checkpoints/**/last*.safetensors"))
    with pytest.raises(FoxhuntError, match="agent.algo"):
        CommitteePolicy([a, b], ppo_cfg())


def test_serve_takes_a_ppo_agent(ppo_run: Path) -> None:
    from foxhunt.serve.decide import Decider

    path = next((ppo_run / "checkpoints").rglob("last*.safetensors"))
    agent = CheckpointPolicy(path, ppo_cfg()).agent("cpu")
    decider = Decider(agent)
    assert decider.members == [agent] and not agent.policy.net.training


def test_a_ppo_checkpoint_exports_and_its_export_acts_as_it(ppo_run: Path, tmp_path: Path) -> None:
    """``foxhunt export`` of a PPO checkpoint (its policy entries are the actor-critic's and the signals,
    not DQN's network and PopArt): the weights-only file loads as the same PPO agent."""
    from foxhunt.policy.checkpoint import export_weights

    path = next((ppo_run / "checkpoints").rglob("last*.safetensors"))
    export = export_weights(path, tmp_path / "export")
    agent = CheckpointPolicy(path, ppo_cfg()).agent("cpu")
    exported = CheckpointPolicy(export, ppo_cfg()).agent("cpu")
    assert isinstance(exported, PPOAgent)
    s = torch.randn(32, STATE_LAYOUT.width)
    assert torch.equal(exported.policy(s, Mode.GREEDY).actions, agent.policy(s, Mode.GREEDY).actions)


def test_foxhunt_run_with_ppo_finishes_and_writes_a_report(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from foxhunt.cli import app
    from tests.test_job import QUICK_ALPHA
    from tests.train.test_run import TINY

    sets = [a for s in (*TINY, *QUICK_ALPHA, *PPO) for a in ("--set", s)]
    result = CliRunner().invoke(app, ["run", "--profile", "smoke", "--out", str(tmp_path), "-q", *sets])
    assert result.exit_code == 0, result.output
    body = json.loads((tmp_path / "metrics.json").read_text())
    assert [f["fold"] for f in body["folds"]] == [0, 1]
    assert (tmp_path / "report.html").stat().st_size > 0
    recorded = json.loads((tmp_path / "train" / "train.config.json").read_text())
    assert recorded["config"]["agent"]["algo"] == "ppo"


FULL_ACTIONS = (
    "env.branches.magnitude=3",
    "env.branches.magnitude_fractions=[0.25,0.5,1.0]",
    "env.branches.order_type=3",
    "env.branches.urgency=3",
)


@pytest.mark.slow
def test_ppo_learns_the_planted_signal_with_the_full_action_space(tmp_path: Path) -> None:
    """The known answer of docs/results/2026-12-07-ppo.md's full-action-space row: one PPO agent, the
    smoke profile's market at synth.seed 101, 4 x 3 x 3 x 3 actions, 20 epochs, beats flat over the
    validation folds and trades with limit orders (about 10 minutes on a free CPU core)."""
    from foxhunt.config.loader import load_config
    from foxhunt.data.synth import write_synthetic
    from foxhunt.dataset.build import get_or_build

    sets = ["synth.seed=101", "train.members=1", "agent.algo=ppo", "train.epochs=20", *FULL_ACTIONS]
    cfg = load_config(profile="smoke", overrides=sets)
    cache = get_or_build(write_synthetic(cfg.synth, tmp_path / "market"), cfg, tmp_path / "cache")
    folds = train(cache, cfg, tmp_path / "run", log=quiet)
    assert sum(f["net_pnl"] for f in folds) > 0.0  # flat makes 0
    assert all(f["trades"] > 0 for f in folds)
    market_share = [f["actions"]["picked"]["order_type"]["Market"] for f in folds]
    assert all(share < 0.5 for share in market_share)  # the execution branches are in use


def test_a_ppo_run_with_counterfactuals_and_a_curriculum_trains_every_fold(
    tiny_cache: FeatureCache, tmp_path: Path
) -> None:
    """The counterfactual targets and the curriculum through the training loop (both once refused under
    PPO): the full action space, the order type and urgency held for the first epoch, every fold trains
    to finite losses and reports."""
    sets = (*FULL_ACTIONS, "agent.counterfactual.weight=1", "agent.curriculum.order_type=1")
    folds = train(tiny_cache, ppo_cfg(*sets, "agent.curriculum.urgency=1"), tmp_path, log=quiet)
    assert len(folds) == 2
    for f in folds:
        assert all(h["loss"] == h["loss"] for h in f["history"])
        assert "net_pnl" in f
