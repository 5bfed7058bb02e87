"""Fingerprints of code and inputs, for cache keys and the schema hash.

:func:`module_fingerprint` hashes what a module *currently* holds, not its file: the source of
every function and class bound in its namespace (numba dispatchers through their Python
function) and the value of every plain constant. So replacing a function at run time (a
monkeypatch in a test, a hot reload) changes the fingerprint exactly as editing the file does.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import types
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import Any

_OWN = ("foxhunt", "tests", "__main__")


def _source(obj: Any) -> str:
    target = getattr(obj, "py_func", obj)  # numba dispatcher -> the Python function
    try:
        return inspect.getsource(target)
    except (OSError, TypeError):
        code = getattr(target, "__code__", None)
        if code is not None:  # defined in a REPL or exec: hash the bytecode and constants
            return repr((code.co_code, code.co_consts, code.co_names))
        return repr(target)


def _entry(name: str, obj: Any) -> str | None:
    if name.startswith("__") or isinstance(obj, types.ModuleType):
        return None
    module = getattr(obj, "__module__", None) or ""
    if callable(obj) and (isinstance(obj, type) or hasattr(obj, "__code__") or hasattr(obj, "py_func")):
        if module.split(".")[0] in _OWN:
            return f"{name}={_source(obj)}"
        return f"{name}=<{module}.{getattr(obj, '__qualname__', name)}>"  # a library: by name
    if isinstance(obj, int | float | str | bytes | bool | tuple | frozenset | Enum | type(None)):
        return f"{name}={obj!r}"
    return None


def module_fingerprint(module: types.ModuleType) -> str:
    """SHA-256 of the module's current functions, classes and constants."""
    parts = [e for name in sorted(vars(module)) if (e := _entry(name, vars(module)[name])) is not None]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def file_fingerprint(path: str | Path) -> dict[str, Any]:
    """Content hash of one input file (name and size kept for messages)."""
    p = Path(path)
    digest = hashlib.sha256()
    with p.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            digest.update(chunk)
    return {"name": p.name, "path": str(p.resolve()), "bytes": p.stat().st_size, "sha256": digest.hexdigest()}


def digest(payload: Any) -> str:
    """SHA-256 of a JSON-serialisable payload (sorted keys)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def combine(parts: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()
