"""``foxhunt tune`` end to end with real (tiny) training: killed with SIGKILL in its first trial and
run again, it finishes the study without counting a trial twice, and its best profile is the
config the best trial trained (issue 17), with the smoke profile's ``train.selection = last`` kept
where the trials trained with ``train_tail`` (they are ranked on the selection periods)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.config.loader import config_hash, load_config
from foxhunt.config.models import FoxhuntConfig
from foxhunt.data.synth import write_synthetic
from foxhunt.dataset.build import get_or_build
from foxhunt.tune.study import REASON, counted, default_storage, open_storage
from foxhunt.validation.config import Selection
from tests.train.test_run import TINY

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")

# TINY at its smallest: one fold, one epoch, short validation episodes; heartbeats every second, so a
# killed trial is taken for dead after 3 s.
SETS = (
    *TINY,
    "folds.n_folds=1",
    "train.epochs=1",
    "env.episode_rows=12",
    "synth.events_per_session=20000",
    "train.steps_per_epoch=8",
    "train.envs=8",
    "agent.learn.updates_per_epoch=2",
    "agent.learn.batch=32",
    "run.threads=1",
    "tune.heartbeat_seconds=1",
)
TRIALS = 2


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Path]:
    """The tiny market's files and its feature cache folder, built once."""
    cfg = load_config(profile="smoke", overrides=SETS)
    root = tmp_path_factory.mktemp("tune_market")
    files = write_synthetic(cfg.synth, root / "market")
    get_or_build(files, cfg, root / "cache")
    return files, root / "cache"


def _args(out: Path, files: list[Path]) -> list[str]:
    sets = [a for s in SETS for a in ("--set", s)]
    data = [a for f in files for a in ("--data", str(f))]
    return ["tune", "--profile", "smoke", *sets, "--trials", str(TRIALS), "--out", str(out), *data,
            "--tracking-uri", "none", "-q"]  # fmt: skip


def test_tune_killed_mid_trial_resumes_without_counting_a_trial_twice(
    market: tuple[list[Path], Path], tmp_path: Path
) -> None:
    files, cache = market
    out = tmp_path / "study"
    shutil.copytree(cache, out / "cache")  # the same content key: reused, not rebuilt
    foxhunt = Path(sys.executable).parent / "foxhunt"
    command = [str(foxhunt), *_args(out, files)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while not (out / "trials" / "0").exists():
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, "the first trial never started"
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    storage = open_storage(default_storage(out), load_config(profile="smoke", overrides=SETS).tune)
    killed = optuna.load_study(study_name=out.name, storage=storage).trials
    assert [t.state for t in killed] == [TrialState.RUNNING]

    result = runner.invoke(app, _args(out, files))
    assert result.exit_code == 0, result.output
    trials = optuna.load_study(study_name=out.name, storage=storage).trials
    # the killed trial failed (not a result: no reason) and was re-run with its parameters, then
    # the study ran what was left: TRIALS counted in all, none twice
    assert trials[0].state is TrialState.FAIL and REASON not in trials[0].user_attrs
    assert trials[1].params == trials[0].params and trials[1].system_attrs.get("failed_trial") == 0
    assert [t.number for t in counted(trials)] == [1, 2] and len(trials) == TRIALS + 1
    summary = json.loads((out / "tune.json").read_text())
    assert summary["trials_counted"] == TRIALS and summary["states"]["FAIL"] == 1
    # the smoke profile reports its last epoch: the trials trained with train_tail, and said so
    assert load_config(profile="smoke", overrides=SETS).train.selection is Selection.LAST
    assert "the trials train with train.selection = train_tail" in result.output
    study_cfg = json.loads((out / "tune.config.json").read_text())["config"]
    assert study_cfg["train"]["selection"] == "train_tail"
    # the exported profile is the config the best trial trained, key for key, but the profile's
    # train.selection = last
    best = summary["best"]
    body = json.loads((Path(best["folder"]) / "train.config.json").read_text())
    trained = FoxhuntConfig.model_validate(body["config"])
    assert trained.train.selection is Selection.TRAIN_TAIL
    again = load_config(config_file=out / "best.toml")
    assert again.train.selection is Selection.LAST
    again_tail = load_config(config_file=out / "best.toml", overrides=["train.selection=train_tail"])
    assert again_tail == trained and config_hash(again_tail) == config_hash(trained) == body["config_hash"]
    assert (out / "tune.html").read_text().count("<section") == 5
    # ranked on the selection periods, its validation numbers beside (one fold: out of sample)
    assert summary["ranked_on"] == "selection" and best["validation"]["last_fold_out_of_sample"]
    if summary["undecided"] is None:
        assert "over the selection periods (ranked on)" in result.output
    else:  # this tiny study's trials may all score alike: then no "best: trial N" is announced
        assert "no best trial" in result.output and "best: trial" not in result.output
        assert "the first of them, not a choice" in (out / "tune.html").read_text()


# The 4-trial study on 2 workers with real (tiny) training, in the default suite: about 40-55 s
# on a 2-core host, most of it the Ray workers importing torch and foxhunt.
def test_tune_trains_four_trials_on_two_workers(market: tuple[list[Path], Path], tmp_path: Path) -> None:
    files, cache = market
    out = tmp_path / "study"
    shutil.copytree(cache, out / "cache")
    args = _args(out, files)
    args[args.index("--trials") + 1] = "4"
    result = runner.invoke(app, [*args, "--workers", "2"])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "tune.json").read_text())
    assert summary["trials_counted"] == 4 and sum(summary["states"].values()) == 4
    # every trial records where it trained (the smoke profile: the CPU), and the study tallies them
    assert [t["device"] for t in summary["trials"]] == ["cpu"] * 4 and summary["devices"] == {"cpu": 4}
    assert "trials ran on" not in result.output  # the console names GPUs only
    for t in summary["trials"]:
        recorded = json.loads((Path(t["folder"]) / "train.config.json").read_text())["config"]
        assert recorded["agent"]["learn"]["lr"] == t["params"]["agent.learn.lr"]
        assert recorded["train"]["selection"] == "train_tail"  # the smoke profile's last, overridden


def test_a_storage_url_nothing_can_open_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    out = tmp_path / "study"
    args = ["tune", "--profile", "smoke", "--trials", "1", "--out", str(out), "--storage", "bogus://x",
            "--tracking-uri", "none", "-q"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "--storage bogus://x" in lines[0] and "Traceback" not in result.output
    assert not out.exists()
