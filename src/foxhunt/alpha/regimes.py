"""Regime-conditional scores: accuracy and AUC per quintile of a regime variable (spread, volatility).

Edges come from the TRAINING rows only (the validation rows are then cut by them), so a regime
table never uses information from the rows it scores.

* :func:`quintile_edges`: ``e = (Q(0.2), Q(0.4), Q(0.6), Q(0.8))`` of the finite training values,
  ``Q`` the linearly interpolated empirical quantile (numpy's default).
* :func:`assign`: quintile ``q(v) = #{i : e_i <= v}`` in ``0..4``, i.e. ``e_{q-1} <= v < e_q``; a
  value equal to an edge goes to the upper quintile.
* Ties: a variable with heavy ties (a spread of one tick most of the time) gives repeated edges;
  every copy of a tied value lands in ONE quintile (the one above the last edge equal to it), so
  some quintiles stay empty instead of splitting equal values at random. NaN values get quintile
  ``-1`` ("no regime") and are left out of :func:`regime_table`; ``+-inf`` go to 4 / 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from foxhunt.alpha.metrics import accuracy, auc

N_QUINTILES = 5
_LEVELS = np.array([0.2, 0.4, 0.6, 0.8])


def quintile_edges(values_train: np.ndarray) -> np.ndarray:
    """``[4]`` float64 edges: the 20/40/60/80% quantiles of the finite training values."""
    v = np.asarray(values_train, dtype=np.float64).reshape(-1)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        raise ValueError(
            "quintile_edges: no finite training values (the regime column is empty or all NaN/inf "
            "on this fold's training rows; drop the regime variable or widen the training window)"
        )
    return np.quantile(v, _LEVELS)


def assign(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``[n]`` int64 quintile in ``0..4``: the number of edges ``<= value`` (NaN -> -1)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    e = np.asarray(edges, dtype=np.float64).reshape(-1)
    if len(e) != N_QUINTILES - 1 or not np.isfinite(e).all() or (np.diff(e) < 0).any():
        raise ValueError(f"assign: edges must be 4 finite non-decreasing values, got {e.tolist()}")
    q = np.searchsorted(e, v, side="right").astype(np.int64)
    q[np.isnan(v)] = -1
    return q


def regime_table(y: np.ndarray, p: np.ndarray, quintile: np.ndarray) -> list[dict[str, Any]]:
    """Per quintile ``q`` = 0..4: ``{"quintile": q, "n": rows, "accuracy": ..., "auc": ...}``.

    ``accuracy`` is None for an empty quintile and ``auc`` None when the quintile lacks a class
    (AUC undefined); rows with quintile -1 are left out.
    """
    y = np.asarray(y)
    p = np.asarray(p, dtype=np.float64)
    quintile = np.asarray(quintile)
    if not (len(y) == len(p) == len(quintile)):
        raise ValueError(
            f"regime_table: y, p and quintile lengths differ ({len(y)}, {len(p)}, {len(quintile)})"
        )
    rows: list[dict[str, Any]] = []
    for q in range(N_QUINTILES):
        mask = quintile == q
        n = int(mask.sum())
        acc = accuracy(y[mask], p[mask]) if n > 0 else None
        a = auc(y[mask], p[mask]) if n > 0 else float("nan")
        rows.append({"quintile": q, "n": n, "accuracy": acc, "auc": None if np.isnan(a) else a})
    return rows
