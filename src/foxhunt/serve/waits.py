"""The waits for the next record (``serve.wait``; docs/serve.md, "Waiting by spinning" and
"Rehearsing the path of a due record").

``sleep`` blocks in the source (the serving thread's timer slack set to 1 ns, :func:`timer_slack`,
so that its sleeps end on time), ``spin`` polls the source's ``ready()`` on the core. Either,
while a close made ahead waits (:mod:`foxhunt.serve.ahead`), rehearses the path a due record's
block goes through every ``REHEARSE_S`` (:meth:`Waits.rehearse`), so that the code and data of that
path stay in the caches.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from foxhunt.serve.ahead import Ahead
from foxhunt.serve.intake import Intake
from foxhunt.serve.source import StreamBlock

# How often a wait rehearses a due record's path (Waits.rehearse): ~30 us warm, so ~3% of the
# core, and a record that comes during one waits for its end (~3% of them, <= ~30 us).
REHEARSE_S = 1e-3
# Linux's prctl options for a thread's timer slack (<linux/prctl.h>), and the serving thread's.
PR_SET_TIMERSLACK, PR_GET_TIMERSLACK = 29, 30
TIMER_SLACK_NS = 1


class Waits:
    """The two ways to wait for the source's next record, each rehearsing a due record's path while a
    close made ahead waits."""

    def __init__(self, intake: Intake, ahead: Ahead) -> None:
        self.intake, self.ahead = intake, ahead

    def take_spinning(self, take: Any, ready: Any, rehearsal: Any, timeout: float) -> Any:
        """``take`` for a spinning wait (``serve.wait = spin``): ``ready()`` polled here until a record
        is due (or ``timeout``), the due record's path rehearsed every ``REHEARSE_S`` while a close made
        ahead waits (the first at once: making the close left the caches cold); the source is then
        called with its record due, or none, and never sleeps."""
        now = time.monotonic()
        deadline, rehearsed = now + timeout, now - REHEARSE_S
        while not ready() and now < deadline and not self.intake.stopped:
            if rehearsal is not None and self.ahead.waiting is not None and now - rehearsed >= REHEARSE_S:
                self.rehearse(rehearsal())
                rehearsed = now
            # A syscall of ~1 us that lets another thread take the GIL (the live client's, to queue a
            # record; the HTTP server's). time.sleep(0) would sleep ~75 us (timer slack).
            os.sched_yield()
            now = time.monotonic()
        return take(timeout=0.0)

    def take_rehearsing(self, take: Any, ready: Any, rehearsal: Any, timeout: float) -> Any:
        """``take(timeout)`` for a blocked wait (``serve.wait = sleep``): while a close made ahead
        waits, blocked in the source ``REHEARSE_S`` at a time with the due record's path rehearsed
        between (the first at once: making the close left the caches cold), so that a blocked wait
        keeps that path warm too; the core sleeps all but a few percent of the time. Otherwise one
        plain take."""
        if rehearsal is None or self.ahead.waiting is None:
            return take(timeout=timeout)
        now = time.monotonic()
        deadline = now + timeout
        while True:
            if not ready():
                self.rehearse(rehearsal())
                now = time.monotonic()
            got = take(timeout=min(REHEARSE_S, max(deadline - now, 0.0)))
            now = time.monotonic()
            if got is not None or now >= deadline or self.intake.stopped or self.ahead.waiting is None:
                return got

    def rehearse(self, block: StreamBlock | None) -> None:
        """What a due record's block goes through before a close made ahead is kept (``on_block``: the
        source's block, its decoding, the monitor's check, its time bar; ``Ahead.holds``), run again
        on the last record taken, with no effect (the monitor notes nothing): either wait runs it
        every ``REHEARSE_S`` while a close made ahead waits, so that the code and data of that path stay
        in the caches, as trading systems keep their order path warm. On this kind of machine an idle
        core's caches go cold within 10-100 ms even when it spins (measured: the source's block and
        the monitor's check take 8 us back to back, 16 us after 10 ms of spinning, 50 us after 100 ms),
        and a live feed's next record is usually ~1 s away."""
        if block is None:
            return
        intake = self.intake
        state = intake.closer.state
        try:
            recs = state.decode_block(block.stream, block.payload, block.size)
        except ValueError:
            return
        if intake.monitor.clean(recs, note=False) and intake.monitor.last_ts is not None:
            state.bucket_of(intake.monitor.last_ts)
        self.ahead.holds(intake)


@contextlib.contextmanager
def timer_slack(ns: int) -> Iterator[None]:
    """The serving thread's timer slack set to ``ns`` (Linux's ``prctl(PR_SET_TIMERSLACK)``; a no-op
    elsewhere), the old one restored at the end. Linux lets a timed sleep of a normal thread end up to
    its slack late (50 us by default) so that wake-ups coalesce: a blocked wait for a record due in
    1 ms woke 68 us late at the median (387 us p99) on this kind of machine, with 1 ns 15 us (50 us),
    and that lateness is part of every decision's latency under ``serve.wait = sleep``."""
    prctl = _prctl()
    old = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0) if prctl is not None else -1
    if old > 0:
        prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0)
    try:
        yield
    finally:
        if old > 0:
            prctl(PR_SET_TIMERSLACK, old, 0, 0, 0)


def _prctl() -> Any:
    """libc's ``prctl`` where there is one (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
