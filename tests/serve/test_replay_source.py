"""What --replay takes (files or folders, as every other command; definition, statistics and status
files left out) and how a paced replay keeps time (recorded gaps over serve.max_gap_seconds jumped)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from foxhunt.data.schemas import Schema
from foxhunt.errors import DataError
from foxhunt.serve.source import ReplaySource

FIXTURES = "databento-fixtures/GLBX.MDP3"
ESH4 = "cme-es/esh4-glbx-mdp3-20231225.mbo.dbn.zst"


def _folder(tmp_path: Path, files: list[Path]) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    for f in files:
        (folder / f.name).symlink_to(f)
    return folder


def test_a_replay_takes_a_folder_and_leaves_out_what_is_not_market_data(
    real_data_dir: Path, tmp_path: Path
) -> None:
    names = ("mbo", "definition", "statistics", "status")
    files = [real_data_dir / FIXTURES / f"test_data.{n}.dbn.zst" for n in names]
    folder = _folder(tmp_path, files)
    src = ReplaySource([folder])
    alone = ReplaySource([files[0]])  # the book file alone: the same records
    assert [m.schema for m in src.streams] == [Schema.MBO]
    assert len(src) == len(alone) > 0 and np.array_equal(src._ts, alone._ts)
    assert sorted(s.value for _, s, _ in src.skipped) == ["definition", "statistics", "status"]
    with pytest.raises(DataError, match="holds no market data"):
        ReplaySource([files[1]])


def test_a_paced_replay_jumps_recorded_gaps(tmp_path: Path) -> None:
    """The synthetic market's sessions are hours apart: paced, the replay's clock cuts every gap over
    the threshold to nothing (the next record is due at once) and keeps the others as recorded."""
    from foxhunt.data.synth import write_synthetic
    from tests.train.test_run import tiny_cfg

    files = write_synthetic(tiny_cfg().synth, tmp_path / "market")
    plain = ReplaySource(files, speed=10.0)
    src = ReplaySource(files, speed=10.0, jump_gap_seconds=900)
    step = np.diff(plain._ts)
    gaps = step > 900 * 10**9
    assert gaps.any() and plain.jumps == (0, 0.0)  # sessions apart, and no jump unless asked
    assert src.jumps == (int(gaps.sum()), pytest.approx(step[gaps].sum() / 1e9))
    paced = np.diff(src._pace_ts)
    assert np.array_equal(paced[~gaps], step[~gaps]) and not paced[gaps].any()
    src._t0_wall, src._t0_ts = 0.0, int(src._pace_ts[0])  # the pace's clock started at the first record
    span = (int(plain._ts[-1]) - int(plain._ts[0]) - step[gaps].sum()) / 1e9
    assert src.due(len(src) - 1) == pytest.approx(span / 10.0)


def test_the_real_esh4_snapshot_gap_is_jumped(real_data_dir: Path) -> None:
    """ESH4's file: the book snapshot 33 h before the live records (and one quiet 16.5 minutes)."""
    src = ReplaySource([real_data_dir / ESH4], speed=1.0, jump_gap_seconds=900)
    jumps, seconds = src.jumps
    assert jumps == 2 and 33 * 3600 < seconds < 34 * 3600
    assert (int(src._pace_ts[-1]) - int(src._pace_ts[0])) / 3.6e12 < 2  # the live two hours remain


def test_auto_compiles_only_where_a_decision_s_time_pays() -> None:
    """serve.decide = auto (the default): a replay runs eager (no build to wait for), a live feed aot
    on the CPU and compiled on a GPU (where aot is refused); a named path is kept as it is."""
    from foxhunt.serve.config import DecidePath, ServeConfig

    assert ServeConfig().decide is DecidePath.AUTO
    assert DecidePath.AUTO.resolve(False, "cpu") is DecidePath.EAGER
    assert DecidePath.AUTO.resolve(True, "cpu") is DecidePath.AOT
    assert DecidePath.AUTO.resolve(True, "cuda") is DecidePath.COMPILED
    assert all(p.resolve(live, "cpu") is p for p in DecidePath if p is not DecidePath.AUTO for live in (0, 1))
