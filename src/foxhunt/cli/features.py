"""``foxhunt features``: build the feature cache, inspect one."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from foxhunt.cli import present
from foxhunt.cli.common import config_of, data_paths, reporter, step, with_row_unit, write_resolved
from foxhunt.cli.options import (
    ConfigOpt,
    DataOpt,
    JsonOpt,
    ProfileOpt,
    QuietOpt,
    RayAddressOpt,
    RowUnitOpt,
    SetOpt,
    VerboseOpt,
)
from foxhunt.errors import FoxhuntError


def features_build(
    ctx: typer.Context,
    data: DataOpt,
    out_dir: Annotated[Path, typer.Option("--out", metavar="DIR", help="Folder for the cache file.")],
    row_unit: RowUnitOpt = None,
    regenerate: Annotated[
        bool, typer.Option(help="Rebuild a stale or missing cache (--no-regenerate: fail and say why).")
    ] = True,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    workers: Annotated[
        int, typer.Option(metavar="N", help="Session files built at once (Ray tasks); 1: one process.")
    ] = 1,
    ray_address: RayAddressOpt = None,
) -> None:
    """Ingest DBN files and write the feature cache: causal features of every family, labels,
    and metadata (schema hash, layout, sources), one Arrow IPC file per inputs and config. With
    --workers N, session by session in parallel tasks, merged into the same file bit for bit
    (docs/scale-out.md)."""
    from foxhunt import pipeline
    from foxhunt.features.stats import column_stats
    from foxhunt.outputs import claim_folder

    progress = reporter(quiet, verbose)
    cfg = config_of(profile, config, with_row_unit(set_, row_unit))
    # No --overwrite: a cache file's name is the key of its inputs and config, so building it again
    # would write the same thing (it is reused); the folder is checked and cleaned of stale temps.
    claim_folder(out_dir, ())
    if workers < 1:
        raise FoxhuntError("--workers", f"{workers} workers", "pass --workers 1 or more")
    files = data_paths(data, ctx)
    cache = pipeline.features(
        files, cfg, out_dir, regenerate=regenerate, progress=progress, workers=workers, address=ray_address
    )
    write_resolved(cfg, cache.path.with_suffix(".config.json"))
    present.cache_summary(cache, column_stats(cache.features(), cache.columns))


def features_info(
    cache_path: Annotated[Path, typer.Argument(metavar="FILE", help="A feature cache file (.arrow).")],
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Print a cache's metadata and per-column statistics (mean, std, min, max, coverage =
    share of non-zero values)."""
    from foxhunt.features.cache_file import open_cache
    from foxhunt.features.stats import column_stats

    with step("reading the cache", reporter(quiet, verbose)):
        cache = open_cache(cache_path)
    meta, stats = cache.meta, column_stats(cache.features(), cache.columns)
    if not as_json:
        present.cache_info(cache, stats)
        return
    keys = (
        "rows",
        "row_unit",
        "data_source",
        "schema_hash",
        "format_version",
        "created_at",
        "sources",
        "layout",
    )
    present.as_json({key: meta[key] for key in keys} | {"columns": stats})
