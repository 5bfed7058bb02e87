"""Reading the contract specification out of DBN files: definition records and header symbols.

The :class:`~foxhunt.domain.instrument.Instrument` and its resolution rules (overrides, definition
records, the built-in product table) are the domain's (:mod:`foxhunt.domain.instrument`); this module
reads what the data says about its contract (the symbols of a file's header, the Databento
``definition`` records) and resolves it there, for a set of DBN files or a feature cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.data.schemas import Schema
from foxhunt.domain.config import InstrumentConfig
from foxhunt.domain.instrument import (
    Definition,
    Instrument,
    InstrumentError,
    InstrumentSource,
    apply_instrument_config,
    resolve_instrument,
    symbol_root,
)

PRICE_SCALE = 1_000_000_000  # DBN fixed-point price units (as foxhunt.data.dbn_read)
_UNDEF_I64 = np.iinfo(np.int64).max
_UNDEF_I32 = np.iinfo(np.int32).max


def _text(x: Any) -> str:
    return (x.decode(errors="replace") if isinstance(x, bytes) else str(x)).strip("\x00 ").strip()


def definitions_from_records(rec: np.ndarray) -> list[Definition]:
    """:class:`Definition` per record of a Databento definition array (``DBNStore.to_ndarray``)."""
    names = rec.dtype.names or ()
    out = []
    for r in rec:
        tick_raw = int(r["min_price_increment"])
        tick = tick_raw / PRICE_SCALE if tick_raw not in (_UNDEF_I64, 0) else float("nan")
        # CME futures carry the point value in unit_of_measure_qty (50 for ES, fixed-point);
        # contract_multiplier is usually unset (i32 max).
        uom = int(r["unit_of_measure_qty"]) if "unit_of_measure_qty" in names else _UNDEF_I64
        mult = int(r["contract_multiplier"]) if "contract_multiplier" in names else _UNDEF_I32
        if uom not in (_UNDEF_I64, 0):
            point_value = uom / PRICE_SCALE
        elif mult not in (_UNDEF_I32, 0):
            point_value = float(mult)
        else:
            point_value = float("nan")
        raw_symbol = _text(r["raw_symbol"])
        asset = _text(r["asset"]) if "asset" in names else ""
        out.append(
            Definition(
                instrument_id=int(r["instrument_id"]),
                raw_symbol=raw_symbol,
                root=(asset or symbol_root(raw_symbol) or raw_symbol).upper(),
                tick_size=tick,
                point_value=point_value,
                currency=_text(r["currency"]) if "currency" in names else "",
            )
        )
    return out


# --- reading the inputs ------------------------------------------------------------------------


def _header(path: Path) -> Any:
    """The DBN metadata of ``path`` without decoding its records (reads the header bytes only)."""
    from foxhunt.data.dbn_read import peek_metadata

    meta = peek_metadata(path)
    if meta is None:
        raise InstrumentError(path, "not a readable DBN file (no DBN header)", "pass Databento DBN files")
    return meta


def file_symbols(path: str | Path) -> tuple[list[str], list[Definition]]:
    """``(raw symbols, definitions)`` of one DBN file: symbols from its header (the symbology
    mappings, else the requested symbols); definitions only for a definition-schema file."""
    path = Path(path)
    meta = _header(path)
    # Requested symbols and both sides of the symbology mappings; ids (all digits) are no symbols.
    named = list(meta.symbols or []) + list(meta.mappings or {})
    named += [str(iv["symbol"]) for ivs in (meta.mappings or {}).values() for iv in ivs]
    symbols = [s for s in dict.fromkeys(named) if s and not s.isdigit()]
    defs: list[Definition] = []
    if str(meta.schema) == Schema.DEFINITION.value:
        from foxhunt.data.dbn_read import read_raw

        f = read_raw(path)
        defs = definitions_from_records(f.records)
        symbols += [d.raw_symbol for d in defs]
    return symbols, defs


def instrument_of_files(
    paths: Iterable[str | Path], overrides: InstrumentConfig | None = None, where: str = "--data"
) -> Instrument:
    """:func:`resolve_instrument` over the symbols and definition records of DBN files."""
    from foxhunt.data.ingest import expand_paths

    symbols: list[str] = []
    defs: list[Definition] = []
    for p in expand_paths(paths):
        s, d = file_symbols(p)
        # A definition file describes contracts; the market files say which one is traded.
        if not d:
            symbols += s
        defs += d
    if not symbols:
        symbols = [x.raw_symbol for x in defs]
    return resolve_instrument(symbols, defs, overrides, where)


def instrument_of_cache(meta: dict[str, Any], overrides: InstrumentConfig | None = None) -> Instrument:
    """The instrument of a feature cache: the one it records (its features were counted in that
    tick), with ``overrides`` applied; a cache written before caches recorded it is resolved from its
    source files (named in its metadata), or, where those are gone, from complete overrides only.
    """
    recorded = meta.get("instrument")
    if recorded:
        base = Instrument(
            root=recorded["root"],
            contracts=tuple(recorded["contracts"]),
            tick_size=float(recorded["tick_size"]),
            point_value=float(recorded["point_value"]),
            currency=recorded["currency"],
            session_hours=float(recorded["session_hours"]),
            trading_days=int(recorded["trading_days"]),
            source=InstrumentSource(recorded["source"]),
            overridden=tuple(recorded.get("overridden", ())),
        )
        over = apply_instrument_config(
            base, overrides or InstrumentConfig(), base.contracts, {base.root}, "the feature cache"
        )
        return replace(over, overridden=tuple(dict.fromkeys(base.overridden + over.overridden)))
    paths = [Path(s["path"]) for s in meta.get("sources", []) if s.get("path")]
    present = [p for p in paths if p.is_file()]
    where = f"the feature cache's sources ({', '.join(p.name for p in paths) or 'none recorded'})"
    if not present:
        return resolve_instrument((), (), overrides, where)
    return instrument_of_files(present, overrides, where)
