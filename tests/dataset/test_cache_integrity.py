"""Feature cache integrity: per-column content hashes and a metadata hash, verified on every open;
broken or incomplete metadata, old formats, cut rows and too few rows for the folds refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from foxhunt.config.loader import load_config
from foxhunt.console import Reporter, Verbosity
from foxhunt.data.config import SynthConfig
from foxhunt.data.synth import write_synthetic
from foxhunt.dataset.build import get_or_build
from foxhunt.dataset.cache import config_from_cache, load_cache
from foxhunt.features.cache_file import REQUIRED_META, CacheMismatchError, open_cache
from foxhunt.validation.folds import TooFewRowsError
from tests.tamper import cache_parts, edit_column, edit_meta, flip_bytes, write_cache


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("integrity")
    write_synthetic(SynthConfig(seed=4, sessions=1, events_per_session=1500), root / "m")
    return root / "m", get_or_build([root / "m"], load_config("smoke"), root / "c").path


def test_every_column_and_the_metadata_are_hashed(built: tuple[Path, Path]) -> None:
    _, path = built
    cache = open_cache(path)
    assert sorted(cache.meta["content_hash"]) == sorted(cache.table.column_names)
    assert all(len(h) == 64 for h in cache.meta["content_hash"].values())
    assert set(REQUIRED_META) <= set(cache.meta) and len(cache.meta["meta_hash"]) == 64


def test_flipped_bytes_are_refused_or_change_nothing(built: tuple[Path, Path], tmp_path: Path) -> None:
    _, path = built
    base = open_cache(path)
    refused = []
    for seed in range(30):
        bad = flip_bytes(path, tmp_path / "bad.arrow", 16, seed)
        try:
            got = open_cache(bad)
        except CacheMismatchError as exc:
            refused.append(exc)
            continue
        for name in base.table.column_names:  # a flip in padding: the same numbers
            assert np.array_equal(got.column(name), base.column(name), equal_nan=True), (seed, name)
    assert len(refused) >= 25
    assert all(str(tmp_path / "bad.arrow") in str(e) and "rebuild" in e.fix for e in refused)


def test_edited_values_rows_and_metadata_are_refused(built: tuple[Path, Path], tmp_path: Path) -> None:
    _, path = built
    cases = {
        "content hash of column(s) close": edit_column(path, tmp_path / "a.arrow", "close", np.negative),
        "metadata does not match its hash": edit_meta(
            path, tmp_path / "b.arrow", lambda m: m.update(label_span=m["label_span"] - 1)
        ),
        "metadata lacks content_hash": edit_meta(path, tmp_path / "c.arrow", lambda m: m.pop("content_hash")),
        "cache format 1": edit_meta(path, tmp_path / "d.arrow", lambda m: m.update(format_version=1)),
    }
    table, raw = cache_parts(path)
    cases[f"{table.num_rows - 3} rows, its metadata records {table.num_rows}"] = write_cache(
        tmp_path / "e.arrow", table.slice(0, table.num_rows - 3), raw
    )
    cases["metadata is not valid JSON"] = write_cache(tmp_path / "f.arrow", table, raw[:-2])
    cases["metadata is not a JSON object"] = write_cache(tmp_path / "g.arrow", table, b"[1, 2]")
    cfg = load_config("smoke")
    for message, bad in cases.items():
        for read in (open_cache, lambda p: load_cache(p, cfg)):
            with pytest.raises(CacheMismatchError, match=message.replace("(", r"\(").replace(")", r"\)")):
                read(bad)
    with pytest.raises(CacheMismatchError, match="not valid JSON"):  # --cache reads the metadata first
        config_from_cache(cases["metadata is not valid JSON"], cfg)
    assert json.loads(raw)["rows"] == table.num_rows


def test_a_damaged_cache_in_the_cache_folder_is_rebuilt_and_said(
    built: tuple[Path, Path], tmp_path: Path
) -> None:
    market, good = built
    cfg = load_config("smoke")
    before = open_cache(good)
    path = tmp_path / good.name  # a copy of the cache folder, damaged below
    edit_column(good, path, "close", lambda v: v * 2)  # the cache, damaged
    lines: list[str] = []
    again = get_or_build([market], cfg, path.parent, progress=Reporter(Verbosity.NORMAL, write=lines.append))
    assert again.path == path
    assert np.array_equal(again.column("close"), before.column("close"))
    assert any("rebuilding" in line and "content hash" in line for line in lines), lines
    edit_column(path, path.with_name("tmp.arrow"), "close", lambda v: v * 2).replace(path)
    with pytest.raises(CacheMismatchError):  # with regeneration off it is refused instead
        get_or_build([market], cfg, path.parent, regenerate=False)


def test_rows_too_few_for_the_folds_write_no_cache(tmp_path: Path) -> None:
    write_synthetic(SynthConfig(seed=4, sessions=1, events_per_session=1500), tmp_path / "m")
    cfg = load_config("smoke", overrides=["folds.n_folds=100", "folds.min_train_fraction=0.9"])
    with pytest.raises(TooFewRowsError, match="too few for 100 expanding folds"):
        get_or_build([tmp_path / "m"], cfg, tmp_path / "c")
    assert not (tmp_path / "c").exists() or not list((tmp_path / "c").iterdir())
