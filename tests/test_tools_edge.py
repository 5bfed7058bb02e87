"""tools/edge.py runs as its docstring says (the project's Python, a cache, a column): the contract's
tick and point value come from the cache's instrument (ContractConfig holds neither)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # minutes on the shared 2-core host: every fold's rule grid through the backtester
def test_edge_probe_runs_on_a_cache(tiny_cache) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    column = next(c for c in tiny_cache.columns if c.startswith("ofi."))
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "edge.py"), str(tiny_cache.path), column],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "market round trip: 1 tick spread +" in out.stdout
    assert f"decay of {column}" in out.stdout
    assert "oracle (guard ceiling Sharpe" in out.stdout
