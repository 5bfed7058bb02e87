"""The ``snapshot`` family: timing and touch slots by hand, causality, the segment reset, and empty or
missing books."""

from __future__ import annotations

import numpy as np
import pytest

from foxhunt.features import snapshot
from tests.features.test_ofi import make_rows, ohlcv_rows, rows_from, second_segment_start

ROW_UNITS = ["bar_rows", "snapshot_rows"]
COL = {name: i for i, name in enumerate(snapshot.SLOTS)}


@pytest.mark.parametrize("fixture", ROW_UNITS)
def test_width_and_finite(fixture: str, request: pytest.FixtureRequest) -> None:
    inp = request.getfixturevalue(fixture)
    out = snapshot.compute(inp, snapshot.SnapshotConfig())
    assert len(snapshot.SLOTS) == 6 and snapshot.NEEDS_BOOK
    assert out.shape == (len(inp), len(snapshot.SLOTS)) and out.dtype == np.float32
    assert np.isfinite(out).all()
    assert ((out != 0).mean(axis=0) > 0.5).all()  # every slot is live on real data


@pytest.mark.parametrize("fixture", ROW_UNITS)
def test_prefix_gives_the_same_rows(fixture: str, request: pytest.FixtureRequest) -> None:
    inp = request.getfixturevalue(fixture)
    full = snapshot.compute(inp, snapshot.SnapshotConfig())
    for k in (1, 2, 37, len(inp) // 3, second_segment_start(inp) + 5, len(inp) - 1):
        assert np.array_equal(snapshot.compute(inp.prefix(k), snapshot.SnapshotConfig()), full[:k]), k


@pytest.mark.parametrize("fixture", ROW_UNITS)
def test_segment_start_restarts_lags_and_rates(fixture: str, request: pytest.FixtureRequest) -> None:
    inp = request.getfixturevalue(fixture)
    s = second_segment_start(inp)
    full = snapshot.compute(inp, snapshot.SnapshotConfig())
    assert np.array_equal(
        snapshot.compute(rows_from(inp, s), snapshot.SnapshotConfig())[:500], full[s:][:500]
    )
    assert full[s, COL["time_since_update"]] == 0 and full[s, COL["microprice_drift"]] == 0


def test_times_and_event_rate_by_hand() -> None:
    book = dict(bid_px=[[100.0]] * 4, ask_px=[[100.25]] * 4, bid_sz=[[10]] * 4, ask_sz=[[10]] * 4)
    inp = make_rows(**book, ts_s=[0, 1, 3, 4], last_trade_s=[-1, 0.5, 0.5, 4], segment_start=[1, 0, 0, 1])
    out = snapshot.compute(inp, snapshot.SnapshotConfig(rate_span=1))
    since_trade = [0, np.log1p(0.5), np.log1p(2.5), 0]
    np.testing.assert_allclose(out[:, COL["time_since_trade"]], since_trade, rtol=1e-6)
    # row 3 starts a segment: no previous update there
    np.testing.assert_allclose(out[:, COL["time_since_update"]], [0, np.log1p(1), np.log1p(2), 0], rtol=1e-6)
    # rate_span = 1: the last inter-arrival time; undefined before a segment's second state
    np.testing.assert_allclose(out[:, COL["event_rate"]], [0, np.log1p(1), np.log1p(0.5), 0], rtol=1e-6)


def test_spread_imbalance_and_microprice_drift_by_hand() -> None:
    inp = make_rows(
        [[100.0], [100.0], [100.25]], [[100.25], [100.25], [100.5]], [[30], [10], [10]], [[10], [30], [10]]
    )
    out = snapshot.compute(inp, snapshot.SnapshotConfig(drift_rows=1))
    assert out[0, COL["spread_bps"]] == pytest.approx(0.25 / 100.125 * 1e4, rel=1e-6)
    np.testing.assert_allclose(out[:, COL["l1_imbalance"]], [0.5, -0.5, 0])
    # microprices 100.1875, 100.0625, 100.375 -> drift (ticks) 0, -0.5, +1.25
    np.testing.assert_allclose(out[:, COL["microprice_drift"]], [0, -0.5, 1.25], rtol=1e-6)
    # a window longer than the segment gives 0
    assert not snapshot.compute(inp, snapshot.SnapshotConfig(drift_rows=3))[:, COL["microprice_drift"]].any()


def test_empty_levels_and_one_sided_books_are_finite() -> None:
    nan = np.nan
    inp = make_rows([[100.0, nan], [nan, nan]], [[nan, nan], [nan, nan]], [[5, 0], [0, 0]], [[0, 0], [0, 0]])
    out = snapshot.compute(inp, snapshot.SnapshotConfig(drift_rows=1))
    assert np.isfinite(out).all()
    assert out[0, COL["spread_bps"]] == 0 and out[0, COL["l1_imbalance"]] == 1
    assert out[1, COL["l1_imbalance"]] == 0 and out[1, COL["microprice_drift"]] == 0


def test_ohlcv_input_gives_all_zeros() -> None:
    inp = ohlcv_rows()
    out = snapshot.compute(inp, snapshot.SnapshotConfig())
    assert out.shape == (len(inp), len(snapshot.SLOTS)) and not out.any()
