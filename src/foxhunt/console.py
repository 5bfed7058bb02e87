"""What a long command tells the person running it: progress bars, one line per step, the result.

One interface, :class:`Reporter`, that every stage takes and calls (``task()`` for work with a count,
``say()`` for a line a person reads, ``detail()`` for the long diagnostic lines); three displays,
chosen by where the output goes:

* **a terminal**: rich progress bars (count, elapsed, ETA), the lines printed above them;
* **not a terminal** (a log file, CI, a pipe): plain lines prefixed with a UTC timestamp, a task's
  start and end, and a progress line at most every ``plain_every_s`` seconds;
* **a callable** (library use, ``train(..., log=print)``): the lines only, no timestamps.

Verbosity: ``QUIET`` shows nothing (the command's result and errors are printed by the CLI, not
here), ``NORMAL`` the bars and the short lines, ``VERBOSE`` the long diagnostic lines too. The
default of every stage, :data:`SILENT`, shows nothing.

This module imports only the standard library at the top (rich is imported when a terminal display
starts), so that the command line starts fast.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from enum import IntEnum
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

T = TypeVar("T")


class Verbosity(IntEnum):
    QUIET = 0  # nothing but the result and errors
    NORMAL = 1  # progress bars (or plain progress lines) and one short line per step
    VERBOSE = 2  # also the long diagnostic lines


def utc_stamp(t: float) -> str:
    """``2026-12-01T12:00:00Z``: the prefix of a plain log line (seconds, UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def duration(seconds: float) -> str:
    """A short duration: ``45s``, ``1m05s``, ``2h03m`` (rounded to the second)."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _num(x: float, spec: str) -> str:
    return "-" if not math.isfinite(x) else format(x, spec)


def idle_note(trades: Sequence[int], what: str = "fold") -> str:
    """What a run's last line says when the agent did not trade: ``""`` when it traded everywhere,
    ``"; the agent never traded (0 trades in 3 folds)"``, or ``"; the agent did not trade in fold 2
    (1 of 3)"`` (``what``: the unit ``trades`` is counted per, e.g. "fold" or "seed")."""
    idle = [i for i, n in enumerate(trades) if n == 0]
    if not idle:
        return ""
    n = len(trades)
    if len(idle) == n:
        return f"; the agent never traded (0 trades in {n} {what}{'s' if n != 1 else ''})"
    named = ", ".join(map(str, idle))
    return f"; the agent did not trade in {what}{'s' if len(idle) > 1 else ''} {named} ({len(idle)} of {n})"


def epoch_line(
    fold: int,
    n_folds: int,
    epoch: int,
    n_epochs: int,
    *,
    select_net: float,
    trades: float,
    sharpe: float,
    loss: float,
    seconds: float,
    eta_s: float | None,
    train_sharpe: float = float("nan"),
) -> str:
    """The one short line per training epoch, in plain words (``fold`` and ``epoch`` are 0-based
    indices, shown counted from 1)::

        fold 1/3 epoch 3/6  select net +1,234.50  trades 16  Sharpe 2.1  loss 0.41  12.3 s  ETA 1m05s

    ``select net``, ``trades`` and ``Sharpe`` (annualised) are those of the greedy backtest over the
    fold's selection period (the tail of its training rows, which picks the reported epoch; never the
    validation period), ``loss`` the learner's mean loss over the epoch (2 significant digits: a
    trend to watch, the exact values are in TensorBoard and ``--verbose``), then the epoch's seconds
    and the estimated time left for the whole training (left out when none is left). A value that is
    not finite reads ``-``. Under ``train.selection = last`` there is no selection backtest (all three
    are NaN): the line shows ``train Sharpe``, the annualised Sharpe of the epoch's collected rewards
    (exploring, in-sample), instead::

        fold 1/3 epoch 3/6  train Sharpe 4.2  loss 0.41  12.3 s  ETA 1m05s
    """
    parts = [f"fold {fold + 1}/{n_folds} epoch {epoch + 1}/{n_epochs}"]
    if math.isnan(select_net) and math.isnan(sharpe) and math.isnan(trades):
        parts.append(f"train Sharpe {_num(train_sharpe, '.1f' if abs(train_sharpe) < 100 else '.0f')}")
    else:
        parts += [
            f"select net {_num(select_net, '+,.2f')}",
            f"trades {_num(trades, '.0f')}",
            f"Sharpe {_num(sharpe, '.1f' if abs(sharpe) < 100 else '.0f')}",
        ]
    parts += [
        f"loss {_num(loss, '.2g')}",
        f"{seconds:.1f} s",
    ]
    if eta_s is not None and eta_s > 0:
        parts.append(f"ETA {duration(eta_s)}")
    return "  ".join(parts)


class Task:
    """One piece of work with a count (files, folds, epochs, updates): advanced by the stage."""

    def __init__(self, reporter: Reporter, description: str, total: float | None, announce: bool) -> None:
        self.reporter = reporter
        self.description = description
        self.total = total
        self.completed = 0.0
        self.announce = announce
        self.started = reporter.clock()
        self._last_line = self.started
        self._id: TaskID | None = None

    @property
    def elapsed_s(self) -> float:
        return self.reporter.clock() - self.started

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the mean pace so far (None before the first step or without a total)."""
        if not self.total or self.completed <= 0:
            return None
        return self.elapsed_s / self.completed * max(0.0, self.total - self.completed)

    def advance(self, n: float = 1) -> None:
        self.completed += n
        self.reporter._advanced(self)

    def update(self, *, description: str | None = None, total: float | None = None) -> None:
        if description is not None:
            self.description = description
        if total is not None:
            self.total = total
        self.reporter._advanced(self)

    def count(self) -> str:
        """``3/5`` (or ``3`` without a total)."""
        done = f"{self.completed:,.0f}"
        return f"{done}/{self.total:,.0f}" if self.total else done


class Reporter:
    """Progress and lines for a person (see the module docstring for the three displays).

    ``write`` receives finished lines (plain and callable displays); ``console`` (a rich console on
    a terminal) switches to the live bars instead. ``stamp`` prefixes each line with UTC time.
    """

    def __init__(
        self,
        verbosity: Verbosity = Verbosity.NORMAL,
        *,
        write: Callable[[str], None] | None = None,
        console: Console | None = None,
        stamp: bool = False,
        plain_every_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.verbosity = verbosity
        self.write = write
        self.console = console
        self.stamp = stamp
        self.plain_every_s = plain_every_s
        self.clock = clock
        self._bars: Progress | None = None
        self._open = 0

    @classmethod
    def lines(cls, write: Callable[[str], None]) -> Reporter:
        """Library use: the short lines to ``write`` (``print``, a logger), no bars, no stamps."""
        return cls(Verbosity.NORMAL, write=write)

    @classmethod
    def for_stderr(cls, verbosity: Verbosity, console: Console) -> Reporter:
        """The command line's display: live bars on a terminal, timestamped lines otherwise (a
        progress line at most every 30 s, every 5 s when verbose)."""
        if console.is_terminal:
            return cls(verbosity, console=console)
        every = 5.0 if verbosity >= Verbosity.VERBOSE else 30.0
        return cls(verbosity, write=_stderr_line, stamp=True, plain_every_s=every)

    @property
    def live(self) -> bool:
        return self.console is not None

    # --- lines ------------------------------------------------------------------------------

    def say(self, text: str) -> None:
        """A line for a person (normal and verbose)."""
        if self.verbosity >= Verbosity.NORMAL:
            self._emit(text)

    def detail(self, text: str) -> None:
        """A long diagnostic line (verbose only)."""
        if self.verbosity >= Verbosity.VERBOSE:
            self._emit(text)

    def _emit(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)
        elif self.write is not None:
            self.write(f"{utc_stamp(self.clock())} {text}" if self.stamp else text)

    # --- tasks ------------------------------------------------------------------------------

    @contextmanager
    def task(self, description: str, total: float | None = None, *, announce: bool = True) -> Iterator[Task]:
        """One piece of work: a bar on a terminal, or start and progress lines; a "done" line at its
        end (both only when ``announce``: not for the short bars inside a step, such as an epoch's
        updates). The stage calls ``advance()`` on the yielded :class:`Task`."""
        task = Task(self, description, total, announce)
        shown = self.verbosity >= Verbosity.NORMAL
        if shown and self.live:
            task._id = self._start_bar(task)
        elif shown and announce:
            self._emit(f"{description} ...")
        finished = False  # no "done" line for a task that an error (or a break) ended
        try:
            yield task
            finished = True
        finally:
            if task._id is not None:
                self._stop_bar(task._id)  # bars are transient: the "done" line below stays
            if shown and announce and finished:
                counted = f" {task.count()}" if task.total or task.completed else ""
                self._emit(f"{task.description}: done{counted} in {duration(task.elapsed_s)}")

    def track(self, items: Sequence[T], description: str, *, announce: bool = True) -> Iterator[T]:
        """``items`` one by one inside a task of ``len(items)`` steps, each advanced when the loop
        asks for the next item (so a ``continue`` counts too): ``for fd in progress.track(folds, "x")``."""
        with self.task(description, total=len(items), announce=announce) as task:
            for item in items:
                yield item
                task.advance()

    def _advanced(self, task: Task) -> None:
        if self._bars is not None and task._id is not None:
            self._bars.update(
                task._id, completed=task.completed, total=task.total, description=task.description
            )
            return
        if self.verbosity < Verbosity.NORMAL or not task.announce or self.live:
            return
        now = self.clock()
        if now - task._last_line >= self.plain_every_s:
            task._last_line = now
            eta = task.eta_s
            self._emit(f"{task.description}: {task.count()}" + (f", ETA {duration(eta)}" if eta else ""))

    def _start_bar(self, task: Task) -> TaskID:
        if self._bars is None:
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._bars = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}", markup=False),  # names from data, never markup
                BarColumn(),  # pulses for a step without a count
                TimeElapsedColumn(),
                _count_and_eta(),
                console=self.console,
                transient=True,
                # stdout carries the command's result (`config show --toml > my.toml`): never route it
                # to the display on stderr; stray stderr writes (warnings) print above the bars.
                redirect_stdout=False,
            )
            self._bars.start()
        self._open += 1
        return self._bars.add_task(task.description, total=task.total)

    def _stop_bar(self, task_id: TaskID) -> None:
        assert self._bars is not None
        self._bars.remove_task(task_id)
        self._open -= 1
        if self._open == 0:
            self._bars.stop()
            self._bars = None


def _count_and_eta() -> Any:
    """A rich column ``3/5  ETA 0:01:05`` (empty for a step without a count: no ``0/?``)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class CountAndEta(ProgressColumn):
        def render(self, task: Any) -> Text:
            if task.total is None:
                return Text("")
            left = task.time_remaining
            eta = "" if left is None or task.finished else f"  ETA {duration(left)}"
            return Text(f"{task.completed:,.0f}/{task.total:,.0f}{eta}")

    return CountAndEta()


def _stderr_line(text: str) -> None:
    # sys.stderr is looked up per line: test runners and redirections replace it after import.
    print(text, file=sys.stderr, flush=True)


SILENT = Reporter(Verbosity.QUIET)
"""The default of every stage: shows nothing."""


def reporter_or_lines(progress: Reporter | None, log: Callable[[str], Any] | None) -> Reporter:
    """The reporter a stage uses: ``progress`` if given, else ``log``'s lines, else :data:`SILENT`."""
    if progress is not None:
        return progress
    return Reporter.lines(log) if log is not None else SILENT
