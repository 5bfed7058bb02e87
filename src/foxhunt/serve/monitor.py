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

import numba
import numpy as np

import foxhunt.jit  # noqa: F401  (before the kernels: their cache is stamped with the package)
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

    def clean(self, recs: np.ndarray, note: bool = True) -> int:
        """How many leading records of ``recs`` (a structured array of one stream's records) ``check``
        would find no fault in, one after the other; they are noted as checked (the last time, the
        served instrument), as ``check`` notes them, unless ``note`` is False (a rehearsal's, which
        changes nothing). The record after them has a fault (or is none).
        One compiled pass over the records themselves that stops at the first fault (:func:`_clean_run`,
        :func:`_clean_book_run`): no field view is made (each costs ~7 us on the caches a close made
        ahead leaves cold, and a paced feed's block is one record: ~45 us for the six a check reads)."""
        if not len(recs):
            return 0
        last = 0 if self.last_ts is None else self.last_ts
        served = -1 if self.instrument_id is None else self.instrument_id  # -1: the first record's
        gap = float(self.cfg.max_gap_seconds) * NS
        run = _clean_book_run if "bid_px_00" in (recs.dtype.fields or ()) else _clean_run
        k, served, last = run(recs, served, np.uint64(last), self.last_ts is not None, gap)
        if k and note:
            self.instrument_id, self.last_ts = served, last
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


@numba.njit(cache=True)
def _header_fails(t, iid, served, prev, seen, gap_ns):  # noqa: ANN001, ANN202
    """Whether a record with time ``t`` and instrument ``iid`` fails :meth:`Monitor.check`'s tests of
    its header: a time and an instrument (not 0 or undefined), the served one, not before the last time
    (``prev``, if ``seen``), no more than ``gap_ns`` after it (0: no gap check). Times stay unsigned, as
    ``check`` compares them (a time past int64's range is odd, not a fault)."""
    if t == 0 or t == _UNDEF_TS or iid == 0 or iid != served:
        return True
    return seen and (t < prev or (gap_ns > 0 and float(t - prev) > gap_ns))


@numba.njit(cache=True)
def _clean_run(recs, served, last_ts, has_last, gap_ns):  # noqa: ANN001, ANN202
    """(how many leading records pass the header's tests in turn, the served instrument, the last of
    their times); ``served`` -1: the first record's instrument. Stops at the first that fails."""
    prev, seen = last_ts, has_last
    if served < 0:
        served = recs[0].instrument_id
    for k in range(len(recs)):
        t = recs[k].ts_event
        if _header_fails(t, recs[k].instrument_id, served, prev, seen, gap_ns):
            return k, served, prev
        prev, seen = t, True
    return len(recs), served, prev


@numba.njit(cache=True)
def _clean_book_run(recs, served, last_ts, has_last, gap_ns):  # noqa: ANN001, ANN202
    """:func:`_clean_run` for records with a book's best levels: also best bid < best ask where both
    sides are populated (a crossed book is a fault)."""
    prev, seen = last_ts, has_last
    if served < 0:
        served = recs[0].instrument_id
    for k in range(len(recs)):
        r = recs[k]
        t = r.ts_event
        if _header_fails(t, r.instrument_id, served, prev, seen, gap_ns):
            return k, served, prev
        if r.bid_sz_00 > 0 and r.ask_sz_00 > 0:
            b, a = r.bid_px_00, r.ask_px_00
            if b != UNDEF_PRICE and a != UNDEF_PRICE and b >= a:
                return k, served, prev
        prev, seen = t, True
    return len(recs), served, prev
