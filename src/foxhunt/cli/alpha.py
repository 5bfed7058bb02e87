"""``foxhunt alpha``: does the data carry signal before any RL?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from foxhunt.cli import present
from foxhunt.cli.common import (
    config_of,
    data_paths,
    one_source,
    reporter,
    set_keys,
    with_row_unit,
    write_resolved,
)
from foxhunt.cli.options import (
    CacheOpt,
    ConfigOpt,
    MaybeDataOpt,
    OverwriteOpt,
    ProfileOpt,
    QuietOpt,
    RowUnitOpt,
    SetOpt,
    VerboseOpt,
)


def alpha_cmd(
    ctx: typer.Context,
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Folder for alpha.json, alpha.md and the plots.")
    ],
    data: MaybeDataOpt = None,
    cache_path: CacheOpt = None,
    row_unit: RowUnitOpt = None,
    horizons: Annotated[
        str | None,
        typer.Option(metavar="N,N,...", help="Comma-separated horizons in rows, e.g. 5,20,50,200,500."),
    ] = None,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    overwrite: OverwriteOpt = False,
) -> None:
    """Does the data carry signal before any RL? The leak guard runs first on the data; then an
    MLP and LightGBM predict the direction of the move over each horizon on purged walk-forward
    folds, with block-bootstrap confidence intervals, a horizon-decay curve, regime tables and
    feature-group importance. Writes alpha.json, alpha.md and PNG plots; prints the verdict."""
    from foxhunt.alpha.check import check_horizons
    from foxhunt.alpha.report import verdict_line, write_report
    from foxhunt.features.cache import config_from_cache, get_or_build, load_cache
    from foxhunt.outputs import claim_folder
    from foxhunt.stages import Stopped, alpha_check, leak_guard_prepared
    from foxhunt.validation.leaks import cache_sources

    progress = reporter(quiet, verbose)
    overrides = with_row_unit(set_, row_unit) + ([f"alpha.horizons=[{horizons}]"] if horizons else [])
    cfg = config_of(profile, config, overrides)
    one_source(data, cache_path, "alpha")
    if cfg.alpha.horizons is not None:  # before the cache is built: a bad horizon writes nothing
        check_horizons(cfg.alpha.horizons, "--horizons" if horizons else "alpha.horizons")
    claim_folder(out_dir, ("alpha.json", "alpha.config.json"), overwrite=overwrite)
    if cache_path is not None:
        cfg = config_from_cache(cache_path, cfg, set_keys(overrides))
        cache = load_cache(cache_path, cfg)
        files = cache_sources(cache, cache_path)
    else:
        files = data_paths(data or [], ctx)
    report, prepared = leak_guard_prepared(
        files, cfg, "alpha check", Stopped.ALPHA, progress, present.line, load_progress=progress
    )
    if cache_path is None:
        cache = get_or_build(files, cfg, out_dir / "cache", progress=progress, prepared=prepared)
    del prepared
    result = alpha_check(cache, cfg, report, progress)
    write_report(result, out_dir)
    write_resolved(cfg, out_dir / "alpha.config.json")
    present.text(verdict_line(result))
