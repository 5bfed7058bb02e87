"""Numba's kernel cache across processes: a change in another file of the package is never served stale
(foxhunt.jit). Each case runs in fresh processes, as a user's next command would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import foxhunt

SRC = Path(foxhunt.__file__).resolve().parent

# Kernel k in a.py calls f of b.py; the cache is k's (numba's default: stale when a.py changes only).
A = """
import numba
from pkgx.b import f

@numba.njit(cache=True)
def k():
    return f()
"""
B = """
import numba

@numba.njit
def f():
    return {value}
"""
RUN = """
import sys
sys.path.insert(0, {root!r})
if {stamped}:
    from pathlib import Path
    from foxhunt.jit import register
    register(Path({root!r}) / "pkgx")
from pkgx.a import k
print(k())
"""


def _package(root: Path, value: int) -> None:
    (root / "pkgx").mkdir(parents=True, exist_ok=True)
    (root / "pkgx" / "__init__.py").write_text("")
    (root / "pkgx" / "a.py").write_text(A)
    (root / "pkgx" / "b.py").write_text(B.format(value=value))


def _run(root: Path, stamped: bool) -> int:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(root / "cache")}
    code = textwrap.dedent(RUN.format(root=str(root), stamped=stamped))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("stamped", [False, True], ids=["numba_alone", "package_stamp"])
def test_a_change_in_a_called_module_recompiles_the_cached_kernel(tmp_path: Path, stamped: bool) -> None:
    _package(tmp_path, 2)
    assert _run(tmp_path, stamped) == 2  # compiled and cached
    assert _run(tmp_path, stamped) == 2  # loaded from the cache
    (tmp_path / "pkgx" / "b.py").write_text(B.format(value=101))  # only the called module changes
    # numba alone serves the stale kernel (why foxhunt.jit exists); the package stamp recompiles it.
    assert _run(tmp_path, stamped) == (101 if stamped else 2)


def test_every_module_with_cached_kernels_stamps_them_with_the_package() -> None:
    """``import foxhunt.jit`` comes before the first ``cache=True`` of each module that has one."""
    unstamped = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        first = re.search(r"cache\s*=\s*True", text)
        if first is None or path.name == "jit.py":
            continue
        imported = text.find("import foxhunt.jit")
        if imported < 0 or imported > first.start():
            unstamped.append(str(path.relative_to(SRC)))
    assert unstamped == []
