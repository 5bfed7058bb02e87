"""Market data -> :class:`RowInput` for the configured row unit (the path every caller shares)."""

from __future__ import annotations

from foxhunt.data.bars import build_bars, build_snapshots
from foxhunt.data.config import DataConfig
from foxhunt.data.ingest import MarketData
from foxhunt.data.schemas import RowUnit
from foxhunt.features.frame import RowInput, from_bars, from_snapshots


def rows_from_market(md: MarketData, cfg: DataConfig, tick_size: float | None = None) -> RowInput:
    """Bars or snapshot rows of the continuous front-month series, as the families' input.

    ``tick_size``: the instrument's tick that spreads and book distances are counted in (the cache
    passes the data's own); None uses ``data.tick_size`` (hand-built markets in tests, the leak guard,
    whose check does not depend on the unit)."""
    tick = cfg.tick_size if tick_size is None else float(tick_size)
    if cfg.row_unit is RowUnit.BAR:
        return from_bars(build_bars(md, cfg), cfg.data_source, tick)
    return from_snapshots(build_snapshots(md, cfg), tick)
