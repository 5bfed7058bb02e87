"""Validation equity in time order, for the report: from a backtest's per-step record (``[E, T]``
episodes x steps over consecutive windows) to one cumulative net PnL per row, against the rows'
timestamps. Pure numpy; the trainer calls it with the record's arrays.

The windows of :func:`foxhunt.backtest.evaluate.windows` tile the validation rows: window ``e``
starts at row ``starts[e]`` and its step ``t`` moves from row ``starts[e] + t`` to
``starts[e] + t + 1``, where that step's PnL is marked. Consecutive windows share one row (the last
of one is the first of the next) but no step, so every row after the first is marked by at most one
step of one window: the sum per row is that step's net PnL, in time order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from foxhunt.report.schema import EQUITY_TIME_KEY

MAX_POINTS = 500
"""Points kept per curve in ``metrics.json`` (enough for a plot); the last point is always kept."""


def net_by_row(
    net_ET: np.ndarray, written_ET: np.ndarray, starts_E: np.ndarray, lo: int, hi: int
) -> np.ndarray:
    """Net PnL marked at each row ``lo + 1 .. hi - 1`` (length ``hi - lo - 1``): the written steps'
    net PnL placed at the row each step ends on, rows no step ends on holding 0."""
    n_rows = hi - lo - 1
    out = np.zeros(max(n_rows, 0), dtype=np.float64)
    steps = net_ET.shape[1]
    end_row_ET = np.asarray(starts_E, dtype=np.int64)[:, None] + np.arange(1, steps + 1)[None, :]
    mask = np.asarray(written_ET, dtype=bool)
    idx = end_row_ET[mask] - (lo + 1)
    if idx.size and (idx.min() < 0 or idx.max() >= n_rows):
        raise ValueError(f"a written step ends outside the rows [{lo + 1}, {hi - 1}] it was evaluated on")
    np.add.at(out, idx, np.asarray(net_ET, dtype=np.float64)[mask])
    return out


def thin(n: int, max_points: int = MAX_POINTS) -> np.ndarray:
    """Indices ``0 .. n-1`` at a stride keeping about ``max_points`` of them, the last one included."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    stride = max(1, math.ceil(n / max_points))
    idx = np.arange(0, n, stride, dtype=np.int64)
    return idx if idx[-1] == n - 1 else np.append(idx, n - 1)


def iso_ms(ts_ns: np.ndarray) -> list[str]:
    """ISO-8601 UTC text of ns timestamps, to the millisecond, with a ``Z``."""
    return [f"{s}Z" for s in np.datetime_as_string(np.asarray(ts_ns, dtype="datetime64[ns]"), unit="ms")]


def equity_series(net_by_row_of: Mapping[str, np.ndarray], ts_ns: np.ndarray, lo: int) -> dict[str, list]:
    """``{"time": [...], policy: [cumulative net PnL], ...}``, thinned to :data:`MAX_POINTS`: each
    policy's :func:`net_by_row` (all over the same rows ``lo + 1 ..``) summed in time order, against
    the timestamps ``ts_ns`` of the whole cache (indexed by row)."""
    lengths = {len(v) for v in net_by_row_of.values()}
    if len(lengths) != 1:
        raise ValueError(f"equity curves over different row counts {sorted(lengths)}")
    n = lengths.pop()
    idx = thin(n)
    out: dict[str, list] = {EQUITY_TIME_KEY: iso_ms(np.asarray(ts_ns)[lo + 1 + idx])}
    for name, net in net_by_row_of.items():
        out[name] = [float(x) for x in np.cumsum(net)[idx]]
    return out
