"""The triple barrier: its levels and touch test by hand, and its one parameter object."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from foxhunt.config.models import FoxhuntConfig
from foxhunt.domain.barrier import BarrierConfig, barrier_prices, barrier_touch
from foxhunt.env.config import EnvConfig, PlanConfig
from foxhunt.validation.config import LabelConfig


def test_barrier_prices_long_and_short() -> None:
    assert barrier_prices(100.0, 1 / 64, 2.0, 1.0) == (103.125, 98.4375)
    assert barrier_prices(100.0, 1 / 64, 2.0, 1.0, side=-1) == (96.875, 101.5625)
    with pytest.raises(ValueError, match="side"):
        barrier_prices(100.0, 0.01, 1.0, 1.0, side=0)


def test_barrier_prices_of_tensors_keep_the_tensor_and_its_sides() -> None:
    """The env's call: one entry per episode, side +-1 per episode (a tensor)."""
    entry, vol, side = torch.tensor([100.0, 100.0]), torch.tensor([1 / 64, 1 / 64]), torch.tensor([1.0, -1.0])
    profit, stop = barrier_prices(entry, vol, 2.0, 1.0, side)
    assert profit.tolist() == [103.125, 96.875] and stop.tolist() == [98.4375, 101.5625]


def test_barrier_touch_is_one_test_for_floats_and_tensors() -> None:
    """Levels 101 / 99 (long) and 99 / 101 (short); touching a level exactly counts."""
    assert barrier_touch(101.0, 99.5, 101.0, 99.0, 1) == (True, False)
    assert barrier_touch(100.5, 99.0, 101.0, 99.0, 1) == (False, True)
    assert barrier_touch(101.0, 99.0, 99.0, 101.0, -1) == (True, True)
    assert barrier_touch(100.5, 99.5, 99.0, 101.0, -1) == (False, False)
    hi, lo = torch.tensor([101.0, 100.5]), torch.tensor([99.5, 99.0])
    profit, stop = barrier_touch(hi, lo, torch.tensor(101.0), torch.tensor(99.0), 1)
    assert profit.tolist() == [True, False] and stop.tolist() == [False, True]


def _first_touch(
    highs: list[float], lows: list[float], entry: float, vol: float, side: int
) -> tuple[str, int]:
    """Walk a path row by row with the barrier's own two functions (the conventions of the module)."""
    profit_px, stop_px = barrier_prices(entry, vol, 2.0, 1.0, side)
    for k, (h, lo) in enumerate(zip(highs, lows, strict=True), start=1):
        profit, stop = barrier_touch(h, lo, float(profit_px), float(stop_px), side)
        if stop:  # a row touching both is a stop
            return "stop", k
        if profit:
            return "profit", k
    return "timeout", len(highs)


# Entry 100, per-row vol 1/64, profit mult 2, stop mult 1: long levels 103.125 / 98.4375,
# short levels 96.875 / 101.5625 (exact in binary).
HIGHS = [100.5, 101.6, 103.2, 100.0]
LOWS = [99.5, 99.0, 96.0, 96.0]


def test_a_long_on_the_hand_made_path_takes_profit_on_row_three() -> None:
    """Row 1: 99.5..100.5 inside; row 2: high 101.6 < 103.125, low 99.0 > 98.4375; row 3: high 103.2
    reaches the profit level and low 96.0 the stop: both, so a stop."""
    assert _first_touch(HIGHS, LOWS, 100.0, 1 / 64, 1) == ("stop", 3)
    assert _first_touch(HIGHS[:2] + [103.2], LOWS[:2] + [99.0], 100.0, 1 / 64, 1) == ("profit", 3)


def test_a_short_on_the_hand_made_path_is_stopped_on_row_two() -> None:
    """Short stop 101.5625: row 2's high 101.6 reaches it (its low 99.0 is above the 96.875 profit)."""
    assert _first_touch(HIGHS, LOWS, 100.0, 1 / 64, -1) == ("stop", 2)


def test_no_touch_within_the_horizon_is_a_timeout() -> None:
    assert _first_touch([100.5, 101.0], [99.5, 99.0], 100.0, 1 / 64, 1) == ("timeout", 2)


def test_barrier_defaults_and_bounds() -> None:
    b = BarrierConfig()
    assert (b.profit_mult, b.stop_mult, b.vol_window, b.horizon) == (8.0, 8.0, 100, 60)
    bad_values = ({"profit_mult": 0.0}, {"stop_mult": -1.0}, {"vol_window": 1}, {"horizon": 0})
    for bad in (*bad_values, {"target_bars": 5}):
        with pytest.raises(ValidationError):
            BarrierConfig(**bad)
    assert all(f.description for f in BarrierConfig.model_fields.values())


def test_the_plan_holds_the_one_barrier_and_the_labels_none() -> None:
    """One home: env.plan.barrier; neither the plan nor the labels keep a barrier key of their own."""
    assert EnvConfig().plan.barrier == BarrierConfig()
    assert set(PlanConfig.model_fields) == {"barrier", "trailing_mult", "min_vol"}
    barrier_keys = set(BarrierConfig.model_fields) | {
        "barrier_vol_window",
        "barrier_horizon_bars",
        "target_bars",
    }
    assert not barrier_keys & set(LabelConfig.model_fields)
    cfg = FoxhuntConfig.model_validate({"env": {"plan": {"barrier": {"horizon": 7}}}})
    assert cfg.env.plan.barrier.horizon == 7
