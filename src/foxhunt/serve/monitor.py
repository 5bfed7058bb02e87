"""Fail-safe checks on the stream: what makes a record unusable or the market untradeable.

Each check names a :class:`Fault`; the service logs it, records it in the ledger and, while the
stream is faulted, replaces the policy's decision by the configured fail-safe one
(:class:`~foxhunt.serve.config.FaultAction`). Records that cannot be used are dropped before they
reach the rows (a corrupt record, one older than the last, one of another instrument); the others
are kept, because the batch path keeps them too (a gap, a crossed book: flagged, not hidden).

A block of records (foxhunt.serve.source.StreamBlock) is checked at once: :meth:`Monitor.clean`
finds, with array operations, how many of its leading records :meth:`Monitor.check` would pass one by
one without a fault, and notes them as checked; the first record with a fault goes through
:meth:`Monitor.check` alone, so a block hides no bad record.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from foxhunt.data.dbn_read import UNDEF_PRICE
from foxhunt.serve.config import ServeConfig

NS = 1_000_000_000
_UNDEF_TS = np.iinfo(np.uint64).max


class Fault(StrEnum):
    CORRUPT = "corrupt"  # not a record of its stream's schema, or no time / instrument: dropped
    OUT_OF_ORDER = "out_of_order"  # ts_event before the last record's: dropped
    ROLL = "roll"  # another instrument than the one served (a roll of the front month): dropped
    GAP = "gap"  # more exchange time than serve.max_gap_seconds since the last record: kept
    CROSSED = "crossed"  # best bid >= best ask (both sides populated): kept
    STALL = "stall"  # no record for serve.stall_seconds of wall-clock time
    DISCONNECT = "disconnect"  # the live connection dropped
    ERROR = "error"  # the row pipeline failed on the records so far (the row is skipped)


DROPPED = frozenset({Fault.CORRUPT, Fault.OUT_OF_ORDER, Fault.ROLL})


@dataclass(frozen=True)
class FaultEvent:
    kind: Fault
    detail: str
    ts_event: int = 0


class Monitor:
    """Checks every decoded record against the stream so far (module docs)."""

    def __init__(self, cfg: ServeConfig, instrument_id: int | None = None) -> None:
        self.cfg = cfg
        self.instrument_id = instrument_id  # the first record's when None
        self.last_ts: int | None = None

    def clean(self, recs: np.ndarray) -> int:
        """How many leading records of ``recs`` (a structured array of one stream's records) ``check``
        would find no fault in, one after the other; they are noted as checked (the last time, the
        served instrument), as ``check`` notes them. The record after them has a fault (or is none).
        Checked in windows that double from 256 records: a block is asked again after each record
        with a fault, and each asking reads up to about twice the records to its next fault only."""
        k, width = 0, 256
        while k < len(recs):
            window = recs[k : k + width]
            got = self._clean(window)
            k += got
            if got < len(window):
                break
            width *= 2
        return k

    def _clean(self, recs: np.ndarray) -> int:
        n = len(recs)
        if not n:
            return 0
        ts, iid = recs["ts_event"], recs["instrument_id"]
        bad = (ts == 0) | (ts == _UNDEF_TS) | (iid == 0)
        served = int(iid[0]) if self.instrument_id is None else self.instrument_id
        bad |= iid != served
        t = ts.astype(np.int64)  # ns since 1970 fit; an undefined time is bad already
        before = np.empty(n, np.int64)
        before[0] = t[0] if self.last_ts is None else self.last_ts
        before[1:] = t[:-1]
        bad |= t < before
        gap = self.cfg.max_gap_seconds
        if gap > 0:
            bad |= t - before > gap * NS
        names = recs.dtype.names or ()
        if "bid_px_00" in names:
            bid, ask = recs["bid_px_00"], recs["ask_px_00"]
            both = (recs["bid_sz_00"] > 0) & (recs["ask_sz_00"] > 0)
            bad |= both & (bid != UNDEF_PRICE) & (ask != UNDEF_PRICE) & (bid >= ask)
        k = int(np.argmax(bad)) if bad.any() else n
        if k:
            self.instrument_id, self.last_ts = served, int(t[k - 1])
        return k

    def check(self, rec: np.ndarray, note: bool = True) -> list[FaultEvent]:
        """The faults of one record (a structured array of one record); empty when it is clean. A kept
        record is noted as checked (the last time, the served instrument) unless ``note`` is False
        (:meth:`note` does it later)."""
        ts, iid = int(rec["ts_event"][0]), int(rec["instrument_id"][0])
        if ts in (0, _UNDEF_TS) or iid == 0:
            return [FaultEvent(Fault.CORRUPT, f"record without a time or instrument (ts {ts}, id {iid})", ts)]
        served = iid if self.instrument_id is None else self.instrument_id
        if iid != served:
            return [FaultEvent(Fault.ROLL, f"instrument {iid} where {served} is served", ts)]
        if self.last_ts is not None and ts < self.last_ts:
            why = f"ts_event {ts} before the last record's {self.last_ts}"
            return [FaultEvent(Fault.OUT_OF_ORDER, why, ts)]
        out = []
        gap = self.cfg.max_gap_seconds
        if self.last_ts is not None and gap > 0 and ts - self.last_ts > gap * NS:
            out.append(FaultEvent(Fault.GAP, f"{(ts - self.last_ts) / NS:.0f} s without a record", ts))
        names = rec.dtype.names or ()
        if "bid_px_00" in names:
            bid, ask = int(rec["bid_px_00"][0]), int(rec["ask_px_00"][0])
            both = int(rec["bid_sz_00"][0]) > 0 and int(rec["ask_sz_00"][0]) > 0
            if both and UNDEF_PRICE not in (bid, ask) and bid >= ask:
                out.append(FaultEvent(Fault.CROSSED, f"best bid {bid / NS} >= best ask {ask / NS}", ts))
        if note:
            self.note(rec)
        return out

    def note(self, rec: np.ndarray) -> None:
        """Note a kept record (one :meth:`check` passed with ``note=False``) as checked."""
        self.last_ts = int(rec["ts_event"][0])
        if self.instrument_id is None:
            self.instrument_id = int(rec["instrument_id"][0])
