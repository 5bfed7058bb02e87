"""The feature cache built one session group per task equals the single-process build, bit for bit."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.config.loader import load_config
from foxhunt.config.models import FoxhuntConfig
from foxhunt.console import Reporter
from foxhunt.data.config import SynthConfig
from foxhunt.data.ingest import expand_paths, load_market
from foxhunt.data.synth import write_synthetic
from foxhunt.dataset import distributed
from foxhunt.dataset.cache import build_cache
from foxhunt.dataset.distributed import batches, build_by_session, session_groups
from foxhunt.features.cache_file import FeatureCache, open_cache
from foxhunt.features.fingerprint import file_fingerprint
from foxhunt.parallel import open_executor

runner = CliRunner()


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three sessions of one contract, one MBP-10 and one trades file per session."""
    out = tmp_path_factory.mktemp("market")
    write_synthetic(SynthConfig(seed=11, sessions=3, events_per_session=6_000), out)
    return out


@pytest.fixture(scope="module")
def rolling_market(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ESZ6 Mon-Wed and a busier ESH7 Tue-Thu: the causal rule stays on ESZ6 on Tuesday (Monday's
    activity decides) and rolls on Wednesday, while Tuesday's files alone would pick ESH7."""
    out = tmp_path_factory.mktemp("rolling")
    monday = dt.date(2026, 3, 2)
    old = SynthConfig(seed=12, sessions=3, events_per_session=4_000, start_date=monday)
    new = SynthConfig(
        seed=13,
        sessions=3,
        events_per_session=10_000,
        start_date=monday + dt.timedelta(days=1),
        symbol="ESH7",
        instrument_id=2,
    )
    write_synthetic(old, out)
    write_synthetic(new, out)
    return out


def _builds(
    folder: Path, cfg: FoxhuntConfig, tmp: Path, workers: int, said: list[str]
) -> tuple[FeatureCache, FeatureCache]:
    files = expand_paths([folder])
    sources = [file_fingerprint(p) for p in files]
    build_cache(load_market(files, cfg.data), cfg, tmp / "whole.arrow", sources)
    with open_executor(workers, say=said.append) as executor:
        build_by_session(files, cfg, tmp / "parts.arrow", sources, executor, Reporter.lines(said.append))
    return open_cache(tmp / "whole.arrow"), open_cache(tmp / "parts.arrow")


def assert_same_cache(whole: FeatureCache, parts: FeatureCache) -> None:
    assert whole.table.column_names == parts.table.column_names
    for name in whole.table.column_names:
        a, b = whole.column(name), parts.column(name)
        assert a.dtype == b.dtype, name
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name  # NaN in the same places
    assert whole.meta["content_hash"] == parts.meta["content_hash"]

    def strip(meta: dict) -> dict:
        return {k: v for k, v in meta.items() if k not in ("created_at", "meta_hash")}

    assert strip(whole.meta) == strip(parts.meta)  # rows, coverage, masked, sources, cache key


@pytest.mark.parametrize("row_unit", ["bar", "snapshot"])
def test_session_groups_build_the_whole_cache_bit_for_bit(
    market: Path, tmp_path: Path, row_unit: str
) -> None:
    cfg = load_config(profile="smoke", overrides=[f"data.row_unit={row_unit}"])
    assert [len(g) for g in session_groups(expand_paths([market]), cfg.data)] == [2, 2, 2]
    said: list[str] = []
    whole, parts = _builds(market, cfg, tmp_path, 1, said)
    assert whole.meta["rows"] > 0 and len(set(whole.column("trade_date"))) == 3
    assert_same_cache(whole, parts)
    assert not said  # no fallback to one process, no rebuilt group


def test_a_roll_at_a_groups_first_session_takes_the_whole_builds_contract(
    rolling_market: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = load_config(profile="smoke")
    # One task for all the groups: a task's run of several groups, and their rebuild, merge the same.
    monkeypatch.setattr(distributed, "TASKS_PER_WORKER", 1)
    said: list[str] = []
    whole, parts = _builds(rolling_market, cfg, tmp_path, 1, said)  # in-process: the CLI test runs Ray
    assert_same_cache(whole, parts)
    assert said == ["features: 1 session group(s) built again with the whole front month"]


@pytest.mark.usefixtures("ray_session")
def test_features_build_with_workers_writes_the_single_process_cache(market: Path, tmp_path: Path) -> None:
    caches = {}
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}"
        result = runner.invoke(
            app, ["features", "build", "--data", str(market), "--out", str(out), "--profile", "smoke",
                  "--workers", workers, "-q"]
        )
        assert result.exit_code == 0, result.output
        (path,) = out.glob("features-*.arrow")
        caches[workers] = open_cache(path)
    assert caches["1"].path.name == caches["2"].path.name  # the same cache key
    assert_same_cache(caches["1"], caches["2"])


def test_a_group_the_whole_build_accepts_but_a_task_refuses_falls_back_to_one_process(
    market: Path, tmp_path: Path
) -> None:
    # The last session keeps only its trades file: alone, that group has no book file (refused),
    # while the whole build just has no rows for that session.
    folder = tmp_path / "m"
    folder.mkdir()
    files = expand_paths([market])
    assert ".mbp-10." in files[-2].name and ".trades." in files[-1].name
    for f in files[:-2] + files[-1:]:
        (folder / f.name).symlink_to(f)
    said: list[str] = []
    whole, parts = _builds(folder, load_config(profile="smoke"), tmp_path, 1, said)
    assert_same_cache(whole, parts)
    assert len(said) == 1 and "building in one process" in said[0] and "no book file" in said[0]


def test_batches_keep_every_job_once_in_order_in_near_equal_runs() -> None:
    jobs = [(i,) for i in range(10)]
    runs = batches(jobs, 4)
    assert [len(r) for r in runs] == [3, 3, 2, 2] and [j for r in runs for j in r] == jobs
    assert [len(r) for r in batches(jobs, 20)] == [1] * 10  # never an empty task
    assert batches(jobs[:1], 8) == [[(0,)]]
