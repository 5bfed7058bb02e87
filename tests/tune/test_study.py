"""The study's mechanics with training replaced by :mod:`tests.tune.fakes` (milliseconds a trial):
workers through the executor, the guard's FAILED trials, the pruner, the exported profile, the
report (issue 17). The real training and a kill -9 are in test_cli.py."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from foxhunt.config.loader import config_hash, load_config, validate_tree
from foxhunt.config.models import FoxhuntConfig
from foxhunt.errors import ConfigError
from foxhunt.tune.config import Objective
from foxhunt.tune.export import BEST_PROFILE, write_best
from foxhunt.tune.report import REPORT_FILE, SUMMARY_FILE, write_outputs
from foxhunt.tune.study import (
    REASON,
    Undefined,
    Work,
    counted,
    default_storage,
    open_storage,
    open_study,
    run_study,
    run_worker,
    seed_value,
)
from tests.tune.fakes import GUARD_DIAGNOSIS, fake_train, score, zombie_train

LR = {"low": 1e-4, "high": 1e-1, "log": True}


def study_cfg(params: dict[str, Any], **tune: Any) -> FoxhuntConfig:
    """The smoke profile as a study's trials train it (trial_config: train_tail, where trials rank)."""
    tree = load_config(profile="smoke").model_dump(mode="json")
    tree["tune"] = {"params": params, "trials": 4, "startup_trials": 2} | tune
    tree["folds"]["n_folds"] = 1
    tree["train"]["epochs"] = 2
    tree["train"]["selection"] = "train_tail"
    tree["train"]["members"] = 1  # a trial trains one member (trial_config)
    tree["agent"]["algo"] = "dqn"  # the learner these studies' DQN keys (agent.learn.lr) train
    cfg = validate_tree(tree)
    assert cfg is not None
    return cfg


def work_for(cfg: FoxhuntConfig, out: Path, name: str = "t") -> Work:
    out.mkdir(parents=True, exist_ok=True)
    return Work(default_storage(out), name, cfg, out, out / "no-cache", trainer=fake_train)


def load(work: Work) -> optuna.Study:
    return optuna.load_study(study_name=work.study, storage=open_storage(work.storage, work.cfg.tune))


def enqueue(work: Work, *params: dict[str, Any]) -> None:
    storage = open_storage(work.storage, work.cfg.tune)
    study = open_study(storage, work.study, work.cfg, overwrite=False, data=work.cache_path.name)
    for p in params:
        study.enqueue_trial(p)


def recorded(folder: str) -> FoxhuntConfig:
    body = json.loads((Path(folder) / "train.config.json").read_text())
    return FoxhuntConfig.model_validate(body["config"])


@pytest.fixture(scope="module")
def ray_once() -> Iterator[None]:
    """Ray started once for the module when it is installed (the executor then uses it as it is)."""
    try:
        import ray
    except ImportError:
        yield
        return
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_four_trials_on_two_workers(tmp_path: Path, ray_once: None) -> None:
    cfg = study_cfg({"agent.learn.lr": LR}, pruner="none")
    work = work_for(cfg, tmp_path)
    run_study(work, workers=2, say=lambda _: None)
    trials = load(work).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4 and len(counted(trials)) == 4
    pids = set()
    for t in trials:
        trained = recorded(t.user_attrs["folder"])
        # the trial trained the sampled value, and its value is that config's score
        assert trained.agent.learn.lr == t.params["agent.learn.lr"]
        assert t.value == pytest.approx(score(trained))
        assert Path(t.user_attrs["folder"]) == tmp_path / "trials" / str(t.number)
        pids.add(json.loads((Path(t.user_attrs["folder"]) / "pid.json").read_text()))
    # two workers, each with its own sampler seed: four different values, from two processes
    assert len({t.params["agent.learn.lr"] for t in trials}) == 4
    assert len(pids) == 2 and os.getpid() not in pids
    # a second run of the same study has nothing left to do; asking for 6 runs 2 more
    run_study(work, workers=2, say=lambda _: None)
    assert len(load(work).trials) == 4
    more = work_for(study_cfg({"agent.learn.lr": LR}, pruner="none", trials=6), tmp_path)
    run_study(more, workers=1, say=lambda _: None)
    assert len(counted(load(work).trials)) == 6


def test_a_live_trial_taken_for_dead_is_dropped_and_its_requeued_copy_runs(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Trial 0 is failed and re-queued under its worker while it runs (another worker took it for dead:
    its heartbeats came late). Optuna then refuses to tell it; the worker drops its result, runs the
    re-queued copy (same parameters) and still runs its two trials: the study does not crash."""
    cfg = study_cfg({"agent.learn.lr": LR}, pruner="none", trials=2)
    work = work_for(cfg, tmp_path)
    work = Work(work.storage, work.study, cfg, work.out, work.cache_path, trainer=zombie_train)
    open_study(open_storage(work.storage, cfg.tune), work.study, cfg, overwrite=False, data="no-cache")
    assert run_worker(work, 2, sampler_seed=1) == 2
    zombie, copy, fresh = load(work).trials
    assert zombie.state is TrialState.FAIL and copy.state is fresh.state is TrialState.COMPLETE
    assert copy.system_attrs["failed_trial"] == 0 and copy.params == zombie.params
    assert fresh.params != zombie.params and len(counted(load(work).trials)) == 2
    assert "trial 0 missed 3 heartbeats" in capfd.readouterr().err


def test_a_guard_stopped_trial_is_failed_with_its_reason_and_never_best(tmp_path: Path) -> None:
    bonus = {"choices": [0.0, 1.0]}
    cfg = study_cfg({"agent.learn.lr": LR, "agent.explore.count_bonus": bonus}, trials=2)
    work = work_for(cfg, tmp_path)
    # the guard-stopped trial would score best (lr 3e-3: 1000) had it finished
    enqueue(work, {"agent.learn.lr": 3e-3, "agent.explore.count_bonus": 1.0})
    enqueue(work, {"agent.learn.lr": 1e-3, "agent.explore.count_bonus": 0.0})
    study = run_study(work, say=lambda _: None)
    stopped, done = study.trials
    assert stopped.state is TrialState.FAIL and GUARD_DIAGNOSIS in stopped.user_attrs[REASON]
    assert done.state is TrialState.COMPLETE and study.best_trial.number == done.number
    assert len(counted(study.trials)) == 2  # the guard's verdict is a result: the study is done
    summary = write_outputs(study, cfg, work.storage, 1.0, tmp_path)
    assert summary["guard_failed"] == 1 and summary["best"]["number"] == done.number
    assert summary["states"] == {"COMPLETE": 1, "FAIL": 1}
    assert summary["importances"] is None and "at least 2 completed" in summary["importance_note"]
    best = write_best(cfg, study, tmp_path)
    assert best is not None and load_config(config_file=best).agent.explore.count_bonus == 0.0


def test_the_pruner_stops_a_trial_behind_the_median(tmp_path: Path) -> None:
    space = {"agent.learn.lr": LR}
    good, bad = {"agent.learn.lr": 3e-3}, {"agent.learn.lr": 1e-1}  # scores 1000 and -523
    tune = {"trials": 3, "prune_after_trials": 2, "prune_warmup_epochs": 1}
    pruned_work = work_for(study_cfg(space, **tune), tmp_path / "median")
    enqueue(pruned_work, good, good, bad)
    study = run_study(pruned_work, say=lambda _: None)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED]
    # stopped at the first step after the warm-up: epoch 1 of the 2
    assert sorted(study.trials[2].intermediate_values) == [0, 1]
    # the same trials without the pruner: the bad one runs to the end (the pruner stopped it)
    plain = work_for(study_cfg(space, **tune, pruner="none"), tmp_path / "none")
    enqueue(plain, good, good, bad)
    assert [t.state for t in run_study(plain, say=lambda _: None).trials] == [TrialState.COMPLETE] * 3


def test_the_best_profile_round_trips_to_the_config_its_trial_trained(tmp_path: Path) -> None:
    hidden = {"low": 16, "high": 64, "step": 16}
    cfg = study_cfg({"agent.learn.lr": LR, "agent.network.hidden": hidden}, trials=3)
    work = work_for(cfg, tmp_path)
    study = run_study(work, say=lambda _: None)
    path = write_best(cfg, study, tmp_path)
    assert path == tmp_path / BEST_PROFILE
    trained = recorded(study.best_trial.user_attrs["folder"])
    again = load_config(config_file=path)
    assert again == trained and config_hash(again) == config_hash(trained)
    assert again.agent.network.hidden == study.best_params["agent.network.hidden"]
    summary = write_outputs(study, cfg, work.storage, 2.5, tmp_path)
    assert set(summary["importances"]) == {"agent.learn.lr", "agent.network.hidden"}
    page = (tmp_path / REPORT_FILE).read_text()
    assert "Optimisation history" in page and "Parameter importances" in page and "data:image/png" in page
    assert json.loads((tmp_path / SUMMARY_FILE).read_text())["best"]["value"] == study.best_value


def test_a_study_of_another_config_is_not_resumed(tmp_path: Path) -> None:
    work = work_for(study_cfg({"agent.learn.lr": LR}, trials=1), tmp_path)
    run_study(work, say=lambda _: None)
    other = work_for(study_cfg({"agent.learn.lr": {"low": 1e-3, "high": 1e-2}}, trials=1), tmp_path)
    with pytest.raises(ConfigError, match="another config"):
        run_study(other, say=lambda _: None)
    run_study(other, overwrite=True, say=lambda _: None)  # --overwrite starts the study again
    assert len(load(other).trials) == 1
    market = Work(other.storage, other.study, other.cfg, tmp_path, tmp_path / "other", trainer=fake_train)
    with pytest.raises(ConfigError, match="or market"):  # the same config on another market's cache
        run_study(market, say=lambda _: None)


def test_a_seeds_objective_hand_worked() -> None:
    """Over the selection periods (``fold["selection"]``); the validation numbers beside them differ."""
    folds = [
        {"fold": 0, "net_pnl": 9.0, "selection": {"net_pnl": 300.0, "rule_net_pnl": 1000.0}},
        {"fold": 1, "net_pnl": 7.0, "selection": {"net_pnl": -100.0, "rule_net_pnl": 600.0}},
    ]
    assert seed_value(folds, Objective.NET_PNL) == pytest.approx(100.0)  # (300 - 100) / 2
    assert seed_value(folds, Objective.CAPTURE) == pytest.approx(0.125)  # 200 / 1600
    lost = [dict(f, selection=dict(f["selection"], rule_net_pnl=-50.0)) for f in folds]
    with pytest.raises(Undefined, match="reference rule made no money over the folds' selection periods"):
        seed_value(lost, Objective.CAPTURE)


def test_a_study_whose_trials_all_scored_alike_has_no_best() -> None:
    import optuna

    from foxhunt.tune.export import undecided, undecided_text

    def study(values: list[float]) -> optuna.Study:
        s = optuna.create_study(direction="maximize")
        for v in values:
            s.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=v))
        return s

    assert undecided(study([0.0, 0.0, 0.0])) == (0.0, 3)
    assert undecided_text(0.0, 3) == "no trial scored: all 3 completed trials scored 0"
    assert undecided(study([0.0])) == (0.0, 1)  # one trial that scored nothing is no best either
    assert undecided(study([-5.0, -5.0])) == (-5.0, 2)
    assert undecided(study([12.0])) is None and undecided(study([0.0, 3.0])) is None
    assert undecided(optuna.create_study()) is None  # none completed: said elsewhere
