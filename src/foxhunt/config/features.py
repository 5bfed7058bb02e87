"""The ``[features]`` config section.

Each feature family owns its parameters (``foxhunt.features.<family>.Params``); this section is
their composition, so ``--set features.market.<field>=...`` reaches the family directly. (The
``[labels]`` and ``[folds]`` sections are ``foxhunt.validation.labels.LabelParams`` and
``foxhunt.validation.folds.FoldParams``.)
"""

from __future__ import annotations

from pydantic import Field

from foxhunt.config.base import Frozen
from foxhunt.features.market import Params as MarketParams
from foxhunt.features.mtf import Params as MtfParams
from foxhunt.features.ofi import Params as OfiParams
from foxhunt.features.snapshot import Params as SnapshotParams
from foxhunt.features.tlob import Params as TlobParams


class FeaturesConfig(Frozen):
    market: MarketParams = Field(default_factory=MarketParams, description="market family (42 slots).")
    ofi: OfiParams = Field(default_factory=OfiParams, description="order-flow family (32 slots).")
    tlob: TlobParams = Field(default_factory=TlobParams, description="book-shape family (16 slots).")
    mtf: MtfParams = Field(default_factory=MtfParams, description="slower-timeframe family (16 slots).")
    snapshot: SnapshotParams = Field(
        default_factory=SnapshotParams, description="snapshot-only extras (6 slots)."
    )
