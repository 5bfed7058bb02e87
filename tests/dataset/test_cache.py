"""The feature cache: contents, metadata, schema hash, stale caches refused, one build path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow.ipc
import pytest
from typer.testing import CliRunner

import foxhunt
import foxhunt.dataset.cache as cache_mod
from foxhunt import jit
from foxhunt.cli import app
from foxhunt.config.loader import load_config
from foxhunt.data.config import SynthConfig
from foxhunt.data.synth import write_synthetic
from foxhunt.dataset.build import get_or_build
from foxhunt.dataset.cache import load_cache, schema_hash
from foxhunt.errors import FrontDoor
from foxhunt.features import layout
from foxhunt.features.cache_file import CacheMismatchError, open_cache
from foxhunt.features.layout import STACK_FAMILIES
from foxhunt.features.registry import FAMILIES
from foxhunt.jit import PACKAGE

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


# A source file of each stage whose code shapes a cached value: rows from events, a feature family,
# the stack's post-processing, the labels, the normaliser, the cache's own columns.
EDITS = {
    "rows from events": "data/bars.py",
    "feature family": "features/market.py",
    "post-processing": "features/stack.py",
    "labels": "validation/labels.py",
    "normalisation": "validation/normalise.py",
    "cache columns": "dataset/cache.py",
}


@pytest.fixture(scope="module")
def built_cache(market_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    return get_or_build([market_dir], _cfg(), tmp_path_factory.mktemp("built"))


def _source_copy(where: Path) -> Path:
    """A copy of the running package's source (what the schema hash digests)."""
    return Path(shutil.copytree(PACKAGE, where / "foxhunt", ignore=shutil.ignore_patterns("__pycache__")))


def _edited(copy: Path, relative: str) -> Path:
    """``copy`` with one line added to one file: the same behaviour, other code."""
    path = copy / relative
    path.write_text(path.read_text() + "\n# edited\n")
    return copy


def test_schema_hash_is_kept_by_an_unchanged_source_tree(tmp_path: Path, monkeypatch, built_cache) -> None:
    cfg = _cfg()
    before = schema_hash(cfg)
    monkeypatch.setattr(cache_mod, "CODE_ROOT", _source_copy(tmp_path))
    assert schema_hash(cfg) == before  # the same files, elsewhere: the same hash
    assert load_cache(built_cache.path, cfg).meta["schema_hash"] == before


@pytest.mark.parametrize("what", list(EDITS))
def test_schema_hash_covers_code(what: str, tmp_path: Path, monkeypatch, built_cache) -> None:
    cfg = _cfg()
    before = schema_hash(cfg)
    load_cache(built_cache.path, cfg)  # valid before the edit
    monkeypatch.setattr(cache_mod, "CODE_ROOT", _edited(_source_copy(tmp_path), EDITS[what]))
    assert schema_hash(cfg) != before, what
    with pytest.raises(CacheMismatchError, match="schema_hash"):
        load_cache(built_cache.path, cfg)  # the old cache is refused


def test_schema_hash_is_the_numba_stamp() -> None:
    """One code fingerprint: the cache's key holds the digest numba stamps every cached kernel with."""
    assert cache_mod.CODE_ROOT == PACKAGE and PACKAGE in jit._ROOTS
    assert PACKAGE == Path(foxhunt.__file__).resolve().parent


def test_a_family_registered_at_run_time_is_fingerprinted(monkeypatch) -> None:
    cfg = _cfg()
    before = schema_hash(cfg)
    family = ModuleType("runtime_family")  # not foxhunt's: outside the package digest
    family.SLOTS, family.NEEDS_BOOK = ("x",), False
    family.compute = lambda inp, params: np.zeros((len(inp), 1), np.float32)
    monkeypatch.setitem(FAMILIES, "runtime_family", family)
    unit = cfg.data.row_unit
    monkeypatch.setitem(STACK_FAMILIES, unit, (*STACK_FAMILIES[unit], "runtime_family"))
    with_family = schema_hash(cfg)
    assert with_family != before
    family.compute = lambda inp, params: np.ones((len(inp), 1), np.float32)  # its code edited
    assert schema_hash(cfg) != with_family


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
    monkeypatch.setattr(cache_mod, "CODE_ROOT", _edited(_source_copy(tmp_path / "src"), "features/market.py"))
    with pytest.raises(CacheMismatchError, match="schema_hash differs: built by other foxhunt") as edited:
        load_cache(built.path, cfg)
    assert "editing the checkout while a job or study runs" in str(edited.value)  # the usual cause, named
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
