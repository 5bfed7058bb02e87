"""An error's fix is one the researcher can type where they are: ``--set ...`` on the command line,
``api.config(..., overrides=[...])`` and keyword arguments in Python (foxhunt.errors, front doors)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from typer.testing import CliRunner

from foxhunt import api
from foxhunt.cli import app
from foxhunt.data.config import SynthConfig
from foxhunt.data.synth import write_synthetic
from foxhunt.dataset.build import get_or_build
from foxhunt.errors import (
    ConfigError,
    FoxhuntError,
    FrontDoor,
    OutputError,
    current_front_door,
    door,
    front_door,
    render,
    setting,
)
from foxhunt.outputs import claim_file
from foxhunt.validation.folds import TooFewRowsError

runner = CliRunner()


def test_a_fix_is_worded_for_the_door_it_is_read_at() -> None:
    err = ConfigError(setting("a.b=1", "c.d=x"), "bad", f"pass {door('--overwrite', 'overwrite=True')}")
    assert current_front_door() is FrontDoor.API
    api_text = 'api.config(..., overrides=["a.b=1", "c.d=x"]): bad (fix: pass overwrite=True)'
    cli_text = "--set a.b=1 --set c.d=x: bad (fix: pass --overwrite)"
    assert str(err) == err.render(FrontDoor.API) == api_text
    assert err.render(FrontDoor.CLI) == cli_text
    with front_door(FrontDoor.CLI):
        assert str(err) == cli_text and current_front_door() is FrontDoor.CLI
    assert str(err) == api_text  # the door is left with the block
    assert str(pickle.loads(pickle.dumps(err))) == api_text  # from a worker process, still worded late
    assert render("no marker here {x}") == "no marker here {x}"
    assert "\x02" not in err.render(FrontDoor.CLI) + err.render(FrontDoor.API)


def test_a_bad_override_from_python_names_the_python_fix() -> None:
    with pytest.raises(ConfigError) as err:
        api.config("smoke", overrides=["data.bar_seconds"])
    text = str(err.value)
    assert text.startswith('api.config(..., overrides=["data.bar_seconds"]): expected section.key=value')
    assert 'write e.g. api.config(..., overrides=["data.bar_seconds=60"])' in text and "--set" not in text


def test_the_same_bad_override_on_the_command_line_names_the_option() -> None:
    result = runner.invoke(app, ["config", "show", "--profile", "smoke", "--set", "data.bar_seconds"])
    assert result.exit_code == 2
    out = " ".join(result.output.split())
    assert "--set data.bar_seconds: expected section.key=value" in out
    assert "write e.g. --set data.bar_seconds=60" in out and "api.config" not in out


def test_an_existing_output_names_the_keyword_in_python(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(OutputError, match=r"pass overwrite=True to replace it, or choose another out_dir"):
        claim_file(tmp_path / "x.json")
    with front_door(FrontDoor.CLI), pytest.raises(OutputError, match="pass --overwrite to replace it"):
        claim_file(tmp_path / "x.json")


def test_too_few_rows_for_the_folds_names_the_fix_of_each_door(tmp_path: Path) -> None:
    # The same short market (948 rows of 30 s bars, 996 needed) and fold settings: from Python the
    # fixes are config overrides, on the command line the options; neither names the other's.
    market = tmp_path / "m"
    write_synthetic(SynthConfig(seed=4, sessions=1, events_per_session=1500), market)
    sets = ["folds.n_folds=100", "folds.min_train_fraction=0.9"]
    cfg = api.config("smoke", overrides=sets)
    with pytest.raises(TooFewRowsError) as err:
        get_or_build([market], cfg, tmp_path / "py")  # the folds' own refusal, before the bar fix
    text = str(err.value)
    assert 'api.config(..., overrides=["folds.n_folds=95"]);' in text
    assert 'api.config(..., overrides=["data.row_unit=snapshot"])' in text
    assert 'api.config(..., overrides=["data.bar_seconds=...' in text and "--" not in text
    # api.build_features gives the concrete bar length, as features build does, worded for Python.
    with pytest.raises(TooFewRowsError) as err:
        api.build_features([market], cfg, tmp_path / "py")
    fixed = str(err.value)
    assert 'api.config(..., overrides=["data.bar_seconds=20"]) (about 1422 rows of 20 s bars)' in fixed
    assert "api.build_features" in fixed and 'or api.config(..., overrides=["folds.n_folds=95"])' in fixed
    assert "--" not in fixed
    args = ["features", "build", "--data", str(market), "--out", str(tmp_path / "cli"), "--profile", "smoke"]
    result = runner.invoke(app, [*args, "--set", sets[0], "--set", sets[1], "-q"])
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())
    assert "--set data.bar_seconds=20 (about 1422 rows of 20 s bars) on foxhunt features build" in out
    assert "or --set folds.n_folds=95;" in out and "api." not in out


def test_an_empty_committee_names_the_argument_in_python() -> None:
    with pytest.raises(FoxhuntError, match=r"^paths: no checkpoints for a committee") as err:
        api.load_committee([])
    assert err.value.render(FrontDoor.CLI).startswith("--checkpoint: no checkpoints")
