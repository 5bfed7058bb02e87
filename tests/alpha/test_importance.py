"""Feature-group importance: column grouping, group permutation, gain aggregation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from foxhunt.alpha.importance import gain_by_group, group_slices, permutation_importance

COLUMNS = ["a.x", "b.y", "a.z", "c", "b.w"]


def test_group_slices_in_order_of_first_appearance():
    groups = group_slices(COLUMNS)
    assert list(groups) == ["a", "b", "c"]
    assert {g: v.tolist() for g, v in groups.items()} == {"a": [0, 2], "b": [1, 4], "c": [3]}
    assert all(v.dtype == np.int64 for v in groups.values())


def _logistic_on_a(x: np.ndarray) -> np.ndarray:
    """A hand-built model reading only group "a" (columns 0 and 1): sigmoid(2 (x0 + x1))."""
    return 1.0 / (1.0 + np.exp(-2.0 * (x[:, 0] + x[:, 1])))


def _data(n: int = 4000) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4))
    y = (rng.random(n) < _logistic_on_a(x)).astype(int)  # y depends on group "a" only
    return x, y, group_slices(["a.0", "a.1", "b.0", "b.1"])


def test_model_using_only_group_a():
    x, y, groups = _data()
    imp = permutation_importance(_logistic_on_a, x, y, groups, n_repeats=3, seed=0)
    assert imp["b"] == 0.0  # the model never reads b: permuting it changes no forecast
    assert imp["a"] > 0.2  # AUC ~0.8 falls to ~0.5


def test_group_columns_are_permuted_together_and_others_untouched():
    x, y, groups = _data(500)
    seen: list[np.ndarray] = []

    def spy(xx: np.ndarray) -> np.ndarray:
        seen.append(xx.copy())
        return _logistic_on_a(xx)

    permutation_importance(spy, x, y, {"a": groups["a"]}, n_repeats=2, seed=1)
    assert len(seen) == 3  # baseline + 2 repeats
    np.testing.assert_array_equal(seen[0], x)
    where = {v: i for i, v in enumerate(x[:, 0])}
    for xp in seen[1:]:
        perm = np.array([where[v] for v in xp[:, 0]])
        assert sorted(perm.tolist()) == list(range(len(x))) and (perm != np.arange(len(x))).any()
        np.testing.assert_array_equal(xp[:, 1], x[perm, 1])  # the same permutation for a.1
        np.testing.assert_array_equal(xp[:, 2:], x[:, 2:])  # group b untouched


def test_permutation_importance_is_deterministic_and_leaves_x_alone():
    x, y, groups = _data(1000)
    x0 = x.copy()
    a = permutation_importance(_logistic_on_a, x, y, groups, n_repeats=2, seed=5)
    assert a == permutation_importance(_logistic_on_a, x, y, groups, n_repeats=2, seed=5)
    np.testing.assert_array_equal(x, x0)
    # a group's value does not depend on which other groups are scored
    assert (
        permutation_importance(_logistic_on_a, x, y, {"a": groups["a"]}, n_repeats=2, seed=5)["a"] == a["a"]
    )


def test_permutation_importance_nan_without_both_classes():
    x, _, groups = _data(100)
    imp = permutation_importance(_logistic_on_a, x, np.ones(100, dtype=int), groups)
    assert all(math.isnan(v) for v in imp.values())


def test_gain_by_group_hand_worked():
    out = gain_by_group(np.array([1.0, 2.0, 3.0, 4.0, 0.0]), COLUMNS)
    assert out["gain"] == {"a": 4.0, "b": 2.0, "c": 4.0}  # a = 1 + 3, b = 2 + 0, c = 4
    assert out["share"] == pytest.approx({"a": 0.4, "b": 0.2, "c": 0.4})
    zero = gain_by_group(np.zeros(5), COLUMNS)
    assert zero["share"] == {"a": 0.0, "b": 0.0, "c": 0.0}
    with pytest.raises(ValueError, match="4 gains for 5 columns"):
        gain_by_group(np.ones(4), COLUMNS)
