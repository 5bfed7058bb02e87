"""The environment-written part of the RL state: raw portfolio and plan values, scaled by the spec.

Each slot of the ``portfolio`` and ``plan`` groups is a raw quantity of the :class:`Portfolio`
(:func:`portfolio_values`, :func:`plan_values`, keyed by slot name) put on the network's scale by
its :class:`~foxhunt.features.layout.SlotSpec` (:func:`scale_group`)::

    state[:, layout column of slot] = clamp(raw * times / (per * unit), -clamp, clamp)

with the units resolved from the config (:func:`unit_values`). The scales live as data in
:data:`foxhunt.features.layout.STATE_SPEC`, beside the slot names; nothing here knows a position.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from foxhunt.env.config import EnvConfig
from foxhunt.env.state import Portfolio
from foxhunt.features.layout import GroupSpec, Unit


def unit_values(cfg: EnvConfig) -> dict[Unit, float]:
    """What each :class:`~foxhunt.features.layout.Unit` is worth under ``cfg``."""
    return {
        Unit.ONE: 1.0,
        Unit.CAPITAL: cfg.contract.initial_capital,
        Unit.MAX_POSITION: cfg.contract.max_position,
        Unit.HORIZON: cfg.plan.barrier.horizon,
    }


def portfolio_values(p: Portfolio) -> dict[str, Tensor]:
    """The ``portfolio`` group's raw values ``[N]`` by slot name ($, contracts, rows)."""
    a, dtype = p.account, p.account.position.dtype
    return {
        "position": a.position,
        "unrealised_pnl": p.trade.gross - p.trade.costs,
        "hold_time": a.hold_time.to(dtype),
        "max_pnl": a.trade_max,
        "min_pnl": a.trade_min,
        "drawdown": (a.peak_equity - a.equity) / a.peak_equity,
        "cost_paid": a.costs_paid,
        "time_since_trade": torch.log1p(a.time_since_trade.to(dtype)),
    }


def plan_values(p: Portfolio, mid: Tensor, horizon: int, min_vol: float) -> dict[str, Tensor]:
    """The ``plan`` group's raw values ``[N]`` by slot name at the price ``mid`` (0 without a plan).

    ``horizon``: the barrier's rows (the slot ``target_bars``). The distances to the barriers are in
    the plan's entry volatility of the price (``vol x mid``, ``vol`` floored at ``min_vol``), signed by
    the plan's direction.
    """
    plan, dtype = p.plan, mid.dtype
    vol_px = torch.clamp(plan.vol, min=min_vol) * mid
    active = plan.active.to(dtype)
    target = float(horizon)
    left = torch.clamp((target - p.account.hold_time.to(dtype)) / target, 0.0, 1.0)
    return {
        "active": active,
        "direction": plan.direction * active,
        "target_bars": active * target,
        "remaining_fraction": active * left,
        "distance_to_profit": active * (plan.profit - mid) / vol_px * plan.direction,
        "distance_to_stop": active * (mid - plan.stop) / vol_px * plan.direction,
        "entry_regime": active * plan.vol,
    }


def scale_group(
    values: Mapping[str, Tensor], group: GroupSpec, units: Mapping[Unit, float], bounds_2S: Tensor
) -> Tensor:
    """``[N, S]`` the group's slots in layout order, each scaled by its spec and clamped.

    ``bounds_2S``: the slots' ``[-clamp, clamp]`` (:func:`clamp_bounds`: one clamp for the group). A
    factor of 1 is skipped rather than applied, so each slot is the one division (or product) by a
    Python float that defines it.
    """
    cols = []
    for slot in group.slots:
        x, scale = values[slot.name], slot.scale
        if scale.times != 1.0:
            x = x * scale.times
        per = scale.per * units[scale.unit]
        if per != 1.0:
            x = x / per
        cols.append(x)
    x_NS = torch.stack(cols, dim=1)
    if group.nan_to_zero:
        x_NS = torch.nan_to_num(x_NS)
    return torch.clamp(x_NS, bounds_2S[0], bounds_2S[1])


def clamp_bounds(group: GroupSpec, *, device: torch.device, dtype: torch.dtype) -> Tensor:
    """``[2, S]`` the group's slot bounds, ``-clamp`` then ``clamp`` (built once per env: no
    allocation inside the step)."""
    c = [s.clamp for s in group.slots]
    return torch.tensor([[-x for x in c], c], dtype=dtype, device=device)
