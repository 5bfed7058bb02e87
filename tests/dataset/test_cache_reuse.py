"""A cache built by one process is reused by the next: stable hashes, settings read from the cache,
stale files replaced rather than accumulated, and refusals that say what to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from foxhunt.config.loader import load_config
from foxhunt.data.config import SynthConfig
from foxhunt.data.synth import write_synthetic
from foxhunt.dataset.build import get_or_build
from foxhunt.dataset.cache import config_from_cache, load_cache
from foxhunt.errors import FrontDoor
from foxhunt.features.cache_file import META_KEY, CacheMismatchError, read_meta
from foxhunt.features.fingerprint import stable_repr

FOXHUNT = [sys.executable, "-m", "foxhunt.cli"]


@pytest.fixture(scope="module")
def market_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("market")
    write_synthetic(SynthConfig(seed=5, sessions=2, events_per_session=12_000, alpha=0.5), out)
    return out


def _run(args: list[str], seed: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    return subprocess.run(
        [*FOXHUNT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def test_set_members_are_written_in_one_order() -> None:
    # repr(frozenset) follows the salted str hash; the stable form sorts, recursively.
    assert stable_repr(frozenset({"b", "a", "c"})) == "frozenset({'a', 'b', 'c'})"
    assert stable_repr((frozenset({"y", "x"}), 1)) == "(frozenset({'x', 'y'}), 1)"
    assert stable_repr(("only",)) == "('only',)"


def test_schema_hash_is_the_same_under_every_hash_seed() -> None:
    code = (
        "from foxhunt.config.loader import load_config; from foxhunt.dataset.cache import schema_hash;"
        "print(schema_hash(load_config('smoke')), schema_hash(load_config('smoke', "
        "overrides=['data.row_unit=snapshot'])))"
    )
    hashes = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in (1, 2)
    }
    assert len(hashes) == 1, hashes


def test_a_snapshot_cache_built_by_one_process_is_reused_by_the_next(
    market_dir: Path, tmp_path: Path
) -> None:
    build = _run(
        ["features", "build", "--data", str(market_dir), "--row-unit", "snapshot", "--out", "fs", "-q"],
        seed=11,
        cwd=tmp_path,
    )
    assert build.returncode == 0, build.stderr
    (cache,) = (tmp_path / "fs").glob("*.arrow")
    stamp = cache.stat().st_mtime_ns
    # A new process with another hash seed, and no --row-unit: the cache says it holds snapshot rows.
    bt = _run(
        ["backtest", "--cache", str(cache), "--policy", "long", "--out", "bt", "-q"], seed=12, cwd=tmp_path
    )
    assert bt.returncode == 0, bt.stderr
    assert "Traceback" not in bt.stderr
    assert list((tmp_path / "fs").glob("*.arrow")) == [cache] and cache.stat().st_mtime_ns == stamp
    assert '"row_unit": "snapshot"' in (tmp_path / "bt" / "backtest.config.json").read_text()
    # The same build again in a third process finds the cache instead of rebuilding it.
    again = _run(
        ["features", "build", "--data", str(market_dir), "--row-unit", "snapshot", "--out", "fs", "-q"],
        seed=13,
        cwd=tmp_path,
    )
    assert again.returncode == 0, again.stderr
    assert cache.stat().st_mtime_ns == stamp and len(list((tmp_path / "fs").glob("*.arrow"))) == 1


def test_settings_come_from_the_cache_and_a_contradiction_is_refused(
    market_dir: Path, tmp_path: Path
) -> None:
    built = get_or_build([market_dir], load_config("smoke", overrides=["data.row_unit=snapshot"]), tmp_path)
    plain = load_config("smoke")
    assert plain.data.row_unit.value == "bar"
    adopted = config_from_cache(built.path, plain)
    assert adopted.data.row_unit.value == "snapshot"
    assert load_cache(built.path, adopted).meta["rows"] == built.meta["rows"]
    # Explicitly asking for bar rows from a snapshot cache names the key and both values.
    with pytest.raises(CacheMismatchError, match=r"data.row_unit='bar' \(the cache has 'snapshot'\)"):
        config_from_cache(built.path, plain, ["data.row_unit"])
    # A setting outside the cached sections (training, folds) is the user's to choose.
    folds = load_config("smoke", overrides=["folds.n_folds=2"])
    assert config_from_cache(built.path, folds, ["folds.n_folds"]).folds.n_folds == 2


def test_the_plans_triple_barrier_is_a_cached_setting(market_dir: Path, tmp_path: Path) -> None:
    """The outcome labels are computed with env.plan.barrier, its one home: the cache records it,
    a --cache run adopts it (its env's plans are the labels' barrier), an explicit other value is
    refused, and a cache is stale for another barrier; the plan's other keys stay the user's."""
    built = get_or_build([market_dir], load_config("smoke"), tmp_path)
    assert built.meta["config"]["env.plan.barrier"]["horizon"] == 20
    longer = load_config("smoke", overrides=["env.plan.barrier.horizon=30", "env.plan.trailing_mult=2"])
    adopted = config_from_cache(built.path, longer, ["env.plan.trailing_mult"])
    assert adopted.env.plan.barrier.horizon == 20 and adopted.env.plan.trailing_mult == 2.0
    with pytest.raises(CacheMismatchError, match=r"env.plan.barrier.horizon=30 \(the cache has 20\)"):
        config_from_cache(built.path, longer, ["env.plan.barrier.horizon"])
    with pytest.raises(CacheMismatchError, match="env.plan.barrier.horizon cached 20, now 30"):
        load_cache(built.path, longer)


def test_a_stale_cache_names_each_setting_in_whole_words(market_dir: Path, tmp_path: Path) -> None:
    built = get_or_build([market_dir], load_config("smoke"), tmp_path)
    with pytest.raises(CacheMismatchError) as err:
        load_cache(built.path, load_config("smoke", overrides=["data.bar_seconds=60"]))
    text = str(err.value)
    assert "data.bar_seconds cached 30, now 60" in text
    assert "drop the overrides that differ" in text  # settings differ: not a rebuild
    assert "drop the --set/--row-unit that differ" in err.value.render(FrontDoor.CLI)


def test_a_cache_the_running_code_cannot_load_is_replaced_not_kept(market_dir: Path, tmp_path: Path) -> None:
    cfg = load_config("smoke")
    first = get_or_build([market_dir], cfg, tmp_path)
    # Pretend it was written by other code: another schema hash under another file name.
    table = pa.ipc.open_file(pa.memory_map(str(first.path), "r")).read_all()
    meta = read_meta(first.path)
    meta["schema_hash"] = "0" * 32
    orphan = tmp_path / "features-bar-mbp10-00000000000000000000.arrow"
    with pa.OSFile(str(orphan), "wb") as sink, pa.ipc.new_file(
        sink, table.schema.with_metadata({META_KEY: json.dumps(meta)})
    ) as writer:
        writer.write_table(table)
    # A cache of other settings (still loadable by the code) is not an orphan.
    other = get_or_build([market_dir], load_config("smoke", overrides=["data.bar_seconds=60"]), tmp_path)
    first.path.unlink()
    rebuilt = get_or_build([market_dir], cfg, tmp_path)
    assert rebuilt.path == first.path
    assert not orphan.exists() and other.path.exists()


def test_features_count_ticks_of_the_data_instrument(market_dir: Path, tmp_path: Path) -> None:
    # The synthetic market trades ESZ6: the table's ES tick, 0.25. Naming another tick for the
    # contract changes every tick-counted feature by the ratio, and the cache key with it.
    es = get_or_build([market_dir], load_config("smoke", overrides=["data.row_unit=snapshot"]), tmp_path)
    half = get_or_build(
        [market_dir],
        load_config(
            "smoke",
            overrides=["data.row_unit=snapshot", "instrument.tick_size=0.5", "instrument.point_value=50"],
        ),
        tmp_path,
    )
    assert es.meta["instrument"]["tick_size"] == 0.25 and es.meta["instrument"]["root"] == "ES"
    assert half.meta["instrument"]["tick_size"] == 0.5 and half.path != es.path
    a, b = es.column("snapshot.microprice_drift"), half.column("snapshot.microprice_drift")
    moved = np.abs(a) > 0
    assert moved.sum() > 100
    np.testing.assert_allclose(b[moved], a[moved] / 2, rtol=1e-5)


def test_a_cache_without_its_sources_keeps_the_instrument_it_was_built_with(
    market_dir: Path, tmp_path: Path
) -> None:
    from foxhunt.data.instrument import instrument_of_cache
    from foxhunt.domain.config import InstrumentConfig

    built = get_or_build([market_dir], load_config("smoke"), tmp_path)
    # Copied to another machine without the DBN files: the recorded instrument still names the contract.
    meta = json.loads(json.dumps(built.meta))
    for s in meta["sources"]:
        s["path"] = str(tmp_path / "gone" / s["name"])
    ins = instrument_of_cache(meta)
    assert (ins.root, ins.tick_size, ins.point_value) == ("ES", 0.25, 50.0)
    assert instrument_of_cache(meta, InstrumentConfig(point_value=5.0)).point_value == 5.0
