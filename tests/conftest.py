"""Shared fixtures. Real-data tests read ../shared/data/real (override: FOXHUNT_REAL_DATA)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def real_data_root() -> Path:
    return Path(os.environ.get("FOXHUNT_REAL_DATA", REPO / ".." / "shared" / "data" / "real")).resolve()


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    """The read-only real-data folder; tests using it skip when it is absent."""
    root = real_data_root()
    if not root.is_dir():
        pytest.skip(f"real data folder {root} is absent (set FOXHUNT_REAL_DATA to point at it)")
    return root
