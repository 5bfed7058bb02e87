"""What a tracked run records, as plain data (foxhunt.tracking.record), where it is stored
(foxhunt.tracking.store) and how runs are compared (foxhunt.tracking.compare): no MLflow run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foxhunt.config.base import leaves
from foxhunt.config.loader import load_config
from foxhunt.errors import FoxhuntError
from foxhunt.tracking import record
from foxhunt.tracking.compare import RunSummary, compare
from foxhunt.tracking.store import SWITCH_ENV, artifact_location, resolve_uri, run_reference, write_record
from tests.factories import execution_block


def test_limits_are_mlflows_own() -> None:
    from mlflow.utils import validation

    assert record.MAX_PARAM_VALUE == validation.MAX_PARAM_VAL_LENGTH
    assert record.PARAMS_PER_BATCH == validation.MAX_PARAMS_TAGS_PER_BATCH
    assert record.METRICS_PER_BATCH == validation.MAX_METRICS_PER_BATCH


def test_param_values_are_json_text_cut_to_the_limit() -> None:
    assert record.param_value("cpu") == "cpu"
    values = (True, None, 3, 0.5, [1, 2])
    assert [record.param_value(v) for v in values] == ["true", "null", "3", "0.5", "[1, 2]"]
    long = record.param_value("x" * 7000)
    assert len(long) == record.MAX_PARAM_VALUE and long.endswith(record.CUT_MARK)
    assert record.key_name("q/long:mean (ema)") == "q/long_mean _ema_"


def test_config_params_are_every_leaf_of_the_resolved_config() -> None:
    cfg = load_config(profile="smoke", overrides=["agent.network.hidden=24"])
    params = record.config_params(cfg)
    flat = leaves(cfg.model_dump(mode="json"))
    assert params.keys() == flat.keys()
    assert params["agent.network.hidden"] == "24"
    assert all(v == record.param_value(flat[k]) for k, v in params.items())


def test_epoch_step_rises_over_folds_and_epochs() -> None:
    steps = [record.epoch_step(k, e, 3) for k in range(2) for e in range(3)]
    assert steps == [0, 1, 2, 3, 4, 5]
    # text fields are not metrics; numbers keep their (safe) names
    assert record.epoch_metrics({"sharpe/val": 1.5, "misc/lr": 3e-5, "note": "x", "ok": True}) == {
        "sharpe/val": 1.5,
        "misc/lr": 3e-5,
    }


def test_fold_results_hand_worked() -> None:
    def fold(k: int, net: float, trades: int, sharpe: float, rule: float) -> dict:
        return {
            "fold": k,
            "net_pnl": net,
            "trades": trades,
            "sharpe_annual": sharpe,
            "capture": net / rule,
            "baselines": {"rule": {"net_pnl": rule}},
        }

    got = record.fold_results([fold(0, 100.0, 4, 1.0, 400.0), fold(1, -50.0, 6, -0.5, 100.0)])
    assert got["result/fold0/net_pnl"] == 100.0 and got["result/fold1/trades"] == 6.0
    assert got["result/fold0/capture"] == 0.25 and got["result/fold1/capture"] == -0.5
    assert got["result/total/net_pnl"] == 50.0 and got["result/total/trades"] == 10.0
    assert got["result/total/sharpe_annual_mean"] == 0.25
    assert got["result/total/capture"] == pytest.approx(50.0 / 500.0)
    assert got["result/total/capture_median"] == pytest.approx(-0.125)
    assert got["result/total/capture_all_folds"] == pytest.approx(50.0 / 500.0)
    # A fold whose rule lost (-200) stays out of the capture, not out of the sum over every fold.
    lost = fold(2, 30.0, 1, 0.1, -200.0) | {"capture": None}
    got = record.fold_results([fold(0, 100.0, 4, 1.0, 400.0), fold(1, -50.0, 6, -0.5, 100.0), lost])
    assert got["result/total/capture"] == pytest.approx(50.0 / 500.0)
    assert got["result/total/capture_all_folds"] == pytest.approx(80.0 / 300.0)
    assert "result/fold2/capture" not in got



def test_fold_results_carry_the_cost_per_contract_and_fill_rate_of_agent_and_rule() -> None:
    def fold(k: int, agent: dict, rule: dict) -> dict:
        body = {"fold": k, "net_pnl": agent["net_pnl"], "trades": agent["entries"], "sharpe_annual": 0.0}
        return body | {"execution": agent, "baselines": {"rule": {"net_pnl": 1.0, "execution": rule}}}

    folds = [fold(0, execution_block(3, 1, 40.0), execution_block(5, 0, 9.0))]
    folds.append(fold(1, execution_block(1, 3, -20.0), execution_block(5, 0, 9.0)))
    got = {k.removeprefix("result/total/"): v for k, v in record.fold_results(folds).items()}
    assert got["agent_cost_per_contract"] == 2.0 and got["agent_limit_fill_rate"] == 0.5
    assert got["rule_cost_per_contract"] == 2.0 and "rule_limit_fill_rate" not in got  # no limit order
    del folds[1]["execution"]  # a fold of an older foxhunt: no pooled number, rather than a partial one
    assert "result/total/agent_cost_per_contract" not in record.fold_results(folds)


def test_store_resolution_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv(SWITCH_ENV, raising=False)
    # default: ./mlflow.db, made absolute; its artefacts beside it
    assert resolve_uri(None) == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert artifact_location(resolve_uri(None) or "", "foxhunt") == str(tmp_path / "mlartifacts" / "foxhunt")
    # a command with a run folder (--out) keeps the default store there, not in the current directory
    assert resolve_uri(None, Path("runs/a")) == f"sqlite:///{tmp_path / 'runs' / 'a' / 'mlflow.db'}"
    assert resolve_uri("sqlite:///t.db", Path("runs/a")) == f"sqlite:///{tmp_path / 't.db'}"  # the flag wins
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracker:5000")
    assert resolve_uri(None) == "http://tracker:5000"
    assert artifact_location("http://tracker:5000", "foxhunt") is None  # the server decides
    monkeypatch.setenv(SWITCH_ENV, "off")
    assert resolve_uri(None) is None
    assert resolve_uri("sqlite:///sub/t.db") == f"sqlite:///{tmp_path / 'sub' / 't.db'}"  # the flag wins
    assert resolve_uri("none") is None and resolve_uri("OFF") is None


def test_run_reference_reads_a_run_folder_or_an_id(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run_id = "0123456789abcdef0123456789abcdef"
    write_record(tmp_path, "sqlite:////elsewhere/mlflow.db", run_id, "foxhunt")
    assert json.loads((tmp_path / "tracking.json").read_text())["run_id"] == run_id
    assert run_reference(str(tmp_path), None) == ("sqlite:////elsewhere/mlflow.db", run_id)
    # an id is read from the store of the environment / the current directory, even with tracking off
    assert run_reference(run_id, None) == (f"sqlite:///{tmp_path / 'mlflow.db'}", run_id)
    with pytest.raises(FoxhuntError, match="neither a run folder nor an MLflow run id"):
        run_reference("not-a-run", None)
    untracked = tmp_path / "untracked"
    untracked.mkdir()
    with pytest.raises(FoxhuntError, match="no tracking record"):
        run_reference(str(untracked), None)


def test_compare_keeps_only_differing_config_keys() -> None:
    a = RunSummary("a" * 32, "a", "train", "FINISHED", {"fold0/net_pnl": 1.0}, {"x": "1", "y": "2", "z": "3"})
    b_results = {"fold10/net_pnl": 2.0, "fold2/net_pnl": 3.0}
    b = RunSummary("b" * 32, "b", "train", "FINISHED", b_results, {"x": "1", "y": "5"})
    got = compare([a, b])
    assert got.differing == {"y": ["2", "5"], "z": ["3", None]}
    assert list(got.results) == ["fold0/net_pnl", "fold2/net_pnl", "fold10/net_pnl"]  # numeric order
    assert got.results["fold0/net_pnl"] == [1.0, None]


def test_the_command_line_starts_without_mlflow() -> None:
    """mlflow takes seconds to import: only a run that starts tracking imports it."""
    import subprocess
    import sys

    code = "import sys, foxhunt.cli, foxhunt.tracking.compare; print('mlflow' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_the_suite_tracks_nothing_it_does_not_ask_for() -> None:
    """tests/conftest.py's switch: no test writes an mlflow.db into the repository by default."""
    import os

    assert os.environ[SWITCH_ENV] == "off" and resolve_uri(None) is None


def test_a_pruned_trial_ends_killed_not_failed() -> None:
    import optuna

    from foxhunt.tracking.run import run_status

    assert run_status(None) == "FINISHED"
    assert run_status(optuna.TrialPruned("behind the median at step 2")) == "KILLED"
    assert run_status(KeyboardInterrupt()) == "KILLED"
    assert run_status(FoxhuntError("x", "y", "z")) == "FAILED"
    assert run_status(RuntimeError("boom")) == "FAILED"
