"""The feature families, by name. A family is any object with the contract of
:mod:`foxhunt.features` (``SLOTS``, ``NEEDS_BOOK``, ``CONFIG``, ``compute``): the five modules
below, a researcher's plug-in (:mod:`foxhunt.features.plugins`, joined by
:func:`~foxhunt.features.plugins.with_plugins`), or one a test builds (the leak-guard tests load
deliberately leaky ones).

A family in the RL state also declares how its slots behave under the long/short mirror (prices
``p -> K/p``, bid <-> ask, buyer <-> seller: every log return negated): ``MIRROR_ODD``, the slots
the mirror negates, and ``MIRROR_SWAPS``, the pairs it exchanges; every other slot is unchanged.
:data:`foxhunt.features.layout.STATE_MIRROR` composes them, and ``tests/features/test_mirror.py``
checks them against the features of a mirrored market.
"""

from __future__ import annotations

from types import ModuleType
from typing import Protocol, runtime_checkable

import numpy as np

from foxhunt.features import market, mtf, ofi, snapshot, tlob
from foxhunt.features.frame import RowInput


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
