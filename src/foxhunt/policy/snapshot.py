"""Host snapshots of checkpoint contents for background saves (:mod:`foxhunt.policy.writer`).

A background save (``Writes.BACKGROUND``) must write the state as it was at the call while training
goes on changing it, so the call copies every tensor to host memory and a writer thread encodes the
copy. At production sizes the copy is about 1.2 GB an epoch (the replay buffer on the GPU). Into
freshly allocated pageable memory it costs the caller the page faults of 1.2 GB and a pageable
device-to-host copy, which CUDA runs synchronously through a staging buffer at a few GB/s. So:

* :class:`HostPool` keeps the host storages from save to save, keyed by (bytes, pinned): a save
  takes them, and the pool gets them back once the save's files are written (or its write failed).
  It holds at most the storages of ``saves`` saves, lent and free (the store passes one more than the
  saves it lets wait at once).
* :class:`Snapshot` copies one save's tensors into storages of the pool. From a CUDA tensor the
  storage is pinned (page-locked) and the copy asynchronous (``non_blocking``) on the current stream,
  with one CUDA event recorded after the save's copies; the writer waits for the event
  (:meth:`Snapshot.written_by`) before it reads a byte. The caller no longer waits for the copy, but
  the kernels it queues next on that stream do (stream order is what makes the copy read the state
  at the call). From a CPU tensor the copy stays synchronous (it is a memcpy); the pool still saves
  the allocation and its page faults.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch
from torch import Tensor

R = TypeVar("R")

_Key = tuple[int, bool]  # (bytes, pinned)


def _allocate(nbytes: int, pinned: bool) -> torch.UntypedStorage:
    if pinned:
        # torch.UntypedStorage(n, device="cpu") cannot pin; PyTorch's host allocator can (it rounds
        # the block up to a power of two, so a pinned storage may lock up to twice its bytes).
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).untyped_storage()
    return torch.UntypedStorage(nbytes)


class HostPool:
    """Host storages reused by background saves: :meth:`take` lends one, :meth:`give` takes a
    save's back once its writer is done with them.

    The storages held (lent and free) are kept within ``saves`` times the largest save's bytes: a
    free storage no save has asked for longest goes first (a replay buffer still filling changes its
    sizes every epoch). Thread-safe: the writer thread gives, the training thread takes.
    """

    def __init__(self, saves: int) -> None:
        if saves < 1:
            raise ValueError(f"a host pool holds the storages of at least one save, got {saves}")
        self.saves = saves
        self.allocations = 0  # storages allocated since the pool was made (the rest were reused)
        self._free: dict[_Key, list[torch.UntypedStorage]] = {}  # least recently given back first
        self._free_bytes = 0
        self._lent_bytes = 0
        self._largest = 0  # bytes of the largest save so far
        self._lock = threading.Lock()

    @property
    def held_bytes(self) -> int:
        """Bytes of every storage of the pool, lent or free."""
        with self._lock:
            return self._lent_bytes + self._free_bytes

    @property
    def limit_bytes(self) -> int:
        """What the pool may hold: ``saves`` times the largest save's bytes."""
        return self.saves * self._largest

    def take(self, nbytes: int, pinned: bool) -> torch.UntypedStorage:
        """A storage of ``nbytes`` bytes, pinned or pageable: a free one, else a new one."""
        key = (nbytes, pinned)
        with self._lock:
            free = self._free.get(key)
            if free:
                storage = free.pop()
                if not free:
                    del self._free[key]
                self._free_bytes -= nbytes
                self._lent_bytes += nbytes
                return storage
            self._trim(extra=nbytes)  # a new storage replaces free ones of sizes no longer asked for
            self._lent_bytes += nbytes
            self.allocations += 1
        return _allocate(nbytes, pinned)

    def saved(self, nbytes: int) -> None:
        """A save of ``nbytes`` bytes took its storages (the bound follows the largest save)."""
        with self._lock:
            self._largest = max(self._largest, nbytes)

    def give(self, storages: list[tuple[torch.UntypedStorage, bool]], *, reuse: bool = True) -> None:
        """Take back the (storage, pinned) pairs of a save whose writer no longer reads them
        (``reuse`` False: drop them, as after a device error when a copy into them may still run)."""
        with self._lock:
            for storage, pinned in storages:
                nbytes = storage.nbytes()
                self._lent_bytes -= nbytes
                if not reuse:
                    continue
                key = (nbytes, pinned)
                free = self._free.pop(key, [])  # re-inserted last: the most recently given back
                free.append(storage)
                self._free[key] = free
                self._free_bytes += nbytes
            self._trim()

    def _trim(self, extra: int = 0) -> None:
        """Drop free storages, least recently given back first, until the pool and ``extra`` more
        bytes fit its limit (caller holds the lock)."""
        while self._free and self._lent_bytes + self._free_bytes + extra > self.limit_bytes:
            key = next(iter(self._free))
            free = self._free[key]
            free.pop(0)
            self._free_bytes -= key[0]
            if not free:
                del self._free[key]

    def clear(self) -> None:
        """Drop the free storages (lent ones go when given back); release pinned memory."""
        with self._lock:
            pinned = any(pin for _, pin in self._free)
            self._free.clear()
            self._free_bytes = 0
        # A dropped pinned block goes back to PyTorch's host allocator, which keeps it page-locked
        # for reuse until its cache is emptied (a private call, absent from CPU builds).
        empty_host_cache = getattr(torch._C, "_host_emptyCache", None)
        if pinned and empty_host_cache is not None:
            empty_host_cache()


class Snapshot:
    """One save's copy of its contents in storages of ``pool``: :meth:`hold` each section, then
    :meth:`seal`, then the writer calls :meth:`written_by`.

    Tensors that share a storage share one copy (so the writer stores them once, as it would the
    originals); every other value is deep-copied (a meta's history list grows after the save).
    """

    def __init__(self, pool: HostPool) -> None:
        self.pool = pool
        self.storages: list[tuple[torch.UntypedStorage, bool]] = []  # (storage, pinned) from the pool
        self._copies: dict[tuple, torch.UntypedStorage] = {}  # source storage -> its copy
        self._streams: dict[torch.device, torch.cuda.Stream] = {}  # where device copies were queued
        self._events: list[torch.cuda.Event] = []
        self._nbytes = 0

    def hold(self, value: Any) -> Any:
        """``value`` with every tensor replaced by a host copy (as at this call) and every other
        value deep-copied."""
        if isinstance(value, Tensor):
            t = value.detach()
            held = self._copy(t)
            return torch.empty(0, dtype=t.dtype).set_(held, t.storage_offset(), t.size(), t.stride())
        if isinstance(value, Mapping):
            return {k: self.hold(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.hold(v) for v in value)
        return copy.deepcopy(value)

    def _copy(self, t: Tensor) -> torch.UntypedStorage:
        src = t.untyped_storage()
        key = (src.device.type, src.device.index, src.data_ptr())
        held = self._copies.get(key)
        if held is not None:
            return held
        nbytes = src.nbytes()
        on_cuda = src.device.type == "cuda" and nbytes > 0
        held = self._copies[key] = self.pool.take(nbytes, pinned=on_cuda)
        self.storages.append((held, on_cuda))
        self._nbytes += nbytes
        if not on_cuda:
            held.copy_(src)
            return held
        # Queued on the current stream, the copy reads the tensor as it is at this call: every kernel
        # training queues later on that stream (CUDA-graph replays launch there too) runs after it.
        # Training's only other streams are the side streams of warm-ups before a graph capture,
        # which wait for the current stream first (side.wait_stream), so they too run after it.
        stream = self._streams.setdefault(src.device, torch.cuda.current_stream(src.device))
        held.copy_(src, non_blocking=True)
        # A source freed after the call (a state dict's clone) may be reused at once by the caching
        # allocator for work on the stream it was allocated on; when that is not this stream,
        # record_stream makes the reuse wait for the copy (on the same stream it changes nothing).
        t.record_stream(stream)
        return held

    def seal(self) -> None:
        """After the last :meth:`hold`: record the event each device's copies complete at."""
        for stream in self._streams.values():
            event = torch.cuda.Event()
            event.record(stream)
            self._events.append(event)
        self.pool.saved(self._nbytes)

    def written_by(self, write: Callable[..., R], *args: Any) -> R:
        """``write(*args)`` once the copies are complete (on the writer thread); the storages go back
        to the pool when it returns or raises."""
        copied = False
        try:
            for event in self._events:
                event.synchronize()
            copied = True
            return write(*args)
        finally:
            self.release(reuse=copied)

    def abandon(self) -> None:
        """Give the storages back when the save fails before it reaches the writer."""
        copied = False
        try:
            self.seal()
            for event in self._events:
                event.synchronize()
            copied = True
        finally:
            self.release(reuse=copied)

    def release(self, *, reuse: bool = True) -> None:
        self.pool.give(self.storages, reuse=reuse)
        self.storages = []
        self._copies.clear()
