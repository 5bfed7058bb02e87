"""The Optuna study of ``foxhunt tune``: its storage, its trials' objective, and the workers.

A **trial** samples the ``[tune]`` space (TPE, seeded from ``run.seed``), sets the values on the
study's config as ``--set`` would (:mod:`foxhunt.tune.space`; the study's config is the profile's,
with ``train.selection = train_tail`` where the profile has ``last``:
:func:`foxhunt.tune.objective.trial_config`), and trains it, once per seed of
``tune.seeds``, on the one feature cache the command built, into ``DIR/trials/<number>/`` (a run
folder; ``seed<s>/`` inside it for several seeds). Its value is the mean over its seeds of the
objective over the folds' **selection periods** (the mean net PnL of each fold's reported epoch
there, or its capture of the reference rule's net PnL there: :mod:`foxhunt.tune.objective`); the
same objective over the validation periods is recorded beside it (user attribute
:data:`VALIDATION`) and never ranked on (which of those numbers are out of sample for the choice:
:func:`foxhunt.tune.objective.out_of_sample`).

**Pruning.** After every epoch the trial reports the epoch's selection-period net PnL at a step
that rises over its seeds, folds and epochs (one step per epoch); the median pruner stops a trial
behind the median of the finished trials at that step (``optuna.TrialPruned`` raised from the
trainer's epoch hook).

**Results that are not values.** A trial the anomaly guard stops, or whose capture is undefined (the
rule made no money), is FAILED with the reason in its user attribute :data:`REASON`: it counts as a
trial of the study but never as its best.

**Storage and resuming.** The study lives in a database (SQLite ``DIR/study.db`` unless
``--storage`` names another SQLAlchemy URL); a running trial records a heartbeat every
``tune.heartbeat_seconds``. A trial whose process was killed stops beating: after three beats it is
failed and re-queued with the same parameters (Optuna's ``RetryFailedTrialCallback``), and it does
not count; :func:`run_study` waits that long for such trials before it plans, then runs what is left
of ``tune.trials`` over ``workers`` workers, each loading the study from the storage. A live trial
whose beats came late on a loaded machine can be taken for dead by another worker: its own worker
then drops its result and runs the re-queued copy (:func:`run_worker`), so the study goes on.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from foxhunt import seeding
from foxhunt.config.loader import assignment, with_overrides
from foxhunt.config.models import FoxhuntConfig
from foxhunt.errors import OUT, OVERWRITE, SAME_CONFIG, ConfigError, door
from foxhunt.tracking import TrackingTarget
from foxhunt.train.diagnostics import SELECT_NET_PNL
from foxhunt.tune.config import Pruner, TuneConfig
from foxhunt.tune.objective import (
    RANKED_ON,
    Period,
    Undefined,
    check_tunable,
    mean_or_none,
    seed_value,
    validation_numbers,
)
from foxhunt.tune.space import sample

STUDY_DB = "study.db"
# The study's database as each door names it (the tune command's option, the Work field).
STORAGE = door("--storage", "storage")
TRIALS_DIR = "trials"
REASON = "reason"
"""User attribute of a FAILED trial that is a result (the anomaly guard's diagnosis, an undefined
capture): such a trial counts towards ``tune.trials``, a crashed or killed one does not."""
SETS = "sets"
"""User attribute: the trial's parameters as ``--set`` assignments."""
SEED_VALUES = "seed_values"
"""User attribute: the objective of each seed over the selection periods (the value is their mean)."""
VALIDATION = "validation"
"""User attribute of a COMPLETE trial: the objective over the validation periods (``value``) and over
the last fold's (``last_fold``), means over its seeds, and the number of ``folds``
(:func:`foxhunt.tune.objective.validation_numbers`); reported, never ranked on."""
DEVICE = "device"
"""User attribute: where the trial trained, the physical GPU behind its ``cuda:0`` included
(:func:`foxhunt.parallel.resources.placement`), so tune.json shows how Ray spread the trials."""
STUDY_CONFIG = "config_hash"
"""Study user attribute: the hash of the config it searches (:func:`study_identity`)."""
STUDY_RANKED_ON = "ranked_on"
"""Study user attribute: the period its trials are ranked on (:data:`foxhunt.tune.objective.RANKED_ON`).
A study without it was made by a foxhunt that ranked on the validation periods."""
PRUNED_METRIC = SELECT_NET_PNL
"""The epoch row's value reported to the pruner: the selection period's net PnL (the validation
period is not read before a fold's end)."""
STALE_BEATS = 3
"""Missed heartbeats after which a running trial's process is taken for dead."""

# [tune] keys that say how a study runs, not what it searches: a resume may change them.
_RUN_KEYS = ("trials", "heartbeat_seconds", "retries", "gpus_per_trial")


Trainer = Callable[[FoxhuntConfig, int, Path, Path, "str | None", "Callable | None"], list[dict[str, Any]]]
"""``(cfg, seed, run folder, cache path, planted column, epoch hook) -> train()'s fold results``."""


def default_storage(out: Path) -> str:
    """``sqlite:///DIR/study.db`` (absolute: a worker in another working directory finds the same file)."""
    return f"sqlite:///{(Path(out) / STUDY_DB).absolute()}"


def check_storage(url: str) -> None:
    """Refuse a ``--storage`` URL that SQLAlchemy cannot parse or has no driver for, before the
    command builds anything (else the failure came after the leak guard and the cache, as a crash)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        make_url(url).get_dialect()
    except (ArgumentError, NoSuchModuleError, ImportError, ValueError) as err:
        raise ConfigError(
            f"{STORAGE} {url}",
            f"not a database URL SQLAlchemy can open ({type(err).__name__}: {err})",
            "pass e.g. sqlite:///DIR/study.db or postgresql://user@host/db (its driver installed)",
        ) from err


def open_storage(url: str, tune: TuneConfig) -> optuna.storages.RDBStorage:
    """The study's database, with heartbeats and the re-queue of trials whose process died."""
    # SQLite locks the whole file for a write: several workers wait for each other instead of failing.
    engine = {"connect_args": {"timeout": 120}} if url.startswith("sqlite") else {}
    with _quiet_optuna():
        # Optuna 4.9 renamed the callback (the old name is deprecated); both re-queue a stale trial.
        new = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)
        retry_cls = new or optuna.storages.RetryFailedTrialCallback
        retry = retry_cls(max_retry=tune.retries) if tune.retries else None
        return optuna.storages.RDBStorage(
            url,
            engine_kwargs=engine,
            heartbeat_interval=tune.heartbeat_seconds,
            grace_period=STALE_BEATS * tune.heartbeat_seconds,
            heartbeat_stale_trial_callback=retry,
        )


@contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Optuna marks the heartbeat machinery experimental: a warning per use, not one the user can act on."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


def study_identity(cfg: FoxhuntConfig, data: str = "") -> str:
    """The hash of what a study searches: the whole config but the [tune] keys that say how it runs
    (a resume may ask for more trials or workers, never another space, objective or profile), and
    ``data``, the feature cache's name (its content key: another market is another study)."""
    body = cfg.model_dump(mode="json") | {"data_key": data}
    for key in _RUN_KEYS:
        body["tune"].pop(key)
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))  # config_hash's canonical form
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def counted(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that count towards ``tune.trials``: finished (COMPLETE, PRUNED) or FAILED with a
    :data:`REASON` (never a crashed or killed one: that one is re-run)."""
    return [
        t
        for t in trials
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
        or (t.state is TrialState.FAIL and REASON in t.user_attrs)
    ]


def open_study(
    storage: optuna.storages.RDBStorage, name: str, cfg: FoxhuntConfig, *, overwrite: bool, data: str = ""
) -> optuna.Study:
    """Create the study, or load it to resume; refused when it searches another config or market
    (``data``: :func:`study_identity`), or was ranked on another period (an older foxhunt's, on the
    validation periods), unless ``overwrite``, which deletes it first."""
    if overwrite and name in optuna.get_all_study_names(storage):
        optuna.delete_study(study_name=name, storage=storage)
    study = optuna.create_study(
        storage=storage, study_name=name, direction=cfg.tune.direction.value, load_if_exists=True
    )
    identity = study_identity(cfg, data)
    recorded = study.user_attrs.get(STUDY_CONFIG)
    if recorded is None:
        study.set_user_attr(STUDY_CONFIG, identity)
        study.set_user_attr("objective", cfg.tune.objective.value)
        study.set_user_attr(STUDY_RANKED_ON, RANKED_ON.value)
    elif recorded != identity:
        raise ConfigError(
            f"study {name}",
            f"was made with another config ({SAME_CONFIG}, or the [tune] space) or market than this one",
            f"run the same config to resume, pass {OVERWRITE} to start again, or use another {OUT}/{STORAGE}",
        )
    elif ranked_on(study) is not RANKED_ON:
        # Its trials' values are validation numbers: mixing them with selection-period values would
        # rank incomparable numbers, and its best trial was chosen on the period it reports.
        raise ConfigError(
            f"study {name}",
            "ranked its trials on the validation periods (made by an older foxhunt); this one ranks "
            "them on the selection periods",
            f"pass {OVERWRITE} to start it again, or use another {OUT}/{STORAGE}",
        )
    return study


def ranked_on(study: optuna.Study) -> Period:
    """The period the study ranks its trials on (a study without the record was made by a foxhunt
    that ranked on the validation periods)."""
    return Period(study.user_attrs.get(STUDY_RANKED_ON, Period.VALIDATION.value))


def trial_seeds(cfg: FoxhuntConfig) -> list[int]:
    """The seeds every trial trains: ``run.seed``, ``run.seed + 1``, ... (the same for every trial, so
    trials differ by their parameters, not by their luck)."""
    return [seeding.trial_seed(cfg.run.seed, i) for i in range(cfg.tune.seeds)]


def trial_folder(out: Path, number: int) -> Path:
    return Path(out) / TRIALS_DIR / str(number)


def run_folder(out: Path, number: int, seed: int, cfg: FoxhuntConfig) -> Path:
    """Where one seed of a trial trains: the trial's folder, or ``seed<s>/`` in it for several seeds."""
    from foxhunt.tune.seeds import seed_folder

    folder = trial_folder(out, number)
    return folder if cfg.tune.seeds == 1 else seed_folder(folder, seed)


class Pruning:
    """The trainer's epoch hook for one trial: report each epoch's selection-period net PnL at a step
    that rises over the trial's seeds, folds and epochs; raise ``TrialPruned`` when the pruner says so."""

    def __init__(self, trial: optuna.Trial) -> None:
        self.trial = trial
        self.step = 0

    def __call__(self, fold: int, epoch: int, row: dict[str, float]) -> None:
        value = float(row.get(PRUNED_METRIC, math.nan))
        step, self.step = self.step, self.step + 1
        if not math.isfinite(value):
            return
        self.trial.report(value, step)
        if self.trial.should_prune():
            raise optuna.TrialPruned(f"pruned at fold {fold} epoch {epoch}: selection net PnL {value:,.0f}")


@dataclass(frozen=True)
class Work:
    """Everything a worker needs, as picklable values (a Ray task or a spawned process gets a copy)."""

    storage: str
    study: str
    cfg: FoxhuntConfig
    """The trials' config (:func:`foxhunt.tune.objective.trial_config`: ``train.selection = train_tail``)."""
    out: Path
    cache_path: Path
    planted: str | None = None
    tracking: TrackingTarget | None = None
    """The study's MLflow run that every trial's run nests under (None: tracking off)."""
    trainer: Trainer | None = None
    """What trains one seed of a trial (None: :func:`train_seed`); a module-level function."""


def train_seed(
    cfg: FoxhuntConfig, seed: int, out: Path, cache_path: Path, planted: str | None, on_epoch: Callable | None
) -> list[dict[str, Any]]:
    """``train()`` of ``cfg`` with ``run.seed = seed`` on the cache into ``out`` (raises the anomaly
    guard's error, and the pruner's)."""
    from foxhunt.dataset.cache import load_cache
    from foxhunt.train.run import train
    from foxhunt.tune.seeds import with_seed

    cfg = with_seed(cfg, seed)
    cache = load_cache(cache_path, cfg)
    # A trial's folder is its own (numbers are never reused, except after --overwrite of the study).
    return train(cache, cfg, out, overwrite=True, log=lambda _: None, planted=planted, on_epoch=on_epoch)


def make_objective(work: Work) -> Callable[[optuna.Trial], float]:
    """The objective of one worker's trials (module docstring)."""
    from foxhunt.parallel.resources import placement
    from foxhunt.tracking import chain_hooks, nested_run
    from foxhunt.train.guard import AnomalyError
    from foxhunt.train.run import resolve_device

    trainer = work.trainer or train_seed

    def objective(trial: optuna.Trial) -> float:
        params = sample(trial, work.cfg.tune)
        trial.set_user_attr(SETS, [assignment(k, v) for k, v in params.items()])
        trial.set_user_attr(SEED_VALUES, [])  # a re-run of a killed trial starts with its attributes
        cfg = with_overrides(work.cfg, params, where=f"trial {trial.number}")
        folder = trial_folder(work.out, trial.number)
        trial.set_user_attr("folder", str(folder))
        # The GPU Ray placed this worker on (each sees its own as cuda:0): tune.json shows the spread.
        trial.set_user_attr(DEVICE, placement(str(resolve_device(cfg))))
        pruning = Pruning(trial) if work.cfg.tune.pruner is not Pruner.NONE else None
        values: list[float] = []
        held_out: list[dict[str, float | None]] = []  # each seed's validation numbers (never ranked)
        t0 = time.perf_counter()
        tags = {"optuna.study": work.study, "optuna.trial": trial.number} | params
        folder.mkdir(parents=True, exist_ok=True)
        name = f"trial {trial.number}"
        with nested_run(work.tracking, name, cfg, command="tune", out=folder, tags=tags) as run:
            try:
                for seed in trial_seeds(cfg):
                    seed_dir = run_folder(work.out, trial.number, seed, cfg)
                    hook = chain_hooks(pruning, run.epoch_hook())
                    folds = trainer(cfg, seed, seed_dir, work.cache_path, work.planted, hook)
                    run.log_folds(folds, seed_dir)
                    values.append(seed_value(folds, cfg.tune.objective))
                    held_out.append(validation_numbers(folds, cfg.tune.objective))
                    trial.set_user_attr(SEED_VALUES, values)
            except (AnomalyError, Undefined) as err:
                trial.set_user_attr(REASON, str(err))
                raise
            finally:
                trial.set_user_attr("seconds", round(time.perf_counter() - t0, 1))
            value = float(np.mean(values))
            validation = {k: mean_or_none([h[k] for h in held_out]) for k in ("value", "last_fold")}
            validation["folds"] = held_out[0]["folds"]  # every seed trains the same folds
            trial.set_user_attr(VALIDATION, validation)
            held = {f"validation_{k}": validation[k] for k in ("value", "last_fold")}
            run.log_results({"objective": value} | held)
        return value

    return objective


def make_sampler(tune: TuneConfig, seed: int) -> optuna.samplers.TPESampler:
    # constant_liar: a worker's sampler treats the other workers' running trials as bad results, so
    # concurrent trials spread over the space instead of sampling the same promising point.
    with _quiet_optuna():  # constant_liar is marked experimental
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=tune.startup_trials, constant_liar=True)


def make_pruner(tune: TuneConfig) -> optuna.pruners.BasePruner:
    if tune.pruner is Pruner.NONE:
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(
        n_startup_trials=tune.prune_after_trials, n_warmup_steps=tune.prune_warmup_epochs
    )


def run_worker(work: Work, n_trials: int, sampler_seed: int) -> int:
    """One worker: load the study from the storage and run ``n_trials`` trials of it (each pops a
    re-queued trial first). Returns how many it ran. A module-level function of picklable arguments:
    the executor runs it in a Ray task, a spawned process or this process."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from foxhunt.train.guard import AnomalyError

    study = optuna.load_study(
        study_name=work.study,
        storage=open_storage(work.storage, work.cfg.tune),
        sampler=make_sampler(work.cfg.tune, sampler_seed),
        pruner=make_pruner(work.cfg.tune),
    )
    # A guard stop or an undefined objective fails that trial and the worker goes on; anything else
    # (a config the sampled values break, a bug) fails the trial and stops the study with its error.
    catch = (AnomalyError, Undefined)
    objective = _Watched(make_objective(work), catch)
    ran = taken = 0
    while ran < n_trials:
        try:
            study.optimize(objective, n_trials=1, catch=catch)
        except Exception:
            number = objective.taken_for_dead(study)
            if number is None:
                raise
            # Another worker's fail_stale_trials failed this live trial (its heartbeats came late on a
            # loaded machine) and re-queued a copy; Optuna then refuses to tell it. Its result is
            # dropped and the copy runs in its place (this worker's next trial pops it, or another's).
            taken += 1
            beat = work.cfg.tune.heartbeat_seconds
            print(
                f"tune: trial {number} missed {STALE_BEATS} heartbeats of {beat} s "
                "and was failed and re-queued by another worker while it ran: its result is dropped and "
                "its re-queued copy runs instead",
                file=sys.stderr,
            )
            if taken > n_trials * (work.cfg.tune.retries + 1):
                raise ConfigError(
                    f"tune.heartbeat_seconds = {beat}",
                    f"{taken} live trials of this worker were taken for dead (their heartbeats came late)",
                    "raise tune.heartbeat_seconds, or run fewer workers on this machine",
                ) from None
            continue
        ran += 1
    return n_trials


class _Watched:
    """The objective, remembering its last trial and whether it ended with an error of its own, so
    that a worker can tell its live trial failed by another worker from a failure of the trial."""

    def __init__(self, objective: Callable[[optuna.Trial], float], catch: tuple[type[Exception], ...]):
        self.objective = objective
        self.benign = (*catch, optuna.TrialPruned, optuna.exceptions.UpdateFinishedTrialError)
        self.number: int | None = None
        self.own_error = False

    def __call__(self, trial: optuna.Trial) -> float:
        self.number, self.own_error = trial.number, False
        try:
            return self.objective(trial)
        except Exception as err:
            self.own_error = not isinstance(err, self.benign)
            raise

    def taken_for_dead(self, study: optuna.Study) -> int | None:
        """The last trial's number if the storage holds it FAILED while it ran without an error of its
        own (or with a guard stop, a prune, or a refused write to the finished trial)."""
        if self.number is None or self.own_error:
            return None
        trial = study.get_trials(deepcopy=False)[self.number]
        return self.number if trial.state is TrialState.FAIL else None


def _wait_for_the_dead(
    study: optuna.Study, tune: TuneConfig, say: Callable[[str], None]
) -> list[FrozenTrial]:
    """Fail (and re-queue) the running trials of killed processes, waiting until they are stale;
    returns the running trials still alive after that (another `tune` on the same storage)."""
    deadline = time.monotonic() + (STALE_BEATS + 1) * tune.heartbeat_seconds
    said = False
    while True:
        with _quiet_optuna():
            optuna.storages.fail_stale_trials(study)
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if not running or time.monotonic() >= deadline:
            return running
        if not said:
            numbers = ", ".join(str(t.number) for t in running)
            say(
                f"trial(s) {numbers} were running: waiting up to {deadline - time.monotonic():.0f} s "
                "to see whether their process is alive"
            )
            said = True
        time.sleep(min(1.0, tune.heartbeat_seconds))


def shares(total: int, workers: int) -> list[int]:
    """``total`` trials split over at most ``workers`` workers, as evenly as possible (none empty)."""
    n = min(workers, total)
    return [total // n + (1 if i < total % n else 0) for i in range(n)] if n > 0 else []


def run_study(
    work: Work,
    *,
    workers: int = 1,
    address: str | None = None,
    gpus_per_trial: float = 0.0,
    overwrite: bool = False,
    say: Callable[[str], None] = print,
) -> optuna.Study:
    """Create or resume the study and run what is left of ``tune.trials`` on ``workers`` workers."""
    from foxhunt.parallel import Resources, open_executor

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    check_tunable(work.cfg)
    tune = work.cfg.tune
    storage = open_storage(work.storage, tune)
    study = open_study(storage, work.study, work.cfg, overwrite=overwrite, data=work.cache_path.name)
    alive = _wait_for_the_dead(study, tune, say)
    done = counted(study.get_trials(deepcopy=False))
    left = tune.trials - len(done) - len(alive)
    if left <= 0:
        say(f"study {work.study}: {len(done)} of {tune.trials} trials done, nothing left to run")
        return study
    plan = shares(left, workers)
    say(f"study {work.study}: {len(done)} trials done, running {left} on {len(plan)} worker(s)")
    # Each worker's sampler has its own seed, from run.seed and the study's size when this run
    # started: workers never sample alike, and a resumed study does not replay its first trials.
    states = seeding.keyed(work.cfg.run.seed, len(study.trials)).spawn(len(plan))
    jobs = [(work, n, int(s.generate_state(1)[0])) for n, s in zip(plan, states, strict=True)]
    with open_executor(len(plan), address=address, say=say) as pool:
        pool.map(run_worker, jobs, Resources(cpus=1.0, gpus=gpus_per_trial))
    return study


def auto_gpus(tune: TuneConfig, workers: int) -> float:
    """``tune.gpus_per_trial``, or (None) the visible GPUs shared among the workers, at most one each."""
    if tune.gpus_per_trial is not None:
        return tune.gpus_per_trial
    from foxhunt.parallel import detect_gpus

    gpus = detect_gpus()
    return min(1.0, gpus / workers) if gpus else 0.0


def trial_row(t: FrozenTrial) -> dict[str, Any]:
    """One trial as tune.json and the report show it."""
    return {
        "number": t.number,
        "state": t.state.name,
        "value": t.value,
        "validation": t.user_attrs.get(VALIDATION),
        "params": t.params,
        "reason": t.user_attrs.get(REASON),
        "seconds": t.user_attrs.get("seconds"),
        "folder": t.user_attrs.get("folder"),
        "device": t.user_attrs.get(DEVICE),
        "retry_of": t.system_attrs.get("failed_trial"),
    }


def json_safe(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))
