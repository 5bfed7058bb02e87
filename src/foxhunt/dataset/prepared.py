"""What the leak guard read and computed, handed to the cache build so the files are read once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foxhunt.data.ingest import MarketData
from foxhunt.features.frame import RowInput
from foxhunt.features.stack import FeatureMatrix


@dataclass(frozen=True)
class Prepared:
    """What the guard read and computed on the unperturbed data, in the data's own tick: the feature
    cache is built from exactly these (:func:`foxhunt.dataset.build.get_or_build`'s ``prepared``), so a
    command that guards and then builds reads the files and computes the rows and features once."""

    files: tuple[Path, ...]
    market: MarketData
    rows: RowInput
    features: FeatureMatrix
    tick_size: float
    settings: dict[str, Any]  # the cfg's cache-relevant values (foxhunt.dataset.cache.value_config)
