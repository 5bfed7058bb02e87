"""Config: frozen models, unknown keys rejected, profiles, overrides, stable hash."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest

from foxhunt.config.loader import available_profiles, config_hash, load_config, write_resolved
from foxhunt.config.models import FoxhuntConfig
from foxhunt.data.schemas import DataSource
from foxhunt.errors import ConfigError, FrontDoor


def test_every_profile_loads() -> None:
    assert {"smoke", "localdev", "production"} <= set(available_profiles())
    for name in available_profiles():
        assert isinstance(load_config(profile=name), FoxhuntConfig)


def test_models_are_frozen() -> None:
    cfg = load_config("smoke")
    with pytest.raises(pydantic.ValidationError):
        cfg.data.bar_seconds = 60  # type: ignore[misc]


def test_override_changes_one_field_and_the_hash() -> None:
    base = load_config("smoke")
    cfg = load_config("smoke", overrides=["data.data_source=ohlcv", "data.bar_seconds=60"])
    assert cfg.data.data_source is DataSource.OHLCV and cfg.data.bar_seconds == 60
    assert cfg.run == base.run
    assert config_hash(cfg) != config_hash(base)
    assert config_hash(load_config("smoke")) == config_hash(base)  # stable


def test_coupled_keys_of_one_section_are_set_one_by_one() -> None:
    """``magnitude`` and its ``magnitude_fractions`` are valid together only: two --set, in either
    order, give the config (each alone was once refused, whichever came first); a --set that breaks
    the tree is still the one named."""
    full = ["env.branches.magnitude=3", "env.branches.magnitude_fractions=[0.25, 0.5, 1.0]"]
    for overrides in (full, full[::-1]):
        cfg = load_config("smoke", overrides=overrides)
        assert cfg.env.branches.magnitude == 3 and cfg.env.branches.magnitude_fractions == (0.25, 0.5, 1.0)
    with pytest.raises(ConfigError) as info:
        load_config("smoke", overrides=["run.seed=8", "env.branches.magnitude=2"])
    assert "--set env.branches.magnitude=2" in info.value.render(FrontDoor.CLI)
    assert 'overrides=["env.branches.magnitude=2"]' in str(info.value) and "needs 2 values" in str(info.value)


def test_bad_value_names_key_value_and_what_is_allowed() -> None:
    with pytest.raises(ConfigError) as info:
        load_config("smoke", overrides=["data.data_source=parquet"])
    msg = str(info.value)
    assert "data.data_source" in msg and "parquet" in msg and "mbp10" in msg and "ohlcv" in msg


def test_unknown_key_is_rejected_with_known_keys() -> None:
    with pytest.raises(ConfigError) as info:
        load_config("smoke", overrides=["data.bar_secnds=60"])
    msg = str(info.value)
    assert "data.bar_secnds" in msg and "unknown key" in msg and "bar_seconds" in msg
    with pytest.raises(ConfigError, match="unknown key"):
        load_config("smoke", overrides=["nosuchsection.x=1"])


def test_config_file_and_its_errors(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('[data]\ndata_source = "ohlcv"\nbar_seconds = 300\n')
    assert load_config(config_file=good).data.bar_seconds == 300
    bad = tmp_path / "bad.toml"
    bad.write_text("[data]\nbar_seconds = -5\n")
    with pytest.raises(ConfigError, match=r"data\.bar_seconds.*-5"):
        load_config(config_file=bad)
    with pytest.raises(ConfigError, match="unknown profile"):
        load_config(profile="huge")
    with pytest.raises(ConfigError, match="section.key=value"):
        load_config("smoke", overrides=["bar_seconds=5"])


def test_resolved_config_written_and_reloadable(tmp_path: Path) -> None:
    cfg = load_config("smoke", overrides=["data.bar_seconds=15"])
    path = write_resolved(cfg, tmp_path / "x.config.json")
    body = json.loads(path.read_text())
    assert body["config_hash"] == config_hash(cfg)
    assert FoxhuntConfig.model_validate(body["config"]) == cfg


@pytest.mark.parametrize(
    ("key", "value"),
    [("profit_mult", "3.0"), ("stop_mult", "4.0"), ("vol_window", "50"), ("horizon", "10")],
)
def test_the_triple_barrier_is_set_in_one_place(key: str, value: str) -> None:
    """The labels' triple barrier is the env plan's exits, one ``env.plan.barrier`` for both: one
    ``--set`` changes it (no second key to keep equal), under either row unit."""
    for unit in ("bar", "snapshot"):
        cfg = load_config("smoke", overrides=[f"data.row_unit={unit}", f"env.plan.barrier.{key}={value}"])
        assert getattr(cfg.env.plan.barrier, key) == pytest.approx(float(value))


@pytest.mark.parametrize(
    "old_key",
    [
        "labels.profit_mult",
        "labels.stop_mult",
        "labels.barrier_vol_window",
        "labels.barrier_horizon_bars",
        "labels.barrier_horizon_snapshots",
        "env.plan.profit_mult",
        "env.plan.stop_mult",
        "env.plan.vol_window",
        "env.plan.target_bars",
    ],
)
def test_the_old_barrier_spellings_are_unknown_keys(old_key: str) -> None:
    with pytest.raises(ConfigError, match="unknown key"):
        load_config("smoke", overrides=[f"{old_key}=10"])


def test_smoke_plans_last_twenty_rows_in_either_row_unit() -> None:
    for unit in ("bar", "snapshot"):
        assert load_config("smoke", overrides=[f"data.row_unit={unit}"]).env.plan.barrier.horizon == 20


def test_the_plateau_ladder_under_ppo_is_refused_in_one_line() -> None:
    """The plateau ladder reads the DQN learner's Q statistics, which a PPO learner does not report:
    on under agent.algo = ppo it would never act, so the config refuses it in one line naming the fix,
    whichever --set comes first; off (the smoke profile's), or under DQN, it loads."""
    for profile, sets in (
        ("localdev", ["agent.algo=ppo"]),  # the default patience 5
        ("smoke", ["train.plateau.patience=3", "agent.algo=ppo"]),
        ("smoke", ["agent.algo=ppo", "train.plateau.patience=3"]),
    ):
        with pytest.raises(ConfigError) as err:
            load_config(profile, overrides=sets)
        text = str(err.value)
        assert "\n" not in text and "never acts under agent.algo = ppo" in text, text
        assert "train.plateau.patience=0" in text and "agent.algo=dqn" in text
    assert load_config("smoke", overrides=["agent.algo=ppo"]).train.plateau.patience == 0
    assert load_config("localdev", overrides=["agent.algo=ppo", "train.plateau.patience=0"])
    assert load_config("localdev").train.plateau.patience == 5  # DQN keeps its ladder
