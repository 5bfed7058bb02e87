"""The one chain behind every front door: prepare, then train, seeds, tune or the main job.

:func:`prepare` claims the output folder, writes the embedded synthetic market when no data is given,
runs the leak guard while the feature cache builds and training's steps compile (in this process,
beside the guard's cuts in forked ones), and returns a :class:`Dataset`: the files, the cache and
the guard's :class:`LeakVerdict` on exactly that cache. :func:`train`, :func:`seeds`, :func:`tune` and
:func:`run_job` (``foxhunt run``: alpha check, training, ``report.html``) each take that path and
return a frozen summary that the caller presents: ``foxhunt.cli`` prints it, :mod:`foxhunt.api`
returns it. Training of any kind starts at :func:`admit`, which refuses a dataset whose verdict the
guard did not give for that very cache, so nothing trains on unguarded data from Python either.

Imports of the stages' code stay inside the functions: the command line imports this module when a
command runs, ``foxhunt --help`` must not wait for them (tests/test_cli.py), and a job on real data
never imports the market simulator (tests/test_job_startup.py).
"""

from __future__ import annotations

import contextlib
import json
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from foxhunt.console import SILENT, Reporter, reporter_or_lines
from foxhunt.errors import FoxhuntError, door

if TYPE_CHECKING:
    from foxhunt.alpha.check import AlphaResult
    from foxhunt.config.models import FoxhuntConfig
    from foxhunt.dataset.leaks import LeakReport
    from foxhunt.dataset.prepared import Prepared
    from foxhunt.features.cache_file import FeatureCache
    from foxhunt.outputs import Keep
    from foxhunt.tracking import TrackedRun
    from foxhunt.train.members import MemberRuns
    from foxhunt.tune.seeds import SeedResult
    from foxhunt.validation.config import FoldConfig

T = TypeVar("T")

LEAK_GUARD = "leak guard"
"""The guard's step name in the progress display (every command shows the same one)."""

# The main job's resolved config, written once its data has been read: a resume is compared with it.
RECORDED_CONFIG = "run.config.json"
# What a started job leaves in its folder: a new job there needs --overwrite (or --resume).
JOB_RESULTS = (RECORDED_CONFIG, "metrics.json", "report.html", "train")


class Stopped(StrEnum):
    """What a leak stops: the end of the guard's error line (``... : nothing is trained on a leak``)."""

    TRAINING = "nothing is trained on a leak"
    TUNING = "nothing is tuned on a leak"
    ALPHA = "no alpha result is reported on a leak"
    BACKTEST = "no backtest is reported on a leak"


# --- the guard's verdict and the prepared dataset ------------------------------------------------

# Every verdict the guard step gave in this process (by identity): one built by hand, copied with
# dataclasses.replace or unpickled is not among them, so it admits nothing.
_GIVEN: weakref.WeakSet[LeakVerdict] = weakref.WeakSet()


@dataclass(frozen=True, eq=False)
class LeakVerdict:
    """The leak guard's pass of one feature cache: given only by the guard step of this module
    (:func:`prepare`), after a clean report, for the cache object it built or opened from the files
    it checked, under the fold settings it checked."""

    report: LeakReport
    cache: FeatureCache
    cache_key: str  # the cache's key when checked: its sources' SHA-256, cached settings, code
    folds: FoldConfig  # the folds whose scalers and purge the guard checked


@dataclass(frozen=True, eq=False)
class Dataset:
    """Prepared data: the DBN files, the feature cache built from them, the guard's verdict on it."""

    files: tuple[Path, ...]
    cache: FeatureCache
    verdict: LeakVerdict
    synthetic: bool = False  # the embedded synthetic market, written by :func:`prepare`
    compile_s: float = 0.0  # seconds training's steps compiled beside the guard's cuts

    @property
    def leaks(self) -> LeakReport:
        return self.verdict.report


class UnguardedDataError(FoxhuntError):
    """Training or a backtest was asked of data the leak guard has not passed (or not this data)."""


class Use(StrEnum):
    """What admitted data is for (:func:`admit`): names the command in a refusal's fix."""

    TRAINING = "train"
    BACKTEST = "backtest"


def _guarded(use: Use) -> str:
    return door(
        f"run foxhunt {use.value} --data ... or --cache ... (the leak guard runs first)",
        "prepare the data with api.build_features(files, cfg, out_dir), which runs the leak guard, and "
        f"{'train on' if use is Use.TRAINING else 'backtest'} what it returns",
    )


def admit(data: object, cfg: FoxhuntConfig, use: Use = Use.TRAINING) -> Dataset:
    """``data`` when it is a :class:`Dataset` whose verdict the guard gave for its very cache, under
    ``cfg``'s folds; else :class:`UnguardedDataError` (one line). Every training path starts here, and
    the API's backtest (``use``: what the data is for, named in the refusal)."""
    where, fix = f"{'training' if use is Use.TRAINING else 'backtest'} data", _guarded(use)
    if not isinstance(data, Dataset):
        what = type(data).__name__
        raise UnguardedDataError(where, f"a {what}, not data the leak guard has passed", fix)
    v = data.verdict
    if v not in _GIVEN or not v.report.clean:
        raise UnguardedDataError(where, "its leak guard verdict was not given by the guard", fix)
    if v.cache is not data.cache or data.cache.meta.get("cache_key") != v.cache_key:
        raise UnguardedDataError(
            data.cache.path, "this feature cache is not the one the leak guard checked", fix
        )
    if cfg.folds != v.folds:
        raise UnguardedDataError(
            "folds",
            "the fold settings differ from those the leak guard checked (purge, embargo, scalers)",
            door(
                f"{use.value} with the fold settings the guard ran under",
                "build the dataset again under this cfg: api.build_features(files, cfg, out_dir)",
            ),
        )
    return data


@dataclass(frozen=True)
class Claim:
    """How a command claims its output folder before any work (:mod:`foxhunt.outputs`): refused when
    it holds one of ``finished`` unless ``overwrite``; with ``recorded``, a run folder whose resume
    (``resume``) must run the config recorded there."""

    finished: tuple[str, ...] = ()
    recorded: str | None = None
    resume: bool = False
    overwrite: bool = False
    then: Callable[[Path], object] | None = None
    """Called with the folder once it is claimed (the main job starts creating its tracking store)."""

    def take(self, out: Path, cfg: FoxhuntConfig) -> Path:
        from foxhunt.outputs import claim_folder, claim_run

        if self.recorded is not None:
            taken = claim_run(
                out, cfg, self.recorded, self.finished, resume=self.resume, overwrite=self.overwrite
            )
        else:
            taken = claim_folder(out, self.finished, overwrite=self.overwrite)
        if self.then is not None:
            self.then(taken)
        return taken


def prepare(
    cfg: FoxhuntConfig,
    out_dir: str | Path,
    data: Sequence[str | Path] | None = None,
    *,
    claim: Claim,
    where: str,
    stops: Stopped = Stopped.TRAINING,
    cache_path: Path | None = None,
    cache_dir: Path | None = None,
    compile_ahead: bool = False,
    regenerate: bool = True,
    progress: Reporter = SILENT,
    say: Callable[[str], object] = print,
) -> Dataset:
    """The data a study runs on, guarded: ``claim`` taken on ``out_dir``; the DBN files ``data``, the
    cache ``cache_path`` (the guard runs on the files it was built from) or, with neither, the
    embedded synthetic market (``cfg.synth``) written into ``out_dir/market`` while the feature
    kernels compile in forked processes; then the leak guard (a leak: :class:`LeakFoundError`, exit
    3, naming ``where`` and what it ``stops``), with, while its cuts run, the feature cache built
    from the guard's reading into ``cache_dir`` (default ``out_dir/cache``; removed again on a leak)
    and, with ``compile_ahead``, training's steps compiled (a GPU's Inductor and CUDA graphs). The
    verdict line goes to ``say``, then the compile time when there was one."""
    out = claim.take(Path(out_dir), cfg)
    synthetic = not data and cache_path is None
    if cache_path is not None:
        opened, files = _cache_and_sources(cache_path, cfg, progress)
        leaks, compile_s = leak_guard_while(
            files, cfg, where, stops, progress, say, lambda _: _compiled(opened, cfg, compile_ahead, progress)
        )
        cache = opened
    else:
        files = _market(cfg, out, progress) if synthetic else list(data or [])
        into = cache_dir if cache_dir is not None else out / "cache"

        def build_and_compile(prepared: Prepared) -> tuple[FeatureCache, float]:
            # Neither is used before the verdict; on a leak the cache built here is removed.
            built = features(files, cfg, into, progress=progress, prepared=prepared, regenerate=regenerate)
            return built, _compiled(built, cfg, compile_ahead, progress)

        leaks, (cache, compile_s) = leak_guard_while(
            files, cfg, where, stops, progress, say, build_and_compile, builds=into
        )
    verdict = LeakVerdict(leaks, cache, str(cache.meta.get("cache_key")), cfg.folds)
    _GIVEN.add(verdict)
    if compile_s:
        say(f"training's steps compiled in {compile_s:.0f}s, beside the leak guard's cuts")
    return Dataset(tuple(Path(p) for p in files), cache, verdict, synthetic, compile_s)


def _market(cfg: FoxhuntConfig, out: Path, progress: Reporter) -> list[Path]:
    """The embedded synthetic market, written into ``out/market``. The feature and label kernels
    compile in forked processes meanwhile (on a machine with idle cores; with numba's cache warm they
    only load): the guard then loads them."""
    from foxhunt.dataset import ahead, warmup
    from foxhunt.parallel.idle import idle_cores

    ahead.wait()  # the simulator's kernels compiled beside the job's imports (foxhunt run), if started
    # Imported here: importing the simulator compiles its eager-signature kernels (~10 s on a cold
    # numba cache), which a job on real data never runs.
    from foxhunt.data.synth import write_synthetic

    warm = warmup.start(cfg, idle_cores())
    what = f"synthetic market: {cfg.synth.sessions} sessions, planted alpha {cfg.synth.alpha}"
    try:
        with progress.task(what):
            files = write_synthetic(cfg.synth, out / "market")
    except BaseException:
        warm.wait(timeout=0)  # nothing will use the kernels: the children are stopped
        raise
    warm.wait()
    return files


def features(
    files: Sequence[str | Path],
    cfg: FoxhuntConfig,
    into: Path,
    *,
    progress: Reporter = SILENT,
    prepared: Prepared | None = None,
    regenerate: bool = True,
    workers: int = 1,
    address: str | None = None,
) -> FeatureCache:
    """The feature cache of ``files`` under ``cfg`` in ``into`` (reused where one exists): the cache
    step of :func:`prepare` (from the guard's reading, ``prepared``), of :func:`guarded_features`
    (``foxhunt backtest`` and ``edge`` over ``--data``) and of ``foxhunt features build``. Rows too
    few for the folds are refused with the bar length that fits
    (:func:`foxhunt.validation.folds.with_bar_fix`), a setting to give once."""
    from foxhunt.dataset.build import get_or_build
    from foxhunt.validation.folds import TooFewRowsError, with_bar_fix

    try:
        return get_or_build(
            files, cfg, into, regenerate=regenerate, progress=progress, prepared=prepared,
            workers=workers, address=address,
        )  # fmt: skip
    except TooFewRowsError as exc:
        raise with_bar_fix(exc, cfg.data, cfg.train) from None


def guarded_features(
    files: Sequence[str | Path],
    cfg: FoxhuntConfig,
    into: Path,
    where: str,
    *,
    cache_path: Path | None = None,
    progress: Reporter = SILENT,
    say: Callable[[str], object] = print,
) -> FeatureCache:
    """:func:`features` of ``files`` built beside the leak guard's cuts, from what the guard read
    (``foxhunt backtest`` and ``edge`` over ``--data``, or edge's embedded synthetic market), or the
    cache ``cache_path`` once the guard has passed the DBN files it was built from (over ``--cache``,
    as :func:`prepare` does for training; ``files`` and ``into`` are not read): a result computed on
    these features is never reported on a leak (:class:`LeakFoundError`, exit 3, naming ``where``; a
    cache built here is removed again, a given one is the caller's and stays). The guard recomputes
    a given cache's features from its files, so they must still be where it recorded them, as they
    were (else exit 2 naming the fix: :func:`foxhunt.dataset.leaks.cache_sources`). The verdict line
    goes to ``say``."""
    if cache_path is not None:
        cache, sources = _cache_and_sources(cache_path, cfg, progress)
        leak_guard_while(sources, cfg, where, Stopped.BACKTEST, progress, say, lambda _: None)
        return cache

    def build(prepared: Prepared) -> FeatureCache:
        return features(files, cfg, into, progress=progress, prepared=prepared)

    return leak_guard_while(files, cfg, where, Stopped.BACKTEST, progress, say, build, builds=into)[1]


def _cache_and_sources(
    cache_path: Path, cfg: FoxhuntConfig, progress: Reporter
) -> tuple[FeatureCache, list[Path]]:
    """The cache of ``cache_path`` opened under ``cfg`` and the DBN files the guard checks for it."""
    from foxhunt.dataset.cache import load_cache
    from foxhunt.dataset.leaks import cache_sources

    with progress.task("opening the feature cache"):
        cache = load_cache(cache_path, cfg)
    return cache, cache_sources(cache, cache_path)


def _compiled(cache: FeatureCache, cfg: FoxhuntConfig, ahead: bool, progress: Reporter) -> float:
    """Seconds training's steps took to compile ahead (0: not asked, or nothing to compile)."""
    if not ahead:
        return 0.0
    from foxhunt.train.run import warm_compile

    with progress.task("compiling training's steps while the guard's cuts run"):
        return warm_compile(cache, cfg)


# --- the leak guard as a step ----------------------------------------------------------------------


def leak_guard_while(
    files: Sequence[str | Path],
    cfg: FoxhuntConfig,
    where: str,
    stops: Stopped,
    progress: Reporter,
    say: Callable[[str], object],
    meanwhile: Callable[[Prepared], T],
    *,
    builds: Path | None = None,
    load_progress: Reporter = SILENT,
) -> tuple[LeakReport, T]:
    """The leak guard on the DBN ``files`` as a step of ``progress``, then ``say`` its verdict; a
    leak raises :class:`~foxhunt.dataset.leaks.LeakFoundError` (exit 3) naming ``where`` it ran
    and what it ``stops``. ``meanwhile(prepared)`` runs while the guard's cuts run in other processes
    (:func:`foxhunt.dataset.leaks.guard_while`): its result when the data is clean. ``builds``: a
    folder ``meanwhile`` may create (a feature cache), removed when the guard refuses the data or
    either fails, unless it was there before: nothing built from refused data stays.
    ``load_progress`` shows the reading of the files (silent by default: a features stage that reads
    them again shows its own bars). ``meanwhile`` may also just keep what the guard read and computed
    on the unperturbed files (``foxhunt alpha``): passed to :func:`foxhunt.dataset.build.get_or_build`
    (``prepared``), a cache built next starts from it instead of reading the files again."""
    import shutil

    from foxhunt.dataset.leaks import guard_while

    removed_on_failure = builds if builds is not None and not builds.exists() else None
    try:
        with progress.task(LEAK_GUARD):
            report, value = guard_while(files, cfg, where, stops.value, meanwhile, load_progress)
    except BaseException:
        if removed_on_failure is not None:
            shutil.rmtree(removed_on_failure, ignore_errors=True)
        raise
    say(report.verdict)
    return report, value


def alpha_horizons(cfg: FoxhuntConfig) -> tuple[int, ...]:
    """The horizons (rows) the alpha check scores: ``alpha.horizons``, else the labels' own."""
    return tuple(cfg.alpha.horizons or cfg.labels.horizons(cfg.data.row_unit))


def alpha_check(
    cache: FeatureCache, cfg: FoxhuntConfig, leaks: LeakReport, progress: Reporter
) -> AlphaResult:
    """The alpha check of ``cache`` over :func:`alpha_horizons`, carrying the guard's report
    (``alpha.json``'s ``leak_guard``: the result says which guard it passed)."""
    from foxhunt.alpha.check import run_alpha

    result = run_alpha(cache, cfg.alpha, cfg.folds, alpha_horizons(cfg), cfg.run.seed, progress=progress)
    result.leak_guard = leaks.to_dict()
    return result


def alpha(
    cfg: FoxhuntConfig,
    out_dir: Path,
    files: list[Path] | None = None,
    *,
    cache: FeatureCache | None = None,
    cache_path: Path | None = None,
    progress: Reporter = SILENT,
    say: Callable[[str], None] = print,
) -> AlphaResult:
    """``foxhunt alpha``'s chain: the leak guard over ``files`` (a given ``cache``: the files it was
    built from), the cache built beside the cuts from what they read (unless given), then
    :func:`alpha_check`. The guard runs first in every case: an alpha verdict on leaky features is
    never computed."""
    from foxhunt.dataset.leaks import cache_sources

    if cache is not None:
        files = cache_sources(cache, cache_path if cache_path is not None else cache.path)
    report, prepared = leak_guard_while(
        files or [],
        cfg,
        "alpha check",
        Stopped.ALPHA,
        progress,
        say,
        lambda kept: kept,
        load_progress=progress,
    )
    if cache is None:
        cache = features(files or [], cfg, out_dir / "cache", progress=progress, prepared=prepared)
    del prepared
    return alpha_check(cache, cfg, report, progress)


# --- training ------------------------------------------------------------------------------------


def train_folds(
    data: Dataset,
    cfg: FoxhuntConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: Reporter | None = None,
    log: Callable[[str], None] = print,
    on_epoch: Callable[[int, int, dict[str, float]], None] | None = None,
    members: MemberRuns | None = None,
) -> list[dict[str, Any]]:
    """Walk-forward training on ``data`` once :func:`admit` has let it through
    (:func:`foxhunt.train.run.train`: every fold's result, carrying the guard's summary; ``members``
    started already by the caller, :func:`foxhunt.train.run.start_members`)."""
    from foxhunt.backtest.reference import planted_column
    from foxhunt.train.run import train as run_training

    data = admit(data, cfg)
    return run_training(
        data.cache,
        cfg,
        out_dir,
        resume=resume,
        overwrite=overwrite,
        log=log,
        progress=progress,
        leak_guard=data.leaks.summary(),
        planted=planted_column(list(data.files)),
        on_epoch=on_epoch,
        members=members,
    )


@dataclass(frozen=True)
class TrainSummary:
    """``foxhunt train``'s result: the run folder and each fold's validation result (``folds.json``)."""

    out: Path
    folds: list[dict[str, Any]]


def train(
    cfg: FoxhuntConfig,
    out_dir: str | Path,
    data: Sequence[str | Path] | None = None,
    *,
    cache_path: Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    profile: str = "default",
    tracking_uri: str | None = None,
    progress: Reporter = SILENT,
    say: Callable[[str], object] = print,
) -> TrainSummary:
    """``foxhunt train``: the DBN files ``data`` or the cache ``cache_path`` (exactly one), prepared
    into ``out_dir`` (a finished run refused unless ``overwrite``; ``resume`` runs the config the run
    recorded), then walk-forward training tracked in MLflow (``tracking_uri``)."""
    from foxhunt.tracking import tracked_run
    from foxhunt.train.run import RECORDED_CONFIG as TRAIN_CONFIG
    from foxhunt.train.run import RUN_RESULTS

    out = Path(out_dir)
    # Before anything is built or written: a finished run is not replaced unasked, and a resume runs
    # the whole config the run recorded. The guard runs on the files (with a cache, those it was
    # built from); the cache and training's compiles are made while its cuts run.
    claim = Claim(RUN_RESULTS, TRAIN_CONFIG, resume=resume, overwrite=overwrite)
    prepared = prepare(
        cfg, out, data, claim=claim, where="foxhunt train", cache_path=cache_path, compile_ahead=True,
        progress=progress, say=say,
    )  # fmt: skip
    with tracked_run(
        out.name, cfg, tracking_uri, command="train", profile=profile, out=out, resume=resume
    ) as t:
        folds = train_folds(  # records its config (train.config.json) once the checks above have passed
            prepared, cfg, out, resume=resume, overwrite=overwrite, progress=progress, on_epoch=t.epoch_hook()
        )
        t.log_folds(folds, out)
        t.log_artifact(out / "folds.json")
        t.log_artifact(out / TRAIN_CONFIG)
    return TrainSummary(out, folds)


# --- the multi-seed study -------------------------------------------------------------------------


@dataclass(frozen=True)
class SeedsSummary:
    """``foxhunt seeds``' result: the study (``seeds.json``), every seed's, the committee's, and what
    ``--keep reported`` deleted (files, bytes; None: kept all)."""

    out: Path
    study: dict[str, Any]
    results: list[SeedResult]
    committee: SeedResult | None
    members: int  # train.members: each seed's agent a committee of that many
    pruned: tuple[int, int] | None = None

    @property
    def finished(self) -> int:
        return sum(not r.stopped for r in self.results)


def seeds(
    cfg: FoxhuntConfig,
    out_dir: str | Path,
    chosen: Sequence[int],
    data: Sequence[str | Path] | None = None,
    *,
    workers: int = 1,
    keep: Keep | None = None,
    overwrite: bool = False,
    profile: str | None = None,
    tracking_profile: str = "default",
    sets: Sequence[str] = (),
    tracking_uri: str | None = None,
    ray_address: str | None = None,
    progress: Reporter = SILENT,
    say: Callable[[str], object] = print,
) -> SeedsSummary:
    """``foxhunt seeds``: one config over the run seeds ``chosen``, ``workers`` at once, on one
    prepared cache (``data``, else the embedded market); the reference rule per fold, the committee
    of the finished seeds, ``seeds.json`` and ``seeds.png``, tracked (a run per seed nested under
    the study's, ``tracking_profile`` its profile tag). ``profile`` and ``sets`` are recorded in
    ``seeds.json``; ``keep`` REPORTED deletes the checkpoints the study's numbers do not read, after
    the committee has read them."""
    from foxhunt.atomic import write_json
    from foxhunt.backtest.reference import edge, planted_column
    from foxhunt.backtest.settings import BacktestSettings
    from foxhunt.config.loader import write_resolved
    from foxhunt.outputs import Keep
    from foxhunt.report.plots import plot_seeds
    from foxhunt.tracking import tracked_run
    from foxhunt.train.run import resolve_device
    from foxhunt.tune.seeds import (
        SEEDS_FILE,
        SEEDS_PLOT,
        committee_result,
        prune_checkpoints,
        run_seeds,
        seed_folder,
        summarise_seeds,
    )

    out, chosen = Path(out_dir), list(chosen)
    # The seed runs live under out_dir, so claiming it claims them (each is retrained from scratch).
    finished = (SEEDS_FILE, "seeds.config.json", *(seed_folder(Path(), s).name for s in chosen))
    ready = admit(
        prepare(cfg, out, data, claim=Claim(finished, overwrite=overwrite), where="foxhunt seeds",
                progress=progress, say=say),
        cfg,
    )  # fmt: skip
    with progress.task("reference rule and baselines per fold"):
        try:
            reference = edge(ready.cache, BacktestSettings.of(cfg))
        except FoxhuntError:  # the rule's feature family is off: the seeds still train, capture is n/a
            reference = None
    write_resolved(cfg, out / "seeds.config.json")
    tags = {"foxhunt.seeds": ",".join(map(str, chosen))}
    with tracked_run(
        out.name, cfg, tracking_uri, command="seeds", profile=tracking_profile, out=out, tags=tags
    ) as study:
        with progress.task(f"training {len(chosen)} seeds, {min(workers, len(chosen))} at once"):
            results = run_seeds(
                cfg, ready.cache.path, chosen, out, workers=workers,
                planted=planted_column(list(ready.files)), tracking=study.child(),
                address=ray_address, say=say,
            )  # fmt: skip
        runs = [seed_folder(out, r.seed) for r in results if not r.stopped]
        with progress.task(f"the committee of {len(runs)} seeds per fold"):
            committee = committee_result(ready.cache.path, cfg, runs, device=str(resolve_device(cfg)))
        summary = summarise_seeds(results, reference, committee) | {"profile": profile, "sets": list(sets)}
        write_json(out / SEEDS_FILE, summary, indent=2, default=float)
        plot_seeds(summary, out / SEEDS_PLOT)
        _log_seed_study(
            study, summary, [out / name for name in (SEEDS_FILE, SEEDS_PLOT, "seeds.config.json")]
        )
    pruned = None
    if keep is Keep.REPORTED:  # after the committee, which reads the reported checkpoints
        counts = [prune_checkpoints(run) for run in runs]
        pruned = (sum(n for n, _ in counts), sum(b for _, b in counts))
    return SeedsSummary(out, summary, results, committee, cfg.train.members, pruned)


def _log_seed_study(study: TrackedRun, summary: dict[str, Any], artifacts: list[Path]) -> None:
    """The study's headline numbers and files in its tracked run."""
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
    for path in artifacts:
        study.log_artifact(path)


# --- the tuning study ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TuneSummary:
    """``foxhunt tune``'s result: the study's name, the trials asked, the objective ranked on, its
    summary (``tune.json``) and the best profile written (None: no trial completed)."""

    out: Path
    name: str
    trials: int
    objective: str
    summary: dict[str, Any]
    best: Path | None


def tune(
    cfg: FoxhuntConfig,
    out_dir: str | Path,
    data: Sequence[str | Path] | None = None,
    *,
    profile: str = "default",
    config_file: Path | None = None,
    workers: int = 1,
    storage: str | None = None,
    study_name: str | None = None,
    ray_address: str | None = None,
    overwrite: bool = False,
    tracking_uri: str | None = None,
    progress: Reporter = SILENT,
    say: Callable[[str], object] = print,
) -> TuneSummary:
    """``foxhunt tune``: an Optuna study over ``cfg.tune``'s search space, ``workers`` trials at
    once, every trial trained on one prepared cache (``data``, else the embedded market); resumed
    from its storage (default ``sqlite:///OUT/study.db``) unless ``overwrite``. ``profile`` (or
    ``config_file``) names the config the study tunes. Writes best.toml, tune.html and tune.json."""
    import shutil

    from foxhunt.backtest.reference import planted_column
    from foxhunt.config.loader import write_resolved
    from foxhunt.outputs import check_writable
    from foxhunt.tracking import tracked_run
    from foxhunt.tune.export import write_best
    from foxhunt.tune.objective import trial_config
    from foxhunt.tune.report import REPORT_FILE, SUMMARY_FILE, write_outputs
    from foxhunt.tune.study import TRIALS_DIR, Work, auto_gpus, check_storage, default_storage, run_study

    t0 = time.perf_counter()
    if not cfg.tune.params:
        raise FoxhuntError(
            str(config_file) if config_file else f"profile {profile}",
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
        say(overridden)
    out = Path(out_dir).absolute()  # workers (Ray tasks, spawned processes) may start elsewhere
    url = storage or default_storage(out)
    name = study_name or out.name
    if overwrite:
        shutil.rmtree(out / TRIALS_DIR, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    ready = admit(
        prepare(cfg, out, data, claim=Claim(), where="foxhunt tune", stops=Stopped.TUNING, progress=progress,
                say=say),
        cfg,
    )  # fmt: skip
    _check_objective(ready.cache, cfg, progress)
    write_resolved(cfg, out / "tune.config.json")
    with tracked_run(
        name, cfg, tracking_uri, command="tune", profile=profile, out=out, tags={"optuna.study": name}
    ) as parent:
        cache = ready.cache.path.absolute()
        work = Work(url, name, cfg, out, cache, planted_column(list(ready.files)), parent.child())
        with progress.task(f"tuning: {cfg.tune.trials} trials, {workers} at once"):
            study = run_study(
                work, workers=workers, address=ray_address, gpus_per_trial=auto_gpus(cfg.tune, workers),
                overwrite=overwrite, say=progress.say,
            )  # fmt: skip
        best = write_best(asked, study, out)
        summary = write_outputs(study, cfg, url, time.perf_counter() - t0, out)
        parent.log_results(
            {"best_value": (summary["best"] or {}).get("value"), "trials": summary["trials_counted"]}
        )
        for path in (out / REPORT_FILE, out / SUMMARY_FILE, best):
            if path is not None:
                parent.log_artifact(path)
    return TuneSummary(out, name, cfg.tune.trials, cfg.tune.objective.value, summary, best)


def _check_objective(cache: FeatureCache, cfg: FoxhuntConfig, progress: Reporter) -> None:
    """Refuse the capture objective where it is undefined: the reference rule makes no money over
    the selection periods (its denominator)."""
    from foxhunt.tune.config import Objective
    from foxhunt.tune.objective import rule_on_selection

    if cfg.tune.objective is not Objective.CAPTURE:
        return
    with progress.task("reference rule over the selection periods (the capture's denominator)"):
        rule = rule_on_selection(cache, cfg)  # a FoxhuntError names the missing feature
    if rule <= 0:
        raise FoxhuntError(
            "tune.objective",
            f"capture is undefined: the reference rule makes {rule:,.0f} over the selection periods",
            "use objective = net_pnl on this market",
        )


# --- the main job ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobSummary:
    """``foxhunt run``'s result: the run folder and the summary written as ``metrics.json`` (a
    ``folds`` list: validation ``net_pnl``, ``sharpe_annual``, ``max_drawdown``, ``trades``, the
    ``baselines`` flat, long (re-entered each plan), buy_hold and the reference ``rule``
    (foxhunt.domain.baselines), and the ``capture`` agent / rule: :mod:`foxhunt.backtest.reference`)
    that ``report.html`` renders."""

    out: Path
    metrics: dict[str, Any]

    @property
    def folds(self) -> list[dict[str, Any]]:
        return self.metrics["folds"]


def run_job(
    cfg: FoxhuntConfig,
    out_dir: str | Path,
    data: Sequence[str | Path] | None = None,
    *,
    log: Callable[[str], None] = print,
    resume: bool = False,
    overwrite: bool = False,
    profile: str = "default",
    progress: Reporter | None = None,
    tracking_uri: str | None = None,
) -> JobSummary:
    """The main job, ``foxhunt run``, into ``out_dir``: data (with none, the embedded synthetic
    market, planted alpha on) -> leak guard -> features -> alpha check -> training -> report.

    ``progress`` shows each stage's bars and lines; without it the lines go to ``log``. A folder
    holding another job is refused unless ``overwrite``; ``resume`` needs the folder and the config
    it recorded, checked before anything is written. ``run.config.json`` is written once the data
    has passed the leak guard: data that cannot be read leaves nothing behind. Training onward is
    tracked in MLflow (``tracking_uri``: :func:`foxhunt.tracking.resolve_uri`; ``"none"``: off)."""
    if not data:  # the embedded market: its kernels compile in a forked process beside the imports below
        from foxhunt.dataset import ahead
        from foxhunt.parallel.idle import idle_cores

        ahead.start(cfg.synth, idle_cores())
    from foxhunt.alpha.check import check_horizons
    from foxhunt.config.loader import write_resolved
    from foxhunt.train.run import resolve_device

    rep = reporter_or_lines(progress, log)
    log = rep.say  # every line below goes through the reporter (stamped, or silenced by --quiet)
    if cfg.alpha.horizons is not None:  # refused before any stage runs, not after the cache
        check_horizons(cfg.alpha.horizons)
    t0 = time.perf_counter()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    store = StoreAhead()
    # The tracking store (a fresh MLflow database: its schema migrations, seconds) is created in
    # another process while the stages before training run, where a core is idle for it.
    claim = Claim(
        JOB_RESULTS, RECORDED_CONFIG, resume=resume, overwrite=overwrite,
        then=lambda taken: store.start(tracking_uri, taken),
    )  # fmt: skip
    members = None
    try:
        ready = prepare(
            cfg, out_dir, data, claim=claim, where="foxhunt run", compile_ahead=True, progress=rep, say=log
        )
        out = Path(out_dir)
        write_resolved(cfg, out / RECORDED_CONFIG)
        members = _members_ahead(ready, cfg, out / "train", resume)
        alpha = _job_alpha(ready, cfg, out, rep)
    except BaseException:
        store.cancel()  # a job that ends before training leaves no store behind
        if members is not None:
            members.stop()
        raise
    store.wait()  # the job opens the store itself from here on
    device = resolve_device(cfg)
    log(f"training on {device}")
    run = {"profile": profile, "device": str(device), "started": started, "t0": t0}
    with members if members is not None else contextlib.nullcontext():  # an error stops them
        return _job_training(
            ready, cfg, out, alpha, run, rep, resume=resume, overwrite=overwrite, uri=tracking_uri,
            members=members,
        )  # fmt: skip


def _members_early(cfg: FoxhuntConfig, resume: bool) -> bool:
    """Whether the job starts its members before the alpha check: a fresh job of several members
    training on a GPU. On the CPU the check and the members would share the same cores; a resume
    leaves them to training, as before."""
    from foxhunt.train.run import resolve_device

    return cfg.train.members > 1 and not resume and resolve_device(cfg).type == "cuda"


def _members_ahead(ready: Dataset, cfg: FoxhuntConfig, train_out: Path, resume: bool) -> MemberRuns | None:
    """A job's members 1 .. K-1, started once the data has passed the leak guard and before the alpha
    check where :func:`_members_early` says so (:func:`foxhunt.train.run.start_members`): their
    start-up overlaps the check's CPU work. Else None: training starts them."""
    from foxhunt.backtest.reference import planted_column
    from foxhunt.train.run import start_members

    if not _members_early(cfg, resume):
        return None
    return start_members(ready.cache, cfg, train_out, planted_column(list(ready.files)))


@dataclass
class StoreAhead:
    """The main job's tracking store, created in another process while the stages before training
    run (:func:`foxhunt.tracking.create_store`): only a new SQLite database, only where a core is idle
    (on a busy machine the process would only take the job's own core), never the run itself (a job
    that ends before training leaves no run, as before)."""

    process: Any = None
    database: Path | None = None

    def start(self, tracking_uri: str | None, out: Path) -> None:
        from foxhunt.parallel.idle import idle_cores
        from foxhunt.tracking import create_store

        if idle_cores() >= 1:
            self.process, self.database = create_store(tracking_uri, out)

    def wait(self) -> None:
        if self.process is not None:
            from foxhunt.tracking import wait_created

            wait_created(self.process)
            self.process = None

    def cancel(self) -> None:
        """Stop the process and remove the database it was creating."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
            if self.database is not None:
                self.database.unlink(missing_ok=True)


def _job_alpha(ready: Dataset, cfg: FoxhuntConfig, out: Path, rep: Reporter) -> dict[str, Any]:
    """The alpha check written to ``out/alpha`` and said in one line; its summary for metrics.json."""
    from foxhunt.alpha.report import verdict_line
    from foxhunt.alpha.report import write_report as write_alpha

    alpha = alpha_check(ready.cache, cfg, ready.leaks, rep)
    paths = write_alpha(alpha, out / "alpha")
    line = verdict_line(alpha)
    rep.say(line)
    plots = [str(p.relative_to(out)) for p in paths.values() if p.suffix == ".png"]
    return _alpha_summary(alpha.to_dict(), line, plots)


def _job_training(
    ready: Dataset,
    cfg: FoxhuntConfig,
    out: Path,
    alpha: dict[str, Any],
    run: dict[str, Any],
    rep: Reporter,
    *,
    resume: bool,
    overwrite: bool,
    uri: str | None,
    members: MemberRuns | None = None,
) -> JobSummary:
    """The job's training (tracked), then metrics.json and report.html. A run the anomaly guard
    stopped still gets its report (the folds it finished and where it stopped); the error is raised
    again once the report is written, so the command still fails."""
    from foxhunt.atomic import write_json
    from foxhunt.report.html import write_report
    from foxhunt.tracking import start_run
    from foxhunt.train.guard import AnomalyError

    stopped: AnomalyError | None = None
    # Started at training (the stages before it are cached or quick to rerun), so that a run that
    # ends before training leaves no run behind; ended below once the report is written.
    tracker = start_run(out.name, cfg, uri, command="run", profile=run["profile"], out=out, resume=resume)
    try:
        folds = train_folds(
            ready,
            cfg,
            out / "train",
            resume=resume and (out / "train").is_dir(),  # a job stopped before training starts it
            overwrite=overwrite,
            progress=rep,
            on_epoch=tracker.epoch_hook(),
            members=members,
        )
    except AnomalyError as err:
        stopped = err
        done = out / "train" / "folds.json"
        folds = json.loads(done.read_text()) if done.is_file() else []
    except BaseException as err:
        tracker.end(err)
        raise
    summary = _job_metrics(ready, cfg, alpha, run, folds)
    if stopped is not None:
        summary["stopped"] = {"where": stopped.where, "diagnosis": stopped.result.diagnosis}
    write_json(out / "metrics.json", summary, indent=2, default=float)
    write_report(out, summary)
    tracker.log_folds(folds, out / "train")
    for name in ("report.html", "metrics.json", RECORDED_CONFIG):
        tracker.log_artifact(out / name)
    tracker.end(stopped)
    rep.say(f"report: {out / 'report.html'}")
    if stopped is not None:
        raise stopped
    return JobSummary(out, summary)


def _job_metrics(
    ready: Dataset,
    cfg: FoxhuntConfig,
    alpha: dict[str, Any],
    run: dict[str, Any],
    folds: list[dict[str, Any]],
) -> dict[str, Any]:
    """The job's summary, written as metrics.json."""
    import numpy as np

    import foxhunt
    from foxhunt.backtest.capture import Capture
    from foxhunt.backtest.execution import folds_execution
    from foxhunt.config.loader import config_hash
    from foxhunt.report.schema import LAST_EPOCH_KEY

    leaks = ready.leaks
    capture = Capture.of(folds)
    return {
        "run": {
            "profile": run["profile"],
            "config_hash": config_hash(cfg),
            "seed": cfg.run.seed,
            "device": run["device"],
            "foxhunt_version": foxhunt.__version__,
            "started": run["started"],
            "elapsed_s": time.perf_counter() - run["t0"],
        },
        "data": _data_summary(ready.cache, list(ready.files), ready.synthetic, cfg),
        "leaks": {
            "passed": leaks.clean,
            "columns_checked": leaks.columns,
            "verdict": leaks.verdict,
            "leaking_columns": leaks.leaking_columns,
        },
        "leak_guard": leaks.summary(),
        "alpha": alpha,
        "folds": folds,
        "summary": {
            # Every fold's numbers are from the checkpoint it names (folds[k].checkpoint, .epoch).
            "reported_checkpoint": sorted({f["checkpoint"] for f in folds}),
            "mean_net_pnl": float(np.mean([f["net_pnl"] for f in folds])) if folds else None,
            "mean_sharpe_annual": float(np.mean([f["sharpe_annual"] for f in folds])) if folds else None,
            "mean_net_pnl_last_epoch": (
                float(np.mean([f[LAST_EPOCH_KEY]["net_pnl"] for f in folds])) if folds else None
            ),
            "beats_flat_folds": sum(f["net_pnl"] > f["baselines"]["flat"]["net_pnl"] for f in folds),
            "beats_long_folds": sum(f["net_pnl"] > f["baselines"]["long"]["net_pnl"] for f in folds),
            "beats_buy_hold_folds": sum(  # a fold resumed from before buy_hold has none
                f["net_pnl"] > f["baselines"]["buy_hold"]["net_pnl"]
                for f in folds
                if "buy_hold" in f["baselines"]
            ),
            "agent_trades": sum(int(f["trades"]) for f in folds),  # 0: the agent never traded
            # The agent's net PnL summed over the folds where the reference rule made money / the
            # rule's there (None: no such fold; foxhunt.backtest.reference.Capture), the median of
            # those folds' captures (per fold: folds[k].capture), the folds kept out (the rule lost or
            # was absent: why, both net PnLs) and the sum over every fold as reported before issue 58.
            "capture": capture.ratio,
            "capture_median": capture.median,
            "capture_excluded": capture.excluded(),
            "capture_all_folds": capture.all_folds,
            # How the agent and the reference rule entered and what their fills cost, over the folds:
            # entries by order type, urgency and magnitude, the limit fill rate, cost per contract
            # (foxhunt.backtest.execution; per fold: folds[k].execution, folds[k].baselines.rule.execution).
            "execution": folds_execution(folds),
        },
    }


def _symbols(files: list[Path]) -> str:
    """The symbols the DBN files' metadata headers name (their records are not decoded)."""
    import databento_dbn as dbn
    from databento.common.error import BentoError

    from foxhunt.data.bento import db

    found: set[str] = set()
    for p in files:
        try:
            found.update(str(s) for s in db.DBNStore.from_file(p).symbols or ())
        except (OSError, ValueError, BentoError, dbn.DBNError):  # ingested already: the name is cosmetic
            continue
    return ", ".join(sorted(found))


def _data_summary(
    cache: FeatureCache, files: list[Path], synthetic: bool, cfg: FoxhuntConfig
) -> dict[str, Any]:
    import numpy as np

    from foxhunt.data.sessions import iso_utc

    ts = cache.column("ts")
    dates = np.unique(cache.column("trade_date"))
    source = (
        f"synthetic ES market (seed {cfg.synth.seed}, planted alpha {cfg.synth.alpha})"
        if synthetic
        else ", ".join(str(p) for p in files)
    )
    # The report's title names the data, never the settings profile.
    name = source if synthetic else files[0].name + (f" and {len(files) - 1} more" if len(files) > 1 else "")
    return {
        "synthetic": synthetic,
        "name": name,
        "files": [p.name for p in files],
        "instrument": _symbols(files),
        "source": source,
        "rows": int(len(ts)),
        "row_unit": cfg.data.row_unit.value,
        "sessions": int(len(dates)),
        "first": iso_utc(int(ts[0]), "ms") if len(ts) else "",
        "last": iso_utc(int(ts[-1]), "ms") if len(ts) else "",
        "features": int(cache.features().shape[1]),
    }


def _alpha_summary(alpha: dict[str, Any], line: str, plots: list[str]) -> dict[str, Any]:
    """The alpha check for metrics.json: verdict, its one line, AUC rows and the PNGs (paths relative
    to the run folder; the report embeds them)."""
    rows = []
    for h in alpha["horizons"]:
        for model, auc in h["auc"].items():
            lo, hi = h["auc_ci"][model]
            rows.append({"model": model, "horizon": h["horizon"], "auc": auc, "auc_lo": lo, "auc_hi": hi})
    return {"verdict": alpha["verdict"], "verdict_line": line, "rows": rows, "plots": plots}
