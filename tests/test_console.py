"""The console: the short epoch line, plain timestamped lines, verbosity, and the live bars."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from foxhunt.console import SILENT, Reporter, Verbosity, duration, epoch_line, idle_note, utc_stamp

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")


class Clock:
    """A hand-driven clock: ``clock.t += 12`` is twelve seconds later."""

    def __init__(self, t: float = 1_796_126_400.0) -> None:  # 2026-12-01T12:00:00Z
        self.t = t

    def __call__(self) -> float:
        return self.t


def plain(verbosity: Verbosity = Verbosity.NORMAL, every: float = 30.0) -> tuple[Reporter, list[str], Clock]:
    lines: list[str] = []
    clock = Clock()
    rep = Reporter(verbosity, write=lines.append, stamp=True, plain_every_s=every, clock=clock)
    return rep, lines, clock


def test_epoch_line_reads_as_the_example() -> None:
    line = epoch_line(
        0, 3, 2, 6, select_net=1234.5, trades=16, sharpe=2.14, loss=0.4101, seconds=12.31, eta_s=65.2
    )
    expected = "fold 1/3 epoch 3/6  select net +1,234.50  trades 16  Sharpe 2.1  loss 0.41  12.3 s  ETA 1m05s"
    assert line == expected


def test_epoch_line_stays_short_and_plain_for_large_values() -> None:
    line = epoch_line(
        2,
        3,
        29,
        30,
        select_net=-123_456.78,
        trades=903,
        sharpe=-856.04,
        loss=0.01234,
        seconds=123.4,
        eta_s=7380,
    )
    assert line == (
        "fold 3/3 epoch 30/30  select net -123,456.78  trades 903  Sharpe -856  loss 0.012  123.4 s"
        "  ETA 2h03m"
    )
    assert len(line) <= 105  # the longest counts and values: one line of a wide terminal
    assert not any(word in line for word in ("atoms", "gate", "|", "±"))


def test_epoch_line_marks_missing_values_and_drops_a_spent_eta() -> None:
    nan = float("nan")
    line = epoch_line(0, 1, 0, 1, select_net=nan, trades=0, sharpe=nan, loss=nan, seconds=0.04, eta_s=None)
    assert line == "fold 1/1 epoch 1/1  select net -  trades 0  Sharpe -  loss -  0.0 s"


def test_epoch_line_without_a_selection_backtest_shows_the_training_sharpe() -> None:
    nan = float("nan")  # train.selection = last: nothing is backtested per epoch
    line = epoch_line(
        0,
        3,
        2,
        6,
        select_net=nan,
        trades=nan,
        sharpe=nan,
        loss=0.41,
        seconds=12.3,
        eta_s=65,
        train_sharpe=4.24,
    )
    assert line == "fold 1/3 epoch 3/6  train Sharpe 4.2  loss 0.41  12.3 s  ETA 1m05s"


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.4, "0s"), (45, "45s"), (65, "1m05s"), (3599, "59m59s"), (7380, "2h03m")]
)
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_utc_stamp() -> None:
    assert utc_stamp(0) == "1970-01-01T00:00:00Z"
    assert utc_stamp(1_796_126_400.9) == "2026-12-01T12:00:00Z"


def test_plain_lines_are_stamped_and_progress_is_throttled() -> None:
    rep, lines, clock = plain(every=30.0)
    with rep.task("features", total=4) as task:
        for _ in range(4):
            clock.t += 20  # a line at most every 30 s: after steps 2 and 4 (40 s and 80 s)
            task.advance()
    rep.say("fold 1/3 epoch 1/6")
    assert all(STAMP.match(x) for x in lines)
    body = [x[len("2026-12-01T12:00:00Z ") :] for x in lines]
    # After 2 steps in 40 s: 2 left at 20 s each.
    assert body == [
        "features ...",
        "features: 2/4, ETA 40s",
        "features: 4/4",
        "features: done 4/4 in 1m20s",
        "fold 1/3 epoch 1/6",
    ]
    assert lines[0].startswith("2026-12-01T12:00:00Z") and lines[-1].startswith("2026-12-01T12:01:20Z")


def test_quiet_shows_nothing_and_verbose_adds_the_details() -> None:
    for level, expected in ((Verbosity.QUIET, 0), (Verbosity.NORMAL, 3), (Verbosity.VERBOSE, 4)):
        rep, lines, _ = plain(level)
        with rep.task("alpha"):
            rep.say("short")
            rep.detail("long | diagnostic | line")
        assert len(lines) == expected, (level, lines)
        assert any("long | diagnostic" in x for x in lines) == (level is Verbosity.VERBOSE)
    assert SILENT.verbosity is Verbosity.QUIET


def test_track_counts_every_item_and_no_done_line_after_an_error() -> None:
    rep, lines, _ = plain()
    seen = []
    for k in rep.track([1, 2, 3], "folds"):
        if k == 2:
            continue  # a skipped item still counts as done
        seen.append(k)
    assert seen == [1, 3] and lines[-1].endswith("folds: done 3/3 in 0s")
    rep, lines, _ = plain()
    with pytest.raises(RuntimeError), rep.task("leak guard"):
        raise RuntimeError("stopped")
    assert [x.split(" ", 1)[1] for x in lines] == ["leak guard ..."]


def test_eta_is_the_mean_pace_times_what_is_left() -> None:
    rep, _, clock = plain()
    with rep.task("training", total=10) as task:
        assert task.eta_s is None  # nothing done yet
        clock.t += 30
        task.advance(3)
        assert task.eta_s == pytest.approx(70.0)  # 10 s per epoch, 7 left
        task.update(total=8)  # a resumed run: fewer epochs to go
        assert task.eta_s == pytest.approx(50.0)


def test_live_bars_on_a_terminal_print_lines_above_and_vanish() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100)
    rep = Reporter.for_stderr(Verbosity.NORMAL, console)
    assert rep.live
    with rep.task("training", total=2) as task:
        rep.say("fold 1/1 epoch 1/2  val net +5.00")
        task.advance(2)
    assert rep._bars is None  # the display is stopped once its last task ends
    text = buf.getvalue()
    assert "fold 1/1 epoch 1/2  val net +5.00" in text and "training: done 2/2" in text
    assert not STAMP.match(text)  # a terminal gets no timestamps


def test_not_a_terminal_means_stamped_lines() -> None:
    console = Console(file=io.StringIO(), force_terminal=False)
    rep = Reporter.for_stderr(Verbosity.NORMAL, console)
    assert not rep.live and rep.stamp


def test_idle_note_says_where_the_agent_did_not_trade() -> None:
    assert idle_note([3, 1, 7]) == ""
    assert idle_note([0, 0, 0]) == "; the agent never traded (0 trades in 3 folds)"
    assert idle_note([0]) == "; the agent never traded (0 trades in 1 fold)"
    assert idle_note([4, 0, 2]) == "; the agent did not trade in fold 1 (1 of 3)"
    assert idle_note([0, 5, 0], "seed") == "; the agent did not trade in seeds 0, 2 (2 of 3)"
