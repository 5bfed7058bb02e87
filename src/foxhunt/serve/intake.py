"""Records in: the monitor's checks, the time bars the kept records enter, and when a row closes
(docs/serve.md, "Records in blocks" and "Catch-up: the bars of one block in one pass").

A record that opens a later bar closes the rows before it (:meth:`Intake.close_rows`: the close made
ahead if it still holds, :mod:`foxhunt.serve.ahead`, else :class:`~foxhunt.serve.close.RowCloser`'s
close) and is then appended to the row state. A replay's blocks (foxhunt.serve.source.StreamBlock)
are handled without Python work per record (:meth:`Intake.on_block`): the monitor checks them with
array operations, a run of clean records of one bar is found by a binary search on ``ts_event`` and
appended at once, and the first record with a fault goes alone through :meth:`Intake.on_record`, so
faults, decisions and every commit's resume point are those of the records one by one. In catch-up
(``serve.closes``) the bars a block closes before its last wait for its last run and are made in one
pass of the row pipeline; a crossed book (a fault the batch keeps) joins a run, its fault held until
the rows before it are made.

``consumed`` (the records taken from the source, dropped ones included) is each commit's resume
point; ``stopped`` (POST /stop) ends the loop after the current record.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from foxhunt.serve.close import RowCloser
from foxhunt.serve.config import CloseMode, ServeConfig
from foxhunt.serve.monitor import DROPPED, Fault, FaultEvent, Monitor
from foxhunt.serve.source import RecordSource, StreamBlock
from foxhunt.serve.state import RecordRows

if TYPE_CHECKING:
    from foxhunt.serve.ahead import Ahead


class Intake:
    """The records taken from the source, checked and entered into their time bars; a row close
    wherever a record opens a later bar."""

    def __init__(self, closer: RowCloser, monitor: Monitor, scfg: ServeConfig, ahead: Ahead) -> None:
        self.closer, self.monitor, self.scfg, self.ahead = closer, monitor, scfg, ahead
        self.buckets = 0  # time buckets the records have opened (each row is one; a halt's are not)
        self.consumed = 0  # records taken from the source, dropped ones included (the resume point)
        self.skip = 0  # after a restart: the records consumed before the last commit
        self.stopped = False  # POST /stop (the HTTP endpoint)
        # Bars closed in catch-up (serve.closes) and not yet made into rows: (the start of the time
        # bucket whose first record closed them, the records consumed before that record, when it came).
        self.closed_by: list[tuple[int, int, float]] = []
        # Crossed-book faults of records a block's runs took in (``_holds``), not yet logged: (the
        # records consumed before the record, the fault), in order; each is logged where one record at
        # a time would have logged it: before the first row its record closes or comes before.
        self.held: list[tuple[int, FaultEvent]] = []

    def fast_forward(self, source: RecordSource) -> None:
        """After a restart: hand the records consumed before the last commit to the state again
        without closing rows (theirs are in the ledger), through a fresh monitor, which drops the
        same records as the first time (its checks depend on the records alone) without logging."""
        state = self.closer.state
        for _ in range(self.skip):
            got = source.next(timeout=0.0)
            assert got is not None  # a replay at full speed always has its next record
            self.consumed += 1
            try:
                rec = state.decode(got.stream, got.payload)
            except ValueError:
                continue
            if any(f.kind in DROPPED for f in self.monitor.check(rec)):  # the same drops, not logged again
                continue
            bucket = state.bucket_of(int(rec["ts_event"][0]))
            if state.bucket is not None and bucket[0] != state.bucket[0] and state.cuttable:
                state.end_session(state.rows())  # rows already served: only the market is kept
            if bucket != state.bucket:
                self.buckets += 1
            state.bucket = bucket
            state.append(got.stream, got.payload)

    def on_record(self, stream: int, payload: bytes) -> None:
        """One record in: checked, a row closed if it opens a later bar, then logged."""
        try:
            rec = self.closer.state.decode(stream, payload)
        except ValueError as exc:
            self.closer.fault(FaultEvent(Fault.CORRUPT, str(exc)))
            return
        if not self._kept(rec):
            return
        self._enter(self.closer.state.bucket_of(int(rec["ts_event"][0])))
        self.closer.state.append(stream, payload)

    def on_block(self, block: StreamBlock) -> None:
        """Records of one stream, handled as ``on_record`` handles them one by one (the same faults,
        closes and ``consumed`` at each close): the runs of clean records of one time bar at once, a
        record with a fault (or a block that is not the stream's records) through ``on_record``."""
        base = self.consumed
        try:
            recs = self.closer.state.decode_block(block.stream, block.payload, block.size)
        except ValueError:
            for k in range(block.count):
                self.consumed = base + k
                self.on_record(block.stream, block.payload[k * block.size : (k + 1) * block.size])
            self.consumed = base + block.count
            return
        i, n = 0, len(recs)
        while i < n and not self.stopped:
            self.consumed = base + i
            clean = i + self.monitor.clean(recs[i:])
            while clean < n and self._holds(recs, clean, base):  # a crossed book joins the run
                clean += 1 + self.monitor.clean(recs[clean + 1 :])
            # A stop waits for the bars closed in catch-up to be made (at the run that ends them).
            while i < clean and (not self.stopped or self.closed_by):
                self.consumed = base + i
                if clean - i == 1:  # one record (a paced feed's block): its time is the monitor's last
                    run, t = clean, self.monitor.last_ts
                else:
                    ts = recs["ts_event"][i:clean]
                    run, t = i + self.closer.state.in_bucket(ts), int(ts[0])
                bucket = self.closer.state.bucket_of(t)
                if run < clean and self._catches_up(bucket) and not self.ahead.holds(self):
                    self._close_later(bucket)  # a later run of clean records closes this bar with its own
                else:
                    self._enter(bucket)
                self.closer.state.append_block(block.stream, recs[i:run])
                i = run
            if i < n and not self.stopped:
                self.consumed = base + i
                self.release()  # the faults before this record's, logged before it
                self.on_record(block.stream, recs[i : i + 1].tobytes())
                i += 1
        self.release(base + i - 1)
        self.held.clear()  # a stop's: of records not taken in (a restart reads them again)
        self.consumed = base + i

    def close_rows(self) -> RecordRows | None:
        """The rows closed by the record in hand (or the source's end): the close made ahead if it
        holds, else the row state's new rows closed now."""
        t0 = time.perf_counter()
        if self.ahead.holds(self):  # made ahead of records that are still the state's (Ahead.prepare checked)
            return self.ahead.adopt(t0)
        if not self.closer.state.has_records():
            return None
        self.ahead.drop()
        closed_by, self.closed_by = self.closed_by, []
        return self.closer.close(closed_by, self.consumed, t0, self.release)

    def release(self, upto: int | None = None) -> None:
        """Log the held faults of the records before the ``upto``-th and that record's (all without
        ``upto``): one record at a time would have logged them before it closed a row."""
        held, k = self.held, 0
        while k < len(held) and (upto is None or held[k][0] <= upto):
            self.closer.fault(held[k][1])
            k += 1
        del held[:k]

    def _kept(self, rec: np.ndarray) -> bool:
        """Whether a record reaches the rows; its faults are logged."""
        faults = self.monitor.check(rec)
        for f in faults:
            self.closer.fault(f)
        return not any(f.kind in DROPPED for f in faults)

    def _holds(self, recs: np.ndarray, k: int, base: int) -> bool:
        """Whether record ``k`` of a block, whose only faults are crossed books (kept, as the batch
        keeps them), joins the block's run of clean records: its faults are held (``held``) until
        the rows before it are made, so a crossed book neither ends a catch-up nor goes through
        ``on_record`` alone. Otherwise the monitor is left as it was, for ``on_record``."""
        rec = recs[k : k + 1]
        faults = self.monitor.check(rec, note=False)
        if not faults or any(f.kind is not Fault.CROSSED for f in faults):
            return False
        self.monitor.note(rec)
        self.held.extend((base + k, f) for f in faults)
        return True

    def _catches_up(self, bucket: tuple[int, int]) -> bool:
        """Whether the bar before ``bucket`` (a later bucket of the same session, which closes it) can
        wait for a later run of the block to be made into rows with it (``serve.closes``): ``_enter``
        would close it now, and no session ends between them."""
        last = self.closer.state.bucket
        return (
            self.scfg.closes is CloseMode.CATCH_UP
            and last is not None
            and bucket != last
            and bucket[0] == last[0]
            and self.buckets >= self.scfg.warmup_rows
        )

    def _close_later(self, bucket: tuple[int, int]) -> None:
        """``_enter(bucket)`` with its close left to the next one: the rows it would make get its resume
        point and its time (the latency of their decisions counts from here)."""
        state = self.closer.state
        self.closed_by.append((state.bucket_start(bucket), self.consumed, time.perf_counter()))
        self.buckets += 1
        state.bucket = bucket

    def _enter(self, bucket: tuple[int, int]) -> None:
        """A kept record of ``bucket`` arrives: a row closes first when it opens a later bar."""
        last = self.closer.state.bucket
        if last is not None and bucket != last:
            new_session = bucket[0] != last[0]
            # Rows <= buckets: while fewer buckets than serve.warmup_rows have passed no row is
            # decided, so the pipeline waits for the session's end (the next close commits every
            # row it has not yet committed).
            if new_session or self.buckets >= self.scfg.warmup_rows:
                rows = self.close_rows()
                if rows is not None and new_session:
                    self.closer.state.end_session(rows)
        if bucket != self.closer.state.bucket:
            self.buckets += 1
        self.closer.state.bucket = bucket
