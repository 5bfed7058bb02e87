"""What a study found: ``tune.json`` (trials by state, the best value and parameters, the time) and
``tune.html`` (self-contained, as the run report: the optimisation history, the parameter
importances and the best configuration, every trial in a table), with its PNGs in ``plots/``.

Every trial's value is its objective over the folds' selection periods (what the study ranked);
its validation numbers stand beside it, each labelled out of sample for the choice only when the
study's ranking did not read it (:func:`held_out`).

Parameter importances are Optuna's fANOVA (scikit-learn's random forest; PED-ANOVA without it) over
the COMPLETE trials; with fewer than two, or a space where nothing varied, the report says why
there are none.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from markupsafe import Markup
from optuna.trial import TrialState

from foxhunt.atomic import write_json, write_text
from foxhunt.config.models import FoxhuntConfig
from foxhunt.parallel.resources import tally
from foxhunt.report.fmt import NA, esc
from foxhunt.report.html import CSS
from foxhunt.report.page import Section, render_body, render_page
from foxhunt.report.plots import _save, plt
from foxhunt.tune.config import StudyDirection
from foxhunt.tune.export import BEST_PROFILE, best_trial, undecided, undecided_text
from foxhunt.tune.objective import Period, out_of_sample
from foxhunt.tune.study import DEVICE, REASON, VALIDATION, counted, ranked_on, trial_row

SUMMARY_FILE = "tune.json"
REPORT_FILE = "tune.html"
PLOTS_DIR = "plots"
MIN_TRIALS_FOR_IMPORTANCE = 2


def shown_storage(url: str) -> str:
    """The storage URL without its password (a server database's URL may carry one)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a URL SQLAlchemy cannot parse is shown as given
        return url


def importances(study: optuna.Study, seed: int) -> tuple[dict[str, float] | None, str | None]:
    """``(importance per parameter, None)``, or ``(None, why there are none)``."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < MIN_TRIALS_FOR_IMPORTANCE:
        return None, f"needs at least {MIN_TRIALS_FOR_IMPORTANCE} completed trials ({len(complete)} so far)"
    if importlib.util.find_spec("sklearn") is not None:
        evaluator: Any = optuna.importance.FanovaImportanceEvaluator(seed=seed)
    else:
        evaluator = optuna.importance.PedAnovaImportanceEvaluator()
    try:
        found = optuna.importance.get_param_importances(study, evaluator=evaluator)
    except (RuntimeError, ValueError) as err:  # e.g. every completed trial has the same parameters
        return None, f"not computable from these trials ({err})"
    return {k: float(v) for k, v in found.items()}, None


def held_out(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """The trial's validation numbers (``value``: all folds, ``last_fold``) and, for each, whether it
    is out of sample for the choice of the trial's hyper-parameters
    (:func:`foxhunt.tune.objective.out_of_sample`). A study ranked on the validation periods has only
    its value, the number it was chosen on."""
    ranked = ranked_on(study)
    if ranked is Period.VALIDATION:
        numbers: dict[str, Any] = {"value": trial.value, "last_fold": None, "folds": None}
    else:
        numbers = dict(trial.user_attrs.get(VALIDATION) or {})
    clean = out_of_sample(ranked, numbers.get("folds") or 0)
    return numbers | {f"{k}_out_of_sample": v for k, v in clean.items()}


def summarise(
    study: optuna.Study, cfg: FoxhuntConfig, storage: str, seconds: float, out: Path
) -> dict[str, Any]:
    """The body of ``tune.json``."""
    trials = study.get_trials(deepcopy=False)
    states = {s.name: sum(t.state is s for t in trials) for s in TrialState}
    best = best_trial(study)
    imp, why = importances(study, cfg.run.seed)
    return {
        "study": study.study_name,
        "storage": shown_storage(storage),
        "objective": cfg.tune.objective.value,
        "ranked_on": ranked_on(study).value,
        "direction": cfg.tune.direction.value,
        "trials_asked": cfg.tune.trials,
        "trials_counted": len(counted(trials)),
        "states": {k: v for k, v in states.items() if v},
        "guard_failed": sum(t.state is TrialState.FAIL and REASON in t.user_attrs for t in trials),
        "best": None
        if best is None
        else {
            "number": best.number,
            "value": best.value,
            "validation": held_out(study, best),
            "params": best.params,
            "folder": best.user_attrs.get("folder"),
            "profile": str(Path(out) / BEST_PROFILE),
        },
        # every completed trial scored alike (all 0: none traded): the "best" is only the first
        "undecided": None if (u := undecided(study)) is None else {"value": u[0], "trials": u[1]},
        "importances": imp,
        "importance_note": why,
        "seconds": round(seconds, 1),
        "devices": tally(t.user_attrs.get(DEVICE) for t in trials),
        "trials": [trial_row(t) for t in trials],
    }


def _last_intermediate(t: optuna.trial.FrozenTrial) -> float | None:
    if not t.intermediate_values:
        return None
    return t.intermediate_values[max(t.intermediate_values)]


def plot_history(study: optuna.Study, direction: StudyDirection, path: Path) -> Path | None:
    """Each COMPLETE trial's value and the best so far; pruned trials at their last reported epoch
    value (grey crosses); None when no trial has a value."""
    trials = study.get_trials(deepcopy=False)
    done = [(t.number, t.value) for t in trials if t.state is TrialState.COMPLETE and t.value is not None]
    pruned = [
        (t.number, v)
        for t in trials
        if t.state is TrialState.PRUNED and (v := _last_intermediate(t)) is not None
    ]
    if not done and not pruned:
        return None
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    if done:
        ax.scatter([n for n, _ in done], [v for _, v in done], color="tab:blue", s=22, label="trial")
        pick = max if direction is StudyDirection.MAXIMIZE else min
        best, xs, ys = None, [], []
        for n, v in done:
            best = v if best is None else pick(best, v)
            xs.append(n)
            ys.append(best)
        ax.step(xs, ys, where="post", color="tab:red", label="best so far")
    if pruned:
        xs, ys = [n for n, _ in pruned], [v for _, v in pruned]
        ax.scatter(xs, ys, marker="x", color="tab:grey", label="pruned (last epoch)")
    ax.set_xlabel("trial")
    ax.set_ylabel(f"objective ({ranked_on(study).value} periods)")
    ax.set_title("Optimisation history", fontsize=10)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_importances(imp: Mapping[str, float] | None, path: Path) -> Path | None:
    if not imp:
        return None
    names = list(imp)[::-1]  # the most important on top
    fig, ax = plt.subplots(figsize=(6.0, 0.5 + 0.4 * len(names)))
    ax.barh(names, [imp[n] for n in names], color="tab:blue")
    ax.set_xlabel("importance (share of the objective's variance)")
    ax.set_title("Parameter importances", fontsize=10)
    return _save(fig, path)


def _image(path: Path | None, missing: str) -> Markup:
    import base64

    data = None if path is None else base64.b64encode(path.read_bytes()).decode("ascii")
    alt = "" if path is None else path.stem
    return render_body("image.html.j2", image={"data": data, "alt": alt, "label": None, "missing": missing})


def _value(x: Any) -> Markup:
    missing = x is None or (isinstance(x, float) and not math.isfinite(x))
    return Markup(NA if missing else esc(f"{x:.6g}"))


def _trials_table(rows: Sequence[Mapping[str, Any]], keys: Sequence[str], ranked: str) -> Markup:
    columns = (
        "trial",
        "state",
        f"value ({ranked}, ranked)",
        "validation",
        *keys,
        "seconds",
        "device",
        "reason",
    )
    shown = [
        {
            "number": r["number"],
            "state": r["state"],
            "value": _value(r.get("value")),
            "validation": _value((r.get("validation") or {}).get("value")),
            "params": [(r.get("params") or {}).get(k, Markup(NA)) for k in keys],
            "seconds": _value(r.get("seconds")),
            "device": r.get("device") or Markup(NA),  # the n/a mark, not its escaped text
            "reason": r.get("reason") or "",
        }
        for r in rows
    ]
    return render_body("tune_trials.html.j2", columns=columns, rows=shown)


def _held_out(val: Mapping[str, Any], key: str, ranked: str) -> Markup:
    """A validation number of the best trial with what it is worth as evidence (:func:`held_out`)."""
    if val.get(key) is None:
        return Markup(NA)
    if val.get(f"{key}_out_of_sample"):
        why = "out of sample for the choice: no trial was ranked on these rows"
    elif ranked == Period.VALIDATION.value:
        why = "NOT out of sample: the trials were ranked on this number"
    else:
        why = "partly in sample for the choice: later folds train and select on earlier folds' validation"
    return Markup(f"{_value(val[key])} ({esc(why)})")


def render(summary: Mapping[str, Any], history_png: Path | None, importance_png: Path | None) -> str:
    title = f"foxhunt tune: study {summary['study']}"
    objective, ranked = summary["objective"], summary.get("ranked_on", Period.VALIDATION.value)
    best = summary.get("best")
    states = ", ".join(f"{n} {k.lower()}" for k, n in (summary.get("states") or {}).items()) or "none"
    overview = render_body(
        "kv.html.j2",
        pairs=[
            ("storage", summary["storage"]),
            ("objective", f"{objective} ({summary['direction']}) over the {ranked} periods"),
            ("trials", f"{summary['trials_counted']} of {summary['trials_asked']} counted; {states}"),
            ("stopped by the anomaly guard", summary.get("guard_failed", 0)),
            ("time of this run", f"{summary['seconds']:.1f} s"),
        ],
        missing="",
    )
    pairs, und = None, summary.get("undecided")
    if best:
        val = best.get("validation") or {}
        pairs = [
            ("trial", best["number"]),
            (f"{objective} over the {ranked} periods (ranked on)", _value(best["value"])),
            (f"{objective} over the validation periods", _held_out(val, "value", ranked)),
            (f"{objective} over the last fold's validation period", _held_out(val, "last_fold", ranked)),
            *best["params"].items(),
            ("profile", Markup("<code>{}</code>").format(Markup(esc(best["profile"])))),
            ("run folder", best.get("folder")),
        ]
    best_html = render_body(
        "tune_best.html.j2",
        pairs=pairs,
        undecided=undecided_text(und["value"], und["trials"]) if best and und else "",
        trial=best["number"] if best else "",
    )
    imp_missing = f"Parameter importances: {summary.get('importance_note') or 'not available'}."
    keys = sorted({k for r in summary["trials"] for k in (r.get("params") or {})})
    body = [
        Section("study", "Study", overview),
        Section("best", "Best configuration", best_html),
        Section("history", "Optimisation history", _image(history_png, "No trial has a value yet.")),
        Section("importance", "Parameter importances", _image(importance_png, imp_missing)),
        Section("trials", "Trials", _trials_table(summary["trials"], keys, ranked)),
    ]
    return render_page(title, CSS, body, nav=False)


def write_outputs(
    study: optuna.Study, cfg: FoxhuntConfig, storage: str, seconds: float, out: Path
) -> dict[str, Any]:
    """Write ``tune.json``, ``plots/*.png`` and ``tune.html`` into ``out``; returns the summary."""
    out = Path(out)
    summary = summarise(study, cfg, storage, seconds, out)
    write_json(out / SUMMARY_FILE, summary, indent=2, default=str)
    history = plot_history(study, cfg.tune.direction, out / PLOTS_DIR / "tune_history.png")
    imp = plot_importances(summary["importances"], out / PLOTS_DIR / "tune_importances.png")
    write_text(out / REPORT_FILE, render(summary, history, imp))
    return summary
