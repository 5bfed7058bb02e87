"""``foxhunt data``: inspect DBN files, rebuild books from MBO, the synthetic market, bars."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from foxhunt.cli import present
from foxhunt.cli.common import config_of, data_paths, reporter, step, write_resolved
from foxhunt.cli.options import (
    ConfigOpt,
    DataOpt,
    JsonOpt,
    OverwriteOpt,
    ProfileOpt,
    QuietOpt,
    SetOpt,
    VerboseOpt,
)
from foxhunt.data.schemas import RowUnit, Schema
from foxhunt.errors import FoxhuntError


def data_inspect(
    paths: Annotated[list[Path], typer.Argument(metavar="PATH", help="DBN files or directories of them.")],
    as_json: JsonOpt = False,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Per file: schema, dataset, records, instruments, time span; for book data the share of
    crossed/locked states and the median spread in ticks."""
    from foxhunt.data.inspect import inspect_files

    progress = reporter(quiet, verbose)
    cfg = config_of(profile, config, set_)
    with step("inspecting", progress):
        reports = inspect_files(paths, cfg.data, cfg.instrument)
    if as_json:
        present.as_json({"files": reports})
    else:
        present.inspected(reports)


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

    progress = reporter(quiet, verbose)
    cfg = config_of(profile, config, set_)
    claim_file(out_path, overwrite=overwrite)
    f, mbo = read_dbn(source, expect=Schema.MBO)
    with step("rebuilding book", progress):
        result = rebuild_book(mbo, levels=Schema.MBP_10.levels)  # type: ignore[arg-type]
        write_book(out_path, result.book, symbols=f.instrument_symbols, dataset=f.dataset)
    stem = out_path.name.removesuffix(".zst").removesuffix(".dbn")
    write_resolved(cfg, out_path.with_name(f"{stem}.config.json"))
    present.rebuilt(result, out_path)


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

    progress = reporter(quiet, verbose)
    asked = {"seed": seed, "sessions": sessions, "alpha": alpha, "events_per_session": events_per_session}
    overrides = list(set_ or []) + [f"synth.{k}={v}" for k, v in asked.items() if v is not None]
    cfg = config_of(profile, config, overrides)
    try:
        wanted = tuple(Schema(s.strip()) for s in schemas.split(",") if s.strip())
    except ValueError as exc:
        raise FoxhuntError("--schemas", str(exc), "use mbp-10, trades, mbo, ohlcv-1m") from None
    claim_folder(out_dir, (MANIFEST_NAME, "synth.config.json"), overwrite=overwrite)
    with step(f"simulating {cfg.synth.sessions} session(s)", progress):
        files = write_synthetic(cfg.synth, out_dir, schemas=wanted)
    write_resolved(cfg, out_dir / "synth.config.json")
    present.each(files)


def data_bars(
    ctx: typer.Context,
    data: DataOpt,
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

    progress = reporter(quiet, verbose)
    cfg = config_of(profile, config, set_)
    paths = data_paths(data, ctx)
    claim_folder(out_dir, ("bars.arrow", "snapshots.arrow", "bars.config.json"), overwrite=overwrite)
    with step("ingesting and building " + ("bars" if cfg.data.row_unit is RowUnit.BAR else "rows"), progress):
        summary = build_and_write(paths, cfg.data, out_dir, config_hash(cfg), progress)
    write_resolved(cfg, out_dir / "bars.config.json")
    present.bars(summary)
