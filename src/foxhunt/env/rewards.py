"""Rewards: normalised net PnL and bounded shaping terms (docs/design.md §5, §10 invariant 9).

Pure batched functions over ``[N]`` tensors (device and dtype from the inputs, no ``.item()``, no
data-dependent Python branch; ``torch.compile(fullgraph=True)``-friendly).

Normalisation
-------------
Every money amount ``x`` ($) enters the reward as ``x / (capital * pnl_scale)``
(:func:`normalise_pnl`), ``capital`` being the episode's *initial* capital (a fixed divisor: the same
state and action give the same reward in training and evaluation, and fold k+1 does not depend on
fold k). With ES defaults ($250 000, ``pnl_scale = 1e-3``) one reward unit is $250.

Reward and components
---------------------
``reward = sum(components)``, ``components[:, c]`` named by :data:`COMPONENTS`::

    pnl                = normalise(step net PnL)                                  every step
    entry              = entry_bonus             * |R| * e                        exit step
    exit_timing        = exit_timing_bonus       * |R| * (1 - 2 * bars_since_peak / hold)
    drawdown_recovery  = drawdown_recovery_bonus * |m| * tanh(max(R, 0) / |m|)
    regime_shift       = -regime_shift_penalty   * |R| * bars_after_shift / hold

on the step a trade closes (0 elsewhere), from the closed trade's :class:`TradePath` (normalised):

* ``R``: the trade's net PnL (entry and exit costs included); ``hold``: bars from entry to exit.
* ``e = (MFE - MAE) / (MFE + MAE)`` in ``[-1, 1]`` (0 when both are 0), ``MFE = max(peak, 0)``,
  ``MAE = max(-trough, 0)``: the *entry quality* (did the price go our way before it went against
  us?). It is paid at exit, not on the opening step, because only then is ``|R|`` known and the term
  can be bounded by it; discounted bootstrapping carries it back to the entry.
* ``bars_since_peak``: bars from the trade's PnL peak to the exit, in ``[0, hold]``: exiting on the
  peak earns ``+|R|``, holding the whole trade after a peak at entry costs ``-|R|``.
* ``m = min(trough, 0)``: the trade's worst PnL; the term is ``|min_pnl| tanh(reward / |min_pnl|)``,
  paid only on a recovered (profitable) trade; 0 when the trade never went negative.
* ``bars_after_shift``: bars the trade stayed open after the regime moved past the adaptive
  threshold (:func:`advance_trade`), in ``[0, hold]``.

**Bound (invariant 9)**: each shaping term satisfies ``|term| <= coefficient * |R|``: every factor
after ``|R|`` lies in ``[-1, 1]`` and ``|m| tanh(x / |m|) <= x``; the code also clamps each term to
``±coefficient * |R|`` so the bound holds exactly in floating point. The terms are self-scaled (their
size comes from the trade), the only constants being the coefficients in ``[0, 1]`` (0 = off). With
every coefficient 0 the reward is exactly the normalised net PnL.

Regime shift: adaptive threshold
--------------------------------
``regime`` is one scalar per env (the integrator reduces a regime feature vector to one number,
e.g. a regime probability or a volatility ratio). The threshold adapts to how much the regime
usually moves (:func:`regime_move_ema`)::

    ema_t = ema_{t-1} + a_t * (|regime_t - regime_{t-1}| - ema_{t-1}),  a_t = max(alpha, 1 / (t + 1))

(a running mean for the first 1/alpha steps, then an EMA; t = changes seen before this one). A trade
counts as *shifted* from the first bar on which the drift since entry exceeds
``regime_threshold_mult * ema * sqrt(bars held)`` (a random walk drifts like sqrt(bars), so a long
hold alone does not trigger it); ``bars_after_shift`` counts the bars held after that bar.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from foxhunt.env.config import RewardConfig

COMPONENTS: tuple[str, ...] = ("pnl", "entry", "exit_timing", "drawdown_recovery", "regime_shift")
"""Names of the reward-components columns, in order."""

# --- normalisation -----------------------------------------------------------------------------


def normalise_pnl(pnl: Tensor, capital: Tensor | float, params: RewardConfig) -> Tensor:
    """``pnl / (capital * pnl_scale)``: money ($) to reward units."""
    scale = capital.to(pnl.dtype) if isinstance(capital, Tensor) else float(capital)
    return pnl / (scale * params.pnl_scale)


# --- the open trade's path ---------------------------------------------------------------------


class TradePath(NamedTuple):
    """What the shaping terms need of the env's current trade, one ``[N]`` float tensor per field.

    Money in $ (normalised inside :func:`step_reward`); bar counts as floats.
    """

    pnl: Tensor
    """Cumulative net PnL of the trade so far (entry cost, marks, exit cost)."""
    peak: Tensor
    """Running max of ``pnl`` over the trade's bars (entry bar included)."""
    trough: Tensor
    """Running min of ``pnl`` over the trade's bars."""
    hold_bars: Tensor
    """Bars since entry (0 on the entry bar)."""
    bars_since_peak: Tensor
    """Bars since ``pnl`` last set ``peak`` (earliest bar of a tie), in ``[0, hold_bars]``."""
    regime_entry: Tensor
    """Regime value on the entry bar."""
    shifted: Tensor
    """Bool: the regime drift since entry has exceeded the adaptive threshold on some bar."""
    bars_after_shift: Tensor
    """Bars held after the bar the drift first exceeded the threshold (0 until then)."""

    @classmethod
    def zeros(
        cls, n: int, *, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
    ) -> TradePath:
        """An all-flat path for ``n`` envs (episode start / fold reset)."""

        def z() -> Tensor:  # one tensor per field: a step may write the fields in place
            return torch.zeros(n, device=device, dtype=dtype)

        return cls(z(), z(), z(), z(), z(), z(), torch.zeros(n, device=device, dtype=torch.bool), z())


def open_trade(path: TradePath, opened: Tensor, entry_pnl: Tensor, regime: Tensor) -> TradePath:
    """Start a new trade on the rows where ``opened``; other rows keep their path.

    ``entry_pnl``: the new trade's net PnL on its entry bar (minus its entry cost, plus the mark from
    the fill to the bar's reference price). On a reversal (Short -> Long in one step) first
    :func:`advance_trade` the old trade with its part of the step, compute the reward, then open.
    """
    zero = torch.zeros_like(path.pnl)
    return TradePath(
        pnl=torch.where(opened, entry_pnl, path.pnl),
        peak=torch.where(opened, entry_pnl, path.peak),
        trough=torch.where(opened, entry_pnl, path.trough),
        hold_bars=torch.where(opened, zero, path.hold_bars),
        bars_since_peak=torch.where(opened, zero, path.bars_since_peak),
        regime_entry=torch.where(opened, regime.to(path.regime_entry.dtype), path.regime_entry),
        shifted=path.shifted & ~opened,
        bars_after_shift=torch.where(opened, zero, path.bars_after_shift),
    )


def advance_trade(
    path: TradePath,
    holding: Tensor,
    step_pnl: Tensor,
    regime: Tensor,
    regime_ema: Tensor,
    params: RewardConfig,
) -> TradePath:
    """Advance the open trade by one bar on the rows where ``holding``; other rows keep their path.

    ``holding``: a trade opened on an earlier bar is open through this bar, including the bar it
    closes on. ``step_pnl``: the trade's net PnL on this bar (mark, plus the exit cost when it
    closes). ``regime_ema``: the adaptive |regime change| scale (:func:`regime_move_ema`)::

        hold += 1;  pnl += step_pnl;  peak = max(peak, pnl);  trough = min(trough, pnl)
        bars_since_peak = 0 if pnl > old peak else bars_since_peak + 1
        bars_after_shift = bars_after_shift + 1 if shifted (before this bar) else 0
        shifted |= |regime - regime_entry| > regime_threshold_mult * regime_ema * sqrt(hold)
    """
    hold = path.hold_bars + 1.0
    pnl = path.pnl + step_pnl
    new_peak = pnl > path.peak
    drift = (regime - path.regime_entry).abs()
    crossed = drift > params.regime_threshold_mult * regime_ema * hold.sqrt()
    advanced = TradePath(
        pnl=pnl,
        peak=torch.maximum(path.peak, pnl),
        trough=torch.minimum(path.trough, pnl),
        hold_bars=hold,
        bars_since_peak=torch.where(new_peak, torch.zeros_like(pnl), path.bars_since_peak + 1.0),
        regime_entry=path.regime_entry,
        shifted=path.shifted | crossed,
        bars_after_shift=torch.where(
            path.shifted, path.bars_after_shift + 1.0, torch.zeros_like(path.bars_after_shift)
        ),
    )
    return TradePath(*(torch.where(holding, new, old) for new, old in zip(advanced, path, strict=True)))


def regime_move_ema(ema: Tensor, change: Tensor, steps: Tensor, params: RewardConfig) -> Tensor:
    """Adaptive scale of regime moves: ``ema + a * (|change| - ema)``, ``a = max(alpha, 1/(steps+1))``.

    ``change = regime_t - regime_{t-1}``; ``steps``: changes already folded in (0 on the first, which
    then sets the EMA to ``|change|``). Reset ``ema`` and ``steps`` to 0 at fold boundaries.
    """
    rate = torch.clamp(1.0 / (steps.to(ema.dtype) + 1.0), min=params.regime_ema_alpha)
    return ema + rate * (change.abs() - ema)


# --- the reward --------------------------------------------------------------------------------


def shaping_terms(trade: TradePath, capital: Tensor | float, params: RewardConfig) -> Tensor:
    """The four shaping terms of a closed trade, ``[N, 4]`` (entry, exit_timing, drawdown, regime).

    Formulas in the module docstring; each column is clamped to ``±coefficient * |R|``.
    """
    r = normalise_pnl(trade.pnl, capital, params)
    peak = normalise_pnl(trade.peak, capital, params)
    trough = normalise_pnl(trade.trough, capital, params)
    abs_r = r.abs()
    hold = trade.hold_bars.clamp(min=1.0)
    tiny = torch.finfo(r.dtype).tiny

    mfe = peak.clamp(min=0.0)
    mae = (-trough).clamp(min=0.0)
    excursion = mfe + mae
    quality = torch.where(excursion > 0, (mfe - mae) / excursion.clamp(min=tiny), torch.zeros_like(r))
    entry = params.entry_bonus * abs_r * quality.clamp(-1.0, 1.0)

    late = (trade.bars_since_peak / hold).clamp(0.0, 1.0)
    exit_timing = params.exit_timing_bonus * abs_r * (1.0 - 2.0 * late)

    depth = (-trough).clamp(min=0.0)  # |m|, m = min(trough, 0)
    recovered = r.clamp(min=0.0)
    recovery = torch.where(
        depth > 0, depth * torch.tanh(recovered / depth.clamp(min=tiny)), torch.zeros_like(r)
    )
    drawdown = params.drawdown_recovery_bonus * recovery

    after = (trade.bars_after_shift / hold).clamp(0.0, 1.0)
    regime = -params.regime_shift_penalty * abs_r * after

    # Stacked from Python scalars times a device tensor: no host-to-device copy per step (a
    # torch.tensor of the coefficients would be one, and would break CUDA-graph capture).
    coefficients = (
        params.entry_bonus,
        params.exit_timing_bonus,
        params.drawdown_recovery_bonus,
        params.regime_shift_penalty,
    )
    bound = torch.stack([c * abs_r for c in coefficients], dim=-1)  # [N, 4]
    terms = torch.stack((entry, exit_timing, drawdown, regime), dim=-1)
    return torch.maximum(torch.minimum(terms, bound), -bound)


def step_reward(
    net_pnl: Tensor,
    closed: Tensor,
    trade: TradePath,
    capital: Tensor | float,
    params: RewardConfig,
) -> tuple[Tensor, Tensor]:
    """``(reward [N], components [N, 5])`` of one step; ``reward = components.sum(-1)``.

    ``net_pnl``: the step's net PnL ($, gross minus costs, every trade of the env together).
    ``closed``: a trade closed on this step; ``trade``: that trade's path, advanced through the
    closing bar (:func:`advance_trade`), read only where ``closed``. Columns follow
    :data:`COMPONENTS`; shaping columns are 0 where not ``closed``.
    """
    pnl = normalise_pnl(net_pnl, capital, params)
    terms = shaping_terms(trade, capital, params)
    shaping = torch.where(closed.unsqueeze(-1), terms, torch.zeros_like(terms))
    components = torch.cat((pnl.unsqueeze(-1), shaping), dim=-1)
    return components.sum(dim=-1), components
