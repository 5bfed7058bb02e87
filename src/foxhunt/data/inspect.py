"""What ``foxhunt data inspect`` reports about each DBN file.

Instruments are shown by symbol: the file's symbology mapping names each instrument id; a file
without mappings (a re-encoded or hand-written one) that lists the symbols of one product shows
that product's root. The file's contract specification (:mod:`foxhunt.domain.instrument`) is
reported with it, or the reason it cannot be determined from the file alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.data.arrays import BookArrays, MboArrays
from foxhunt.data.config import DataConfig
from foxhunt.data.dbn_read import DbnFile, read_raw, to_arrays
from foxhunt.data.ingest import check_monotonic, expand_paths, median_spread_ticks
from foxhunt.data.instrument import definitions_from_records
from foxhunt.data.schemas import Schema
from foxhunt.data.sessions import iso_utc
from foxhunt.domain.config import InstrumentConfig
from foxhunt.domain.instrument import (
    Instrument,
    InstrumentError,
    resolve_instrument,
    symbol_root,
)


def instrument_symbols(f: DbnFile) -> dict[int, str]:
    """instrument_id -> symbol: the symbology mapping, else the definition records, else the one
    product root every symbol the file lists shares (``ES`` for ``ESZ3 ESH4 ...``), else the id."""
    ids = [int(i) for i in np.unique(f.records["instrument_id"])]
    named = dict(f.instrument_symbols)
    if f.schema is Schema.DEFINITION:
        for d in definitions_from_records(f.records):
            named.setdefault(d.instrument_id, d.raw_symbol)
    roots = {symbol_root(s) for s in f.symbols}
    shared = roots.pop() if len(roots) == 1 else None
    return {i: named.get(i) or shared or str(i) for i in ids}


def file_instrument(f: DbnFile, overrides: InstrumentConfig | None = None) -> Instrument:
    """The contract specification of one file on its own (InstrumentError when it cannot tell)."""
    defs = definitions_from_records(f.records) if f.schema is Schema.DEFINITION else []
    symbols = list(f.instrument_symbols.values()) or list(f.symbols)
    return resolve_instrument(symbols, defs, overrides, str(f.path))


def inspect_file(path: Path, cfg: DataConfig, overrides: InstrumentConfig | None = None) -> dict[str, Any]:
    """One file's report (JSON-ready). Raises the file's typed error if it cannot be read."""
    f = read_raw(path)
    ts = f.records["ts_event"].astype(np.int64)
    symbols = instrument_symbols(f)
    try:
        instrument: Instrument | None = file_instrument(f, overrides)
        instrument_problem = None
    except InstrumentError as exc:
        instrument, instrument_problem = None, f"{exc.problem} (fix: {exc.fix})"
    report: dict[str, Any] = {
        "path": str(path),
        "schema": f.schema.value,
        "dataset": f.dataset,
        "dbn_version": f.version,
        "records": len(f),
        "instruments": [{"instrument_id": i, "symbol": s} for i, s in symbols.items()],
        "instrument": None if instrument is None else instrument.to_dict(),
        "instrument_problem": instrument_problem,
        "start": iso_utc(ts.min()),
        "end": iso_utc(ts.max()),
        "start_ns": int(ts.min()),
        "end_ns": int(ts.max()),
        "crossed_share": None,
        "median_spread_ticks": None,
        "book_states": None,
    }
    if not f.schema.has_typed_arrays:
        return report
    arrays = to_arrays(f)
    check_monotonic(f.path, arrays.ts_event, arrays.instrument_id)
    book: BookArrays | None = None
    if isinstance(arrays, MboArrays):
        from foxhunt.data.book import rebuild_book

        book = rebuild_book(arrays, levels=cfg.levels).book
    elif isinstance(arrays, BookArrays):
        book = arrays
    if book is not None and len(book):
        report["book_states"] = len(book)
        report["crossed_share"] = float(book.crossed().mean())
        tick = cfg.tick_size if instrument is None else instrument.tick_size
        report["median_spread_ticks"] = median_spread_ticks(book, tick)
    return report


def inspect_files(
    paths: Sequence[str | Path], cfg: DataConfig, overrides: InstrumentConfig | None = None
) -> list[dict[str, Any]]:
    return [inspect_file(p, cfg, overrides) for p in expand_paths(paths)]
