"""Columnar containers to and from Arrow IPC files (memory-mappable; pyarrow, polars, pandas).

``[n, L]`` columns become ``fixed_size_list<L>`` columns. Files are written to a temporary name
and renamed, so a reader never sees a partial file.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from foxhunt.atomic import atomic_path


def to_table(columns: Any, metadata: dict[str, Any] | None = None) -> pa.Table:
    """A dataclass of numpy columns (``[n]`` or ``[n, L]``) as an Arrow table."""
    arrays, names = [], []
    for f in dataclasses.fields(columns):
        a = np.asarray(getattr(columns, f.name))
        if a.ndim == 2:
            flat = pa.array(a.reshape(-1))
            arrays.append(pa.FixedSizeListArray.from_arrays(flat, a.shape[1]))
        else:
            arrays.append(pa.array(a))
        names.append(f.name)
    meta = {k: json.dumps(v) for k, v in (metadata or {}).items()}
    return pa.Table.from_arrays(arrays, names=names, metadata=meta)


def write_ipc(table: pa.Table, path: str | Path) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp, pa.OSFile(str(tmp), "wb") as sink:
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    return path


def read_ipc(path: str | Path) -> pa.Table:
    """Memory-map an Arrow IPC file."""
    with pa.memory_map(str(path), "r") as source:
        return pa.ipc.open_file(source).read_all()


def column(table: pa.Table, name: str) -> np.ndarray:
    """A column back as numpy (``fixed_size_list`` columns as ``[n, L]``)."""
    col = table.column(name).combine_chunks()
    if pa.types.is_fixed_size_list(col.type):
        return col.values.to_numpy(zero_copy_only=False).reshape(len(col), col.type.list_size)
    return col.to_numpy(zero_copy_only=False)
