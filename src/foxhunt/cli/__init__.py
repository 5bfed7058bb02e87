"""The ``foxhunt`` command line, grouped by stage of the data flow.

Every command that reads configuration takes ``--profile NAME`` or ``--config FILE.toml`` and any
number of ``--set section.key=value``. Errors the user can fix (bad input files, bad config) are
printed as one line naming the file or key, the problem and the fix, and exit with status 2;
nothing is written in that case.

This module holds the app and registers every command (one table, in the order ``--help`` lists
them), each behind :func:`foxhunt.cli.door.fails_cleanly`. A command lives in the module of its
group (``data.py``, ``features.py``, ...): it parses its options, calls the stage, and hands the
result to :mod:`foxhunt.cli.present`. Adding one: write the function there, add its row below.

Start-up time: `foxhunt --help` must not wait for torch, LightGBM, numba or pandas (seconds), so
the cli modules import only typer, rich and light foxhunt modules at the top; every command imports
what it needs in its body. tests/test_cli.py checks this in a fresh interpreter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from foxhunt import __version__
from foxhunt.cli import alpha, backtest, check, config, data, features, runs, serve, study
from foxhunt.cli.door import fails_cleanly, set_debug
from foxhunt.cli.options import MANY_PATHS
from foxhunt.cli.present import out
from foxhunt.cli.readable import App

app = App(
    help="foxhunt: deep-RL research for index futures from limit-order-book data (Databento DBN).",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)
data_app = App(
    help="Market data: inspect DBN files, rebuild books from MBO, generate the synthetic market, build bars.",
    no_args_is_help=True,
)
config_app = App(help="Show the resolved configuration and the profiles.", no_args_is_help=True)
features_app = App(
    help="Features: build the cached feature stack (Arrow IPC) and inspect a cache.", no_args_is_help=True
)
check_app = App(help="Checks on data and features: the look-ahead leak guard.", no_args_is_help=True)
runs_app = App(
    help="Tracked runs (MLflow): list them, compare their results and configs.", no_args_is_help=True
)
app.add_typer(data_app, name="data")
app.add_typer(features_app, name="features")
app.add_typer(check_app, name="check")
app.add_typer(config_app, name="config")
app.add_typer(runs_app, name="runs")


@app.callback(invoke_without_command=True)
def main(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help="Show the traceback of an internal error (without it: one line, exit 1)."
        ),
    ] = False,
) -> None:
    """foxhunt turns Databento order-book data into causal features, checks for signal, and trains
    a distributional RL trading agent judged by purged walk-forward backtests."""
    set_debug(debug)
    if version:
        out.print(__version__)
        raise typer.Exit(0)


# (group, name, function, context settings): MANY_PATHS where the command takes --data PATH...
_COMMANDS: tuple[tuple[App, str, Callable[..., Any], dict[str, Any] | None], ...] = (
    (app, "alpha", alpha.alpha_cmd, MANY_PATHS),
    (app, "backtest", backtest.backtest_cmd, MANY_PATHS),
    (app, "serve", serve.serve_cmd, MANY_PATHS),
    (app, "export", serve.export_cmd, None),
    (app, "train", study.train_cmd, MANY_PATHS),
    (app, "run", study.run_cmd, MANY_PATHS),
    (app, "edge", backtest.edge_cmd, MANY_PATHS),
    (app, "seeds", study.seeds_cmd, MANY_PATHS),
    (app, "tune", study.tune_cmd, MANY_PATHS),
    (config_app, "show", config.config_show, None),
    (config_app, "profiles", config.config_profiles, None),
    (data_app, "inspect", data.data_inspect, None),
    (data_app, "rebuild-book", data.data_rebuild_book, None),
    (data_app, "synth", data.data_synth, None),
    (data_app, "bars", data.data_bars, MANY_PATHS),
    (features_app, "build", features.features_build, MANY_PATHS),
    (features_app, "info", features.features_info, None),
    (check_app, "leaks", check.check_leaks_cmd, MANY_PATHS),
    (runs_app, "compare", runs.runs_compare, None),
    (runs_app, "list", runs.runs_list, None),
)
for _group, _name, _fn, _settings in _COMMANDS:
    _group.command(_name, context_settings=_settings)(fails_cleanly(_fn))
