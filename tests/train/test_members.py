"""A run of several members (train.members): member 0 is the run a single agent makes, member m the run
of its own seed, and each fold reports their committee exactly as the seeds study's committee and
`foxhunt backtest --checkpoint ...` judge those checkpoints; trained beside the run in a spawned
process, sequentially, or resumed after an interruption, the numbers are the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from foxhunt.features.cache_file import FeatureCache
from foxhunt.report.html import _checkpoint_cell
from foxhunt.seeding import MEMBER_STRIDE, member_seed
from foxhunt.train.members import COMMITTEE_KEY, member_folder
from foxhunt.train.run import Interrupted, start_members, train
from foxhunt.tune.objective import trial_config
from foxhunt.tune.seeds import committee_result
from tests.train.test_run import canon, quiet, same, tiny_cfg

pytestmark = pytest.mark.usefixtures("one_thread")

SEED = 10


def _folds(run: Path) -> list[dict]:
    return json.loads((run / "folds.json").read_text())


@pytest.fixture(scope="module")
def singles(tiny_cache: FeatureCache, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Plain one-agent runs of the members' seeds: SEED and SEED + MEMBER_STRIDE."""
    out = []
    for m in (0, 1):
        folder = tmp_path_factory.mktemp(f"single{m}")
        train(tiny_cache, tiny_cfg(f"run.seed={member_seed(SEED, m)}"), folder, log=quiet)
        out.append(folder)
    return out


@pytest.fixture(scope="module")
def sequential(tiny_cache: FeatureCache, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two members, the second trained after the first in this process (member_workers = 1)."""
    folder = tmp_path_factory.mktemp("members")
    cfg = tiny_cfg(f"run.seed={SEED}", "train.members=2", "train.member_workers=1")
    train(tiny_cache, cfg, folder, log=quiet)
    return folder


def test_member_seeds_are_the_run_seed_then_strides() -> None:
    assert [member_seed(7, m) for m in range(3)] == [7, 7 + MEMBER_STRIDE, 7 + 2 * MEMBER_STRIDE]
    assert member_folder(Path("run"), 0) == Path("run")
    assert member_folder(Path("run"), 2) == Path("run/members/m2")


def test_member_0_is_the_single_agents_run_and_member_1_its_own_seed(
    sequential: Path, singles: list[Path]
) -> None:
    for m, single in enumerate(singles):
        for k in (0, 1):
            a = load_file(member_folder(sequential, m) / "checkpoints" / f"fold{k}" / "last.safetensors")
            b = load_file(single / "checkpoints" / f"fold{k}" / "last.safetensors")
            assert a.keys() == b.keys()
            assert all(same(a[key], b[key]) for key in a), (m, k)
    for k, fold in enumerate(_folds(sequential)):
        results = fold[COMMITTEE_KEY]["member_results"]
        for m, single in enumerate(singles):  # each member's own numbers are its single run's
            own = _folds(single)[k]
            assert results[m]["net_pnl"] == own["net_pnl"] and results[m]["trades"] == own["trades"]


def test_each_fold_reports_the_committee_the_seeds_study_judges(
    tiny_cache: FeatureCache, sequential: Path, singles: list[Path]
) -> None:
    study = committee_result(tiny_cache.path, tiny_cfg(f"run.seed={SEED}"), singles)
    assert study is not None
    folds = _folds(sequential)
    assert [f.net_pnl for f in study.folds] == [f["net_pnl"] for f in folds]
    assert [f.trades for f in study.folds] == [f["trades"] for f in folds]
    for fold in folds:
        committee = fold[COMMITTEE_KEY]
        assert committee["members"] == 2 and committee["seeds"] == [SEED, SEED + MEMBER_STRIDE]
        assert committee["files"][1].startswith("members/m1/checkpoints/")
        agent = fold["equity"]["agent"]  # the committee's curve ends at its net PnL
        assert agent[-1] == pytest.approx(fold["net_pnl"], abs=1e-6)
        assert "committee of 2 members (last, epoch 1)" in _checkpoint_cell(fold)


def test_each_fold_records_where_the_committees_entries_paid(
    tiny_cache: FeatureCache, sequential: Path
) -> None:
    """A committee fold's calibration is its mean E[Q]'s (the values it acts on), recomputed here from
    the members' checkpoints, not member 0's own (which its folds.json had before the committee)."""
    import numpy as np

    from foxhunt.agent.committee import MeanValues
    from foxhunt.env.market import market_tensors
    from foxhunt.policy.trained import CheckpointPolicy
    from foxhunt.train.diagnostics import advantage_calibration
    from foxhunt.validation.folds import make_folds

    cfg = tiny_cfg(f"run.seed={SEED}")
    span = int(tiny_cache.meta["label_span"])
    data = make_folds(tiny_cache.features(), tiny_cache.columns, cfg.folds, span)
    for k, fold in enumerate(_folds(sequential)):
        fd = data[k]
        market = market_tensors(tiny_cache, fd, vol_window=cfg.env.plan.barrier.vol_window)
        files = fold[COMMITTEE_KEY]["files"]
        values = MeanValues([CheckpointPolicy(sequential / f, cfg).agent("cpu").policy for f in files])
        lo, hi = fd.fold.validation_start, fd.fold.validation_end
        horizon = cfg.env.plan.barrier.horizon
        want = advantage_calibration(values, market, cfg.env, np.arange(lo, hi), horizon)
        got = fold["calibration"]["validation"]
        assert got["rows"] == want["rows"] > 0
        np.testing.assert_allclose(got["move"], want["move"], rtol=1e-6)
        np.testing.assert_allclose(got["edges"], want["edges"], rtol=1e-5, atol=1e-9)


def test_a_member_trained_in_a_spawned_process_gives_the_same_run(
    tiny_cache: FeatureCache, sequential: Path, tmp_path: Path
) -> None:
    cfg = tiny_cfg(f"run.seed={SEED}", "train.members=2", "train.member_workers=2")
    train(tiny_cache, cfg, tmp_path, log=quiet)
    got, want = _folds(tmp_path), _folds(sequential)
    assert canon(got) == canon(want)


def test_members_started_before_training_give_the_same_run(
    tiny_cache: FeatureCache, sequential: Path, tmp_path: Path
) -> None:
    """The main job on a GPU starts the spawned members before its alpha check (start_members) and
    hands them to train, which starts none again: the numbers are those of any other schedule."""
    cfg = tiny_cfg(f"run.seed={SEED}", "train.members=2", "train.member_workers=2")
    members = start_members(tiny_cache, cfg, tmp_path, planted=None)
    assert members.spawned == 1
    pool = members._pool
    assert pool is not None  # training beside this process already
    train(tiny_cache, cfg, tmp_path, log=quiet, members=members)
    assert members._pool is None  # train waited for them and closed their pool
    assert canon(_folds(tmp_path)) == canon(_folds(sequential))


def test_an_interrupted_run_of_members_resumes_to_the_same_numbers(
    tiny_cache: FeatureCache, sequential: Path, tmp_path: Path
) -> None:
    cfg = tiny_cfg(f"run.seed={SEED}", "train.members=2", "train.member_workers=1")
    with pytest.raises(Interrupted):
        train(tiny_cache, cfg, tmp_path, log=quiet, stop_after=(0, 0))
    train(tiny_cache, cfg, tmp_path, log=quiet, resume=True)
    assert canon(_folds(tmp_path)) == canon(_folds(sequential))
    train(tiny_cache, cfg, tmp_path, log=quiet, resume=True)  # a finished run: nothing trains or moves
    assert canon(_folds(tmp_path)) == canon(_folds(sequential))


def test_tuning_trials_train_one_member() -> None:
    cfg, note = trial_config(tiny_cfg("train.members=4", "train.selection=train_tail"))
    assert cfg.train.members == 1
    assert note is not None and "train.members = 4: each trial trains one member" in note
    assert "(train.members = 4)" in note


def test_the_main_job_reports_the_members_committee(tmp_path: Path) -> None:
    """`foxhunt run` with two members, through the CLI: metrics.json and report.html carry the committee
    (its net PnL the fold's equity, each member's own numbers beside it) and the report names it."""
    from typer.testing import CliRunner

    from foxhunt.cli import app

    result = CliRunner().invoke(app, _job_args(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    for fold in metrics["folds"]:
        committee = fold[COMMITTEE_KEY]
        assert committee["members"] == 2 and len(committee["member_results"]) == 2
        assert fold["equity"]["agent"][-1] == pytest.approx(fold["net_pnl"], abs=1e-6)
    assert (tmp_path / "run" / "train" / "members" / "m1" / "folds.json").is_file()
    assert "committee of 2 members" in (tmp_path / "run" / "report.html").read_text()


def _job_args(out: Path) -> list[str]:
    from tests.train.test_run import TINY

    sets = [a for s in (*TINY, "run.threads=1", "train.members=2") for a in ("--set", s)]
    return ["run", "--profile", "smoke", "--out", str(out), "-q", *sets]


@pytest.fixture
def members_early(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The main job's early start of its members (on a GPU only) forced on the CPU; the order in
    which the job started its members and its alpha check, recorded."""
    import foxhunt.pipeline as pipeline
    import foxhunt.train.run as run

    events: list[str] = []
    start, alpha = run.start_members, pipeline._job_alpha
    monkeypatch.setattr(pipeline, "_members_early", lambda cfg, resume: not resume)
    monkeypatch.setattr(run, "start_members", lambda *a: (events.append("members"), start(*a))[1])
    monkeypatch.setattr(pipeline, "_job_alpha", lambda *a: (events.append("alpha"), alpha(*a))[1])
    return events


def test_the_main_job_starts_its_members_before_the_alpha_check(
    members_early: list[str], tmp_path: Path
) -> None:
    """`foxhunt run` where the members start early (a GPU's path, forced here): the members start
    before the alpha check, training takes them (none started twice) and the committee is reported."""
    from typer.testing import CliRunner

    from foxhunt.cli import app

    result = CliRunner().invoke(app, _job_args(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert members_early == ["members", "alpha"]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert all(fold[COMMITTEE_KEY]["members"] == 2 for fold in metrics["folds"])
    assert len(_folds(tmp_path / "run" / "train" / "members" / "m1")) == len(metrics["folds"])


def test_a_job_that_fails_after_starting_its_members_stops_them(
    members_early: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The alpha check fails after the members started early: the command fails with its one line
    and the spawned member is terminated, not left training."""
    import multiprocessing

    from typer.testing import CliRunner

    import foxhunt.pipeline as pipeline
    from foxhunt.cli import app
    from foxhunt.errors import FoxhuntError

    def broken(*a: object) -> None:
        members_early.append("alpha")
        raise FoxhuntError("alpha check", "failed on purpose", "nothing to fix: a test")

    monkeypatch.setattr(pipeline, "_job_alpha", broken)
    result = CliRunner().invoke(app, _job_args(tmp_path / "run"))
    assert result.exit_code == 2, result.output
    assert members_early == ["members", "alpha"]
    for child in multiprocessing.active_children():  # terminated (stop does not wait): reap it
        child.join(timeout=60)
    assert not multiprocessing.active_children()
    assert not (tmp_path / "run" / "train" / "members" / "m1" / "folds.json").exists()


def test_an_error_in_the_run_stops_the_members_still_training(
    tiny_cache: FeatureCache, tmp_path: Path
) -> None:
    """Member 0 stopped after its first epoch: the spawned member is terminated, not waited for (its
    folder never gets a finished folds.json)."""
    cfg = tiny_cfg(f"run.seed={SEED}", "train.members=2", "train.member_workers=2", "train.epochs=40")
    with pytest.raises(Interrupted):
        train(tiny_cache, cfg, tmp_path, log=quiet, stop_after=(0, 0))
    done = member_folder(tmp_path, 1) / "folds.json"
    assert not done.exists() or len(_folds(member_folder(tmp_path, 1))) < 2
