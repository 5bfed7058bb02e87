"""The feature cache: contents, metadata, schema hash, stale caches refused, one build path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.ipc
import pytest
from typer.testing import CliRunner

import foxhunt.data.bars
import foxhunt.dataset.cache as cache_mod
import foxhunt.features.market
import foxhunt.features.stack
import foxhunt.validation.labels
import foxhunt.validation.normalise
from foxhunt.cli import app
from foxhunt.config.loader import load_config
from foxhunt.data.config import SynthConfig
from foxhunt.data.synth import write_synthetic
from foxhunt.dataset.build import get_or_build
from foxhunt.dataset.cache import load_cache, schema_hash
from foxhunt.errors import FrontDoor
from foxhunt.features import layout
from foxhunt.features.cache_file import CacheMismatchError, open_cache

runner = CliRunner()


@pytest.fixture(scope="module")
def market_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("market")
    write_synthetic(SynthConfig(seed=9, sessions=2, events_per_session=20_000, alpha=0.5), out)
    return out


def _cfg(*sets: str):
    return load_config("smoke", overrides=list(sets))


def test_build_writes_a_self_describing_arrow_file(market_dir: Path, tmp_path: Path) -> None:
    cfg = _cfg()
    cache = get_or_build([market_dir], cfg, tmp_path)
    meta = cache.meta
    assert cache.path.parent == tmp_path and cache.path.suffix == ".arrow"
    assert meta["format_version"] == cache_mod.FORMAT_VERSION and meta["row_unit"] == "bar"
    assert meta["data_source"] == "mbp10" and meta["rows"] == cache.table.num_rows > 1000
    assert len(meta["sources"]) == 4 and all(len(s["sha256"]) == 64 for s in meta["sources"])
    assert [g["name"] for g in meta["layout"]] == ["market", "ofi", "tlob", "mtf"]
    assert sum(g["width"] for g in meta["layout"]) == len(cache.columns) == cache.features().shape[1]
    assert meta["schema_hash"] == schema_hash(cfg)
    # Readable by plain pyarrow (memory-mapped) and pandas, labels included.
    with pyarrow.memory_map(str(cache.path)) as src:
        table = pyarrow.ipc.open_file(src).read_all()
    frame = table.select(["ts", "close", "label.dir_h60", "label.dir_h60.valid"]).to_pandas()
    assert len(frame) == meta["rows"] and set(frame["label.dir_h60"].unique()) <= {-1, 0, 1}
    x = cache.features()
    assert x.dtype == np.float32 and np.isfinite(x).all()
    assert not list(tmp_path.glob(".*tmp"))


def test_second_call_loads_and_a_miss_runs_the_same_build(market_dir: Path, tmp_path: Path) -> None:
    # (Spying on build_cache with a monkeypatch would itself change the schema hash: the hash
    # covers the cache module's code. The file's identity tells whether it was rewritten.)
    cfg = _cfg()
    first = get_or_build([market_dir], cfg, tmp_path)
    stamp = first.path.stat().st_mtime_ns, first.path.stat().st_ino
    again = get_or_build([market_dir], cfg, tmp_path)
    assert again.path == first.path and (again.path.stat().st_mtime_ns, again.path.stat().st_ino) == stamp
    np.testing.assert_array_equal(again.features(), first.features())
    first.path.unlink()
    rebuilt = get_or_build([market_dir], cfg, tmp_path)  # a miss: the same build, the same values
    assert rebuilt.path == first.path
    np.testing.assert_array_equal(rebuilt.features(), again.features())
    for name in ("label.dir_h60", "label.outcome", "ts", "close"):
        np.testing.assert_array_equal(rebuilt.column(name), again.column(name))


EDITS = {
    "feature family": (foxhunt.features.market, "compute"),
    "post-processing": (foxhunt.features.stack, "compute_stack"),
    "normalisation": (foxhunt.validation.normalise, "apply"),
    "labels": (foxhunt.validation.labels, "direction_labels"),
    "rows from events": (foxhunt.data.bars, "build_bars"),
}


@pytest.fixture(scope="module")
def built_cache(market_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    return get_or_build([market_dir], _cfg(), tmp_path_factory.mktemp("built"))


@pytest.mark.parametrize("what", list(EDITS))
def test_schema_hash_covers_code(what: str, monkeypatch, built_cache) -> None:
    cfg = _cfg()
    before = schema_hash(cfg)
    load_cache(built_cache.path, cfg)  # valid before the edit
    module, name = EDITS[what]
    original = getattr(module, name)

    def edited(*args, **kwargs):  # same behaviour, different code
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, edited)
    assert schema_hash(cfg) != before, what
    with pytest.raises(CacheMismatchError, match="schema_hash"):
        load_cache(built_cache.path, cfg)  # the old cache is refused


def test_schema_hash_covers_layout_and_config(monkeypatch) -> None:
    cfg = _cfg()
    before = schema_hash(cfg)
    assert schema_hash(_cfg("labels.bar_horizons=[30]")) != before
    assert schema_hash(_cfg("data.bar_seconds=60")) != before
    assert schema_hash(_cfg("run.seed=99")) == before  # not a value-changing setting
    grown = layout.build_layout(
        "state",
        [(g.name, g.slots + (("extra",) if g.name == "plan" else ())) for g in layout.STATE_LAYOUT.groups],
        8,
    )
    monkeypatch.setattr(cache_mod, "STATE_LAYOUT", grown)
    assert schema_hash(cfg) != before


def test_stale_cache_is_refused_and_regeneration_can_be_disabled(
    market_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    cfg = _cfg()
    built = get_or_build([market_dir], cfg, tmp_path)
    original = foxhunt.features.market.compute

    def edited(*args, **kwargs):
        return original(*args, **kwargs)

    monkeypatch.setattr(foxhunt.features.market, "compute", edited)
    with pytest.raises(CacheMismatchError, match="schema_hash"):
        load_cache(built.path, cfg)
    with pytest.raises(CacheMismatchError) as info:
        get_or_build([market_dir], cfg, tmp_path, regenerate=False)
    assert "schema_hash" in str(info.value) and "api.build_features(..., regenerate=True)" in str(info.value)
    assert "foxhunt features build" in info.value.render(FrontDoor.CLI)
    fresh = get_or_build([market_dir], cfg, tmp_path)  # regeneration on: a new file, same values
    assert fresh.path != built.path and fresh.meta["schema_hash"] != built.meta["schema_hash"]
    np.testing.assert_array_equal(fresh.features(), built.features())
    with pytest.raises(CacheMismatchError, match=r"settings differ: data.bar_seconds cached 30, now 60"):
        load_cache(fresh.path, _cfg("data.bar_seconds=60"))


def test_cli_build_and_info_json(market_dir: Path, tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "features",
            "build",
            "--data",
            str(market_dir),
            "--row-unit",
            "snapshot",
            "--out",
            str(tmp_path),
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    (path,) = tmp_path.glob("features-snapshot-*.arrow")
    info = runner.invoke(app, ["features", "info", str(path), "--json"])
    assert info.exit_code == 0, info.output
    body = json.loads(info.stdout)
    assert body["row_unit"] == "snapshot" and body["data_source"] == "mbp10" and body["rows"] == 40_000
    assert {"name", "mean", "std", "coverage"} <= set(body["columns"][0])
    names = [c["name"] for c in body["columns"]]
    assert names[-6:] == [f"snapshot.{s}" for s in foxhunt.features.snapshot.SLOTS]
    assert all(0.0 <= c["coverage"] <= 1.0 for c in body["columns"])
    assert open_cache(path).meta["schema_hash"] == body["schema_hash"]
