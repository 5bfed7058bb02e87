"""What the commands print: result lines and tables on stdout, errors on stderr.

Result lines carry paths and names from the user and the data: printed as text, never as markup.
Progress goes to stderr through :class:`foxhunt.console.Reporter` (see ``common.reporter``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from foxhunt.console import idle_note

if TYPE_CHECKING:
    from foxhunt.pipeline import JobSummary, SeedsSummary, TrainSummary, TuneSummary

console = Console(stderr=True)
# Wide when piped (CI logs, files): rich would otherwise squeeze tables into 80 columns.
out = Console(width=None if sys.stdout.isatty() else 160, markup=False)


def line(text: str) -> None:
    """One result line on stdout, printed as it is (no markup, no highlighting, never wrapped)."""
    out.print(text, markup=False, highlight=False, soft_wrap=True)


def error_line(label: str, text: str) -> None:
    """One line on stderr; ``text`` (paths, values from data) is escaped, never read as Rich markup."""
    joined = " ".join(text.splitlines())
    console.print(f"[bold red]{label}[/]: {escape(joined)}", highlight=False, soft_wrap=True)


def as_json(body: Any) -> None:
    """``body`` as one JSON object on stdout."""
    out.print_json(json.dumps(body))


# --- config -----------------------------------------------------------------------------------


def config_table(digest: str, tree: dict[str, Any]) -> None:
    """A resolved config as a table of its settings under the keys ``--set`` takes."""
    table = Table(title=f"foxhunt config {digest}", title_justify="left")
    table.add_column("setting (--set KEY=VALUE)", no_wrap=True, style="bold")
    table.add_column("value", overflow="fold")
    for key, value in flat_settings(tree):
        table.add_row(key, value, end_section=False)
    out.print(table)


def flat_settings(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """``[("env.episode_rows", "512"), ...]``: every leaf of a dumped config under its dotted key
    (the key ``--set`` takes); a list as its JSON."""
    rows = []
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            rows += flat_settings(value, f"{prefix}{key}.")
        else:
            rows.append((f"{prefix}{key}", value if isinstance(value, str) else json.dumps(value)))
    return rows


# --- data -------------------------------------------------------------------------------------


def inspected(reports: list[dict[str, Any]]) -> None:
    """One two-column table per file (field, value): readable in an 80-column terminal, where one
    row per file with ten columns needed ~160."""
    for r in reports:
        table = Table(title=Path(r["path"]).name, title_justify="left", show_header=False)
        table.add_column("field", no_wrap=True, style="bold")
        table.add_column("value", overflow="fold")
        for name, value in _inspected_fields(r).items():
            table.add_row(name, value)
        out.print(table)


def _inspected_fields(r: dict[str, Any]) -> dict[str, str]:
    return {
        "schema": r["schema"],
        "dataset": r["dataset"],
        "records": f"{r['records']:,}",
        "instruments": ", ".join(f"{i['symbol']} ({i['instrument_id']})" for i in r["instruments"]),
        "contract": (
            f"tick {r['instrument']['tick_size']:g} x point value {r['instrument']['point_value']:g} "
            f"{r['instrument']['currency']} ({r['instrument']['source']})"
            if r["instrument"]
            else "unknown (--json says why)"
        ),
        "start (UTC)": r["start"],
        "end (UTC)": r["end"],
        "crossed": "n/a" if (x := r["crossed_share"]) is None else f"{x:.2%} of book states",
        "median spread": "n/a" if (t := r["median_spread_ticks"]) is None else f"{t:g} ticks",
    }


def rebuilt(result: Any, out_path: Path) -> None:
    out.print(
        f"{result.n_events:,} MBO events -> {result.n_states:,} book states "
        f"({result.n_crossed:,} crossed/locked, {result.live_orders:,} orders resting at the end) "
        f"-> {out_path}"
    )


def text(result: str) -> None:
    """A result as rich prints it (wrapped at the console's width, 160 columns when piped)."""
    out.print(result)


def each(items: list[Any]) -> None:
    """One item a line (file paths, profile names)."""
    for item in items:
        text(str(item))


def bars(summary: dict[str, Any]) -> None:
    table = Table(title=f"{summary['row_unit']} rows -> {summary['path']}", show_header=False)
    for key, value in summary.items():
        if key not in ("path", "masked"):
            table.add_row(key, str(value))
    out.print(table)
    if summary["masked"]:  # what the input lacked (top of book, no trades), on one line
        out.print(summary["masked"], soft_wrap=True)


# --- features ---------------------------------------------------------------------------------


def cache_summary(cache: Any, stats: list[dict[str, Any]]) -> None:
    """A built cache in one line (rows, features, coverage, dead columns), then what its input lacked."""
    import numpy as np

    from foxhunt.features.stack import mask_note

    meta = cache.meta
    dead = [s["name"] for s in stats if s["coverage"] == 0.0]
    mean = np.mean([s["coverage"] for s in stats]) if stats else 0
    out.print(
        f"{cache.path}: {meta['rows']:,} {meta['row_unit']} rows x {len(cache.columns)} features "
        f"({meta['data_source']}), schema {meta['schema_hash'][:12]}; "
        f"mean coverage {mean:.1%}; "
        f"{len(dead)} columns never non-zero" + (f": {', '.join(dead[:12])}" if dead else "")
    )
    if note := mask_note(meta.get("masked", {})):  # what the input lacked (top of book, no trades)
        out.print(note, soft_wrap=True)


def cache_info(cache: Any, stats: list[dict[str, Any]]) -> None:
    """A cache's metadata, then a table of its columns' statistics."""
    meta = cache.meta
    head = Table(title=str(cache.path), show_header=False)
    for key in ("rows", "row_unit", "data_source", "schema_hash", "format_version", "created_at"):
        head.add_row(key, str(meta[key]))
    head.add_row("sources", ", ".join(s["name"] for s in meta["sources"]))
    head.add_row("groups", ", ".join(f"{g['name']} ({g['width']})" for g in meta["layout"]))
    out.print(head)
    table = Table("column", "mean", "std", "min", "max", "coverage")
    for s in stats:
        table.add_row(
            s["name"],
            f"{s['mean']:.4g}",
            f"{s['std']:.4g}",
            f"{s['min']:.4g}",
            f"{s['max']:.4g}",
            f"{s['coverage']:.1%}",
        )
    out.print(table)


# --- backtest, edge ---------------------------------------------------------------------------


def backtested(name: str, body: dict[str, Any]) -> None:
    """A backtest's result line: net, gross, costs, trades, Sharpe, drawdown, implausible."""
    from foxhunt.backtest.metrics import sharpe_text

    out.print(
        f"{name} on {body['instrument']['symbol']}: net {body['net_pnl']:,.0f} "
        f"(gross {body['gross_pnl']:,.0f}, "
        f"costs {body['costs']:,.0f}), {body['trades']} trades, Sharpe {sharpe_text(body)} "
        f"at {body['bars_per_year']:,.0f} bars/year, "
        f"max drawdown {body['max_drawdown']:.2%}"
        + ("; IMPLAUSIBLE: " + "; ".join(body["implausible_reasons"]) if body["implausible"] else "")
        + (f"; {name} never traded" if body["trades"] == 0 else ""),
        markup=False,
    )
    if (block := body.get("execution")) is not None:
        execution_lines({name: block})


def _folds_execution(folds: list[dict[str, Any]]) -> dict[str, dict[str, Any] | None]:
    from foxhunt.backtest.execution import folds_execution

    return folds_execution(folds)


def execution_lines(sides: dict[str, dict[str, Any] | None]) -> None:
    """A line per side (agent, rule, committee) of their execution blocks (foxhunt.backtest.execution);
    a side without one (no rule in the run) is left out."""
    from foxhunt.backtest.execution import execution_text

    for name, block in sides.items():
        if block is not None:
            line(execution_text("reference rule" if name == "rule" else name, block))


def edge(result: dict[str, Any], written: Path) -> None:
    """The reference rule, then per fold the rule beside every baseline, then the totals."""
    from foxhunt.backtest.capture import RULE
    from foxhunt.backtest.metrics import sharpe_text
    from foxhunt.domain.baselines import ORDER, label

    out.print(result["rule"]["text"] + f", {result['rule']['plan_rows']}-row plans", markup=False)
    for row in result["folds"]:
        cells = [
            f"{label(name)} {row[name]['net_pnl']:+,.0f} ({row[name]['trades']} trades, "
            f"Sharpe {sharpe_text(row[name], interval=False)})"
            for name in (RULE, *ORDER)
        ]
        out.print(f"fold {row['fold']}: " + "; ".join(cells), markup=False)
    total = result["total"]
    out.print(
        "total: " + ", ".join(f"{label(n)} {total[n]:+,.0f}" for n in (RULE, *ORDER)) + f"; {written}",
        markup=False,
    )


# --- serve, export ----------------------------------------------------------------------------


def decide_line(asked: Any, decide: Any) -> str:
    """What the decision side runs on and what it costs at the start (serve.decide)."""
    from foxhunt.serve.config import DecidePath

    why = f"serve.decide = {asked.value}" + (f" -> {decide.value}" if asked is not decide else "")
    if decide is DecidePath.AOT:
        return (
            f"{why}: the first decision builds the step and forward libraries once per checkpoint "
            "(40-120 s on an idle 2-core CPU, longer on a loaded one; cached, later starts load them in "
            "about a second); --set serve.decide=eager starts at once (the same decisions, ~20 ms each)"
        )
    if decide is DecidePath.COMPILED:
        return f"{why}: torch.compile at the first two decisions (10-80 s at every start)"
    return f"{why}: no compile (the same decisions as aot; --set serve.decide=aot for ~0.2 ms a decision)"


def source_notes(log: Any, source: Any, max_gap_seconds: float, speed: str) -> None:
    """What a replay leaves out (files that are not market data) and the recorded gaps it jumps."""
    for path, schema, n in getattr(source, "skipped", ()):
        log(f"replay: {Path(path).name} left out ({n:,} {schema.value} records: not market data)")
    jumps, jumped = getattr(source, "jumps", (0, 0.0))
    if jumps and getattr(source, "speed", None) is not None:
        log(
            f"replay: {jumps} recorded gap(s) over serve.max_gap_seconds = {max_gap_seconds:g} s "
            f"jumped ({jumped / 3600:,.1f} h of recorded time not waited through at --speed {speed})"
        )


def served(summary: dict[str, Any], ledger: Path) -> None:
    out.print(
        f"served {summary['decisions']} decisions, net {summary['net_pnl']:,.2f}, "
        f"position {summary['position']:g}, {summary['faults']} faults -> {ledger}"
    )


def exported(source: Path, path: Path, normaliser: bool) -> None:
    out.print(
        f"{source} ({source.stat().st_size / 1e6:.2f} MB) -> {path} ({path.stat().st_size / 1e6:.2f} MB)"
        + (", with the fold's normaliser" if normaliser else "")
    )


# --- training ---------------------------------------------------------------------------------


def checkpoints_line(folds: list[dict[str, Any]], train_dir: Path) -> None:
    """The checkpoint each fold reports (``best`` where an epoch was selected, ``last`` under
    ``train.selection = last``): the files ``backtest --checkpoint`` and ``export`` take."""
    files = [str(train_dir / f["checkpoint_file"]) for f in folds if f.get("checkpoint_file")]
    if files:
        line("reported checkpoints (for backtest --checkpoint, export): " + ", ".join(files))


def fold_line(f: dict[str, Any]) -> str:
    """A trained fold as ``foxhunt train`` prints it: the agent's net beside every baseline's."""
    from foxhunt.backtest.metrics import sharpe_text
    from foxhunt.domain.baselines import ORDER, Baseline, label

    base = f["baselines"]
    shown = [n for n in (*ORDER, Baseline.RULE) if n in base]  # a run from before buy_hold lacks it
    versus = ", ".join(f"{label(n)} {base[n]['net_pnl']:,.0f}" for n in shown)
    capture = f", capture {f['capture']:.0%}" if f.get("capture") is not None else ""
    return (
        f"net {f['net_pnl']:,.0f} ({versus}{capture}), Sharpe {sharpe_text(f, interval=False)}, "
        f"{f['trades']} trades"
    )


# --- checks -----------------------------------------------------------------------------------


def leak_report(report: Any, in_json: bool) -> None:
    """The leak guard's report: one line per cut and the verdict, or one JSON object."""
    from foxhunt.data.sessions import iso_utc

    if in_json:
        as_json(report.to_dict())
        return
    for c in report.cuts:
        out.print(
            f"cut {iso_utc(c.t)}: {c.rows_checked:,} rows checked, "
            + ("clean" if not c.leaking_columns else f"LEAK in {', '.join(c.leaking_columns)}")
        )
    out.print(report.verdict, markup=False, highlight=False, soft_wrap=True)


# --- tracked runs -----------------------------------------------------------------------------


def cell(value: Any) -> str:
    """A value in a runs table: ``-`` for none, a float in 4 digits (thousands whole)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def runs_compared(result: Any) -> None:
    """Tracked runs side by side: results, then the config keys that differ."""
    table = Table(title="runs compared")
    table.add_column("")
    for r in result.runs:
        table.add_column(f"{r.name} ({r.run_id[:8]})\n{r.command}, {r.status.lower()}")
    for key, values in result.results.items():
        table.add_row(key, *(cell(v) for v in values))
    table.add_section()
    if not result.differing:
        table.add_row("config", *("same" for _ in result.runs))
    for key, texts in result.differing.items():
        table.add_row(f"config {key}", *(cell(t) for t in texts))
    out.print(table)


def runs_listed(uri: str, runs: list[Any]) -> None:
    table = Table(title=f"tracked runs in {uri}")
    for col in ("run id", "name", "command", "status", "total net PnL"):
        table.add_column(col)
    for r in runs:
        table.add_row(r.run_id, r.name, r.command, r.status, cell(r.results.get("total/net_pnl")))
    out.print(table)


def training_result(summary: TrainSummary) -> None:
    """``foxhunt train``'s result: a line per fold, the reported checkpoints, the mean."""
    folds, run = summary.folds, summary.out
    for f in folds:
        out.print(f"fold {f['fold']}: " + fold_line(f), markup=False)
    checkpoints_line(folds, run)
    out.print(
        f"mean validation net {sum(f['net_pnl'] for f in folds) / max(len(folds), 1):,.0f} over "
        f"{len(folds)} folds, {sum(f['trades'] for f in folds)} agent trades"
        + idle_note([f["trades"] for f in folds])
        + f"; {run / 'folds.json'}",
        markup=False,
    )
    execution_lines(_folds_execution(folds))


def job_result(summary: JobSummary) -> None:
    """``foxhunt run``'s result: the reported checkpoints, then the mean and the baselines beaten."""
    from foxhunt.domain.baselines import Baseline, label

    s, folds, run = summary.metrics["summary"], summary.folds, summary.out
    n = len(folds)
    checkpoints_line(folds, run / "train")
    out.print(
        f"mean validation net {s['mean_net_pnl']:,.0f}, {sum(f['trades'] for f in folds)} agent trades"
        + idle_note([f["trades"] for f in folds])
        + f"; beats flat in {s['beats_flat_folds']}/{n} folds, "
        f"{label(Baseline.LONG)} in {s['beats_long_folds']}/{n}, "
        f"{label(Baseline.BUY_HOLD)} in {s['beats_buy_hold_folds']}/{n}; report: {run / 'report.html'}",
        markup=False,
    )
    execution_lines(s.get("execution") or _folds_execution(folds))


def seeds_result(summary: SeedsSummary) -> None:
    """``foxhunt seeds``' result: what --keep reported deleted, a line per seed and the committee,
    where the seeds ran, the capture and the seeds that beat flat."""
    from foxhunt.parallel.resources import spread
    from foxhunt.tune.seeds import SEEDS_FILE, capture_lines, capture_text

    study, members = summary.study, summary.members
    if summary.pruned is not None:
        files, size = summary.pruned
        out.print(f"--keep reported: deleted {files} checkpoint files ({size / 1e6:,.0f} MB)", markup=False)
    for r in summary.results:
        if r.stopped:
            out.print(f"seed {r.seed}: stopped ({r.stopped})", markup=False)
            continue
        nets = " / ".join(f"{f.net_pnl:+,.0f}" for f in r.folds)
        of = f" (a committee of {members} members)" if members > 1 else ""
        cap = capture_text(r.captures)
        out.print(f"seed {r.seed}{of}: net {nets} (total {r.total:+,.0f}), {cap}", markup=False)
    if (committee := summary.committee) is not None:
        nets = " / ".join(f"{f.net_pnl:+,.0f}" for f in committee.folds)
        out.print(
            f"committee of {summary.finished}{f' x {members} members' if members > 1 else ''}: "
            f"net {nets} (total {committee.total:+,.0f}), {capture_text(committee.captures)}",
            markup=False,
        )
    if (where := spread(study["devices"])) is not None:
        out.print(f"seeds {where}", markup=False)
    for text_line in capture_lines(study):
        out.print(text_line, markup=False)
    execution_lines(study.get("execution") or {})
    traded = [sum(f.trades for f in r.folds) for r in summary.results if not r.stopped]
    out.print(
        f"{study['beats_flat']}/{study['finished']} beat flat"
        + idle_note(traded, "seed")
        + f"; {summary.out / SEEDS_FILE}",
        markup=False,
    )


def tune_result(summary: TuneSummary) -> None:
    """``foxhunt tune``'s result: the trials by state, where they ran, and the best trial (or why
    there is none)."""
    from foxhunt.parallel.resources import spread
    from foxhunt.tune.export import undecided_text
    from foxhunt.tune.report import REPORT_FILE

    s, best, objective = summary.summary, summary.best, summary.objective
    report = summary.out / REPORT_FILE
    states = ", ".join(f"{n} {k.lower()}" for k, n in s["states"].items())
    out.print(f"study {summary.name}: {s['trials_counted']}/{summary.trials} trials ({states})", markup=False)
    if (where := spread(s["devices"])) is not None:
        out.print(f"trials {where}", markup=False)
    if s["best"] is None:
        out.print("no trial completed: no best profile written", markup=False)
    elif (und := s["undecided"]) is not None:
        out.print(
            f"{undecided_text(und['value'], und['trials'])} ({objective} over the selection "
            f"periods): no best trial; {best} holds trial {s['best']['number']}'s parameters, "
            f"the first; report {report}",
            markup=False,
        )
    else:
        b = s["best"]
        params = ", ".join(f"{k}={v!r}" for k, v in b["params"].items())
        val = b["validation"]
        shown = {k: "n/a" if val.get(k) is None else f"{val[k]:,.6g}" for k in ("value", "last_fold")}
        out.print(
            f"best: trial {b['number']}, {objective} {b['value']:,.6g} over the selection "
            f"periods (ranked on) ({params}); validation {shown['value']}, last fold {shown['last_fold']} "
            f"({REPORT_FILE} says which is out of sample); profile {best}; report {report}",
            markup=False,
        )
