"""``foxhunt runs``: the tracked runs (MLflow), listed and compared."""

from __future__ import annotations

from typing import Annotated

import typer

from foxhunt.cli import present
from foxhunt.cli.common import reporter
from foxhunt.cli.options import JsonOpt, QuietOpt, TrackingOpt, VerboseOpt
from foxhunt.errors import FoxhuntError


def runs_compare(
    refs: Annotated[
        list[str],
        typer.Argument(metavar="RUN", help="Run folders of tracked runs (tracking.json) or MLflow run ids."),
    ],
    tracking_uri: TrackingOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Tracked runs side by side: final results (per fold and totals) and only the config keys whose
    values differ between them."""
    from foxhunt.tracking.compare import compare, load_runs

    reporter(quiet, verbose)
    result = compare(load_runs(refs, tracking_uri))
    if as_json:
        present.as_json(result.to_dict())
    else:
        present.runs_compared(result)


def runs_list(
    tracking_uri: TrackingOpt = None,
    experiment: Annotated[
        str | None, typer.Option(metavar="NAME", help="MLflow experiment (default: foxhunt).")
    ] = None,
    limit: Annotated[int, typer.Option(metavar="N", help="Newest N runs.")] = 20,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """The newest tracked runs: id, name, command, status, total net PnL."""
    from foxhunt.tracking.compare import list_runs

    reporter(quiet, verbose)
    if limit < 1:
        raise FoxhuntError("--limit", f"{limit} runs", "pass --limit 1 or more")
    uri, runs = list_runs(tracking_uri, experiment, limit)
    present.runs_listed(uri, runs)
