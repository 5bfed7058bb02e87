"""The input screen: which of a fold's feature columns carry the most information about the move the
agent trades, measured on the fold's own training rows (``agent.network.input_screen``).

A screen of the usual quantitative kind, the information coefficient (IC): per column ``j``

    IC_j = Spearman rank correlation( x[t, j],  mid[t + h] - mid[t] )    over training rows t

with ``x`` the fold-normalised feature, ``mid`` the bar's mid price and ``h`` the plan horizon
(``env.plan.barrier.horizon``, the move a plan holds). Only rows whose forward window ends inside the
screened rows and inside the same session count, so nothing after the training rows (the purge, the
validation block) is read: the screen is as causal as the scaler it sits beside. The network then
reads the ``keep`` columns of largest ``|IC|`` and sees 0 (the "no signal" sentinel) in the others.

Why: the agent learns from noisy plan returns in a short budget, and over ~140 columns it does not
isolate one strong carrier (the planted markets' direction gap correlates 0.1-0.7 with the carrier
after training); a linear screen on the same rows finds it at once. The screen chooses columns, not
weights: the network still learns what to do with them.

Ranks are average ranks (ties share their mean rank), so a column that is mostly the 0 sentinel
is not ordered by time among its ties.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats


def average_ranks(a: np.ndarray) -> np.ndarray:
    """Ranks 0 .. n-1 of ``a`` [n] (float64), ties given the mean of the ranks they span
    (``scipy.stats.rankdata``'s average method, from 0). ``average_ranks([3, 1, 3, 2])`` is
    ``[2.5, 0, 2.5, 1]``."""
    return stats.rankdata(a, method="average") - 1.0


def rank_ic(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman correlation of each column of ``x`` [n, F] with ``y`` [n]: [F] float64, 0 for a
    column (or a ``y``) that is constant over the rows (no ordering, no information)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"rank_ic: x must be [n, F] and y [n], got {x.shape} and {y.shape}")
    rx = stats.rankdata(x, method="average", axis=0)  # [n, F]
    ry = stats.rankdata(y, method="average")  # [n]
    rx -= rx.mean(axis=0)
    ry -= ry.mean()
    norm = np.sqrt((rx * rx).sum(axis=0)) * np.sqrt((ry * ry).sum())  # [F]
    ic = np.zeros(x.shape[1])
    ok = norm > 0.0
    ic[ok] = (rx[:, ok] * ry[:, None]).sum(axis=0) / norm[ok]
    return ic


def forward_moves(
    mid: np.ndarray, segment: np.ndarray, lo: int, hi: int, horizon: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, move)``: the rows ``t`` in ``[lo, hi)`` whose ``t + horizon`` is still before ``hi`` and
    in ``t``'s segment (session), and ``mid[t + horizon] - mid[t]`` at them. Reads ``mid`` and
    ``segment`` only on ``[lo, hi)``."""
    if horizon < 1:
        raise ValueError(f"forward_moves: horizon must be >= 1, got {horizon}")
    rows = np.arange(lo, max(hi - horizon, lo))
    rows = rows[segment[rows] == segment[rows + horizon]]
    move = mid[rows + horizon] - mid[rows]
    ok = np.isfinite(move)
    return rows[ok], move[ok]


@dataclass(frozen=True)
class Screen:
    """A fold's screen: every column's IC and the kept columns, strongest first."""

    columns: tuple[str, ...]
    ic: np.ndarray  # [F] float64
    kept: tuple[int, ...]  # indices into columns, by decreasing |IC|
    rows: int  # training rows the ICs were measured on

    def summary(self) -> dict[str, float]:
        """``{column: IC}`` of the kept columns, strongest first (folds.json, the report)."""
        return {self.columns[j]: round(float(self.ic[j]), 4) for j in self.kept}


def screen_columns(
    features: np.ndarray,
    columns: tuple[str, ...],
    mid: np.ndarray,
    segment: np.ndarray,
    lo: int,
    hi: int,
    horizon: int,
    keep: int,
) -> Screen:
    """Screen ``features`` [N, F] (fold-normalised) on rows ``[lo, hi)``: the ``keep`` columns of
    largest ``|IC|`` against the ``horizon``-row forward move of ``mid`` (module docstring). Ties in
    ``|IC|`` go to the earlier column. Raises ValueError when no row has a whole forward window."""
    if features.shape[1] != len(columns):
        raise ValueError(f"screen_columns: {features.shape[1]} feature columns, {len(columns)} names")
    if keep < 1:
        raise ValueError(f"screen_columns: keep must be >= 1, got {keep}")
    rows, move = forward_moves(mid, segment, lo, hi, horizon)
    if len(rows) < 2:
        raise ValueError(
            f"screen_columns: {len(rows)} rows of [{lo}, {hi}) have a whole {horizon}-row forward window "
            "in their session; the screen needs at least 2"
        )
    ic = rank_ic(features[rows], move)
    order = np.argsort(-np.abs(ic), kind="stable")
    return Screen(tuple(columns), ic, tuple(int(j) for j in order[:keep]), len(rows))


def fold_screen(market: Any, lo: int, hi: int, horizon: int, keep: int) -> Screen:
    """The input screen of a fold's market (:class:`~foxhunt.env.market.MarketTensors`) on its
    training (collection) rows ``[lo, hi)`` only: the one call of training and of the leak guard,
    which replaces every other row and demands the same screen (docs/design.md §4)."""
    rows = slice(lo, hi)  # only these reach the host
    return screen_columns(
        market.features[rows].cpu().numpy(),
        tuple(market.feature_columns),
        market.mid[rows].cpu().numpy(),
        market.segment[rows].cpu().numpy(),
        0,
        hi - lo,
        horizon,
        keep,
    )
