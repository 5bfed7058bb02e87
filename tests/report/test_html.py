"""The run report: one self-contained HTML file with every section, built from a fabricated summary."""

from __future__ import annotations

import base64
import copy
import math
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pytest

from foxhunt.errors import FoxhuntError
from foxhunt.report import ReportInputError, write_report
from foxhunt.report.html import duration, money, pct
from foxhunt.report.plots import shares
from foxhunt.report.schema import BEST_RULE

HEADINGS = (
    "Verdict",
    "Run",
    "Data",
    "Leak guard",
    "Alpha check",
    "Validation metrics",
    "Training curves",
    "Validation equity",
    "Action distributions",
    "Diagnostics",
)
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
EVIL = "<script>alert(1)</script>"


class StrictParser(HTMLParser):
    """Collects headings, rows (cell texts, by section), images and links; records every tag that is
    closed out of order or left open, which html.parser itself tolerates silently."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[str] = []
        self.headings: list[str] = []
        self.srcs: list[str] = []
        self.hrefs: list[str] = []
        self.rows: list[tuple[str, dict[str, str | None], list[str]]] = []  # (section, tr attrs, cells)
        self.section = ""
        self._heading: list[str] | None = None
        self._row: tuple[dict[str, str | None], list[str]] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append(tag)
        if tag not in VOID:
            self.stack.append(tag)
        if tag == "section":
            self.section = a.get("id") or ""
        elif tag in ("h1", "h2", "h3"):
            self._heading = []
        elif tag == "tr":
            self._row = (a, [])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.srcs.append(a.get("src") or "")
        if "href" in a:
            self.hrefs.append(a["href"] or "")
        if "src" in a and tag != "img":
            self.srcs.append(a["src"] or "")

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()
        if tag in ("h1", "h2", "h3") and self._heading is not None:
            self.headings.append("".join(self._heading).strip())
            self._heading = None
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row[1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append((self.section, *self._row))
            self._row = None

    def handle_data(self, data: str) -> None:
        for buf in (self._heading, self._cell):
            if buf is not None:
                buf.append(data)


def parse(path: Path) -> StrictParser:
    p = StrictParser()
    p.feed(path.read_text())
    p.close()
    assert p.errors == []
    assert p.stack == [], f"unclosed tags {p.stack}"
    return p


def _metrics(net: float, sharpe: float, dd: float, trades: int, win: float, active: float) -> dict[str, Any]:
    return {
        "net_pnl": net,
        "gross_pnl": net + 10.0,
        "costs": 10.0,
        "sharpe_annual": sharpe,
        "bars_per_year": 98280.0,
        "max_drawdown": dd,
        "trades": trades,
        "win_rate": win,
        "active_frac": active,
        "implausible": False,
    }


def minutes(start: str, n: int) -> list[str]:
    """``n`` ISO-8601 UTC times a minute apart from ``start``, as ``report.series`` writes them."""
    times = np.datetime64(start, "ms") + np.arange(n) * np.timedelta64(60_000, "ms")
    return [f"{t}Z" for t in np.datetime_as_string(times, unit="ms")]


def _fold(k: int, net: float, implausible: bool | list[str]) -> dict[str, Any]:
    history = [
        {
            "epoch": e,
            "loss": 2.0 / (e + 1),
            "loss_c51": 1.0 / (e + 1),
            "loss_iqn": 0.5 / (e + 1),
            "loss_mse": 0.3 / (e + 1),
            "loss_aux": 0.2 / (e + 1),
            "grad_norm": 1.5,
            "q_mean": 0.1 * e,
            "q_spread": 0.05,
            "atom_utilisation": 0.6,
            "gate_entropy": 1.2 - 0.1 * e,
            "train_sharpe": 0.5 * e,
            "select_sharpe": 0.3 * e,
            "active_frac": 0.4,
            "lr": 1e-5,
        }
        for e in range(3)
    ]
    dist = {"Short": 10, "Hold": 50, "Long": 30, "Flat": 10}
    return {
        "fold": k,
        "train_rows": 10_000,
        "val_rows": 2_000,
        "best_rule": BEST_RULE,
        "selection": {"rule": BEST_RULE, "mode": "train_tail", "start": 8_000, "end": 10_000, "rows": 2_000},
        **_metrics(net, 1.234, 0.05, 42, 0.55, 0.4),
        "implausible": implausible,
        "baselines": {
            "flat": _metrics(0.0, 0.0, 0.0, 0, 0.0, 0.0),
            "long": _metrics(-12.5, -0.4, 0.1, 1, 0.0, 1.0),
            "buy_hold": _metrics(-8.0, -0.3, 0.08, 1, 0.0, 1.0),
        },
        "history": history,
        "checkpoint": "best",
        "epoch": 1 if k == 0 else 2,
        "last_epoch": {"epoch": 2, **_metrics(net - 100.0, 0.5, 0.06, 40, 0.5, 0.4)},
        "equity": {
            "time": minutes(f"2025-01-{10 + k:02d}T14:30", 50),
            "agent": [net * i / 49 for i in range(50)],
            "flat": [0.0] * 50,
            "long": [-12.5 * i / 49 for i in range(50)],
            "buy_hold": [-8.0 * i / 49 for i in range(50)],
        },
        "actions": {
            "picked": {
                "direction": dist,
                "magnitude": {"25%": 3, "50%": 1},
                "order": {"market": 1},
                "urgency": {},
            },
            "realised": {
                "direction": {"Short": 5, "Hold": 70, "Long": 20, "Flat": 5},
                "magnitude": {"25%": 1},
            },
        },
        "diagnostics": {
            "expert_utilisation": [0.5, 0.3, 0.2],
            "anomaly": None,
            "plateau_responses": ["momentum reset of the branch heads at epoch 1"],
            "best_epoch": 1 if k == 0 else 2,
        },
    }


def full_summary() -> dict[str, Any]:
    summary: dict[str, Any] = {
        "run": {
            "profile": "smoke",
            "config_hash": "abc123",
            "seed": 7,
            "device": "cpu",
            "foxhunt_version": "0.1.0",
            "started": "2025-01-02T03:04:05Z",
            "elapsed_s": 125.0,
        },
        "data": {
            "synthetic": True,
            "name": "synthetic ES market (seed 7, planted alpha 1.0)",
            "source": "synthetic (planted alpha 1.0)",
            "instrument": "ESZ6",
            "rows": 120_000,
            "row_unit": "5s bars",
            "sessions": 10,
            "first": "2025-01-02T14:30:00Z",
            "last": "2025-01-15T21:00:00Z",
            "features": 48,
        },
        "leaks": {"passed": True, "columns_checked": 48},
        "alpha": {
            "verdict": "signal",
            "verdict_line": "Verdict: signal at 95% (best: lightgbm AUC 0.561 at horizon 10).",
            "plots": ["alpha/alpha_decay.png", "alpha/alpha_importance.png"],
            "rows": [{"model": "lightgbm", "horizon": 10, "auc": 0.5612, "auc_lo": 0.55, "auc_hi": 0.57}],
        },
        "folds": [_fold(0, 1234.5, False), _fold(1, -56.3, ["annualised Sharpe 42 exceeds the ceiling"])],
        "summary": {
            "mean_net_pnl": 589.1,
            "mean_sharpe_annual": 1.234,
            "beats_flat_folds": 1,
            "beats_long_folds": 2,
        },
    }
    summary["folds"][1]["diagnostics"]["anomaly"] = "exploding loss at epoch 2"
    return summary


def write_alpha_pngs(run_dir: Path) -> None:
    """The two alpha plots ``full_summary`` names, as the alpha check would leave them."""
    (run_dir / "alpha").mkdir(parents=True, exist_ok=True)
    for name in ("alpha_decay", "alpha_importance"):
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.plot([1, 2, 3], [0.5, 0.55, 0.52])
        fig.savefig(run_dir / "alpha" / f"{name}.png", format="png")
        plt.close(fig)


@pytest.fixture(scope="module")
def full_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, StrictParser]:
    run_dir = tmp_path_factory.mktemp("run")
    write_alpha_pngs(run_dir)
    path = write_report(run_dir, full_summary())
    return path, parse(path)


def test_report_is_one_file_with_every_section(full_report: tuple[Path, StrictParser]) -> None:
    path, p = full_report
    assert path == path.parent / "report.html" and path.is_file()
    for heading in HEADINGS:
        assert heading in p.headings, f"section heading {heading!r} missing"
    assert {"Fold 0", "Fold 1"} <= set(p.headings)
    # self-contained: nothing to fetch, nothing to run
    assert "script" not in p.tags and "link" not in p.tags
    assert all("http" not in s for s in p.srcs + p.hrefs)
    assert all(h.startswith("#") for h in p.hrefs)


def test_metrics_table_has_one_row_per_fold_with_its_numbers(full_report: tuple[Path, StrictParser]) -> None:
    _, p = full_report
    metric_rows = [(attrs, cells) for sec, attrs, cells in p.rows if sec == "metrics"]
    # first table: one row per fold and policy (the fold's cell spans its policies' rows), one column
    # per metric: fold | policy | net PnL | Sharpe | max drawdown | trades | win rate | active | bars/y | flag
    i = next(i for i, (_, cells) in enumerate(metric_rows) if cells[:2] == ["fold", "policy"])
    attrs0, row0 = metric_rows[i + 1]
    assert row0[:2] == ["0", "agent (best, epoch 1)"]  # the agent's checkpoint, named in its row
    assert row0[2:6] == ["$1,234.50", "1.23", "5.00%", "42"]
    assert row0[-2:] == ["98,280", "no"]
    assert attrs0.get("class") == "agent"
    # the baselines follow, named for what they do, without the fold cell (it spans them)
    follow = [cells for _, cells in metric_rows[i + 2 : i + 5]]
    assert [(c[0], c[1]) for c in follow] == [
        ("flat", "$0.00"), ("long (per plan)", "-$12.50"), ("buy and hold", "-$8.00")
    ]
    attrs1, row1 = metric_rows[i + 5]
    assert row1[:3] == ["1", "agent (best, epoch 2)", "-$56.30"]
    assert attrs1.get("class") == "implausible"
    assert "IMPLAUSIBLE" in row1[-1] and "Sharpe 42" in row1[-1]
    mean = next(cells for attrs, cells in metric_rows if attrs.get("class") == "mean")
    assert mean[:3] == ["mean of 2", "agent", "$589.10"]  # (1234.50 - 56.30) / 2


def test_images_are_embedded_pngs_also_written_to_plots(full_report: tuple[Path, StrictParser]) -> None:
    path, p = full_report
    # 2 alpha plots + 2 folds x (training, equity, actions) + expert utilisation
    assert len(p.srcs) == 9
    for src in p.srcs:
        head, _, data = src.partition(",")
        assert head == "data:image/png;base64"
        assert base64.b64decode(data, validate=True).startswith(b"\x89PNG\r\n\x1a\n")
    pngs = sorted(f.name for f in (path.parent / "plots").glob("*.png"))
    assert pngs == sorted(
        [f"fold{k}_{kind}.png" for k in (0, 1) for kind in ("training", "equity", "actions")]
        + ["expert_utilisation.png"]
    )


def test_diagnostics_show_the_best_epoch(full_report: tuple[Path, StrictParser]) -> None:
    _, p = full_report
    rows = [cells for sec, _, cells in p.rows if sec == "diagnostics"]
    header, fold0, fold1 = rows
    col = {name: i for i, name in enumerate(header)}
    # fold 0's best epoch is 1 (of 0..2): gate entropy 1.2 - 0.1 = 1.1, selection Sharpe 0.3
    assert fold0[col["best epoch"]] == "1" and fold0[col["epoch shown"]] == "1"
    assert fold0[col["gate entropy (nats)"]] == "1.100" and fold0[col["selection Sharpe"]] == "0.30"
    assert fold1[col["gate entropy (nats)"]] == "1.000"
    assert fold0[col["expert utilisation"]] == "50.0% 30.0% 20.0%"
    assert fold0[col["anomaly"]] == "none"
    assert fold1[col["anomaly"]] == "exploding loss at epoch 2"
    assert fold0[col["plateau responses"]] == "momentum reset of the branch heads at epoch 1"


def test_missing_optional_parts_render_with_notes(tmp_path: Path) -> None:
    summary = {"folds": [{"fold": 0, "net_pnl": 3.5, "history": []}]}
    path = write_report(tmp_path, summary)
    p = parse(path)
    text = path.read_text()
    for heading in HEADINGS:
        assert heading in p.headings
    assert "Alpha check not available" in text
    assert "Run information not available" in text
    assert "Leak guard result not available" in text
    assert "No training history recorded for fold 0" in text
    assert "Validation equity curves not available for fold 0" in text
    assert p.srcs == []
    rows = [cells for sec, _, cells in p.rows if sec == "metrics"]
    i = rows.index(next(c for c in rows if c and c[0] == "0"))
    assert rows[i][:3] == ["0", "agent (n/a)", "$3.50"]  # no checkpoint recorded; agent net PnL
    assert rows[i + 1][:2] == ["flat", "n/a"]  # flat baseline absent


def test_empty_history_only_skips_that_fold(tmp_path: Path) -> None:
    summary = full_summary()
    summary["folds"][1]["history"] = []
    del summary["alpha"]
    path = write_report(tmp_path, summary)
    text = path.read_text()
    assert "No training history recorded for fold 1" in text
    assert "No training history recorded for fold 0" not in text
    assert (tmp_path / "plots" / "fold0_training.png").is_file()
    assert not (tmp_path / "plots" / "fold1_training.png").exists()
    assert "Alpha check not available" in text


@pytest.mark.parametrize("folds", ["absent", [], "not a list"])
def test_missing_folds_is_a_clear_error(tmp_path: Path, folds: Any) -> None:
    summary = full_summary()
    if folds == "absent":
        del summary["folds"]
    else:
        summary["folds"] = folds
    with pytest.raises(ValueError, match=r"summary\['folds'\]") as info:
        write_report(tmp_path, summary)
    assert isinstance(info.value, FoxhuntError) and isinstance(info.value, ReportInputError)
    assert not (tmp_path / "report.html").exists()


def test_text_from_the_summary_is_escaped(tmp_path: Path) -> None:
    summary = copy.deepcopy(full_summary())
    summary["folds"] = summary["folds"][:1]  # one fold is enough here, and draws half the plots
    summary["run"]["profile"] = EVIL
    summary["data"]["source"] = [EVIL, "b.dbn.zst"]
    summary["alpha"]["rows"][0]["model"] = EVIL
    fold = summary["folds"][0]
    fold["diagnostics"]["anomaly"] = EVIL
    fold["diagnostics"]["plateau_responses"] = [EVIL]
    fold["actions"]["picked"]["direction"] = {EVIL: 1}
    fold["implausible"] = [EVIL]
    path = write_report(tmp_path, summary)
    text = path.read_text()
    assert "<script" not in text.lower()
    assert text.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 7
    p = parse(path)
    assert "script" not in p.tags


def test_number_formats() -> None:
    assert money(1234.5) == "$1,234.50"
    assert money(-56.789) == "-$56.79"
    assert money(0) == "$0.00"
    assert "n/a" in money(None) and "n/a" in money(math.nan) and "n/a" in money("12")
    assert pct(0.1234) == "12.3%"
    assert duration(12.34) == "12.3 s"
    assert duration(3725) == "1 h 02 min 05 s"


def test_action_shares_normalise_counts_and_lists() -> None:
    assert shares({"Short": 1, "Hold": 3}) == {"Short": 0.25, "Hold": 0.75}
    assert shares([0.0, 2.0, None, 2.0]) == {"0": 0.0, "1": 0.5, "2": 0.0, "3": 0.5}
    assert shares({}) == {}


def test_the_input_screen_lists_each_folds_columns(tmp_path: Path) -> None:
    screened = {"ofi.trade_sign_ema": 0.4092, "ofi.trade_flow": -0.2635}
    folds = [
        {"fold": 0, "net_pnl": 1.0, "history": [], "diagnostics": {"input_screen": screened}},
        {"fold": 1, "net_pnl": 2.0, "history": [], "diagnostics": {"input_screen": None}},
    ]
    text = write_report(tmp_path, {"folds": folds}).read_text()
    assert "<h3>Input screen</h3>" in text
    assert "ofi.trade_sign_ema 0.409 &middot; ofi.trade_flow -0.264" in text
    off = write_report(tmp_path / "off", {"folds": [{**folds[1], "fold": 0}]}).read_text()
    assert "off: the network read every feature column" in off


def test_equity_plot_gives_every_policy_its_own_colour_dash_and_legend_entry() -> None:
    import matplotlib.pyplot as plt

    from foxhunt.report.plots import equity_figure

    equity = full_summary()["folds"][0]["equity"] | {"rule": [float(i) for i in range(50)]}
    fig = equity_figure(equity, 0)
    try:
        [ax] = fig.axes
        lines = {ln.get_label(): (ln.get_color(), ln.get_linestyle()) for ln in ax.get_lines()[:5]}
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend == ["agent", "reference rule", "flat", "long (per plan)", "buy and hold"]
        assert len({c for c, _ in lines.values()}) == 5  # the agent and the rule no longer both blue
        assert len({d for _, d in lines.values()}) >= 4  # and apart in grey print too
        assert ax.get_xlabel().startswith("time of the validation row (UTC)")
        assert ax.get_ylabel() == "cumulative net PnL ($, after costs)"
    finally:
        plt.close(fig)


def test_a_sharpe_over_too_few_steps_reads_na_in_the_metrics_table(tmp_path: Path) -> None:
    summary = full_summary()
    summary["folds"][0]["steps"] = 356  # the issue's 356-step backtest
    summary["folds"][0]["baselines"]["flat"]["steps"] = 5_000
    p = parse(write_report(tmp_path, summary))
    rows = [cells for sec, _, cells in p.rows if sec == "metrics"]
    i = next(i for i, cells in enumerate(rows) if cells and cells[0] == "0")
    assert rows[i][3] == "n/a (356 steps < 1,000)"  # fold 0's agent: not a number to read
    assert rows[i + 1][:3] == ["flat", "$0.00", "0.00"]  # 5,000 steps: the number
