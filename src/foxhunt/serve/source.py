"""Record sources: where ``foxhunt serve`` gets its records, one interface for replay and live.

A source names its streams up front (:class:`StreamMeta`: the schema, dataset and symbols of each,
what a DBN file's header says) and then hands out records one at a time as raw DBN record bytes
(:class:`StreamRecord`), in arrival order. ``next(timeout)`` returns None when nothing arrived in
``timeout`` seconds (the service's stall check), raises :class:`SourceEnded` when a replay has no
more records and :class:`Disconnected` when a live connection dropped (``reconnect()`` tries again).
``next_block(timeout)`` is the same with the records that are there at once (:class:`StreamBlock`:
consecutive records of one stream, up to ``BLOCK``), which the service handles without Python work
per record; a source without it is read record by record. ``ready()`` says whether a record is
there now: while none is, the service makes the next row's close ahead (``serve.ahead``); a source
without it is never idle.

* :class:`ReplaySource` reads DBN files (foxhunt.data.dbn_read, the batch reader), merges their
  records by ``ts_event`` (stable: file order breaks ties, as ingest's merge does) and releases them
  at their recorded pace divided by ``speed`` (``None``: as fast as possible), jumping recorded gaps
  longer than ``jump_gap_seconds`` (``foxhunt serve`` passes ``serve.max_gap_seconds``).
* :class:`LiveSource` wraps Databento's ``databento.Live`` client (key from ``DATABENTO_API_KEY``):
  its callback thread puts records on a queue this side reads. The client is injected, so a test
  feeds the adapter a recorded stream through the client's own interface (``subscribe``,
  ``add_callback``, ``start``, ``stop``) without a network.
"""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import databento_dbn as dbn
import numpy as np

from foxhunt.data.dbn_read import read_raw
from foxhunt.data.ingest import expand_paths
from foxhunt.data.schemas import Schema
from foxhunt.errors import DataError, FoxhuntError

API_KEY_ENV = "DATABENTO_API_KEY"


@dataclass(frozen=True)
class StreamMeta:
    """One stream of records: a DBN file, or a live subscription."""

    schema: Schema
    dataset: str
    symbols: dict[int, str]  # instrument_id -> raw symbol (the file's or the live symbology map)


@dataclass(frozen=True)
class StreamRecord:
    stream: int  # index into the source's ``streams``
    payload: bytes  # one DBN record as it was received (decoded and checked by the state)


@dataclass(frozen=True)
class StreamBlock:
    """Consecutive records of one stream, in arrival order: ``payload`` is ``count`` records of ``size``
    bytes each, as received (the state checks ``size`` against the stream's schema); a replay's is a
    view of its file's bytes."""

    stream: int
    payload: bytes | memoryview
    size: int

    @property
    def count(self) -> int:
        return len(self.payload) // self.size


# Records a block holds at most: a block is handled between two checks of the service's stop flag.
BLOCK = 4096


class SourceEnded(Exception):
    """A replay has released its last record."""


class Disconnected(Exception):
    """A live connection dropped."""


class RecordSource(Protocol):
    streams: list[StreamMeta]

    def next(self, timeout: float) -> StreamRecord | None: ...

    def reconnect(self) -> None: ...

    def close(self) -> None: ...


# Schemas a replay reads past: no market data for the rows (an instrument definition, venue
# statistics and status messages); every other command takes such files beside the book and uses or
# ignores them, so a replay of the same folder does too (its instrument is the checkpoint's).
NOT_MARKET = frozenset({Schema.DEFINITION, Schema.STATISTICS, Schema.STATUS, Schema.IMBALANCE})


class ReplaySource:
    """DBN files released record by record at ``speed`` x their recorded pace (None: at once).

    ``paths`` are what every other command takes: files or folders (a folder's ``*.dbn`` and
    ``*.dbn.zst`` files); files of :data:`NOT_MARKET` schemas are left out (``skipped`` names them)."""

    def __init__(
        self,
        paths: Sequence[str | Path],
        speed: float | None = None,
        skip: int = 0,
        jump_gap_seconds: float = 0.0,
    ) -> None:
        read = [read_raw(p) for p in expand_paths(paths)]
        files = [f for f in read if f.schema not in NOT_MARKET]
        self.skipped = [(str(f.path), f.schema, len(f)) for f in read if f.schema in NOT_MARKET]
        if not files:
            raise DataError(
                "--replay",
                "holds no market data: only "
                + ", ".join(f"{Path(p).name} ({s.value})" for p, s, _ in self.skipped),
                "replay the book files (MBO, MBP-10 ...) the checkpoint was trained on",
            )
        self.streams = [StreamMeta(f.schema, f.dataset, dict(f.instrument_symbols)) for f in files]
        ts = np.concatenate([f.records["ts_event"].astype(np.int64) for f in files])
        which = np.concatenate([np.full(len(f.records), i, np.int64) for i, f in enumerate(files)])
        local = np.concatenate([np.arange(len(f.records)) for f in files])
        order = np.argsort(ts, kind="stable")
        self._ts, self._which, self._local = ts[order], which[order], local[order]
        # Where a run of consecutive records of one file starts (a block never spans two).
        cut = (self._which[1:] != self._which[:-1]) | (self._local[1:] != self._local[:-1] + 1)
        self._runs = np.flatnonzero(cut) + 1
        self._records = [f.records for f in files]
        # Each file's bytes, sliced into a block with no numpy call (a paced block's every numpy call costs
        # 5-20 us on the caches a close made ahead left cold); one file: record i is its i-th.
        self._bytes = [memoryview(f.records.view(np.uint8)) for f in files]
        self._sizes = [f.records.dtype.itemsize for f in files]
        self._one = len(files) == 1
        self.speed = speed
        self.position = skip  # records released so far (a restart may skip none: the state needs them)
        self._t0_wall: float | None = None
        # The clock a paced replay keeps: the recorded times with every gap of more than
        # ``jump_gap_seconds`` (0: none) between two records cut to nothing, as hftbacktest's replay
        # goes on to the next record, so a closed market (a file's snapshot a day before its live
        # records) is not waited through at its recorded pace. ``jumps``: (how many, seconds in all).
        self._pace_ts = self._ts
        self.jumps = (0, 0.0)
        if jump_gap_seconds > 0 and len(self._ts) > 1:
            step = np.diff(self._ts)
            cut = np.where(step > int(jump_gap_seconds * 1e9), step, 0)
            self._pace_ts = self._ts - np.concatenate([[0], np.cumsum(cut)])
            self.jumps = (int(np.count_nonzero(cut)), float(cut.sum()) / 1e9)
        self._t0_ts = int(self._pace_ts[0]) if len(self._ts) else 0

    def __len__(self) -> int:
        return len(self._ts)

    def _released(self, timeout: float) -> bool:
        """Whether the next record may go now: at full speed at once; at a pace once it is due,
        sleeping until then if that is within ``timeout`` (the pace's clock starts at the first)."""
        if self.speed is None:
            return True
        if self._t0_wall is None:
            self._t0_wall, self._t0_ts = time.monotonic(), int(self._pace_ts[self.position])
        wait = self.due(self.position) - time.monotonic()
        if wait > timeout:
            time.sleep(timeout)
            return False
        if wait > 0:
            time.sleep(wait)
        return True

    def next(self, timeout: float) -> StreamRecord | None:
        if self.position >= len(self._ts):
            raise SourceEnded
        if not self._released(timeout):
            return None
        i = self.position
        self.position += 1
        s = int(self._which[i])
        return StreamRecord(s, self._records[s][int(self._local[i])].tobytes())

    def next_block(self, timeout: float, limit: int = BLOCK) -> StreamBlock | None:
        """The next record and those after it of the same file that are due too (all, at full speed),
        up to ``limit``; None as ``next``. Few array calls: at a live pace a block is usually the one
        record due, and its latency is counted from then (each numpy call costs 10-30 us on the caches a
        close ahead left cold)."""
        if self.position >= len(self._ts):
            raise SourceEnded
        if not self._released(timeout):
            return None
        i = self.position
        end = min(len(self._ts), i + limit)
        if len(self._runs):  # files replayed together: a block never spans two
            run = np.searchsorted(self._runs, i, side="right")
            if run < len(self._runs):
                end = min(end, int(self._runs[run]))
        if self.speed is not None and end > i + 1:
            assert self._t0_wall is not None
            # An integer: a float would have searchsorted cast all of _ts to float first (~200 us).
            now_ts = self._t0_ts + int((time.monotonic() - self._t0_wall) * self.speed * 1e9)
            if self._pace_ts[i + 1] > now_ts:  # the usual paced block: the next record is not due yet
                end = i + 1
            else:
                end = min(end, int(np.searchsorted(self._pace_ts, np.int64(now_ts), side="right")))
        self.position = end
        return self._block(i, end)

    def _block(self, i: int, end: int) -> StreamBlock:
        """Records ``i`` to ``end`` (of one file): the file's bytes themselves (a read-only view)."""
        s, a = (0, i) if self._one else (int(self._which[i]), int(self._local[i]))
        size = self._sizes[s]
        return StreamBlock(s, self._bytes[s][a * size : (a + end - i) * size], size)

    def rehearsal(self) -> StreamBlock | None:
        """The last record released, again, by the code ``next_block`` hands records out with (None
        before the first): what the service's rehearsal of a due record's path runs on (never the
        next record: a live feed does not have it)."""
        i = self.position - 1
        return None if i < 0 else self._block(i, i + 1)

    def ready(self) -> bool:
        """Whether a record (or the end) is due now: at full speed always; at a pace, once the
        next record's time has come (the service makes a close ahead while it is not)."""
        i = self.position
        if self.speed is None or i >= len(self._ts) or self._t0_wall is None:
            return True
        return time.monotonic() >= self.due(i)

    def due(self, i: int) -> float:
        """When record ``i`` is (or was) released, ``time.monotonic()`` (a paced replay once started)."""
        assert self.speed is not None and self._t0_wall is not None
        return self._t0_wall + (int(self._pace_ts[i]) - self._t0_ts) / 1e9 / self.speed

    def reconnect(self) -> None:  # a file does not disconnect
        return None

    def close(self) -> None:
        return None


class LiveClient(Protocol):
    """The part of ``databento.Live`` the adapter uses."""

    symbology_map: dict[int, Any]

    def subscribe(self, dataset: str, schema: str, symbols: Any, stype_in: str) -> Any: ...

    def add_callback(
        self, record_callback: Callable[[Any], None], exception_callback: Any = None
    ) -> None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


def api_key() -> str:
    key = os.environ.get(API_KEY_ENV, "").strip()
    if not key:
        raise FoxhuntError(
            API_KEY_ENV,
            "not set; --live needs a Databento API key",
            f"export {API_KEY_ENV}=db-... or use --replay",
        )
    return key


def databento_client() -> LiveClient:
    from foxhunt.data.bento import db

    return db.Live(key=api_key())  # type: ignore[return-value]


class LiveSource:
    """``databento.Live`` behind the record-source interface (one schema, continuous symbols)."""

    def __init__(
        self,
        dataset: str,
        symbols: Sequence[str],
        schema: Schema = Schema.MBP_10,
        client_factory: Callable[[], LiveClient] = databento_client,
    ) -> None:
        self.dataset, self.symbols, self.schema = dataset, list(symbols), schema
        self._factory = client_factory
        # Records of other types (symbol mappings, system messages, heartbeats) are not market data.
        self._rtype = dbn.RType.from_schema(schema.dbn)
        self.streams = [StreamMeta(schema, dataset, {})]
        self._queue: queue.Queue[Any] = queue.Queue()
        self._client: LiveClient | None = None
        self._last: StreamBlock | None = None
        self.connect()

    def connect(self) -> None:
        client = self._factory()
        stype = "continuous" if any(".c." in s or ".v." in s for s in self.symbols) else "raw_symbol"
        client.subscribe(dataset=self.dataset, schema=self.schema.value, symbols=self.symbols, stype_in=stype)
        client.add_callback(self._queue.put, self._on_exception)
        client.start()
        self._client = client

    def _on_exception(self, exc: BaseException) -> None:
        self._queue.put(Disconnected(str(exc)))

    def next(self, timeout: float) -> StreamRecord | None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                item = self._queue.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                return None
            if isinstance(item, Disconnected):
                raise item
            if item is None:  # the client's end of stream (a recorded one, or a closed session)
                raise Disconnected("the live session ended")
            if getattr(item, "rtype", None) == self._rtype:
                return StreamRecord(0, bytes(item))
            symbol = getattr(item, "stype_out_symbol", None)
            if symbol is not None:  # a symbol mapping: instrument_id -> the contract it names now
                self.streams[0].symbols[int(item.instrument_id)] = str(symbol)

    def next_block(self, timeout: float, limit: int = BLOCK) -> StreamBlock | None:
        """The next record and those already queued behind it of its size, up to ``limit``."""
        first = self.next(timeout)
        if first is None:
            return None
        payloads, size = [first.payload], len(first.payload)
        while len(payloads) < limit and not self._queue.empty():
            # Peek (this thread alone takes from the queue): anything but a record of this size (an end,
            # a symbol mapping, a corrupt record) is left for the next call.
            item = self._queue.queue[0]
            if getattr(item, "rtype", None) != self._rtype or len(bytes(item)) != size:
                break
            got = self.next(0.0)
            if got is None:
                break
            payloads.append(got.payload)
        self._last = StreamBlock(0, payloads[-1], size)
        return StreamBlock(0, b"".join(payloads), size)

    def rehearsal(self) -> StreamBlock | None:
        """The last record handed out, again (None before the first): ReplaySource.rehearsal."""
        return self._last

    def ready(self) -> bool:
        """Whether anything has arrived that ``next`` would return now."""
        return not self._queue.empty()

    def reconnect(self) -> None:
        self.close()
        self.connect()

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.stop()
            except Exception:  # noqa: BLE001 (a client that is already gone cannot be stopped twice)
                pass
            self._client = None
