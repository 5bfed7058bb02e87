"""Market data -> :class:`RowInput` for the configured row unit (the path every caller shares)."""

from __future__ import annotations

from foxhunt.config.data import DataConfig
from foxhunt.data.bars import build_bars, build_snapshots
from foxhunt.data.ingest import MarketData
from foxhunt.data.schemas import RowUnit
from foxhunt.features.frame import RowInput, from_bars, from_snapshots


def rows_from_market(md: MarketData, cfg: DataConfig) -> RowInput:
    """Bars or snapshot rows of the continuous front-month series, as the families' input."""
    if cfg.row_unit is RowUnit.BAR:
        return from_bars(build_bars(md, cfg), cfg.data_source, cfg.tick_size)
    return from_snapshots(build_snapshots(md, cfg), cfg.tick_size)
