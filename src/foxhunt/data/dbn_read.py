"""Read one DBN file (``.dbn`` or ``.dbn.zst``) into typed columnar arrays with Databento's library.

Decoding is Databento's: :meth:`databento.DBNStore.to_ndarray` returns a zero-copy structured view
of the records, and this module only reinterprets columns (fixed-point prices to float, the ten
``bid_px_00..09`` columns to one ``[n, 10]`` array). There is no per-record Python loop.

We decompress zstd ourselves (with ``zstandard``) before handing the bytes to ``DBNStore`` for one
reason: a zstd stream cut short decompresses without complaint in both libraries, and a truncated
file would otherwise be read as a shorter, valid one. Checking that every zstd frame reached its
end is how we refuse it.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path

import databento_dbn as dbn
import numba
import numpy as np
import zstandard
from databento.common.error import BentoError, BentoWarning

import foxhunt.jit  # noqa: F401  (before the kernels: their cache is stamped with the package)
from foxhunt.data.arrays import (
    ACTION_NONE,
    BookArrays,
    DefinitionArrays,
    MarketArrays,
    MboArrays,
    OhlcvArrays,
    TradeArrays,
)
from foxhunt.data.bento import db
from foxhunt.data.schemas import Schema
from foxhunt.errors import (
    CorruptCompressionError,
    EmptyFileError,
    MissingFileError,
    NonMonotonicTimestampError,
    NotDbnError,
    SchemaMismatchError,
    UndefinedPriceError,
)

PRICE_SCALE = 1_000_000_000  # DBN fixed-point prices: 1 price unit = 1e9 integer units
UNDEF_PRICE = int(dbn.UNDEF_PRICE)
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_DBN_MAGIC = b"DBN"


@dataclass(frozen=True)
class DbnFile:
    """One decoded DBN file: its metadata and the raw structured records (zero-copy)."""

    path: Path
    schema: Schema
    dataset: str
    version: int
    symbols: tuple[str, ...]
    instrument_symbols: dict[int, str]  # instrument_id -> raw symbol, from the symbology mappings
    start: int  # metadata start, ns UTC
    end: int | None
    records: np.ndarray  # structured array, Databento's record dtype

    def __len__(self) -> int:
        return len(self.records)


def _zstd_problem(raw: bytes) -> str | None:
    """Walk the zstd frame and block headers of ``raw`` (RFC 8878 §3.1) without decompressing.

    Returns what is wrong (a frame or block that runs past the end of the file, a reserved block
    type, an unknown frame) or None. This is only a completeness check on the container; the
    decompression itself is left to Databento's reader. Why not decompress here: a zstd stream
    cut short decompresses without complaint in both ``zstandard`` and ``DBNStore``, so a
    truncated download would be read as a shorter, valid file; decompressing a second time to
    find out would double the cost of ingest, while the headers are ~3 bytes per 128 KiB block.
    """
    pos, end = 0, len(raw)
    while pos < end:
        if end - pos < 8:
            return f"{end - pos} stray bytes after the last frame"
        magic = int.from_bytes(raw[pos : pos + 4], "little")
        if 0x184D2A50 <= magic <= 0x184D2A5F:  # skippable frame: 4-byte size, then its content
            pos += 8 + int.from_bytes(raw[pos + 4 : pos + 8], "little")
            continue
        if magic != 0xFD2FB528:
            return f"no zstd frame at byte {pos}"
        descriptor = raw[pos + 4]
        single_segment = (descriptor >> 5) & 1
        pos += 5 + (0 if single_segment else 1)  # magic, descriptor, window descriptor
        pos += (0, 1, 2, 4)[descriptor & 3]  # dictionary id
        pos += (single_segment, 2, 4, 8)[descriptor >> 6]  # frame content size
        while True:
            if pos + 3 > end:
                return "truncated zstd stream (a frame ends without its last block)"
            header = int.from_bytes(raw[pos : pos + 3], "little")
            block_type, block_size = (header >> 1) & 3, header >> 3
            if block_type == 3:
                return f"reserved zstd block type at byte {pos}"
            pos += 3 + (1 if block_type == 1 else block_size)  # RLE blocks store one byte
            if pos > end:
                return "truncated zstd stream (the last block runs past the end of the file)"
            if header & 1:  # last block of the frame
                break
        pos += 4 * ((descriptor >> 2) & 1)  # content checksum
        if pos > end:
            return "truncated zstd stream (the frame checksum is missing)"
    return None


def read_raw(path: str | Path) -> DbnFile:
    """Open, validate and decode one DBN file, keeping Databento's structured record array.

    Raises :class:`MissingFileError`, :class:`EmptyFileError`, :class:`NotDbnError` or
    :class:`CorruptCompressionError` with the file named in the message.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(path, "no such file", "check the path (globs are not expanded here)")
    raw = path.read_bytes()
    if not raw:
        raise EmptyFileError(path, "empty file (0 bytes)", "re-download or remove the file")
    compressed = raw[:4] == _ZSTD_MAGIC
    if compressed:
        problem = _zstd_problem(raw)
        if problem is not None:
            raise CorruptCompressionError(
                path, problem, "re-download the file; a partial or damaged file cannot be read safely"
            )
        try:
            with zstandard.ZstdDecompressor().stream_reader(raw) as head:
                magic = head.read(3)
        except zstandard.ZstdError as exc:  # a damaged first block (the frame checksum, a bad header)
            raise CorruptCompressionError(path, f"corrupt zstd data ({exc})", "re-download the file") from exc
        if magic != _DBN_MAGIC:
            raise NotDbnError(
                path,
                "zstd stream does not hold DBN data (no DBN magic after decompression)",
                "pass a Databento .dbn or .dbn.zst file",
            )
    elif raw[:3] != _DBN_MAGIC:
        raise NotDbnError(
            path,
            "not a DBN file (neither the zstd nor the DBN magic bytes at the start)",
            "pass a Databento .dbn or .dbn.zst file",
        )
    try:
        with warnings.catch_warnings():
            # Databento warns (rather than fails) on a stream that ends mid-record.
            warnings.simplefilter("error", BentoWarning)
            # A BytesIO, not bytes: DBNStore keeps repr(source) as its name, and repr() of a
            # 300 MB bytes object costs seconds.
            store = db.DBNStore.from_bytes(io.BytesIO(raw))
            records = store.to_ndarray()
    except BentoWarning as exc:
        raise CorruptCompressionError(
            path, f"DBN stream ends mid-record ({exc})", "re-download the file"
        ) from exc
    except zstandard.ZstdError as exc:
        raise CorruptCompressionError(path, f"corrupt zstd data ({exc})", "re-download the file") from exc
    except (dbn.DBNError, BentoError, ValueError) as exc:
        problem = f"DBN decoding failed ({exc})"
        if compressed:
            raise CorruptCompressionError(path, problem, "re-download the file") from exc
        raise NotDbnError(path, problem, "pass a valid DBN file") from exc
    if store.schema is None:
        raise NotDbnError(path, "DBN file of mixed schemas", "split it per schema (one schema per file)")
    try:
        schema = Schema(str(store.schema))
    except ValueError as exc:
        raise SchemaMismatchError(
            path,
            f"schema {store.schema} is not read by foxhunt",
            f"use one of {', '.join(s.value for s in Schema)}",
        ) from exc
    if len(records) == 0:
        raise EmptyFileError(path, f"DBN {schema.value} file holds no records", "remove the file")
    instrument_symbols: dict[int, str] = {}
    for raw_symbol, intervals in store.mappings.items():
        for interval in intervals:
            if str(interval["symbol"]).isdigit():
                instrument_symbols[int(interval["symbol"])] = raw_symbol
    meta = store.metadata
    return DbnFile(
        path=path,
        schema=schema,
        dataset=str(store.dataset),
        version=int(meta.version),
        symbols=tuple(store.symbols),
        instrument_symbols=instrument_symbols,
        start=int(meta.start),
        end=None if meta.end is None else int(meta.end),
        records=records,
    )


def peek_metadata(path: str | Path) -> dbn.Metadata | None:
    """A DBN file's metadata header, decoding no records (None if it cannot be read as DBN).

    DBN layout: ``b"DBN"``, a version byte, the metadata length (u32 little-endian), the metadata.
    Any problem (missing, empty, not DBN, corrupt) gives None: :func:`read_raw` reports it properly.
    """
    try:
        with open(path, "rb") as fh:
            compressed = fh.read(4) == _ZSTD_MAGIC
            fh.seek(0)
            stream = zstandard.ZstdDecompressor().stream_reader(fh) if compressed else fh
            head = stream.read(8)
            if len(head) < 8 or head[:3] != _DBN_MAGIC:
                return None
            body = stream.read(int.from_bytes(head[4:8], "little"))
        return dbn.Metadata.decode(head + body)
    except (OSError, ValueError, zstandard.ZstdError, dbn.DBNError):
        return None


def peek_schema(path: str | Path) -> Schema | None:
    """The schema in a DBN file's metadata header, decoding nothing else (None if unknown).

    Lets ingest check that a whole set of inputs fits the configured data source before it decodes
    any records, so a mixed folder is refused in one message (a mixed or unsupported schema: None).
    """
    meta = peek_metadata(path)
    if meta is None or meta.schema is None:
        return None
    try:
        return Schema(str(meta.schema))
    except ValueError:
        return None


# --- column conversion ------------------------------------------------------------------------


def _px(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-point int64 prices to float64 price units (NaN where undefined), and that mask."""
    out = np.divide(raw, PRICE_SCALE, dtype=np.float64)  # exact for binary-representable ticks
    undef = raw == UNDEF_PRICE
    out[undef] = np.nan
    return out, undef


def _price(raw: np.ndarray) -> np.ndarray:
    return _px(raw)[0]


def _ascii(col: np.ndarray) -> np.ndarray:
    """An ``S1`` column (Databento action/side) as uint8 ASCII codes."""
    return col.view(np.uint8).copy()


def _levels(rec: np.ndarray, field: str, n_levels: int) -> np.ndarray:
    """``{field}_00 .. {field}_{L-1}`` as one ``[n, L]`` strided *view* of the records (no copy).

    The L levels of a record are consecutive ``BidAskPair`` structs, so the same field of level
    k + 1 sits a fixed number of bytes after level k: a 2-D view with strides (record size, pair
    size) reads them in place, and the one conversion pass that follows is the only copy.
    """
    fields = rec.dtype.fields
    assert fields is not None
    dtype, off0 = fields[f"{field}_00"][:2]
    pair = fields[f"{field}_01"][1] - off0 if n_levels > 1 else dtype.itemsize
    if not rec.flags.c_contiguous:
        rec = np.ascontiguousarray(rec)
    return np.ndarray(
        (len(rec), n_levels), dtype=dtype, buffer=rec, offset=off0, strides=(rec.itemsize, pair)
    )


@numba.njit(cache=True, nogil=True)
def _convert_levels(bpx, apx, bsz, asz, bct, act, out_bpx, out_apx, out_bsz, out_asz, out_bct, out_act):
    """One pass over the ``[n, L]`` strided level views: prices to float (NaN if undefined),
    sizes and counts to int64. Returns the number of populated levels with undefined prices.

    Why numba: six numpy passes over strided views each pull every record's cache lines
    through memory again; one fused pass reads them once (0.14 s instead of 0.25 s for 10^6
    MBP-10 records on the CI machine, bench/run.py).
    """
    n, n_levels = bpx.shape
    bad = 0
    for i in range(n):
        for k in range(n_levels):
            b, a = bpx[i, k], apx[i, k]
            if b == UNDEF_PRICE:
                out_bpx[i, k] = np.nan
                bad += bsz[i, k] > 0
            else:
                out_bpx[i, k] = b / PRICE_SCALE
            if a == UNDEF_PRICE:
                out_apx[i, k] = np.nan
                bad += asz[i, k] > 0
            else:
                out_apx[i, k] = a / PRICE_SCALE
            out_bsz[i, k] = bsz[i, k]
            out_asz[i, k] = asz[i, k]
            out_bct[i, k] = bct[i, k]
            out_act[i, k] = act[i, k]
    return bad


def book_from_records(path: Path, rec: np.ndarray, n_levels: int) -> BookArrays:
    """MBP-10 / MBP-1 / TBBO / BBO structured records -> :class:`BookArrays`.

    Raises :class:`UndefinedPriceError` when a level with size > 0 has an undefined price.
    """
    shape = (len(rec), n_levels)
    bid_px, ask_px = np.empty(shape), np.empty(shape)
    bid_sz, ask_sz, bid_ct, ask_ct = (np.empty(shape, np.int64) for _ in range(4))
    n_bad = _convert_levels(
        *(_levels(rec, f, n_levels) for f in ("bid_px", "ask_px", "bid_sz", "ask_sz", "bid_ct", "ask_ct")),
        bid_px,
        ask_px,
        bid_sz,
        ask_sz,
        bid_ct,
        ask_ct,
    )
    if n_bad:
        bad = (np.isnan(bid_px) & (bid_sz > 0)) | (np.isnan(ask_px) & (ask_sz > 0))
        row, level = np.argwhere(bad)[0]
        raise UndefinedPriceError(
            path,
            f"{int(bad.sum())} populated book levels have an undefined price "
            f"(first: record {row}, level {level}, field bid_px_{level:02d}/ask_px_{level:02d})",
            "the file is corrupt or not a real book; re-download it",
        )
    names = rec.dtype.names or ()
    return BookArrays(
        ts_event=rec["ts_event"].astype(np.int64),
        ts_recv=rec["ts_recv"].astype(np.int64),
        instrument_id=rec["instrument_id"].astype(np.uint32),
        action=(
            _ascii(rec["action"])
            if "action" in names  # BBO records have no action
            else np.full(len(rec), ACTION_NONE, np.uint8)
        ),
        side=_ascii(rec["side"]),
        flags=rec["flags"].astype(np.uint8),
        price=_price(rec["price"]),
        size=rec["size"].astype(np.int64),
        depth=rec["depth"].astype(np.uint8) if "depth" in names else np.zeros(len(rec), np.uint8),
        sequence=rec["sequence"].astype(np.uint32),
        bid_px=bid_px,
        ask_px=ask_px,
        bid_sz=bid_sz,
        ask_sz=ask_sz,
        bid_ct=bid_ct,
        ask_ct=ask_ct,
    )


def trades_from_records(rec: np.ndarray) -> TradeArrays:
    return TradeArrays(
        ts_event=rec["ts_event"].astype(np.int64),
        ts_recv=rec["ts_recv"].astype(np.int64),
        instrument_id=rec["instrument_id"].astype(np.uint32),
        price=_price(rec["price"]),
        size=rec["size"].astype(np.int64),
        side=_ascii(rec["side"]),
        flags=rec["flags"].astype(np.uint8),
        sequence=rec["sequence"].astype(np.uint32),
    )


def mbo_from_records(rec: np.ndarray) -> MboArrays:
    price_raw = rec["price"].astype(np.int64)
    return MboArrays(
        ts_event=rec["ts_event"].astype(np.int64),
        ts_recv=rec["ts_recv"].astype(np.int64),
        instrument_id=rec["instrument_id"].astype(np.uint32),
        order_id=rec["order_id"].astype(np.uint64),
        price_raw=price_raw,
        price=_price(price_raw),
        size=rec["size"].astype(np.int64),
        action=_ascii(rec["action"]),
        side=_ascii(rec["side"]),
        flags=rec["flags"].astype(np.uint8),
        sequence=rec["sequence"].astype(np.uint32),
    )


def ohlcv_from_records(rec: np.ndarray) -> OhlcvArrays:
    return OhlcvArrays(
        ts_event=rec["ts_event"].astype(np.int64),
        instrument_id=rec["instrument_id"].astype(np.uint32),
        open=_price(rec["open"]),
        high=_price(rec["high"]),
        low=_price(rec["low"]),
        close=_price(rec["close"]),
        volume=rec["volume"].astype(np.int64),
    )


def definitions_from_records(rec: np.ndarray) -> DefinitionArrays:
    # CME futures carry the point value in unit_of_measure_qty (50 for ES); contract_multiplier
    # is often unset (i32 max). Prefer the former where it is set.
    uom = rec["unit_of_measure_qty"].astype(np.int64)
    uom_px = _price(uom)
    mult = rec["contract_multiplier"].astype(np.float64)
    mult[mult >= np.iinfo(np.int32).max] = np.nan
    return DefinitionArrays(
        ts_event=rec["ts_event"].astype(np.int64),
        instrument_id=rec["instrument_id"].astype(np.uint32),
        raw_symbol=np.array(
            [s.decode() if isinstance(s, bytes) else str(s) for s in rec["raw_symbol"]],
            dtype=object,
        ),
        min_price_increment=_price(rec["min_price_increment"]),
        contract_multiplier=np.where(np.isfinite(uom_px), uom_px, mult),
        expiration=rec["expiration"].astype(np.int64),
    )


def to_arrays(f: DbnFile) -> MarketArrays:
    """Typed columnar arrays for the file's schema."""
    rec = f.records
    if not f.schema.has_typed_arrays:
        raise SchemaMismatchError(
            f.path,
            f"{f.schema.value} records are decoded but not used by foxhunt",
            "pass book (mbp-10, mbo, mbp-1, tbbo, bbo), trades, ohlcv or definition files",
        )
    if f.schema.is_book:
        return book_from_records(f.path, rec, f.schema.levels)
    if f.schema is Schema.TRADES:
        return trades_from_records(rec)
    if f.schema is Schema.MBO:
        return mbo_from_records(rec)
    if f.schema.is_ohlcv:
        return ohlcv_from_records(rec)
    return definitions_from_records(rec)


def check_monotonic(where: str | Path, ts: np.ndarray, instrument_id: np.ndarray) -> None:
    """Raise unless ``ts`` is non-decreasing within each instrument (file order).

    The book builder replays MBO in file order and the bars and features assume time order: an
    out-of-order stream is refused, never sorted (a sort cannot restore the order of events that
    share a timestamp, so the book it rebuilt would be another one)."""
    ts = np.asarray(ts).astype(np.int64, copy=False)  # DBN's uint64 would wrap instead of going below 0
    for iid in np.unique(instrument_id):
        t = ts[instrument_id == iid]
        back = np.flatnonzero(np.diff(t) < 0)
        if len(back):
            i = int(back[0])
            raise NonMonotonicTimestampError(
                where,
                f"ts_event goes backwards for instrument {int(iid)} ({len(back)} times; first "
                f"after record {i} of that instrument: {int(t[i])} -> {int(t[i + 1])})",
                "the file was re-ordered or corrupted; re-download it",
            )


def read_dbn(
    path: str | Path, expect: Schema | tuple[Schema, ...] | None = None
) -> tuple[DbnFile, MarketArrays]:
    """Read and decode one file; with ``expect``, refuse any other schema. MBO records must be in
    time order per instrument (:func:`check_monotonic`): they are replayed into a book.

    >>> f, book = read_dbn("x.mbp-10.dbn.zst", expect=Schema.MBP_10)  # doctest: +SKIP
    """
    f = read_raw(path)
    allowed = (expect,) if isinstance(expect, Schema) else expect
    if allowed is not None and f.schema not in allowed:
        names = " or ".join(s.value for s in allowed)
        raise SchemaMismatchError(
            f.path,
            f"file is {f.schema.value}, but {names} is required here",
            f"pass a {names} file"
            + (" (or rebuild the book with `foxhunt data rebuild-book`)" if f.schema is Schema.MBO else ""),
        )
    if f.schema is Schema.MBO:
        check_monotonic(f.path, f.records["ts_event"], f.records["instrument_id"])
    return f, to_arrays(f)
