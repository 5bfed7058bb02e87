"""Write the alpha check's results: ``alpha.json``, ``alpha.md`` and PNG plots (all atomically)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from foxhunt.alpha.check import MEASURED_RATES, MODELS, AlphaResult  # noqa: E402
from foxhunt.alpha.metrics import clopper_pearson  # noqa: E402
from foxhunt.atomic import atomic_path, write_text  # noqa: E402


def _atomic_png(fig: Any, path: Path) -> None:
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
    finally:
        plt.close(fig)


def _clean(obj: Any) -> Any:
    """NaN -> None so alpha.json is strict JSON."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def _family(result: AlphaResult) -> str:
    """The error the verdict controls, e.g. "family-wise 5% over 2 models x 3 horizons"."""
    return (
        f"family-wise error {result.family_error:.0%} over {len(MODELS)} models x "
        f"{len(result.horizons)} horizons, max-z adjusted"
    )


def verdict_line(result: AlphaResult) -> str:
    k, model, auc = result.best()
    found = result.signal_tests()
    if found:
        where = ", ".join(f"{m} at {h} (z {_fmt(_test(result, h, m)['z'])})" for h, m in found)
        return (
            f"Verdict: signal, {_family(result)} (the mid moved the way the forecasts leaned, folds "
            f"pooled: {where})."
        )
    return (
        f"Verdict: no signal, {_family(result)} (no model and horizon's forecasts are followed by "
        f"moves their way beyond chance; best AUC {model} {auc:.3f} at horizon {k})."
    )


def _test(result: AlphaResult, horizon: int, model: str) -> dict[str, float]:
    h = next(h for h in result.horizons if h.horizon == horizon)
    return h.tests.get(model, {"z": float("nan"), "p_value": float("nan")})


def measured_rates() -> str:
    """The verdict's measured false-call and detection rates, with the bench command they come from."""
    r = MEASURED_RATES

    def rate(k: int, n: int) -> str:
        lo, hi = clopper_pearson(k, n)
        return f"{k} of {n} ({k / n:.0%}, 95% CI {lo:.0%}-{hi:.0%})"

    return (
        f"How often this rule says signal, measured on fresh synthetic markets ({r.markets}; "
        f"`{r.command}`, {r.page}): no-signal markets called signal {rate(*r.false_calls)}; "
        f"smoke-strength (alpha {r.smoke_alpha:g}) planted markets found {rate(*r.smoke)}; "
        f'alpha-2 planted markets found {rate(*r.alpha2)}. A "no signal" verdict on a market this '
        "small can miss a planted signal of these strengths, at the rates shown."
    )


def plot_decay(result: AlphaResult, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ks = [h.horizon for h in result.horizons]
    for model in MODELS:
        est = [h.pooled[model.value]["auc"]["estimate"] for h in result.horizons]
        lo = [h.pooled[model.value]["auc"]["lo"] for h in result.horizons]
        hi = [h.pooled[model.value]["auc"]["hi"] for h in result.horizons]
        ax.plot(ks, est, marker="o", label=model.value)
        ax.fill_between(ks, lo, hi, alpha=0.25)
    ax.axhline(0.5, color="grey", lw=1, ls="--")
    # A log axis needs a finite point to place (an hour of data can leave every AUC undefined: one
    # class in a fold's labels), else matplotlib refuses to draw the figure at all.
    drawn = any(
        (e := h.pooled[m.value]["auc"]["estimate"]) is not None and math.isfinite(e)
        for h in result.horizons
        for m in MODELS
    )
    wide = len(ks) > 1 and max(ks) / max(min(ks), 1) > 8
    ax.set_xscale("log" if wide and drawn else "linear")
    ax.set_xlabel(f"horizon ({result.row_unit} rows)")
    ax.set_ylabel(f"validation AUC (pooled, {result.interval_level:.2%} block-bootstrap band)")
    ax.set_title("Horizon decay")
    ax.legend()
    _atomic_png(fig, path)


def plot_regimes(result: AlphaResult, path: Path) -> bool:
    k, model, _ = result.best()
    h = next(h for h in result.horizons if h.horizon == k)
    if not h.regimes:
        return False
    fig, axes = plt.subplots(1, len(h.regimes), figsize=(5 * len(h.regimes), 3.6), squeeze=False)
    for ax, (name, by_model) in zip(axes[0], h.regimes.items(), strict=True):
        for j, m in enumerate(MODELS):
            tables = by_model.get(m.value, [])
            aucs = []
            for q in range(5):
                vals = [
                    r["auc"]
                    for t in tables
                    for r in t["table"]
                    if r["quintile"] == q and r["auc"] is not None
                ]
                aucs.append(sum(vals) / len(vals) if vals else float("nan"))
            ax.bar([q + 0.4 * j for q in range(5)], aucs, width=0.4, label=m.value)
        ax.axhline(0.5, color="grey", lw=1, ls="--")
        ax.set_xticks([q + 0.2 for q in range(5)], [f"Q{q + 1}" for q in range(5)])
        ax.set_title(f"AUC by {name} quintile (horizon {k})")
        ax.set_xlabel(f"{name} quintile (Q1 lowest)")
        ax.set_ylabel("validation AUC (0.5: no signal)")
        ax.legend()
    _atomic_png(fig, path)
    return True


def plot_importance(result: AlphaResult, path: Path) -> None:
    k, _, _ = result.best()
    h = next(h for h in result.horizons if h.horizon == k)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (title, values, unit) in zip(
        axes,
        (
            ("LightGBM gain share by group", h.gbm_gain, "share of the trees' gain"),
            ("MLP permutation AUC drop by group", h.mlp_permutation, "AUC lost when the group is shuffled"),
        ),
        strict=True,
    ):
        names = list(values)
        ax.bar(names, [values[n] for n in names])
        ax.set_title(f"{title} (horizon {k})")
        ax.set_xlabel("feature group")
        ax.set_ylabel(unit)
    _atomic_png(fig, path)


def write_report(result: AlphaResult, out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    body = result.to_dict() | {"verdict_line": verdict_line(result)}
    paths = {"json": out / "alpha.json", "md": out / "alpha.md", "decay": out / "alpha_decay.png"}
    write_text(paths["json"], json.dumps(_clean(body), indent=2) + "\n")
    plot_decay(result, paths["decay"])
    if plot_regimes(result, out / "alpha_regimes.png"):
        paths["regimes"] = out / "alpha_regimes.png"
    plot_importance(result, out / "alpha_importance.png")
    paths["importance"] = out / "alpha_importance.png"
    write_text(paths["md"], markdown(result))
    return paths


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def _p(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2g}"


def markdown(result: AlphaResult) -> str:
    lines = [
        "# Alpha check",
        "",
        f"**{verdict_line(result)}**",
        "",
        f"{result.rows:,} {result.row_unit} rows x {result.columns} features ({result.data_source}); "
        f"{len(result.fold_summaries)} purged walk-forward folds; target: up vs down over the horizon, "
        f"rows without a move left out. Verdict: for each model and horizon, a one-sided test that the "
        "mid moves the way the forecasts lean (folds pooled; each forecast, less its fold's training "
        "share of up moves, times the mid's move over the horizon after it; z from the martingale "
        "variance, no block length to choose); signal where a test's p-value adjusted for all "
        f"{result.family_size} tests ({len(MODELS)} models x {len(result.horizons)} horizons; the "
        f"chance that the largest of their z under the null reaches it) is at most {result.family_error:g} "
        f"(family-wise error {result.family_error:.0%}). AUC intervals: block "
        f"bootstrap over time (blocks >= horizon) at {result.interval_level:.2%} each (Bonferroni over "
        f"the {result.family_size} tests); they describe "
        "the AUC and do not decide the verdict (on a martingale a mean-reverting forecast's AUC "
        "comes out above 0.5; the test's terms are not).",
        "",
        measured_rates(),
        "",
        f"| horizon | n val | base rate | window (median ms, < 1 ms) | model "
        f"| AUC [{result.interval_level:.2%} CI] | accuracy [{result.interval_level:.2%} CI] | log-loss "
        "| fold AUC intervals | test z (p, adjusted p) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for h in result.horizons:
        for m in MODELS:
            p = h.pooled[m.value]
            auc_ci = f"{_fmt(p['auc']['estimate'])} [{_fmt(p['auc']['lo'])}, {_fmt(p['auc']['hi'])}]"
            acc = p["accuracy"]
            acc_ci = f"{_fmt(acc['estimate'])} [{_fmt(acc['lo'])}, {_fmt(acc['hi'])}]"
            folds = "; ".join(
                f"{_fmt(row[m.value]['auc_lo'])}-{_fmt(row[m.value]['auc_hi'])}"
                for row in h.folds
                if m.value in row
            )
            lines.append(
                f"| {h.horizon} | {h.n_val:,} | {_fmt(h.base_rate)} | "
                f"{_fmt(h.window_ms_median)}, {_fmt(h.window_under_1ms)} | {m.value} | {auc_ci} | {acc_ci} | "
                f"{_fmt(p['log_loss']['estimate'])} | {folds or 'n/a'} | "
                f"{_fmt(h.tests.get(m.value, {}).get('z'))} ({_p(h.tests.get(m.value, {}).get('p_value'))}, "
                f"{_p(h.tests.get(m.value, {}).get('p_family'))}) |"
            )
    lines += ["", "## Reading it", ""]
    if result.data_source == "ohlcv":
        lines.append(
            "- OHLCV data: the target is the sign of the change in the *trade* close, which bounces "
            "between bid and ask. Predictability at the shortest horizons is largely that bounce "
            "(a mechanical, untradeable effect); trust horizons where it has died out."
        )
    else:
        lines.append(
            "- The target is the *mid* price. At a few book updates its direction is partly mechanical "
            "(queue depletion, a spread that widened and refills); the window column says how much of "
            "it completes within a millisecond, out of reach for realistic latency. Signal is not an "
            "edge until it survives the spread and costs (the backtester's job)."
        )
    k, _, _ = result.best()
    h = next(h for h in result.horizons if h.horizon == k)
    lines += [
        "",
        f"## Importance at horizon {k}",
        "",
        "| group | LightGBM gain share | MLP permutation AUC drop |",
    ]
    lines.append("|---|---|---|")
    for g in sorted(set(h.gbm_gain) | set(h.mlp_permutation)):
        lines.append(f"| {g} | {_fmt(h.gbm_gain.get(g))} | {_fmt(h.mlp_permutation.get(g))} |")
    if result.leak_guard is not None:
        lg = result.leak_guard
        lines += [
            "",
            lg.get("verdict") or f"Leak guard: {'clean' if lg.get('clean') else 'LEAK'}.",
        ]
    lines += [
        "",
        "Plots: alpha_decay.png, alpha_regimes.png (where a regime variable exists), alpha_importance.png.",
        "",
    ]
    return "\n".join(lines)
