"""Closes made ahead (``serve.ahead = idle``; docs/serve.md, "Closes made ahead").

While the source has no record due (``ready()``), the service runs the close that a next record of a
later bar would run, on a shallow copy of its :class:`~foxhunt.serve.close.RowCloser` whose row state
and env are forks (:mod:`foxhunt.serve.fork`) and whose commits are held back. The next record keeps
it if it opens a later bar and nothing the close reads has changed (:meth:`Ahead.key`: no record
taken in or dropped, no fault, no flatten); its decision is then out at once and committed as the
close made at the record would be. Otherwise it is dropped and the original state, which it never
touched, makes the close when due. So the rows, decisions, commits and faults are those of closes
made at their records (tests/serve/test_serve.py), and a quiet feed's decision latency is the
keeping, not the close.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any, Protocol

import torch

from foxhunt.serve.close import CLOSED, RowCloser
from foxhunt.serve.config import ServeConfig
from foxhunt.serve.decide import Decider
from foxhunt.serve.fork import fork
from foxhunt.serve.monitor import FaultEvent
from foxhunt.serve.state import RecordRows


class IntakeView(Protocol):
    """What a close made ahead reads of the records taken in (:class:`foxhunt.serve.intake.Intake`
    is one; the intake holds the :class:`Ahead`, so this module names only what it reads)."""

    consumed: int
    buckets: int
    held: list[tuple[int, FaultEvent]]
    closed_by: list[tuple[int, int, float]]
    stopped: bool


@dataclasses.dataclass(frozen=True)
class MadeAhead:
    """A close made ahead: the service's key when made, the forked closer that made it, its rows,
    the decider's caches before it (restored if it is dropped)."""

    key: tuple
    twin: RowCloser
    rows: RecordRows
    decider_cache: tuple


class Ahead:
    """The close made ahead on a fork while the feed is idle (``waiting``), kept or dropped at the
    next record; how many were made and kept."""

    def __init__(self, closer: RowCloser, decider: Decider, scfg: ServeConfig) -> None:
        self.closer, self.decider, self.scfg = closer, decider, scfg
        self.waiting: MadeAhead | None = None
        self.retired: list[Any] = []  # what closes replaced, freed once their decisions are out
        self.made = self.kept = 0

    def key(self, intake: IntakeView) -> tuple:
        """What a close depends on besides the market: a close made ahead is kept only if none of it
        changed (a record taken in or dropped, a fault, an operator's flatten, a row closed)."""
        closer = self.closer
        return (
            intake.consumed,
            closer.state.records,
            closer.state.bucket,
            intake.buckets,
            closer.rows_done,
            closer.faulted_until,
            closer.flatten_now,
            id(closer.pending),
        )

    def prepare(self, intake: IntakeView) -> None:
        """While no record is due: make the close that a next record of a later bar would make, on a
        fork of the closer (its own close code on a shallow copy whose row state and env are forks,
        :mod:`foxhunt.serve.fork`), its commits held back. It is kept by
        :meth:`foxhunt.serve.intake.Intake.close_rows` if nothing changed before the close
        (:meth:`key`), else dropped unseen."""
        key = self.key(intake)
        if self.waiting is not None and self.waiting.key == key:
            return
        self.drop()
        closer = self.closer
        if (
            closer.state.bucket is None
            or intake.buckets < self.scfg.warmup_rows  # the next close may not come at the next bar
            or intake.held
            or intake.closed_by
            or closer.flatten_now
            or intake.stopped
            or not closer.state.has_records()
        ):
            return
        decider = self.decider
        cache = (decider._next, decider._owned)  # what the fork's step leaves in the shared decider
        twin = copy.copy(closer)
        twin.state = fork(closer.state, {id(closer.state._tmp): closer.state._tmp})
        if closer.env is not None:
            twin.env = env = copy.copy(closer.env)
            env.state = None if env.state is None else env.state.map(torch.clone)
        twin.deferred = []
        try:
            # No bar closed in catch-up and no held fault (checked above): nothing to release.
            rows = twin.close([], intake.consumed, time.perf_counter(), _nothing_held)
        except Exception:  # noqa: BLE001 (the close made when due reports it)
            rows = None
        if rows is None or twin.faulted_until != closer.faulted_until:
            decider._next, decider._owned = cache
            return
        self.waiting = MadeAhead(key, twin, rows, cache)
        self.made += 1

    def holds(self, intake: IntakeView) -> bool:
        """Whether the close made ahead is this close: nothing it depends on has changed and no held
        fault comes before its rows."""
        a = self.waiting
        return a is not None and not intake.held and not intake.closed_by and a.key == self.key(intake)

    def drop(self) -> None:
        """Drop the close made ahead (the decider's caches as they were before it)."""
        a, self.waiting = self.waiting, None
        if a is not None:
            self.decider._next, self.decider._owned = a.decider_cache
            self.retired.append(a)  # freed after the close in hand (foxhunt.serve.loop)

    def adopt(self, t0: float) -> RecordRows:
        """Keep the close made ahead: its state becomes the closer's, its rows are published (their
        latency counts from ``t0``, the closing record's close, to now)."""
        a, self.waiting = self.waiting, None
        assert a is not None
        twin, closer = a.twin, self.closer
        latency = (time.perf_counter() - t0) * 1e6
        assert twin.deferred is not None
        # The decisions out first (their rows were made, snapshots included, by the fork), then the
        # fork's state becomes the closer's; what it replaces (the row state, the env) is freed after
        # the block (freeing a row state here took 0.2-0.7 ms of the decision's latency).
        publisher = closer.publisher
        with publisher.ledger.rows():
            for made in twin.deferred:
                publisher.publish(made, latency)
        self.kept += 1
        self.retired.extend(getattr(closer, name) for name in CLOSED)
        self.retired.append(a)
        for name in CLOSED:
            setattr(closer, name, getattr(twin, name))
        return a.rows


def _nothing_held(upto: int | None = None) -> None:
    """The release of a fork's close: it starts with no held fault."""
