"""What ``foxhunt data inspect`` reports about each DBN file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.config.data import DataConfig
from foxhunt.data.arrays import BookArrays, MboArrays
from foxhunt.data.dbn_read import read_raw, to_arrays
from foxhunt.data.ingest import check_monotonic, expand_paths, median_spread_ticks
from foxhunt.data.sessions import iso_utc


def inspect_file(path: Path, cfg: DataConfig) -> dict[str, Any]:
    """One file's report (JSON-ready). Raises the file's typed error if it cannot be read."""
    f = read_raw(path)
    ts = f.records["ts_event"].astype(np.int64)
    ids = np.unique(f.records["instrument_id"])
    report: dict[str, Any] = {
        "path": str(path),
        "schema": f.schema.value,
        "dataset": f.dataset,
        "dbn_version": f.version,
        "records": len(f),
        "instruments": [
            {"instrument_id": int(i), "symbol": f.instrument_symbols.get(int(i), str(int(i)))} for i in ids
        ],
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
        report["median_spread_ticks"] = median_spread_ticks(book, cfg.tick_size)
    return report


def inspect_files(paths: Sequence[str | Path], cfg: DataConfig) -> list[dict[str, Any]]:
    return [inspect_file(p, cfg) for p in expand_paths(paths)]
