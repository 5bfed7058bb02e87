"""Append-only buffers of a session's records, reserved once so a row close never copies them.

A served session's book states and trades arrive chunk by chunk and every close reads all of them
as one array (views, no copy). A buffer of doubling capacity copies everything it holds each time it
doubles: ~2-3 ms at the real ESH4 MBP-10 file's 37 k states (bench/serve.py --parts, the slowest
closes), ~0.1 s at a full ES session's million states, paid at whichever row close happens to cross
the size. So a buffer's first allocation reserves room for :data:`RESERVE_BYTES` of rows instead:
an anonymous memory map whose pages the kernel provides when a row is first written, so the
reservation costs address space, not memory, and the session's rows never move. Past the
reservation (or where the system refuses it: ``ulimit -v``) the buffer doubles as before; the views
of the old buffer that a carried state still holds stay valid, as they did.

The map is ``MAP_NORESERVE``: without it Linux charges the whole gigabyte to the commit count
(``Committed_AS``) at once, so a process holding many buffers (the test suite holds a hundred at
times) looks to the kernel like one that asked for a hundred gigabytes, and where that count is
enforced every other allocation of the process then fails ("Cannot allocate memory": a CI run's
``foxhunt alpha`` did, after the serve tests). Under strict overcommit (``vm.overcommit_memory`` 2)
Linux charges a ``MAP_NORESERVE`` map all the same, so there nothing is reserved and the buffer
doubles from its first allocation.

The reservation is a private anonymous ``mmap`` advised ``MADV_NOHUGEPAGE``, not an ``np.empty``:
NumPy advises its arrays of 4 MB and more into transparent huge pages, and where the kernel's THP
``defrag`` setting is ``madvise`` (this machine's and a common default) the first write into each
2 MB page may stall on compaction: closes of the ESH4 MBP-10 replay that wrote into a fresh page
took ~6 ms more (2 to 4 of its 240 closes a run, in its slowest few) with huge pages and none did
with the advice (``bench/serve.py --parts``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import mmap
import sys
from pathlib import Path
from typing import Any

import numpy as np

RESERVE_BYTES = 1 << 30
"""Address space a buffer reserves at its first allocation (untouched pages use no memory)."""

DType = np.dtype | type

_FIRST = 1024  # rows of a buffer where the reservation is refused

# Linux's MAP_NORESERVE (Python 3.11's mmap module does not name it): no commit charge for the map.
_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform == "linux" else 0)


@functools.cache
def reserves() -> bool:
    """Whether a buffer's first allocation reserves :data:`RESERVE_BYTES`: not under strict
    overcommit, which charges the reservation to the commit limit that every allocation shares."""
    try:
        return Path("/proc/sys/vm/overcommit_memory").read_text().strip() != "2"
    except OSError:  # not Linux: no such file, and no commit count to starve
        return True


def allocate(rows: int, tail: tuple[int, ...], dtype: DType, reserve: bool = True) -> np.ndarray:
    """An uninitialised ``[capacity, *tail]`` buffer of at least ``rows`` rows: the reservation's
    capacity (:data:`RESERVE_BYTES`) when ``reserve`` and the system grants it, else ``rows``."""
    if reserve and reserves():
        row_bytes = max(np.dtype(dtype).itemsize * int(np.prod(tail, dtype=np.int64)), 1)
        capacity = max(rows, RESERVE_BYTES // row_bytes)
        # Refused (an address-space limit, no mmap): grow by doubling instead.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            return _mapped(capacity * row_bytes).view(dtype).reshape(capacity, *tail)
    return np.empty((max(rows, _FIRST), *tail), dtype)


def _mapped(nbytes: int) -> np.ndarray:
    """``nbytes`` of private anonymous memory (provided and charged page by page as written, no huge
    pages) as a writable uint8 array that keeps the mapping alive."""
    mem = mmap.mmap(-1, max(nbytes, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _NORESERVE)
    mem.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(mem, dtype=np.uint8)


def grow(buf: np.ndarray | None, n: int, rows: int, tail: tuple[int, ...], dtype: DType) -> np.ndarray:
    """``buf`` if it holds ``rows`` rows, else a new buffer with its first ``n`` rows copied (the
    first allocation reserves; a full one doubles)."""
    if buf is not None and len(buf) >= rows:
        return buf
    if buf is None:
        return allocate(rows, tail, dtype)
    grown = allocate(max(rows, 2 * len(buf)), tail, dtype, reserve=False)
    grown[:n] = buf[:n]
    return grown


def _copied(buf: np.ndarray, n: int) -> np.ndarray:
    """A new buffer of ``buf``'s capacity with its first ``n`` rows."""
    own = allocate(len(buf), buf.shape[1:], buf.dtype)
    own[:n] = buf[:n]
    return own


class Grown:
    """A 1-d array appended chunk by chunk (module docs). A fork (foxhunt.serve.fork) shares its
    storage: it only ever writes past the rows both hold."""

    def __init__(self, dtype: type) -> None:
        self.dtype = dtype
        self.buf: np.ndarray | None = None
        self.n = 0

    def append(self, part: np.ndarray) -> None:
        m = self.n + len(part)
        self.buf = buf = grow(self.buf, self.n, m, (), self.dtype)
        buf[self.n : m] = part
        self.n = m

    def __fork__(self, memo: dict[int, Any]) -> Grown:
        twin = Grown(self.dtype)
        twin.buf, twin.n = self.buf, self.n
        return twin

    def rows(self) -> np.ndarray:
        view = (self.buf if self.buf is not None else np.empty(0, self.dtype))[: self.n]
        view.flags.writeable = False
        return view


class Appended:
    """The rows of a columns container (foxhunt.data.arrays) appended chunk by chunk (module docs).
    :meth:`rows` are read-only views: a kernel that wrote into its input would raise, not corrupt
    the session. A fork (foxhunt.serve.fork) shares the storage and copies it before its first write
    below the rows it was forked with (an append after a ``truncate`` below them); its original must
    not change while the fork lives (serve keeps one of them)."""

    def __init__(self) -> None:
        self.kind: type | None = None
        self.names: list[str] = []  # the container's fields (dataclasses.fields is slow per call)
        self.buffers: dict[str, np.ndarray] = {}
        self.n = 0
        self._rows: Any = None  # the last rows(), until the next append (a close asks several times)
        self._shared = 0  # a fork's: the rows of the storage its original holds too

    def __fork__(self, memo: dict[int, Any]) -> Appended:
        twin = Appended()
        twin.kind, twin.names, twin.n, twin._rows = self.kind, self.names, self.n, self._rows
        twin.buffers, twin._shared = dict(self.buffers), self.n
        return twin

    def append(self, part: Any) -> None:
        if self.kind is None:
            self.kind = type(part)
            self.names = [f.name for f in dataclasses.fields(part)]
        if self.n < self._shared:  # a fork's write into rows its original holds: a storage of its own
            self.buffers = {k: _copied(b, self.n) for k, b in self.buffers.items()}
            self._shared = 0
        arrays = [getattr(part, k) for k in self.names]
        m = self.n + len(arrays[0])
        for k, a in zip(self.names, arrays, strict=True):
            self.buffers[k] = buf = grow(self.buffers.get(k), self.n, m, a.shape[1:], a.dtype)
            buf[self.n : m] = a
        self.n = m
        self._rows = None

    def truncate(self, n: int) -> None:
        """Drop the rows from ``n`` on (rows appended and then refused)."""
        self.n, self._rows = n, None

    def rows(self) -> Any:
        assert self.kind is not None
        if self._rows is None:
            views = {k: a[: self.n] for k, a in self.buffers.items()}
            for v in views.values():
                v.flags.writeable = False
            self._rows = self.kind(**views)
        return self._rows


__all__ = ["RESERVE_BYTES", "Appended", "Grown", "allocate", "grow"]
