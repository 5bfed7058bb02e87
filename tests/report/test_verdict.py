"""The verdict block at the top of the report, the title, the alpha plots and the narrow-window
layout, from fabricated summaries (``test_html.full_summary``), rendered without the per-fold plots."""

from __future__ import annotations

import base64
import copy
import re
from pathlib import Path
from typing import Any

import pytest

from foxhunt.report.html import alpha_plots, render
from foxhunt.report.verdict import leak_line, warnings
from tests.report.test_html import StrictParser, full_summary, parse, write_alpha_pngs

LEAK_VERDICT = (
    "Leak guard: clean: 106 columns x 5,467 rows unchanged before 4 cuts (future prices, sizes, event "
    "times and counts perturbed); fold normalisers fitted on training rows only and purge >= label span "
    "+ embargo in 2 folds"
)


def verdict_rows(p: StrictParser) -> dict[str, str]:
    return {cells[0]: cells[1] for sec, _, cells in p.rows if sec == "verdict" and len(cells) == 2}


def report(tmp_path: Path, summary: dict[str, Any]) -> tuple[str, StrictParser]:
    """The page without its per-fold plots (test_html draws those): the verdict is text."""
    path = tmp_path / "report.html"
    path.write_text(render(summary, {}, None, alpha_plots(summary, tmp_path)))
    return path.read_text(), parse(path)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, StrictParser]:
    run_dir = tmp_path_factory.mktemp("verdict")
    write_alpha_pngs(run_dir)
    summary = full_summary()
    summary["leaks"]["verdict"] = LEAK_VERDICT
    summary["folds"][1]["trades"] = 0  # fold 1's agent never traded
    return report(run_dir, summary)


def test_verdict_block_comes_first_and_answers_each_question(page: tuple[str, StrictParser]) -> None:
    html, p = page
    assert p.headings[1] == "Verdict"  # right under the title
    assert html.index('id="verdict"') < html.index('id="run"')
    rows = verdict_rows(p)
    assert list(rows) == ["Data", "Leak guard", "Alpha check", "Agent vs baselines", "Best vs last epoch",
                          "Anomaly guard"]
    data = rows["Data"]
    assert data.startswith("synthetic market: synthetic ES market (seed 7, planted alpha 1.0)")
    assert "120,000 rows (5s bars rows)" in data and "instrument ESZ6" in data
    # the guard's own line, once, without its "Leak guard:" prefix
    assert rows["Leak guard"] == LEAK_VERDICT.removeprefix("Leak guard: ")
    assert rows["Alpha check"] == "Verdict: signal at 95% (best: lightgbm AUC 0.561 at horizon 10)."
    # the summary's counts: beats flat in 1 of 2 folds, long in 2 of 2; means of the folds
    versus = rows["Agent vs baselines"]
    assert "flat in 1 of 2; long (per plan) in 2 of 2; buy and hold in 1 of 2 folds" in versus
    assert "agent $589.10, flat $0.00, long (per plan) -$12.50, buy and hold -$8.00" in versus
    best = rows["Best vs last epoch"]
    assert "fold 0: best = epoch 1 (2,000 selection rows), fold 1: best = epoch 2" in best
    assert "reported $589.10, last epoch $489.10" in best  # last epoch: net - 100 in each fold
    # every fold records its selection period: the rule, its rows, and no claim of optimism
    assert "validation never seen before the end" in best and "out of sample" in best
    assert "optimistic" not in best
    assert rows["Anomaly guard"].startswith("flagged epochs") and "fold 1: exploding loss at epoch 2" in (
        rows["Anomaly guard"]
    )


def test_a_summary_that_picked_on_validation_says_its_numbers_are_optimistic(tmp_path: Path) -> None:
    """A metrics.json written before the selection period (no ``selection`` per fold, the old rule):
    its best epoch was picked on the validation period it reports, and the report says so."""
    summary = full_summary()
    for f in summary["folds"]:
        del f["selection"]
        f["best_rule"] = "the epoch with the highest validation Sharpe (annualised)"
    _, p = report(tmp_path, summary)
    best = verdict_rows(p)["Best vs last epoch"]
    assert "highest validation Sharpe" in best and "optimistic" in best and "out of sample" not in best


def test_a_fold_where_the_agent_never_traded_is_a_warning(page: tuple[str, StrictParser]) -> None:
    html, p = page
    found = re.findall(r'<p class="warning"><b>WARNING</b>: ([^<]*)</p>', html)
    assert any("never traded in fold 1" in w for w in found), found
    assert not any("never traded in fold 0" in w for w in found)
    # and its row in the metrics table is marked
    row = next(attrs for sec, attrs, cells in p.rows if sec == "metrics" and cells[:1] == ["1"])
    assert row.get("class") == "implausible"  # implausible outranks idle (fold 1 is both)


def test_zero_trades_is_the_only_thing_that_warns_of_idleness() -> None:
    folds = [{"fold": 0, "trades": 3}, {"fold": 1, "trades": 0, "val_rows": 2000}, {"fold": 2}]
    out = warnings(folds)
    assert len(out) == 1 and out[0].startswith("the agent never traded in fold 1 (2,000 validation rows)")


def test_best_and_last_epoch_are_shown_side_by_side(page: tuple[str, StrictParser]) -> None:
    _, p = page
    rows = [cells for sec, _, cells in p.rows if sec == "metrics" and len(cells) == 9 and cells[0] in "01"]
    fold0 = next(r for r in rows if r[0] == "0")
    assert fold0[:5] == ["0", "best, epoch 1", "$1,234.50", "1.23", "42"]
    assert fold0[5:] == ["last, epoch 2", "$1,134.50", "0.50", "40"]


def test_title_names_the_data_not_the_profile(tmp_path: Path) -> None:
    summary = copy.deepcopy(full_summary())
    summary["folds"] = summary["folds"][:1]
    summary["data"].update(
        synthetic=False,
        name="esh4-glbx-mdp3-20231225.mbo.dbn.zst",
        files=["esh4-glbx-mdp3-20231225.mbo.dbn.zst"],
        instrument="ESH4",
    )
    html, p = report(tmp_path, summary)
    title = p.headings[0]
    assert title == "foxhunt run report: esh4-glbx-mdp3-20231225.mbo.dbn.zst (ESH4)"
    assert "smoke" not in title.lower() and "smoke" not in re.search(r"<title>(.*)</title>", html)[1]
    assert verdict_rows(p)["Data"].startswith("1 DBN file: esh4-glbx-mdp3-20231225.mbo.dbn.zst")
    # the profile is still stated, as a setting, in the Run section
    run = {c[0]: c[1] for sec, _, c in p.rows if sec == "run"}
    assert run["settings profile"] == "smoke"


def test_alpha_plots_are_embedded_byte_for_byte(page: tuple[str, StrictParser], tmp_path: Path) -> None:
    _, p = page
    write_alpha_pngs(tmp_path)
    want = {base64.b64encode((tmp_path / "alpha" / f"{n}.png").read_bytes()).decode() for n in
            ("alpha_decay", "alpha_importance")}
    got = {s.partition(",")[2] for s in p.srcs}
    assert want <= got


def test_missing_alpha_plot_is_said(tmp_path: Path) -> None:
    summary = full_summary()
    summary["folds"] = summary["folds"][:1]
    html, _ = report(tmp_path, summary)  # the PNGs were never written
    assert "Alpha plot alpha/alpha_decay.png not found." in html


def test_a_reference_baseline_gets_its_rows_and_its_count(tmp_path: Path) -> None:
    summary = full_summary()
    for k, fold in enumerate(summary["folds"]):
        fold["baselines"]["reference"] = {"net_pnl": 5000.0 if k == 0 else -100.0, "trades": 7}
    _, p = report(tmp_path, summary)
    rows = [cells for sec, _, cells in p.rows if sec == "metrics"]
    i = next(i for i, cells in enumerate(rows) if cells and cells[0] == "0")
    named = [rows[i][1], *(cells[0] for cells in rows[i + 1 : i + 5])]
    assert named == ["agent (best, epoch 1)", "flat", "long (per plan)", "buy and hold", "reference"]
    assert rows[i + 4][1] == "$5,000.00"
    assert "reference in 1 of 2" in verdict_rows(p)["Agent vs baselines"]


def test_a_stopped_run_reports_where_it_stopped(tmp_path: Path) -> None:
    summary = full_summary()
    summary["folds"] = []
    summary["stopped"] = {"where": "fold 0 epoch 3", "diagnosis": "loss/total is nan"}
    html, p = report(tmp_path, summary)
    anomaly = verdict_rows(p)["Anomaly guard"]
    assert anomaly.startswith("STOPPED at fold 0 epoch 3: loss/total is nan (0 folds completed before it)")
    assert "No fold completed" in html


@pytest.mark.parametrize(
    ("leaks", "want"),
    [
        ({"passed": True, "columns_checked": 48}, "clean: no feature at or before a cut changed"),
        ({"passed": False, "leaking_columns": ["ofi_fwd"]}, "LEAK: look-ahead found in ofi_fwd"),
        ({"passed": False, "verdict": "Leak guard: LEAK: look-ahead in x"}, "LEAK: look-ahead in x"),
        (None, "not run"),
    ],
)
def test_leak_line(leaks: dict[str, Any] | None, want: str) -> None:
    assert re.sub(r"<[^>]+>", "", leak_line(leaks)).startswith(want)


def test_wide_tables_scroll_in_their_own_box(page: tuple[str, StrictParser]) -> None:
    html, _ = page
    assert html.count("<table") == html.count('<div class="scroll"><table')
    assert re.search(r"\.scroll \{ overflow-x: auto;", html)
    assert "img { max-width: 100%; height: auto;" in html
