"""The options the commands share, as typer annotations: one name, one help text each."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from foxhunt.data.schemas import RowUnit

ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile", metavar="NAME", help="Packaged profile: smoke (CPU), gpu, full, localdev, production."
    ),
]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", metavar="FILE", help="A TOML config file instead of a profile.")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set", metavar="KEY=VALUE", help="Override one value, e.g. --set data.bar_seconds=60 (repeatable)."
    ),
]
QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="Print only the result and errors (no progress).")
]
VerboseOpt = Annotated[
    bool, typer.Option("--verbose", "-v", help="Also print the long diagnostic lines (every statistic).")
]
OverwriteOpt = Annotated[
    bool,
    typer.Option("--overwrite", help="Replace the result already in --out (without it: refused)."),
]
TrackingOpt = Annotated[
    str | None,
    typer.Option(
        "--tracking-uri",
        metavar="URI",
        help="MLflow store for this run (default: $MLFLOW_TRACKING_URI, else mlflow.db in --out; "
        "none: off). See docs/tracking.md.",
    ),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        metavar="ADDR",
        help="Join a Ray cluster (auto or ray://host:port); default: an embedded local Ray "
        "(without ray installed: spawned processes). See docs/scale-out.md.",
    ),
]

DATA_HELP = "DBN files or folders: --data a.dbn.zst b.dbn.zst (or a shell glob), or repeated --data."
# ``--data PATH...``: click options take one value each, so the paths that follow the first one
# arrive as extra arguments; commands taking --data accept them and append them (see data_paths).
MANY_PATHS = {"allow_extra_args": True}

DataOpt = Annotated[list[Path], typer.Option("--data", metavar="PATH...", help=DATA_HELP)]
MaybeDataOpt = Annotated[list[Path] | None, typer.Option("--data", metavar="PATH...", help=DATA_HELP)]
# --data of the commands that write the embedded synthetic market when none is given.
SynthDataOpt = Annotated[
    list[Path] | None,
    typer.Option("--data", metavar="PATH...", help=DATA_HELP + " Default: the embedded synthetic market."),
]
CacheOpt = Annotated[
    Path | None, typer.Option("--cache", metavar="FILE", help="A feature cache built before.")
]
RowUnitOpt = Annotated[RowUnit | None, typer.Option("--row-unit", help="bar or snapshot (default: config).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")]
