"""The [tune] section: a space whose every key is a config value, checked when a study starts through the
``--set`` machinery; sampled values applied with their types (issue 17)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from foxhunt.agent.config import Symmetry
from foxhunt.cli import app
from foxhunt.config.loader import load_config, with_overrides
from foxhunt.errors import ConfigError
from foxhunt.tune.config import ParamSpaceConfig
from foxhunt.tune.objective import trial_config
from foxhunt.tune.study import shares

runner = CliRunner()


def _profile(tmp_path: Path, tune: str) -> Path:
    """A config file: the smoke profile's settings that matter here plus a [tune] section."""
    path = tmp_path / "p.toml"
    path.write_text("[run]\nseed = 3\n\n" + tune)
    return path


@pytest.mark.parametrize(
    ("table", "named", "says"),
    [
        ('[tune.params."agent.learn.lrr"]\nlow = 1e-4\nhigh = 1e-2\n', "agent.learn.lrr", "unknown config"),
        ('[tune.params."agent.learn"]\nlow = 1\nhigh = 2\n', "agent.learn", "section, not a value"),
        ('[tune.params."lr"]\nlow = 1e-4\nhigh = 1e-2\n', "lr", "not a searchable"),
        ('[tune.params."tune.trials"]\nlow = 1\nhigh = 5\n', "tune.trials", "not a searchable"),
        # a float range on an integer setting: refused at load (16.5), not at the first trial
        ('[tune.params."agent.network.hidden"]\nlow = 16.0\nhigh = 64.0\n', "agent.network.hidden", "16.5"),
        ('[tune.params."agent.learn.lr"]\nlow = 0.0\nhigh = 1e-2\n', "agent.learn.lr", "0.0 is refused"),
        ('[tune.params."agent.network.symmetry"]\nchoices = ["mirror", "up"]\n', "symmetry", "'up'"),
    ],
)
def test_a_space_the_config_refuses_is_an_error_when_the_study_starts(
    tmp_path: Path, table: str, named: str, says: str
) -> None:
    cfg = load_config(config_file=_profile(tmp_path, table))  # the config alone does not check its tuner
    with pytest.raises(ConfigError) as err:
        trial_config(cfg)  # where every study starts, before it builds anything
    assert f"tune.params.{named}" in str(err.value) or named in str(err.value)
    assert says in str(err.value)


def test_range_rules_are_checked_by_the_section_itself() -> None:
    with pytest.raises(ValueError, match="log = true needs low > 0"):
        ParamSpaceConfig(low=-1.0, high=1.0, log=True)
    with pytest.raises(ValueError, match="either choices or low/high"):
        ParamSpaceConfig(low=1, high=2, choices=(1, 2))
    with pytest.raises(ValueError, match="must be below"):
        ParamSpaceConfig(low=2, high=2)
    assert (
        ParamSpaceConfig(low=16, high=64, step=16).is_int and not ParamSpaceConfig(low=16, high=64.0).is_int
    )


def test_sampled_values_reach_the_config_typed_as_a_set_would(tmp_path: Path) -> None:
    cfg = load_config(
        config_file=_profile(
            tmp_path,
            '[tune.params."agent.network.hidden"]\nlow = 16\nhigh = 64\nstep = 16\n\n'
            '[tune.params."agent.network.symmetry"]\nchoices = ["mirror", "none"]\n',
        )
    )
    sampled = {"agent.network.hidden": 48, "agent.network.symmetry": "mirror", "agent.learn.lr": 0.002}
    got = with_overrides(cfg, sampled, where="trial")
    assert got.agent.network.hidden == 48 and got.agent.network.symmetry is Symmetry.MIRROR
    assert got.agent.learn.lr == 0.002
    assert got.model_dump(exclude={"agent"}) == cfg.model_dump(exclude={"agent"})
    with pytest.raises(ConfigError, match="agent.network.hidden"):
        with_overrides(cfg, {"agent.network.hidden": 2}, where="trial")  # below the field's bound (ge=4)


def test_the_smoke_profile_has_a_searchable_space() -> None:
    tune = load_config(profile="smoke").tune
    assert {"agent.learn.lr", "agent.learn.gamma", "agent.network.hidden"} <= set(tune.params)
    assert tune.params["agent.learn.lr"].log


def test_tune_refuses_a_profile_without_a_space(tmp_path: Path) -> None:
    path = tmp_path / "plain.toml"
    path.write_text("[run]\nseed = 1\n")
    args = ["tune", "--config", str(path), "--out", str(tmp_path / "t"), "--tracking-uri", "none"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "has no [tune] params" in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "t").exists()  # refused before anything was written


def test_shares_split_trials_over_workers() -> None:
    assert shares(5, 2) == [3, 2] and shares(4, 2) == [2, 2] and shares(1, 4) == [1] and shares(0, 3) == []
