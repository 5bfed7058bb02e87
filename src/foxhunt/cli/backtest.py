"""``foxhunt backtest`` (a scripted policy or checkpoints over the validation periods) and
``foxhunt edge`` (the reference rule of the planted signal beside the baselines)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from foxhunt.cli import present
from foxhunt.cli.common import (
    cache_from,
    config_of,
    data_paths,
    market_files,
    one_source,
    reporter,
    set_keys,
    step,
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
    SynthDataOpt,
    VerboseOpt,
)
from foxhunt.errors import FoxhuntError

if TYPE_CHECKING:
    from foxhunt.config.models import FoxhuntConfig

CheckpointsOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--checkpoint",
        metavar="FILE",
        help="A trained checkpoint (the one foxhunt run/train prints: RUN/checkpoints/fold<k>/last or "
        "best.safetensors) instead of --policy; "
        "judged on its own fold's validation period. Repeated: a committee of that fold's "
        "checkpoints (the argmax of their mean E[Q]).",
    ),
]


def backtest_cmd(
    ctx: typer.Context,
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Folder for metrics.json, trades.csv, equity.png.")
    ],
    policy: Annotated[
        str, typer.Option(metavar="NAME", help="Scripted policy: flat, long, short, random or oracle.")
    ] = "flat",
    data: MaybeDataOpt = None,
    cache_path: CacheOpt = None,
    checkpoint: CheckpointsOpt = None,
    fold: Annotated[
        int | None, typer.Option(help="One fold (default: every fold's validation period).")
    ] = None,
    row_unit: RowUnitOpt = None,
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
    from foxhunt.backtest.run import run_backtest
    from foxhunt.backtest.settings import BacktestSettings
    from foxhunt.outputs import claim_folder

    progress = reporter(quiet, verbose)
    overrides = with_row_unit(set_, row_unit)
    cfg = config_of(profile, config, overrides)
    claim_folder(out_dir, ("metrics.json", "trades.csv", "backtest.config.json"), overwrite=overwrite)
    kind, cfg = _policy(policy, checkpoint, cfg)
    asked = None if checkpoint else set_keys(overrides)
    if data is not None and cache_path is None:
        from foxhunt.data.instrument import instrument_of_files

        instrument_of_files(data_paths(data, ctx), cfg.instrument)  # an unknown contract: refused now
    n_folds = cfg.folds.n_folds  # the folds are the config's, not the cache's: refused before the guard
    if fold is not None and not 0 <= fold < n_folds:
        raise FoxhuntError("--fold", f"fold {fold} does not exist", f"use 0..{n_folds - 1}")
    cache, cfg = cache_from(ctx, data, cache_path, cfg, out_dir, progress, "backtest", asked)
    body = run_backtest(cache, BacktestSettings.of(cfg), kind, out_dir, fold=fold, progress=progress)
    write_resolved(cfg, out_dir / "backtest.config.json")
    present.backtested(kind.value, body)


def _policy(name: str, checkpoint: list[Path] | None, cfg: FoxhuntConfig) -> tuple[Any, FoxhuntConfig]:
    """The policy of ``--checkpoint`` (one, or a committee of several) or else ``--policy NAME``, and
    the config to judge it with: a checkpoint's own resolved config (its widths, branches, folds)."""
    from foxhunt.backtest.evaluate import ScriptedPolicy

    if checkpoint:
        from foxhunt.policy.trained import CheckpointPolicy, CommitteePolicy

        kind = (
            CheckpointPolicy(checkpoint[0], cfg) if len(checkpoint) == 1 else CommitteePolicy(checkpoint, cfg)
        )
        return kind, kind.cfg
    try:
        return ScriptedPolicy(name), cfg
    except ValueError:
        raise FoxhuntError(
            "--policy", f"unknown policy {name!r}", "use " + ", ".join(p.value for p in ScriptedPolicy)
        ) from None


def edge_cmd(
    ctx: typer.Context,
    out_dir: Annotated[Path, typer.Option("--out", metavar="DIR", help="Folder for edge.json.")],
    data: SynthDataOpt = None,
    cache_path: CacheOpt = None,
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
    from foxhunt import pipeline
    from foxhunt.atomic import write_json
    from foxhunt.backtest.reference import edge
    from foxhunt.backtest.settings import BacktestSettings

    progress = reporter(quiet, verbose)
    cfg = config_of(profile, config, list(set_ or []))
    one_source(data, cache_path, "edge", required=False)  # neither: the embedded synthetic market
    if cache_path is not None:
        cache, cfg = cache_from(ctx, None, cache_path, cfg, out_dir, progress, "edge", set_keys(set_ or []))
    else:
        files = market_files(ctx, data, cfg, out_dir)
        cache = pipeline.guarded_features(
            files, cfg, out_dir / "cache", "foxhunt edge", progress=progress, say=present.line
        )
    with step("reference rule and baselines per fold", progress):
        result = edge(cache, BacktestSettings.of(cfg))
    write_json(out_dir / "edge.json", result, indent=2, default=float)
    write_resolved(cfg, out_dir / "edge.config.json")
    present.edge(result, out_dir / "edge.json")
