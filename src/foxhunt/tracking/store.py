"""Where runs are tracked: the MLflow store a command writes to, and the record a run folder keeps.

The store is, in order: ``--tracking-uri URI``; ``FOXHUNT_TRACKING=off`` (nothing tracked);
``MLFLOW_TRACKING_URI``; else a SQLite database ``mlflow.db`` in the command's run folder (``--out``;
the current directory for a command without one, as :func:`reading_uri` reads). ``none`` or
``off`` as the URI turns tracking off. A relative SQLite path is made absolute when the command
starts, so the run folder's record (``tracking.json``) still finds the store from another directory.
A SQLite store keeps its artefacts in ``mlartifacts/`` beside the database file (what ``mlflow ui``
serves); any other store decides for itself.

mlflow is imported only inside :func:`open_client` (seconds: the command line must start without it).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foxhunt.atomic import write_json
from foxhunt.errors import FoxhuntError

if TYPE_CHECKING:
    from mlflow import MlflowClient

OFF = "none"
"""The tracking URI that turns tracking off (``--tracking-uri none``; ``off`` is read the same)."""
SWITCH_ENV = "FOXHUNT_TRACKING"
"""``FOXHUNT_TRACKING=off``: no command tracks unless given ``--tracking-uri`` (the test suite's switch)."""
DEFAULT_DB = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"
DEFAULT_EXPERIMENT = "foxhunt"
RECORD_FILE = "tracking.json"
"""Written into a tracked run's folder: the store and run id (``foxhunt runs compare FOLDER``)."""

_OFF_WORDS = {OFF, "off"}
_SQLITE = "sqlite:///"


def resolve_uri(flag: str | None, out: Path | None = None) -> str | None:
    """The store a command tracks to (module docs), or None when tracking is off; ``out``: the
    command's run folder, where the default database goes (the current directory without one)."""
    if flag is not None:
        chosen = flag.strip()
    elif os.environ.get(SWITCH_ENV, "").strip().lower() in _OFF_WORDS:
        return None
    else:
        default = Path(out) / DEFAULT_DB if out is not None else Path(DEFAULT_DB)
        chosen = os.environ.get("MLFLOW_TRACKING_URI", "").strip() or _SQLITE + str(default)
    if chosen.lower() in _OFF_WORDS:
        return None
    db = sqlite_path(chosen)
    # An absolute path after sqlite:/// gives the four slashes SQLAlchemy reads as absolute.
    return _SQLITE + str(db.absolute()) if db is not None else chosen


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` URI (None: another store, or an in-memory one)."""
    if not uri.startswith(_SQLITE):
        return None
    path = uri.removeprefix(_SQLITE).split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def artifact_location(uri: str, experiment: str) -> str | None:
    """Where a new experiment keeps its artefacts: ``mlartifacts/<experiment>`` beside a SQLite
    database, the store's own default (None) otherwise."""
    db = sqlite_path(uri)
    if db is None:
        return None
    name = re.sub(r"[^\w.-]+", "_", experiment) or DEFAULT_EXPERIMENT
    return str(db.absolute().parent / ARTIFACTS_DIR / name)


@contextmanager
def fail_fast() -> Iterator[None]:
    """An HTTP store that does not answer fails at once instead of after MLflow's default retries
    (7, with backoff: minutes): a run must not wait on its tracking. A value the user set is kept."""
    keys = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
    added = [k for k in keys if k not in os.environ]
    os.environ.update({k: keys[k] for k in added})
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def open_client(uri: str) -> MlflowClient:
    """An MLflow client on ``uri``. Creating a SQLite store runs MLflow's schema migrations, which
    log at INFO level on every fresh database: quietened to warnings. MLflow's SQL store trips
    SQLAlchemy deprecation warnings on every command: MLflow's to act on, not the user's."""
    for name in ("mlflow.store.db.utils", "alembic.runtime.migration"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"mlflow\.")
    from mlflow import MlflowClient

    db = sqlite_path(uri)
    if db is not None and not db.exists():
        _from_template(db)
    return MlflowClient(tracking_uri=uri)


TEMPLATE_ENV = "FOXHUNT_MLFLOW_CACHE"
"""Where the empty SQLite store with MLflow's tables is kept (else ``~/.cache/foxhunt/mlflow``)."""


def _from_template(db: Path) -> None:
    """Start the new SQLite store ``db`` as a copy of an empty one holding MLflow's tables at this
    MLflow version's schema, made once per user and version: every ``foxhunt run`` makes a new store
    in its fresh run folder, and MLflow's schema migrations (100-odd Alembic scripts) took 2 s of an
    idle machine, 15 s of a loaded 2-core box, each time. MLflow then opens the copy as a store it
    made (checks the schema, adds its default experiment). Anything failing here leaves MLflow to
    create the store itself, as without it."""
    import shutil

    import mlflow

    root = os.environ.get(TEMPLATE_ENV, "").strip()
    folder = Path(root) if root else Path.home() / ".cache" / "foxhunt" / "mlflow"
    template = folder / f"tables-{mlflow.__version__}.db"
    try:
        if not template.is_file():
            import sqlalchemy
            from mlflow.store.db.utils import _initialize_tables  # MLflow's own first step of a new store

            folder.mkdir(parents=True, exist_ok=True)
            made = template.with_name(f"{template.name}.{os.getpid()}.tmp")
            engine = sqlalchemy.create_engine(_SQLITE + str(made.absolute()))
            try:
                _initialize_tables(engine)
            finally:
                engine.dispose()
            os.replace(made, template)  # whole or absent: another process may be making it too
        db.parent.mkdir(parents=True, exist_ok=True)
        copy = db.with_name(f"{db.name}.{os.getpid()}.tmp")
        shutil.copyfile(template, copy)
        try:
            os.link(copy, db)  # only where no store is yet: one another process made is never replaced
        finally:
            copy.unlink(missing_ok=True)
    except Exception:  # noqa: BLE001 - MLflow creates the store instead
        return


# A new SQLite store's tables and the experiment, made in a fresh process (create_store).
_CREATE = (
    "import sys; from foxhunt.tracking.store import experiment_id, open_client; "
    "experiment_id(open_client(sys.argv[1]), sys.argv[1], sys.argv[2])"
)
CREATE_WAIT_S = 120.0
"""The longest wait for :func:`create_store`'s process; one still running then is stopped."""


def create_store(
    flag: str | None, out: Path, experiment: str | None = None
) -> tuple[subprocess.Popen[bytes] | None, Path | None]:
    """Start creating the store a command in run folder ``out`` will track to (:func:`resolve_uri`
    of ``flag``) in another process, when it is a SQLite database that does not exist yet: a fresh
    database runs MLflow's schema migrations (seconds of a job's start-up), which the process does
    beside the caller's work. :func:`wait_created` before opening the store. ``(process, database
    file)``, or ``(None, None)`` where nothing was started (tracking off, another store, the database
    there already). Any failure there is silent: the command then creates the store itself, as
    without it."""
    uri = resolve_uri(flag, out)
    db = sqlite_path(uri) if uri is not None else None
    if db is None or db.exists():
        return None, None
    argv = [sys.executable, "-c", _CREATE, str(uri), experiment_name(experiment)]
    out_err = subprocess.DEVNULL
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out_err, stderr=out_err), db


def wait_created(process: subprocess.Popen[bytes], timeout: float = CREATE_WAIT_S) -> None:
    """Wait for :func:`create_store`'s process (stopped after ``timeout`` seconds)."""
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def experiment_id(client: MlflowClient, uri: str, name: str) -> str:
    """The id of experiment ``name``, created (artefacts as :func:`artifact_location`) when absent.
    Two processes may create it at once (seeds in parallel): the loser reads the winner's."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_location(uri, name))
    except MlflowException:
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def experiment_name(name: str | None) -> str:
    """``name``, else ``MLFLOW_EXPERIMENT_NAME``, else ``foxhunt``."""
    return name or os.environ.get("MLFLOW_EXPERIMENT_NAME", "").strip() or DEFAULT_EXPERIMENT


@cache
def git_commit() -> str | None:
    """The commit of the foxhunt source checkout this code runs from (None: not a git checkout)."""
    here = Path(__file__).resolve().parent
    try:
        command = ["git", "-C", str(here), "rev-parse", "HEAD"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", commit) else None


def write_record(folder: Path, uri: str, run_id: str, experiment: str) -> Path:
    """``folder/tracking.json``: which store and run hold this run folder's tracking."""
    body = {"tracking_uri": uri, "run_id": run_id, "experiment": experiment}
    return write_json(folder / RECORD_FILE, body, indent=2)


def read_record(folder: Path) -> dict[str, Any] | None:
    """A run folder's ``tracking.json`` (None when the folder has none, or it is unreadable)."""
    path = folder / RECORD_FILE
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(body, dict) or not {"tracking_uri", "run_id"} <= body.keys():
        return None
    return body


def reading_uri(flag: str | None) -> str:
    """The store to read runs from: ``--tracking-uri``, else ``MLFLOW_TRACKING_URI``, else
    ``./mlflow.db`` (the off switch only stops writing)."""
    uri = resolve_uri(flag or os.environ.get("MLFLOW_TRACKING_URI", "").strip() or _SQLITE + DEFAULT_DB)
    if uri is None:
        raise FoxhuntError("--tracking-uri", f"{flag!r} names no store to read runs from", "name a store")
    return uri


def run_reference(ref: str, flag: str | None) -> tuple[str, str]:
    """``(store URI, run id)`` of ``RUN`` as ``foxhunt runs compare`` takes it: a run folder holding
    ``tracking.json`` (its recorded store, unless ``--tracking-uri`` names another), or a run id in
    the store of :func:`reading_uri`."""
    folder = Path(ref)
    if folder.is_dir():
        record = read_record(folder)
        if record is None:
            raise FoxhuntError(
                folder / RECORD_FILE,
                "this folder holds no tracking record (it was not tracked, or tracking was off)",
                "pass a folder of a tracked run or an MLflow run id (foxhunt runs list)",
            )
        return (reading_uri(flag) if flag else str(record["tracking_uri"])), str(record["run_id"])
    if not re.fullmatch(r"[0-9a-f]{32}", ref):
        raise FoxhuntError(
            ref,
            "is neither a run folder nor an MLflow run id (32 hex digits)",
            "pass a run folder written by a tracked run, or a run id from foxhunt runs list",
        )
    return reading_uri(flag), ref
