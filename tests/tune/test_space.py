"""The [tune] section: a space whose every key is a config value, checked when a study starts through the
``--set`` machinery; sampled values applied with their types (issue 17)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from foxhunt.agent.config import LEARNER_ONLY, Algo, Symmetry, only_for
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


# --- a key the trials' learner never reads (foxhunt.agent.config.LEARNER_ONLY) ------------------------


def test_tune_refuses_a_dqn_space_under_ppo_in_one_line(tmp_path: Path) -> None:
    """The smoke profile's space is the DQN learner's: under agent.algo = ppo every trial would train
    alike, so the study is refused before anything is written, naming the key and what to do."""
    with pytest.raises(ConfigError) as err:
        trial_config(load_config(profile="smoke", overrides=["agent.algo=ppo"]))
    assert "tune.params.agent.learn.lr" in str(err.value)
    assert "only agent.algo = dqn reads it" in str(err.value) and "agent.ppo.lr" in str(err.value)
    out = tmp_path / "t"
    args = [
        "tune",
        "--profile",
        "smoke",
        "--set",
        "agent.algo=ppo",
        "--out",
        str(out),
        "--tracking-uri",
        "none",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "only agent.algo = dqn reads it" in result.output and len(result.output.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize(
    ("algo", "key", "owner"),
    [
        ("dqn", "agent.ppo.lr", "ppo"),
        ("ppo", "agent.explore.epsilon", "dqn"),
        ("ppo", "agent.network.atoms", "dqn"),
    ],
)
def test_a_key_of_the_other_learner_is_refused(tmp_path: Path, algo: str, key: str, owner: str) -> None:
    bounds = "low = 11\nhigh = 51" if key.endswith("atoms") else "low = 0.01\nhigh = 0.1"
    plateau = "[train.plateau]\npatience = 0\n\n"  # the ladder reads DQN statistics: off under ppo
    table = f'[agent]\nalgo = "{algo}"\n\n{plateau}[tune.params."{key}"]\n{bounds}\n'
    with pytest.raises(ConfigError, match=f"only agent.algo = {owner} reads it"):
        trial_config(load_config(config_file=_profile(tmp_path, table)))


def test_both_learners_keys_may_be_searched_with_the_learner(tmp_path: Path) -> None:
    """A space that searches agent.algo trains both learners: each one's keys are read by some trial."""
    table = (
        '[tune.params."agent.algo"]\nchoices = ["dqn", "ppo"]\n\n'
        '[tune.params."agent.learn.lr"]\nlow = 1e-3\nhigh = 1e-2\n\n'
        '[tune.params."agent.ppo.lr"]\nlow = 1e-3\nhigh = 1e-2\n\n'
        '[tune.params."agent.network.hidden"]\nlow = 16\nhigh = 32\n'
    )
    trial_config(load_config(config_file=_profile(tmp_path, table)))  # accepted


def test_the_full_profile_searches_what_ppo_reads() -> None:
    cfg = load_config(profile="full")
    assert cfg.agent.algo is Algo.PPO
    assert {"agent.ppo.lr", "agent.ppo.minibatches", "agent.ppo.gamma", "agent.ppo.clip"} <= set(
        cfg.tune.params
    )
    assert all(only_for(key) in (None, Algo.PPO) for key in cfg.tune.params)
    trial_config(cfg)  # accepted: the study starts


def test_every_learner_only_key_is_a_config_setting() -> None:
    """LEARNER_ONLY names real key paths (a renamed field would leave the table naming nothing)."""
    tree = load_config(profile="smoke").model_dump(mode="json")
    for keys in LEARNER_ONLY.values():
        for key in keys:
            node = tree
            for part in key.split("."):
                assert isinstance(node, dict) and part in node, key
                node = node[part]
