"""Where a command writes: checked before any work, so that no run is lost or mixed with another.

* **Writable.** An output that is a file where a folder goes (or a folder where a file goes), or
  lies under a file or in a folder this user cannot write, is one line before anything is computed.
* **Nothing finished is replaced unasked.** A folder holding a command's finished result (a run's
  checkpoints, folds.json or recorded config; a backtest's metrics.json; ...) is refused unless
  ``--overwrite`` is given. A feature cache is not such a result: its file name is its content key,
  so writing it again writes the same thing (``features build`` reuses it).
* **A resume is the same run.** ``--resume`` needs the run's folder, and the whole resolved config
  must equal the one the run recorded when it started (every key, not only those a checkpoint
  holds), compared before anything is written.
* **A study keeps what it reports, if asked.** ``foxhunt seeds --keep reported`` deletes each
  finished seed's checkpoints that no fold reported (:class:`Keep`), once the study's committee has
  read them; the default keeps every one.
* **No litter.** The temporary files of writes killed outright are removed when a command starts
  writing into the folder (:func:`foxhunt.atomic.remove_stale_temps`).

This module imports only the standard library and light foxhunt modules (the command line's
start-up time).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foxhunt.atomic import is_stale_temp, remove_stale_temps
from foxhunt.errors import OUT, OVERWRITE, RESUME, SAME_CONFIG, OutputError, ResumeError

if TYPE_CHECKING:
    from foxhunt.config.models import FoxhuntConfig

# How many differing keys a refused resume names (the rest are counted).
SHOWN_DIFFERENCES = 8


class Keep(StrEnum):
    """The checkpoints a seeds study keeps of each finished seed once its committee is judged."""

    ALL = "all"  # every checkpoint training wrote: each fold's ring (its resume point), last and best
    REPORTED = "reported"  # those that voted (foxhunt.tune.seeds.voters): what seeds.json reports


def _first_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (``Path.exists`` is False under a file)."""
    here = path.absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    return here


def check_writable(path: str | Path, *, folder: bool, option: str = OUT) -> None:
    """Refuse an output ``path`` that cannot be written: a file where a folder goes (``folder``) or
    a folder where a file goes, a path under a file, or one in a folder this user cannot write."""
    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        raise OutputError(path, "is a file, not a folder", f"choose a folder for {option}")
    if not folder and path.is_dir():
        raise OutputError(path, "is a folder, not a file", f"name a file for {option}")
    base = _first_existing(path if folder else path.parent)
    if not base.is_dir():
        raise OutputError(
            path, f"{base} is a file, so nothing can be written under it", f"choose another {option}"
        )
    if not os.access(base, os.W_OK | os.X_OK):
        raise OutputError(path, f"the folder {base} is not writable", f"choose a writable {option} path")


def claim_folder(
    out: str | Path,
    finished: Sequence[str],
    *,
    overwrite: bool = False,
    resume: bool = False,
    resumable: bool = False,
    option: str = OUT,
) -> Path:
    """Check the output folder ``out`` of a command before it does any work; remove stale temps.

    ``finished`` names the files or folders (relative to ``out``) whose presence means a finished
    or started result: refused unless ``overwrite`` (or ``resume``, which instead needs ``out`` to
    exist); ``resumable`` says that the refusal may suggest ``--resume``. Nothing is deleted here;
    the command replaces what it writes."""
    out = Path(out)
    check_writable(out, folder=True, option=option)
    if resume:
        _require_run(out)
    elif not overwrite:
        found = [name for name in finished if (out / name).exists()]
        if found:
            raise OutputError(
                out,
                f"already holds a result ({', '.join(found)})",
                f"pass {OVERWRITE} to replace it"
                + (f", {RESUME} to continue it" if resumable else "")
                + f", or choose another {option}",
            )
    remove_stale_temps(out)
    return out


def _require_run(out: Path) -> None:
    if not out.is_dir():
        raise ResumeError(
            out, "no such run folder to resume", f"pass an interrupted run's folder, or start one with {OUT}"
        )


def claim_file(path: str | Path, *, overwrite: bool = False, option: str = OUT) -> Path:
    """:func:`claim_folder` for a command writing one file: refused if it exists, unless ``overwrite``."""
    path = Path(path)
    check_writable(path, folder=False, option=option)
    if path.exists() and not overwrite:
        raise OutputError(
            path, "already exists", f"pass {OVERWRITE} to replace it, or choose another {option}"
        )
    remove_stale_temps_of(path)
    return path


def remove_stale_temps_of(path: Path) -> None:
    """The stale temporary files of writes of ``path`` alone (its folder may be anyone's)."""
    if path.parent.is_dir():
        for p in path.parent.glob(f".{path.name}.*"):
            if is_stale_temp(p):
                p.unlink(missing_ok=True)


def config_differences(stored: dict[str, Any], cfg: FoxhuntConfig) -> list[str]:
    """``section.key: stored -> now`` for every leaf where ``cfg`` differs from a stored config dump."""
    from foxhunt.config.base import leaves

    a, b = leaves(stored), leaves(json.loads(json.dumps(cfg.model_dump(mode="json"))))
    return [
        f"{k}: {a.get(k, '(absent)')} -> {b.get(k, '(absent)')}"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]


def refuse_other_config(stored: dict[str, Any], cfg: FoxhuntConfig, where: str | Path) -> None:
    """One line naming every key (up to :data:`SHOWN_DIFFERENCES`) where ``cfg`` is not the config
    recorded at ``where``, with both values."""
    differs = config_differences(stored, cfg)
    if differs:
        more = f" and {len(differs) - SHOWN_DIFFERENCES} more" if len(differs) > SHOWN_DIFFERENCES else ""
        raise ResumeError(
            RESUME,
            f"the config differs from the run's ({where}; recorded -> now): "
            f"{'; '.join(differs[:SHOWN_DIFFERENCES])}{more}",
            f"resume with the same {SAME_CONFIG}, "
            f"or start a new run with {OUT} ({OVERWRITE} replaces this one)",
        )


def recorded_config(path: Path) -> dict[str, Any] | None:
    """The config a run recorded in ``path`` (``write_resolved``'s JSON), or None if it has none."""
    if not path.is_file():
        return None
    try:
        body = json.loads(path.read_text())
        stored = body["config"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise ResumeError(
            path,
            "the run's recorded config is not readable JSON with a config",
            f"start a new run with {OUT}",
        ) from None

    if not isinstance(stored, dict):
        raise ResumeError(path, "the run's recorded config is not a table", f"start a new run with {OUT}")
    return stored


def claim_run(
    out: str | Path,
    cfg: FoxhuntConfig,
    recorded: str,
    finished: Sequence[str],
    *,
    resume: bool,
    overwrite: bool,
) -> Path:
    """:func:`claim_folder` for a run folder, and on ``resume`` the whole resolved ``cfg`` against
    the config the run recorded in ``out/recorded``. Writes nothing but the removal of stale temps."""
    out = Path(out)
    if resume and overwrite:
        raise OutputError(
            f"{RESUME}/{OVERWRITE}",
            "both given",
            f"pass one: {RESUME} continues the run, {OVERWRITE} replaces it",
        )
    if resume:
        check_writable(out, folder=True)
        _require_run(out)
        stored = recorded_config(out / recorded)
        if stored is not None:
            refuse_other_config(stored, cfg, out / recorded)
    return claim_folder(out, finished, overwrite=overwrite, resume=resume, resumable=True)
