"""The verdict block at the top of the report: one line each for the data, the leak guard, the alpha
check, the agent against its baselines, the checkpoint the numbers come from, and the anomaly guard,
then a WARNING for every fold whose result cannot be read as a result (the agent never traded, or
the backtester flagged it implausible).

Each line is built from the summary only (``metrics.json``); a part that is missing says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup

from foxhunt.domain.baselines import ORDER, label
from foxhunt.report.fmt import (
    count,
    esc,
    fold_id,
    implausible_reasons,
    mapping,
    mean,
    money,
    num,
    pct,
    policies,
)
from foxhunt.report.page import render_body
from foxhunt.report.schema import (
    BEST_RULE,
    LAST_EPOCH_KEY,
    LAST_RULE,
    OUT_OF_SAMPLE,
    SELECTION_CAVEAT,
    SELECTION_KEY,
    ReportedCheckpoint,
)

GOOD, BAD = '<span class="good">{}</span>', '<span class="bad">{}</span>'


def data_title(summary: Mapping[str, Any]) -> str:
    """What the run was on, for the page title: the data's name (the synthetic market, or the files
    and instrument), never the settings profile's name (a real-data run with the smoke profile is
    not a smoke test of synthetic data)."""
    data = mapping(summary, "data") or {}
    name = data.get("name") or data.get("source")
    if isinstance(name, list | tuple):
        name = ", ".join(str(n) for n in name[:2]) + (f" and {len(name) - 2} more" if len(name) > 2 else "")
    instrument = data.get("instrument")
    if not name:
        return str(instrument) if instrument else "data not recorded"
    return f"{name} ({instrument})" if instrument and str(instrument) not in str(name) else str(name)


def _data_line(summary: Mapping[str, Any]) -> str:
    data = mapping(summary, "data")
    if data is None:
        return BAD.format("not recorded")
    files = data.get("files")
    if data.get("synthetic"):
        what = f"synthetic market: {esc(data.get('name') or data.get('source') or 'generated')}"
    elif isinstance(files, list | tuple) and files:
        more = f" and {len(files) - 3} more" if len(files) > 3 else ""
        shown = ", ".join(esc(f) for f in files[:3]) + more
        what = f"{len(files)} DBN file{'s' if len(files) != 1 else ''}: {shown}"
    else:
        what = esc(data.get("name") or data.get("source") or "source not recorded")
    unit = data.get("row_unit")
    parts = [what, f"{count(data.get('rows'))} rows" + (f" ({esc(unit)} rows)" if unit else "")]
    if data.get("instrument"):
        parts.append(f"instrument {esc(data['instrument'])}")
    if data.get("first") and data.get("last"):
        parts.append(f"{esc(data['first'])} to {esc(data['last'])}")
    return "; ".join(parts)


def leak_line(leaks: Mapping[str, Any] | None) -> str:
    """The leak guard's one-line verdict: its own ``verdict`` text when the summary carries one (the
    guard's wording, without its "Leak guard:" prefix), else one made from ``passed``."""
    if leaks is None or not isinstance(leaks.get("passed"), bool):
        return BAD.format("not run") + " (no leak guard result in the summary)"
    label, style = ("clean", GOOD) if leaks["passed"] else ("LEAK", BAD)
    given = leaks.get("verdict")
    if given:
        detail = str(given).removeprefix("Leak guard: ").removeprefix(f"{label}: ")
    elif leaks["passed"]:
        detail = (
            "no feature at or before a cut changed when only the data after it was perturbed "
            f"({count(leaks.get('columns_checked'))} columns checked)"
        )
    else:
        cols = leaks.get("leaking_columns")
        named = f" in {', '.join(map(str, cols))}" if isinstance(cols, list | tuple) and cols else ""
        detail = f"look-ahead found{named}"
    return f"{style.format(label)}: {esc(detail)}"


def _leaks(summary: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``leaks`` (passed, columns_checked, verdict), completed from the guard's own ``leak_guard``
    summary (clean, verdict) where a field is missing."""
    leaks, guard = mapping(summary, "leaks") or {}, mapping(summary, "leak_guard") or {}
    if not leaks and not guard:
        return None
    merged = {**guard, **leaks}
    if not isinstance(merged.get("passed"), bool) and isinstance(guard.get("clean"), bool):
        merged["passed"] = guard["clean"]
    if not merged.get("verdict") and guard.get("verdict"):
        merged["verdict"] = guard["verdict"]
    return merged


def _alpha_line(summary: Mapping[str, Any]) -> str:
    alpha = mapping(summary, "alpha")
    if alpha is None:
        return BAD.format("not run") + " (no alpha check in the summary)"
    line = alpha.get("verdict_line") or alpha.get("verdict")
    return esc(line) if line else BAD.format("verdict not recorded")


def _beats(per_fold: Sequence[Mapping[str, Mapping[str, Any]]], base: str) -> tuple[int, int]:
    """(folds where the agent's net PnL beat ``base``'s, folds where both are known)."""
    known = [
        (num(p["agent"].get("net_pnl")), num(p[base].get("net_pnl")))
        for p in per_fold
        if num(p["agent"].get("net_pnl")) is not None and num(p[base].get("net_pnl")) is not None
    ]
    return sum(a > b for a, b in known), len(known)  # type: ignore[operator]


def _versus_line(summary: Mapping[str, Any], folds: Sequence[Mapping[str, Any]], names: Sequence[str]) -> str:
    if not folds:
        return BAD.format("no fold completed")
    per_fold = [policies(f, names) for f in folds]
    given = mapping(summary, "summary") or {}
    beats = []
    for base in names[1:]:
        won, known = _beats(per_fold, base)
        if base in ORDER and f"beats_{base}_folds" in given:
            won, known = int(given[f"beats_{base}_folds"]), len(folds)
        if known:
            beats.append(f"{esc(label(base))} in <b>{won} of {known}</b>")
    means = ", ".join(
        f"{esc(label(n))} {money(mean([p[n].get('net_pnl') for p in per_fold]))}" for n in names
    )
    beat_text = "; ".join(beats) if beats else "no baseline recorded"
    line = f"net PnL beats {beat_text} folds. Mean net PnL: {means}."
    if "capture_all_folds" in given:  # since issue 58: the folds where the rule lost are kept out
        gone = given.get("capture_excluded") or []
        out = ", ".join(esc(str(e.get("fold"))) for e in gone if isinstance(e, Mapping))
        line += (
            " Edge capture (agent / rule over the folds where the rule made money): "
            f"{pct(given.get('capture'), 0)}, median per fold {pct(given.get('capture_median'), 0)}"
            + (f", fold {out} excluded (the rule made &lt;= 0 or was absent)" if out else "")
            + f"; over every fold (as reported before issue 58): {pct(given['capture_all_folds'], 0)}."
        )
    elif "capture" in given:  # a summary from before issue 58: agent / rule over every fold
        line += f" Edge capture (agent / rule, all folds): {pct(given['capture'], 0)}."
    return line


def _checkpoint_line(folds: Sequence[Mapping[str, Any]]) -> str:
    if not folds:
        return "no fold completed"
    kinds = [f.get("checkpoint") for f in folds]
    if any(k is None for k in kinds):
        return BAD.format("not recorded") + " (the summary does not say which epoch each fold is from)"
    # Every fold of a summary written since the validation period left the choice records its
    # selection period; an older summary picked its best epoch on the validation period it reports.
    sels = [f.get(SELECTION_KEY) if isinstance(f.get(SELECTION_KEY), Mapping) else None for f in folds]
    honest = all(sel is not None for sel in sels)
    per = ", ".join(
        f"fold {fold_id(f, i)}: {esc(f['checkpoint'])} = epoch {count(f.get('epoch'))}"
        + (f" ({count(sel.get('rows'))} selection rows)" if sel is not None and sel.get("rows") else "")
        for i, (f, sel) in enumerate(zip(folds, sels, strict=True))
    )
    rule = folds[0].get("best_rule")
    if not isinstance(rule, str):
        rule = BEST_RULE if honest else "the best validation Sharpe"
    lasts = [f.get(LAST_EPOCH_KEY) if isinstance(f.get(LAST_EPOCH_KEY), Mapping) else {} for f in folds]
    best_mean = mean([f.get("net_pnl") for f in folds])
    last_mean = mean([last.get("net_pnl") for last in lasts])
    text = (
        f"every agent number in this report is from the checkpoint each fold names ({esc(rule)}) over "
        f"the whole validation period, as <code>foxhunt backtest --checkpoint</code> evaluates it ({per}). "
        f"Mean net PnL: reported {money(best_mean)}, last epoch {money(last_mean)}; "
        f"{esc(OUT_OF_SAMPLE if honest else SELECTION_CAVEAT)}."
    )
    if ReportedCheckpoint.LAST.value in kinds and rule != LAST_RULE:  # last by default, not by choice
        text += " Folds marked last had no epoch eligible as best and report their last epoch."
    return text


def _anomaly_line(summary: Mapping[str, Any], folds: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    stopped = mapping(summary, "stopped")
    if stopped is not None:
        parts.append(
            BAD.format("STOPPED")
            + f" at {esc(stopped.get('where', 'an unrecorded epoch'))}: {esc(stopped.get('diagnosis', ''))}"
            + (f" ({len(folds)} fold{'s' if len(folds) != 1 else ''} completed before it)")
        )
    suspect = []
    for i, f in enumerate(folds):
        diag = f.get("diagnostics") if isinstance(f.get("diagnostics"), Mapping) else {}
        if diag.get("anomaly"):
            suspect.append(f"fold {fold_id(f, i)}: {esc(diag['anomaly'])}")
    if suspect:
        parts.append(BAD.format("flagged epochs") + " (never saved as best) in " + "; ".join(suspect))
    if not parts:
        return GOOD.format("no run stopped") + ", no epoch flagged"
    return ". ".join(parts)


def warnings(folds: Sequence[Mapping[str, Any]]) -> list[str]:
    """One plain-text WARNING per fold whose result is not a result: the agent never traded (its
    numbers are the flat policy's), or the backtester flagged them implausible."""
    out = []
    for i, f in enumerate(folds):
        k = fold_id(f, i)
        trades = num(f.get("trades"))
        if trades is not None and trades == 0:
            out.append(
                f"the agent never traded in fold {k} ({count(f.get('val_rows'))} validation rows): "
                "its PnL and Sharpe are those of doing nothing, not evidence of skill or of its absence"
            )
        reasons = implausible_reasons(f)
        if reasons:
            out.append(f"fold {k}'s agent result is implausible: {', '.join(reasons)}")
    return out


def verdict_body(
    summary: Mapping[str, Any], folds: Sequence[Mapping[str, Any]], names: Sequence[str]
) -> Markup:
    """The verdict block's HTML (the warnings and a key-value table), laid out by
    ``templates/verdict.html.j2``."""
    rows = [
        ("Data", _data_line(summary)),
        ("Leak guard", leak_line(_leaks(summary))),
        ("Alpha check", _alpha_line(summary)),
        ("Agent vs baselines", _versus_line(summary, folds, names)),
        ("Best vs last epoch", _checkpoint_line(folds)),
        ("Anomaly guard", _anomaly_line(summary, folds)),
    ]
    lines = [(name, Markup(line)) for name, line in rows]  # each line built from escaped pieces
    return render_body("verdict.html.j2", warnings=warnings(folds), lines=lines)
