"""Runs tracked in MLflow end to end: a tiny ``foxhunt train`` through the command line records its
config, its epochs, its folds and its checkpoints; ``foxhunt runs compare`` names the one config key
two runs differ in; an unreachable store costs a warning, never the run; ``seeds`` nests each seed's
run under the study's. One SQLite store per module (creating one runs MLflow's migrations: seconds)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.config.base import leaves
from foxhunt.features.cache_file import FeatureCache
from foxhunt.tracking import RECORD_FILE, start_run
from foxhunt.tracking.record import param_value
from tests.train.test_run import TINY, tiny_cfg

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")

# TINY's market and folds (its cache is shared: tests/conftest.py) with lighter epochs: what is
# checked here is what gets recorded, not what is learnt.
LIGHT = (
    "run.threads=1",
    "env.episode_rows=12",
    "train.steps_per_epoch=8",
    "train.envs=8",
    "agent.learn.updates_per_epoch=2",
    "agent.learn.batch=32",
)
SETS = [a for s in (*TINY, *LIGHT) for a in ("--set", s)]
UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens, the connection is refused at once


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


@pytest.fixture(scope="module")
def cache(tiny_cache: FeatureCache) -> FeatureCache:
    return tiny_cache


def _train(cache: FeatureCache, out: Path, uri: str, *sets: str) -> Any:
    extra = [a for s in sets for a in ("--set", s)]
    args = ["train", "--cache", str(cache.path), "--out", str(out), "--profile", "smoke", "-q"]
    return runner.invoke(app, [*args, *SETS, *extra, "--tracking-uri", uri])


@pytest.fixture(scope="module")
def two_runs(cache: FeatureCache, store: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two tiny trainings that differ in one --set: 2 folds x 2 epochs, and 2 folds x 1 epoch."""
    a, b = tmp_path_factory.mktemp("run_a"), tmp_path_factory.mktemp("run_b")
    for out, epochs in ((a, 2), (b, 1)):
        result = _train(cache, out, store, f"train.epochs={epochs}")
        assert result.exit_code == 0, result.output
    return a, b


def _client(uri: str) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _same(a: list[float], b: list[float]) -> bool:
    return all((math.isnan(x) and math.isnan(y)) or x == pytest.approx(y) for x, y in zip(a, b, strict=True))


def test_train_records_config_epochs_folds_and_checkpoints(two_runs: tuple[Path, Path], store: str) -> None:
    out = two_runs[0]
    recorded = json.loads((out / RECORD_FILE).read_text())
    assert recorded["tracking_uri"] == store
    client = _client(store)
    run = client.get_run(recorded["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["foxhunt.command"] == "train"
    # parameters: the resolved config the run recorded, every leaf
    config = json.loads((out / "train.config.json").read_text())["config"]
    assert run.data.params == {k: param_value(v) for k, v in leaves(config).items()}
    assert run.data.params["train.epochs"] == "2" and run.data.params["agent.network.hidden"] == "16"
    # per epoch: one step per fold x epoch, rising, the values the fold's history reports
    folds = json.loads((out / "folds.json").read_text())
    # (a training statistic: the smoke profile's train.selection = last backtests no epoch)
    history = client.get_metric_history(run.info.run_id, "loss/total")
    assert sorted(m.step for m in history) == [0, 1, 2, 3]
    by_step = [m.value for m in sorted(history, key=lambda m: m.step)]
    assert _same(by_step, [h["loss"] for f in folds for h in f["history"]])
    # per fold and totals
    metrics = run.data.metrics
    for f in folds:
        k = f["fold"]
        assert metrics[f"result/fold{k}/net_pnl"] == pytest.approx(f["net_pnl"])
        assert metrics[f"result/fold{k}/trades"] == f["trades"]
        assert metrics[f"result/fold{k}/sharpe_annual"] == pytest.approx(f["sharpe_annual"])
    assert metrics["result/total/net_pnl"] == pytest.approx(sum(f["net_pnl"] for f in folds))
    # artefacts: each fold's reported checkpoint, byte for byte, and the run's own files
    for f in folds:
        logged = client.download_artifacts(run.info.run_id, f"checkpoints/fold{f['fold']}")
        weights = Path(logged) / Path(f["checkpoint_file"]).name
        assert weights.read_bytes() == (out / f["checkpoint_file"]).read_bytes()
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"folds.json", "train.config.json", "checkpoints"} <= names


def test_runs_compare_names_exactly_the_differing_key(two_runs: tuple[Path, Path]) -> None:
    a, b = two_runs
    result = runner.invoke(app, ["runs", "compare", str(a), str(b), "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["differing_config"] == {"train.epochs": ["2", "1"]}
    net = [f["net_pnl"] for f in json.loads((b / "folds.json").read_text())]
    assert body["results"]["fold1/net_pnl"][1] == pytest.approx(net[1])
    table = runner.invoke(app, ["runs", "compare", str(a), str(b)])
    assert table.exit_code == 0, table.output
    assert "config train.epochs" in table.stdout and "total/net_pnl" in table.stdout


def test_unreachable_store_warns_once_and_tracks_nothing(tmp_path: Path) -> None:
    warnings: list[str] = []
    run = start_run("lost", tiny_cfg(), UNREACHABLE, command="test", out=tmp_path, warn=warnings.append)
    assert not run.active and run.run_id is None and run.child() is None
    run.epoch_hook()(0, 0, {"sharpe/val": 1.0})  # every later call is a no-op, never an error
    run.log_folds([{"fold": 0, "net_pnl": 1.0, "trades": 1, "sharpe_annual": 0.1}], tmp_path)
    run.log_artifact(tmp_path)
    run.end(RuntimeError("stopped"))
    assert len(warnings) == 1 and "failed while starting the run" in warnings[0]
    assert not (tmp_path / RECORD_FILE).exists()


@pytest.mark.slow  # a third tiny training: ~10 s on a loaded 2-core host
def test_unreachable_store_warns_once_and_the_run_finishes(cache: FeatureCache, tmp_path: Path) -> None:
    result = _train(cache, tmp_path, UNREACHABLE, "train.epochs=1")
    assert result.exit_code == 0, result.output
    assert result.output.count("warning: tracking to http://127.0.0.1:9 failed") == 1
    assert len(json.loads((tmp_path / "folds.json").read_text())) == 2  # the training result is whole
    assert not (tmp_path / RECORD_FILE).exists()


def test_a_store_failing_mid_run_warns_once_and_goes_on(store: str) -> None:
    warnings: list[str] = []
    run = start_run("breaks", tiny_cfg(), store, command="test", warn=warnings.append)
    assert run.active
    run._client.log_batch = _refuse  # the store goes away after the start
    hook = run.epoch_hook()
    for epoch in range(3):
        hook(0, epoch, {"sharpe/val": 1.0})
    run.log_results({"objective": 1.0})
    run.end()
    assert len(warnings) == 1 and "logging metrics" in warnings[0] and not run.active


def test_a_resumed_run_folder_continues_its_run(store: str, tmp_path: Path) -> None:
    cfg = tiny_cfg()
    first = start_run("r", cfg, store, command="train", out=tmp_path)
    first.end(KeyboardInterrupt())
    client = _client(store)
    assert client.get_run(first.run_id).info.status == "KILLED"
    again = start_run("r", cfg, store, command="train", out=tmp_path, resume=True)
    assert again.run_id == first.run_id and client.get_run(first.run_id).info.status == "RUNNING"
    again.end()
    fresh = start_run("r", cfg, store, command="train", out=tmp_path)  # not a resume: a new run
    fresh.end()
    assert fresh.run_id != first.run_id
    assert json.loads((tmp_path / RECORD_FILE).read_text())["run_id"] == fresh.run_id


def _refuse(*_args: Any, **_kwargs: Any) -> None:
    raise ConnectionError("store gone")


@pytest.mark.slow  # two tiny trainings: ~30 s on a loaded 2-core host
def test_seeds_nest_each_seed_under_the_study(store: str, tmp_path: Path) -> None:
    out = tmp_path / "seeds"
    sets = [*SETS, "--set", "train.epochs=1"]
    args = ["seeds", "--profile", "smoke", "--seeds", "3,4", "--out", str(out), "-q", "--tracking-uri", store]
    result = runner.invoke(app, [*args, *sets])
    assert result.exit_code == 0, result.output
    client = _client(store)
    study = json.loads((out / RECORD_FILE).read_text())["run_id"]
    seeds = [json.loads((out / f"seed{s}" / RECORD_FILE).read_text())["run_id"] for s in (3, 4)]
    for s, run_id in zip((3, 4), seeds, strict=True):
        run = client.get_run(run_id)
        assert run.data.tags["mlflow.parentRunId"] == study and run.data.tags["foxhunt.seed"] == str(s)
        assert run.data.params["run.seed"] == str(s)
    parent = client.get_run(study)
    assert parent.data.metrics["result/finished"] == 2.0
    assert "seeds.json" in {a.path for a in client.list_artifacts(study)}


def test_a_store_created_ahead_is_the_one_the_run_then_tracks_to(tmp_path: Path, monkeypatch) -> None:
    # foxhunt run creates a new SQLite store in another process while its stages before training run
    # (foxhunt.pipeline.StoreAhead); the run started afterwards opens it and tracks into it.
    from mlflow import MlflowClient

    from foxhunt.config.loader import load_config
    from foxhunt.tracking import create_store, wait_created
    from foxhunt.tracking.store import DEFAULT_DB, SWITCH_ENV, TEMPLATE_ENV

    monkeypatch.delenv(SWITCH_ENV, raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv(TEMPLATE_ENV, str(tmp_path / "templates"))  # the store made from scratch
    assert create_store("none", tmp_path) == (None, None)  # tracking off: nothing started
    process, db = create_store(None, tmp_path)
    assert process is not None and db == (tmp_path / DEFAULT_DB).absolute()
    wait_created(process)
    assert process.returncode == 0 and db.is_file()
    assert create_store(None, tmp_path) == (None, None)  # there already
    uri = f"sqlite:///{db}"
    assert [e.name for e in MlflowClient(tracking_uri=uri).search_experiments()] == ["foxhunt", "Default"]
    run = start_run("ahead", load_config(profile="smoke"), None, command="run", out=tmp_path)
    run.end(None)
    assert run.run_id is not None and run.uri == uri
    assert MlflowClient(tracking_uri=uri).get_run(run.run_id).info.status == "FINISHED"


def test_a_new_store_is_a_copy_of_the_empty_one_and_keeps_what_it_was_given(
    tmp_path: Path, monkeypatch
) -> None:
    # A new SQLite store starts as a copy of an empty one with MLflow's tables (made once per user and
    # MLflow version): MLflow opens it as its own, each store gets its own default experiment and
    # artefact folder, and a store that exists already is never replaced.
    from mlflow import MlflowClient

    from foxhunt.tracking.store import TEMPLATE_ENV, experiment_id, open_client

    monkeypatch.setenv(TEMPLATE_ENV, str(tmp_path / "templates"))
    uris = [f"sqlite:///{tmp_path / name / 'mlflow.db'}" for name in ("a", "b")]
    ids = [experiment_id(open_client(uri), uri, "foxhunt") for uri in uris]
    made = [p.name for p in (tmp_path / "templates").iterdir()]
    assert made == [f"tables-{__import__('mlflow').__version__}.db"]
    for uri, eid, name in zip(uris, ids, ("a", "b"), strict=True):
        client = MlflowClient(tracking_uri=uri)
        assert sorted(e.name for e in client.search_experiments()) == ["Default", "foxhunt"]
        assert name in client.get_experiment(eid).artifact_location
        run = client.create_run(eid)
        client.log_metric(run.info.run_id, "x", 1.0)
        assert not list((tmp_path / name).glob("*.tmp"))
    open_client(uris[0])  # there already: opened, not replaced
    assert len(MlflowClient(tracking_uri=uris[0]).search_runs([ids[0]])) == 1
