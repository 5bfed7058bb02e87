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


# Source text per code object: a code object is immutable and a replaced function brings its own, so
# this memo cannot hide an edit made at run time; it saves re-reading files on every schema hash, and
# the hash describes the code the process loaded even if a file is saved again while it runs.
# Keyed by identity (code objects compare equal by content, across files): id -> (code, source).
_SOURCE_OF_CODE: dict[int, tuple[types.CodeType, str]] = {}
# The same for classes, keyed by the class object: a class's source is its file's text (a method
# patched onto it at run time never showed), and inspect.getsource(cls) parses the whole module
# each time (0.8 s for the ~100 classes of one schema hash, which every cache build and load computes).
_SOURCE_OF_CLASS: dict[int, tuple[type, str]] = {}


def _source(obj: Any) -> str:
    target = getattr(obj, "py_func", obj)  # numba dispatcher -> the Python function
    if isinstance(target, type):
        seen = _SOURCE_OF_CLASS.get(id(target))
        if seen is None or seen[0] is not target:
            seen = _SOURCE_OF_CLASS[id(target)] = (target, _read_source(target))
        return seen[1]
    code = getattr(target, "__code__", None)
    if not isinstance(code, types.CodeType):
        return _read_source(target)
    known = _SOURCE_OF_CODE.get(id(code))
    if known is None or known[0] is not code:  # holding the code keeps its id from being reused
        known = _SOURCE_OF_CODE[id(code)] = (code, _read_source(target))
    return known[1]


def _read_source(target: Any) -> str:
    try:
        return inspect.getsource(target)
    except (OSError, TypeError):
        code = getattr(target, "__code__", None)
        if code is not None:  # defined in a REPL or exec: hash the bytecode and constants
            return stable_repr((code.co_code, code.co_consts, code.co_names))
        return repr(target)


def _entry(name: str, obj: Any, own: tuple[str, ...] = ()) -> str | None:
    if name.startswith("__") or isinstance(obj, types.ModuleType):
        return None
    module = getattr(obj, "__module__", None) or ""
    if callable(obj) and (isinstance(obj, type) or hasattr(obj, "__code__") or hasattr(obj, "py_func")):
        if module.split(".")[0] in _OWN + own:
            return f"{name}={_source(obj)}"
        return f"{name}=<{module}.{getattr(obj, '__qualname__', name)}>"  # a library: by name
    if isinstance(obj, int | float | str | bytes | bool | tuple | frozenset | Enum | type(None)):
        return f"{name}={stable_repr(obj)}"
    return None


def stable_repr(obj: Any) -> str:
    """``repr`` with every set's members sorted, recursively.

    ``repr(frozenset(...))`` lists members in hash order, and ``str`` hashes are salted per process
    (``PYTHONHASHSEED``): hashing that repr gave every process its own schema hash, so a cache built
    by one command was refused as stale by the next. Sorting the members' stable reprs fixes the order.
    """
    if isinstance(obj, set | frozenset):
        return f"{type(obj).__name__}({{{', '.join(sorted(stable_repr(m) for m in obj))}}})"
    if isinstance(obj, tuple):
        inner = ", ".join(stable_repr(m) for m in obj)
        return f"({inner},)" if len(obj) == 1 else f"({inner})"
    if isinstance(obj, list):
        return f"[{', '.join(stable_repr(m) for m in obj)}]"
    if isinstance(obj, dict):
        items = sorted(f"{stable_repr(k)}: {stable_repr(v)}" for k, v in obj.items())
        return "{" + ", ".join(items) + "}"
    return repr(obj)


def module_fingerprint(module: types.ModuleType, own: tuple[str, ...] = ()) -> str:
    """SHA-256 of the module's current functions, classes and constants.

    Functions of foxhunt (and of the packages named in ``own``: a feature plug-in's) are hashed by
    their source; those of other libraries by name only."""
    parts = [e for name in sorted(vars(module)) if (e := _entry(name, vars(module)[name], own)) is not None]
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
