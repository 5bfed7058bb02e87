"""The run report: one self-contained ``report.html`` (inline CSS, PNGs as base64 data URIs, no
external link or script) plus the PNGs in ``plots/``, from the run summary (``metrics.json``).

Only ``folds`` is required; every other part may be missing or ``None`` and its section then says
"not available". Within a fold, missing metrics print as "n/a". Every piece of text from the summary
goes through :func:`html.escape`.

Units: money in $ with 2 decimals; Sharpe annualised (per-bar Sharpe x sqrt(bars per year), the
bars per year stated per fold) with 2 decimals; max drawdown, win rate and active fraction as
percentages (max drawdown of peak equity, as ``foxhunt.backtest.metrics`` defines it).
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from foxhunt.atomic import write_text
from foxhunt.errors import FoxhuntError
from foxhunt.report import plots

POLICIES = ("agent", "flat", "long")

SECTIONS: tuple[tuple[str, str], ...] = (
    ("run", "Run"),
    ("data", "Data"),
    ("leaks", "Leak guard"),
    ("alpha", "Alpha check"),
    ("metrics", "Validation metrics"),
    ("training", "Training curves"),
    ("equity", "Validation equity"),
    ("actions", "Action distributions"),
    ("diagnostics", "Diagnostics"),
)
"""(anchor, heading) of every section, in order."""

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 1.5em auto;
       max-width: 1250px; padding: 0 1em; color: #1b1b1b; line-height: 1.4; }
h1 { border-bottom: 2px solid #333; padding-bottom: .2em; }
h2 { margin-top: 1.8em; border-bottom: 1px solid #bbb; }
nav a { margin-right: 1em; }
table { border-collapse: collapse; margin: .6em 0; font-size: 0.88em; }
th, td { border: 1px solid #ccc; padding: .25em .55em; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.kv th { text-align: left; }
tr.mean td { font-weight: bold; background: #fafafa; }
tr.implausible td, td.implausible { background: #ffd9d9; }
.bad { color: #b00020; font-weight: bold; }
.good { color: #1b7f3b; font-weight: bold; }
.na { color: #777; font-style: italic; }
img { max-width: 100%; border: 1px solid #ddd; margin: .4em 0; }
.small { font-size: 0.85em; color: #555; }
"""


class ReportInputError(FoxhuntError, ValueError):
    """The run summary given to :func:`write_report` lacks a required part or has the wrong shape."""


# --- formatting --------------------------------------------------------------------------------


def _e(x: Any) -> str:
    return html.escape(str(x))


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


NA = '<span class="na">n/a</span>'


def money(x: Any) -> str:
    """``$1,234.50`` / ``-$56.79``; "n/a" for a missing or non-finite value."""
    v = _num(x)
    if v is None:
        return NA
    return f"{'-' if v < 0 else ''}${abs(v):,.2f}"


def fixed(x: Any, digits: int = 2) -> str:
    v = _num(x)
    return NA if v is None else f"{v:,.{digits}f}"


def pct(x: Any, digits: int = 1) -> str:
    v = _num(x)
    return NA if v is None else f"{100.0 * v:.{digits}f}%"


def count(x: Any) -> str:
    v = _num(x)
    if v is None:
        return NA
    return f"{int(v):,}" if v == int(v) else f"{v:,.1f}"


def duration(x: Any) -> str:
    v = _num(x)
    if v is None:
        return NA
    if v < 60:
        return f"{v:.1f} s"
    h, rest = divmod(int(round(v)), 3600)
    m, s = divmod(rest, 60)
    return f"{h} h {m:02d} min {s:02d} s" if h else f"{m} min {s:02d} s"


def text(x: Any) -> str:
    return NA if x is None or x == "" else _e(x)


def _note(message: str) -> str:
    return f'<p class="na">{_e(message)}</p>'


def _td(content: str, cls: str = "num") -> str:
    return f'<td class="{cls}">{content}</td>' if cls else f"<td>{content}</td>"


def _kv(pairs: Sequence[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in pairs)
    return f'<table class="kv">{rows}</table>'


def _section(anchor: str, body: str) -> str:
    title = dict(SECTIONS)[anchor]
    return f'<section id="{anchor}">\n<h2>{_e(title)}</h2>\n{body}\n</section>\n'


def _img(path: Path | None, alt: str, missing: str) -> str:
    if path is None:
        return _note(missing)
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<img src="data:image/png;base64,{data}" alt="{_e(alt)}">'
        f'<div class="small">{_e(f"plots/{path.name}")}</div>'
    )


def _mapping(summary: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    part = summary.get(key)
    return part if isinstance(part, Mapping) and part else None


# --- input checks ------------------------------------------------------------------------------


def check_summary(summary: Any) -> list[Mapping[str, Any]]:
    """The summary's folds; :class:`ReportInputError` naming the key when they are absent or malformed."""
    if not isinstance(summary, Mapping):
        raise ReportInputError(
            "summary",
            f"expected a dict (the run's metrics.json), got {type(summary).__name__}",
            "pass the dict the run writes as metrics.json",
        )
    if "folds" not in summary:
        raise ReportInputError(
            "summary['folds']",
            "the required key 'folds' is missing; the report is built per fold",
            "pass the run summary with its 'folds' list (one dict per walk-forward fold)",
        )
    folds = summary["folds"]
    if not isinstance(folds, list | tuple) or not folds:
        raise ReportInputError(
            "summary['folds']",
            f"expected a non-empty list of fold dicts, got {folds!r:.80}",
            "write one dict per completed fold (fold, net_pnl, sharpe_annual, ...) before the report",
        )
    for i, fold in enumerate(folds):
        if not isinstance(fold, Mapping):
            raise ReportInputError(
                f"summary['folds'][{i}]",
                f"expected a dict, got {type(fold).__name__}",
                "each fold is a dict of its validation metrics, baselines, history and diagnostics",
            )
    return list(folds)


def _fold_id(fold: Mapping[str, Any], i: int) -> int:
    v = _num(fold.get("fold"))
    return int(v) if v is not None else i


def _policies(fold: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """``{"agent": fold, "flat": ..., "long": ...}``, an absent baseline as an empty dict."""
    base = fold.get("baselines") if isinstance(fold.get("baselines"), Mapping) else {}
    out: dict[str, Mapping[str, Any]] = {"agent": fold}
    for name in ("flat", "long"):
        b = base.get(name)
        out[name] = b if isinstance(b, Mapping) else {}
    return out


def implausible_reasons(metrics: Mapping[str, Any]) -> list[str]:
    """Why a result was flagged implausible: ``implausible`` as a list of reasons, or ``True`` with
    optional ``implausible_reasons``; empty when not flagged."""
    flag = metrics.get("implausible")
    if isinstance(flag, list | tuple):
        return [str(r) for r in flag]
    if flag is True:
        extra = metrics.get("implausible_reasons")
        return [str(r) for r in extra] if isinstance(extra, list | tuple) and extra else ["flagged"]
    return []


# --- sections ----------------------------------------------------------------------------------


def _run_section(summary: Mapping[str, Any]) -> str:
    run = _mapping(summary, "run")
    if run is None:
        return _section("run", _note("Run information not available."))
    return _section(
        "run",
        _kv(
            [
                ("profile", text(run.get("profile"))),
                ("config hash", text(run.get("config_hash"))),
                ("seed", text(run.get("seed"))),
                ("device", text(run.get("device"))),
                ("foxhunt version", text(run.get("foxhunt_version"))),
                ("started", text(run.get("started"))),
                ("elapsed", duration(run.get("elapsed_s"))),
            ]
        ),
    )


def _data_section(summary: Mapping[str, Any]) -> str:
    data = _mapping(summary, "data")
    if data is None:
        return _section("data", _note("Data summary not available."))
    source = data.get("source")
    if isinstance(source, list | tuple):
        source_html = "<br>".join(_e(s) for s in source) or NA
    else:
        source_html = text(source)
    unit = data.get("row_unit")
    return _section(
        "data",
        _kv(
            [
                ("source", source_html),
                ("rows", count(data.get("rows")) + (f" ({_e(unit)})" if unit else "")),
                ("sessions", count(data.get("sessions"))),
                ("first", text(data.get("first"))),
                ("last", text(data.get("last"))),
                ("features", count(data.get("features"))),
            ]
        ),
    )


def _leaks_section(summary: Mapping[str, Any]) -> str:
    leaks = _mapping(summary, "leaks")
    if leaks is None or not isinstance(leaks.get("passed"), bool):
        return _section("leaks", _note("Leak guard result not available."))
    checked = count(leaks.get("columns_checked"))
    if leaks["passed"]:
        body = f'<p><span class="good">passed</span>: no leak found in {checked} columns checked.</p>'
    else:
        body = f'<p><span class="bad">FAILED</span>: a leak was found ({checked} columns checked).</p>'
    return _section("leaks", body)


def _alpha_section(summary: Mapping[str, Any]) -> str:
    alpha = _mapping(summary, "alpha")
    if alpha is None:
        return _section("alpha", _note("Alpha check not available (not run, or no results recorded)."))
    parts = [f"<p><b>Verdict:</b> {text(alpha.get('verdict'))}</p>"]
    rows = [r for r in alpha.get("rows") or [] if isinstance(r, Mapping)]
    if rows:
        body = "".join(
            "<tr>"
            + _td(text(r.get("model")), "")
            + _td(count(r.get("horizon")))
            + _td(fixed(r.get("auc"), 3))
            + _td(f"[{fixed(r.get('auc_lo'), 3)}, {fixed(r.get('auc_hi'), 3)}]")
            + "</tr>"
            for r in rows
        )
        parts.append(
            "<table><tr><th>model</th><th>horizon (rows)</th><th>validation AUC</th>"
            f"<th>95% interval</th></tr>{body}</table>"
        )
    else:
        parts.append(_note("No per-model AUC rows recorded."))
    return _section("alpha", "\n".join(parts))


METRIC_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("net_pnl", "Net PnL", money),
    ("sharpe_annual", "Sharpe (annual)", fixed),
    ("max_drawdown", "Max drawdown", lambda x: pct(x, 2)),
    ("trades", "Trades", count),
    ("win_rate", "Win rate", pct),
    ("active_frac", "Active fraction", pct),
)


def _mean(values: Sequence[Any]) -> float | None:
    vs = [v for v in (_num(x) for x in values) if v is not None]
    return sum(vs) / len(vs) if vs else None


def _flag_cell(pols: Mapping[str, Mapping[str, Any]]) -> str:
    flagged = {name: implausible_reasons(m) for name, m in pols.items()}
    flagged = {k: v for k, v in flagged.items() if v}
    if not flagged:
        return _td("no", "")
    items = "; ".join(f"{_e(name)}: {_e(', '.join(reasons))}" for name, reasons in flagged.items())
    return _td(f'<span class="bad">IMPLAUSIBLE</span> {items}', "implausible")


def _metrics_section(summary: Mapping[str, Any], folds: Sequence[Mapping[str, Any]]) -> str:
    head1 = (
        '<tr><th rowspan="2">fold</th>'
        + "".join(f'<th colspan="3">{_e(title)}</th>' for _, title, _ in METRIC_COLUMNS)
        + '<th rowspan="2">bars / year</th><th rowspan="2">implausible</th></tr>'
    )
    head2 = "<tr>" + "".join(f"<th>{p}</th>" for _ in METRIC_COLUMNS for p in POLICIES) + "</tr>"
    rows, per_fold = [], [_policies(f) for f in folds]
    for i, (fold, pols) in enumerate(zip(folds, per_fold, strict=True)):
        cells = [_td(str(_fold_id(fold, i)))]
        cells += [_td(fmt(pols[p].get(key))) for key, _, fmt in METRIC_COLUMNS for p in POLICIES]
        cells += [_td(fixed(fold.get("bars_per_year"), 0)), _flag_cell(pols)]
        cls = ' class="implausible"' if implausible_reasons(fold) else ""
        rows.append(f"<tr{cls}>{''.join(cells)}</tr>")
    n_flagged = sum(bool(implausible_reasons(f)) for f in folds)
    mean_cells = [_td(f"mean of {len(folds)}", "")]
    mean_cells += [
        _td(fmt(_mean([pols[p].get(key) for pols in per_fold])))
        for key, _, fmt in METRIC_COLUMNS
        for p in POLICIES
    ]
    mean_cells += [
        _td(fixed(_mean([f.get("bars_per_year") for f in folds]), 0)),
        _td(f"{n_flagged} of {len(folds)} folds (agent)", ""),
    ]
    rows.append(f'<tr class="mean">{"".join(mean_cells)}</tr>')
    table = f"<table>{head1}{head2}{''.join(rows)}</table>"

    note = (
        '<p class="small">Validation period of each fold. Sharpe is annualised: per-bar Sharpe x '
        "sqrt(bars per year), with the bars per year of each fold stated; max drawdown is the largest "
        "fall from peak equity as a share of that peak; win rate is over closed trades; active fraction "
        "is the share of bars holding a position. Baselines: flat never trades; long holds a long "
        "position throughout.</p>"
    )

    # agent PnL breakdown and sizes
    brows = "".join(
        "<tr>"
        + _td(str(_fold_id(f, i)))
        + _td(count(f.get("train_rows")))
        + _td(count(f.get("val_rows")))
        + _td(money(f.get("gross_pnl")))
        + _td(money(f.get("costs")))
        + _td(money(f.get("net_pnl")))
        + "</tr>"
        for i, f in enumerate(folds)
    )
    breakdown = (
        "<h3>Agent PnL breakdown</h3><table><tr><th>fold</th><th>train rows</th><th>validation rows</th>"
        f"<th>gross PnL</th><th>costs</th><th>net PnL</th></tr>{brows}</table>"
    )
    return _section("metrics", f"{_verdict(summary, folds, per_fold)}\n{table}\n{note}\n{breakdown}")


def _verdict(
    summary: Mapping[str, Any], folds: Sequence[Mapping[str, Any]], per_fold: Sequence[Mapping[str, Any]]
) -> str:
    """One sentence: in how many folds the agent's net PnL beat each baseline, and the means."""
    n = len(folds)

    def beats(base: str) -> int:
        return sum(
            1
            for pols in per_fold
            if _num(pols["agent"].get("net_pnl")) is not None
            and _num(pols[base].get("net_pnl")) is not None
            and pols["agent"]["net_pnl"] > pols[base]["net_pnl"]
        )

    given = _mapping(summary, "summary") or {}
    values = {
        "beats_flat_folds": given.get("beats_flat_folds", beats("flat")),
        "beats_long_folds": given.get("beats_long_folds", beats("long")),
        "mean_net_pnl": given.get("mean_net_pnl", _mean([f.get("net_pnl") for f in folds])),
        "mean_sharpe_annual": given.get("mean_sharpe_annual", _mean([f.get("sharpe_annual") for f in folds])),
    }
    source = "" if given else ' <span class="small">(computed from the folds; no run summary given)</span>'
    return (
        f"<p>Agent net PnL beats flat in <b>{count(values['beats_flat_folds'])} of {n}</b> folds and "
        f"always-long in <b>{count(values['beats_long_folds'])} of {n}</b>; mean net PnL "
        f"<b>{money(values['mean_net_pnl'])}</b>, mean annual Sharpe "
        f"<b>{fixed(values['mean_sharpe_annual'])}</b>.{source}</p>"
    )


def _history(fold: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    h = fold.get("history")
    return [r for r in h if isinstance(r, Mapping)] if isinstance(h, list | tuple) else []


def _per_fold_images(
    anchor: str, folds: Sequence[Mapping[str, Any]], images: Mapping[tuple[str, int], Any], missing: str
) -> str:
    parts = []
    for i, fold in enumerate(folds):
        k = _fold_id(fold, i)
        parts.append(f"<h3>Fold {k}</h3>")
        parts.append(
            _img(images.get((anchor, i)), f"{dict(SECTIONS)[anchor]}, fold {k}", missing.format(k=k))
        )
        if anchor == "actions":
            parts.append(_action_table(fold))
    return _section(anchor, "\n".join(parts))


def _action_table(fold: Mapping[str, Any]) -> str:
    actions = fold.get("actions") if isinstance(fold.get("actions"), Mapping) else {}
    picked = actions.get("picked") if isinstance(actions.get("picked"), Mapping) else {}
    realised = actions.get("realised") if isinstance(actions.get("realised"), Mapping) else {}
    branches = list(dict.fromkeys([*picked, *realised]))
    if not branches:
        return ""

    def cell(dist: Any) -> str:
        s = plots.shares(dist)
        return " &middot; ".join(f"{_e(k)} {pct(v)}" for k, v in s.items()) if s else NA

    rows = "".join(
        f"<tr><td>{_e(b)}</td><td>{cell(picked.get(b))}</td><td>{cell(realised.get(b))}</td></tr>"
        for b in branches
    )
    return f"<table><tr><th>branch</th><th>picked</th><th>realised</th></tr>{rows}</table>"


def _diagnostics_section(folds: Sequence[Mapping[str, Any]], expert_png: Path | None) -> str:
    rows = []
    for i, fold in enumerate(folds):
        diag = fold.get("diagnostics") if isinstance(fold.get("diagnostics"), Mapping) else {}
        hist = _history(fold)
        best = _num(diag.get("best_epoch"))
        at = next((r for r in hist if best is not None and _num(r.get("epoch")) == best), None)
        at = at if at is not None else (hist[-1] if hist else {})
        shown = text(at.get("epoch")) if at else NA
        util = diag.get("expert_utilisation")
        util_html = " ".join(pct(u) for u in util) if isinstance(util, list | tuple) and util else NA
        anomaly = diag.get("anomaly")
        anomaly_html = f'<span class="bad">{_e(anomaly)}</span>' if anomaly else "none"
        responses = [str(r) for r in diag.get("plateau_responses") or []]
        resp_html = (
            "<ul>" + "".join(f"<li>{_e(r)}</li>" for r in responses) + "</ul>" if responses else "none"
        )
        rows.append(
            "<tr>"
            + _td(str(_fold_id(fold, i)))
            + _td(fixed(best, 0))
            + _td(str(len(hist)))
            + _td(shown)
            + _td(fixed(at.get("val_sharpe")))
            + _td(fixed(at.get("gate_entropy"), 3))
            + _td(pct(at.get("atom_utilisation")))
            + _td(fixed(at.get("grad_norm"), 3))
            + _td(util_html)
            + _td(anomaly_html, "implausible" if anomaly else "")
            + _td(resp_html, "")
            + "</tr>"
        )
    table = (
        "<table><tr><th>fold</th><th>best epoch</th><th>epochs run</th><th>epoch shown</th>"
        "<th>val Sharpe</th><th>gate entropy (nats)</th><th>atom utilisation</th><th>grad norm</th>"
        "<th>expert utilisation</th><th>anomaly</th><th>plateau responses</th></tr>"
        f"{''.join(rows)}</table>"
    )
    note = (
        '<p class="small">Per-epoch values are shown at the best epoch (the last recorded epoch when '
        "the best one is not in the history).</p>"
    )
    img = _img(expert_png, "expert utilisation by fold", "Expert utilisation not available.")
    return _section("diagnostics", f"{table}\n{note}\n{img}")


# --- entry point -------------------------------------------------------------------------------


def _draw(
    folds: Sequence[Mapping[str, Any]], plot_dir: Path
) -> tuple[dict[tuple[str, int], Any], Path | None]:
    images: dict[tuple[str, int], Path | None] = {}
    expert: dict[int, list[Any]] = {}
    ids = [_fold_id(fold, i) for i, fold in enumerate(folds)]
    for i, fold in enumerate(folds):
        k = ids[i]
        stem = f"fold{k}" if ids.count(k) == 1 else f"fold{k}_entry{i}"  # never two folds on one file
        images["training", i] = plots.plot_training(_history(fold), k, plot_dir / f"{stem}_training.png")
        eq = fold.get("equity")
        images["equity", i] = (
            plots.plot_equity(eq, k, plot_dir / f"{stem}_equity.png") if isinstance(eq, Mapping) else None
        )
        act = fold.get("actions") if isinstance(fold.get("actions"), Mapping) else {}
        picked, realised = act.get("picked"), act.get("realised")
        images["actions", i] = plots.plot_actions(
            picked if isinstance(picked, Mapping) else {},
            realised if isinstance(realised, Mapping) else {},
            k,
            plot_dir / f"{stem}_actions.png",
        )
        diag = fold.get("diagnostics") if isinstance(fold.get("diagnostics"), Mapping) else {}
        if isinstance(diag.get("expert_utilisation"), list | tuple):
            expert[k] = list(diag["expert_utilisation"])
    return images, plots.plot_expert_utilisation(expert, plot_dir / "expert_utilisation.png")


def render(summary: Mapping[str, Any], images: Mapping[tuple[str, int], Any], expert_png: Path | None) -> str:
    """The report's HTML from the summary and the PNGs drawn for it."""
    folds = check_summary(summary)
    run = _mapping(summary, "run") or {}
    title = f"foxhunt run report: {run.get('profile', 'run')}"
    nav = "".join(f'<a href="#{a}">{_e(t)}</a>' for a, t in SECTIONS)
    body = [
        _run_section(summary),
        _data_section(summary),
        _leaks_section(summary),
        _alpha_section(summary),
        _metrics_section(summary, folds),
        _per_fold_images("training", folds, images, "No training history recorded for fold {k}."),
        _per_fold_images("equity", folds, images, "Validation equity curves not available for fold {k}."),
        _per_fold_images("actions", folds, images, "Action distributions not available for fold {k}."),
        _diagnostics_section(folds, expert_png),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{_e(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        f"<h1>{_e(title)}</h1>\n<nav>{nav}</nav>\n{''.join(body)}</body>\n</html>\n"
    )


def write_report(run_dir: str | Path, summary: Mapping[str, Any]) -> Path:
    """Write ``run_dir/report.html`` (self-contained) and its PNGs in ``run_dir/plots/``; return the
    HTML's path. Raises :class:`ReportInputError` (a :class:`ValueError`) before writing anything
    when ``summary`` has no usable ``folds``."""
    folds = check_summary(summary)
    run_dir = Path(run_dir)
    images, expert_png = _draw(folds, run_dir / "plots")
    return write_text(run_dir / "report.html", render(summary, images, expert_png))
