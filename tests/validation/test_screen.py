"""The input screen (foxhunt.validation.screen): ranks and rank ICs worked by hand, the forward
window's bounds, and the known answer on the planted markets: the carrier is the strongest column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from foxhunt.backtest.reference import REFERENCE_COLUMN
from foxhunt.config.loader import load_config
from foxhunt.data.config import PlantedSignal
from foxhunt.data.synth import write_synthetic
from foxhunt.dataset.build import get_or_build
from foxhunt.env.market import market_tensors
from foxhunt.validation.folds import make_folds
from foxhunt.validation.screen import average_ranks, forward_moves, rank_ic, screen_columns


def test_average_ranks_share_ties() -> None:
    np.testing.assert_array_equal(average_ranks(np.array([3.0, 1.0, 3.0, 2.0])), [2.5, 0.0, 2.5, 1.0])
    # a column that is mostly the 0 sentinel: its zeros share one rank, not an order by time
    np.testing.assert_array_equal(average_ranks(np.array([0.0, 0.0, 5.0, 0.0])), [1.0, 1.0, 3.0, 1.0])


def test_rank_ic_by_hand() -> None:
    x = np.array([[1.0, 4.0, 7.0], [2.0, 3.0, 7.0], [3.0, 2.0, 7.0], [4.0, 1.0, 7.0]])
    y = np.array([1.0, 3.0, 2.0, 4.0])
    # Spearman without ties: 1 - 6 sum d^2 / (n (n^2 - 1)); d = (0, 1, -1, 0) -> 1 - 12/60 = 0.8
    np.testing.assert_allclose(rank_ic(x, y), [0.8, -0.8, 0.0])
    # a monotone transform of a column leaves its IC as it was
    np.testing.assert_allclose(rank_ic(np.exp(x), y), [0.8, -0.8, 0.0])
    assert (rank_ic(x, np.ones(4)) == 0).all()  # a constant target orders nothing


def test_forward_moves_stay_in_the_rows_and_the_session() -> None:
    mid = np.arange(10, dtype=np.float64) ** 2
    segment = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    rows, move = forward_moves(mid, segment, 1, 9, 2)
    # t + 2 < 9 and in t's session: 1, 2 (not 3, 4: their t + 2 is in session 1), 5, 6
    np.testing.assert_array_equal(rows, [1, 2, 5, 6])
    np.testing.assert_array_equal(move, mid[rows + 2] - mid[rows])
    # nothing at or after hi is read: the rows after it changed, the same answer
    later = mid.copy()
    later[9:] = -1e9
    np.testing.assert_array_equal(forward_moves(later, segment, 1, 9, 2)[1], move)


def test_screen_keeps_the_strongest_columns_in_order() -> None:
    rng = np.random.default_rng(3)
    n = 400
    mid = np.cumsum(rng.normal(size=n))
    move = np.append(mid[5:] - mid[:-5], np.zeros(5))
    x = np.column_stack([rng.normal(size=n), move + 3 * rng.normal(size=n), -move, rng.normal(size=n)])
    s = screen_columns(x, ("a", "b", "c", "d"), mid, np.zeros(n, dtype=np.int64), 0, n, 5, 2)
    assert s.kept == (2, 1)  # -move is perfectly (anti-)ordered with the move: |IC| = 1 first
    assert s.summary() == {"c": -1.0, "b": round(float(s.ic[1]), 4)}
    assert s.rows == n - 5
    # screened on [0, 300): features and prices from row 300 on are never read
    seg = np.zeros(n, dtype=np.int64)
    head = screen_columns(x, ("a", "b", "c", "d"), mid, seg, 0, 300, 5, 2)
    x2, mid2 = x.copy(), mid.copy()
    x2[300:], mid2[300:] = 1e9, -1e9
    again = screen_columns(x2, ("a", "b", "c", "d"), mid2, seg, 0, 300, 5, 2)
    assert again.kept == head.kept and np.array_equal(again.ic, head.ic) and head.rows == 295
    with pytest.raises(ValueError, match="forward window"):
        screen_columns(x, ("a", "b", "c", "d"), mid, np.zeros(n, dtype=np.int64), 0, 5, 5, 2)


@pytest.mark.parametrize(
    ("signal", "alpha"), [(PlantedSignal.IMBALANCE, 4.0), (PlantedSignal.TRADE_FLOW, 1.0)], ids=str
)
def test_the_planted_carrier_is_the_strongest_column(
    signal: PlantedSignal, alpha: float, tmp_path: Path
) -> None:
    """Known answer: on each planted market the screen of every fold's training rows puts the carrier
    (the reference rule's column) first, out of every state feature column."""
    cfg = load_config(
        profile="smoke",
        overrides=[
            "synth.sessions=2",
            "synth.events_per_session=100000",
            f"synth.signal={signal.value}",
            f"synth.alpha={alpha}",
            "folds.n_folds=2",
        ],
    )
    cache = get_or_build(write_synthetic(cfg.synth, tmp_path / "market"), cfg, tmp_path / "cache")
    for fd in make_folds(cache.features(), cache.columns, cfg.folds, int(cache.meta["label_span"])):
        m = market_tensors(cache, fd, vol_window=cfg.env.plan.barrier.vol_window)
        columns = tuple(m.feature_columns)
        lo, hi = int(fd.fold.train_start), int(fd.fold.train.max()) + 1
        s = screen_columns(m.features.numpy(), columns, m.mid.numpy(), m.segment.numpy(), lo, hi, 20, 4)
        assert columns[s.kept[0]] == REFERENCE_COLUMN[signal], s.summary()
