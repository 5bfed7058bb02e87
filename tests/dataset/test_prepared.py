"""The leak guard's reading of the files is the feature cache's: a command that guards and then builds
reads the DBN files and computes the rows and features once (foxhunt.dataset.prepared.Prepared), and
the cache it builds is the one built from the files alone, column for column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from foxhunt.data.ingest import load_market
from foxhunt.data.synth import write_synthetic
from foxhunt.dataset import build as build_mod
from foxhunt.dataset.build import get_or_build
from foxhunt.dataset.cache import compute_features
from foxhunt.dataset.leaks import guard_prepared
from foxhunt.features.pipeline import rows_from_market
from tests.train.test_run import tiny_cfg


def _columns(cache) -> dict[str, np.ndarray]:
    return {name: cache.column(name) for name in cache.table.column_names}


def test_a_cache_built_from_the_guards_reading_equals_one_built_from_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tiny_cfg()
    files = write_synthetic(cfg.synth, tmp_path / "market")
    report, prepared = guard_prepared(files, cfg, "test", "nothing runs")
    assert report.clean
    fresh = get_or_build(files, cfg, tmp_path / "fresh")

    def no_second_reading(*_args, **_kwargs):
        raise AssertionError("the files were read again")

    monkeypatch.setattr(build_mod, "load_market", no_second_reading)
    shared = get_or_build(files, cfg, tmp_path / "shared", prepared=prepared)
    a, b = _columns(fresh), _columns(shared)
    assert list(a) == list(b) and len(a) > 10
    for name in a:
        assert np.array_equal(a[name], b[name], equal_nan=a[name].dtype.kind == "f"), name
    assert fresh.meta["columns"] == shared.meta["columns"]


def test_a_reading_of_other_files_is_not_used(tmp_path: Path) -> None:
    cfg = tiny_cfg()
    files = write_synthetic(cfg.synth, tmp_path / "market")
    other = write_synthetic(cfg.synth.model_copy(update={"seed": cfg.synth.seed + 1}), tmp_path / "other")
    _, prepared = guard_prepared(other, cfg, "test", "nothing runs")
    built = get_or_build(files, cfg, tmp_path / "cache", prepared=prepared)
    fresh = get_or_build(files, cfg, tmp_path / "fresh")
    want = fresh.features()
    assert np.array_equal(built.features(), want, equal_nan=True)
    assert not np.array_equal(prepared.features.values[:100], want[:100], equal_nan=True)


def test_a_reading_under_other_settings_is_not_used(tmp_path: Path) -> None:
    cfg = tiny_cfg()
    files = write_synthetic(cfg.synth, tmp_path / "market")
    _, prepared = guard_prepared(files, tiny_cfg("data.bar_seconds=60"), "test", "nothing runs")
    built = get_or_build(files, cfg, tmp_path / "cache", prepared=prepared)
    fresh = get_or_build(files, cfg, tmp_path / "fresh")
    assert built.table.num_rows == fresh.table.num_rows != len(prepared.rows)
    assert np.array_equal(built.features(), fresh.features(), equal_nan=True)


def test_the_guard_counts_rows_in_the_instruments_tick(tmp_path: Path) -> None:
    """The rows the guard checks are the cache's: spreads in the instrument's tick (here an
    ``[instrument]`` override of ES's 0.25), not ``data.tick_size``."""
    cfg = tiny_cfg("instrument.tick_size=0.5")
    files = write_synthetic(cfg.synth, tmp_path / "market")
    _, prepared = guard_prepared(files, cfg, "test", "nothing runs")
    assert prepared.tick_size == 0.5 != cfg.data.tick_size
    md = load_market(files, cfg.data)
    want = compute_features(rows_from_market(md, cfg.data, tick_size=0.5), cfg)
    other = compute_features(rows_from_market(md, cfg.data), cfg)
    assert prepared.rows.tick_size == 0.5
    assert np.array_equal(prepared.features.values, want.values, equal_nan=True)
    assert not np.array_equal(prepared.features.values, other.values, equal_nan=True)
