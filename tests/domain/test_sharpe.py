"""The one Sharpe rule (foxhunt.domain.sharpe): hand-worked ratios and the zero-variance rule."""

from __future__ import annotations

import math

import pytest
import torch

from foxhunt.domain.sharpe import sharpe_ratio


def _f64(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_sharpe_ratio_hand_worked() -> None:
    # mean 0.02, population std 0.04 over 10 returns: 0.5 per bar; the sign follows the mean
    mean, std, n = _f64([0.02, -0.02, 0.003]), _f64([0.04, 0.04, 0.006]), _f64([10.0, 10.0, 2.0])
    assert sharpe_ratio(mean, std, n).tolist() == [0.5, -0.5, 0.5]
    # returns 0.1, -0.1, 0.1 (test_sharpe_sortino_drawdown_calmar_hand_worked): 1/sqrt(8)
    got = sharpe_ratio(_f64([1 / 30]), _f64([math.sqrt(8) / 30]), _f64([3.0]))
    assert got.item() == pytest.approx(1 / math.sqrt(8), rel=1e-15)


def test_sharpe_ratio_is_zero_below_two_returns_and_at_zero_spread() -> None:
    one = _f64([1.0])
    # one return (whatever spread a caller passes) or none: no dispersion to measure risk by -> 0
    assert sharpe_ratio(_f64([0.01]), _f64([0.02]), one).item() == 0.0
    assert sharpe_ratio(_f64([0.0]), _f64([0.0]), _f64([0.0])).item() == 0.0
    # zero spread: 0, never inf or NaN, for a flat or a constant series
    assert sharpe_ratio(_f64([0.0, 1e-3]), _f64([0.0, 0.0]), _f64([50.0, 50.0])).tolist() == [0.0, 0.0]
    # the spread tolerance is relative to |mean|: 1e-5 |mean| is rounding (0), 2e-4 |mean| is a
    # (huge) Sharpe of 5,000 per bar
    mean = _f64([1e-3, 1e-3, -1e-3])
    got = sharpe_ratio(mean, _f64([1e-8, 2e-7, 2e-7]), _f64([1e5, 1e5, 1e5]))
    assert got.tolist() == [0.0, pytest.approx(5000.0), pytest.approx(-5000.0)]


def test_one_pass_moments_of_a_constant_series_have_sharpe_zero() -> None:
    # evaluate_many and the agent's collector accumulate sum(r) and sum(r^2) step by step and take
    # std = sqrt(E[r^2] - mu^2): for a constant 0.1 over 1,000 steps rounding leaves std ~1.7e-7 mu,
    # which a bare "std > 0" turns into a per-bar Sharpe of ~6e6; the rule gives 0
    s = q = torch.zeros((), dtype=torch.float64)
    for _ in range(1000):
        r = torch.tensor(0.1, dtype=torch.float64)
        s, q = s + r, q + r * r
    n = torch.tensor(1000.0, dtype=torch.float64)
    mean = s / n
    std = (q / n - mean * mean).clamp(min=0).sqrt()
    assert std.item() > 0.0  # the residue this test is about
    assert sharpe_ratio(mean, std, n).item() == 0.0
