"""Per-row returns and trailing volatility (foxhunt.data.returns): hand-worked numbers, a direct
reference computation, causality and restarts at segments."""

from __future__ import annotations

import numpy as np
import pytest

from foxhunt.data.returns import log_returns, segment_ids, trailing_volatility


def _starts(n: int, *firsts: int) -> np.ndarray:
    s = np.zeros(n, bool)
    s[list(firsts)] = True
    return s


def test_segment_ids_treat_row_zero_as_a_start():
    assert segment_ids(np.array([False, False, True, False, True])).tolist() == [0, 0, 1, 1, 2]


def test_log_returns_restart_at_segments_and_skip_bad_prices():
    close = np.array([100.0, 101.0, 0.0, 102.0, 103.0, 104.0])
    r = log_returns(close, _starts(6, 0, 4))
    assert np.isnan(r[[0, 2, 3, 4]]).all()  # start, price 0 (twice), segment start
    assert r[1] == pytest.approx(np.log(1.01))
    assert r[5] == pytest.approx(np.log(104 / 103))


def test_trailing_volatility_hand_worked():
    # returns 0.01, -0.01, 0.02: mean 1/150, deviations (1/3, -5/3, 4/3) * 0.01, var = 7/3 * 1e-4
    close = 100.0 * np.exp(np.cumsum([0.0, 0.01, -0.01, 0.02, 0.02]))
    vol = trailing_volatility(close, _starts(5, 0), window=3)
    assert np.isnan(vol[:3]).all()  # fewer than 3 returns so far
    assert vol[3] == pytest.approx(0.01 * np.sqrt(7 / 3), rel=1e-9)
    # window of (-0.01, 0.02, 0.02): mean 0.01, deviations (-2, 1, 1) * 0.01, var = 3e-4
    assert vol[4] == pytest.approx(0.01 * np.sqrt(3), rel=1e-9)


def test_trailing_volatility_is_exactly_zero_on_a_flat_window_after_moves():
    close = np.array([100.0, 103.0, 99.0, 104.0, 104.0, 104.0, 104.0, 104.0])
    vol = trailing_volatility(close, _starts(8, 0), window=3)
    assert vol[3] > 0
    assert vol[6] == 0.0 and vol[7] == 0.0  # three zero returns: no rounding residue


def _reference_vol(close, starts, window, min_periods):
    r = log_returns(close, starts)
    seg = segment_ids(starts)
    out = np.full(len(close), np.nan)
    for t in range(len(close)):
        lo = max(t - window + 1, int(np.flatnonzero(seg == seg[t])[0]))
        w = r[lo : t + 1]
        w = w[np.isfinite(w)]
        if len(w) >= min_periods:
            out[t] = np.std(w, ddof=1)
    return out


@pytest.mark.parametrize(("window", "min_periods"), [(2, 2), (5, 3), (20, 20)])
def test_trailing_volatility_matches_a_direct_computation(window, min_periods):
    rng = np.random.default_rng(7)
    n = 400
    close = 5000.0 * np.exp(np.cumsum(rng.normal(0, 1e-3, n)))
    close[rng.integers(0, n, 15)] = np.nan
    close[100:130] = close[99]  # a flat stretch
    starts = _starts(n, 0, 57, 58, 200, 333)
    got = trailing_volatility(close, starts, window, min_periods)
    want = _reference_vol(close, starts, window, min_periods)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-15)


def test_trailing_volatility_is_causal_and_restarts_at_segments():
    rng = np.random.default_rng(3)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, 200)))
    starts = _starts(200, 0, 120)
    vol = trailing_volatility(close, starts, window=10)
    for k in (15, 80, 125, 199):
        np.testing.assert_array_equal(trailing_volatility(close[:k], starts[:k], window=10), vol[:k])
    assert np.isnan(vol[120:130]).all() and np.isfinite(vol[130])  # 10 returns from row 121 on
    future = close.copy()
    future[150:] *= 1.5
    np.testing.assert_array_equal(trailing_volatility(future, starts, window=10)[:150], vol[:150])


def test_trailing_volatility_rejects_bad_windows():
    with pytest.raises(ValueError, match="window"):
        trailing_volatility(np.ones(5), _starts(5, 0), window=1)
    with pytest.raises(ValueError, match="min_periods"):
        trailing_volatility(np.ones(5), _starts(5, 0), window=3, min_periods=4)
