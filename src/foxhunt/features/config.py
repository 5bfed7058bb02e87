"""The feature stage's config section, ``[features]``: the composition of the feature families.

Each feature family, built-in or plug-in, declares its parameters in its own module (a class
``<Family>Config``, named by the module's ``CONFIG``): that is the plug-in contract
(docs/feature-plugins.md), so a family is one module with its columns, its settings and its
computation. This section composes the built-in families, so ``--set features.market.<field>=...``
reaches the family directly; it lives beside the stage's code, as every stage's section does
(docs/design.md §9).

A researcher's own families join through ``plugins`` (module paths, ``.py`` files or names of
``foxhunt.features`` entry points; docs/feature-plugins.md) with their settings under
``plugin_params.<family name>``, validated by the plug-in's own ``CONFIG`` class when it is loaded
(:mod:`foxhunt.features.plugins`). Both fields are part of the cache key like every other field.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from foxhunt.config.base import Frozen
from foxhunt.features import market, mtf, ofi, snapshot, tlob
from foxhunt.features.market import MarketConfig
from foxhunt.features.mtf import MtfConfig
from foxhunt.features.ofi import OfiConfig
from foxhunt.features.snapshot import SnapshotConfig
from foxhunt.features.tlob import TlobConfig


def _about(what: str, slots: tuple[str, ...]) -> str:
    """A family field's description, its width from the family's slot names (no literal width)."""
    return f"{what} ({len(slots)} slots)."


class FeaturesConfig(Frozen):
    market: MarketConfig = Field(
        default_factory=MarketConfig, description=_about("market family", market.SLOTS)
    )
    ofi: OfiConfig = Field(default_factory=OfiConfig, description=_about("order-flow family", ofi.SLOTS))
    tlob: TlobConfig = Field(default_factory=TlobConfig, description=_about("book-shape family", tlob.SLOTS))
    mtf: MtfConfig = Field(
        default_factory=MtfConfig, description=_about("slower-timeframe family", mtf.SLOTS)
    )
    snapshot: SnapshotConfig = Field(
        default_factory=SnapshotConfig, description=_about("snapshot-only extras", snapshot.SLOTS)
    )
    plugins: tuple[str, ...] = Field(
        (),
        description="User feature families: module paths (mypkg.myfamily), .py files or names of "
        "foxhunt.features entry points; their columns follow the built-in ones (docs/feature-plugins.md).",
    )
    plugin_params: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Settings of each plug-in family by its NAME, checked by the plug-in's CONFIG class.",
    )
