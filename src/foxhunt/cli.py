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
from typing import Annotated, Any, TypeVar

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from foxhunt import __version__
from foxhunt.config.loader import available_profiles, config_hash, load_config, write_resolved
from foxhunt.config.models import FoxhuntConfig
from foxhunt.data.schemas import RowUnit, Schema
from foxhunt.data.sessions import iso_utc
from foxhunt.errors import FoxhuntError

app = typer.Typer(
    help="foxhunt: deep-RL research for index futures from limit-order-book data (Databento DBN).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
data_app = typer.Typer(
    help="Market data: inspect DBN files, rebuild books from MBO, generate the synthetic market, build bars.",
    no_args_is_help=True,
)
config_app = typer.Typer(help="Show the resolved configuration and the profiles.", no_args_is_help=True)
features_app = typer.Typer(
    help="Features: build the cached feature stack (Arrow IPC) and inspect a cache.", no_args_is_help=True
)
check_app = typer.Typer(help="Checks on data and features: the look-ahead leak guard.", no_args_is_help=True)
app.add_typer(data_app, name="data")
app.add_typer(features_app, name="features")
app.add_typer(check_app, name="check")
app.add_typer(config_app, name="config")

console = Console(stderr=True)
# Wide when piped (CI logs, files): rich would otherwise squeeze tables into 80 columns.
out = Console(width=None if sys.stdout.isatty() else 160)

ProfileOpt = Annotated[
    str | None,
    typer.Option("--profile", help="Packaged profile: smoke (CPU), localdev, production."),
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="A TOML config file instead of a profile.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override one value, e.g. --set data.bar_seconds=60 (repeatable)."),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")]

F = TypeVar("F", bound=Callable[..., Any])


def _fails_cleanly(fn: F) -> F:
    """Turn a :class:`FoxhuntError` into one line on stderr and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except FoxhuntError as exc:
            console.print(f"[bold red]error[/]: {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None

    return wrapper  # type: ignore[return-value]


@contextmanager
def step(description: str, quiet: bool) -> Iterator[None]:
    """A transient spinner with elapsed time for a step that may take seconds."""
    if quiet or not console.is_terminal:
        yield
        return
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        progress.add_task(description, total=None)
        yield


def _config(profile: str | None, config: Path | None, sets: list[str] | None) -> FoxhuntConfig:
    return load_config(profile=profile, config_file=config, overrides=sets or ())


@app.callback(invoke_without_command=True)
def main(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    """foxhunt turns Databento order-book data into causal features, checks for signal, and trains
    a distributional RL trading agent judged by purged walk-forward backtests."""
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
) -> None:
    """Print the resolved configuration and its hash."""
    cfg = _config(profile, config, set_)
    body = {"config_hash": config_hash(cfg), "config": cfg.model_dump(mode="json")}
    out.print_json(json.dumps(body)) if as_json else out.print(body)


@config_app.command("profiles")
def config_profiles() -> None:
    """List the packaged profiles."""
    for name in available_profiles():
        out.print(name)


# --- data -------------------------------------------------------------------------------------


@data_app.command("inspect")
@_fails_cleanly
def data_inspect(
    paths: Annotated[list[Path], typer.Argument(help="DBN files or directories of them.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Per file: schema, dataset, records, instruments, time span; for book data the share of
    crossed/locked states and the median spread in ticks."""
    from foxhunt.data.inspect import inspect_files

    cfg = _config(profile, config, set_)
    with step("inspecting", quiet):
        reports = inspect_files(paths, cfg.data)
    if as_json:
        out.print_json(json.dumps({"files": reports}))
        return
    table = Table(title="DBN files")
    for col in (
        "file",
        "schema",
        "dataset",
        "records",
        "instruments",
        "start (UTC)",
        "end (UTC)",
        "crossed",
        "median spread (ticks)",
    ):
        table.add_column(col)
    for r in reports:
        table.add_row(
            Path(r["path"]).name,
            r["schema"],
            r["dataset"],
            f"{r['records']:,}",
            ", ".join(f"{i['symbol']} ({i['instrument_id']})" for i in r["instruments"]),
            r["start"],
            r["end"],
            "" if r["crossed_share"] is None else f"{r['crossed_share']:.2%}",
            "" if r["median_spread_ticks"] is None else f"{r['median_spread_ticks']:g}",
        )
    out.print(table)


@data_app.command("rebuild-book")
@_fails_cleanly
def data_rebuild_book(
    source: Annotated[Path, typer.Argument(help="An MBO file (.mbo.dbn or .mbo.dbn.zst).")],
    out_path: Annotated[Path, typer.Option("--out", help="Output MBP-10 DBN file (.dbn.zst).")],
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Rebuild the 10-level book from MBO events (numba book builder) and write it as a genuine
    DBN MBP-10 file that Databento's DBNStore and `foxhunt data inspect` read back."""
    from foxhunt.data.book import rebuild_book
    from foxhunt.data.dbn_read import read_dbn
    from foxhunt.data.dbn_write import write_book

    cfg = _config(profile, config, set_)
    f, mbo = read_dbn(source, expect=Schema.MBO)
    with step("rebuilding book", quiet):
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
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for the DBN files.")],
    seed: Annotated[int | None, typer.Option(help="Random seed (default: the config's).")] = None,
    sessions: Annotated[int | None, typer.Option(help="Number of trading sessions.")] = None,
    alpha: Annotated[float | None, typer.Option(help="Planted alpha strength (0 = no signal).")] = None,
    events_per_session: Annotated[int | None, typer.Option(help="Book events per session.")] = None,
    schemas: Annotated[
        str, typer.Option(help="Comma-separated schemas to write: mbp-10, trades, mbo, ohlcv-1m.")
    ] = "mbp-10,trades",
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Generate the synthetic ES market as genuine DBN files (deterministic for a seed)."""
    from foxhunt.data.synth import write_synthetic

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
    with step(f"simulating {cfg.synth.sessions} session(s)", quiet):
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
    quiet: bool,
    command: str,
):
    """The feature cache of ``--cache FILE`` or built (or reused) from ``--data PATH...``."""
    from foxhunt.features.cache import get_or_build, load_cache

    if (data is None) == (cache_path is None):
        raise FoxhuntError(
            "--data/--cache", "pass exactly one of --data or --cache", f"see foxhunt {command} --help"
        )
    with step("building features", quiet):
        if cache_path is not None:
            return load_cache(cache_path, cfg)
        return get_or_build(_data_paths(data or [], ctx), cfg, out_dir / "cache")


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
    data: Annotated[list[Path], typer.Option("--data", help=DATA_HELP)],
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for bars.arrow (or snapshots.arrow).")],
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Ingest DBN files, pick the front month, build bars (or snapshot rows), write them as Arrow
    IPC with the resolved config beside them, and print a summary."""
    from foxhunt.data.summary import build_and_write

    cfg = _config(profile, config, set_)
    paths = _data_paths(data, ctx)
    with step("ingesting and building " + ("bars" if cfg.data.row_unit is RowUnit.BAR else "rows"), quiet):
        summary = build_and_write(paths, cfg, out_dir)
    write_resolved(cfg, out_dir / "bars.config.json")
    table = Table(title=f"{summary['row_unit']} rows -> {summary['path']}", show_header=False)
    for key, value in summary.items():
        if key not in ("path",):
            table.add_row(key, str(value))
    out.print(table)


# --- features ---------------------------------------------------------------------------------


@features_app.command("build", context_settings=MANY_PATHS)
@_fails_cleanly
def features_build(
    ctx: typer.Context,
    data: Annotated[list[Path], typer.Option("--data", help=DATA_HELP)],
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for the cache file.")],
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
) -> None:
    """Ingest DBN files and write the feature cache: causal features of every family, labels,
    and metadata (schema hash, layout, sources), one Arrow IPC file per inputs and config."""
    from foxhunt.features.cache import get_or_build

    overrides = list(set_ or []) + ([f"data.row_unit={row_unit.value}"] if row_unit else [])
    cfg = _config(profile, config, overrides)
    with step("building features", quiet):
        cache = get_or_build(_data_paths(data, ctx), cfg, out_dir, regenerate=regenerate)
    write_resolved(cfg, cache.path.with_suffix(".config.json"))
    _print_cache_summary(cache)


def _cache_stats(cache) -> list[dict[str, Any]]:
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
    meta = cache.meta
    stats = _cache_stats(cache)
    dead = [s["name"] for s in stats if s["coverage"] == 0.0]
    out.print(
        f"{cache.path}: {meta['rows']:,} {meta['row_unit']} rows x {len(cache.columns)} features "
        f"({meta['data_source']}), schema {meta['schema_hash'][:12]}; "
        f"mean coverage {np.mean([s['coverage'] for s in stats]) if stats else 0:.1%}; "
        f"{len(dead)} columns never non-zero" + (f": {', '.join(dead[:12])}" if dead else "")
    )


@features_app.command("info")
@_fails_cleanly
def features_info(
    cache_path: Annotated[Path, typer.Argument(help="A feature cache file (.arrow).")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Print a cache's metadata and per-column statistics (mean, std, min, max, coverage =
    share of non-zero values)."""
    from foxhunt.features.cache import open_cache

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
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for alpha.json, alpha.md and the plots.")],
    data: Annotated[list[Path] | None, typer.Option("--data", help=DATA_HELP)] = None,
    cache_path: Annotated[Path | None, typer.Option("--cache", help="A feature cache built before.")] = None,
    row_unit: Annotated[
        RowUnit | None, typer.Option("--row-unit", help="bar or snapshot (default: config).")
    ] = None,
    horizons: Annotated[
        str | None, typer.Option(help="Comma-separated horizons in rows, e.g. 5,20,50,200,500.")
    ] = None,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Does the data carry signal before any RL? The leak guard runs first on the data; then an
    MLP and LightGBM predict the direction of the move over each horizon on purged walk-forward
    folds, with block-bootstrap confidence intervals, a horizon-decay curve, regime tables and
    feature-group importance. Writes alpha.json, alpha.md and PNG plots; prints the verdict."""
    from foxhunt.alpha.check import run_alpha
    from foxhunt.alpha.report import verdict_line, write_report
    from foxhunt.data.ingest import load_market
    from foxhunt.features.cache import get_or_build, load_cache
    from foxhunt.validation.leaks import LeakFoundError, check_leaks

    overrides = list(set_ or []) + ([f"data.row_unit={row_unit.value}"] if row_unit else [])
    if horizons:
        overrides.append(f"alpha.horizons=[{horizons}]")
    cfg = _config(profile, config, overrides)
    if (data is None) == (cache_path is None):
        raise FoxhuntError(
            "--data/--cache", "pass exactly one of --data or --cache", "see foxhunt alpha --help"
        )
    if cache_path is not None:
        cache = load_cache(cache_path, cfg)
        files = [Path(s["path"]) for s in cache.meta["sources"] if "path" in s]
        if len(files) != len(cache.meta["sources"]) or not all(p.is_file() for p in files):
            raise FoxhuntError(
                cache_path,
                "the cache's source files are not where they were, so the leak guard cannot run",
                "pass the DBN files with --data instead",
            )
    else:
        files = _data_paths(data or [], ctx)
    with step("leak guard", quiet):
        report = check_leaks(load_market(files, cfg.data), cfg)
    if not report.clean:
        raise LeakFoundError(
            "alpha check",
            f"stopped by the leak guard: look-ahead in {', '.join(report.leaking_columns)}",
            "fix the named feature columns; no alpha result is reported on leaking features",
        )
    if cache_path is None:
        with step("building features", quiet):
            cache = get_or_build(files, cfg, out_dir / "cache")
    chosen = cfg.alpha.horizons or tuple(cfg.labels.horizons(cfg.data.row_unit))
    with step("fitting MLP and LightGBM per fold and horizon", quiet):
        result = run_alpha(cache, cfg, tuple(chosen))
    result.leak_guard = report.to_dict()
    write_report(result, out_dir)
    write_resolved(cfg, out_dir / "alpha.config.json")
    out.print(verdict_line(result))


# --- backtest -------------------------------------------------------------------------------


@app.command("backtest", context_settings=MANY_PATHS)
@_fails_cleanly
def backtest_cmd(
    ctx: typer.Context,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for metrics.json, trades.csv, equity.png.")],
    policy: Annotated[
        str, typer.Option(help="Scripted policy: flat, long, short, random or oracle.")
    ] = "flat",
    data: Annotated[list[Path] | None, typer.Option("--data", help=DATA_HELP)] = None,
    cache_path: Annotated[Path | None, typer.Option("--cache", help="A feature cache built before.")] = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint",
            help="A trained checkpoint (RUN/checkpoints/fold<k>/best.safetensors) instead of --policy; "
            "judged on its own fold's validation period.",
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
) -> None:
    """Evaluate a scripted policy over every fold's validation windows at once with the trading
    environment; write metrics.json (net/gross PnL, costs, Sharpe with bars_per_year, drawdown,
    trades, win rate, active fraction, implausible), trades.csv and equity.png. The oracle peeks at
    the future on purpose and must be flagged implausible."""
    from foxhunt.backtest.evaluate import ScriptedPolicy
    from foxhunt.backtest.run import run_backtest

    overrides = list(set_ or []) + ([f"data.row_unit={row_unit.value}"] if row_unit else [])
    cfg = _config(profile, config, overrides)
    if checkpoint is not None:
        from foxhunt.train.run import CheckpointPolicy

        kind = CheckpointPolicy(checkpoint, cfg)
        cfg = kind.cfg  # the checkpoint's own resolved config (its widths, branches and folds)
    else:
        try:
            kind = ScriptedPolicy(policy)
        except ValueError:
            raise FoxhuntError(
                "--policy", f"unknown policy {policy!r}", "use flat, long, short, random or oracle"
            ) from None
    cache = _cache_from(ctx, data, cache_path, cfg, out_dir, quiet, "backtest")
    n_folds = cfg.folds.n_folds
    if fold is not None and not 0 <= fold < n_folds:
        raise FoxhuntError("--fold", f"fold {fold} does not exist", f"use 0..{n_folds - 1}")
    with step(f"backtesting {kind.value}", quiet):
        body = run_backtest(cache, cfg, kind, out_dir, fold=fold)
    write_resolved(cfg, out_dir / "backtest.config.json")
    out.print(
        f"{kind.value}: net {body['net_pnl']:,.0f} (gross {body['gross_pnl']:,.0f}, "
        f"costs {body['costs']:,.0f}), {body['trades']} trades, Sharpe {body['sharpe_annual']:.2f} "
        f"at {body['bars_per_year']:,.0f} bars/year, "
        f"max drawdown {body['max_drawdown']:.2%}"
        + ("; IMPLAUSIBLE: " + "; ".join(body["implausible_reasons"]) if body["implausible"] else "")
    )


# --- training and the main job ----------------------------------------------------------------


@app.command("train", context_settings=MANY_PATHS)
@_fails_cleanly
def train_cmd(
    ctx: typer.Context,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Run folder: checkpoints, TensorBoard, folds.json.")
    ] = None,
    data: Annotated[list[Path] | None, typer.Option("--data", help=DATA_HELP)] = None,
    cache_path: Annotated[Path | None, typer.Option("--cache", help="A feature cache built before.")] = None,
    resume: Annotated[
        Path | None,
        typer.Option("--resume", help="Continue an interrupted run in this folder (instead of --out)."),
    ] = None,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Walk-forward training: per fold, epochs of collection from parallel episodes, learner
    updates and a validation backtest; checkpoints (best, last, ring), TensorBoard diagnostics,
    anomaly guard and plateau handling. Writes folds.json with each fold's validation metrics."""
    from foxhunt.train.run import train

    cfg = _config(profile, config, list(set_ or []))
    if (out_dir is None) == (resume is None):
        raise FoxhuntError(
            "--out/--resume", "pass exactly one of --out or --resume", "see foxhunt train --help"
        )
    out_dir = resume if resume is not None else out_dir
    assert out_dir is not None
    cache = _cache_from(ctx, data, cache_path, cfg, out_dir, quiet, "train")
    write_resolved(cfg, out_dir / "train.config.json")
    folds = train(cache, cfg, out_dir, resume=resume is not None, log=out.print)
    for f in folds:
        out.print(
            f"fold {f['fold']}: net {f['net_pnl']:,.0f} (flat {f['baselines']['flat']['net_pnl']:,.0f}, "
            f"long {f['baselines']['long']['net_pnl']:,.0f}), Sharpe {f['sharpe_annual']:.2f}, "
            f"{f['trades']} trades"
        )


@app.command("run", context_settings=MANY_PATHS)
@_fails_cleanly
def run_cmd(
    ctx: typer.Context,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Run folder: report.html, metrics.json, all stages.")
    ],
    data: Annotated[
        list[Path] | None,
        typer.Option("--data", help=DATA_HELP + " Default: the embedded synthetic market (planted alpha)."),
    ] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted run in --out.")] = False,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """The main job: (synthetic market when no --data) -> leak guard -> features -> alpha check ->
    walk-forward training -> validation backtests against flat and long -> report.html and
    metrics.json. Uses the GPU when one is present (run.device = auto)."""
    from foxhunt.job import run_job

    cfg = _config(profile, config, list(set_ or []))
    files = _data_paths(data, ctx) if data else None
    summary = run_job(
        cfg,
        out_dir,
        files,
        log=(lambda _m: None) if quiet else out.print,
        resume=resume,
        profile=profile or ("file" if config else "default"),
    )
    s = summary["summary"]
    out.print(
        f"mean validation net {s['mean_net_pnl']:,.0f}, Sharpe {s['mean_sharpe_annual']:.2f}; "
        f"beats flat in {s['beats_flat_folds']}/{len(summary['folds'])} folds, "
        f"long in {s['beats_long_folds']}/{len(summary['folds'])}; report: {out_dir / 'report.html'}"
    )


# --- checks ---------------------------------------------------------------------------------


@check_app.command("leaks", context_settings=MANY_PATHS)
@_fails_cleanly
def check_leaks_cmd(
    ctx: typer.Context,
    data: Annotated[list[Path], typer.Option("--data", help=DATA_HELP)],
    row_unit: Annotated[
        RowUnit | None, typer.Option("--row-unit", help="bar or snapshot (default: config).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Future-perturbation leak check: change every event after a cut, recompute the features,
    and require every row at or before the cut to be identical. Exits 3 naming leaking columns."""
    from foxhunt.data.ingest import load_market
    from foxhunt.validation.leaks import LeakFoundError, check_leaks

    overrides = list(set_ or []) + ([f"data.row_unit={row_unit.value}"] if row_unit else [])
    cfg = _config(profile, config, overrides)
    with step("checking for look-ahead leaks", quiet):
        report = check_leaks(load_market(_data_paths(data, ctx), cfg.data), cfg)
    if as_json:
        out.print_json(json.dumps(report.to_dict()))
    else:
        for c in report.cuts:
            out.print(
                f"cut {iso_utc(c.t)}: {c.rows_checked:,} rows checked, "
                + ("clean" if not c.leaking_columns else f"LEAK in {', '.join(c.leaking_columns)}")
            )
    if not report.clean:
        raise LeakFoundError(
            "features",
            f"look-ahead leak in {', '.join(report.leaking_columns)}",
            "fix the named columns so they use only data at or before each row",
        )
    if not as_json:
        out.print(f"no leak: {report.columns} columns x {report.rows:,} rows, {len(report.cuts)} cuts")


def run() -> None:  # pragma: no cover - console script shim for `python -m foxhunt`
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
