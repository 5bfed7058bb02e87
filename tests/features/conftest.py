"""Small synthetic markets as feature input, shared by the feature-family tests."""

from __future__ import annotations

import pytest

from foxhunt.data.config import DataConfig, SynthConfig
from foxhunt.data.schemas import RowUnit
from foxhunt.data.synth_market import synthetic_market
from foxhunt.features.frame import RowInput
from foxhunt.features.pipeline import rows_from_market


def synthetic_rows(
    row_unit: RowUnit,
    *,
    events: int = 40_000,
    sessions: int = 2,
    alpha: float = 0.5,
    seed: int = 5,
    bar_seconds: int = 30,
) -> RowInput:
    md = synthetic_market(SynthConfig(seed=seed, sessions=sessions, events_per_session=events, alpha=alpha))
    return rows_from_market(md, DataConfig(row_unit=row_unit, bar_seconds=bar_seconds))


@pytest.fixture(scope="session")
def bar_rows() -> RowInput:
    """~2 sessions of 30 s bars (about 5,500 rows) from the synthetic market."""
    return synthetic_rows(RowUnit.BAR)


@pytest.fixture(scope="session")
def snapshot_rows() -> RowInput:
    """~2 sessions x 40,000 book states from the synthetic market."""
    return synthetic_rows(RowUnit.SNAPSHOT)
