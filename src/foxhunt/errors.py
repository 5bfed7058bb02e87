"""Typed errors. Every error names where it happened, what was wrong, and how to fix it.

The CLI catches :class:`FoxhuntError`, prints ``str(error)`` on one line and exits with
``error.exit_code`` (2 for bad input), so these messages are what a researcher reads.
"""

from __future__ import annotations

from pathlib import Path


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


class OutOfMemoryError(FoxhuntError):
    """The request needs more memory than the machine (or the process's limit) gives."""


# --- market data content ----------------------------------------------------------------------


class BadTradePriceError(DataError):
    """A trade carries an undefined, non-finite or non-positive price."""


class DuplicateInputError(DataError):
    """The same data arrives twice: a file given twice (or with its folder), or two files of one
    kind holding the same instrument over overlapping times."""
