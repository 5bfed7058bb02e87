"""Regime quintiles: hand-worked edges, assignment, ties, train-only edges, per-quintile scores."""

from __future__ import annotations

import numpy as np
import pytest

from foxhunt.alpha.regimes import assign, quintile_edges, regime_table


def test_edges_hand_worked():
    # values 1..10: Q(a) sits at position 9a in the sorted values -> 1.8, 3.6, 5.4, 7.2 -> +1
    edges = quintile_edges(np.arange(1, 11, dtype=float))
    np.testing.assert_allclose(edges, [2.8, 4.6, 6.4, 8.2])
    # non-finite training values are ignored
    with_junk = np.r_[np.arange(1, 11, dtype=float), np.nan, np.inf, -np.inf]
    np.testing.assert_allclose(quintile_edges(with_junk), [2.8, 4.6, 6.4, 8.2])


def test_assign_hand_worked():
    edges = np.array([2.8, 4.6, 6.4, 8.2])
    values = np.array([1.0, 2.8, 3.0, 4.6, 5.0, 7.0, 8.2, 100.0, -np.inf, np.inf, np.nan])
    # an edge value goes to the upper quintile; NaN -> -1
    assert assign(values, edges).tolist() == [0, 1, 1, 2, 2, 3, 4, 4, 0, 4, -1]


def test_ties_keep_equal_values_in_one_quintile():
    # seven 1s then 2, 3, 4: positions 1.8, 3.6, 5.4 are all 1; position 7.2 is 2 + 0.2 * (3 - 2)
    train = np.array([1.0] * 7 + [2.0, 3.0, 4.0])
    edges = quintile_edges(train)
    np.testing.assert_allclose(edges, [1.0, 1.0, 1.0, 2.2])
    assert assign(train, edges).tolist() == [3] * 7 + [3, 4, 4]  # quintiles 0-2 stay empty


def test_edges_come_from_training_rows_only():
    rng = np.random.default_rng(0)
    train = rng.normal(size=1000)
    edges = quintile_edges(train)
    # validation drifts far above the training range: every row is in the top quintile, which it
    # would not be if the edges had been cut from the validation values
    val = rng.normal(size=500) + 10.0
    assert (assign(val, edges) == 4).all()
    assert np.array_equal(quintile_edges(train), edges)  # the validation values never enter


def test_errors():
    with pytest.raises(ValueError, match="no finite training values"):
        quintile_edges(np.array([np.nan, np.inf]))
    with pytest.raises(ValueError, match="4 finite non-decreasing"):
        assign(np.array([1.0]), np.array([3.0, 2.0, 1.0, 0.0]))


def test_regime_table_hand_worked():
    y = np.array([1, 0, 1, 0, 1, 1, 0, 1, 0, 1, 1])
    p = np.array([0.8, 0.3, 0.4, 0.6, 0.7, 0.9, 0.2, 0.6, 0.7, 0.3, 0.9])
    q = np.array([0, 0, 0, 0, 1, 1, 3, 3, 3, 4, -1])
    rows = regime_table(y, p, q)
    assert [r["quintile"] for r in rows] == [0, 1, 2, 3, 4]
    assert [r["n"] for r in rows] == [4, 2, 0, 3, 1]  # quintile -1 left out
    # q0: calls 1,0,0,1 vs 1,0,1,0 -> 2/4; pairs pos {.8,.4} neg {.3,.6}: 1 + 1 + 1 + 0 -> 3/4
    assert rows[0]["accuracy"] == 0.5 and rows[0]["auc"] == 0.75
    # q1: only up moves: AUC undefined
    assert rows[1]["accuracy"] == 1.0 and rows[1]["auc"] is None
    # q2: empty
    assert rows[2]["accuracy"] is None and rows[2]["auc"] is None
    # q3: calls 0,1,1 vs 0,1,0 -> 2/3; pos {.6} neg {.2,.7} -> 1/2
    assert rows[3]["accuracy"] == pytest.approx(2 / 3) and rows[3]["auc"] == 0.5
    assert rows[4] == {"quintile": 4, "n": 1, "accuracy": 0.0, "auc": None}
