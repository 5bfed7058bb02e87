"""A fork of the served row state: a copy a close can run on while the original stays as it was.

``foxhunt serve`` makes a row's close ahead of its closing record when the feed is idle
(:mod:`foxhunt.serve.ahead`, ``serve.ahead``): on a fork of the state, kept if the next record
opens a later bar and dropped if it belongs to the bar still open. A fork must therefore copy
everything a close changes and may share everything it only reads. What it does with each value:

- numbers, strings, enums, types, functions, dtypes, devices, configs (pydantic models: frozen):
  shared;
- a NumPy array: shared when it is read-only (the session's buffers hand out read-only views, and
  nothing writes through them), copied when writeable (the feature families' carried kernel states,
  which their numba kernels update in place, a chunk's small arrays);
- a torch tensor: shared (the row state's tensors are the market's views of its row buffers, which
  are forked as buffers; nothing writes into a view);
- an object with a ``__fork__(memo)`` method: what it returns. The append-only buffers
  (:mod:`foxhunt.serve.buffers`, ``state._RowBuffers``) share their storage with the fork and copy
  it on the fork's first write below the length they had when forked (copy on write): a close
  appends past the end, and rewrites the session's last row (its look-ahead aux target), which the
  original still holds;
- lists, tuples, dicts, sets, bytearrays, dataclasses and other objects of foxhunt: copied, their
  contents forked (an object twice in the graph is forked once: ``memo``).

Anything else (a file handle, a lock, a foreign object) raises ``TypeError`` rather than being
shared by accident; pass it in ``memo`` (``{id(x): x}``) to share it.
"""

from __future__ import annotations

import dataclasses
import enum
import types
from pathlib import PurePath
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel

_SHARED = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    enum.Enum,
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    PurePath,
    np.dtype,
    np.generic,
    torch.device,
    torch.dtype,
    torch.Tensor,
    BaseModel,
    range,
    slice,
)


_ATOMIC = frozenset({type(None), bool, int, float, str, bytes})


def fork(x: Any, memo: dict[int, Any] | None = None) -> Any:
    """A copy of ``x`` that can change without changing ``x`` (module docs)."""
    if type(x) in _ATOMIC:  # the commonest values first (a row layout's column names)
        return x
    memo = {} if memo is None else memo
    key = id(x)
    if key in memo:
        return memo[key]
    y = _fork(x, memo)
    memo[key] = y
    return y


def _fork(x: Any, memo: dict[int, Any]) -> Any:
    if type(x) is np.ndarray:  # the commonest object (a carried kernel state, a view)
        return x.copy() if x.flags.writeable else x
    if isinstance(x, np.void):  # a structured scalar can be a view of its array: copied
        return np.array(x)[()]
    if isinstance(x, _SHARED):
        return x
    if isinstance(x, np.ndarray):
        return x.copy() if x.flags.writeable else x
    method = getattr(type(x), "__fork__", None)
    if method is not None:
        return method(x, memo)
    if isinstance(x, bytearray):
        return bytearray(x)
    if type(x) in (tuple, frozenset) and all(type(v) in _ATOMIC for v in x):
        return x  # immutable all through
    if type(x) in (list, tuple, set, frozenset):
        return type(x)(fork(v, memo) for v in x)
    if type(x) is dict:
        return {k: fork(v, memo) for k, v in x.items()}
    if type(x).__module__.startswith("foxhunt.") and hasattr(x, "__dict__"):
        y = object.__new__(type(x))
        memo[id(x)] = y  # an object that refers back to itself
        for k, v in vars(x).items():
            object.__setattr__(y, k, fork(v, memo))
        return y
    if dataclasses.is_dataclass(x):  # a slotted dataclass
        fields = {f.name: fork(getattr(x, f.name), memo) for f in dataclasses.fields(x)}
        return dataclasses.replace(x, **fields)
    raise TypeError(f"cannot fork a {type(x).__module__}.{type(x).__qualname__}: pass it in memo to share it")


__all__ = ["fork"]
