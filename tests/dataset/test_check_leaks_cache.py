"""``foxhunt check leaks --cache FILE``: the guard on the files a cache was built from, with the cache's
own settings (a short file's data.bar_seconds given once, on features build, not again here)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from foxhunt.cli import app

runner = CliRunner()


@pytest.mark.slow  # the leak guard's cuts over the tiny market: tens of seconds on a loaded host
def test_check_leaks_reads_a_cache_s_sources_and_settings(tiny_cache) -> None:
    got = runner.invoke(app, ["check", "leaks", "--cache", str(tiny_cache.path), "--json"])
    assert got.exit_code == 0, got.output
    # The cache's rows: its own settings (the tiny market's), not the default profile's.
    assert f'"rows": {tiny_cache.meta["rows"]}' in got.output


def test_check_leaks_takes_one_source(tiny_cache, tmp_path) -> None:
    got = runner.invoke(app, ["check", "leaks", "--cache", str(tiny_cache.path), "--data", str(tmp_path)])
    assert got.exit_code == 2 and "exactly one of --data or --cache" in got.output
    got = runner.invoke(app, ["check", "leaks"])
    assert got.exit_code == 2 and "exactly one of --data or --cache" in got.output
