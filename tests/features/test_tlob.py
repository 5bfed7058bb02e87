"""The ``tlob`` family: book shape by hand (shares, cumulative imbalances, slopes, gaps), causality,
the segment reset, and empty or missing books."""

from __future__ import annotations

import numpy as np
import pytest

from foxhunt.features import tlob
from foxhunt.features.frame import RowInput
from tests.features.test_ofi import TICK, make_rows, ohlcv_rows, rows_from, second_segment_start

ROW_UNITS = ["bar_rows", "snapshot_rows"]
COL = {name: i for i, name in enumerate(tlob.SLOTS)}
L = 10


def _book(bid_sz: list[float], ask_sz: list[float], bid_step: float = 1, ask_step: float = 1) -> RowInput:
    """One row, 10 levels; levels with size 0 are empty (NaN price)."""
    bsz, asz = np.array([bid_sz], float), np.array([ask_sz], float)
    bpx = 100.0 - TICK * bid_step * np.arange(L)[None, :]
    apx = 100.25 + TICK * ask_step * np.arange(L)[None, :]
    bpx[bsz == 0] = np.nan
    apx[asz == 0] = np.nan
    return make_rows(bpx, apx, bsz, asz)


@pytest.mark.parametrize("fixture", ROW_UNITS)
def test_width_and_finite(fixture: str, request: pytest.FixtureRequest) -> None:
    inp = request.getfixturevalue(fixture)
    out = tlob.compute(inp, tlob.TlobConfig())
    assert len(tlob.SLOTS) == 16 and len(set(tlob.SLOTS)) == 16 and tlob.NEEDS_BOOK
    assert out.shape == (len(inp), len(tlob.SLOTS)) and out.dtype == np.float32
    assert np.isfinite(out).all()
    # shares are fractions of a side's depth
    shares = out[:, [COL["bid_share_l0"], COL["bid_share_l1_2"], COL["bid_share_l3_5"]]]
    assert (shares >= 0).all() and (shares.sum(axis=1) <= 1 + 1e-6).all()
    assert (np.abs(out[:, COL["imbalance_1"] : COL["imbalance_10"] + 1]) <= 1).all()


@pytest.mark.parametrize("fixture", ROW_UNITS)
def test_prefix_gives_the_same_rows(fixture: str, request: pytest.FixtureRequest) -> None:
    inp = request.getfixturevalue(fixture)
    full = tlob.compute(inp, tlob.TlobConfig())
    for k in (1, 2, 37, len(inp) // 3, second_segment_start(inp) + 5, len(inp) - 1):
        assert np.array_equal(tlob.compute(inp.prefix(k), tlob.TlobConfig()), full[:k]), k


@pytest.mark.parametrize("fixture", ROW_UNITS)
def test_segment_start_restarts_the_trailing_depth(fixture: str, request: pytest.FixtureRequest) -> None:
    inp = request.getfixturevalue(fixture)
    s = second_segment_start(inp)
    full = tlob.compute(inp, tlob.TlobConfig())
    assert np.array_equal(tlob.compute(rows_from(inp, s), tlob.TlobConfig())[:500], full[s:][:500])
    assert full[s, COL["depth_rel"]] == 0  # a fresh mean equals the row's own depth


def test_depth_shares_and_cumulative_imbalance_by_hand() -> None:
    bid = [10, 20, 30, 40, 0, 0, 0, 0, 0, 0]  # 100
    ask = [30, 10, 10, 10, 10, 10, 10, 10, 10, 80]  # 190
    out = tlob.compute(_book(bid, ask), tlob.TlobConfig())[0]
    np.testing.assert_allclose(
        out[[COL["bid_share_l0"], COL["bid_share_l1_2"], COL["bid_share_l3_5"]]], [0.1, 0.5, 0.4], rtol=1e-6
    )
    np.testing.assert_allclose(
        out[[COL["ask_share_l0"], COL["ask_share_l1_2"], COL["ask_share_l3_5"]]],
        [30 / 190, 20 / 190, 30 / 190],
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        out[[COL["imbalance_1"], COL["imbalance_3"], COL["imbalance_5"], COL["imbalance_10"]]],
        [(10 - 30) / 40, (60 - 50) / 110, (100 - 70) / 170, (100 - 190) / 290],
        rtol=1e-6,
    )


def test_slope_gap_and_depth_rel_by_hand() -> None:
    # bid: 10, 20, 30 contracts two ticks apart; ask: 10 levels of 10, contiguous.
    bid = [10, 20, 30, 0, 0, 0, 0, 0, 0, 0]
    ask = [10] * 10
    out = tlob.compute(_book(bid, ask, bid_step=2), tlob.TlobConfig(depth_span=1))[0]
    # cumulative bid depth 10, 30, 60 at 0, 2, 4 ticks: slope 12.5 contracts per tick;
    # mean depth per level (depth_span = 1: this row) = 160 / 20 = 8 -> 12.5 / 8
    assert out[COL["bid_slope"]] == pytest.approx(12.5 / 8)
    assert out[COL["ask_slope"]] == pytest.approx(10 / 8)  # 10 contracts per tick
    assert out[COL["bid_gap"]] == pytest.approx(1.0) and out[COL["ask_gap"]] == 0
    assert out[COL["depth_rel"]] == 0
    # a flat profile has no curvature; a profile growing like the square of the level is convex
    assert tlob.compute(_book([10] * 10, [10] * 10), tlob.TlobConfig())[0, COL["convexity"]] == pytest.approx(
        0, abs=1e-6
    )
    sq = [1 + i * i for i in range(L)]
    assert tlob.compute(_book(sq, sq), tlob.TlobConfig())[0, COL["convexity"]] > 1


def test_depth_rel_tracks_the_trailing_mean() -> None:
    sizes = np.array([[10.0] * L, [10.0] * L, [20.0] * L])
    px_b = 100.0 - TICK * np.arange(L)[None, :].repeat(3, 0)
    px_a = 100.25 + TICK * np.arange(L)[None, :].repeat(3, 0)
    out = tlob.compute(make_rows(px_b, px_a, sizes, sizes), tlob.TlobConfig(depth_span=2))
    # totals 200, 200, 400; EMA_2: 200, 200, 300 -> log(400 / 300) at the third row
    np.testing.assert_allclose(out[:, COL["depth_rel"]], [0, 0, np.log(4 / 3)], rtol=1e-6)


def test_empty_levels_and_one_sided_books_are_finite() -> None:
    one_sided = _book([10, 20, 0, 0, 0, 0, 0, 0, 0, 0], [0] * 10)
    out = tlob.compute(one_sided, tlob.TlobConfig())[0]
    assert np.isfinite(out).all()
    assert out[COL["ask_share_l0"]] == 0 and out[COL["imbalance_1"]] == 1 and out[COL["ask_slope"]] == 0
    empty = tlob.compute(_book([0] * 10, [0] * 10), tlob.TlobConfig())
    assert np.isfinite(empty).all() and not empty.any()


def test_ohlcv_input_gives_all_zeros() -> None:
    inp = ohlcv_rows()
    out = tlob.compute(inp, tlob.TlobConfig())
    assert out.shape == (len(inp), len(tlob.SLOTS)) and not out.any()
