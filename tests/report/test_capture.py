"""The report's edge capture (agent vs the reference rule) and its direction-gap diagnostic (issue 22)."""

from __future__ import annotations

from pathlib import Path

from foxhunt.report.html import write_report
from tests.report.test_html import _metrics, full_summary, parse


def _with_rule(summary: dict, rules: list[float], capture: list[float | None], qgap: bool) -> dict:
    for f, rule, cap in zip(summary["folds"], rules, capture, strict=True):
        f["baselines"]["rule"] = _metrics(rule, 2.0, 0.02, 30, 0.6, 0.3)
        f["capture"] = cap
        for r in f["history"]:
            r["qgap_corr"] = 0.1 * (r["epoch"] + 1) if qgap else float("nan")
    return summary


def test_capture_table_and_rule_column(tmp_path: Path) -> None:
    # fold 0: agent 1,234.50 of the rule's 4,938 (25%); fold 1: the rule lost, capture undefined
    summary = _with_rule(full_summary(), [4_938.0, -100.0], [0.25, None], qgap=True)
    p = parse(write_report(tmp_path, summary))
    rows = [cells for sec, _, cells in p.rows if sec == "metrics"]
    i = rows.index(
        ["fold", "agent net PnL", "reference rule", "flat", "long (per plan)", "buy and hold",
         "capture (agent / rule)", "in the run's capture"]
    )  # fmt: skip
    assert rows[i + 1] == ["0", "$1,234.50", "$4,938.00", "$0.00", "-$12.50", "-$8.00", "25%", "yes"]
    why = "no: the reference rule lost or broke even (net <= 0): no edge to capture"
    assert rows[i + 2] == ["1", "-$56.30", "-$100.00", "$0.00", "-$12.50", "-$8.00", "n/a", why]
    # the rule is a policy row of the main metrics table too (after the baselines every run has)
    policies = [cells[1] if cells[0] == "0" else cells[0] for cells in rows[1:6]]
    assert policies == ["agent (best, epoch 1)", "flat", "long (per plan)", "buy and hold", "reference rule"]
    text = (tmp_path / "report.html").read_text()
    assert "Edge capture" in text and "n/a where the rule made nothing or lost" in text
    # Below the table: the kept folds' capture (fold 0 alone: 25%), their median, the excluded fold
    # with both PnLs, and every fold summed (1,178.20 / 4,838 = 24%), labelled as the old capture.
    assert "Capture over the folds where the rule made money (0): <b>25%</b>" in text
    assert "median of their captures 25%." in text
    assert "Excluded: fold 1 (the reference rule lost or broke even" in text
    assert "agent -$56.30, rule -$100.00)" in text
    assert "(the capture reported before issue 58): 24%." in text
    # the verdict block names the rule among the baselines and the run's capture
    summary["summary"]["capture"] = (1_234.5 - 56.3) / (4_938.0 - 100.0)
    text = write_report(tmp_path, summary).read_text()
    # fold 0 below the rule (1,234.50 < 4,938), fold 1 above it (-56.30 > -100)
    assert "reference rule in <b>1 of 2</b>" in text
    assert "Edge capture (agent / rule, all folds): 24%." in text
    # A summary since issue 58 (job.py): the kept folds' capture, the median, the excluded fold, the old sum.
    summary["summary"] |= {
        "capture": 0.25,
        "capture_median": 0.25,
        "capture_excluded": [{"fold": 1, "excluded": "rule_lost"}],
        "capture_all_folds": (1_234.5 - 56.3) / (4_938.0 - 100.0),
    }
    text = write_report(tmp_path, summary).read_text()
    assert (
        "Edge capture (agent / rule over the folds where the rule made money): 25%, median per fold 25%, "
        "fold 1 excluded (the rule made &lt;= 0 or was absent); over every fold (as reported before "
        "issue 58): 24%."
    ) in text


def test_direction_gap_per_fold_and_epoch(tmp_path: Path) -> None:
    p = parse(write_report(tmp_path, _with_rule(full_summary(), [1.0, 1.0], [None, None], qgap=True)))
    rows = [cells for sec, _, cells in p.rows if sec == "diagnostics"]
    i = rows.index(["fold", "epoch 0", "epoch 1", "epoch 2"])
    assert rows[i + 1] == ["0", "0.100", "0.200", "0.300"]


def test_no_planted_signal_says_na_and_no_rule_says_so(tmp_path: Path) -> None:
    """Real data: the planted signal is unknown, so the gap's correlation is n/a, never a number."""
    summary = full_summary()
    for f in summary["folds"]:
        for r in f["history"]:
            r["qgap_corr"] = float("nan")
    p = parse(write_report(tmp_path, summary))
    text = (tmp_path / "report.html").read_text()
    assert "n/a: this market has no known planted signal" in text
    assert not any(cells and cells[0] == "epoch 0" for sec, _, cells in p.rows if sec == "diagnostics")
    assert "No reference rule in this run" in text


def test_entry_calibration_per_fold_on_training_and_validation_rows(tmp_path: Path) -> None:
    """The reported policy's entry advantage against the move that followed: one line per fold and
    part, a money cell per quantile bucket (n/a where a bucket was empty) and the correlation."""
    summary = full_summary()
    for f in summary["folds"]:
        part = {"rows": 1_200, "horizon": 20, "corr": 0.21, "move": [2.0, 14.5, 35.0, float("nan"), 80.25]}
        val = {**part, "corr": -0.05, "move": [12.0, 22.0, 30.0, -13.0, -81.0]}
        f["calibration"] = {"train": part, "validation": val}
    p = parse(write_report(tmp_path, summary))
    rows = [cells for sec, _, cells in p.rows if sec == "diagnostics"]
    i = rows.index(["fold", "rows", "n", "below the median", "50-75%", "75-90%", "90-97%", "top 3%", "corr"])
    assert rows[i + 1] == ["0", "train", "1,200", "$2.00", "$14.50", "$35.00", "n/a", "$80.25", "0.210"]
    val = ["$12.00", "$22.00", "$30.00", "-$13.00", "-$81.00"]
    assert rows[i + 2] == ["0", "validation", "1,200", *val, "-0.050"]
    assert "the next 20 rows' mid" in (tmp_path / "report.html").read_text()


def test_a_summary_without_calibration_says_so(tmp_path: Path) -> None:
    text = write_report(tmp_path, full_summary()).read_text()
    assert "n/a: this summary predates the calibration" in text
