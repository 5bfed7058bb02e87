"""Ways to damage foxhunt's artefacts on purpose, for the integrity tests (cache, checkpoint, DBN)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from foxhunt.features.cache_file import META_KEY


def cache_parts(path: Path) -> tuple[pa.Table, bytes]:
    """A cache file's table and its raw metadata bytes."""
    with pa.memory_map(str(path), "r") as source:
        table = pa.ipc.open_file(source).read_all()
    return table, table.schema.metadata[META_KEY]


def write_cache(path: Path, table: pa.Table, raw_meta: bytes) -> Path:
    """``table`` with ``raw_meta`` as its foxhunt metadata, written as an Arrow IPC file at ``path``."""
    table = table.replace_schema_metadata({META_KEY: raw_meta})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return path


def edit_meta(source: Path, target: Path, edit: Any) -> Path:
    """A copy of cache ``source`` at ``target`` with ``edit(meta)`` applied to its metadata dict."""
    table, raw = cache_parts(source)
    meta = json.loads(raw)
    edit(meta)
    return write_cache(target, table, json.dumps(meta).encode())


def edit_column(source: Path, target: Path, name: str, change: Any) -> Path:
    """A copy of cache ``source`` at ``target`` whose column ``name`` is ``change(values)``."""
    table, raw = cache_parts(source)
    values = change(table.column(name).to_numpy(zero_copy_only=False).copy())
    table = table.set_column(table.column_names.index(name), name, pa.array(values))
    return write_cache(target, table, raw)


def flip_bytes(source: Path, target: Path, count: int, seed: int, lo: int = 0, hi: int | None = None) -> Path:
    """A copy of ``source`` with ``count`` bytes in ``[lo, hi)`` XOR-ed with a random non-zero value."""
    raw = bytearray(source.read_bytes())
    rng = np.random.default_rng(seed)
    for pos in rng.choice(np.arange(lo, len(raw) if hi is None else hi), size=count, replace=False):
        raw[int(pos)] ^= int(rng.integers(1, 256))
    target.write_bytes(bytes(raw))
    return target


def flip_bit(source: Path, target: Path, seed: int) -> Path:
    """A copy of ``source`` with one random bit flipped."""
    raw = bytearray(source.read_bytes())
    rng = np.random.default_rng(seed)
    pos = int(rng.integers(0, len(raw)))
    raw[pos] ^= 1 << int(rng.integers(0, 8))
    target.write_bytes(bytes(raw))
    return target


def flip_bit_at(source: Path, target: Path, pos: int, bit: int = 0) -> Path:
    """A copy of ``source`` with bit ``bit`` of byte ``pos`` flipped."""
    raw = bytearray(source.read_bytes())
    raw[pos] ^= 1 << bit
    target.write_bytes(bytes(raw))
    return target
