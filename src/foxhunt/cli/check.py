"""``foxhunt check``: the look-ahead leak guard on data or on a cache's source files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from foxhunt.cli import present
from foxhunt.cli.common import config_of, data_paths, one_source, reporter, set_keys, step, with_row_unit
from foxhunt.cli.options import (
    ConfigOpt,
    JsonOpt,
    MaybeDataOpt,
    ProfileOpt,
    QuietOpt,
    RowUnitOpt,
    SetOpt,
    VerboseOpt,
)


def check_leaks_cmd(
    ctx: typer.Context,
    data: MaybeDataOpt = None,
    cache_path: Annotated[
        Path | None,
        typer.Option(
            "--cache",
            metavar="FILE",
            help="A feature cache built before: the guard runs on its source files with its settings.",
        ),
    ] = None,
    row_unit: RowUnitOpt = None,
    as_json: JsonOpt = False,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """The leak guard: change every event after a cut (prices, sizes, and times and counts: events
    deleted, inserted and re-timed), recompute the features, and require every row at or before the
    cut to be identical; refit each fold's normaliser with the rows outside its training replaced
    and require it unchanged; require each fold's purge to cover the label span and the embargo.
    Exits 3 naming the leaking columns or settings."""
    from foxhunt.dataset.leaks import check_files

    progress = reporter(quiet, verbose)
    sets = with_row_unit(set_, row_unit)
    cfg = config_of(profile, config, sets)
    one_source(data, cache_path, "check leaks")
    if cache_path is not None:  # the files the cache was built from, with its settings
        from foxhunt.dataset.cache import config_from_cache
        from foxhunt.dataset.leaks import cache_sources
        from foxhunt.features.cache_file import open_cache

        cfg = config_from_cache(cache_path, cfg, set_keys(sets))
        files = cache_sources(open_cache(cache_path, verify=False), cache_path)
    else:
        files = data_paths(data or [], ctx)
    with step("checking for look-ahead leaks", progress):
        report, _ = check_files(files, cfg, progress)  # the rows the guard checks
    present.leak_report(report, as_json)
    report.raise_if_leaking(
        "check leaks", "a row may use only data at or before it, a fold's normaliser only its training rows"
    )
