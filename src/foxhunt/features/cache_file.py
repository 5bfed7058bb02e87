"""The feature cache's file: its columns, metadata and integrity, and how every stage opens one.

A cache is one Arrow IPC file (the dataset stage writes it: :mod:`foxhunt.dataset.cache`). Its
metadata (JSON under the schema key ``foxhunt``) records the **content hash** of every column
(``content_hash``: column -> SHA-256 of its dtype, length and values) and ``meta_hash`` (of the rest
of the metadata). Every open verifies the metadata's keys and hash, the row count and each column's
hash, so a flipped byte, an edited close price, label span or row count, or a cut row is one line
naming the file, never other numbers.

Here, below the stages that read a cache (the alpha check, the environment, the backtester), rather
than beside the code that builds it: reading a cache needs none of the feature, label or key code.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from foxhunt.data.arrow_io import read_ipc
from foxhunt.errors import FoxhuntError, door

# 2: per-column content hashes in the metadata (a version 1 cache has none and is rebuilt).
FORMAT_VERSION = 2
META_KEY = b"foxhunt"
REQUIRED_META = (
    "format_version",
    "schema_hash",
    "cache_key",
    "layout",
    "columns",
    "data_source",
    "row_unit",
    "sources",
    "rows",
    "config",
    "instrument",
    "label_span",
    "content_hash",
    "meta_hash",
)
"""The metadata keys a reader relies on; a cache lacking one is refused on open."""
BUILD = door("foxhunt features build --data ...", "api.build_features(files, cfg, out_dir)")
REBUILD = f"delete it and rebuild it: {BUILD} (a cache is derived data)"


class CacheMismatchError(FoxhuntError):
    """A cache file does not match the running code, config or sources."""


def seal_table(cols: dict[str, pa.Array], meta: dict[str, Any]) -> pa.Table:
    """The cache table: ``cols`` with ``meta`` plus every column's content hash and the meta hash."""
    meta = {**meta, "content_hash": {name: column_hash(array) for name, array in cols.items()}}
    meta["meta_hash"] = meta_hash(json.loads(json.dumps(meta)))  # as a reader will parse it
    schema = pa.schema([pa.field(k, v.type) for k, v in cols.items()], metadata={META_KEY: json.dumps(meta)})
    return pa.Table.from_arrays(list(cols.values()), schema=schema)


# --- integrity ---------------------------------------------------------------------------------


def column_hash(column: pa.Array | pa.ChunkedArray) -> str:
    """SHA-256 of a column's Arrow type, length and values (the same bytes at build and on load).

    SHA-256 rather than BLAKE2b or xxhash: hashlib's SHA-256 uses the CPU's SHA instructions and
    hashed a 150,000-row, 141-column cache (82 MB) in 0.06 s against 0.18 s for BLAKE2b, about a
    tenth of what turning the columns into numpy costs; xxhash would be a new dependency.
    """
    values = np.ascontiguousarray(column.to_numpy(zero_copy_only=False))
    h = hashlib.sha256(f"{column.type}|{len(column)}|".encode())
    h.update(values.view(np.uint8) if values.dtype == np.bool_ else values.data)
    return h.hexdigest()


def meta_hash(meta: dict[str, Any]) -> str:
    """SHA-256 of the metadata without its ``meta_hash`` (canonical JSON): an edited label span,
    row count or source list is refused like an edited column."""
    body = {k: v for k, v in meta.items() if k != "meta_hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def verify_content(path: Path, table: pa.Table, meta: dict[str, Any]) -> None:
    """Refuse a cache whose rows or column values are not the ones its metadata recorded."""
    if table.num_rows != meta["rows"]:
        raise CacheMismatchError(
            path, f"corrupt cache: {table.num_rows} rows, its metadata records {meta['rows']}", REBUILD
        )
    recorded: dict[str, str] = meta["content_hash"]
    if sorted(recorded) != sorted(table.column_names):
        raise CacheMismatchError(path, "corrupt cache: its columns are not the ones it recorded", REBUILD)
    bad = [name for name in table.column_names if column_hash(table.column(name)) != recorded[name]]
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise CacheMismatchError(
            path, f"corrupt cache: the content hash of column(s) {shown} does not match", REBUILD
        )


# --- reading -------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FeatureCache:
    """A loaded cache file: the Arrow table (memory-mapped) and its metadata."""

    path: Path
    table: pa.Table
    meta: dict[str, Any]

    @property
    def columns(self) -> list[str]:
        return list(self.meta["columns"])

    def features(self) -> np.ndarray:
        """[n, W] float32 feature matrix in layout order."""
        if not self.columns:
            return np.zeros((self.table.num_rows, 0), np.float32)
        return np.column_stack([self.column(c) for c in self.columns]).astype(np.float32, copy=False)

    def column(self, name: str) -> np.ndarray:
        return self.table.column(name).to_numpy(zero_copy_only=False)


def stored_meta(path: Path) -> dict[str, Any]:
    """The metadata document as stored, of any format version (refused when it is not a JSON object)."""
    with pa.memory_map(str(path), "r") as source:
        schema = pa.ipc.open_file(source).schema
    raw = (schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise CacheMismatchError(path, "not a foxhunt feature cache (no metadata)", REBUILD)
    try:
        meta = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and bytes that are not UTF-8
        problem = f"corrupt cache: its metadata is not valid JSON ({exc})"
        raise CacheMismatchError(path, problem, REBUILD) from exc
    if not isinstance(meta, dict):
        raise CacheMismatchError(path, "corrupt cache: its metadata is not a JSON object", REBUILD)
    return meta


def read_meta(path: Path) -> dict[str, Any]:
    """The cache's metadata document, refused (one line) when it is not JSON, of another format
    version or lacks a key a reader needs."""
    meta = stored_meta(path)
    if meta.get("format_version") != FORMAT_VERSION:
        raise CacheMismatchError(
            path,
            f"cache format {meta.get('format_version')!r}, this foxhunt reads format {FORMAT_VERSION} "
            "(with per-column content hashes)",
            REBUILD,
        )
    lacking = [key for key in REQUIRED_META if key not in meta]
    if lacking:
        raise CacheMismatchError(path, f"corrupt cache: its metadata lacks {', '.join(lacking)}", REBUILD)
    if meta["meta_hash"] != meta_hash(meta):
        raise CacheMismatchError(
            path, "corrupt cache: its metadata does not match its hash (edited or damaged)", REBUILD
        )
    return meta


def open_cache(path: str | Path, *, verify: bool = True) -> FeatureCache:
    """Read a cache file without checking it against the running code (``features info``).

    The metadata is always checked; ``verify`` also checks the row count and every column's content
    hash (off only where the caller reads the metadata alone and opens the cache again to use it).
    """
    path = Path(path)
    if not path.is_file():
        raise CacheMismatchError(path, "no such cache file", f"build it with {BUILD}")
    try:
        meta = read_meta(path)
        table = read_ipc(path)
        if verify:
            verify_content(path, table, meta)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # a damaged schema: names not UTF-8
        raise CacheMismatchError(path, f"unreadable cache file ({exc})", REBUILD) from exc
    return FeatureCache(path=path, table=table, meta=meta)
