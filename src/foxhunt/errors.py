"""Typed errors. Every error names where it happened, what was wrong, and how to fix it.

The CLI catches :class:`FoxhuntError`, prints ``str(error)`` on one line and exits with
``error.exit_code`` (2 for bad input), so these messages are what a researcher reads.

**Front doors.** The same error reaches a researcher through the command line or through Python
(:mod:`foxhunt.api`, a notebook), and its fix must be one they can type there: ``--set
folds.n_folds=2`` on the command line, ``api.config(..., overrides=["folds.n_folds=2"])`` in
Python. A message names such a fix with :func:`setting` (config keys) or :func:`door` (any other
option, e.g. ``door("--overwrite", "overwrite=True")``); both leave a marker in the text that
``str(error)`` words for the current :class:`FrontDoor` (:func:`front_door`): Python unless the CLI
entered its own (``foxhunt.cli`` does, around every command). The error's fields keep the markers;
:meth:`FoxhuntError.render` words them for a given door.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from enum import StrEnum
from pathlib import Path


class FrontDoor(StrEnum):
    """How the researcher reached foxhunt: the fix an error gives is worded for it."""

    CLI = "cli"  # the foxhunt command (and the scripts in tools/ and bench/ that take its options)
    API = "api"  # Python: foxhunt.api, a notebook, a script importing foxhunt


_DOOR: ContextVar[FrontDoor] = ContextVar("foxhunt_front_door", default=FrontDoor.API)

# A fix worded per door travels inside the message as  STX cli US api ETX  (control characters no
# path, key or value holds), so an f-string composes it like any text and str() words it late.
_OPEN, _SEP, _CLOSE = "\x02", "\x1f", "\x03"
_MARKER = re.compile(f"{_OPEN}([^{_OPEN}{_CLOSE}{_SEP}]*){_SEP}([^{_OPEN}{_CLOSE}{_SEP}]*){_CLOSE}")


def current_front_door() -> FrontDoor:
    """The front door errors are worded for now (:data:`FrontDoor.API` unless one was entered)."""
    return _DOOR.get()


@contextmanager
def front_door(front: FrontDoor) -> Iterator[None]:
    """Word errors for ``front`` inside the block (the CLI enters :data:`FrontDoor.CLI` per command)."""
    token = _DOOR.set(front)
    try:
        yield
    finally:
        _DOOR.reset(token)


def door(cli: str, api: str) -> str:
    """A fix worded ``cli`` on the command line and ``api`` in Python (module docs), e.g.
    ``door("--overwrite", "overwrite=True")``."""
    return f"{_OPEN}{cli}{_SEP}{api}{_CLOSE}"


def setting(*assignments: str) -> str:
    """The fix "set these config keys" (``section.key=value`` each): ``--set a=x --set b=y`` on the
    command line, ``api.config(..., overrides=["a=x", "b=y"])`` in Python."""
    cli = " ".join(f"--set {a}" for a in assignments)
    api = "api.config(..., overrides=[" + ", ".join(f'"{a}"' for a in assignments) + "])"
    return door(cli, api)


# The options every run-writing command shares, as each door names them (a command's option, the
# API's keyword): foxhunt.outputs, foxhunt.atomic and the training run word their fixes with these.
OUT = door("--out", "out_dir")
OVERWRITE = door("--overwrite", "overwrite=True")
RESUME = door("--resume", "resume=True")
SAME_CONFIG = door("profile, --config and --set values", "api.config(...) (profile, file, overrides)")


def render(text: str, front: FrontDoor | None = None) -> str:
    """``text`` with every :func:`door` / :func:`setting` marker worded for ``front`` (default: the
    current front door)."""
    use_api = (front or _DOOR.get()) is FrontDoor.API
    return _MARKER.sub(lambda m: m.group(2) if use_api else m.group(1), text)


class FoxhuntError(Exception):
    """Base of every error foxhunt raises on purpose.

    ``where`` is a file path or a config key, ``problem`` what was wrong, ``fix`` what to do.
    """

    exit_code = 2

    def __init__(self, where: str | Path, problem: str, fix: str) -> None:
        self.where = str(where)
        self.problem = problem
        self.fix = fix
        super().__init__(f"{self.where}: {problem} (fix: {fix})")

    def render(self, front: FrontDoor | None = None) -> str:
        """The one-line message, its fixes worded for ``front`` (default: the current front door)."""
        return render(str(self.args[0]) if self.args else "", front)

    def __str__(self) -> str:
        return self.render()

    def __reduce__(self):
        # Exception pickles as cls(*args) by default, which a subclass with another signature (the
        # anomaly guard's error takes its result) cannot take: rebuild from the fields instead, so
        # an error raised in a worker process (tools/seeds.py --jobs) reaches the parent intact.
        return _rebuild, (type(self), self.args, self.__dict__)


def _rebuild(cls: type[FoxhuntError], args: tuple, state: dict) -> FoxhuntError:
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class ConfigError(FoxhuntError):
    """A configuration key or value is unknown or invalid."""


# --- data input -------------------------------------------------------------------------------


class DataError(FoxhuntError):
    """Base of every problem found in market data input."""


class MissingFileError(DataError):
    """The input path does not exist."""


class EmptyFileError(DataError):
    """The file has zero bytes or holds no records."""


class NotDbnError(DataError):
    """The file is not a DBN stream (plain or zstd-compressed)."""


class CorruptCompressionError(DataError):
    """The zstd stream is truncated or corrupt, or the DBN stream ends mid-record."""


class SchemaMismatchError(DataError):
    """The file's schema is not the one the caller (or ``data_source``) asked for."""


class NonMonotonicTimestampError(DataError):
    """Timestamps go backwards within one instrument."""


class UndefinedPriceError(DataError):
    """A populated book level (size > 0) carries the undefined-price sentinel."""


class CrossedBookError(DataError):
    """Too many end-of-event book states are crossed or locked (bid >= ask)."""


class BarSpecError(DataError):
    """The requested bar length cannot be built from the input (for example 30 s from 1 min)."""


# --- outputs and runs -------------------------------------------------------------------------


class OutputError(FoxhuntError):
    """An output path cannot be written (a file where a folder goes, a read-only folder), or holds a
    finished result that only ``--overwrite`` may replace."""


class ResumeError(FoxhuntError):
    """``--resume`` names no run folder, or a run recorded with another configuration."""


class PolicyError(FoxhuntError):
    """A policy given through the API answered something that is not an action (wrong dtype, shape
    or range); ``where`` names the policy."""


class OutOfMemoryError(FoxhuntError):
    """The request needs more memory than the machine (or the process's limit) gives."""


# --- market data content ----------------------------------------------------------------------


class BadTradePriceError(DataError):
    """A trade carries an undefined, non-finite or non-positive price."""


class DuplicateInputError(DataError):
    """The same data arrives twice: a file given twice (or with its folder), or two files of one
    kind holding the same instrument over overlapping times."""
