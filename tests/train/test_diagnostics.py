"""Diagnostics: device accumulation against NumPy, one host transfer, TensorBoard and history, console."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from foxhunt.agent.stats import q_key
from foxhunt.train.diagnostics import (
    HISTORY_FILE,
    TENSORBOARD_DIR,
    DiagnosticsWriter,
    EpochStats,
    calibration_buckets,
    console_line,
    forward_rows,
    read_events,
    read_history,
    tensorboard_tag,
)


def test_epoch_stats_means_match_numpy() -> None:
    rng = np.random.default_rng(0)
    loss = rng.normal(2.0, 0.5, 37)
    util = rng.dirichlet(np.ones(4), 37)  # [37, 4]
    q = rng.normal(0.0, 1.0, (37, 16))
    mask = rng.random((37, 16)) < 0.4
    stats = EpochStats("cpu")
    for i in range(37):
        stats.add("loss/total", torch.tensor(loss[i], dtype=torch.float32))
        stats.add("experts/util", torch.from_numpy(util[i]))
        stats.add("q/direction/mean", torch.from_numpy(q[i]), weight=torch.from_numpy(mask[i]))
    stats.add("time/epoch_s", 3.0)
    stats.add("time/epoch_s", 5.0)
    got = stats.read()
    assert all(type(v) is float for v in got.values())
    assert got["loss/total"] == pytest.approx(loss.astype(np.float32).astype(np.float64).mean(), rel=1e-12)
    for k in range(4):
        assert got[f"experts/util/{k}"] == pytest.approx(util[:, k].mean(), rel=1e-12)
    assert got["q/direction/mean"] == pytest.approx(q[mask].mean(), rel=1e-12)  # masked mean over the batch
    assert got["time/epoch_s"] == 4.0
    assert set(got) == {"loss/total", "q/direction/mean", "time/epoch_s"} | {
        f"experts/util/{k}" for k in range(4)
    }
    assert stats.read() == {}  # read() starts the next epoch


def test_epoch_stats_reads_back_once_and_never_per_update(monkeypatch: pytest.MonkeyPatch) -> None:
    stats = EpochStats("cpu")
    calls = {"cpu": 0}
    real_cpu = torch.Tensor.cpu

    def counting_cpu(self: torch.Tensor, *a: object, **k: object) -> torch.Tensor:
        calls["cpu"] += 1
        return real_cpu(self, *a, **k)

    def no_item(self: torch.Tensor) -> float:
        raise AssertionError(".item() called")

    monkeypatch.setattr(torch.Tensor, "cpu", counting_cpu)
    monkeypatch.setattr(torch.Tensor, "item", no_item)
    for i in range(50):
        stats.add("loss/total", torch.tensor(float(i)))
        stats.add("grad/total", torch.tensor([1.0, 3.0]), weight=torch.tensor([1.0, 0.0]))
        stats.add("q/order/mean", torch.tensor([1.0, 3.0]), weight=torch.zeros(2))
        stats.add("actions/picked/direction", torch.tensor([0.1, 0.2, 0.3, 0.4]), labels=["S", "H", "L", "F"])
    assert calls["cpu"] == 0
    got = stats.read()
    assert calls["cpu"] == 1
    assert got["loss/total"] == pytest.approx(24.5)
    assert got["grad/total"] == 1.0  # the weighted mean over elements and calls
    assert math.isnan(got["q/order/mean"])  # zero total weight: no observation, not a zero
    assert got["actions/picked/direction/L"] == pytest.approx(0.3)


def test_epoch_stats_does_not_alias_and_refuses_shape_changes() -> None:
    stats = EpochStats("cpu")
    x = torch.tensor(1.0, dtype=torch.float64)
    stats.add("loss/total", x)
    stats.add("loss/total", torch.tensor(3.0))
    assert x.item() == 1.0  # the caller's tensor is not the accumulator
    with pytest.raises(ValueError, match="2 values, first call had 1"):
        stats.add("loss/total", torch.ones(2))
    with pytest.raises(ValueError, match="weighted and unweighted"):
        stats.add("loss/total", torch.tensor(1.0), weight=torch.tensor(1.0))
    assert stats.read()["loss/total"] == 2.0


def test_tensorboard_and_history_written_and_readable(tmp_path: Path) -> None:
    epochs = [
        {
            "loss/total": 1.5,
            "grad/total": 4.0,
            q_key("direction", "mean"): 0.02,
            "sharpe/select": 0.7,
            "oddkey": 9.0,
        },
        {
            "loss/total": 1.25,
            "grad/total": math.nan,
            q_key("direction", "mean"): 0.03,
            "sharpe/select": 0.9,
            "oddkey": 8.0,
        },
    ]
    with DiagnosticsWriter(tmp_path, fold=2) as w:
        for e, stats in enumerate(epochs):
            w.write(e, stats)
        w.event(1, "plateau", "momentum_reset: zeroed 4 params")
    acc = EventAccumulator(str(tmp_path / TENSORBOARD_DIR / "fold_2"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert tags == {"loss/total", "grad/total", "q/direction/mean", "sharpe/select", "misc/oddkey"}
    assert tensorboard_tag("oddkey") == "misc/oddkey"
    for key in ("loss/total", "sharpe/select"):
        got = [(ev.step, ev.value) for ev in acc.Scalars(tensorboard_tag(key))]
        assert got == [(e, pytest.approx(s[key])) for e, s in enumerate(epochs)]
    assert [ev.value for ev in acc.Scalars("misc/oddkey")] == [9.0, 8.0]

    lines = [json.loads(x) for x in (tmp_path / HISTORY_FILE).read_text().splitlines()]
    assert len(lines) == 3 and lines[1]["stats"]["grad/total"] is None  # strict JSON: NaN -> null
    # a resumed run rewrites epoch 1: the last line of each (fold, epoch) wins
    with DiagnosticsWriter(tmp_path, fold=2) as w:
        w.write(1, {**epochs[1], "loss/total": 1.0})
    hist = read_history(tmp_path)
    assert [(r["fold"], r["epoch"]) for r in hist] == [(2, 0), (2, 1)]
    assert hist[1]["stats"]["loss/total"] == 1.0 and math.isnan(hist[1]["stats"]["grad/total"])
    assert [(e["event"], e["message"]) for e in read_events(tmp_path)] == [
        ("plateau", "momentum_reset: zeroed 4 params")
    ]


def test_console_line_shows_the_values() -> None:
    stats = {
        "loss/total": 0.01234,
        "grad/total": 7.891,
        q_key("direction", "mean"): 0.0215,
        q_key("direction", "spread"): 0.00431,
        q_key("magnitude", "mean"): -1.5,
        q_key("magnitude", "spread"): 0.25,
        "atoms/utilisation": 0.625,
        "experts/gate_entropy": 1.987,
        "sharpe/train": 1.234,
        "sharpe/select": -0.456,
        "actions/active_frac": 0.375,
        "time/epoch_s": 12.34,
    }
    line = console_line(3, 17, stats)
    assert "\n" not in line and line.startswith("fold 3 epoch 17")
    for text in (
        "loss 0.0123",
        "grad 7.89",
        "direction 0.0215±0.00431",
        "magnitude -1.5±0.25",
        "atoms 0.625",
        "gate H 1.99",
        "Sharpe train 1.23 select -0.456",
        "active 0.375",
        "12.3 s",
    ):
        assert text in line, (text, line)
    assert console_line(0, 0, {"loss/total": 2.0}) == "fold 0 epoch 0 | loss 2"


# --- learner or gambler: the direction gap against the planted signal ---------------------------


def test_gap_correlation_hand_worked_and_undefined_cases() -> None:
    from foxhunt.train.diagnostics import gap_correlation

    gap = np.array([1.0, 2.0, 3.0, 4.0])
    # x = 2 gap + 1 except the NaN row, which is left out: a perfect correlation
    assert gap_correlation(gap, np.array([3.0, np.nan, 7.0, 9.0])) == pytest.approx(1.0)
    assert gap_correlation(-gap, np.array([3.0, 5.0, 7.0, 9.0])) == pytest.approx(-1.0)
    # corr([1, 2, 3, 4], [1, 3, 2, 4]) = 0.8 (hand: cov 1.0 / var 1.25)
    assert gap_correlation(gap, np.array([1.0, 3.0, 2.0, 4.0])) == pytest.approx(0.8)
    # a network whose gap is constant has no correlation yet: NaN, not 0
    assert math.isnan(gap_correlation(np.full(4, 0.3), np.array([1.0, 3.0, 2.0, 4.0])))


def test_gap_rows_cover_the_selection_block_evenly() -> None:
    from foxhunt.train.diagnostics import gap_rows

    assert gap_rows(10, 15).tolist() == [10, 11, 12, 13]  # every row with a next row
    # 5 of rows 0..999: 0, 249.75, 499.5, 749.25, 999 rounded (half to even)
    assert gap_rows(0, 1001, most=5).tolist() == [0, 250, 500, 749, 999]


def test_calibration_buckets_hand_worked() -> None:
    """Advantages 0..9 with moves 10 x advantage: the quantile edges 0, 4.5, 6.75, 8.1, 8.73, 9 (NumPy's
    linear rule) give buckets {0..4}, {5, 6}, {7, 8}, none, {9}: means 20, 55, 75, NaN, 90; corr 1."""
    adv = np.arange(10.0)
    got = calibration_buckets(adv, 10.0 * adv)
    assert got["rows"] == 10
    np.testing.assert_allclose(got["edges"], [0.0, 4.5, 6.75, 8.1, 8.73, 9.0])
    np.testing.assert_allclose(got["move"], [20.0, 55.0, 75.0, np.nan, 90.0])
    assert got["corr"] == pytest.approx(1.0)
    # an advantage that ranks the moves backwards
    assert calibration_buckets(adv, -adv)["corr"] == pytest.approx(-1.0)
    assert calibration_buckets(np.zeros(0), np.zeros(0))["move"] == []


def test_forward_rows_stay_in_their_segment_and_need_both_prices() -> None:
    """Rows 0..9, two segments (0..4, 5..9), a missing price at row 7, horizon 2: a row counts when
    row + 2 exists, lies in its segment and both prices are finite."""
    mid = np.arange(10.0)
    mid[7] = np.nan
    segment = np.array([0] * 5 + [1] * 5)
    got = forward_rows(mid, segment, np.arange(10), 2)
    assert got.tolist() == [0, 1, 2, 6]  # 3, 4 cross into segment 1; 5 and 7 touch NaN; 8, 9 run out
