"""Robust normalisation: hand-worked statistics, training rows only, clip, sentinel, round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest

from foxhunt.validation.normalise import (
    NORMALISE_METHOD,
    RobustScaler,
    apply,
    fit_robust,
    robust_stats,
)

COLS = ("a", "b", "c", "d", "e")
# training rows 0..4; rows 5..7 are validation with wild values that must not matter
X = np.array(
    [
        # a: MAD   b: zeros  c: MAD=0  d: const  e: all zero
        [1.0, 0.0, 1.0, 3.0, 0.0],
        [2.0, 0.0, 1.0, 3.0, 0.0],
        [3.0, 2.0, 1.0, 0.0, 0.0],
        [4.0, 4.0, 2.0, 3.0, 0.0],
        [100.0, 6.0, 5.0, 3.0, 0.0],
        [1e6, -7.0, 9.0, 8.0, 4.0],
        [-1e6, 1e3, 0.5, -3.0, -2.0],
        [7.0, 0.0, 0.0, 0.0, 1.0],
    ],
    dtype=np.float32,
)
TRAIN = np.arange(5)


def test_fit_hand_worked():
    s = fit_robust(X, TRAIN, COLS)
    # a: median 3, |dev| = 2 1 0 1 97 -> MAD 1 -> scale 1.4826
    # b: non-zero 2 4 6 -> median 4, |dev| = 2 0 2 -> MAD 2 -> scale 2.9652 (the zeros are sentinels)
    # c: median 1, |dev| = 0 0 0 1 4 -> MAD 0 -> 1.253314 * mean |dev| = 1.253314 * 1
    # d: non-zero values all 3 -> median 0, scale 3 (3 -> 1, kept apart from the sentinel)
    # e: no non-zero value -> identity
    np.testing.assert_array_equal(s.median, np.float32([3, 4, 1, 0, 0]))
    np.testing.assert_array_equal(s.scale, np.float32([1.4826, 2.9652, 1.253314, 3, 1]))
    assert s.median.dtype == np.float32 and s.scale.dtype == np.float32
    assert s.columns == COLS and s.clip == 5.0


def test_robust_stats_single_column_cases():
    assert robust_stats(np.array([np.nan, 0.0, 0.0])) == (0.0, 1.0)
    assert robust_stats(np.array([-2.0, -2.0, 0.0])) == (0.0, 2.0)  # -2 -> -1
    assert robust_stats(np.array([1.0, 2.0, np.inf, 3.0])) == (2.0, 1.4826)  # inf skipped


def test_the_library_mad_gives_the_hand_formula_bit_for_bit():
    """scipy's median_abs_deviation replaced ``median(|v - median(v)|)`` written out: the scaler (it
    feeds training and the cache key) must not move by a bit, on odd and even counts, ties, heavy
    tails and float32 input."""
    rng = np.random.default_rng(11)
    columns = [
        rng.standard_t(2, 10_001),
        rng.standard_t(2, 10_000).astype(np.float32),
        np.round(rng.normal(size=5_000), 1),  # many ties
        rng.lognormal(3, 2, 777),
        np.repeat([1.0, 2.0, 2.0, 5.0], 250),
    ]
    for v in columns:
        w = np.asarray(v, dtype=np.float64)
        w = w[np.isfinite(w) & (w != 0)]
        med = float(np.median(w))
        hand = 1.4826 * float(np.median(np.abs(w - med)))
        assert robust_stats(v) == (med, hand)
    x = np.stack([np.resize(np.asarray(c, dtype=np.float32), 5_000) for c in columns], axis=1)
    s = fit_robust(x, np.arange(4_000), [f"c{j}" for j in range(len(columns))])
    assert s.median.tobytes() == np.float32([robust_stats(x[:4_000, j])[0] for j in range(5)]).tobytes()


def test_statistics_come_from_training_rows_only():
    s = fit_robust(X, TRAIN, COLS)
    x2 = X.copy()
    x2[5:] = np.random.default_rng(0).normal(0, 1e4, (3, 5)).astype(np.float32)
    s2 = fit_robust(x2, TRAIN, COLS)
    np.testing.assert_array_equal(s.median, s2.median)
    np.testing.assert_array_equal(s.scale, s2.scale)
    x3 = X.copy()
    x3[0, 0] = 50.0  # a training row does change it: a = 2 3 4 50 100 -> median 4
    assert fit_robust(x3, TRAIN, COLS).median[0] == 4.0


def test_boolean_mask_equals_indices():
    mask = np.zeros(len(X), bool)
    mask[TRAIN] = True
    a, b = fit_robust(X, mask, COLS), fit_robust(X, TRAIN, COLS)
    np.testing.assert_array_equal(a.median, b.median)
    np.testing.assert_array_equal(a.scale, b.scale)


def test_apply_hand_worked_clip_and_sentinel():
    s = fit_robust(X, TRAIN, COLS, clip=5.0)
    x = np.array(
        [
            [3.0 + 1.4826, 4.0 + 2 * 2.9652, 1.0, 3.0, 0.5],  # 1, 2, 0 (the median), 1, 0.5
            [1e6, -1e6, np.inf, -3.0, -np.inf],  # clipped: 5, -5, 5; d: -1; -5
            [0.0, 0.0, 0.0, 0.0, 0.0],  # the sentinel stays exactly 0 whatever the median
            [np.nan, 4.0, -np.nan, 6.0, 7.0],  # NaN = no signal -> 0; d: 2; e: 5 (clipped 7)
        ],
        dtype=np.float64,
    )
    out = apply(s, x)
    want = np.float32([[1, 2, 0, 1, 0.5], [5, -5, 5, -1, -5], [0, 0, 0, 0, 0], [0, 0, 0, 2, 5]])
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    assert out.dtype == np.float32 and np.isfinite(out).all()
    assert (out[2] == 0).all() and not np.signbit(out[2]).any()


def test_apply_bounds_and_finiteness_on_random_data():
    rng = np.random.default_rng(1)
    x = (rng.standard_cauchy((2000, 4)) * 10).astype(np.float32)
    x[rng.random(x.shape) < 0.2] = 0.0
    s = fit_robust(x, np.arange(1000), ("w", "x", "y", "z"), clip=3.0)
    out = apply(s, x)
    assert np.abs(out).max() <= 3.0 and np.isfinite(out).all()
    np.testing.assert_array_equal(out == 0, (x == 0) | (x == s.median))  # zeros exactly where raw 0
    # one function, any row set: normalising a slice gives the same rows as normalising it all
    np.testing.assert_array_equal(apply(s, x[1500:]), out[1500:])
    np.testing.assert_array_equal(apply(s, x[7]), out[7])


def test_round_trip_through_json():
    s = fit_robust(X, TRAIN, COLS, clip=4.5)
    d = json.loads(json.dumps(s.to_dict()))
    assert d["method"] == NORMALISE_METHOD
    r = RobustScaler.from_dict(d)
    np.testing.assert_array_equal(r.median, s.median)
    np.testing.assert_array_equal(r.scale, s.scale)
    assert r.columns == COLS and r.clip == 4.5
    np.testing.assert_array_equal(apply(r, X), apply(s, X))


def test_from_dict_refuses_another_method():
    d = fit_robust(X, TRAIN, COLS).to_dict() | {"method": "zscore-v0"}
    with pytest.raises(ValueError, match="refit the scaler"):
        RobustScaler.from_dict(d)


def test_scaler_is_immutable_and_validated():
    s = fit_robust(X, TRAIN, COLS)
    with pytest.raises(ValueError, match="read-only"):
        s.median[0] = 1.0
    with pytest.raises(ValueError, match="must match"):
        RobustScaler(median=np.zeros(2), scale=np.ones(3), clip=5.0, columns=("a", "b"))
    with pytest.raises(ValueError, match="> 0"):
        RobustScaler(median=np.zeros(1), scale=np.zeros(1), clip=5.0, columns=("a",))
    with pytest.raises(ValueError, match="clip"):
        RobustScaler(median=np.zeros(1), scale=np.ones(1), clip=0.0, columns=("a",))


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="columns"):
        fit_robust(X, TRAIN, COLS[:3])
    with pytest.raises(ValueError, match="lie in"):
        fit_robust(X, np.array([0, 8]), COLS)
    with pytest.raises(ValueError, match="non-empty"):
        fit_robust(X, np.array([], np.int64), COLS)
    with pytest.raises(ValueError, match="integer indices or a boolean mask"):
        fit_robust(X, np.array([0.0, 1.0]), COLS)
    with pytest.raises(ValueError, match="4 columns, the scaler 5"):
        apply(fit_robust(X, TRAIN, COLS), X[:, :4])


def test_a_refit_on_the_same_rows_returns_the_first_scaler_and_a_changed_row_refits() -> None:
    # fit_robust keeps the last scalers by the bytes they were fitted on (a job fits each fold
    # several times): the same rows give the same scaler object, a changed training row a new fit,
    # a changed row outside training the same one.
    first = fit_robust(X, np.arange(5), COLS)
    assert fit_robust(X.copy(), np.arange(5), COLS) is first
    assert fit_robust(X, np.arange(5), COLS, clip=3.0) is not first  # another clip: another scaler
    outside = X.copy()
    outside[6, 0] = 123.0
    assert fit_robust(outside, np.arange(5), COLS) is first
    inside = X.copy()
    inside[2, 0] = 3.5  # the median of column a
    refit = fit_robust(inside, np.arange(5), COLS)
    assert refit is not first and refit.median[0] != first.median[0]
    fresh = [robust_stats(inside[:5, j]) for j in range(len(COLS))]
    np.testing.assert_array_equal(refit.median, np.array([m for m, _ in fresh], dtype=np.float32))
    np.testing.assert_array_equal(refit.scale, np.array([s for _, s in fresh], dtype=np.float32))
