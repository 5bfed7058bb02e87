"""Per-column statistics of a feature matrix, as ``foxhunt features build`` and ``features info``
report them: mean, std, min, max and coverage (the share of non-zero values; 0 = a column that
never carries anything)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def column_stats(x: np.ndarray, columns: Sequence[str]) -> list[dict[str, Any]]:
    """One dict per column of ``x`` [n, W] (named by ``columns``); an empty matrix reads 0 everywhere."""
    cov = (x != 0).mean(axis=0) if len(x) else np.zeros(x.shape[1])
    stats = []
    for j, name in enumerate(columns):
        col = x[:, j].astype(np.float64)
        stats.append(
            {
                "name": name,
                "mean": float(col.mean()) if len(col) else 0.0,
                "std": float(col.std()) if len(col) else 0.0,
                "min": float(col.min()) if len(col) else 0.0,
                "max": float(col.max()) if len(col) else 0.0,
                "coverage": float(cov[j]),
            }
        )
    return stats
