"""The service loop: records in, decisions out, until the replay ends or a stop (docs/serve.md).

Each turn takes the source's next block (or record) through the wait ``serve.wait`` names
(:mod:`foxhunt.serve.waits`), having first made the next close ahead while nothing is due
(:mod:`foxhunt.serve.ahead`), and hands it to :class:`~foxhunt.serve.intake.Intake`, which closes the
rows it opens. A stall (no record for ``serve.stall_seconds``) and a lost connection are faults; a
lost connection is retried ``serve.reconnects`` times. The cyclic garbage collector runs only where it
delays no decision (:func:`collected_when_idle`; docs/serve.md: a full collection took 160-200 ms).
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator
from typing import Any

from foxhunt.serve.ahead import Ahead
from foxhunt.serve.config import AheadMode, ServeConfig, Wait
from foxhunt.serve.decide import Decider
from foxhunt.serve.intake import Intake
from foxhunt.serve.monitor import Fault, FaultEvent
from foxhunt.serve.source import Disconnected, RecordSource, SourceEnded, StreamBlock
from foxhunt.serve.waits import TIMER_SLACK_NS, Waits, timer_slack

# A source that is never idle (a replay at full speed) has its garbage collected after this many
# times the automatic collector's thresholds (its decisions wait for their block either way).
GC_BUSY = 100


class Loop:
    """Takes the source's records until it ends or the service is stopped."""

    def __init__(
        self,
        source: RecordSource,
        intake: Intake,
        ahead: Ahead,
        decider: Decider,
        scfg: ServeConfig,
        log: Callable[[str], None],
    ) -> None:
        self.source, self.intake, self.ahead, self.decider = source, intake, ahead, decider
        self.scfg, self.log = scfg, log
        self.waits = Waits(intake, ahead)
        self.last_record_wall = time.monotonic()

    def run(self) -> None:
        """Serve until the replay ends or the intake is stopped."""
        self.intake.fast_forward(self.source)
        # Records in blocks where the source has them (foxhunt.serve.source.StreamBlock), else one by one.
        take = getattr(self.source, "next_block", None) or self.source.next
        ready = getattr(self.source, "ready", None)
        ahead = self.scfg.ahead is AheadMode.IDLE and ready is not None
        spin = self.scfg.wait is Wait.SPIN and ready is not None
        rehearsal = getattr(self.source, "rehearsal", None) if ahead else None
        with collected_when_idle(), timer_slack(TIMER_SLACK_NS):
            self._loop(take, ready, ahead, spin, rehearsal)

    def _loop(self, take: Any, ready: Any, ahead: bool, spin: bool, rehearsal: Any) -> None:
        intake, fault = self.intake, self.intake.closer.fault
        frozen_at = self.decider.compiled_at
        while not intake.stopped:
            # The last block's decisions are out: what its closes replaced is freed now, not inside them.
            self.ahead.retired.clear()
            if self.decider.compiled_at != frozen_at:  # what the compile loaded: frozen too
                frozen_at = self.decider.compiled_at
                gc.collect()
                gc.freeze()
            idle = ready is not None and not ready()
            if idle and ahead:
                self.ahead.prepare(intake)  # nothing due: the next close, ahead (serve.ahead)
            gen = _due_generation(busy=not idle)
            if gen is not None and (not idle or not ready()):
                gc.collect(gen)  # the cyclic garbage collector where it delays no decision
            timeout = min(self.scfg.stall_seconds, 1.0)
            wait = self.waits.take_spinning if spin else self.waits.take_rehearsing
            try:
                got = wait(take, ready, rehearsal, timeout)
            except SourceEnded:
                intake.close_rows()  # the files' last row is complete when they end
                break
            except Disconnected as exc:
                fault(FaultEvent(Fault.DISCONNECT, str(exc) or "connection lost"))
                if not self._reconnect():
                    break
                continue
            if got is None:
                if time.monotonic() - self.last_record_wall > self.scfg.stall_seconds:
                    fault(FaultEvent(Fault.STALL, f"no record for {self.scfg.stall_seconds:g} s"))
                    self.last_record_wall = time.monotonic()
                continue
            self.last_record_wall = time.monotonic()
            if isinstance(got, StreamBlock):
                intake.on_block(got)
                continue
            intake.on_record(got.stream, got.payload)
            intake.consumed += 1  # after: a row close inside on_record commits the records before this one

    def _reconnect(self) -> bool:
        for attempt in range(1, self.scfg.reconnects + 1):
            time.sleep(self.scfg.reconnect_seconds)
            try:
                self.source.reconnect()
                self.log(f"reconnected (attempt {attempt})")
                return True
            except Exception as exc:  # noqa: BLE001 (any failure to connect is one more attempt)
                self.log(f"reconnect attempt {attempt} failed: {exc}")
        return False


def _due_generation(busy: bool) -> int | None:
    """The generation the automatic collector would collect now (the oldest whose count has reached its
    threshold; ``busy``: GC_BUSY times the thresholds), or None."""
    scale = GC_BUSY if busy else 1
    due = [
        g
        for g, (n, limit) in enumerate(zip(gc.get_count(), gc.get_threshold(), strict=True))
        if n >= limit * scale
    ]
    return due[-1] if due else None


@contextlib.contextmanager
def collected_when_idle() -> Iterator[None]:
    """The serve loop with the automatic collector off (``Loop._loop`` collects where it delays no
    decision: while nothing is due, or after a block's decisions are out), and what was loaded before
    it (modules, the network, the libraries: ~400 k objects) frozen out of every collection. Left
    automatic, a collection runs whenever allocations pass a threshold, inside a close as likely as
    anywhere, and a full one of those objects took 160-200 ms (docs/serve.md). Both undone at the end
    (a test process runs many services)."""
    gc.collect()
    gc.freeze()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()
