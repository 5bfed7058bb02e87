"""The leak guard's inputs: a cache's recorded sources verified by SHA-256 before re-reading, and rows
too few for the training folds refused instead of a clean verdict over a handful of rows."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from foxhunt.config.loader import load_config
from foxhunt.data.dbn_write import write_book
from foxhunt.data.ingest import load_market
from foxhunt.dataset.leaks import cache_sources, check_leaks
from foxhunt.errors import FoxhuntError
from foxhunt.features.fingerprint import file_fingerprint
from foxhunt.validation.folds import TooFewRowsError
from tests.factories import make_book

T0 = 1_767_000_000 * 10**9


def _book(path: Path, n: int) -> Path:
    ts = T0 + np.arange(n) * 10**8
    return write_book(path, make_book(ts, np.zeros(n)), symbols={1: "ESH6"})


def test_a_cache_source_changed_since_the_build_is_refused(tmp_path: Path) -> None:
    a, b = _book(tmp_path / "a.mbp-10.dbn.zst", 50), _book(tmp_path / "b.mbp-10.dbn.zst", 60)
    cache = SimpleNamespace(meta={"sources": [file_fingerprint(a), file_fingerprint(b)]})
    assert cache_sources(cache, tmp_path / "c.arrow") == [a.resolve(), b.resolve()]
    _book(b, 61)  # rewritten with other contents under the same name
    with pytest.raises(FoxhuntError, match=r"b.mbp-10.dbn.zst: this source of cache c.arrow has changed"):
        cache_sources(cache, tmp_path / "c.arrow")


def test_rows_too_few_for_the_training_folds_are_refused_by_the_guard(tmp_path: Path) -> None:
    cfg = load_config("smoke")
    md = load_market([_book(tmp_path / "three.mbp-10.dbn.zst", 3)], cfg.data)
    with pytest.raises(TooFewRowsError, match="1 rows are too few for 3 expanding folds"):
        check_leaks(md, cfg)
