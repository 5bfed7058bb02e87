"""Example feature plug-in ``arrival``: how fast trades arrive, and from which side.

Load it with ``--set 'features.plugins=["examples/plugins/trade_arrival.py"]'`` (or put the folder
on ``PYTHONPATH`` and name the module ``trade_arrival``); tune it with
``--set features.plugin_params.arrival.fast_span=20``. The interface is described in
docs/feature-plugins.md.

Trade arrival rate is a standard microstructure state variable: bursts of trades come with
information arriving and with wider short-horizon volatility, and the side those trades hit tells
who is in a hurry. Every statistic is a forward recursion over rows, restarted at each segment
(session or contract) start, so row t uses rows at or before t only.

=====  =================  ========================================================================
slot   name               formula (per segment; 0 at its first row and where nothing is known)
=====  =================  ========================================================================
0      log_rate_fast      log(1 + C_f / D_f): C, D = EMAs (span fast_span rows) of the row's trade
                          count and of its duration ts_t - ts_{t-1} in s (D floored at 1 us), so
                          C / D is trades per second
1      log_rate_slow      the same with span slow_span
2      burst              log((1 + C_f / D_f) / (1 + C_s / D_s)): arrivals now against their usual
                          pace (> 0 in a burst)
3      buy_share          EMA (span fast_span) of (buy - sell) / (buy + sell) aggressor volume
                          of the row (0 where the aggressor split is unknown or no volume traded)
=====  =================  ========================================================================

Long/short mirror: the rates do not depend on the price direction (even); the aggressor imbalance
changes sign when buyers and sellers swap (odd).
"""

from __future__ import annotations

import numba
import numpy as np
from pydantic import Field

from foxhunt.config.base import Frozen

NAME = "arrival"
SLOTS: tuple[str, ...] = ("log_rate_fast", "log_rate_slow", "burst", "buy_share")
NEEDS_BOOK = False  # trades only: defined for OHLCV data too (there without the aggressor split)
MIRROR_ODD = frozenset({"buy_share"})
MIRROR_SWAPS: tuple[tuple[str, str], ...] = ()

_MIN_DURATION_S = 1e-6  # two book states can share a nanosecond: never divide by 0


class ArrivalConfig(Frozen):
    """Spans of the ``arrival`` family, in rows (frozen, unknown keys refused, like foxhunt's own)."""

    fast_span: int = Field(10, ge=1, le=100_000, description="Rows in the fast EMAs.")
    slow_span: int = Field(100, ge=1, le=100_000, description="Rows in the slow EMAs.")


CONFIG = ArrivalConfig  # the settings class foxhunt reads (features.plugin_params.arrival)


@numba.njit(cache=False)
def _arrival(ts, count, signed, has_split, segment_start, a_fast, a_slow):
    """[n, 4] the slots above; ``a_*`` = 2 / (span + 1), the EMA weights."""
    n = ts.shape[0]
    out = np.zeros((n, 4))
    c_f = c_s = d_f = d_s = imb = 0.0
    started = False
    for t in range(n):
        if segment_start[t] or t == 0:
            started = False  # no duration at a segment's first row: nothing to measure yet
            continue
        duration = max((ts[t] - ts[t - 1]) * 1e-9, _MIN_DURATION_S)
        if not started:
            c_f = c_s = count[t]
            d_f = d_s = duration
            imb = signed[t] if has_split[t] else 0.0
            started = True
        else:
            c_f += a_fast * (count[t] - c_f)
            c_s += a_slow * (count[t] - c_s)
            d_f += a_fast * (duration - d_f)
            d_s += a_slow * (duration - d_s)
            if has_split[t]:
                imb += a_fast * (signed[t] - imb)
        rate_f = c_f / max(d_f, _MIN_DURATION_S)
        rate_s = c_s / max(d_s, _MIN_DURATION_S)
        out[t, 0] = np.log1p(rate_f)
        out[t, 1] = np.log1p(rate_s)
        out[t, 2] = np.log1p(rate_f) - np.log1p(rate_s)
        out[t, 3] = imb
    return out


def compute(inp, params: ArrivalConfig) -> np.ndarray:
    """float32 [n, 4] from the rows' trade counts, times and aggressor volumes."""
    buy, sell = inp.buy_volume, inp.sell_volume
    total = buy + sell
    has_split = inp.flow_mask & (total > 0)
    signed = np.where(has_split, (buy - sell) / np.where(total > 0, total, 1.0), 0.0)
    count = np.where(inp.flow_mask, np.nan_to_num(inp.trade_count), 0.0)
    out = _arrival(
        inp.ts.astype(np.int64),
        count.astype(np.float64),
        signed.astype(np.float64),
        has_split,
        inp.segment_start.astype(np.bool_),
        2.0 / (params.fast_span + 1),
        2.0 / (params.slow_span + 1),
    )
    return out.astype(np.float32)
