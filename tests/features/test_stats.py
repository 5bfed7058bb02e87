"""Per-column statistics of a feature matrix (features build / features info)."""

import numpy as np
import pytest

from foxhunt.features.stats import column_stats


def test_column_stats_known_answer() -> None:
    x = np.array([[0.0, 1.0], [2.0, 0.0], [4.0, 0.0], [0.0, 0.0]], dtype=np.float32)
    a, b = column_stats(x, ["a", "b"])
    assert a == {"name": "a", "mean": 1.5, "std": pytest.approx(np.std([0, 2, 4, 0])), "min": 0.0,
                 "max": 4.0, "coverage": 0.5}  # fmt: skip
    assert b["coverage"] == 0.25 and b["mean"] == 0.25 and b["max"] == 1.0


def test_column_stats_of_no_rows_are_zero() -> None:
    stats = column_stats(np.zeros((0, 3), dtype=np.float32), ["a", "b", "c"])
    assert [s["name"] for s in stats] == ["a", "b", "c"]
    assert all(s[k] == 0.0 for s in stats for k in ("mean", "std", "min", "max", "coverage"))
