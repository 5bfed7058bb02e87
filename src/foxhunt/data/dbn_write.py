"""Write genuine DBN files (``.dbn`` or ``.dbn.zst``) from typed arrays.

The metadata header is encoded by ``databento_dbn.Metadata.encode``. Records are laid out with the
dtype that ``databento_dbn``'s own record classes declare (``MBP10Msg._dtypes`` ...), which is the
byte layout ``bytes(MBP10Msg(...))`` produces (a test checks this record for record), so a file of
10^6 records is written by one ``tobytes`` instead of 10^6 Python objects. The output is read back
by :class:`databento.DBNStore` and by :mod:`foxhunt.data.dbn_read`.

Every file is written to a temporary name in the target folder and renamed into place, so a
failure never leaves a half-written file.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import databento_dbn as dbn
import numpy as np
import zstandard

from foxhunt.atomic import atomic_path
from foxhunt.data.arrays import BookArrays, MboArrays, OhlcvArrays, TradeArrays
from foxhunt.data.dbn_read import PRICE_SCALE, UNDEF_PRICE
from foxhunt.data.schemas import Schema

_RECORD_CLASS = {
    Schema.MBP_10: dbn.MBP10Msg,
    Schema.MBP_1: dbn.MBP1Msg,
    Schema.TRADES: dbn.TradeMsg,
    Schema.MBO: dbn.MBOMsg,
    Schema.OHLCV_1S: dbn.OHLCVMsg,
    Schema.OHLCV_1M: dbn.OHLCVMsg,
    Schema.OHLCV_1H: dbn.OHLCVMsg,
    Schema.OHLCV_1D: dbn.OHLCVMsg,
}
_RTYPE = {
    Schema.MBP_10: dbn.RType.MBP_10,
    Schema.MBP_1: dbn.RType.MBP_1,
    Schema.TRADES: dbn.RType.MBP_0,
    Schema.MBO: dbn.RType.MBO,
    Schema.OHLCV_1S: dbn.RType.OHLCV_1S,
    Schema.OHLCV_1M: dbn.RType.OHLCV_1M,
    Schema.OHLCV_1H: dbn.RType.OHLCV_1H,
    Schema.OHLCV_1D: dbn.RType.OHLCV_1D,
}


@dataclass(frozen=True)
class _MappingInterval:  # satisfies the databento_dbn.MappingInterval protocol
    start_date: dt.date
    end_date: dt.date
    symbol: str


@dataclass(frozen=True)
class _SymbolMapping:  # satisfies the databento_dbn.SymbolMapping protocol
    raw_symbol: str
    intervals: list[_MappingInterval]


DEFAULT_PUBLISHER_ID = 1  # GLBX.MDP3 on CME Globex


def record_dtype(schema: Schema) -> np.dtype:
    """The packed record dtype databento_dbn declares for ``schema``."""
    return np.dtype(_RECORD_CLASS[schema]._dtypes)


def empty_records(schema: Schema, n: int) -> np.ndarray:
    """``n`` zeroed records with ``length`` and ``rtype`` set (fill the rest, then write)."""
    dtype = record_dtype(schema)
    rec = np.zeros(n, dtype=dtype)
    rec["length"] = dtype.itemsize // 4  # DBN record length is in 4-byte words
    rec["rtype"] = _RTYPE[schema].value
    rec["publisher_id"] = DEFAULT_PUBLISHER_ID
    return rec


def px_to_fixed(px: np.ndarray) -> np.ndarray:
    """float64 price units -> int64 fixed-point; NaN -> UNDEF_PRICE."""
    out = np.rint(np.nan_to_num(px, nan=0.0) * PRICE_SCALE).astype(np.int64)
    out[np.isnan(px)] = UNDEF_PRICE
    return out


def _atomic_write(path: Path, chunks: list[bytes]) -> None:
    with atomic_path(path) as tmp, tmp.open("wb") as fh:
        if path.name.endswith(".zst"):
            # A fixed level and no threads keep the bytes identical for identical input. The frame's
            # content checksum (xxhash64 of the decompressed bytes, as Databento's own files carry)
            # makes a flipped bit in the compressed data an error on read instead of other data.
            compressor = zstandard.ZstdCompressor(level=3, write_checksum=True)
            writer = compressor.stream_writer(fh, closefd=False)
            for chunk in chunks:
                writer.write(chunk)
            writer.flush(zstandard.FLUSH_FRAME)
        else:
            for chunk in chunks:
                fh.write(chunk)


def write_records(
    path: str | Path,
    schema: Schema,
    records: np.ndarray,
    *,
    dataset: str = "GLBX.MDP3",
    symbols: dict[int, str] | None = None,
) -> Path:
    """Write structured ``records`` (dtype :func:`record_dtype`) as one DBN file.

    ``symbols`` maps instrument_id -> raw symbol and becomes the file's symbology mappings, so
    readers see ``ESH4`` rather than a bare id. Records must already be in time order.
    """
    path = Path(path)
    if records.dtype != record_dtype(schema):
        raise TypeError(f"records must have dtype record_dtype({schema.value})")
    ts = records["ts_event"].astype(np.int64)
    start = int(ts.min()) if len(ts) else 0
    end = int(ts.max()) + 1 if len(ts) else 1
    symbols = symbols or {}
    mappings = []
    for iid, sym in sorted(symbols.items()):
        day0 = np.datetime64(start, "ns").astype("datetime64[D]")
        day1 = np.datetime64(end, "ns").astype("datetime64[D]") + np.timedelta64(1, "D")
        mappings.append(_SymbolMapping(sym, [_MappingInterval(day0.item(), day1.item(), str(iid))]))
    meta = dbn.Metadata(
        dataset=dataset,
        start=start,
        end=end,
        stype_in=dbn.SType.RAW_SYMBOL,
        stype_out=dbn.SType.INSTRUMENT_ID,
        schema=schema.dbn,
        symbols=sorted(set(symbols.values())),
        mappings=mappings,
    )
    _atomic_write(path, [bytes(meta.encode()), records.tobytes()])
    return path


# --- typed arrays -> records ------------------------------------------------------------------


def book_records(book: BookArrays, schema: Schema = Schema.MBP_10) -> np.ndarray:
    """:class:`BookArrays` -> MBP-10 (or MBP-1) records."""
    n, levels = len(book), schema.levels
    if book.levels < levels:
        raise ValueError(f"book has {book.levels} levels, {schema.value} needs {levels}")
    rec = empty_records(schema, n)
    rec["instrument_id"] = book.instrument_id
    rec["ts_event"] = book.ts_event
    rec["ts_recv"] = book.ts_recv
    rec["price"] = px_to_fixed(book.price)
    rec["size"] = book.size
    rec["action"] = book.action.view("S1")
    rec["side"] = book.side.view("S1")
    rec["flags"] = book.flags
    rec["depth"] = book.depth
    rec["sequence"] = book.sequence
    for i in range(levels):
        rec[f"bid_px_{i:02d}"] = px_to_fixed(book.bid_px[:, i])
        rec[f"ask_px_{i:02d}"] = px_to_fixed(book.ask_px[:, i])
        rec[f"bid_sz_{i:02d}"] = book.bid_sz[:, i]
        rec[f"ask_sz_{i:02d}"] = book.ask_sz[:, i]
        rec[f"bid_ct_{i:02d}"] = book.bid_ct[:, i]
        rec[f"ask_ct_{i:02d}"] = book.ask_ct[:, i]
    return rec


def trade_records(trades: TradeArrays) -> np.ndarray:
    rec = empty_records(Schema.TRADES, len(trades))
    rec["instrument_id"] = trades.instrument_id
    rec["ts_event"] = trades.ts_event
    rec["ts_recv"] = trades.ts_recv
    rec["price"] = px_to_fixed(trades.price)
    rec["size"] = trades.size
    rec["action"] = b"T"
    rec["side"] = trades.side.view("S1")
    rec["flags"] = trades.flags
    rec["sequence"] = trades.sequence
    return rec


def mbo_records(mbo: MboArrays) -> np.ndarray:
    rec = empty_records(Schema.MBO, len(mbo))
    rec["instrument_id"] = mbo.instrument_id
    rec["ts_event"] = mbo.ts_event
    rec["ts_recv"] = mbo.ts_recv
    rec["order_id"] = mbo.order_id
    rec["price"] = mbo.price_raw
    rec["size"] = mbo.size
    rec["action"] = mbo.action.view("S1")
    rec["side"] = mbo.side.view("S1")
    rec["flags"] = mbo.flags
    rec["sequence"] = mbo.sequence
    return rec


def ohlcv_records(bars: OhlcvArrays, schema: Schema = Schema.OHLCV_1M) -> np.ndarray:
    rec = empty_records(schema, len(bars))
    rec["instrument_id"] = bars.instrument_id
    rec["ts_event"] = bars.ts_event
    for name in ("open", "high", "low", "close"):
        rec[name] = px_to_fixed(getattr(bars, name))
    rec["volume"] = bars.volume
    return rec


def write_book(
    path: str | Path,
    book: BookArrays,
    *,
    symbols: dict[int, str] | None = None,
    schema: Schema = Schema.MBP_10,
    dataset: str = "GLBX.MDP3",
) -> Path:
    return write_records(path, schema, book_records(book, schema), dataset=dataset, symbols=symbols)


def write_trades(
    path: str | Path,
    trades: TradeArrays,
    *,
    symbols: dict[int, str] | None = None,
    dataset: str = "GLBX.MDP3",
) -> Path:
    return write_records(path, Schema.TRADES, trade_records(trades), dataset=dataset, symbols=symbols)


def write_mbo(
    path: str | Path,
    mbo: MboArrays,
    *,
    symbols: dict[int, str] | None = None,
    dataset: str = "GLBX.MDP3",
) -> Path:
    return write_records(path, Schema.MBO, mbo_records(mbo), dataset=dataset, symbols=symbols)


def write_ohlcv(
    path: str | Path,
    bars: OhlcvArrays,
    *,
    symbols: dict[int, str] | None = None,
    schema: Schema = Schema.OHLCV_1M,
    dataset: str = "GLBX.MDP3",
) -> Path:
    return write_records(path, schema, ohlcv_records(bars, schema), dataset=dataset, symbols=symbols)
