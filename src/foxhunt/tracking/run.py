"""One tracked MLflow run: start it, feed it the trainer's epochs and the results, end it.

::

    with tracked_run("main", cfg, tracking_uri, command="train", out=run_dir) as tracker:
        folds = train(cache, cfg, run_dir, on_epoch=tracker.epoch_hook())
        tracker.log_folds(folds, run_dir)          # result/ metrics, best checkpoints as artefacts
        tracker.log_artifact(run_dir / "report.html")

Tracking never costs a result: if the store cannot be reached or refuses a write, one warning is
printed and the run goes on untracked (every later call is then a no-op). A run left by an error
is ended FAILED (KILLED for an interrupt) with the error as the ``foxhunt.stopped`` tag. What is
recorded is :mod:`foxhunt.tracking.record`'s; where, :mod:`foxhunt.tracking.store`'s.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foxhunt.tracking.record import (
    METRICS_PER_BATCH,
    PARAMS_PER_BATCH,
    config_params,
    epoch_metrics,
    epoch_step,
    fold_results,
    param_value,
    result_metrics,
)
from foxhunt.tracking.store import (
    OFF,
    experiment_id,
    experiment_name,
    fail_fast,
    git_commit,
    open_client,
    read_record,
    resolve_uri,
    write_record,
)

if TYPE_CHECKING:
    from foxhunt.config.models import FoxhuntConfig
    from foxhunt.train.run import EpochHook

Warn = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class TrackingTarget:
    """Where a run started in another process is tracked, nested under ``parent`` (picklable: a
    seed's or a trial's worker gets it as an argument)."""

    uri: str
    parent: str | None
    experiment: str


def chain_hooks(*hooks: EpochHook | None) -> EpochHook | None:
    """One epoch hook calling each given hook in order (tracking and a pruner both watch epochs)."""
    present = [h for h in hooks if h is not None]
    if len(present) <= 1:
        return present[0] if present else None

    def chained(fold: int, epoch: int, row: dict[str, float]) -> None:
        for hook in present:
            hook(fold, epoch, row)

    return chained


class TrackedRun:
    """An MLflow run, or nothing when tracking is off or failed (then every method does nothing)."""

    def __init__(self, uri: str | None, experiment: str, epochs: int, warn: Warn = _stderr) -> None:
        self.uri = uri
        self.experiment = experiment
        self.epochs = epochs
        self.run_id: str | None = None
        self._client: Any = None
        self._warn = warn

    @property
    def active(self) -> bool:
        return self._client is not None and self.run_id is not None

    def _failed(self, what: str, err: Exception) -> None:
        """Warn once and stop tracking: the run itself goes on."""
        self._client = None
        reason = " ".join(f"{type(err).__name__}: {err}".split())[:300]
        self._warn(
            f"warning: tracking to {self.uri} failed while {what} ({reason}); "
            "this run goes on untracked, its results are unaffected"
        )

    def start(
        self,
        name: str,
        cfg: FoxhuntConfig,
        *,
        command: str,
        parent: str | None = None,
        profile: str | None = None,
        out: Path | None = None,
        tags: Mapping[str, Any] | None = None,
        resume: bool = False,
    ) -> None:
        """Open the run (a resumed run folder's recorded run, when it is in this store) and log the
        config as its parameters; ``out/tracking.json`` records it."""
        if self.uri is None:
            return
        from foxhunt import __version__
        from foxhunt.config.loader import config_hash

        labels = {
            "foxhunt.command": command,
            "foxhunt.profile": profile or "",
            "foxhunt.version": __version__,
            "foxhunt.config_hash": config_hash(cfg),
        }
        if out is not None:
            labels["foxhunt.out"] = str(out.absolute())
        commit = git_commit()
        if commit is not None:
            labels |= {"foxhunt.git_commit": commit, "mlflow.source.git.commit": commit}
        if parent is not None:
            labels["mlflow.parentRunId"] = parent  # MLflow's own nesting tag (the UI folds children in)
        labels |= {k: param_value(v) for k, v in (tags or {}).items()}
        earlier = read_record(out) if resume and out is not None else None
        try:
            with fail_fast():
                from mlflow.entities import Param, RunStatus

                client = open_client(self.uri)
                eid = experiment_id(client, self.uri, self.experiment)
                run_id = None
                if earlier is not None and earlier["tracking_uri"] == self.uri:
                    run_id = str(earlier["run_id"])
                    client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))
                if run_id is None:
                    run_id = client.create_run(eid, tags=labels, run_name=name).info.run_id
                params = [Param(k, v) for k, v in config_params(cfg).items()]
                for i in range(0, len(params), PARAMS_PER_BATCH):
                    client.log_batch(run_id, params=params[i : i + PARAMS_PER_BATCH])
        except Exception as err:  # any store failure: warned, never fatal
            self._failed("starting the run", err)
            return
        self._client, self.run_id = client, run_id
        if out is not None:
            write_record(out, self.uri, run_id, self.experiment)

    def log_metrics(self, values: Mapping[str, float], step: int = 0) -> None:
        if not self.active or not values:
            return
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        metrics = [Metric(k, float(v), stamp, step) for k, v in values.items()]
        try:
            for i in range(0, len(metrics), METRICS_PER_BATCH):
                self._client.log_batch(self.run_id, metrics=metrics[i : i + METRICS_PER_BATCH])
        except Exception as err:
            self._failed("logging metrics", err)

    def epoch_hook(self) -> EpochHook:
        """``train(on_epoch=...)``: every epoch row's numbers at step fold x epochs + epoch."""

        def hook(fold: int, epoch: int, row: dict[str, float]) -> None:
            self.log_metrics(epoch_metrics(row), step=epoch_step(fold, epoch, self.epochs))

        return hook

    def log_folds(self, folds: list[dict[str, Any]], run_dir: Path | None = None) -> None:
        """The per-fold and total results; with ``run_dir`` (the training folder) each fold's
        reported checkpoint (weights and its JSON) as artefacts under ``checkpoints/fold<k>``."""
        from foxhunt.policy.checkpoint import checkpoint_files

        self.log_metrics(fold_results(folds))
        if run_dir is None:
            return
        for f in folds:
            if f.get("checkpoint_file"):
                for path in checkpoint_files(run_dir / f["checkpoint_file"]):
                    self.log_artifact(path, f"checkpoints/fold{int(f['fold'])}")

    def log_results(self, values: Mapping[str, Any]) -> None:
        """Other final numbers as ``result/<name>`` (None values are left out)."""
        self.log_metrics(result_metrics(values))

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """A file or a folder's files as artefacts (a path that does not exist is skipped)."""
        p = Path(path)
        if not self.active or not p.exists():
            return
        try:
            if p.is_dir():
                self._client.log_artifacts(self.run_id, str(p), artifact_path)
            else:
                self._client.log_artifact(self.run_id, str(p), artifact_path)
        except Exception as err:
            self._failed(f"storing artefact {p.name}", err)

    def child(self) -> TrackingTarget | None:
        """Where runs nested under this one are tracked (None: tracking is off or failed)."""
        if not self.active:
            return None
        assert self.uri is not None and self.run_id is not None
        return TrackingTarget(self.uri, self.run_id, self.experiment)

    def end(self, error: BaseException | None = None) -> None:
        """Ended with :func:`run_status`; an error's message as ``foxhunt.stopped``."""
        if not self.active:
            return
        status = run_status(error)
        try:
            if error is not None:
                reason = param_value(str(error) or type(error).__name__)
                self._client.set_tag(self.run_id, "foxhunt.stopped", reason)
            self._client.set_terminated(self.run_id, status)
        except Exception as err:
            self._failed("ending the run", err)
        self._client = None


def run_status(error: BaseException | None) -> str:
    """The MLflow status of a run that ended with ``error``: FINISHED without one; KILLED for an
    interrupt or a trial its study pruned (a deliberate stop, not a fault: optuna.TrialPruned, matched
    by name so that tracking does not import optuna); FAILED for any other error."""
    if error is None:
        return "FINISHED"
    if not isinstance(error, Exception) or type(error).__name__ == "TrialPruned":
        return "KILLED"
    return "FAILED"


def start_run(
    name: str,
    cfg: FoxhuntConfig,
    tracking_uri: str | None = None,
    *,
    command: str,
    parent: str | None = None,
    profile: str | None = None,
    out: Path | None = None,
    tags: Mapping[str, Any] | None = None,
    experiment: str | None = None,
    resume: bool = False,
    warn: Warn = _stderr,
) -> TrackedRun:
    """A started :class:`TrackedRun` (end it with :meth:`TrackedRun.end`; :func:`tracked_run` does).

    ``tracking_uri``: a store URI, ``"none"`` (off), or None for the default (:func:`resolve_uri`);
    ``parent``: the run id this one nests under; ``out``: the run folder (``tracking.json`` is
    written there; with ``resume``, its recorded run is continued)."""
    run = TrackedRun(resolve_uri(tracking_uri, out), experiment_name(experiment), cfg.train.epochs, warn)
    run.start(name, cfg, command=command, parent=parent, profile=profile, out=out, tags=tags, resume=resume)
    return run


@contextmanager
def tracked_run(
    name: str,
    cfg: FoxhuntConfig,
    tracking_uri: str | None = None,
    *,
    command: str = "api",
    parent: str | None = None,
    profile: str | None = None,
    out: Path | None = None,
    tags: Mapping[str, Any] | None = None,
    experiment: str | None = None,
    resume: bool = False,
    warn: Warn = _stderr,
) -> Iterator[TrackedRun]:
    """:func:`start_run` as a context: the run ends FINISHED, or FAILED / KILLED with the error that
    left the block (which is raised on)."""
    run = start_run(
        name,
        cfg,
        tracking_uri,
        command=command,
        parent=parent,
        profile=profile,
        out=out,
        tags=tags,
        experiment=experiment,
        resume=resume,
        warn=warn,
    )
    try:
        yield run
    except BaseException as err:
        run.end(err)
        raise
    run.end()


def nested_run(
    target: TrackingTarget | None,
    name: str,
    cfg: FoxhuntConfig,
    *,
    command: str,
    out: Path | None = None,
    tags: Mapping[str, Any] | None = None,
) -> AbstractContextManager[TrackedRun]:
    """:func:`tracked_run` nested under ``target``'s run, in its store and experiment (a worker's
    seed or trial); with no target (the parent was not tracked) a run that tracks nothing."""
    if target is None:
        return tracked_run(name, cfg, OFF, command=command, out=out, tags=tags)
    return tracked_run(
        name,
        cfg,
        target.uri,
        command=command,
        parent=target.parent,
        out=out,
        tags=tags,
        experiment=target.experiment,
    )
