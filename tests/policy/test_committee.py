"""A committee of trained checkpoints (foxhunt.policy.trained.CommitteePolicy): `foxhunt backtest`
with the checkpoint repeated, and the seeds study's committee (foxhunt.tune.seeds.committee_result)
judging the same fold alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.errors import FoxhuntError
from foxhunt.features.cache_file import FeatureCache
from foxhunt.features.layout import STATE_LAYOUT
from foxhunt.policy.trained import CheckpointPolicy, CommitteePolicy, differing_market
from foxhunt.train.run import train
from foxhunt.tune.seeds import committee_result
from tests.train.test_run import quiet, tiny_cfg

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def runs(tiny_cache: FeatureCache, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two tiny runs of one config, seeds 10 and 11 (two folds x two epochs each)."""
    out = []
    for seed in (10, 11):
        folder = tmp_path_factory.mktemp(f"seed{seed}")
        train(tiny_cache, tiny_cfg(f"run.seed={seed}"), folder, log=quiet)
        out.append(folder)
    return out


def _last(run: Path, fold: int) -> Path:
    return run / "checkpoints" / f"fold{fold}" / "last.safetensors"


def test_a_committee_of_one_checkpoint_acts_as_the_checkpoint(runs: list[Path]) -> None:
    cfg = tiny_cfg()
    x = torch.randn(64, STATE_LAYOUT.width, generator=torch.Generator().manual_seed(0))
    want = CheckpointPolicy(_last(runs[0], 1), cfg).policy("cpu")(x, None)
    got = CommitteePolicy([_last(runs[0], 1)], cfg).policy("cpu")(x, None)
    for field in ("actions", "direction_conviction", "magnitude_conviction", "q_variance", "aux"):
        assert torch.equal(getattr(got, field), getattr(want, field)), field


def test_a_committee_refuses_checkpoints_of_two_folds(runs: list[Path]) -> None:
    with pytest.raises(FoxhuntError, match="fold 1.*fold 0") as info:
        CommitteePolicy([_last(runs[0], 0), _last(runs[1], 1)], tiny_cfg())
    assert str(_last(runs[1], 1)) in str(info.value)


def test_members_must_share_the_market_not_the_learner() -> None:
    base = tiny_cfg()
    assert differing_market(base, tiny_cfg("run.seed=11", "agent.learn.lr=0.001", "train.epochs=3")) == []
    assert differing_market(base, tiny_cfg("folds.n_folds=3", "env.plan.barrier.horizon=7")) == [
        "folds",
        "env",
    ]
    assert differing_market(base, tiny_cfg("synth.alpha=0")) == ["synth"]


def test_backtest_of_a_committee_is_the_studys_committee(
    tiny_cache: FeatureCache, runs: list[Path], tmp_path: Path
) -> None:
    """`foxhunt backtest --checkpoint A --checkpoint B` (the fused step that writes decisions.csv) and
    the seeds study's committee (the plain evaluation) judge the same fold to the same numbers."""
    cfg = tiny_cfg()
    study = committee_result(tiny_cache.path, cfg, runs)
    assert study is not None and [f.fold for f in study.folds] == [0, 1]
    reported = [json.loads((r / "folds.json").read_text()) for r in runs]
    for k in (0, 1):
        members = [run / reported[i][k]["checkpoint_file"] for i, run in enumerate(runs)]
        args = ["backtest", "--cache", str(tiny_cache.path), "--out", str(tmp_path / f"f{k}"), "-q"]
        result = runner.invoke(app, [*args, "--checkpoint", str(members[0]), "--checkpoint", str(members[1])])
        assert result.exit_code == 0, result.output
        body = json.loads((tmp_path / f"f{k}" / "metrics.json").read_text())
        assert body["folds"] == [k] and body["policy"] == f"committee of 2 checkpoints (fold {k})"
        assert body["net_pnl"] == pytest.approx(study.folds[k].net_pnl, rel=1e-9, abs=1e-9)
        assert body["trades"] == study.folds[k].trades
        # the fold's baselines are the members' own report's
        assert study.folds[k].flat == reported[0][k]["baselines"]["flat"]["net_pnl"]
    assert committee_result(tiny_cache.path, cfg, runs[:1]) is None  # one run is no committee


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_a_checkpoint_and_its_committee_hold_the_branches_its_epoch_held(
    tiny_cache: FeatureCache, tmp_path: Path, algo: str
) -> None:
    """agent.curriculum holds every execution branch in epoch 0 and releases them in epoch 1. Loaded
    from its checkpoint, epoch 0's policy acts Full, Market, Normal on every row, as training's
    validation of that epoch did, and so does a committee of it; beside epoch 1's member, which
    learned those branches, the committee's execution choices are that member's."""
    cfg = tiny_cfg(
        f"agent.algo={algo}",
        "env.branches.magnitude=3",  # the full action space (the smoke profile trades the direction)
        "env.branches.magnitude_fractions=[0.25, 0.5, 1.0]",
        "env.branches.order_type=3",
        "env.branches.urgency=3",
        "agent.curriculum.magnitude=1",
        "agent.curriculum.order_type=1",
        "agent.curriculum.urgency=1",
    )
    train(tiny_cache, cfg, tmp_path, log=quiet)
    ring = tmp_path / "checkpoints" / "fold1" / "ring"
    held, free = ring / "epoch0000.safetensors", ring / "epoch0001.safetensors"
    x = torch.randn(256, STATE_LAYOUT.width, generator=torch.Generator().manual_seed(1))
    default = torch.tensor([cfg.env.branches.magnitude - 1, 0, 0])
    for files in ([held], [held, held]):
        acts = CommitteePolicy(files, cfg).policy("cpu")(x, None).actions
        assert bool((acts[:, 1:] == default).all()), files
    alone = CheckpointPolicy(free, cfg).policy("cpu")(x, None).actions
    assert not bool((alone[:, 1:] == default).all())  # released: it chooses
    both = CommitteePolicy([held, free], cfg).policy("cpu")(x, None).actions
    assert torch.equal(both[:, 1:], alone[:, 1:])
