"""Labels: hand-worked direction labels, trailing volatility and triple-barrier outcomes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from pydantic import ValidationError

from foxhunt.data.returns import trailing_volatility
from foxhunt.data.schemas import DataSource, RowUnit
from foxhunt.domain.barrier import BarrierConfig
from foxhunt.domain.exits import BARRIER_EXITS, NO_OUTCOME, outcome_class
from foxhunt.features.frame import RowInput
from foxhunt.validation.config import LabelConfig
from foxhunt.validation.labels import (
    compute_labels,
    direction_labels,
    label_span,
    triple_barrier,
)

P, S, T = (outcome_class(int(r)) for r in BARRIER_EXITS)  # the stored classes 0, 1, 2


def _starts(n: int, *firsts: int) -> np.ndarray:
    s = np.zeros(n, bool)
    s[list(firsts)] = True
    return s


# --- direction ---------------------------------------------------------------------------------


def test_direction_labels_hand_worked():
    close = np.array([1.0, 2.0, 2.0, 1.0, 3.0, 5.0, 4.0, 4.0])  # segments: rows 0-4 | 5-7
    labels, valid = direction_labels(close, _starts(8, 0, 5), (1, 2))
    # K=1: t4 -> t5 crosses into the next segment; t7 has no row 8
    assert labels[:, 0].tolist() == [1, 0, -1, 1, 0, -1, 0, 0]
    assert valid[:, 0].tolist() == [True, True, True, True, False, True, True, False]
    # K=2: t3 -> t5 and t4 -> t6 cross the segment; t6, t7 run past the data
    assert labels[:, 1].tolist() == [1, -1, 1, 0, 0, -1, 0, 0]
    assert valid[:, 1].tolist() == [True, True, True, False, False, True, False, False]
    assert labels.dtype == np.int8 and valid.dtype == bool


def test_direction_labels_invalid_around_non_finite_prices():
    close = np.array([1.0, 2.0, np.nan, 1.0, 3.0])
    labels, valid = direction_labels(close, _starts(5, 0), (1, 2))
    assert valid[:, 0].tolist() == [True, False, False, True, False]  # t1 -> t2 and t2 itself
    assert valid[:, 1].tolist() == [False, True, False, False, False]  # t0 -> t2, t2 itself
    assert (labels[~valid] == 0).all()  # filler, never a valid 0 label


def test_direction_labels_reject_a_mismatched_shape():
    with pytest.raises(ValueError, match="close has shape"):
        direction_labels(np.ones(4), np.ones(5, bool), (1,))


# --- triple barrier ---------------------------------------------------------------------------

# close 100 everywhere, vol 1/64, mults 1: profit 101.5625, stop 98.4375 (exact in binary)
_HIGH = np.array([100.0, 100.5, 101.5625, 100.2, 102.0, 100.1, 100.1, 100.1, 100.1])
_LOW = np.array([100.0, 99.5, 99.8, 98.4375, 98.0, 99.9, 99.9, 99.9, 99.9])


def _barrier(side=1, high=_HIGH, low=_LOW, close=None, vol=None, starts=None, horizon=3):
    n = len(high)
    close = np.full(n, 100.0) if close is None else close
    vol = np.full(n, 1 / 64) if vol is None else vol
    starts = _starts(n, 0) if starts is None else starts
    return triple_barrier(close, high, low, starts, vol, 1.0, 1.0, horizon, side=side)


def test_triple_barrier_long_hand_worked():
    outcome, offset, valid = _barrier()
    # t0: row 2 touches the profit exactly; t1: row 2; t2: row 3 touches the stop exactly;
    # t3: row 4 touches both -> STOP; t4, t5: nothing in 3 rows -> TIMEOUT; t6..t8: horizon past data
    assert outcome.tolist() == [P, P, S, S, T, T, NO_OUTCOME, NO_OUTCOME, NO_OUTCOME]
    assert offset.tolist() == [2, 1, 1, 1, 3, 3, -1, -1, -1]
    assert valid.tolist() == [True] * 6 + [False] * 3
    assert outcome.dtype == np.int8


def test_triple_barrier_short_hand_worked():
    outcome, offset, _ = _barrier(side=-1)
    # short: profit when low <= 98.4375, stop when high >= 101.5625
    # t0: row 2 high -> STOP; t1: row 2 -> STOP; t2: row 3 low -> PROFIT; t3: row 4 both -> STOP
    assert outcome.tolist() == [S, S, P, S, T, T, NO_OUTCOME, NO_OUTCOME, NO_OUTCOME]
    assert offset.tolist() == [2, 1, 1, 1, 3, 3, -1, -1, -1]


def test_triple_barrier_short_is_the_long_on_the_mirrored_path():
    rng = np.random.default_rng(11)
    n = 300
    close = 100 + np.cumsum(rng.normal(0, 0.3, n))
    high = close + rng.uniform(0, 0.5, n)
    low = close - rng.uniform(0, 0.5, n)
    vol = np.full(n, 0.004)
    starts = _starts(n, 0, 140)
    short = triple_barrier(close, high, low, starts, vol, 2.0, 1.5, 20, side=-1)
    assert len(set(short[0][short[2]].tolist())) == 3  # all three outcomes occur
    for t in (0, 57, 119, 140, 200, 279):
        c0 = close[t]  # mirror the path around this entry: a fall becomes a rise of the same size
        mirrored = triple_barrier(2 * c0 - close, 2 * c0 - low, 2 * c0 - high, starts, vol, 2.0, 1.5, 20)
        assert (short[0][t], short[1][t], short[2][t]) == (mirrored[0][t], mirrored[1][t], mirrored[2][t])


def test_triple_barrier_is_invalid_across_segments_and_bad_inputs():
    starts = _starts(9, 0, 5)
    outcome, _, valid = _barrier(starts=starts)
    # horizon 3 within the first segment (rows 0-4): only t0, t1; second segment (5-8): only t5
    assert valid.tolist() == [True, True, False, False, False, True, False, False, False]
    assert (outcome[~valid] == NO_OUTCOME).all()

    vol = np.full(9, 1 / 64)
    vol[0], vol[4] = np.nan, 0.0  # no scale / barriers on the entry price
    _, _, valid = _barrier(vol=vol)
    assert not valid[0] and not valid[4] and valid[1]

    high = _HIGH.copy()
    high[1] = np.nan  # t0 must pass row 1 before its exit at row 2
    high[3] = np.nan  # t1 exits at row 2, before the bad row 3
    outcome, _, valid = _barrier(high=high)
    assert not valid[0] and valid[1] and outcome[1] == P and not valid[2]


def test_triple_barrier_reads_nothing_after_the_horizon():
    outcome, _, _ = _barrier()
    high, low = _HIGH.copy(), _LOW.copy()
    high[7:], low[7:] = 1e9, 0.0  # rows 7, 8: outside the windows of t0..t3 (t3 reads rows 4..6)
    changed, _, _ = _barrier(high=high, low=low)
    assert changed[:4].tolist() == outcome[:4].tolist()
    assert outcome[4] == T and changed[4] == S  # row 7 is the last row of t4's window: both touched


# --- parameters and spans ---------------------------------------------------------------------


def test_label_span_is_the_longest_forward_reach():
    assert label_span((5, 20, 50, 200, 500), 200) == 500
    assert label_span((60,), 120) == 120
    assert label_span(LabelConfig().horizons(RowUnit.BAR), BarrierConfig().horizon) == 60
    assert label_span(LabelConfig().horizons(RowUnit.SNAPSHOT), BarrierConfig().horizon) == 500
    with pytest.raises(ValueError, match=">= 1"):
        label_span((0,), 5)


@pytest.mark.parametrize(
    "bad",
    [
        {"bar_horizons": ()},
        {"bar_horizons": (60, 20)},
        {"snapshot_horizons": (0, 5)},
        {"profit_mult": 8.0},  # the barrier's keys live in env.plan.barrier, not here
        {"horizon": 5},
    ],
)
def test_label_params_reject_bad_values(bad):
    with pytest.raises(ValidationError):
        LabelConfig(**bad)


def test_label_params_fields_are_documented():
    assert all(f.description for f in LabelConfig.model_fields.values())


# --- all labels of a RowInput -----------------------------------------------------------------


def _rows(close, high, low, starts, row_unit=RowUnit.BAR) -> RowInput:
    n = len(close)
    kw = {f.name: np.zeros(n) for f in dataclasses.fields(RowInput)}
    book = np.full((n, 1), np.nan)
    kw.update(
        row_unit=row_unit,
        data_source=DataSource.MBP10,
        tick_size=0.25,
        ts=np.arange(n, dtype=np.int64),
        segment_start=starts,
        close=close,
        open=close,
        high=high,
        low=low,
        bid_px=book,
        ask_px=book,
        bid_sz=book,
        ask_sz=book,
        bid_ct=book,
        ask_ct=book,
        events=None,
    )
    return RowInput(**kw)


@pytest.mark.parametrize("row_unit", [RowUnit.BAR, RowUnit.SNAPSHOT])
def test_compute_labels_uses_the_row_units_settings(row_unit):
    rng = np.random.default_rng(5)
    n = 400
    close = 5000 * np.exp(np.cumsum(rng.normal(0, 1e-3, n)))
    high, low = close * 1.0005, close * 0.9995
    starts = _starts(n, 0, 250)
    params = LabelConfig(bar_horizons=(3, 9), snapshot_horizons=(2,))
    barrier_h = 7 if row_unit is RowUnit.BAR else 4
    barrier = BarrierConfig(vol_window=10, profit_mult=2.0, stop_mult=3.0, horizon=barrier_h)
    lab = compute_labels(_rows(close, high, low, starts, row_unit), params, barrier)
    horizons = (3, 9) if row_unit is RowUnit.BAR else (2,)
    d, dv = direction_labels(close, starts, horizons)
    vol = trailing_volatility(close, starts, 10)
    o, off, ov = triple_barrier(close, high, low, starts, vol, 2.0, 3.0, barrier_h)
    assert lab.horizons == horizons and lab.span == max(*horizons, barrier_h)
    np.testing.assert_array_equal(lab.direction, d)
    np.testing.assert_array_equal(lab.direction_valid, dv)
    np.testing.assert_array_equal(lab.outcome, o)
    np.testing.assert_array_equal(lab.exit_offset, off)
    np.testing.assert_array_equal(lab.outcome_valid, ov)
    assert set(np.unique(lab.outcome[ov]).tolist()) <= {P, S, T}
    assert ov.sum() > 0.8 * (n - 2 * (10 + barrier_h))  # only segment edges lack a label
