"""The four commands that chain the stages: ``train``, ``run`` (the main job), ``seeds`` and ``tune``.

Each is parse -> :mod:`foxhunt.pipeline` -> present (:mod:`foxhunt.cli.present`): the chain itself
(the output folder, the embedded market, the leak guard beside the cache build and the compile
warm-up, the cache, the tracked run) is written once, in the pipeline, for these commands and
for ``foxhunt.api``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from foxhunt.cli import present
from foxhunt.cli.common import (
    config_of,
    data_paths,
    one_source,
    remembered,
    reporter,
    seed_list,
    set_keys,
    training_config,
)
from foxhunt.cli.options import (
    DATA_HELP,
    CacheOpt,
    ConfigOpt,
    OverwriteOpt,
    ProfileOpt,
    QuietOpt,
    RayAddressOpt,
    SetOpt,
    SynthDataOpt,
    TrackingOpt,
    VerboseOpt,
)
from foxhunt.errors import FoxhuntError
from foxhunt.outputs import Keep

# The options only ``tune`` takes.
TuneOutOpt = Annotated[
    Path,
    typer.Option(
        "--out", metavar="DIR", help="Folder for study.db, trials/<n>/, best.toml, tune.html, tune.json."
    ),
]
TrialsOpt = Annotated[
    int | None, typer.Option(metavar="N", help="Trials of the study (default: tune.trials).")
]
StorageOpt = Annotated[
    str | None,
    typer.Option(
        metavar="URL", help="SQLAlchemy URL of the study's database (default: sqlite:///DIR/study.db)."
    ),
]
StudyOpt = Annotated[
    str | None,
    typer.Option("--study", metavar="NAME", help="Study name in the storage (default: DIR's name)."),
]
RestartOpt = Annotated[
    bool, typer.Option("--overwrite", help="Delete the study and its trials and start again.")
]


def train_cmd(
    ctx: typer.Context,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", metavar="DIR", help="Run folder: checkpoints, TensorBoard, folds.json."),
    ] = None,
    data: Annotated[list[Path] | None, typer.Option("--data", metavar="PATH...", help=DATA_HELP)] = None,
    cache_path: CacheOpt = None,
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

    progress = reporter(quiet, verbose)
    cfg = config_of(profile, config, list(set_ or []))
    if (out_dir is None) == (resume is None):
        raise FoxhuntError(
            "--out/--resume", "pass exactly one of --out or --resume", "see foxhunt train --help"
        )
    one_source(data, cache_path, "train")
    if cache_path is not None:  # the config as it will run: the cache's own settings
        cfg = config_from_cache(cache_path, cfg, set_keys(list(set_ or [])))
    summary = pipeline.train(
        cfg,
        resume if resume is not None else out_dir,  # type: ignore[arg-type]  # one of them, checked above
        data_paths(data, ctx) if data is not None else None,
        cache_path=cache_path,
        resume=resume is not None,
        overwrite=overwrite,
        profile=profile or ("file" if config else "default"),
        tracking_uri=tracking_uri,
        progress=progress,
        say=present.line,
    )
    present.training_result(summary)


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

    progress = reporter(quiet, verbose)
    cfg, profile = training_config(profile, config, list(set_ or []), progress)
    files = data_paths(data, ctx) if data else None
    if files and not resume:  # a resume runs the config its run recorded
        cfg = remembered(files, cfg, out_dir, set_)
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
    present.job_result(summary)


def seeds_cmd(
    ctx: typer.Context,
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Folder for seeds.json, seeds.png, a run per seed.")
    ],
    seeds: Annotated[str, typer.Option(metavar="N,N,...", help="Comma-separated run seeds, e.g. 7,8,9.")],
    data: SynthDataOpt = None,
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

    chosen = seed_list(seeds)
    if workers < 1:
        raise FoxhuntError("--workers", f"{workers} workers", "pass --workers 1 or more")
    progress = reporter(quiet, verbose)
    cfg, profile = training_config(profile, config, list(set_ or []), progress)
    summary = pipeline.seeds(
        cfg,
        out_dir,
        chosen,
        data_paths(data, ctx) if data else None,
        workers=workers,
        keep=keep,
        overwrite=overwrite,
        profile=profile,
        tracking_profile=profile or ("file" if config else "default"),
        sets=list(set_ or []),
        tracking_uri=tracking_uri,
        ray_address=ray_address,
        progress=progress,
        say=present.line,
    )
    present.seeds_result(summary)


def tune_cmd(
    ctx: typer.Context,
    out_dir: TuneOutOpt,
    data: SynthDataOpt = None,
    trials: TrialsOpt = None,
    workers: Annotated[int, typer.Option(metavar="N", help="Trials run at once.")] = 1,
    storage: StorageOpt = None,
    study_name: StudyOpt = None,
    ray_address: RayAddressOpt = None,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    overwrite: RestartOpt = False,
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
    progress = reporter(quiet, verbose)
    cfg, profile = training_config(
        profile, config, [*(set_ or []), *([f"tune.trials={trials}"] if trials else [])], progress
    )
    summary = pipeline.tune(
        cfg,
        out_dir,
        data_paths(data, ctx) if data else None,
        profile=profile or (str(config) if config else "default"),
        config_file=config,
        workers=workers,
        storage=storage,
        study_name=study_name,
        ray_address=ray_address,
        overwrite=overwrite,
        tracking_uri=tracking_uri,
        progress=progress,
        say=present.line,
    )
    present.tune_result(summary)
