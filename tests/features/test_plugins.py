"""User feature families: the example plug-in joins the stack, the cache (key and columns), the
feature statistics and the leak guard like a built-in family; a leaky plug-in is refused by every
command that runs the guard, naming its column; a plug-in that breaks the contract is refused when
it is loaded (docs/feature-plugins.md)."""

from __future__ import annotations

import importlib.metadata
import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.config.loader import load_config
from foxhunt.data.config import SynthConfig
from foxhunt.data.schemas import RowUnit
from foxhunt.data.synth import write_synthetic
from foxhunt.dataset.cache import schema_hash
from foxhunt.features.plugins import ENTRY_POINT_GROUP, PluginError, load_plugins, stack_families
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "plugins" / "trade_arrival.py"
ODD = 'MIRROR_ODD = frozenset({"buy_share"})'
runner = CliRunner()

LEAKY = '''
import numpy as np

NAME = "peek"
SLOTS = ("next_events",)
NEEDS_BOOK = False
MIRROR_ODD = frozenset()
MIRROR_SWAPS = ()


def compute(inp, params):
    out = np.zeros((len(inp), 1), np.float32)
    out[:-1, 0] = inp.event_count[1:]  # the next row's activity: prices untouched, still the future
    return out
'''


def _plugin_set(*paths: Path | str) -> str:
    return "features.plugins=[" + ", ".join(json.dumps(str(p)) for p in paths) + "]"


def _sets(*sets: str) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


@pytest.fixture(scope="module")
def market_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plugin_market")
    write_synthetic(SynthConfig(seed=6, sessions=2, events_per_session=12_000), out)
    return out


@pytest.fixture
def leaky(tmp_path: Path) -> Path:
    path = tmp_path / "peek_family.py"
    path.write_text(LEAKY)
    return path


# --- the example plug-in ----------------------------------------------------------------------------


def test_example_plugin_hand_worked() -> None:
    """fast_span 1 (the EMA is the row itself) and slow_span 3 (weight 1/2), by hand:
    row 1: 2 trades in 1 s; row 2: 4 in 2 s; row 3: 0 in 1 s.
    slow counts 2, 3, 1.5 and durations 1, 1.5, 1.25 -> slow rates 2, 2, 1.2."""
    (plugin,) = load_plugins(load_config("smoke", overrides=[_plugin_set(EXAMPLE)]).features).values()
    rows = SimpleNamespace(
        ts=np.array([0, 1, 3, 4], np.int64) * 1_000_000_000,
        trade_count=np.array([5.0, 2.0, 4.0, 0.0]),
        buy_volume=np.array([1.0, 3.0, 1.0, 0.0]),
        sell_volume=np.array([1.0, 1.0, 1.0, 0.0]),
        flow_mask=np.ones(4, bool),
        segment_start=np.array([True, False, False, False]),
    )
    params = plugin.family.CONFIG(fast_span=1, slow_span=3)
    out = plugin.family.compute(rows, params)
    expected = [
        [0.0, 0.0, 0.0, 0.0],  # a segment's first row has no duration yet
        [math.log1p(2), math.log1p(2), 0.0, 0.5],  # (3 - 1) / 4 bought
        [math.log1p(2), math.log1p(2), 0.0, 0.0],
        [0.0, math.log1p(1.2), -math.log1p(1.2), 0.0],  # no volume: the imbalance keeps its 0
    ]
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-7)
    assert out.dtype == np.float32 and plugin.name == "arrival"


def test_example_plugin_mirror_declaration_holds(bar_rows) -> None:
    """Its declared parity against the features of a mirrored market (tests/features/test_mirror.py):
    the rates unchanged, the aggressor imbalance negated."""
    from tests.features.test_mirror import mirror_rows

    (plugin,) = load_plugins(load_config("smoke", overrides=[_plugin_set(EXAMPLE)]).features).values()
    params = plugin.family.CONFIG()
    a = plugin.family.compute(bar_rows, params).astype(np.float64)
    b = plugin.family.compute(mirror_rows(bar_rows), params).astype(np.float64)
    mirror = plugin.mirror()
    assert mirror.sign == (1.0, 1.0, 1.0, -1.0) and mirror.source == (0, 1, 2, 3)
    np.testing.assert_allclose(b, a[:, list(mirror.source)] * np.array(mirror.sign), atol=1e-6)
    assert (a[:, 3] != 0).mean() > 0.5  # the odd slot is not trivially 0


def test_example_plugin_is_clean_and_joins_the_cache_and_the_stats(market_dir: Path, tmp_path: Path) -> None:
    sets = _sets(_plugin_set(EXAMPLE))
    checked = runner.invoke(app, ["check", "leaks", "--data", str(market_dir), "--json", "-q", *sets])
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["clean"]
    args = ["features", "build", "--data", str(market_dir), "--out", str(tmp_path), "-q", *sets]
    built = runner.invoke(app, args)
    assert built.exit_code == 0, built.output
    (cache,) = tmp_path.glob("*.arrow")
    info = runner.invoke(app, ["features", "info", str(cache), "--json"])
    body = json.loads(info.stdout)
    names = [c["name"] for c in body["columns"]]
    arrival = ["arrival.log_rate_fast", "arrival.log_rate_slow", "arrival.burst", "arrival.buy_share"]
    assert names[-4:] == arrival
    assert [g["name"] for g in body["layout"]] == ["market", "ofi", "tlob", "mtf", "arrival"]
    stats = {c["name"]: c for c in body["columns"]}
    assert stats["arrival.log_rate_slow"]["coverage"] > 0.9 and stats["arrival.log_rate_slow"]["max"] > 0


def test_plugins_join_the_cache_key_by_their_code(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a" / "fam.py", tmp_path / "b" / "fam.py", tmp_path / "c" / "fam.py"
    for p in (a, b, c):
        p.parent.mkdir()
    shutil.copy(EXAMPLE, a)
    shutil.copy(EXAMPLE, b)
    c.write_text(EXAMPLE.read_text().replace("np.log1p(rate_f) - np.log1p(rate_s)", "np.log1p(rate_f)"))

    def fingerprint(path: Path) -> str:
        (plugin,) = load_plugins(load_config("smoke", overrides=[_plugin_set(path)]).features).values()
        return plugin.fingerprint()

    assert fingerprint(a) == fingerprint(b) != fingerprint(c)  # the code, not where it lies
    plain, with_plugin = load_config("smoke"), load_config("smoke", overrides=[_plugin_set(a)])
    assert schema_hash(plain) != schema_hash(with_plugin)
    tuned = load_config("smoke", overrides=[_plugin_set(a), "features.plugin_params.arrival.fast_span=3"])
    assert load_plugins(tuned.features)["arrival"].params.fast_span == 3


def test_module_path_and_entry_point(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    by_module = load_plugins(load_config("smoke", overrides=[_plugin_set("trade_arrival")]).features)
    assert list(by_module) == ["arrival"] and by_module["arrival"].module.__name__ == "trade_arrival"
    point = importlib.metadata.EntryPoint(
        name="arrival-rates", value="trade_arrival", group=ENTRY_POINT_GROUP
    )
    real = importlib.metadata.entry_points

    def entry_points(**kw):
        return [point] if kw.get("group") == ENTRY_POINT_GROUP else real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    cfg = load_config("smoke", overrides=[_plugin_set("arrival-rates"), "data.row_unit=snapshot"])
    plugins = load_plugins(cfg.features)
    assert stack_families(RowUnit.SNAPSHOT, plugins)[-2:] == ("snapshot", "arrival")


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda s: s.replace(ODD, ""), "MIRROR_ODD"),
        (lambda s: s.replace('NAME = "arrival"', 'NAME = "market"'), "already a built-in family"),
        (lambda s: s.replace(ODD, 'MIRROR_ODD = frozenset({"sell"})'), "sell"),
        # written to the contract before its settings class was named by CONFIG
        (lambda s: s.replace("CONFIG = ArrivalConfig", "Params = ArrivalConfig"), "named by CONFIG"),
    ],
)
def test_a_plugin_breaking_the_contract_is_refused(tmp_path: Path, edit, named: str) -> None:
    path = tmp_path / "broken.py"
    path.write_text(edit(EXAMPLE.read_text()))
    with pytest.raises(PluginError, match=named):
        load_plugins(load_config("smoke", overrides=[_plugin_set(path)]).features)


def test_bad_plugin_settings_and_missing_plugins_exit_2(market_dir: Path) -> None:
    typo = _sets(_plugin_set(EXAMPLE), "features.plugin_params.arrival.fast_spam=3")
    result = runner.invoke(app, ["check", "leaks", "--data", str(market_dir), "-q", *typo])
    assert result.exit_code == 2 and "features.plugin_params.arrival.fast_spam" in result.output
    missing = _sets(_plugin_set("no_such_family_pkg.fam"))
    result = runner.invoke(app, ["check", "leaks", "--data", str(market_dir), "-q", *missing])
    assert result.exit_code == 2 and "no module 'no_such_family_pkg.fam'" in result.output


# --- the leaky plug-in, refused by every command that runs the guard ---------------------------------


GUARDED = ["check leaks", "alpha", "train", "run", "seeds --seeds 1", "tune --trials 1", "backtest", "edge"]


@pytest.mark.parametrize("command", GUARDED)
def test_a_leaky_plugin_is_refused_naming_its_column(
    command: str, leaky: Path, market_dir: Path, tmp_path: Path
) -> None:
    args = [*command.split(), "--data", str(market_dir), "-q", *_sets(_plugin_set(EXAMPLE, leaky))]
    if command != "check leaks":
        args += ["--out", str(tmp_path / "out"), "--profile", "smoke"]
    result = runner.invoke(app, args)
    assert result.exit_code == 3, result.output
    assert "peek.next_events" in result.output and "arrival." not in result.output
    out = tmp_path / "out"
    assert not (out / "alpha.json").exists() and not (out / "metrics.json").exists()
    assert not (out / "folds.json").exists() and not (out / "edge.json").exists()
    assert not (out / "seeds.json").exists() and not (out / "tune.json").exists()
    # train, run, seeds, tune, backtest and edge build it beside the guard's cuts: removed
    assert not (out / "cache").exists()


def test_backtest_and_edge_over_a_leaky_cache_exit_3(leaky: Path, market_dir: Path, tmp_path: Path) -> None:
    """``features build`` runs no guard, so a cache can carry a leak. ``backtest`` and ``edge`` over
    ``--cache`` run the guard on the files the cache was built from, with the cache's own settings (its
    plug-ins: no --set here): exit 3 naming the column and the command, no result written; the backtest
    in a process of its own, as a user runs it. The cache is the user's and stays."""
    import subprocess
    import sys

    sets = _sets(_plugin_set(EXAMPLE, leaky))
    args = ["features", "build", "--data", str(market_dir), "--out", str(tmp_path / "c"), "-q", *sets]
    built = runner.invoke(app, args)
    assert built.exit_code == 0, built.output
    (cache,) = (tmp_path / "c").glob("*.arrow")
    out = tmp_path / "backtest"
    argv = ["backtest", "--cache", str(cache), "--policy", "long", "--out", str(out), "-q"]
    ran = subprocess.run(
        [sys.executable, "-m", "foxhunt.cli", *argv], capture_output=True, text=True, timeout=600
    )
    edge = runner.invoke(app, ["edge", "--cache", str(cache), "--out", str(tmp_path / "edge"), "-q"])
    for command, code, text in (
        ("backtest", ran.returncode, ran.stdout + ran.stderr),
        ("edge", edge.exit_code, edge.output),
    ):
        assert code == 3, text
        errors = [line for line in text.splitlines() if line.startswith("error")]
        assert len(errors) == 1 and f"foxhunt {command}" in errors[0], text
        assert "peek.next_events" in text and "arrival." not in text and "Traceback" not in text
    assert not (out / "metrics.json").exists() and not (tmp_path / "edge" / "edge.json").exists()
    assert cache.is_file()


def test_a_backtest_over_a_cache_without_its_source_files_is_refused(
    market_dir: Path, tmp_path: Path
) -> None:
    """The guard recomputes the features from the files the cache was built from: where they are gone
    it cannot run, and the backtest is refused in one line (exit 2) naming --data as the fix."""
    copy = tmp_path / "market"
    shutil.copytree(market_dir, copy)
    built = runner.invoke(app, ["features", "build", "--data", str(copy), "--out", str(tmp_path / "c"), "-q"])
    assert built.exit_code == 0, built.output
    (cache,) = (tmp_path / "c").glob("*.arrow")
    shutil.rmtree(copy)
    gone = runner.invoke(app, ["backtest", "--cache", str(cache), "--out", str(tmp_path / "bt")])
    assert gone.exit_code == 2, gone.output
    errors = [line for line in gone.output.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "source files are not where they were" in gone.output, gone.output
    assert "--data" in gone.output and not (tmp_path / "bt" / "metrics.json").exists()
