"""The four commands that chain the stages: ``train``, ``run`` (the main job), ``seeds`` and ``tune``.

Moved here from the old ``cli.py`` as they were; the pipeline module (issue 55 item 1) replaces their
bodies with short parse -> pipeline -> present ones, and with that their exemption from the
60-line rule (tests/test_cli_thin.py) goes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from foxhunt.cli import present
from foxhunt.cli.common import (
    cache_from,
    config_of,
    data_paths,
    market_files,
    remembered,
    reporter,
    set_keys,
    step,
    training_config,
    write_resolved,
)
from foxhunt.cli.options import (
    DATA_HELP,
    ConfigOpt,
    OverwriteOpt,
    ProfileOpt,
    QuietOpt,
    RayAddressOpt,
    SetOpt,
    TrackingOpt,
    VerboseOpt,
)
from foxhunt.cli.present import out
from foxhunt.console import idle_note
from foxhunt.errors import FoxhuntError
from foxhunt.outputs import Keep


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
    from foxhunt.backtest.reference import planted_column
    from foxhunt.features.cache import config_from_cache
    from foxhunt.outputs import claim_run
    from foxhunt.stages import Stopped, leak_guard_while
    from foxhunt.tracking import tracked_run
    from foxhunt.train.run import RECORDED_CONFIG, RUN_RESULTS, train, warm_compile
    from foxhunt.validation.leaks import Prepared, cache_sources

    progress = reporter(quiet, verbose)
    cfg = config_of(profile, config, list(set_ or []))
    if (out_dir is None) == (resume is None):
        raise FoxhuntError(
            "--out/--resume", "pass exactly one of --out or --resume", "see foxhunt train --help"
        )
    out_dir = resume if resume is not None else out_dir
    assert out_dir is not None
    asked = set_keys(list(set_ or []))
    if cache_path is not None and data is None:  # the config as it will run: the cache's own settings
        cfg = config_from_cache(cache_path, cfg, asked)
        asked = None  # the cache is opened with that config as it is
    # Before anything is built or written: a finished run is not replaced unasked, and a resume
    # runs the whole config the run recorded.
    claim_run(out_dir, cfg, RECORDED_CONFIG, RUN_RESULTS, resume=resume is not None, overwrite=overwrite)
    # The leak guard on the DBN files: before anything is built from them with --data; with --cache,
    # on the files the cache was built from (they must still be where they were).
    # While the guard's cuts run in forked processes: the cache (with --data, from the guard's
    # reading) and training's compiles on a GPU (foxhunt.train.run.warm_compile), used only once the
    # guard has passed; on a leak a cache built here is removed.
    if cache_path is None and data is not None:
        files = data_paths(data, ctx)

        def build_and_compile(prepared: Prepared) -> tuple[Any, float]:
            built, _ = cache_from(ctx, data, None, cfg, out_dir, progress, "train", asked, prepared)
            return built, warm_compile(built, cfg)

        leaks, (cache, compile_s) = leak_guard_while(
            files, cfg, "foxhunt train", Stopped.TRAINING, progress, present.line, build_and_compile,
            builds=out_dir / "cache",
        )  # fmt: skip
    else:
        cache, cfg = cache_from(ctx, data, cache_path, cfg, out_dir, progress, "train", asked)
        files = cache_sources(cache, cache_path)
        leaks, compile_s = leak_guard_while(
            files, cfg, "foxhunt train", Stopped.TRAINING, progress, present.line,
            lambda _: warm_compile(cache, cfg),
        )  # fmt: skip
    if compile_s:
        present.line(f"training's steps compiled in {compile_s:.0f}s, beside the leak guard's cuts")
    named = profile or ("file" if config else "default")
    resumed = resume is not None
    with tracked_run(
        out_dir.name, cfg, tracking_uri, command="train", profile=named, out=out_dir, resume=resumed
    ) as tracker:
        folds = train(  # records its config (train.config.json) once the checks above have passed
            cache,
            cfg,
            out_dir,
            resume=resume is not None,
            overwrite=overwrite,
            progress=progress,
            leak_guard=leaks.summary(),
            planted=planted_column(files),
            on_epoch=tracker.epoch_hook(),
        )
        tracker.log_folds(folds, out_dir)
        tracker.log_artifact(out_dir / "folds.json")
        tracker.log_artifact(out_dir / RECORDED_CONFIG)
    for f in folds:
        out.print(f"fold {f['fold']}: " + present.fold_line(f), markup=False)
    present.checkpoints_line(folds, out_dir)
    out.print(
        f"mean validation net {sum(f['net_pnl'] for f in folds) / max(len(folds), 1):,.0f} over "
        f"{len(folds)} folds, {sum(f['trades'] for f in folds)} agent trades"
        + idle_note([f["trades"] for f in folds])
        + f"; {out_dir / 'folds.json'}",
        markup=False,
    )


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
    from foxhunt.domain.baselines import Baseline, label
    from foxhunt.job import run_job

    progress = reporter(quiet, verbose)
    cfg, profile = training_config(profile, config, list(set_ or []), progress)
    files = data_paths(data, ctx) if data else None
    if files and not resume:  # a resume runs the config its run recorded
        cfg = remembered(files, cfg, out_dir, set_)
    summary = run_job(
        cfg,
        out_dir,
        files,
        progress=progress,
        resume=resume,
        overwrite=overwrite,
        profile=profile or ("file" if config else "default"),
        tracking_uri=tracking_uri,
    )
    s, folds = summary["summary"], summary["folds"]
    n = len(folds)
    present.checkpoints_line(folds, out_dir / "train")
    out.print(
        f"mean validation net {s['mean_net_pnl']:,.0f}, {sum(f['trades'] for f in folds)} agent trades"
        + idle_note([f["trades"] for f in folds])
        + f"; beats flat in {s['beats_flat_folds']}/{n} folds, "
        f"{label(Baseline.LONG)} in {s['beats_long_folds']}/{n}, "
        f"{label(Baseline.BUY_HOLD)} in {s['beats_buy_hold_folds']}/{n}; report: {out_dir / 'report.html'}",
        markup=False,
    )


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
    from foxhunt.atomic import write_json
    from foxhunt.backtest.reference import edge, planted_column
    from foxhunt.features.cache import get_or_build
    from foxhunt.outputs import claim_folder
    from foxhunt.parallel.resources import spread
    from foxhunt.report.plots import plot_seeds
    from foxhunt.stages import Stopped, leak_guard_prepared
    from foxhunt.tracking import tracked_run
    from foxhunt.train.run import resolve_device
    from foxhunt.train.seeds import (
        SEEDS_FILE,
        SEEDS_PLOT,
        capture_lines,
        capture_text,
        committee_result,
        prune_checkpoints,
        run_seeds,
        seed_folder,
        summarise_seeds,
    )

    try:
        chosen = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        chosen = []
    if not chosen or len(set(chosen)) != len(chosen) or min(chosen) < 0:
        raise FoxhuntError("--seeds", f"{seeds!r} is not a list of distinct seeds", "pass e.g. --seeds 7,8,9")
    if workers < 1:
        raise FoxhuntError("--workers", f"{workers} workers", "pass --workers 1 or more")
    progress = reporter(quiet, verbose)
    cfg, profile = training_config(profile, config, list(set_ or []), progress)
    # The seed runs live under out_dir, so claiming it claims them (each is retrained from scratch).
    finished = (SEEDS_FILE, "seeds.config.json", *(seed_folder(Path(), s).name for s in chosen))
    claim_folder(out_dir, finished, overwrite=overwrite)
    files = market_files(ctx, data, cfg, out_dir)
    _, prepared = leak_guard_prepared(files, cfg, "foxhunt seeds", Stopped.TRAINING, progress, present.line)
    cache = get_or_build(files, cfg, out_dir / "cache", progress=progress, prepared=prepared)
    del prepared
    with step("reference rule and baselines per fold", progress):
        try:
            reference = edge(cache, cfg)
        except FoxhuntError:  # the rule's feature family is off: the seeds still train, capture is n/a
            reference = None
    write_resolved(cfg, out_dir / "seeds.config.json")
    named = profile or ("file" if config else "default")
    tags = {"foxhunt.seeds": ",".join(map(str, chosen))}
    with tracked_run(
        out_dir.name, cfg, tracking_uri, command="seeds", profile=named, out=out_dir, tags=tags
    ) as study:
        with step(f"training {len(chosen)} seeds, {min(workers, len(chosen))} at once", progress):
            results = run_seeds(
                cfg,
                cache.path,
                chosen,
                out_dir,
                workers=workers,
                planted=planted_column(files),
                tracking=study.child(),
                address=ray_address,
                say=lambda line: out.print(line, markup=False),
            )
        runs = [seed_folder(out_dir, r.seed) for r in results if not r.stopped]
        with step(f"the committee of {len(runs)} seeds per fold", progress):
            committee = committee_result(cache.path, cfg, runs, device=str(resolve_device(cfg)))
        summary = summarise_seeds(results, reference, committee) | {
            "profile": profile,
            "sets": list(set_ or []),
        }
        write_json(out_dir / SEEDS_FILE, summary, indent=2, default=float)
        plot_seeds(summary, out_dir / SEEDS_PLOT)
        study.log_results(
            {
                "capture_mean": summary["capture"]["mean"],
                "capture_median_per_fold": summary["capture_per_fold"]["median"],
                "capture_all_folds_mean": summary["capture_all_folds"]["mean"],  # as before issue 58
                "net_pnl_total_mean": summary["net_pnl_total"]["mean"],
                "beats_flat": summary["beats_flat"],
                "finished": summary["finished"],
            }
        )
        for name in (SEEDS_FILE, SEEDS_PLOT, "seeds.config.json"):
            study.log_artifact(out_dir / name)
    if keep is Keep.REPORTED:  # after the committee, which reads the reported checkpoints
        pruned = [prune_checkpoints(run) for run in runs]
        files, size = sum(n for n, _ in pruned), sum(b for _, b in pruned)
        out.print(f"--keep reported: deleted {files} checkpoint files ({size / 1e6:,.0f} MB)", markup=False)
    for r in results:
        if r.stopped:
            out.print(f"seed {r.seed}: stopped ({r.stopped})", markup=False)
            continue
        nets = " / ".join(f"{f.net_pnl:+,.0f}" for f in r.folds)
        of = f" (a committee of {cfg.train.members} members)" if cfg.train.members > 1 else ""
        cap = capture_text(r.captures)
        out.print(f"seed {r.seed}{of}: net {nets} (total {r.total:+,.0f}), {cap}", markup=False)
    if committee is not None:
        nets = " / ".join(f"{f.net_pnl:+,.0f}" for f in committee.folds)
        out.print(
            f"committee of {len(runs)}{f' x {cfg.train.members} members' if cfg.train.members > 1 else ''}: "
            f"net {nets} (total {committee.total:+,.0f}), {capture_text(committee.captures)}",
            markup=False,
        )
    if (where := spread(summary["devices"])) is not None:
        out.print(f"seeds {where}", markup=False)
    for line in capture_lines(summary):
        out.print(line, markup=False)
    traded = [sum(f.trades for f in r.folds) for r in results if not r.stopped]
    out.print(
        f"{summary['beats_flat']}/{summary['finished']} beat flat"
        + idle_note(traded, "seed")
        + f"; {out_dir / SEEDS_FILE}",
        markup=False,
    )


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
    import shutil
    import time

    from foxhunt.backtest.reference import planted_column
    from foxhunt.features.cache import get_or_build
    from foxhunt.outputs import check_writable
    from foxhunt.parallel.resources import spread
    from foxhunt.stages import Stopped, leak_guard_prepared
    from foxhunt.tracking import tracked_run
    from foxhunt.tune.config import Objective
    from foxhunt.tune.export import undecided_text, write_best
    from foxhunt.tune.objective import rule_on_selection, trial_config
    from foxhunt.tune.report import REPORT_FILE, SUMMARY_FILE, write_outputs
    from foxhunt.tune.study import TRIALS_DIR, Work, auto_gpus, check_storage, default_storage, run_study

    if workers < 1:
        raise FoxhuntError("--workers", f"{workers} workers", "pass --workers 1 or more")
    if trials is not None and trials < 1:
        raise FoxhuntError("--trials", f"{trials} trials", "pass --trials 1 or more")
    t0 = time.perf_counter()
    progress = reporter(quiet, verbose)
    cfg, profile = training_config(
        profile, config, [*(set_ or []), *([f"tune.trials={trials}"] if trials else [])], progress
    )
    named = profile or (str(config) if config else "default")
    if not cfg.tune.params:
        raise FoxhuntError(
            f"profile {named}" if not config else str(config),
            "has no [tune] params: there is nothing to search",
            'add tables such as [tune.params."agent.learn.lr"] (docs/tune.md) or tune another profile',
        )
    # The study's config from here on is the trials' (train_tail under a profile's selection = last);
    # best.toml sets the best parameters on the profile's own (asked).
    asked = cfg
    cfg, overridden = trial_config(cfg)
    if storage is not None:
        check_storage(storage)
    check_writable(out_dir, folder=True)
    if overridden:  # once the arguments are known good: a refusal stays one line
        present.line(overridden)
    out_dir = out_dir.absolute()  # workers (Ray tasks, spawned processes) may start elsewhere
    url = storage or default_storage(out_dir)
    name = study_name or out_dir.name
    if overwrite:
        shutil.rmtree(out_dir / TRIALS_DIR, ignore_errors=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = market_files(ctx, data, cfg, out_dir)
    _, prepared = leak_guard_prepared(files, cfg, "foxhunt tune", Stopped.TUNING, progress, present.line)
    cache = get_or_build(files, cfg, out_dir / "cache", progress=progress, prepared=prepared)
    del prepared
    if cfg.tune.objective is Objective.CAPTURE:
        with step("reference rule over the selection periods (the capture's denominator)", progress):
            rule = rule_on_selection(cache, cfg)  # a FoxhuntError names the missing feature
        if rule <= 0:
            raise FoxhuntError(
                "tune.objective",
                f"capture is undefined: the reference rule makes {rule:,.0f} over the selection periods",
                "use objective = net_pnl on this market",
            )
    write_resolved(cfg, out_dir / "tune.config.json")
    with tracked_run(
        name, cfg, tracking_uri, command="tune", profile=named, out=out_dir, tags={"optuna.study": name}
    ) as parent:
        work = Work(url, name, cfg, out_dir, cache.path.absolute(), planted_column(files), parent.child())
        with step(f"tuning: {cfg.tune.trials} trials, {workers} at once", progress):
            study = run_study(
                work,
                workers=workers,
                address=ray_address,
                gpus_per_trial=auto_gpus(cfg.tune, workers),
                overwrite=overwrite,
                say=progress.say,
            )
        best = write_best(asked, study, out_dir)
        summary = write_outputs(study, cfg, url, time.perf_counter() - t0, out_dir)
        parent.log_results(
            {"best_value": (summary["best"] or {}).get("value"), "trials": summary["trials_counted"]}
        )
        for path in (out_dir / REPORT_FILE, out_dir / SUMMARY_FILE, best):
            if path is not None:
                parent.log_artifact(path)
    states = ", ".join(f"{n} {k.lower()}" for k, n in summary["states"].items())
    out.print(f"study {name}: {summary['trials_counted']}/{cfg.tune.trials} trials ({states})", markup=False)
    if (where := spread(summary["devices"])) is not None:
        out.print(f"trials {where}", markup=False)
    if summary["best"] is None:
        out.print("no trial completed: no best profile written", markup=False)
    elif (und := summary["undecided"]) is not None:
        out.print(
            f"{undecided_text(und['value'], und['trials'])} ({cfg.tune.objective.value} over the selection "
            f"periods): no best trial; {best} holds trial {summary['best']['number']}'s parameters, "
            f"the first; report {out_dir / REPORT_FILE}",
            markup=False,
        )
    else:
        b = summary["best"]
        params = ", ".join(f"{k}={v!r}" for k, v in b["params"].items())
        val = b["validation"]
        shown = {k: "n/a" if val.get(k) is None else f"{val[k]:,.6g}" for k in ("value", "last_fold")}
        out.print(
            f"best: trial {b['number']}, {cfg.tune.objective.value} {b['value']:,.6g} over the selection "
            f"periods (ranked on) ({params}); validation {shown['value']}, last fold {shown['last_fold']} "
            f"({REPORT_FILE} says which is out of sample); profile {best}; report {out_dir / REPORT_FILE}",
            markup=False,
        )

