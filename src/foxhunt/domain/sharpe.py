"""The one Sharpe rule of foxhunt: the backtest metrics, the batched evaluation and the agent's
training signal all call :func:`sharpe_ratio` (a pure tensor function, here so that every stage may
import it: the domain imports no stage)."""

from __future__ import annotations

import torch

ZERO_SPREAD_REL = 1e-4
"""A spread ``<= ZERO_SPREAD_REL |mean|`` is zero variance in :func:`sharpe_ratio`.

A constant return series has a standard deviation of 0 only in exact arithmetic: its moments keep
rounding residue. The two-pass ``sqrt(mean((r - mu)^2))`` of the backtest metrics leaves about
``eps |mu|``; the one-pass ``sqrt(E[r^2] - mu^2)`` that :func:`~foxhunt.backtest.evaluate.evaluate_many`
and the agent's collector accumulate leaves about ``sqrt(n eps) |mu|`` (2e-6 |mu| measured over 10^5
float64 steps, ~5e-5 at the 10^7 steps of a large collection). 1e-4 is above both, and a per-bar
Sharpe of 10^4 (``10^4 sqrt(B)`` a year) is beyond any return series that is not constant.
"""


def sharpe_ratio(mean: torch.Tensor, spread: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """Per-bar Sharpe ``mean / spread`` of ``n`` returns, elementwise; 0 where it is undefined.

    The one Sharpe rule of foxhunt (the backtest metrics, :func:`~foxhunt.backtest.evaluate.evaluate_many`
    and the agent's training signal all call it): the ratio is 0 when

    * ``n < 2``: one return has no dispersion to measure risk by (and none has no mean), and
    * ``spread <= ZERO_SPREAD_REL |mean|``: zero variance up to rounding (:data:`ZERO_SPREAD_REL`),
      so a constant series, flat or not, scores 0 rather than +-inf or a rounding-noise 10^8.

    0 rather than NaN keeps every mean over folds and seeds finite; a constant positive series,
    which is the signature of a leak, is caught by :func:`~foxhunt.backtest.metrics.implausibility`'s
    drawdown check instead. ``spread`` is the population standard deviation for the Sharpe and the
    downside deviation for the Sortino ratio. Pure tensor ops (no host read), so it runs on the
    device and under ``torch.compile``.
    """
    ok = (n >= 2) & (spread > ZERO_SPREAD_REL * mean.abs())
    return torch.where(ok, mean / torch.where(ok, spread, torch.ones_like(spread)), torch.zeros_like(mean))
