"""Multi-timeframe family: completed buckets only, causality, segment resets, hand-worked numbers."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from pydantic import ValidationError

from foxhunt.features import mtf
from foxhunt.features.frame import RowInput
from tests.features.test_market import ohlcv_style, suffix, tiny_rows

PER_TF = len(mtf.SLOTS) // 2


@pytest.fixture(scope="module")
def computed(bar_rows: RowInput, snapshot_rows: RowInput) -> dict[str, tuple[RowInput, np.ndarray]]:
    p = mtf.MtfConfig()
    return {
        "bar": (bar_rows, mtf.compute(bar_rows, p)),
        "snapshot": (snapshot_rows, mtf.compute(snapshot_rows, p)),
    }


def test_slots_and_params() -> None:
    assert len(mtf.SLOTS) == 16 and len(set(mtf.SLOTS)) == 16
    assert mtf.SLOTS[0] == "tf5m_ret_bps" and mtf.SLOTS[PER_TF] == "tf30m_ret_bps"
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", s) for s in mtf.SLOTS)
    assert mtf.NEEDS_BOOK is False
    for name, field in mtf.MtfConfig.model_fields.items():
        assert field.description, f"MtfConfig.{name} has no description"
    with pytest.raises(ValidationError):
        mtf.MtfConfig(min_buckets=20, lookback_buckets=12)
    with pytest.raises(ValidationError):
        mtf.MtfConfig(timeframes_s=(300, 300))
    with pytest.raises(ValidationError):
        mtf.MtfConfig(timeframes_s=(0, 300))


@pytest.mark.parametrize("unit", ["bar", "snapshot"])
def test_shape_dtype_finite_and_bounded(computed: dict, unit: str) -> None:
    inp, x = computed[unit]
    assert x.shape == (len(inp), 16) and x.dtype == np.float32
    assert np.isfinite(x).all() and np.abs(x).max() <= 500.0
    assert (x != 0).any(axis=0).all(), "a slot is 0 on every row"
    for j in (0, PER_TF):
        assert np.abs(x[:, j + 4 : j + 6]).max() <= 1.0  # close and range positions
        assert np.abs(x[:, j + 6]).max() <= 20.0  # trend t-stat


@pytest.mark.parametrize("unit", ["bar", "snapshot"])
def test_prefix_gives_the_same_rows(computed: dict, unit: str) -> None:
    inp, x = computed[unit]
    for k in (1, 11, 999, len(inp) // 2 + 7, len(inp) - 1):
        np.testing.assert_array_equal(mtf.compute(inp.prefix(k), mtf.MtfConfig()), x[:k])


@pytest.mark.parametrize("unit", ["bar", "snapshot"])
def test_only_completed_buckets_of_the_segment(computed: dict, unit: str) -> None:
    inp, x = computed[unit]
    seg_id = np.cumsum(inp.segment_start)
    starts = np.flatnonzero(inp.segment_start)
    for j, tf in enumerate(mtf.MtfConfig().timeframes_s):
        block = x[:, j * PER_TF : (j + 1) * PER_TF]
        bucket = inp.ts // (tf * 1_000_000_000)
        same = (bucket[1:] == bucket[:-1]) & (seg_id[1:] == seg_id[:-1])
        # Inside a bucket nothing changes: the row's own (open) bucket is never seen.
        np.testing.assert_array_equal(block[1:][same], block[:-1][same])
        assert not np.array_equal(block[1:][~same], block[:-1][~same])
        for s in starts:  # the first bucket of a segment sees nothing
            first = (bucket == bucket[s]) & (seg_id == seg_id[s])
            assert (block[first] == 0).all()
    s = int(starts[1])
    np.testing.assert_array_equal(mtf.compute(suffix(inp, s), mtf.MtfConfig()), x[s:])


def test_ohlcv_input_with_missing_prices(bar_rows: RowInput) -> None:
    x = mtf.compute(ohlcv_style(bar_rows), mtf.MtfConfig())
    assert x.shape == (len(bar_rows), 16) and np.isfinite(x).all() and (x != 0).any()


def test_hand_worked_buckets() -> None:
    # 60 s buckets: b0 = rows 0-2, b1 = rows 3-5, b2 = rows 6-7, (180-240 empty), b4 = row 8, b5 = row 9.
    ts = [0, 20, 40, 60, 80, 100, 130, 170, 250, 300]
    y = np.array([0, 1, 2, 1, 3, 2, 5, 4, 6, 6]) * 1e-3
    vol = [1, 2, 3, 0, 4, 0, 10, 0, 5, 0]
    p = mtf.MtfConfig(timeframes_s=(60, 120), lookback_buckets=3, min_buckets=3)
    x = mtf.compute(tiny_rows(100.0 * np.exp(y), volume=vol, ts_s=ts), p).astype(np.float64)
    # stats: ret_bps, mom_z, rv_bps, range_ratio, close_pos, range_pos, trend_tstat, volume_ratio
    e = np.zeros((10, 16))
    e[3:6, [0, 4]] = [20.0, 1.0]  # b0: R = 2e-3 (from the first open), closes at its high
    e[6:8, [0, 4]] = [0.0, 0.0]  # b1: R = C - C(row 2) = 0, closes mid-range
    # After b2 (R = [2, 0, 2], G = [2, 2, 1], C = [2, 2, 4], V = [6, 4, 10], all · 1e-3 but V):
    # t-stat of C on 0..2: β = 1, SSR = 8/3 - 2, se = sqrt(SSR / (1 · 2)) -> √3.
    e[8, :PER_TF] = [
        20.0,
        4 / math.sqrt(8),
        1e4 * math.sqrt(8e-6 / 3),
        math.log(1 / (5 / 3)),
        -1.0,
        2 * 4 / 5 - 1,
        math.sqrt(3),
        math.log(11 / (1 + 20 / 3)),
    ]
    # After b4 (window b1, b2, b4: C = [2, 4, 6], a perfect line -> clipped t-stat; b4 has no range).
    e[9, :PER_TF] = [
        20.0,
        4 / math.sqrt(8),
        1e4 * math.sqrt(8e-6 / 3),
        0.0,
        0.0,
        1.0,
        20.0,
        math.log(6 / (1 + 19 / 3)),
    ]
    # 120 s buckets: B0 = rows 0-5 (R = 2e-3, H 3, L 0, C 2), B1 = rows 6-7 (R = 4 - 2, H 5, L 4, C 4).
    e[6:8, [PER_TF, PER_TF + 4]] = [20.0, 2 * 2 / 3 - 1]
    e[8:10, [PER_TF, PER_TF + 4]] = [20.0, -1.0]
    np.testing.assert_allclose(x, e, rtol=1e-5, atol=1e-6)


def test_a_new_segment_restarts_the_buckets() -> None:
    ts = [0, 30, 60, 90, 120, 150]
    close = 100.0 * np.exp(np.arange(6) * 1e-3)
    p = mtf.MtfConfig(timeframes_s=(60, 120))
    whole = mtf.compute(tiny_rows(close, ts_s=ts), p)
    assert whole[2, 0] == pytest.approx(10.0, rel=1e-5)  # row 2 (ts 60) sees bucket [0, 60)
    split = mtf.compute(tiny_rows(close, ts_s=ts, seg=[2]), p)
    assert (split[:4] == 0).all()  # the new segment's first bucket [60, 120) is still open
    # At ts 120 it is complete: R = y(row 3) - open(row 2) = 1e-3, closing at its high.
    assert split[4, 0] == pytest.approx(10.0, rel=1e-5) and split[4, 4] == 1.0
