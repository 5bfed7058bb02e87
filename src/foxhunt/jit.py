"""Numba's on-disk kernel cache, stamped with the whole package's source.

Numba (0.68) decides that a cached kernel (``@numba.njit(cache=True)``) is stale by its own file only:
the index beside the compiled code records a hash of that one file. A kernel that calls a jitted
function of another module, or reads another module's constant when it compiles, is then served
from the cache after the other file changed: old numbers from new code, in the next process and every
one after it. Two such kernels exist here: ``validation/labels.py``'s barrier kernel calls
``domain/barrier.py``'s ``barrier_touch``, and ``data/book.py``'s kernels bake in ``PRICE_SCALE`` and
``UNDEF_PRICE`` from ``data/dbn_read.py``.

So every kernel of a registered package gets a stamp that also holds a digest of all the package's
``.py`` files: a change anywhere in the package recompiles each kernel at its next use (seconds, once,
after an edit), while a run on unchanged code still loads every kernel from the cache. A module that
defines cached kernels imports this one before its decorators run (tests/test_jit.py checks that each
does); importing it registers foxhunt itself.

Numba picks a cache's locator from ``CacheImpl._locator_classes`` in order, the first that accepts the
function; the locators here accept only the files of a registered package and otherwise behave as
numba's own (a user-provided ``NUMBA_CACHE_DIR``, the source tree's ``__pycache__``, the user-wide
cache folder).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from numba.core import caching

_ROOTS: list[Path] = []
PACKAGE = Path(__file__).resolve().parent
"""foxhunt's own source folder: its kernels are stamped with its digest, and so is the feature cache's
key (:func:`foxhunt.dataset.cache.schema_hash`)."""


@functools.cache
def package_digest(root: str) -> bytes:
    """SHA-256 over every ``.py`` file under ``root`` (its path relative to ``root`` and its bytes, in
    sorted order). Once per process: the code a process runs is the code it imported."""
    base = Path(root)
    h = hashlib.sha256()
    for path in sorted(base.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        h.update(path.relative_to(base).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.digest()


def _root_of(py_file: str) -> str | None:
    where = Path(py_file).resolve()
    for root in _ROOTS:
        if where.is_relative_to(root):
            return str(root)
    return None


class _PackageStamp:
    """A source-file locator whose stamp is (its file's, the package's digest)."""

    _package_root: str

    def get_source_stamp(self) -> Any:
        return (super().get_source_stamp(), package_digest(self._package_root))  # type: ignore[misc]

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> Any:
        root = _root_of(py_file)
        if root is None:
            return None
        self = super().from_function(py_func, py_file)  # type: ignore[misc]
        if self is not None:
            self._package_root = root
        return self


class PackageUserProvidedLocator(_PackageStamp, caching.UserProvidedCacheLocator):
    """``NUMBA_CACHE_DIR`` set: the cache there, stamped with the package."""


class PackageInTreeLocator(_PackageStamp, caching.InTreeCacheLocator):
    """The source tree's ``__pycache__``, stamped with the package."""


class PackageUserWideLocator(_PackageStamp, caching.UserWideCacheLocator):
    """A read-only source tree: the user-wide cache folder, stamped with the package."""


_LOCATORS = (PackageUserProvidedLocator, PackageInTreeLocator, PackageUserWideLocator)


def register(root: Path) -> None:
    """Stamp the cached kernels of every module under ``root`` with the digest of all its sources.
    Idempotent; effective for kernels decorated after the call."""
    root = root.resolve()
    if root not in _ROOTS:
        _ROOTS.append(root)
    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # the name since numba 0.59
    chosen = impl._locator_classes
    for cls in reversed(_LOCATORS):
        if cls not in chosen:
            chosen.insert(0, cls)


register(PACKAGE)
