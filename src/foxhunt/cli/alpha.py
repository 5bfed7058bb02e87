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
    MLP, LightGBM and a logistic regression on the screened columns predict the direction of the
    move over each horizon on purged walk-forward folds, with block-bootstrap confidence intervals,
    a horizon-decay curve, regime tables and feature-group importance. Writes alpha.json, alpha.md
    and PNG plots; prints the verdict."""
    from foxhunt import pipeline
    from foxhunt.alpha.check import check_horizons
    from foxhunt.alpha.report import verdict_line, write_report
    from foxhunt.dataset.cache import config_from_cache, load_cache
    from foxhunt.outputs import claim_folder

    progress = reporter(quiet, verbose)
    overrides = with_row_unit(set_, row_unit) + ([f"alpha.horizons=[{horizons}]"] if horizons else [])
    cfg = config_of(profile, config, overrides)
    one_source(data, cache_path, "alpha")
    if cfg.alpha.horizons is not None:  # before the cache is built: a bad horizon writes nothing
        check_horizons(cfg.alpha.horizons, "--horizons" if horizons else "alpha.horizons")
    claim_folder(out_dir, ("alpha.json", "alpha.config.json"), overwrite=overwrite)
    cache = None
    if cache_path is not None:
        cfg = config_from_cache(cache_path, cfg, set_keys(overrides))
        cache = load_cache(cache_path, cfg)
    files = None if cache is not None else data_paths(data or [], ctx)
    result = pipeline.alpha(
        cfg, out_dir, files, cache=cache, cache_path=cache_path, progress=progress, say=present.line
    )
    write_report(result, out_dir)
    write_resolved(cfg, out_dir / "alpha.config.json")
    present.text(verdict_line(result))
