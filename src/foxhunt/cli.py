"""The ``foxhunt`` command line, grouped by stage of the data flow.

Every command that reads configuration takes ``--profile NAME`` or ``--config FILE.toml`` and any
number of ``--set section.key=value``. Errors the user can fix (bad input files, bad config) are
printed as one line naming the file or key, the problem and the fix, and exit with status 2;
nothing is written in that case.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from foxhunt import __version__
from foxhunt.console import Reporter, Verbosity, idle_note
from foxhunt.data.schemas import RowUnit, Schema
from foxhunt.errors import FoxhuntError, FrontDoor, OutOfMemoryError, front_door
from foxhunt.outputs import Keep

if TYPE_CHECKING:
    from foxhunt.config.models import FoxhuntConfig
    from foxhunt.pipeline import JobSummary, SeedsSummary, TrainSummary, TuneSummary

# Start-up time: `foxhunt --help` must not wait for torch, LightGBM, numba or pandas (seconds), so
# this module imports only typer, rich and light foxhunt modules at the top; every command imports
# what it needs (the config too: its models pull in the stages' parameter classes) in its body.
# tests/test_cli.py checks this in a fresh interpreter.

# Python names of types read badly in help (typer writes `<list[Path]>`, `<bool>` for a flag): the
# value an option takes is named the way a person types it.
_TYPE_WORDS = {"path": "PATH", "str": "TEXT", "int": "N", "float": "NUMBER"}


def _readable_type(label: str) -> str:
    """``<list[Path]>`` -> ``PATH...``, ``<int>`` -> ``N``, ``<bar|snapshot>`` -> ``bar|snapshot``."""
    inner = label.strip("<>")
    many = inner.startswith("list[")
    inner = inner.removeprefix("list[").removesuffix("]")
    word = _TYPE_WORDS.get(inner.lower(), inner if "|" in inner else inner.upper())
    return word + ("..." if many else "")


def _readable(params: list[Any], ctx: Any) -> list[Any]:
    from typer.core import TyperArgument, TyperOption

    for p in params:
        if isinstance(p, TyperOption) and p.metavar is None:
            # A flag takes no value: nothing beside it; another option its readable type.
            # display_type is newer typer's (0.2x); older releases only have the click type's name.
            shown = p.display_type(ctx) if hasattr(p, "display_type") else getattr(p.type, "name", "")
            p.metavar = "" if p.is_flag else _readable_type(shown)
        elif isinstance(p, TyperArgument) and p.metavar is not None:
            # typer shows an argument's Python type beside its metavar: the metavar says it all.
            p.display_type_rich = lambda ctx: None
    return params


class _Command(typer.core.TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _readable(super().get_params(ctx), ctx)


class _Group(typer.core.TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _readable(super().get_params(ctx), ctx)


class _App(typer.Typer):
    """A typer app whose groups and commands show readable value names in their help."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cls=_Group, **kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", _Command)
        return super().command(*args, **kwargs)


app = _App(
    help="foxhunt: deep-RL research for index futures from limit-order-book data (Databento DBN).",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)
data_app = _App(
    help="Market data: inspect DBN files, rebuild books from MBO, generate the synthetic market, build bars.",
    no_args_is_help=True,
)
config_app = _App(help="Show the resolved configuration and the profiles.", no_args_is_help=True)
features_app = _App(
    help="Features: build the cached feature stack (Arrow IPC) and inspect a cache.", no_args_is_help=True
)
check_app = _App(help="Checks on data and features: the look-ahead leak guard.", no_args_is_help=True)
runs_app = _App(
    help="Tracked runs (MLflow): list them, compare their results and configs.", no_args_is_help=True
)
app.add_typer(data_app, name="data")
app.add_typer(features_app, name="features")
app.add_typer(check_app, name="check")
app.add_typer(config_app, name="config")
app.add_typer(runs_app, name="runs")

console = Console(stderr=True)
# Wide when piped (CI logs, files): rich would otherwise squeeze tables into 80 columns.
# Result lines carry paths and names from the user and the data: printed as text, never as markup.
out = Console(width=None if sys.stdout.isatty() else 160, markup=False)

ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile", metavar="NAME", help="Packaged profile: smoke (CPU), gpu, localdev, production."
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

F = TypeVar("F", bound=Callable[..., Any])


# ``foxhunt --debug``: a programming error shows its traceback (set by the root callback per call).
_debug = False
# typer's own exits and usage errors pass through _fails_cleanly: click's exception base, found
# through typer (typer 0.2x vendors click; older releases use click itself).
_CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
_TYPER_EXITS = (typer.Exit, typer.Abort, _CLICK_ERROR)


def _error_line(label: str, text: str) -> None:
    """One line on stderr; ``text`` (paths, values from data) is escaped, never read as Rich markup."""
    line = " ".join(text.splitlines())
    console.print(f"[bold red]{label}[/]: {escape(line)}", highlight=False, soft_wrap=True)


def _fails_cleanly(fn: F) -> F:
    """Every failure a user can cause ends in one line on stderr and exit status 2: a
    :class:`FoxhuntError`, an output that cannot be written (``OSError``), a request larger than
    the memory (``MemoryError``). Anything else is a programming error: one line and exit 1, or
    its traceback under ``foxhunt --debug``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with front_door(FrontDoor.CLI):  # fixes worded as options (--set ...), not as Python
            return _run_cleanly(fn, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _run_cleanly(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """:func:`_fails_cleanly`'s body: ``fn(*args, **kwargs)``, each failure one line on stderr."""
    try:
        return fn(*args, **kwargs)
    except FoxhuntError as exc:
        _error_line("error", exc.render(FrontDoor.CLI))
        raise typer.Exit(exc.exit_code) from None
    except MemoryError as exc:
        err = OutOfMemoryError(
            "memory",
            f"the request needs more memory than this process may use ({type(exc).__name__}: {exc})",
            "ask for less (fewer --events-per-session or sessions, less data, a smaller replay or "
            "batch) or free memory",
        )
        _error_line("error", str(err))
        raise typer.Exit(err.exit_code) from None
    except OSError as exc:  # an output that cannot be written (read-only folder, full disk, ...)
        where = exc.filename or "output"
        _error_line("error", f"{where}: {exc.strerror or exc} (fix: choose a writable --out path)")
        raise typer.Exit(2) from None
    except _TYPER_EXITS:
        raise
    except Exception as exc:
        if _debug:
            raise
        _error_line(
            "internal error",
            f"{type(exc).__name__}: {exc} (a bug in foxhunt, not in the input: "
            "rerun with --debug for the traceback and report it)",
        )
        raise typer.Exit(1) from None


def _reporter(quiet: bool, verbose: bool = False) -> Reporter:
    """The progress display of a command: bars on a terminal, timestamped lines otherwise."""
    if quiet and verbose:
        raise FoxhuntError("--quiet/--verbose", "both given", "pass at most one of them")
    level = Verbosity.QUIET if quiet else Verbosity.VERBOSE if verbose else Verbosity.NORMAL
    return Reporter.for_stderr(level, console)


@contextmanager
def step(description: str, progress: Reporter | bool) -> Iterator[None]:
    """A step without a count (a spinner with elapsed time, or a start and an end line).
    ``progress`` may be a command's ``--quiet`` flag instead of its reporter."""
    rep = _reporter(progress) if isinstance(progress, bool) else progress
    with rep.task(description):
        yield


def _config(profile: str | None, config: Path | None, sets: list[str] | None) -> FoxhuntConfig:
    from foxhunt.config.loader import load_config

    return load_config(profile=profile, config_file=config, overrides=sets or ())


def _training_config(
    profile: str | None, config: Path | None, sets: list[str], progress: Reporter
) -> tuple[FoxhuntConfig, str | None]:
    """The config of `run`, `seeds` and `tune`, and the profile named for it (None: ``--config``, or
    the default profile, which the caller records as "default").

    Given neither ``--profile`` nor ``--config``, a machine with a CUDA device gets the ``gpu``
    profile (announced in one line) instead of smoke's CPU sizes, unless the ``--set`` keys put
    the run on the CPU (``run.device=cpu``)."""
    import torch

    from foxhunt.config.loader import DEFAULT_PROFILE, default_profile
    from foxhunt.config.models import Device

    if profile is not None or config is not None:
        return _config(profile, config, sets), profile
    chosen = default_profile(torch.cuda.is_available())
    cfg = _config(chosen, None, sets)
    if chosen == DEFAULT_PROFILE or cfg.run.device is Device.CPU:
        return (cfg if chosen == DEFAULT_PROFILE else _config(DEFAULT_PROFILE, None, sets)), None
    progress.say(
        f"no --profile or --config: {torch.cuda.get_device_name()} found, so the {chosen} profile "
        f"({cfg.train.members} members of {cfg.train.envs:,} episodes, batch {cfg.agent.learn.batch:,}, "
        f"trained at once; --profile {DEFAULT_PROFILE} for one agent)"
    )
    return cfg, chosen


def write_resolved(cfg: FoxhuntConfig, path: Path) -> Path:
    """:func:`foxhunt.config.loader.write_resolved`, imported when a command runs (start-up time)."""
    from foxhunt.config import loader

    return loader.write_resolved(cfg, path)


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
    global _debug
    _debug = debug
    if version:
        out.print(__version__)
        raise typer.Exit(0)


# --- config -----------------------------------------------------------------------------------


@config_app.command("show")
@_fails_cleanly
def config_show(
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    as_toml: Annotated[
        bool, typer.Option("--toml", help="Print TOML that --config FILE reads back (the same hash).")
    ] = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Print the resolved configuration and its hash (a table, --json, or --toml to save and edit:
    `foxhunt config show --profile smoke --toml > my.toml`, then `--config my.toml`)."""
    from foxhunt.config.loader import config_hash
    from foxhunt.config.toml_text import config_toml

    _reporter(quiet, verbose)  # nothing to show while it runs; the flags are checked as everywhere
    if as_json and as_toml:
        raise FoxhuntError("--json/--toml", "both given", "pass at most one of them")
    cfg = _config(profile, config, set_)
    digest = config_hash(cfg)
    if as_toml:
        # Plain write: rich would wrap long lines and read [section] headers as markup.
        sys.stdout.write(config_toml(cfg, f"foxhunt config {digest}: use it with --config FILE"))
        return
    body = {"config_hash": digest, "config": cfg.model_dump(mode="json")}
    if as_json:
        out.print_json(json.dumps(body))
        return
    table = Table(title=f"foxhunt config {digest}", title_justify="left")
    table.add_column("setting (--set KEY=VALUE)", no_wrap=True, style="bold")
    table.add_column("value", overflow="fold")
    for key, value in _flat_settings(body["config"]):
        table.add_row(key, value, end_section=False)
    out.print(table)


def _flat_settings(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """``[("env.episode_rows", "512"), ...]``: every leaf of a dumped config under its dotted key
    (the key ``--set`` takes); a list as its JSON."""
    rows = []
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            rows += _flat_settings(value, f"{prefix}{key}.")
        else:
            rows.append((f"{prefix}{key}", value if isinstance(value, str) else json.dumps(value)))
    return rows


@config_app.command("profiles")
@_fails_cleanly
def config_profiles(quiet: QuietOpt = False, verbose: VerboseOpt = False) -> None:
    """List the packaged profiles."""
    from foxhunt.config.loader import available_profiles

    _reporter(quiet, verbose)
    for name in available_profiles():
        out.print(name)


# --- data -------------------------------------------------------------------------------------


@data_app.command("inspect")
@_fails_cleanly
def data_inspect(
    paths: Annotated[list[Path], typer.Argument(metavar="PATH", help="DBN files or directories of them.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Per file: schema, dataset, records, instruments, time span; for book data the share of
    crossed/locked states and the median spread in ticks."""
    from foxhunt.data.inspect import inspect_files

    progress = _reporter(quiet, verbose)
    cfg = _config(profile, config, set_)
    with step("inspecting", progress):
        reports = inspect_files(paths, cfg.data, cfg.instrument)
    if as_json:
        out.print_json(json.dumps({"files": reports}))
        return
    # One two-column table per file (field, value): readable in an 80-column terminal, where one
    # row per file with ten columns needed ~160.
    for r in reports:
        table = Table(title=Path(r["path"]).name, title_justify="left", show_header=False)
        table.add_column("field", no_wrap=True, style="bold")
        table.add_column("value", overflow="fold")
        fields = {
            "schema": r["schema"],
            "dataset": r["dataset"],
            "records": f"{r['records']:,}",
            "instruments": ", ".join(f"{i['symbol']} ({i['instrument_id']})" for i in r["instruments"]),
            "contract": (
                f"tick {r['instrument']['tick_size']:g} x point value {r['instrument']['point_value']:g} "
                f"{r['instrument']['currency']} ({r['instrument']['source']})"
                if r["instrument"]
                else "unknown (--json says why)"
            ),
            "start (UTC)": r["start"],
            "end (UTC)": r["end"],
            "crossed": "n/a" if (x := r["crossed_share"]) is None else f"{x:.2%} of book states",
            "median spread": "n/a" if (t := r["median_spread_ticks"]) is None else f"{t:g} ticks",
        }
        for name, value in fields.items():
            table.add_row(name, value)
        out.print(table)


@data_app.command("rebuild-book")
@_fails_cleanly
def data_rebuild_book(
    source: Annotated[Path, typer.Argument(metavar="FILE", help="An MBO file (.mbo.dbn or .mbo.dbn.zst).")],
    out_path: Annotated[
        Path, typer.Option("--out", metavar="FILE", help="Output MBP-10 DBN file (.dbn.zst).")
    ],
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    overwrite: OverwriteOpt = False,
) -> None:
    """Rebuild the 10-level book from MBO events (numba book builder) and write it as a genuine
    DBN MBP-10 file that Databento's DBNStore and `foxhunt data inspect` read back."""
    from foxhunt.data.book import rebuild_book
    from foxhunt.data.dbn_read import read_dbn
    from foxhunt.data.dbn_write import write_book
    from foxhunt.outputs import claim_file

    progress = _reporter(quiet, verbose)
    cfg = _config(profile, config, set_)
    claim_file(out_path, overwrite=overwrite)
    f, mbo = read_dbn(source, expect=Schema.MBO)
    with step("rebuilding book", progress):
        result = rebuild_book(mbo, levels=Schema.MBP_10.levels)  # type: ignore[arg-type]
        write_book(out_path, result.book, symbols=f.instrument_symbols, dataset=f.dataset)
    stem = out_path.name.removesuffix(".zst").removesuffix(".dbn")
    write_resolved(cfg, out_path.with_name(f"{stem}.config.json"))
    out.print(
        f"{result.n_events:,} MBO events -> {result.n_states:,} book states "
        f"({result.n_crossed:,} crossed/locked, {result.live_orders:,} orders resting at the end) "
        f"-> {out_path}"
    )


@data_app.command("synth")
@_fails_cleanly
def data_synth(
    out_dir: Annotated[Path, typer.Option("--out", metavar="DIR", help="Folder for the DBN files.")],
    seed: Annotated[int | None, typer.Option(help="Random seed (default: the config's).")] = None,
    sessions: Annotated[int | None, typer.Option(help="Number of trading sessions.")] = None,
    alpha: Annotated[float | None, typer.Option(help="Planted alpha strength (0 = no signal).")] = None,
    events_per_session: Annotated[int | None, typer.Option(help="Book events per session.")] = None,
    schemas: Annotated[
        str,
        typer.Option(
            metavar="SCHEMA,...", help="Comma-separated schemas to write: mbp-10, trades, mbo, ohlcv-1m."
        ),
    ] = "mbp-10,trades",
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    overwrite: OverwriteOpt = False,
) -> None:
    """Generate the synthetic ES market as genuine DBN files (deterministic for a seed)."""
    from foxhunt.data.synth import MANIFEST_NAME, write_synthetic
    from foxhunt.outputs import claim_folder

    progress = _reporter(quiet, verbose)
    overrides = list(set_ or [])
    for key, value in (
        ("seed", seed),
        ("sessions", sessions),
        ("alpha", alpha),
        ("events_per_session", events_per_session),
    ):
        if value is not None:
            overrides.append(f"synth.{key}={value}")
    cfg = _config(profile, config, overrides)
    try:
        wanted = tuple(Schema(s.strip()) for s in schemas.split(",") if s.strip())
    except ValueError as exc:
        raise FoxhuntError("--schemas", str(exc), "use mbp-10, trades, mbo, ohlcv-1m") from None
    claim_folder(out_dir, (MANIFEST_NAME, "synth.config.json"), overwrite=overwrite)
    with step(f"simulating {cfg.synth.sessions} session(s)", progress):
        files = write_synthetic(cfg.synth, out_dir, schemas=wanted)
    write_resolved(cfg, out_dir / "synth.config.json")
    for p in files:
        out.print(str(p))


DATA_HELP = "DBN files or folders: --data a.dbn.zst b.dbn.zst (or a shell glob), or repeated --data."
# ``--data PATH...``: click options take one value each, so the paths that follow the first one
# arrive as extra arguments; commands taking --data accept them and append them (see _data_paths).
MANY_PATHS = {"allow_extra_args": True}


def _cache_from(
    ctx: typer.Context,
    data: list[Path] | None,
    cache_path: Path | None,
    cfg: FoxhuntConfig,
    out_dir: Path,
    progress: Reporter,
    command: str,
    asked: list[str] | None,
) -> tuple[Any, FoxhuntConfig]:
    """The feature cache of ``--cache FILE`` or built (or reused) from ``--data PATH...``, and the
    config to use with it: with ``--cache``, the cache's own row unit, data source, features and
    labels (an explicit ``--set`` that contradicts them is refused) unless ``asked`` is None (a
    checkpoint's config, which the cache must match as it is)."""
    from foxhunt.dataset.build import get_or_build
    from foxhunt.dataset.cache import config_from_cache, load_cache

    _one_source(data, cache_path, command)
    if cache_path is not None:
        with step("opening the feature cache", progress):
            if asked is not None:
                cfg = config_from_cache(cache_path, cfg, asked)
            return load_cache(cache_path, cfg), cfg
    files = _data_paths(data or [], ctx)
    with _bar_fix(cfg):
        return get_or_build(files, cfg, out_dir / "cache", progress=progress), cfg


@contextmanager
def _bar_fix(cfg: FoxhuntConfig) -> Iterator[None]:
    """Rows too few for the folds, refused with a concrete setting: the bar length that fits
    (:func:`foxhunt.validation.folds.with_bar_fix`), to be given once, to ``features build``."""
    from foxhunt.validation.folds import TooFewRowsError, with_bar_fix

    try:
        yield
    except TooFewRowsError as exc:
        raise with_bar_fix(exc, cfg.data, cfg.train) from None


def _set_keys(overrides: list[str]) -> list[str]:
    """The ``section.key`` names of ``--set section.key=value`` assignments."""
    return [a.partition("=")[0].strip() for a in overrides]


def _remembered(
    files: list[Path], cfg: FoxhuntConfig, out_dir: Path, sets: list[str] | None
) -> FoxhuntConfig:
    """``cfg`` with the settings of a cache in ``out_dir/cache`` built before from the same files
    (``foxhunt features build --data FILES --out OUT/cache --set ...``), said in one line: a setting a
    short file needed (``data.bar_seconds``) is given once, not on every command."""
    from foxhunt.dataset.remember import remembered_config

    cfg, kept = remembered_config(files, cfg, out_dir / "cache", _set_keys(list(sets or [])))
    if kept:
        _line(
            f"settings of the feature cache in {out_dir / 'cache'} (built from these files): "
            + ", ".join(kept)
            + " (--set a key to change it)"
        )
    return cfg


def _with_row_unit(sets: list[str] | None, row_unit: RowUnit | None) -> list[str]:
    """The ``--set`` assignments, then ``--row-unit`` as ``data.row_unit=...`` when given: the option
    is a shorthand for that key, and as the last assignment it wins over a ``--set`` of it."""
    return list(sets or []) + ([f"data.row_unit={row_unit.value}"] if row_unit else [])


def _one_source(
    data: list[Path] | None, cache_path: Path | None, command: str, *, required: bool = True
) -> None:
    """Refuse ``--data`` together with ``--cache`` and, when ``required``, neither of them: the data
    would be read twice or from two places."""
    if (data is not None and cache_path is not None) or (required and data is None and cache_path is None):
        rule = "exactly" if required else "at most"
        raise FoxhuntError(
            "--data/--cache", f"pass {rule} one of --data or --cache", f"see foxhunt {command} --help"
        )


def _line(text: str) -> None:
    """One result line on stdout, printed as it is (no markup, no highlighting, never wrapped)."""
    out.print(text, markup=False, highlight=False, soft_wrap=True)


def _data_paths(data: list[Path], ctx: typer.Context) -> list[Path]:
    extra = list(ctx.args)
    flags = [a for a in extra if a.startswith("-")]
    if flags:
        raise FoxhuntError(" ".join(flags), "unknown option", "see --help")
    return [*data, *(Path(a) for a in extra)]


@data_app.command("bars", context_settings=MANY_PATHS)
@_fails_cleanly
def data_bars(
    ctx: typer.Context,
    data: Annotated[list[Path], typer.Option("--data", metavar="PATH...", help=DATA_HELP)],
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Folder for bars.arrow (or snapshots.arrow).")
    ],
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    overwrite: OverwriteOpt = False,
) -> None:
    """Ingest DBN files, pick the front month, build bars (or snapshot rows), write them as Arrow
    IPC with the resolved config beside them, and print a summary."""
    from foxhunt.config.loader import config_hash
    from foxhunt.data.summary import build_and_write
    from foxhunt.outputs import claim_folder

    progress = _reporter(quiet, verbose)
    cfg = _config(profile, config, set_)
    paths = _data_paths(data, ctx)
    claim_folder(out_dir, ("bars.arrow", "snapshots.arrow", "bars.config.json"), overwrite=overwrite)
    with step("ingesting and building " + ("bars" if cfg.data.row_unit is RowUnit.BAR else "rows"), progress):
        summary = build_and_write(paths, cfg.data, out_dir, config_hash(cfg), progress)
    write_resolved(cfg, out_dir / "bars.config.json")
    table = Table(title=f"{summary['row_unit']} rows -> {summary['path']}", show_header=False)
    for key, value in summary.items():
        if key not in ("path", "masked"):
            table.add_row(key, str(value))
    out.print(table)
    if summary["masked"]:  # what the input lacked (top of book, no trades), on one line
        out.print(summary["masked"], soft_wrap=True)


# --- features ---------------------------------------------------------------------------------


@features_app.command("build", context_settings=MANY_PATHS)
@_fails_cleanly
def features_build(
    ctx: typer.Context,
    data: Annotated[list[Path], typer.Option("--data", metavar="PATH...", help=DATA_HELP)],
    out_dir: Annotated[Path, typer.Option("--out", metavar="DIR", help="Folder for the cache file.")],
    row_unit: Annotated[
        RowUnit | None, typer.Option("--row-unit", help="bar or snapshot (default: config).")
    ] = None,
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
    from foxhunt.dataset.build import get_or_build
    from foxhunt.outputs import claim_folder

    progress = _reporter(quiet, verbose)
    cfg = _config(profile, config, _with_row_unit(set_, row_unit))
    # No --overwrite: a cache file's name is the key of its inputs and config, so building it again
    # would write the same thing (it is reused); the folder is checked and cleaned of stale temps.
    claim_folder(out_dir, ())
    if workers < 1:
        raise FoxhuntError("--workers", f"{workers} workers", "pass --workers 1 or more")
    files = _data_paths(data, ctx)
    with _bar_fix(cfg):
        cache = get_or_build(
            files, cfg, out_dir, regenerate=regenerate, progress=progress, workers=workers,
            address=ray_address,
        )  # fmt: skip
    write_resolved(cfg, cache.path.with_suffix(".config.json"))
    _print_cache_summary(cache)


def _cache_stats(cache) -> list[dict[str, Any]]:
    import numpy as np

    x = cache.features()
    cov = (x != 0).mean(axis=0) if len(x) else np.zeros(x.shape[1])
    out = []
    for j, name in enumerate(cache.columns):
        col = x[:, j].astype(np.float64)
        out.append(
            {
                "name": name,
                "mean": float(col.mean()) if len(col) else 0.0,
                "std": float(col.std()) if len(col) else 0.0,
                "min": float(col.min()) if len(col) else 0.0,
                "max": float(col.max()) if len(col) else 0.0,
                "coverage": float(cov[j]),
            }
        )
    return out


def _print_cache_summary(cache) -> None:
    import numpy as np

    meta = cache.meta
    stats = _cache_stats(cache)
    dead = [s["name"] for s in stats if s["coverage"] == 0.0]
    out.print(
        f"{cache.path}: {meta['rows']:,} {meta['row_unit']} rows x {len(cache.columns)} features "
        f"({meta['data_source']}), schema {meta['schema_hash'][:12]}; "
        f"mean coverage {np.mean([s['coverage'] for s in stats]) if stats else 0:.1%}; "
        f"{len(dead)} columns never non-zero" + (f": {', '.join(dead[:12])}" if dead else "")
    )
    from foxhunt.features.stack import mask_note

    if note := mask_note(meta.get("masked", {})):  # what the input lacked (top of book, no trades)
        out.print(note, soft_wrap=True)


@features_app.command("info")
@_fails_cleanly
def features_info(
    cache_path: Annotated[Path, typer.Argument(metavar="FILE", help="A feature cache file (.arrow).")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Print a cache's metadata and per-column statistics (mean, std, min, max, coverage =
    share of non-zero values)."""
    from foxhunt.features.cache_file import open_cache

    with step("reading the cache", _reporter(quiet, verbose)):
        cache = open_cache(cache_path)
    meta, stats = cache.meta, _cache_stats(cache)
    if as_json:
        body = {
            "rows": meta["rows"],
            "row_unit": meta["row_unit"],
            "data_source": meta["data_source"],
            "schema_hash": meta["schema_hash"],
            "format_version": meta["format_version"],
            "created_at": meta["created_at"],
            "sources": meta["sources"],
            "layout": meta["layout"],
            "columns": stats,
        }
        out.print_json(json.dumps(body))
        return
    head = Table(title=str(cache.path), show_header=False)
    for key in ("rows", "row_unit", "data_source", "schema_hash", "format_version", "created_at"):
        head.add_row(key, str(meta[key]))
    head.add_row("sources", ", ".join(s["name"] for s in meta["sources"]))
    head.add_row("groups", ", ".join(f"{g['name']} ({g['width']})" for g in meta["layout"]))
    out.print(head)
    table = Table("column", "mean", "std", "min", "max", "coverage")
    for s in stats:
        table.add_row(
            s["name"],
            f"{s['mean']:.4g}",
            f"{s['std']:.4g}",
            f"{s['min']:.4g}",
            f"{s['max']:.4g}",
            f"{s['coverage']:.1%}",
        )
    out.print(table)


# --- alpha ----------------------------------------------------------------------------------


@app.command("alpha", context_settings=MANY_PATHS)
@_fails_cleanly
def alpha_cmd(
    ctx: typer.Context,
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Folder for alpha.json, alpha.md and the plots.")
    ],
    data: Annotated[list[Path] | None, typer.Option("--data", metavar="PATH...", help=DATA_HELP)] = None,
    cache_path: Annotated[
        Path | None, typer.Option("--cache", metavar="FILE", help="A feature cache built before.")
    ] = None,
    row_unit: Annotated[
        RowUnit | None, typer.Option("--row-unit", help="bar or snapshot (default: config).")
    ] = None,
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
    from foxhunt.dataset.build import get_or_build
    from foxhunt.dataset.cache import config_from_cache, load_cache
    from foxhunt.dataset.leaks import cache_sources
    from foxhunt.outputs import claim_folder
    from foxhunt.pipeline import Stopped, alpha_check, leak_guard_while

    progress = _reporter(quiet, verbose)
    overrides = _with_row_unit(set_, row_unit)
    if horizons:
        overrides.append(f"alpha.horizons=[{horizons}]")
    cfg = _config(profile, config, overrides)
    _one_source(data, cache_path, "alpha")
    if cfg.alpha.horizons is not None:  # before the cache is built: a bad horizon writes nothing
        check_horizons(cfg.alpha.horizons, "--horizons" if horizons else "alpha.horizons")
    claim_folder(out_dir, ("alpha.json", "alpha.config.json"), overwrite=overwrite)
    if cache_path is not None:
        cfg = config_from_cache(cache_path, cfg, _set_keys(overrides))
        cache = load_cache(cache_path, cfg)
        files = cache_sources(cache, cache_path)
    else:
        files = _data_paths(data or [], ctx)
    report, prepared = leak_guard_while(
        files, cfg, "alpha check", Stopped.ALPHA, progress, _line, lambda kept: kept, load_progress=progress
    )
    if cache_path is None:
        cache = get_or_build(files, cfg, out_dir / "cache", progress=progress, prepared=prepared)
    del prepared
    result = alpha_check(cache, cfg, report, progress)
    write_report(result, out_dir)
    write_resolved(cfg, out_dir / "alpha.config.json")
    out.print(verdict_line(result))


# --- backtest -------------------------------------------------------------------------------


@app.command("backtest", context_settings=MANY_PATHS)
@_fails_cleanly
def backtest_cmd(
    ctx: typer.Context,
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Folder for metrics.json, trades.csv, equity.png.")
    ],
    policy: Annotated[
        str, typer.Option(metavar="NAME", help="Scripted policy: flat, long, short, random or oracle.")
    ] = "flat",
    data: Annotated[list[Path] | None, typer.Option("--data", metavar="PATH...", help=DATA_HELP)] = None,
    cache_path: Annotated[
        Path | None, typer.Option("--cache", metavar="FILE", help="A feature cache built before.")
    ] = None,
    checkpoint: Annotated[
        list[Path] | None,
        typer.Option(
            "--checkpoint",
            metavar="FILE",
            help="A trained checkpoint (the one foxhunt run/train prints: RUN/checkpoints/fold<k>/last or "
            "best.safetensors) instead of --policy; "
            "judged on its own fold's validation period. Repeated: a committee of that fold's "
            "checkpoints (the argmax of their mean E[Q]).",
        ),
    ] = None,
    fold: Annotated[
        int | None, typer.Option(help="One fold (default: every fold's validation period).")
    ] = None,
    row_unit: Annotated[
        RowUnit | None, typer.Option("--row-unit", help="bar or snapshot (default: config).")
    ] = None,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    overwrite: OverwriteOpt = False,
) -> None:
    """Evaluate a scripted policy over every fold's validation windows at once with the trading
    environment; write metrics.json (net/gross PnL, costs, Sharpe with bars_per_year, drawdown,
    trades, win rate, active fraction, implausible), trades.csv and equity.png. The oracle peeks at
    the future on purpose and must be flagged implausible."""
    from foxhunt.backtest.evaluate import ScriptedPolicy
    from foxhunt.backtest.metrics import sharpe_text
    from foxhunt.backtest.run import run_backtest
    from foxhunt.backtest.settings import BacktestSettings
    from foxhunt.outputs import claim_folder

    progress = _reporter(quiet, verbose)
    overrides = _with_row_unit(set_, row_unit)
    cfg = _config(profile, config, overrides)
    claim_folder(out_dir, ("metrics.json", "trades.csv", "backtest.config.json"), overwrite=overwrite)
    if checkpoint:
        from foxhunt.policy.trained import CheckpointPolicy, CommitteePolicy

        kind = (
            CheckpointPolicy(checkpoint[0], cfg) if len(checkpoint) == 1 else CommitteePolicy(checkpoint, cfg)
        )
        cfg = kind.cfg  # the checkpoint's own resolved config (its widths, branches and folds)
    else:
        try:
            kind = ScriptedPolicy(policy)
        except ValueError:
            raise FoxhuntError(
                "--policy",
                f"unknown policy {policy!r}",
                "use " + ", ".join(p.value for p in ScriptedPolicy),
            ) from None
    asked = None if checkpoint else _set_keys(overrides)
    if data is not None and cache_path is None:
        from foxhunt.data.instrument import instrument_of_files

        instrument_of_files(_data_paths(data, ctx), cfg.instrument)  # an unknown contract: refused now
    cache, cfg = _cache_from(ctx, data, cache_path, cfg, out_dir, progress, "backtest", asked)
    n_folds = cfg.folds.n_folds
    if fold is not None and not 0 <= fold < n_folds:
        raise FoxhuntError("--fold", f"fold {fold} does not exist", f"use 0..{n_folds - 1}")
    body = run_backtest(cache, BacktestSettings.of(cfg), kind, out_dir, fold=fold, progress=progress)
    write_resolved(cfg, out_dir / "backtest.config.json")
    out.print(
        f"{kind.value} on {body['instrument']['symbol']}: net {body['net_pnl']:,.0f} "
        f"(gross {body['gross_pnl']:,.0f}, "
        f"costs {body['costs']:,.0f}), {body['trades']} trades, Sharpe {sharpe_text(body)} "
        f"at {body['bars_per_year']:,.0f} bars/year, "
        f"max drawdown {body['max_drawdown']:.2%}"
        + ("; IMPLAUSIBLE: " + "; ".join(body["implausible_reasons"]) if body["implausible"] else "")
        + (f"; {kind.value} never traded" if body["trades"] == 0 else ""),
        markup=False,
    )


@app.command("serve", context_settings=MANY_PATHS)
@_fails_cleanly
def serve_cmd(
    ctx: typer.Context,
    checkpoint: Annotated[
        list[Path],
        typer.Option(
            "--checkpoint",
            metavar="FILE",
            help="A weights-only export with its fold's normaliser (foxhunt export CKPT --out F --cache C). "
            "Repeated: a committee of one fold's exports (the argmax of their mean E[Q]), as foxhunt "
            "backtest judges it.",
        ),
    ],
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Folder for ledger.sqlite, decisions.csv, summary.")
    ],
    replay: Annotated[
        list[Path] | None,
        typer.Option(
            "--replay",
            metavar="PATH...",
            help="DBN files or folders to replay, as --data takes them (definition files are left out).",
        ),
    ] = None,
    speed: Annotated[
        str, typer.Option("--speed", metavar="X|max", help="Replay pace: X times the recorded pace, or max.")
    ] = "max",
    live: Annotated[
        str | None, typer.Option("--live", metavar="DATASET", help="Databento live dataset, e.g. GLBX.MDP3.")
    ] = None,
    symbols: Annotated[
        list[str] | None, typer.Option("--symbols", metavar="SYMBOL", help="Live symbols, e.g. ES.c.0.")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", metavar="P", help="HTTP interface on HOST:P (/, /state, /metrics ...)."),
    ] = None,
    host: Annotated[
        str,
        typer.Option(
            "--host", metavar="HOST", help="Bind --port here; beyond loopback needs FOXHUNT_SERVE_TOKEN."
        ),
    ] = "127.0.0.1",
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Run a trained agent on a stream of book data with paper execution: a replay of DBN files
    (--replay) or Databento's live feed (--live, key from DATABENTO_API_KEY). Decisions, fills and
    PnL go to a SQLite ledger under --out (a restart continues from its last commit); the serve
    settings (--set serve.warmup_rows=..., serve.on_fault=flatten|hold) come from the config."""
    if (replay is None) == (live is None):
        raise FoxhuntError("--replay/--live", "pass exactly one of them", "see foxhunt serve --help")
    if port is not None:
        from foxhunt.serve.http import check_bind

        check_bind(host)  # a public bind without a token: one line, before anything is loaded or written
    cfg = _config(profile, config, set_)
    from foxhunt.serve.config import DecidePath
    from foxhunt.serve.decide import check_compilable
    from foxhunt.serve.service import Service, check_decide_device
    from foxhunt.train.run import device_of

    device = device_of(cfg.serve.device, "serve.device")  # cuda asked for and absent: one line
    decide = cfg.serve.decide.resolve(live is not None, device.type)
    check_decide_device(decide, device)
    if decide is not DecidePath.EAGER:
        check_compilable()  # no C++ compiler: one line now, not a traceback at the first decision
    from foxhunt.serve.source import LiveSource, ReplaySource, api_key

    if live is not None:
        api_key()  # no key: one line, before anything is loaded
        source: Any = LiveSource(live, symbols or ["ES.c.0"])
    else:
        pace = None if speed == "max" else float(speed) if speed.replace(".", "", 1).isdigit() else -1.0
        if pace is not None and pace <= 0:
            raise FoxhuntError("--speed", f"{speed!r} is not a positive number or max", "e.g. --speed 10")
        # A paced replay jumps the recorded gaps the monitor calls gaps (serve.max_gap_seconds).
        files = _data_paths(replay or [], ctx)
        source = ReplaySource(files, speed=pace, jump_gap_seconds=cfg.serve.max_gap_seconds)
    log = (lambda m: None) if quiet else (lambda m: console.print(m, highlight=False, soft_wrap=True))
    _reporter(quiet, verbose)  # --quiet with --verbose: one line
    for path, schema, n in getattr(source, "skipped", ()):
        log(f"replay: {Path(path).name} left out ({n:,} {schema.value} records: not market data)")
    jumps, jumped = getattr(source, "jumps", (0, 0.0))
    if jumps and getattr(source, "speed", None) is not None:
        log(
            f"replay: {jumps} recorded gap(s) over serve.max_gap_seconds = {cfg.serve.max_gap_seconds:g} s "
            f"jumped ({jumped / 3600:,.1f} h of recorded time not waited through at --speed {speed})"
        )
    service = Service(
        checkpoint,
        source,
        out_dir,
        cfg.serve,
        device=str(device),
        log=log,
        log_rows=verbose,
        decide=decide,
    )
    log(_decide_line(cfg.serve.decide, decide))
    server = None
    try:
        if port is not None:
            from foxhunt.serve.http import start_status_server

            server = start_status_server(service, port, host)
            log(f"HTTP interface on {server.url} (/, /state, /decisions, /metrics)")
        summary = service.run()
    finally:
        if server is not None:
            server.close()
        service.close()
    if service.decider.compile_times:
        took = ", ".join(f"{k} {v:.0f} s" for k, v in service.decider.compile_times.items())
        log(f"decision side {decide.value}: compiled or loaded in {took}")
    out.print(
        f"served {summary['decisions']} decisions, net {summary['net_pnl']:,.2f}, "
        f"position {summary['position']:g}, {summary['faults']} faults -> {out_dir / 'decisions.csv'}"
    )


def _decide_line(asked: Any, decide: Any) -> str:
    """What the decision side runs on and what it costs at the start (serve.decide)."""
    from foxhunt.serve.config import DecidePath

    why = f"serve.decide = {asked.value}" + (f" -> {decide.value}" if asked is not decide else "")
    if decide is DecidePath.AOT:
        return (
            f"{why}: the first decision builds the step and forward libraries once per checkpoint "
            "(40-120 s on an idle 2-core CPU, longer on a loaded one; cached, later starts load them in "
            "about a second); --set serve.decide=eager starts at once (the same decisions, ~20 ms each)"
        )
    if decide is DecidePath.COMPILED:
        return f"{why}: torch.compile at the first two decisions (10-80 s at every start)"
    return f"{why}: no compile (the same decisions as aot; --set serve.decide=aot for ~0.2 ms a decision)"


@app.command("export")
@_fails_cleanly
def export_cmd(
    checkpoint: Annotated[
        Path,
        typer.Argument(
            metavar="CKPT",
            help="A training checkpoint: the one foxhunt run/train prints "
            "(RUN/checkpoints/fold0/last.safetensors under the default profile).",
        ),
    ],
    out_path: Annotated[
        Path, typer.Option("--out", metavar="FILE", help="The export FILE.safetensors (FILE.json beside it).")
    ],
    cache_path: Annotated[
        Path | None,
        typer.Option(
            "--cache", metavar="FILE", help="The cache the run trained on: stores the fold's normaliser too."
        ),
    ] = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    overwrite: OverwriteOpt = False,
) -> None:
    """Write a weights-only export of a checkpoint: network weights, acting signals and metadata
    (config, fold, layout fingerprint), without replay buffer, optimizer state or random streams.
    `foxhunt backtest --checkpoint` and foxhunt.api.load_policy read it like the checkpoint."""
    from foxhunt.api import export_weights
    from foxhunt.outputs import claim_file
    from foxhunt.policy.checkpoint import checkpoint_files

    source = checkpoint_files(checkpoint)[0]
    claim_file(out_path, overwrite=overwrite)
    with step("exporting the weights", _reporter(quiet, verbose)):
        path = export_weights(source, out_path, cache=cache_path)
    out.print(
        f"{source} ({source.stat().st_size / 1e6:.2f} MB) -> {path} ({path.stat().st_size / 1e6:.2f} MB)"
        + (", with the fold's normaliser" if cache_path is not None else "")
    )


# --- training and the main job ----------------------------------------------------------------


@app.command("train", context_settings=MANY_PATHS)
@_fails_cleanly
def train_cmd(
    ctx: typer.Context,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", metavar="DIR", help="Run folder: checkpoints, TensorBoard, folds.json."),
    ] = None,
    data: Annotated[list[Path] | None, typer.Option("--data", metavar="PATH...", help=DATA_HELP)] = None,
    cache_path: Annotated[
        Path | None, typer.Option("--cache", metavar="FILE", help="A feature cache built before.")
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume", metavar="DIR", help="Continue an interrupted run in this folder (instead of --out)."
        ),
    ] = None,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    overwrite: OverwriteOpt = False,
    tracking_uri: TrackingOpt = None,
) -> None:
    """Walk-forward training: per fold, epochs of collection from parallel episodes, learner
    updates and a validation backtest; checkpoints (best, last, ring), TensorBoard diagnostics,
    anomaly guard and plateau handling. Writes folds.json with each fold's validation metrics.
    Tracked in MLflow (--tracking-uri)."""
    from foxhunt import pipeline
    from foxhunt.dataset.cache import config_from_cache

    progress = _reporter(quiet, verbose)
    cfg = _config(profile, config, list(set_ or []))
    if (out_dir is None) == (resume is None):
        raise FoxhuntError(
            "--out/--resume", "pass exactly one of --out or --resume", "see foxhunt train --help"
        )
    _one_source(data, cache_path, "train")
    if cache_path is not None:  # the config as it will run: the cache's own settings
        cfg = config_from_cache(cache_path, cfg, _set_keys(list(set_ or [])))
    summary = pipeline.train(
        cfg,
        resume if resume is not None else out_dir,  # type: ignore[arg-type]  # one of them, checked above
        _data_paths(data, ctx) if data is not None else None,
        cache_path=cache_path,
        resume=resume is not None,
        overwrite=overwrite,
        profile=profile or ("file" if config else "default"),
        tracking_uri=tracking_uri,
        progress=progress,
        say=_line,
    )
    _present_training(summary)


def _present_training(summary: TrainSummary) -> None:
    """``foxhunt train``'s result: a line per fold, the reported checkpoints, the mean."""
    folds, run = summary.folds, summary.out
    for f in folds:
        out.print(f"fold {f['fold']}: " + _fold_line(f), markup=False)
    _checkpoints_line(folds, run)
    out.print(
        f"mean validation net {sum(f['net_pnl'] for f in folds) / max(len(folds), 1):,.0f} over "
        f"{len(folds)} folds, {sum(f['trades'] for f in folds)} agent trades"
        + idle_note([f["trades"] for f in folds])
        + f"; {run / 'folds.json'}",
        markup=False,
    )


def _checkpoints_line(folds: list[dict[str, Any]], train_dir: Path) -> None:
    """The checkpoint each fold reports (``best`` where an epoch was selected, ``last`` under
    ``train.selection = last``): the files ``backtest --checkpoint`` and ``export`` take."""
    files = [str(train_dir / f["checkpoint_file"]) for f in folds if f.get("checkpoint_file")]
    if files:
        _line("reported checkpoints (for backtest --checkpoint, export): " + ", ".join(files))


def _fold_line(f: dict[str, Any]) -> str:
    """A trained fold as ``foxhunt train`` prints it: the agent's net beside every baseline's."""
    from foxhunt.backtest.metrics import sharpe_text
    from foxhunt.domain.baselines import ORDER, Baseline, label

    base = f["baselines"]
    shown = [n for n in (*ORDER, Baseline.RULE) if n in base]  # a run from before buy_hold lacks it
    versus = ", ".join(f"{label(n)} {base[n]['net_pnl']:,.0f}" for n in shown)
    capture = f", capture {f['capture']:.0%}" if f.get("capture") is not None else ""
    return (
        f"net {f['net_pnl']:,.0f} ({versus}{capture}), Sharpe {sharpe_text(f, interval=False)}, "
        f"{f['trades']} trades"
    )


@app.command("run", context_settings=MANY_PATHS)
@_fails_cleanly
def run_cmd(
    ctx: typer.Context,
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Run folder: report.html, metrics.json, all stages.")
    ],
    data: Annotated[
        list[Path] | None,
        typer.Option(
            "--data",
            metavar="PATH...",
            help=DATA_HELP + " Default: the embedded synthetic market (planted alpha).",
        ),
    ] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted run in --out.")] = False,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    overwrite: OverwriteOpt = False,
    tracking_uri: TrackingOpt = None,
) -> None:
    """The main job: (synthetic market when no --data) -> leak guard -> features -> alpha check ->
    walk-forward training -> validation backtests against flat and long -> report.html and
    metrics.json. Uses the GPU when one is present (run.device = auto), with the gpu profile (8 members
    trained at once, their committee reported) when neither --profile nor --config is given. Tracked
    in MLflow (--tracking-uri)."""
    from foxhunt import pipeline

    progress = _reporter(quiet, verbose)
    cfg, profile = _training_config(profile, config, list(set_ or []), progress)
    files = _data_paths(data, ctx) if data else None
    if files and not resume:  # a resume runs the config its run recorded
        cfg = _remembered(files, cfg, out_dir, set_)
    summary = pipeline.run_job(
        cfg,
        out_dir,
        files,
        progress=progress,
        resume=resume,
        overwrite=overwrite,
        profile=profile or ("file" if config else "default"),
        tracking_uri=tracking_uri,
    )
    _present_job(summary)


def _present_job(summary: JobSummary) -> None:
    """``foxhunt run``'s result: the reported checkpoints, then the mean and the baselines beaten."""
    from foxhunt.domain.baselines import Baseline, label

    s, folds, run = summary.metrics["summary"], summary.folds, summary.out
    n = len(folds)
    _checkpoints_line(folds, run / "train")
    out.print(
        f"mean validation net {s['mean_net_pnl']:,.0f}, {sum(f['trades'] for f in folds)} agent trades"
        + idle_note([f["trades"] for f in folds])
        + f"; beats flat in {s['beats_flat_folds']}/{n} folds, "
        f"{label(Baseline.LONG)} in {s['beats_long_folds']}/{n}, "
        f"{label(Baseline.BUY_HOLD)} in {s['beats_buy_hold_folds']}/{n}; report: {run / 'report.html'}",
        markup=False,
    )


def _market_files(
    ctx: typer.Context, data: list[Path] | None, cfg: FoxhuntConfig, out_dir: Path
) -> list[Path]:
    """``--data PATH...``, or the embedded synthetic market (the config's ``[synth]``) written into
    ``out_dir/market`` when no data is given (as ``foxhunt run`` does)."""
    from foxhunt.data.synth import write_synthetic

    if data:
        return _data_paths(data, ctx)
    return write_synthetic(cfg.synth, out_dir / "market")


@app.command("edge", context_settings=MANY_PATHS)
@_fails_cleanly
def edge_cmd(
    ctx: typer.Context,
    out_dir: Annotated[Path, typer.Option("--out", metavar="DIR", help="Folder for edge.json.")],
    data: Annotated[
        list[Path] | None,
        typer.Option(
            "--data", metavar="PATH...", help=DATA_HELP + " Default: the embedded synthetic market."
        ),
    ] = None,
    cache_path: Annotated[
        Path | None, typer.Option("--cache", metavar="FILE", help="A feature cache built before.")
    ] = None,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """The edge an agent is measured against: the reference rule of the planted signal (synth.signal:
    long above +1.5 sd of its carrier feature, short below -1.5 sd, market orders, under the plan lock)
    beside flat, long re-entered each plan and buy-and-hold, per fold over the validation periods.
    Writes edge.json."""
    from foxhunt.atomic import write_json
    from foxhunt.backtest.capture import RULE
    from foxhunt.backtest.metrics import sharpe_text
    from foxhunt.backtest.reference import edge
    from foxhunt.backtest.settings import BacktestSettings
    from foxhunt.dataset.build import get_or_build
    from foxhunt.domain.baselines import ORDER, label

    progress = _reporter(quiet, verbose)
    cfg = _config(profile, config, list(set_ or []))
    _one_source(data, cache_path, "edge", required=False)  # neither: the embedded synthetic market
    if cache_path is not None:
        asked = _set_keys(set_ or [])
        cache, cfg = _cache_from(ctx, None, cache_path, cfg, out_dir, progress, "edge", asked)
    else:
        files = _market_files(ctx, data, cfg, out_dir)
        cache = get_or_build(files, cfg, out_dir / "cache", progress=progress)
    with step("reference rule and baselines per fold", progress):
        result = edge(cache, BacktestSettings.of(cfg))
    write_json(out_dir / "edge.json", result, indent=2, default=float)
    write_resolved(cfg, out_dir / "edge.config.json")
    out.print(result["rule"]["text"] + f", {result['rule']['plan_rows']}-row plans", markup=False)
    for row in result["folds"]:
        cells = [
            f"{label(name)} {row[name]['net_pnl']:+,.0f} ({row[name]['trades']} trades, "
            f"Sharpe {sharpe_text(row[name], interval=False)})"
            for name in (RULE, *ORDER)
        ]
        out.print(f"fold {row['fold']}: " + "; ".join(cells), markup=False)
    total = result["total"]
    out.print(
        "total: " + ", ".join(f"{label(n)} {total[n]:+,.0f}" for n in (RULE, *ORDER))
        + f"; {out_dir / 'edge.json'}",
        markup=False,
    )


@app.command("seeds", context_settings=MANY_PATHS)
@_fails_cleanly
def seeds_cmd(
    ctx: typer.Context,
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Folder for seeds.json, seeds.png, a run per seed.")
    ],
    seeds: Annotated[str, typer.Option(metavar="N,N,...", help="Comma-separated run seeds, e.g. 7,8,9.")],
    data: Annotated[
        list[Path] | None,
        typer.Option(
            "--data", metavar="PATH...", help=DATA_HELP + " Default: the embedded synthetic market."
        ),
    ] = None,
    workers: Annotated[int, typer.Option(metavar="N", help="Seeds trained at once, one Ray task each.")] = 1,
    keep: Annotated[
        Keep,
        typer.Option(
            help="Checkpoints kept of each seed: all (the folds' rings too: resumable) or reported "
            "(only those the study's numbers read: about a third of the disk)."
        ),
    ] = Keep.ALL,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    overwrite: OverwriteOpt = False,
    tracking_uri: TrackingOpt = None,
    ray_address: RayAddressOpt = None,
) -> None:
    """One profile over several seeds: builds the features once, trains every seed (WORKERS at once,
    Ray tasks sharing the GPUs, see docs/scale-out.md), and writes seeds.json (per seed and fold: net
    PnL, trades, Sharpe; the reference rule, flat and long per fold; the capture's mean, standard
    error and 95% interval; the seeds that beat flat) and seeds.png. Tracked in MLflow
    (--tracking-uri): a run for the study, each seed's run nested under it."""
    from foxhunt import pipeline

    chosen = _seed_list(seeds)
    if workers < 1:
        raise FoxhuntError("--workers", f"{workers} workers", "pass --workers 1 or more")
    progress = _reporter(quiet, verbose)
    cfg, profile = _training_config(profile, config, list(set_ or []), progress)
    summary = pipeline.seeds(
        cfg,
        out_dir,
        chosen,
        _data_paths(data, ctx) if data else None,
        workers=workers,
        keep=keep,
        overwrite=overwrite,
        profile=profile,
        tracking_profile=profile or ("file" if config else "default"),
        sets=list(set_ or []),
        tracking_uri=tracking_uri,
        ray_address=ray_address,
        progress=progress,
        say=_line,
    )
    _present_seeds(summary)


def _seed_list(seeds: str) -> list[int]:
    """``--seeds 7,8,9`` as distinct non-negative seeds, else one line naming the option."""
    try:
        chosen = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        chosen = []
    if not chosen or len(set(chosen)) != len(chosen) or min(chosen) < 0:
        raise FoxhuntError("--seeds", f"{seeds!r} is not a list of distinct seeds", "pass e.g. --seeds 7,8,9")
    return chosen


def _present_seeds(summary: SeedsSummary) -> None:
    """``foxhunt seeds``' result: what --keep reported deleted, a line per seed and the committee,
    where the seeds ran, the capture and the seeds that beat flat."""
    from foxhunt.parallel.resources import spread
    from foxhunt.train.seeds import SEEDS_FILE, capture_lines, capture_text

    study, members = summary.study, summary.members
    if summary.pruned is not None:
        files, size = summary.pruned
        out.print(f"--keep reported: deleted {files} checkpoint files ({size / 1e6:,.0f} MB)", markup=False)
    for r in summary.results:
        if r.stopped:
            out.print(f"seed {r.seed}: stopped ({r.stopped})", markup=False)
            continue
        nets = " / ".join(f"{f.net_pnl:+,.0f}" for f in r.folds)
        of = f" (a committee of {members} members)" if members > 1 else ""
        cap = capture_text(r.captures)
        out.print(f"seed {r.seed}{of}: net {nets} (total {r.total:+,.0f}), {cap}", markup=False)
    if (committee := summary.committee) is not None:
        nets = " / ".join(f"{f.net_pnl:+,.0f}" for f in committee.folds)
        out.print(
            f"committee of {summary.finished}{f' x {members} members' if members > 1 else ''}: "
            f"net {nets} (total {committee.total:+,.0f}), {capture_text(committee.captures)}",
            markup=False,
        )
    if (where := spread(study["devices"])) is not None:
        out.print(f"seeds {where}", markup=False)
    for line in capture_lines(study):
        out.print(line, markup=False)
    traded = [sum(f.trades for f in r.folds) for r in summary.results if not r.stopped]
    out.print(
        f"{study['beats_flat']}/{study['finished']} beat flat"
        + idle_note(traded, "seed")
        + f"; {summary.out / SEEDS_FILE}",
        markup=False,
    )


# --- checks ---------------------------------------------------------------------------------


@check_app.command("leaks", context_settings=MANY_PATHS)
@_fails_cleanly
def check_leaks_cmd(
    ctx: typer.Context,
    data: Annotated[list[Path] | None, typer.Option("--data", metavar="PATH...", help=DATA_HELP)] = None,
    cache_path: Annotated[
        Path | None,
        typer.Option(
            "--cache",
            metavar="FILE",
            help="A feature cache built before: the guard runs on its source files with its settings.",
        ),
    ] = None,
    row_unit: Annotated[
        RowUnit | None, typer.Option("--row-unit", help="bar or snapshot (default: config).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
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
    from foxhunt.data.sessions import iso_utc
    from foxhunt.dataset.leaks import check_files

    progress = _reporter(quiet, verbose)
    sets = _with_row_unit(set_, row_unit)
    cfg = _config(profile, config, sets)
    _one_source(data, cache_path, "check leaks")
    if cache_path is not None:  # the files the cache was built from, with its settings
        from foxhunt.dataset.cache import config_from_cache
        from foxhunt.dataset.leaks import cache_sources
        from foxhunt.features.cache_file import open_cache

        cfg = config_from_cache(cache_path, cfg, _set_keys(sets))
        files = cache_sources(open_cache(cache_path, verify=False), cache_path)
    else:
        files = _data_paths(data or [], ctx)
    with step("checking for look-ahead leaks", progress):
        report, _ = check_files(files, cfg, progress)  # the rows the guard checks
    if as_json:
        out.print_json(json.dumps(report.to_dict()))
    else:
        for c in report.cuts:
            out.print(
                f"cut {iso_utc(c.t)}: {c.rows_checked:,} rows checked, "
                + ("clean" if not c.leaking_columns else f"LEAK in {', '.join(c.leaking_columns)}")
            )
    if not as_json:
        out.print(report.verdict, markup=False, highlight=False, soft_wrap=True)
    report.raise_if_leaking(
        "check leaks", "a row may use only data at or before it, a fold's normaliser only its training rows"
    )


# --- tracked runs -----------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


@runs_app.command("compare")
@_fails_cleanly
def runs_compare(
    refs: Annotated[
        list[str],
        typer.Argument(metavar="RUN", help="Run folders of tracked runs (tracking.json) or MLflow run ids."),
    ],
    tracking_uri: TrackingOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Tracked runs side by side: final results (per fold and totals) and only the config keys whose
    values differ between them."""
    from foxhunt.tracking.compare import compare, load_runs

    _reporter(quiet, verbose)
    result = compare(load_runs(refs, tracking_uri))
    if as_json:
        out.print_json(json.dumps(result.to_dict()))
        return
    table = Table(title="runs compared")
    table.add_column("")
    for r in result.runs:
        table.add_column(f"{r.name} ({r.run_id[:8]})\n{r.command}, {r.status.lower()}")
    for key, values in result.results.items():
        table.add_row(key, *(_cell(v) for v in values))
    table.add_section()
    if not result.differing:
        table.add_row("config", *("same" for _ in result.runs))
    for key, texts in result.differing.items():
        table.add_row(f"config {key}", *(_cell(t) for t in texts))
    out.print(table)


@runs_app.command("list")
@_fails_cleanly
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

    _reporter(quiet, verbose)
    if limit < 1:
        raise FoxhuntError("--limit", f"{limit} runs", "pass --limit 1 or more")
    uri, runs = list_runs(tracking_uri, experiment, limit)
    table = Table(title=f"tracked runs in {uri}")
    for col in ("run id", "name", "command", "status", "total net PnL"):
        table.add_column(col)
    for r in runs:
        table.add_row(r.run_id, r.name, r.command, r.status, _cell(r.results.get("total/net_pnl")))
    out.print(table)


# --- hyperparameter search --------------------------------------------------------------------


@app.command("tune", context_settings=MANY_PATHS)
@_fails_cleanly
def tune_cmd(
    ctx: typer.Context,
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out", metavar="DIR", help="Folder for study.db, trials/<n>/, best.toml, tune.html, tune.json."
        ),
    ],
    data: Annotated[
        list[Path] | None,
        typer.Option(
            "--data", metavar="PATH...", help=DATA_HELP + " Default: the embedded synthetic market."
        ),
    ] = None,
    trials: Annotated[
        int | None, typer.Option(metavar="N", help="Trials of the study (default: tune.trials).")
    ] = None,
    workers: Annotated[int, typer.Option(metavar="N", help="Trials run at once.")] = 1,
    storage: Annotated[
        str | None,
        typer.Option(
            metavar="URL", help="SQLAlchemy URL of the study's database (default: sqlite:///DIR/study.db)."
        ),
    ] = None,
    study_name: Annotated[
        str | None,
        typer.Option("--study", metavar="NAME", help="Study name in the storage (default: DIR's name)."),
    ] = None,
    ray_address: RayAddressOpt = None,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Delete the study and its trials and start again.")
    ] = False,
    tracking_uri: TrackingOpt = None,
) -> None:
    """Hyperparameter search: an Optuna study (TPE, median pruning on each epoch's selection-period
    net PnL) over the search space in the config's tune section, trials ranked on the folds'
    selection periods (never their validation periods; under train.selection = last the trials
    train with train_tail, and best.toml keeps last), every trial trained on one feature
    cache, WORKERS at once (Ray). Run it again to resume a killed study. Writes best.toml (a
    profile for --config), tune.html and tune.json. Tracked in MLflow: a run for the study, each
    trial's nested. docs/tune.md."""
    from foxhunt import pipeline

    if workers < 1:
        raise FoxhuntError("--workers", f"{workers} workers", "pass --workers 1 or more")
    if trials is not None and trials < 1:
        raise FoxhuntError("--trials", f"{trials} trials", "pass --trials 1 or more")
    progress = _reporter(quiet, verbose)
    cfg, profile = _training_config(
        profile, config, [*(set_ or []), *([f"tune.trials={trials}"] if trials else [])], progress
    )
    summary = pipeline.tune(
        cfg,
        out_dir,
        _data_paths(data, ctx) if data else None,
        profile=profile or (str(config) if config else "default"),
        config_file=config,
        workers=workers,
        storage=storage,
        study_name=study_name,
        ray_address=ray_address,
        overwrite=overwrite,
        tracking_uri=tracking_uri,
        progress=progress,
        say=_line,
    )
    _present_tune(summary)


def _present_tune(summary: TuneSummary) -> None:
    """``foxhunt tune``'s result: the trials by state, where they ran, and the best trial (or why
    there is none)."""
    from foxhunt.parallel.resources import spread
    from foxhunt.tune.export import undecided_text
    from foxhunt.tune.report import REPORT_FILE

    s, best, objective = summary.summary, summary.best, summary.objective
    report = summary.out / REPORT_FILE
    states = ", ".join(f"{n} {k.lower()}" for k, n in s["states"].items())
    out.print(f"study {summary.name}: {s['trials_counted']}/{summary.trials} trials ({states})", markup=False)
    if (where := spread(s["devices"])) is not None:
        out.print(f"trials {where}", markup=False)
    if s["best"] is None:
        out.print("no trial completed: no best profile written", markup=False)
    elif (und := s["undecided"]) is not None:
        out.print(
            f"{undecided_text(und['value'], und['trials'])} ({objective} over the selection "
            f"periods): no best trial; {best} holds trial {s['best']['number']}'s parameters, "
            f"the first; report {report}",
            markup=False,
        )
    else:
        b = s["best"]
        params = ", ".join(f"{k}={v!r}" for k, v in b["params"].items())
        val = b["validation"]
        shown = {k: "n/a" if val.get(k) is None else f"{val[k]:,.6g}" for k in ("value", "last_fold")}
        out.print(
            f"best: trial {b['number']}, {objective} {b['value']:,.6g} over the selection "
            f"periods (ranked on) ({params}); validation {shown['value']}, last fold {shown['last_fold']} "
            f"({REPORT_FILE} says which is out of sample); profile {best}; report {report}",
            markup=False,
        )


def run() -> None:  # pragma: no cover - console script shim for `python -m foxhunt`
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
