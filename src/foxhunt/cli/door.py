"""The CLI's front door (:mod:`foxhunt.errors`): every command runs through :func:`fails_cleanly`,
which :mod:`foxhunt.cli` applies where it registers the commands, nowhere else."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from foxhunt.cli.present import error_line
from foxhunt.errors import FoxhuntError, FrontDoor, OutOfMemoryError, front_door

F = TypeVar("F", bound=Callable[..., Any])

# typer's own exits and usage errors pass through run_cleanly: click's exception base, found
# through typer (typer 0.2x vendors click; older releases use click itself).
_CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
_TYPER_EXITS = (typer.Exit, typer.Abort, _CLICK_ERROR)


class _Debug:
    """``foxhunt --debug``: a programming error shows its traceback (set by the root callback per call)."""

    on = False


def set_debug(on: bool) -> None:
    _Debug.on = on


def fails_cleanly(fn: F) -> F:
    """Every failure a user can cause ends in one line on stderr and exit status 2: a
    :class:`FoxhuntError`, an output that cannot be written (``OSError``), a request larger than
    the memory (``MemoryError``). Anything else is a programming error: one line and exit 1, or
    its traceback under ``foxhunt --debug``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with front_door(FrontDoor.CLI):  # fixes worded as options (--set ...), not as Python
            return run_cleanly(fn, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def run_cleanly(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """:func:`fails_cleanly`'s body: ``fn(*args, **kwargs)``, each failure one line on stderr."""
    try:
        return fn(*args, **kwargs)
    except FoxhuntError as exc:
        error_line("error", exc.render(FrontDoor.CLI))
        raise typer.Exit(exc.exit_code) from None
    except MemoryError as exc:
        err = OutOfMemoryError(
            "memory",
            f"the request needs more memory than this process may use ({type(exc).__name__}: {exc})",
            "ask for less (fewer --events-per-session or sessions, less data, a smaller replay or "
            "batch) or free memory",
        )
        error_line("error", str(err))
        raise typer.Exit(err.exit_code) from None
    except OSError as exc:  # an output that cannot be written (read-only folder, full disk, ...)
        where = exc.filename or "output"
        error_line("error", f"{where}: {exc.strerror or exc} (fix: choose a writable --out path)")
        raise typer.Exit(2) from None
    except _TYPER_EXITS:
        raise
    except Exception as exc:
        if _Debug.on:
            raise
        error_line(
            "internal error",
            f"{type(exc).__name__}: {exc} (a bug in foxhunt, not in the input: "
            "rerun with --debug for the traceback and report it)",
        )
        raise typer.Exit(1) from None
