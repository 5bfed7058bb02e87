"""Validation equity in time order (``report.series``) and its plot against the rows' timestamps,
with hand-worked numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from foxhunt.backtest.evaluate import windows
from foxhunt.report import plots
from foxhunt.report.series import equity_series, net_by_row, thin

T0 = np.datetime64("2025-03-03T14:30:00", "ns").astype(np.int64)
MINUTE = 60_000_000_000


def test_net_by_row_puts_each_step_at_the_row_it_ends_on() -> None:
    # rows 10..16, windows of 4 rows: [10, 13] and [13, 16] share row 13; each has 3 steps
    starts, ends = windows(10, 17, 4)
    assert starts.tolist() == [10, 13] and ends.tolist() == [13, 16]
    net = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    written = np.ones_like(net, dtype=bool)
    # rows 11..16 in time order: window 0's steps, then window 1's (not step 0 of both, then step 1 ...)
    assert net_by_row(net, written, starts.numpy(), 10, 17).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    written[1, 2] = False  # the second episode ended a step early: row 16 is marked by nothing
    assert net_by_row(net, written, starts.numpy(), 10, 17).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 0.0]


def test_net_by_row_refuses_a_step_outside_the_rows() -> None:
    with pytest.raises(ValueError, match="outside the rows"):
        net_by_row(np.ones((1, 3)), np.ones((1, 3), dtype=bool), np.array([10]), 10, 12)


def test_thin_keeps_the_last_point() -> None:
    assert thin(10, 4).tolist() == [0, 3, 6, 9]
    assert thin(11, 4).tolist() == [0, 3, 6, 9, 10]
    assert thin(3, 500).tolist() == [0, 1, 2]
    assert thin(0).tolist() == []


def test_equity_series_is_cumulative_against_the_rows_times() -> None:
    ts = T0 + np.arange(20) * MINUTE  # row r at 14:30 + r minutes
    out = equity_series({"agent": np.array([1.0, 2.0, 3.0]), "flat": np.zeros(3)}, ts, lo=10)
    # the first point is row 11 (the first row a step ends on): 14:41
    assert out["time"] == ["2025-03-03T14:41:00.000Z", "2025-03-03T14:42:00.000Z", "2025-03-03T14:43:00.000Z"]
    assert out["agent"] == [1.0, 3.0, 6.0] and out["flat"] == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="different row counts"):
        equity_series({"agent": np.zeros(3), "long": np.zeros(4)}, ts, lo=10)


def test_equity_plot_is_drawn_against_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: dict[str, Any] = {}

    def keep(fig: Any, path: Path) -> Path:
        drawn["fig"] = fig
        return path

    monkeypatch.setattr(plots, "_save", keep)
    times = ["2025-03-03T14:41:00.000Z", "2025-03-03T14:42:00.000Z", "2025-03-04T14:31:00.000Z"]
    assert plots.plot_equity({"time": times, "agent": [1.0, 3.0, 6.0]}, 0, tmp_path / "e.png") is not None
    ax = drawn["fig"].axes[0]
    xs = np.asarray(ax.lines[0].get_xdata())
    assert xs.dtype.kind == "M"  # datetimes, not step indices
    assert xs[-1] == np.datetime64("2025-03-04T14:31:00.000")
    assert "time" in ax.get_xlabel()
