"""``foxhunt serve`` (a trained agent on a replay or the live feed, paper execution) and
``foxhunt export`` (the weights-only export it reads)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from foxhunt.cli import present
from foxhunt.cli.common import config_of, data_paths, reporter, step
from foxhunt.cli.options import ConfigOpt, OverwriteOpt, ProfileOpt, QuietOpt, SetOpt, VerboseOpt
from foxhunt.errors import FoxhuntError

if TYPE_CHECKING:
    from foxhunt.config.models import FoxhuntConfig

ExportsOpt = Annotated[
    list[Path],
    typer.Option(
        "--checkpoint",
        metavar="FILE",
        help="A weights-only export with its fold's normaliser (foxhunt export CKPT --out F --cache C). "
        "Repeated: a committee of one fold's exports (the argmax of their mean E[Q]), as foxhunt "
        "backtest judges it.",
    ),
]
ReplayOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--replay",
        metavar="PATH...",
        help="DBN files or folders to replay, as --data takes them (definition files are left out).",
    ),
]
SpeedOpt = Annotated[
    str, typer.Option("--speed", metavar="X|max", help="Replay pace: X times the recorded pace, or max.")
]
LiveOpt = Annotated[
    str | None, typer.Option("--live", metavar="DATASET", help="Databento live dataset, e.g. GLBX.MDP3.")
]
SymbolsOpt = Annotated[
    list[str] | None, typer.Option("--symbols", metavar="SYMBOL", help="Live symbols, e.g. ES.c.0.")
]
PortOpt = Annotated[
    int | None,
    typer.Option("--port", metavar="P", help="HTTP interface on HOST:P (/, /state, /metrics ...)."),
]
HostOpt = Annotated[
    str,
    typer.Option(
        "--host", metavar="HOST", help="Bind --port here; beyond loopback needs FOXHUNT_SERVE_TOKEN."
    ),
]


def serve_cmd(
    ctx: typer.Context,
    checkpoint: ExportsOpt,
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Folder for ledger.sqlite, decisions.csv, summary.")
    ],
    replay: ReplayOpt = None,
    speed: SpeedOpt = "max",
    live: LiveOpt = None,
    symbols: SymbolsOpt = None,
    port: PortOpt = None,
    host: HostOpt = "127.0.0.1",
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
    cfg = config_of(profile, config, set_)
    device, decide = _decision_side(cfg, live is not None)
    source = _source(ctx, cfg, replay, live, symbols, speed)
    log = (lambda m: None) if quiet else (lambda m: present.console.print(m, highlight=False, soft_wrap=True))
    reporter(quiet, verbose)  # --quiet with --verbose: one line
    present.source_notes(log, source, cfg.serve.max_gap_seconds, speed)
    from foxhunt.serve.service import Service

    service = Service(
        checkpoint, source, out_dir, cfg.serve, device=str(device), log=log, log_rows=verbose, decide=decide
    )
    log(present.decide_line(cfg.serve.decide, decide))
    summary = _serve(service, port, host, log)
    if service.decider.compile_times:
        took = ", ".join(f"{k} {v:.0f} s" for k, v in service.decider.compile_times.items())
        log(f"decision side {decide.value}: compiled or loaded in {took}")
    present.served(summary, out_dir / "decisions.csv")


def _decision_side(cfg: FoxhuntConfig, live: bool) -> tuple[Any, Any]:
    """The device of ``serve.device`` and the decision path of ``serve.decide``, checked before
    anything is loaded: cuda asked for and absent, or a compiled path without a C++ compiler, is one
    line now, not a traceback at the first decision."""
    from foxhunt.serve.config import DecidePath
    from foxhunt.serve.decide import check_compilable
    from foxhunt.serve.service import check_decide_device
    from foxhunt.train.run import device_of

    device = device_of(cfg.serve.device, "serve.device")
    decide = cfg.serve.decide.resolve(live, device.type)
    check_decide_device(decide, device)
    if decide is not DecidePath.EAGER:
        check_compilable()
    return device, decide


def _source(
    ctx: typer.Context,
    cfg: FoxhuntConfig,
    replay: list[Path] | None,
    live: str | None,
    symbols: list[str] | None,
    speed: str,
) -> Any:
    """The market source of ``--live DATASET`` (its key checked now) or ``--replay PATH...`` at
    ``--speed``; a paced replay jumps the recorded gaps the monitor calls gaps (serve.max_gap_seconds)."""
    from foxhunt.serve.source import LiveSource, ReplaySource, api_key

    if live is not None:
        api_key()  # no key: one line, before anything is loaded
        return LiveSource(live, symbols or ["ES.c.0"])
    pace = None if speed == "max" else float(speed) if speed.replace(".", "", 1).isdigit() else -1.0
    if pace is not None and pace <= 0:
        raise FoxhuntError("--speed", f"{speed!r} is not a positive number or max", "e.g. --speed 10")
    files = data_paths(replay or [], ctx)
    return ReplaySource(files, speed=pace, jump_gap_seconds=cfg.serve.max_gap_seconds)


def _serve(service: Any, port: int | None, host: str, log: Callable[[str], None]) -> dict[str, Any]:
    """Run the service to its end, with the HTTP interface on ``host:port`` when a port is given;
    the server and the service are closed however it ends."""
    server = None
    try:
        if port is not None:
            from foxhunt.serve.http import start_status_server

            server = start_status_server(service, port, host)
            log(f"HTTP interface on {server.url} (/, /state, /decisions, /metrics)")
        return service.run()
    finally:
        if server is not None:
            server.close()
        service.close()


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
    with step("exporting the weights", reporter(quiet, verbose)):
        path = export_weights(source, out_path, cache=cache_path)
    present.exported(source, path, cache_path is not None)
