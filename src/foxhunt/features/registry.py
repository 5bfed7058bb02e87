"""The feature families, by name. A family is any object with the contract of
:mod:`foxhunt.features` (``SLOTS``, ``NEEDS_BOOK``, ``Params``, ``compute``): the five modules
below, a researcher's plug-in (:mod:`foxhunt.features.plugins`, joined by :func:`with_plugins`),
or one a test builds (the leak-guard tests load deliberately leaky ones).

A family in the RL state also declares how its slots behave under the long/short mirror (prices
``p -> K/p``, bid <-> ask, buyer <-> seller: every log return negated): ``MIRROR_ODD``, the slots
the mirror negates, and ``MIRROR_SWAPS``, the pairs it exchanges; every other slot is unchanged.
:data:`foxhunt.features.layout.STATE_MIRROR` composes them, and ``tests/features/test_mirror.py``
checks them against the features of a mirrored market.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from foxhunt.features import market, mtf, ofi, snapshot, tlob
from foxhunt.features.frame import RowInput

if TYPE_CHECKING:
    from foxhunt.features.plugins import Plugin


@runtime_checkable
class Family(Protocol):
    SLOTS: tuple[str, ...]
    NEEDS_BOOK: bool

    def compute(self, inp: RowInput, params: object) -> np.ndarray: ...


FAMILIES: dict[str, ModuleType] = {
    "market": market,
    "ofi": ofi,
    "tlob": tlob,
    "mtf": mtf,
    "snapshot": snapshot,
}


def with_plugins(plugins: Mapping[str, Plugin]) -> dict[str, Family]:
    """The built-in families and the loaded plug-ins, by name."""
    return {**FAMILIES, **{name: p.family for name, p in plugins.items()}}
