"""When a :class:`~foxhunt.policy.store.CheckpointStore`'s saves reach the disk: now, or on one
writer thread from a held copy of the state (:mod:`foxhunt.policy.snapshot`), so training does not
wait for hashing, writing and fsyncing a 1-2 GB checkpoint every epoch."""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from enum import Enum
from typing import Any

from foxhunt.policy.checkpoint import CheckpointContents
from foxhunt.policy.snapshot import HostPool, Snapshot

MAX_PENDING = 2
"""Background saves a :class:`CheckpointWriter` holds in memory at once (each a copy of the state).
Its host pool keeps the storages of one more save at most (:class:`foxhunt.policy.snapshot.HostPool`)."""


class Writes(Enum):
    """When a :class:`CheckpointWriter`'s saves reach the disk."""

    NOW = "now"  # before the save returns
    BACKGROUND = "background"  # the save copies the state to reused host buffers; a writer thread writes it


class CheckpointWriter:
    """Runs a store's writes in order, now or on one writer thread (``writes``)."""

    def __init__(self, writes: Writes = Writes.NOW) -> None:
        self.writes = writes
        self._thread: ThreadPoolExecutor | None = None
        self._pending: deque[Future] = deque()  # submitted saves, oldest first
        self.pool = HostPool(saves=MAX_PENDING + 1)
        """The host storages background saves copy into, reused from save to save."""

    def wait(self, keep: int = 0) -> None:
        """Block until all but the newest ``keep`` pending saves are on disk; raise the first error
        (a failed write surfaces here, at a later save or read, not where the save was asked for)."""
        while len(self._pending) > keep:
            self._pending.popleft().result()

    def close(self) -> None:
        """Wait for the pending save, stop the writer thread and free the host pool's storages (the
        writer stays usable: a later save starts a new thread and fills the pool again)."""
        try:
            self.wait()
        finally:
            if self._thread is not None:
                self._thread.shutdown(wait=True)
                self._thread = None
            self.pool.clear()

    def submit(self, write: Callable[..., Any], contents: CheckpointContents, *args: Any) -> None:
        """Run ``write(contents, *args)`` now, or on the writer thread with a held copy of
        ``contents`` (:class:`~foxhunt.policy.snapshot.Snapshot`: host storages of :attr:`pool`, the
        state as at this call), after the saves before it (one thread: saves keep their order, ring
        before ``last``). At most :data:`MAX_PENDING` held copies wait (an epoch's ``best`` and ring
        + ``last``): where writing is slower than training, training waits rather than piling up
        gigabytes of copies. A copy's storages go back to the pool once its write is done or failed."""
        self.wait(keep=MAX_PENDING - 1)
        if self.writes is Writes.NOW:
            write(contents, *args)
            return
        snap = Snapshot(self.pool)  # one table for both sections: a tensor in both is copied once
        try:
            held = CheckpointContents(
                policy=snap.hold(contents.policy),
                branches=contents.branches,
                training=None if contents.training is None else snap.hold(contents.training),
                meta=copy.deepcopy(dict(contents.meta)),
                layout=contents.layout,
            )
            snap.seal()
            if self._thread is None:
                self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="foxhunt-checkpoint")
            self._pending.append(self._thread.submit(snap.written_by, write, held, *args))
        except BaseException:
            snap.abandon()
            raise
