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

    def clean(self, recs: np.ndarray) -> int:
        """How many leading records of ``recs`` (a structured array of one stream's records) ``check``
        would find no fault in, one after the other; they are noted as checked (the last time, the
        served instrument), as ``check`` notes them. The record after them has a fault (or is none).
        One compiled pass that stops at the first fault (:func:`_clean_run`): a block's closing record
        is checked in ~5 us where ~25 array operations on it took ~100 us inside a paced replay."""
        n = len(recs)
        if not n:
            return 0
        ts, iid = recs["ts_event"], recs["instrument_id"]
        served = int(iid[0]) if self.instrument_id is None else self.instrument_id
        last = np.uint64(0 if self.last_ts is None else self.last_ts)
        gap = float(self.cfg.max_gap_seconds) * NS
        if "bid_px_00" in (recs.dtype.names or ()):
            book = (recs["bid_px_00"], recs["ask_px_00"], recs["bid_sz_00"], recs["ask_sz_00"])
            k = _clean_run(ts, iid, served, last, self.last_ts is not None, gap, True, *book)
        else:
            k = _clean_run(ts, iid, served, last, self.last_ts is not None, gap, False, *_NO_BOOK)
        if k:
            self.instrument_id, self.last_ts = served, int(ts[k - 1])
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


# A stream without a book's best levels (MBO): bid, ask, bid size, ask size of no record.
_NO_BOOK = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint32), np.zeros(0, np.uint32))


@numba.njit(cache=True)
def _clean_run(ts, iid, served, last_ts, has_last, gap_ns, book, bid, ask, bid_sz, ask_sz):  # noqa: ANN001, ANN202
    """How many leading records pass :meth:`Monitor.check`'s tests in turn: a time and an instrument
    (not 0 or undefined), the served instrument, not before the last time (``last_ts``, if
    ``has_last``), no more than ``gap_ns`` after it (0: no gap check) and, with ``book``, best bid <
    best ask where both sides are populated. Stops at the first record that fails one. Times stay
    unsigned, as ``check`` compares them (a time past int64's range is odd, not a fault)."""
    prev, seen = last_ts, has_last
    for k in range(len(ts)):
        t = ts[k]
        if t == 0 or t == _UNDEF_TS or iid[k] == 0 or iid[k] != served:
            return k
        if seen and (t < prev or (gap_ns > 0 and float(t - prev) > gap_ns)):
            return k
        if book and bid_sz[k] > 0 and ask_sz[k] > 0:
            b, a = bid[k], ask[k]
            if b != UNDEF_PRICE and a != UNDEF_PRICE and b >= a:
                return k
        prev, seen = t, True
    return len(ts)
