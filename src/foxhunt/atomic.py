"""Atomic file writes: every artefact is written to a temporary name beside it and renamed into
place, so a failure (bad input, a crash, an interrupt) never leaves a half-written file.

A process killed outright (``kill -9``, the machine going down) cannot delete its temporary file:
the temporary name carries the writer's process id, and :func:`remove_stale_temps` (called when a
command starts writing into a folder) deletes those whose process is gone.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from foxhunt.errors import OUT, FoxhuntError

_UMASK = os.umask(0)
os.umask(_UMASK)

TEMP_SUFFIX = ".tmp"
# ``.<name>.<pid>.<random>.tmp`` (the random part is mkstemp's); the one place that spells it.
_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.(?P<random>[^.]+)" + re.escape(TEMP_SUFFIX) + "$")


def _temp_prefix(path: Path) -> str:
    return f".{path.name}.{os.getpid()}."


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path in ``path``'s folder; rename it to ``path`` if the block succeeds,
    delete it if it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=TEMP_SUFFIX, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        # mkstemp creates 0600; an artefact gets the usual mode of a new file (0666 less the umask).
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if disk_full(err):
            free = shutil.disk_usage(path.parent).free
            raise FoxhuntError(
                path,
                f"no space left on the device of {path.parent} ({free:,} bytes free); nothing was written",
                f"free space there (old runs' checkpoints are the largest files) or write to another {OUT}",
            ) from err
        raise


def disk_full(err: BaseException) -> bool:
    """Whether ``err`` says the device is full: an OSError with ENOSPC, or a library's wrapped one
    (safetensors' Rust writer raises its own error whose text carries the OS error, "No space left
    on device (os error 28)", and nothing else to test)."""
    if isinstance(err, OSError) and err.errno == errno.ENOSPC:
        return True
    return isinstance(err, Exception) and f"(os error {errno.ENOSPC})" in str(err)


def write_text(path: str | Path, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_json(path: str | Path, body: Any, **dump: Any) -> Path:
    """``json.dumps(body, **dump)`` plus a newline, atomically."""
    return write_text(path, json.dumps(body, **dump) + "\n")


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (signal 0 checks without signalling)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def is_stale_temp(path: Path) -> bool:
    """A temporary file of :func:`atomic_path` whose writer is gone (or of an older name form, which
    names no writer). A live writer's file is kept: another process may be writing into the folder."""
    if not (path.name.startswith(".") and path.name.endswith(TEMP_SUFFIX)):
        return False
    m = _TEMP_NAME.match(path.name)
    return m is None or not _alive(int(m["pid"]))


def remove_stale_temps(folder: str | Path) -> list[Path]:
    """Delete the stale temporary files (:func:`is_stale_temp`) in ``folder`` and its subfolders
    (hidden folders, such as a virtualenv or .git, are not entered); return what was deleted."""
    removed: list[Path] = []
    root = Path(folder)
    if not root.is_dir():
        return removed
    for here, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            p = Path(here) / name
            if is_stale_temp(p):
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed
