"""The triple barrier: the profit, stop and timeout that end an entry, for the labels and the env's plan.

An entry at price ``c`` on row ``t`` (side +1 long, -1 short), with the trailing per-row volatility
``vol[t]`` of :func:`foxhunt.data.returns.trailing_volatility` over ``vol_window`` rows::

    profit_price = c * (1 + side * profit_mult * vol[t])        (above the entry for a long)
    stop_price   = c * (1 - side * stop_mult * vol[t])          (below the entry for a long)

Rows ``t+1 .. t+horizon`` are checked in order against their ``high`` and ``low``
(:func:`barrier_touch`); the first touch ends the entry (:class:`~foxhunt.domain.exits.ExitReason`
PROFIT or STOP; a row touching both is a STOP, the conservative reading of an unknown path inside the
row) and with no touch it times out at ``t + horizon`` (TIMEOUT).

The labels (:mod:`foxhunt.validation.labels`) and the environment's plan exits (:mod:`foxhunt.env.core`)
are the same barrier with the same :class:`BarrierConfig` parameters, read from one config home,
``env.plan.barrier``: the aux outcome targets and the oracle read a label as what a plan opened on its
row would meet (docs/design.md §4 and §5).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba.extending import register_jitable
from pydantic import Field

from foxhunt.config.base import Frozen


class BarrierConfig(Frozen):
    """The triple barrier's parameters (``[env.plan.barrier]``), shared by the labels and the plan.

    The default multiples 8 ~ sqrt(60): one standard deviation of a random walk's move over the
    60-row horizon, which splits outcomes roughly evenly between profit, stop and timeout.
    """

    profit_mult: float = Field(
        8.0,
        gt=0.0,
        le=1_000.0,
        description="Profit level = entry x (1 + mult x per-row vol) for a long (mirrored for a short).",
    )
    stop_mult: float = Field(
        8.0,
        gt=0.0,
        le=1_000.0,
        description="Stop level = entry x (1 - mult x per-row vol) for a long (mirrored for a short).",
    )
    vol_window: int = Field(
        100,
        ge=2,
        le=100_000,
        description="Trailing rows of one-row log returns whose std (the per-row vol) scales the levels.",
    )
    horizon: int = Field(
        60,
        ge=1,
        le=100_000,
        description="Timeout in rows of data.row_unit: a plan (and a label's entry) lasts this many rows.",
    )


def barrier_prices(
    entry: Any, vol: Any, profit_mult: float, stop_mult: float, side: Any = 1
) -> tuple[Any, Any]:
    """Profit and stop prices of an entry: ``entry * (1 ± mult * vol)`` (side +1 long, -1 short).

    Long: profit above, stop below the entry; short: the mirror image. The one formula for the
    labels (numpy arrays or floats, float64) and the environment's plan exits (torch tensors, with
    ``side`` a tensor of +-1 per episode).
    """
    if isinstance(side, int) and side not in (1, -1):
        raise ValueError(f"side must be +1 (long) or -1 (short), got {side}")
    if not hasattr(entry, "device"):  # numpy or Python numbers (torch tensors pass through)
        entry = np.asarray(entry, dtype=np.float64)
        vol = np.asarray(vol, dtype=np.float64)
    return entry * (1.0 + side * profit_mult * vol), entry * (1.0 - side * stop_mult * vol)


@register_jitable
def barrier_touch(high: Any, low: Any, profit_px: Any, stop_px: Any, side: int) -> tuple[Any, Any]:
    """Whether a row with range ``[low, high]`` touches an entry's ``(profit, stop)`` levels.

    ``side`` is +1 (long: profit above, stop below) or -1 (short: the mirror image). The one test
    of a row against the barriers, for the label kernel (compiled, floats) and the env's plan exits
    (torch tensors, called once per side and selected by each episode's direction).
    """
    if side > 0:
        return high >= profit_px, low <= stop_px
    return low <= profit_px, high >= stop_px
