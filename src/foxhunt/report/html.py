"""The run report: one self-contained ``report.html`` (inline CSS, PNGs as base64 data URIs, no
external link or script) plus the PNGs in ``plots/``, from the run summary (``metrics.json``).

It opens with a verdict block (:mod:`foxhunt.report.verdict`): the data, the leak guard, the alpha
verdict, the agent against its baselines, which checkpoint the numbers come from (the best epoch,
the last one beside it) and whether the anomaly guard stopped the run, with a WARNING for every fold
where the agent never traded or its result is implausible.

Only ``folds`` is required (it may be empty only when the summary says the run was ``stopped``);
every other part may be missing or ``None`` and its section then says "not available". Within a
fold, missing metrics print as "n/a". Every piece of text from the summary goes through
:func:`html.escape`.

Units: money in $ with 2 decimals; Sharpe annualised (per-bar Sharpe x sqrt(bars per year), the
bars per year stated per fold) with 2 decimals; max drawdown, win rate and active fraction as
percentages (max drawdown of peak equity, as ``foxhunt.backtest.metrics`` defines it).

The page fits a narrow window: every table scrolls inside its own box, images shrink to the page.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from markupsafe import Markup

from foxhunt.atomic import write_text
from foxhunt.backtest.capture import Capture, FoldCapture
from foxhunt.backtest.metrics import MIN_SHARPE_STEPS, sharpe_text
from foxhunt.domain.baselines import AGENT, DESCRIPTIONS, ORDER, Baseline, label
from foxhunt.errors import FoxhuntError
from foxhunt.report import plots
from foxhunt.report.execution import execution_view
from foxhunt.report.fmt import (
    NA,
    count,
    duration,
    esc,
    fixed,
    fold_id,
    implausible_reasons,
    mapping,
    mean,
    money,
    note,
    num,
    pct,
    policies,
    policy_names,
    rate,
    td,
    text,
)
from foxhunt.report.page import Section, render_body, render_page
from foxhunt.report.schema import CALIBRATION_KEY, LAST_EPOCH_KEY, SELECTION_KEY
from foxhunt.report.verdict import data_title, verdict_body

__all__ = ["ReportInputError", "check_summary", "duration", "money", "pct", "render", "write_report"]

SECTIONS: tuple[tuple[str, str], ...] = (
    ("verdict", "Verdict"),
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
*, *::before, *::after { box-sizing: border-box; }
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 1.5em auto;
       max-width: 1250px; padding: 0 1em; color: #1b1b1b; line-height: 1.4; }
h1 { border-bottom: 2px solid #333; padding-bottom: .2em; font-size: 1.6em; overflow-wrap: anywhere; }
h2 { margin-top: 1.8em; border-bottom: 1px solid #bbb; }
nav { display: flex; flex-wrap: wrap; gap: .2em 1em; }
.scroll { overflow-x: auto; max-width: 100%; margin: .6em 0; }
table { border-collapse: collapse; font-size: 0.88em; display: block; max-width: 100%; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: .25em .55em; vertical-align: top; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.kv th { text-align: left; white-space: nowrap; }
table.kv td { overflow-wrap: anywhere; }
table.verdict { font-size: 0.95em; width: 100%; }
tr.mean td { font-weight: bold; background: #fafafa; }
tr.agent td { background: #eef5fb; }
table.metrics tr:has(td[rowspan]) td { border-top: 2px solid #888; }
tr.implausible td, td.implausible { background: #ffd9d9; }
tr.idle td, td.idle { background: #fff3cd; }
.warning { background: #fff3cd; border-left: 4px solid #b36b00; padding: .4em .7em; margin: .5em 0; }
.bad { color: #b00020; font-weight: bold; }
.good { color: #1b7f3b; font-weight: bold; }
.na { color: #777; font-style: italic; }
img { max-width: 100%; height: auto; border: 1px solid #ddd; margin: .4em 0; display: block; }
.small { font-size: 0.85em; color: #555; overflow-wrap: anywhere; }
code { overflow-wrap: anywhere; }
"""


class ReportInputError(FoxhuntError, ValueError):
    """The run summary given to :func:`write_report` lacks a required part or has the wrong shape."""


def _section(anchor: str, body: str) -> Section:
    return Section(anchor, dict(SECTIONS)[anchor], Markup(body))  # body: built from escaped pieces


def _image(path: Path | None, alt: str, missing: str, label: str | None = None) -> dict[str, str | None]:
    """A PNG for the templates' ``img`` macro: its base64 data (``None`` when absent: ``missing``
    shows instead), alt text and caption."""
    data = None if path is None else base64.b64encode(path.read_bytes()).decode("ascii")
    caption = label or (f"plots/{path.name}" if path is not None else "")
    return {"data": data, "alt": alt, "label": caption, "missing": missing}


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
    stopped = mapping(summary, "stopped") is not None  # a stopped run reports what it finished
    if not isinstance(folds, list | tuple) or (not folds and not stopped):
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


# --- sections ----------------------------------------------------------------------------------


def _facts(anchor: str, pairs: Sequence[tuple[str, str]] | None, missing: str) -> Section:
    """A section of labelled facts (``pairs``: label, formatted value), ``missing`` when ``None``."""
    shown = None if pairs is None else [(k, Markup(v)) for k, v in pairs]
    return Section(anchor, dict(SECTIONS)[anchor], render_body("kv.html.j2", pairs=shown, missing=missing))


def _run_section(summary: Mapping[str, Any]) -> Section:
    run = mapping(summary, "run")
    if run is None:
        return _facts("run", None, "Run information not available.")
    return _facts(
        "run",
        [
            ("settings profile", text(run.get("profile"))),
            ("config hash", text(run.get("config_hash"))),
            ("seed", text(run.get("seed"))),
            ("device", text(run.get("device"))),
            ("foxhunt version", text(run.get("foxhunt_version"))),
            ("started", text(run.get("started"))),
            ("elapsed", duration(run.get("elapsed_s"))),
        ],
        "",
    )


def _data_section(summary: Mapping[str, Any]) -> Section:
    data = mapping(summary, "data")
    if data is None:
        return _facts("data", None, "Data summary not available.")
    source = data.get("files") or data.get("source")
    if isinstance(source, list | tuple):
        source_html = "<br>".join(esc(s) for s in source) or NA
    else:
        source_html = text(source)
    kind = "synthetic (generated)" if data.get("synthetic") else ("DBN files" if data.get("files") else None)
    unit = data.get("row_unit")
    return _facts(
        "data",
        [
            ("kind", text(kind)),
            ("source", source_html),
            ("instrument", text(data.get("instrument"))),
            ("rows", count(data.get("rows")) + (f" ({esc(unit)} rows)" if unit else "")),
            ("sessions", count(data.get("sessions"))),
            ("first", text(data.get("first"))),
            ("last", text(data.get("last"))),
            ("features", count(data.get("features"))),
        ],
        "",
    )


def _leaks_section(summary: Mapping[str, Any]) -> Section:
    leaks = mapping(summary, "leaks")
    if leaks is None or not isinstance(leaks.get("passed"), bool):
        body = render_body("leaks.html.j2", passed=None, checked="", leaking="")
    else:
        cols = leaks.get("leaking_columns")
        leaking = ", ".join(map(str, cols)) if isinstance(cols, list | tuple) and cols else ""
        checked = Markup(count(leaks.get("columns_checked")))
        body = render_body("leaks.html.j2", passed=leaks["passed"], checked=checked, leaking=leaking)
    return Section("leaks", dict(SECTIONS)["leaks"], body)


def _alpha_section(summary: Mapping[str, Any], alpha_pngs: Sequence[tuple[str, Path | None]]) -> Section:
    alpha = mapping(summary, "alpha")
    shown = None
    if alpha is not None:
        rows = [r for r in alpha.get("rows") or [] if isinstance(r, Mapping)]
        shown = {
            "line": alpha.get("verdict_line"),  # the alpha check's own sentence, "Verdict: ..."
            "verdict": Markup(text(alpha.get("verdict"))),
            "rows": [
                {
                    "model": Markup(text(r.get("model"))),
                    "horizon": Markup(count(r.get("horizon"))),
                    "auc": Markup(fixed(r.get("auc"), 3)),
                    "interval": Markup(f"[{fixed(r.get('auc_lo'), 3)}, {fixed(r.get('auc_hi'), 3)}]"),
                }
                for r in rows
            ],
            "images": [
                _image(path, f"alpha check: {rel}", f"Alpha plot {rel} not found.", label=rel)
                for rel, path in alpha_pngs
            ],
        }
    return Section("alpha", dict(SECTIONS)["alpha"], render_body("alpha.html.j2", alpha=shown))


METRIC_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("net_pnl", "Net PnL", money),
    ("sharpe_annual", "Sharpe (annual)", fixed),
    ("max_drawdown", "Max drawdown", lambda x: pct(x, 2)),
    ("trades", "Trades", count),
    ("win_rate", "Win rate", rate),
    ("active_frac", "Active fraction", pct),
)
"""The metrics table's columns: one row per policy and fold, one column per metric (a column per
policy and metric made the table 1,652 px wide)."""


def _sharpe_cell(m: Mapping[str, Any]) -> str:
    """The Sharpe as :func:`~foxhunt.backtest.metrics.sharpe_text` reads it (n/a on a short sample)."""
    if num(m.get("sharpe_annual")) is None:
        return NA
    shown = sharpe_text(m, interval=False)
    return esc(shown) if not shown.startswith("n/a") else f'<span class="na">{esc(shown)}</span>'


def _metric_cells(m: Mapping[str, Any]) -> list[Markup]:
    cells = [_sharpe_cell(m) if key == "sharpe_annual" else fmt(m.get(key)) for key, _, fmt in METRIC_COLUMNS]
    return [Markup(c) for c in cells]


def _checkpoint_text(fold: Mapping[str, Any]) -> str:
    kind = fold.get("checkpoint")
    if not kind:
        return NA
    text = f"{esc(kind)}, epoch {count(fold.get('epoch'))}"
    committee = fold.get("committee")  # train.members > 1: the members' committee, each at its own
    if isinstance(committee, Mapping):
        text = f"committee of {count(committee.get('members'))} members ({text})"
    return text


def _checkpoint_cell(fold: Mapping[str, Any]) -> str:
    return td(_checkpoint_text(fold), "")


RULE = Baseline.RULE.value


def _metrics_rows(folds: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[dict[str, Any]]:
    """The metrics table's rows: per fold one per policy (the fold's id leading the first), then the
    folds' means per policy."""
    rows, per_fold = [], [policies(f, names) for f in folds]
    for i, (fold, pols) in enumerate(zip(folds, per_fold, strict=True)):
        for j, p in enumerate(names):
            m = pols[p]
            flag = implausible_reasons(m)
            # an implausible agent is red, an agent that never traded amber (the verdict warns of both)
            cls = ""
            if p == AGENT:
                cls = "implausible" if flag else ("idle" if num(fold.get("trades")) == 0 else "agent")
            rows.append(
                {
                    "cls": cls,
                    "lead": fold_id(fold, i) if j == 0 else None,
                    "who": label(p),
                    "checkpoint": Markup(_checkpoint_text(fold)) if p == AGENT else None,
                    "metrics": _metric_cells(m),
                    "bpy": Markup(fixed(fold.get("bars_per_year"), 0)),
                    "reasons": ", ".join(flag),
                    "flag": "no",
                }
            )
    n_flagged = sum(bool(implausible_reasons(f)) for f in folds)
    for j, p in enumerate(names):
        mean_m = {key: mean([pols[p].get(key) for pols in per_fold]) for key, _, _ in METRIC_COLUMNS}
        steps = [num(pols[p].get("steps")) for pols in per_fold]  # the folds' steps together
        mean_m["steps"] = None if None in steps else sum(steps)  # type: ignore[arg-type]
        rows.append(
            {
                "cls": "mean",
                "lead": f"mean of {len(folds)}" if j == 0 else None,
                "who": label(p),
                "checkpoint": None,
                "metrics": _metric_cells(mean_m),
                "bpy": Markup(fixed(mean([f.get("bars_per_year") for f in folds]), 0)),
                "reasons": "",
                "flag": f"{n_flagged} of {len(folds)} folds" if p == AGENT else "",
            }
        )
    return rows


def _best_vs_last(folds: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The reported checkpoint's numbers beside the last epoch's, over the same validation rows;
    ``None`` when the last epoch's were not recorded."""
    if not any(isinstance(f.get(LAST_EPOCH_KEY), Mapping) for f in folds):
        return None
    keys = (("net_pnl", "net PnL", money), ("sharpe_annual", "Sharpe", fixed), ("trades", "trades", count))
    rows = []
    for i, f in enumerate(folds):
        last = f.get(LAST_EPOCH_KEY) if isinstance(f.get(LAST_EPOCH_KEY), Mapping) else {}
        rows.append(
            {
                "fold": fold_id(f, i),
                "checkpoint": Markup(_checkpoint_text(f)),
                "reported": [Markup(fmt(f.get(k))) for k, _, fmt in keys],
                "epoch": Markup(count(last.get("epoch"))),
                "last": [Markup(fmt(last.get(k))) for k, _, fmt in keys],
            }
        )
    return {"titles": [t for _, t, _ in keys], "rows": rows}


def _metrics_section(folds: Sequence[Mapping[str, Any]], names: Sequence[str]) -> Section:
    if not folds:
        return _section("metrics", note("No fold completed: no validation metrics."))
    breakdown = [
        [
            fold_id(f, i),
            *(
                Markup(x)
                for x in (
                    count(f.get("train_rows")),
                    count(_selection(f).get("rows")),
                    count(f.get("val_rows")),
                    money(f.get("gross_pnl")),
                    money(f.get("costs")),
                    money(f.get("net_pnl")),
                )
            ),
        ]
        for i, f in enumerate(folds)
    ]
    body = render_body(
        "metrics.html.j2",
        columns=[title for _, title, _ in METRIC_COLUMNS],
        policies=len(names),
        rows=_metrics_rows(folds, names),
        min_steps=f"{MIN_SHARPE_STEPS:,}",
        baselines=[(label(b), DESCRIPTIONS[b]) for b in ORDER],
        capture=_capture(folds, names),
        execution=execution_view(folds),
        last=_best_vs_last(folds),
        breakdown=breakdown,
    )
    return Section("metrics", dict(SECTIONS)["metrics"], body)


def _selection(fold: Mapping[str, Any]) -> Mapping[str, Any]:
    """The fold's selection period (``fold["selection"]``); empty for a run that selected nothing or
    predates it."""
    sel = fold.get(SELECTION_KEY)
    return sel if isinstance(sel, Mapping) and sel.get("rows") else {}


def _capture(folds: Sequence[Mapping[str, Any]], names: Sequence[str]) -> dict[str, Any] | None:
    """Per fold the agent's net PnL beside the reference rule's and the baselines', the capture (agent /
    rule) and whether the fold enters the run's capture (not where the rule made <= 0: no edge after
    costs to capture); with the capture over the kept folds, their median, the folds excluded and
    why, and the sum over every fold as reported before issue 58 (:mod:`foxhunt.backtest.capture`).
    ``None`` when no fold has a reference rule."""
    bases = [f.get("baselines") if isinstance(f.get("baselines"), Mapping) else {} for f in folds]
    rule_of = [b.get("rule") if isinstance(b.get("rule"), Mapping) else None for b in bases]
    if not any(rule_of):
        return None
    shown = [RULE, *(n for n in names if n not in (AGENT, RULE))]
    rows, caps = [], []
    for i, (f, base, rule) in enumerate(zip(folds, bases, rule_of, strict=True)):
        agent, versus = num(f.get("net_pnl")), num((rule or {}).get("net_pnl"))
        fc = FoldCapture(fold_id(f, i), agent, versus) if agent is not None else None
        caps += [fc] if fc is not None else []
        why = fc.excluded if fc is not None else None
        rows.append(
            {
                "fold": fold_id(f, i),
                "agent": Markup(money(f.get("net_pnl"))),
                "bases": [Markup(money((base.get(b) or {}).get("net_pnl"))) for b in shown],
                "capture": Markup(pct(fc.capture if fc is not None else None, 0)),
                "kept": Markup(NA) if fc is None else "yes" if why is None else f"no: {why.text}",
            }
        )
    cap = Capture(tuple(caps))
    excluded = [
        {
            "fold": e["fold"],
            "why": e["why"],
            "agent": Markup(money(e["agent_net_pnl"])),
            "rule": Markup(money(e["rule_net_pnl"])),
        }
        for e in cap.excluded()
    ]
    return {
        "shown": [label(b) for b in shown],
        "rows": rows,
        "kept": ", ".join(str(f.fold) for f in cap.kept) or "none",
        "ratio": Markup(pct(cap.ratio, 0)),
        "median": Markup(pct(cap.median, 0)),
        "excluded": excluded,
        "all_folds": Markup(pct(cap.all_folds, 0)),
    }


def _history(fold: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    h = fold.get("history")
    return [r for r in h if isinstance(r, Mapping)] if isinstance(h, list | tuple) else []


def _per_fold_images(
    anchor: str, folds: Sequence[Mapping[str, Any]], images: Mapping[tuple[str, int], Any], missing: str
) -> Section:
    shown = []
    for i, fold in enumerate(folds):
        k = fold_id(fold, i)
        alt = f"{dict(SECTIONS)[anchor]}, fold {k}"
        image = _image(images.get((anchor, i)), alt, missing.format(k=k))
        branches = _action_rows(fold) if anchor == "actions" else []
        shown.append({"fold": k, "image": image, "branches": branches})
    body = render_body("per_fold.html.j2", folds=shown, actions=anchor == "actions", na=Markup(NA))
    return Section(anchor, dict(SECTIONS)[anchor], body)


Shares = list[tuple[str, Markup]] | None
"""An action distribution's shares as ``(action, formatted share)``; ``None``: not recorded."""


def _action_rows(fold: Mapping[str, Any]) -> list[tuple[str, Shares, Shares]]:
    """``(branch, picked shares, realised shares)`` of each action branch the fold recorded."""
    actions = fold.get("actions") if isinstance(fold.get("actions"), Mapping) else {}
    picked = actions.get("picked") if isinstance(actions.get("picked"), Mapping) else {}
    realised = actions.get("realised") if isinstance(actions.get("realised"), Mapping) else {}

    def cell(dist: Any) -> Shares:
        s = plots.shares(dist)
        return [(str(k), Markup(pct(v))) for k, v in s.items()] if s else None

    branches = list(dict.fromkeys([*picked, *realised]))
    return [(str(b), cell(picked.get(b)), cell(realised.get(b))) for b in branches]


def _diagnostics_section(folds: Sequence[Mapping[str, Any]], expert_png: Path | None) -> Section:
    rows = []
    for i, fold in enumerate(folds):
        diag = fold.get("diagnostics") if isinstance(fold.get("diagnostics"), Mapping) else {}
        hist = _history(fold)
        best = num(diag.get("best_epoch"))
        at = next((r for r in hist if best is not None and num(r.get("epoch")) == best), None)
        at = at if at is not None else (hist[-1] if hist else {})
        util = diag.get("expert_utilisation")
        rows.append(
            {
                "fold": fold_id(fold, i),
                "best": Markup(fixed(best, 0)),
                "epochs": len(hist),
                "shown": Markup(text(at.get("epoch")) if at else NA),
                "sharpe": Markup(fixed(at.get("select_sharpe"))),
                "entropy": Markup(fixed(at.get("gate_entropy"), 3)),
                "atoms": Markup(pct(at.get("atom_utilisation"))),
                "grad": Markup(fixed(at.get("grad_norm"), 3)),
                "util": Markup(
                    " ".join(pct(u) for u in util) if isinstance(util, list | tuple) and util else NA
                ),
                "anomaly": diag.get("anomaly"),
                "responses": [str(r) for r in diag.get("plateau_responses") or []],
            }
        )
    body = render_body(
        "diagnostics.html.j2",
        rows=rows,
        screen=_screen(folds),
        qgap=_qgap(folds),
        calibration=_calibration(folds),
        expert=_image(expert_png, "expert utilisation by fold", "Expert utilisation not available."),
    )
    return Section("diagnostics", dict(SECTIONS)["diagnostics"], body)


def _screen(folds: Sequence[Mapping[str, Any]]) -> list[tuple[int, list[tuple[str, Markup]]]]:
    """The input screen (agent.network.input_screen): per fold that ran it, the feature columns the
    network read and their rank IC with the plan-horizon move on the fold's training rows."""
    found = []
    for i, f in enumerate(folds):
        diag = f.get("diagnostics") if isinstance(f.get("diagnostics"), Mapping) else {}
        kept = diag.get("input_screen")
        if isinstance(kept, Mapping) and kept:
            found.append((fold_id(f, i), [(str(c), Markup(fixed(num(ic), 3))) for c, ic in kept.items()]))
    return found


_BUCKETS = ("below the median", "50-75%", "75-90%", "90-97%", "top 3%")
"""The columns of the calibration table (foxhunt.train.diagnostics.CALIBRATION_QUANTILES)."""


def _calibration(folds: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Where the entries pay: per fold, the next plan horizon's move per contract in the entry's
    direction by quantile of the reported policy's entry advantage, on training and validation rows;
    ``None`` for a summary without it."""
    found = [(i, f, f.get(CALIBRATION_KEY)) for i, f in enumerate(folds)]
    found = [(i, f, c) for i, f, c in found if isinstance(c, Mapping)]
    if not found:
        return None
    rows, horizon = [], None
    for i, f, cal in found:
        for part in ("train", "validation"):
            c = cal.get(part)
            if not isinstance(c, Mapping):
                continue
            horizon = c.get("horizon", horizon)
            moves = list(c.get("move") or [])
            rows.append(
                {
                    "fold": fold_id(f, i),
                    "part": part,
                    "n": Markup(count(c.get("rows"))),
                    "moves": [
                        Markup(money(moves[b])) if b < len(moves) else "n/a" for b in range(len(_BUCKETS))
                    ],
                    "corr": Markup(fixed(c.get("corr"), 3)),
                }
            )
    return {"buckets": _BUCKETS, "rows": rows, "horizon": horizon}


def _qgap(folds: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Learner or gambler: per fold and epoch, corr(greedy Q(long) - Q(short), planted carrier);
    ``None`` where no epoch measured it (no planted signal)."""
    hists = [_history(f) for f in folds]
    epochs = sorted({int(e) for h in hists for r in h if (e := num(r.get("epoch"))) is not None})
    if not any(num(r.get("qgap_corr")) is not None for h in hists for r in h):
        return None
    rows = []
    for i, (f, h) in enumerate(zip(folds, hists, strict=True)):
        by_epoch = {int(e): r.get("qgap_corr") for r in h if (e := num(r.get("epoch"))) is not None}
        rows.append((fold_id(f, i), [Markup(fixed(by_epoch.get(e), 3)) for e in epochs]))
    return {"epochs": epochs, "rows": rows}


# --- entry point -------------------------------------------------------------------------------


def _draw(
    folds: Sequence[Mapping[str, Any]], plot_dir: Path
) -> tuple[dict[tuple[str, int], Any], Path | None]:
    images: dict[tuple[str, int], Path | None] = {}
    expert: dict[int, list[Any]] = {}
    ids = [fold_id(fold, i) for i, fold in enumerate(folds)]
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


def alpha_plots(summary: Mapping[str, Any], run_dir: Path) -> list[tuple[str, Path | None]]:
    """``(path as recorded, file or None when absent)`` of each alpha-check plot the summary names
    (``alpha.plots``: paths relative to the run folder)."""
    alpha = mapping(summary, "alpha") or {}
    named = alpha.get("plots")
    if not isinstance(named, list | tuple):
        return []
    out = []
    for rel in named:
        path = run_dir / str(rel)
        out.append((str(rel), path if path.is_file() else None))
    return out


def render(
    summary: Mapping[str, Any],
    images: Mapping[tuple[str, int], Any],
    expert_png: Path | None,
    alpha_pngs: Sequence[tuple[str, Path | None]] = (),
) -> str:
    """The report's HTML from the summary and the PNGs drawn for it."""
    folds = check_summary(summary)
    names = policy_names(folds)
    title = f"foxhunt run report: {data_title(summary)}"
    body = [
        _section("verdict", verdict_body(summary, folds, names)),
        _run_section(summary),
        _data_section(summary),
        _leaks_section(summary),
        _alpha_section(summary, alpha_pngs),
        _metrics_section(folds, names),
        _per_fold_images("training", folds, images, "No training history recorded for fold {k}."),
        _per_fold_images("equity", folds, images, "Validation equity curves not available for fold {k}."),
        _per_fold_images("actions", folds, images, "Action distributions not available for fold {k}."),
        _diagnostics_section(folds, expert_png),
    ]
    return render_page(title, CSS, body, nav=True)


def write_report(run_dir: str | Path, summary: Mapping[str, Any]) -> Path:
    """Write ``run_dir/report.html`` (self-contained) and its PNGs in ``run_dir/plots/``; return the
    HTML's path. Raises :class:`ReportInputError` (a :class:`ValueError`) before writing anything
    when ``summary`` has no usable ``folds``."""
    folds = check_summary(summary)
    run_dir = Path(run_dir)
    images, expert_png = _draw(folds, run_dir / "plots")
    page = render(summary, images, expert_png, alpha_plots(summary, run_dir))
    return write_text(run_dir / "report.html", page)
