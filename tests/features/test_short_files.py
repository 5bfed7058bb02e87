"""A file too short for the default folds: the refusal gives a concrete setting (a key and a value),
that setting works, and the commands after ``features build`` remember it (the cache's settings)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from foxhunt.config.loader import load_config
from foxhunt.data.dbn_write import write_book
from foxhunt.dataset.build import get_or_build
from foxhunt.dataset.remember import remembered_config
from foxhunt.errors import FrontDoor, render
from foxhunt.validation.config import FoldConfig
from foxhunt.validation.folds import TooFewRowsError, purged_walk_forward, shorter_bars, with_bar_fix
from tests.factories import make_book

T0 = 1_767_000_000 * 10**9  # 2025-12-29 09:20 UTC, inside a session


def test_the_fix_is_a_round_bar_length_whose_rows_hold_the_folds() -> None:
    # 120 rows of 30 s need 122: 20 s bars give about 180 (>= 122 x 1.1); 25 s would too, but it does
    # not divide an hour.
    with pytest.raises(TooFewRowsError) as err:
        purged_walk_forward(120, FoldConfig(n_folds=3), 60)
    fixed = shorter_bars(err.value, 30)
    cli, py = render(fixed.fix, FrontDoor.CLI), render(fixed.fix, FrontDoor.API)
    assert "--set data.bar_seconds=20 (about 180 rows" in cli and "x the current" not in cli
    assert 'api.config(..., overrides=["data.bar_seconds=20"]) (about 180 rows' in py
    assert "api.build_features" in py and "--" not in py
    assert (fixed.rows, fixed.need) == (120, 122) and fixed.problem == err.value.problem
    assert shorter_bars(err.value, 1) is err.value  # nothing shorter than 1 s: the error as it was


def _hour(path: Path) -> Path:
    """One hour of ten-level books, one a second (120 bars of 30 s: too few for the default folds)."""
    ts = T0 + np.arange(3600, dtype=np.int64) * 10**9
    walk = np.cumsum(np.random.default_rng(0).choice([-1, 0, 1], 3600))
    return write_book(path, make_book(ts, walk), symbols={1: "ESH6"})


@pytest.mark.slow  # two feature builds: half a minute of CPU
def test_a_short_file_gets_a_setting_that_works_and_is_remembered(tmp_path: Path) -> None:
    data = _hour(tmp_path / "hour.mbp-10.dbn.zst")
    cfg = load_config("smoke")
    with pytest.raises(TooFewRowsError) as err:
        get_or_build([data], cfg, tmp_path / "run" / "cache")
    fixed = with_bar_fix(err.value, cfg.data, cfg.train)  # what features build and the --data commands say
    [setting] = [w for w in render(fixed.fix, FrontDoor.CLI).split() if w.startswith("data.bar_seconds=")]
    built = get_or_build([data], load_config("smoke", overrides=[setting]), tmp_path / "run" / "cache")
    assert built.meta["rows"] >= err.value.need
    # A later command on the same files into the folder holding that cache takes its settings.
    remembered, said = remembered_config([data], cfg, tmp_path / "run" / "cache")
    assert said == [setting] and remembered.data.bar_seconds == int(setting.split("=")[1])
    # ... unless it sets one of them itself, or the folder holds no cache of these files.
    assert remembered_config([data], cfg, tmp_path / "run" / "cache", ["data.bar_seconds"]) == (cfg, [])
    other = _hour(tmp_path / "other.mbp-10.dbn.zst")
    assert remembered_config([data, other], cfg, tmp_path / "run" / "cache") == (cfg, [])
    assert remembered_config([data], cfg, tmp_path / "nowhere") == (cfg, [])
