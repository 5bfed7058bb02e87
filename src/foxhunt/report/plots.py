"""PNG plots for the run report (matplotlib, Agg backend), each written atomically.

Every function takes plain JSON-like data (the run summary's parts), draws what is present, and
returns the path written, or ``None`` when there is nothing to draw (the HTML then says so).
Values that are missing, ``None`` or non-finite are skipped, never plotted as zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from foxhunt.atomic import atomic_path  # noqa: E402
from foxhunt.domain.baselines import AGENT, Baseline  # noqa: E402
from foxhunt.domain.baselines import label as policy_label  # noqa: E402
from foxhunt.report.schema import EQUITY_TIME_KEY  # noqa: E402

DPI = 100
MAX_POINTS = 4000
"""Equity curves longer than this are thinned to about this many points (the last one kept)."""

LOSS_KEYS = ("loss", "loss_c51", "loss_iqn", "loss_mse", "loss_aux")
POLICY_STYLES: dict[str, dict[str, Any]] = {
    AGENT: {"color": "#0072B2", "lw": 2.0, "ls": "-"},  # blue, thick: the policy under test
    Baseline.RULE: {"color": "#009E73", "lw": 1.3, "ls": "-"},  # green
    Baseline.FLAT: {"color": "#7f7f7f", "lw": 1.1, "ls": ":"},  # grey, dotted
    Baseline.LONG: {"color": "#E69F00", "lw": 1.2, "ls": "--"},  # orange, dashed
    Baseline.BUY_HOLD: {"color": "#CC3311", "lw": 1.2, "ls": "-."},  # red, dash-dot
}
"""Every policy's line in the equity plots: a colour-blind-safe colour (Okabe-Ito) and a dash of its
own, so that no two read alike even in grey; the legend names each by
:func:`foxhunt.domain.baselines.label`."""
POLICY_COLOURS = {name: style["color"] for name, style in POLICY_STYLES.items()}
OTHER_STYLE = {"lw": 1.1, "ls": "-"}  # a baseline without a style of its own (matplotlib's next colour)


def _finite(x: Any) -> float | None:
    """``x`` as a float when it is a finite number, else ``None``."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _save(fig: Any, path: Path) -> Path:
    try:
        with atomic_path(path) as tmp:
            # no Software metadata: the file carries no link and no version string
            fig.savefig(tmp, dpi=DPI, bbox_inches="tight", format="png", metadata={"Software": None})
    finally:
        plt.close(fig)
    return path


def _series(history: Sequence[Mapping[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """(epochs, values) of ``key`` over the history, skipping epochs where it is missing or non-finite."""
    xs, ys = [], []
    for i, row in enumerate(history):
        y = _finite(row.get(key))
        if y is None:
            continue
        x = _finite(row.get("epoch"))
        xs.append(x if x is not None else float(i))
        ys.append(y)
    return xs, ys


def _note_empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="grey")


def plot_training(history: Sequence[Mapping[str, Any]], fold: int, path: Path) -> Path | None:
    """2x2 panels by epoch: loss components; Q mean with its spread; train vs selection-period Sharpe;
    atom utilisation, active fraction and gate entropy. ``None`` for an empty history."""
    if not history:
        return None
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    ax_loss, ax_q, ax_sharpe, ax_util = axes.ravel()

    drawn = []
    for key in LOSS_KEYS:
        xs, ys = _series(history, key)
        if ys:
            ax_loss.plot(xs, ys, marker=".", label=key, lw=2.0 if key == "loss" else 1.2)
            drawn.extend(ys)
    if drawn and min(drawn) > 0:
        ax_loss.set_yscale("log")
    ax_loss.set_title("Loss by component")
    ax_loss.set_ylabel("loss (training batch mean)")
    if drawn:
        ax_loss.legend(fontsize=8)
    else:
        _note_empty(ax_loss, "no loss recorded")

    xs, mean = _series(history, "q_mean")
    if mean:
        ax_q.plot(xs, mean, marker=".", label="Q mean", color="tab:blue")
    spread_x, spread = _series(history, "q_spread")
    if spread:
        ax_q2 = ax_q.twinx()
        ax_q2.plot(spread_x, spread, marker=".", ls="--", label="Q spread", color="tab:red")
        ax_q2.set_ylabel("Q spread", color="tab:red")
    ax_q.set_ylabel("Q mean", color="tab:blue")
    ax_q.set_title("Q mean (left) and spread (right)")
    if not (mean or spread):
        _note_empty(ax_q, "no Q statistics recorded")

    any_sharpe = False
    for key, label in (("train_sharpe", "train (collection)"), ("select_sharpe", "selection period")):
        xs, ys = _series(history, key)
        if ys:
            ax_sharpe.plot(xs, ys, marker=".", label=label)
            any_sharpe = True
    ax_sharpe.axhline(0.0, color="grey", lw=0.8, ls=":")
    ax_sharpe.set_title("Sharpe (annualised): train vs selection period")
    ax_sharpe.set_ylabel("Sharpe ratio (annualised)")
    if any_sharpe:
        ax_sharpe.legend(fontsize=8)
    else:
        _note_empty(ax_sharpe, "no Sharpe recorded")

    any_util = False
    for key, label in (("atom_utilisation", "atom utilisation"), ("active_frac", "active fraction")):
        xs, ys = _series(history, key)
        if ys:
            ax_util.plot(xs, ys, marker=".", label=label)
            any_util = True
    ax_util.set_ylim(-0.02, 1.02)
    ax_util.set_ylabel("fraction (0 to 1)")
    xs, ent = _series(history, "gate_entropy")
    if ent:
        ax_e = ax_util.twinx()
        ax_e.plot(xs, ent, marker=".", ls="--", color="tab:purple", label="gate entropy")
        ax_e.set_ylabel("gate entropy (nats)", color="tab:purple")
    ax_util.set_title("Utilisation (left, fraction) and gate entropy (right)")
    if any_util:
        ax_util.legend(fontsize=8, loc="lower left")
    elif not ent:
        _note_empty(ax_util, "no utilisation recorded")

    for ax in axes.ravel():
        ax.set_xlabel("epoch")
    fig.suptitle(f"Fold {fold}: training by epoch")
    fig.tight_layout()
    return _save(fig, path)


def _thin(values: Sequence[Any]) -> tuple[list[int], list[float]]:
    """(indices, finite values), thinned to about :data:`MAX_POINTS` with the last point kept."""
    n = len(values)
    stride = max(1, math.ceil(n / MAX_POINTS))
    idx = list(range(0, n, stride))
    if n and idx[-1] != n - 1:
        idx.append(n - 1)
    xs, ys = [], []
    for i in idx:
        y = _finite(values[i])
        if y is not None:
            xs.append(i)
            ys.append(y)
    return xs, ys


def _times(text: Sequence[Any]) -> np.ndarray | None:
    """ISO-8601 UTC texts (``...Z``) as datetime64[ms]; ``None`` when any is not one."""
    try:
        return np.array([str(t).removesuffix("Z") for t in text], dtype="datetime64[ms]")
    except (ValueError, TypeError):
        return None


def plot_equity(equity: Mapping[str, Sequence[Any]], fold: int, path: Path) -> Path | None:
    """:func:`equity_figure` written to ``path``; ``None`` when it has nothing to draw."""
    fig = equity_figure(equity, fold)
    return None if fig is None else _save(fig, path)


def equity_figure(equity: Mapping[str, Sequence[Any]], fold: int) -> Any:
    """Cumulative net PnL of the agent against the baselines over the validation period, against
    the time of the rows (``equity["time"]``, ISO-8601 UTC, as :mod:`foxhunt.report.series` writes
    it) or, for a summary without times, against the point's index; each policy in its own
    :data:`POLICY_STYLES`, named in the legend. ``None`` when no curve has a finite point."""
    times = _times(equity[EQUITY_TIME_KEY]) if isinstance(equity.get(EQUITY_TIME_KEY), list) else None
    names = [n for n in equity if n != EQUITY_TIME_KEY]
    fig, ax = plt.subplots(figsize=(9, 3.8))
    drawn = False
    known = [n for n in POLICY_STYLES if n in names]
    for name in (*known, *sorted(set(names) - set(known))):
        curve = equity.get(name)
        if not curve or name not in names:
            continue
        if times is not None and len(times) == len(curve):
            idx = [i for i, y in enumerate(curve) if _finite(y) is not None]
            xs: Any = times[idx]
            ys = [float(curve[i]) for i in idx]
        else:
            xs, ys = _thin(curve)
        if ys:
            ax.plot(xs, ys, label=policy_label(name), **POLICY_STYLES.get(name, OTHER_STYLE))
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.axhline(0.0, color="black", lw=0.6)
    if times is not None:
        ax.set_xlabel("time of the validation row (UTC); straight segments cross the gaps between sessions")
        fig.autofmt_xdate()
    else:
        ax.set_xlabel("point of the validation period (no timestamps recorded)")
    ax.set_ylabel("cumulative net PnL ($, after costs)")
    ax.set_title(f"Fold {fold}: validation equity, agent vs baselines")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), title="policy", title_fontsize=8)
    return fig


def shares(dist: Mapping[str, Any] | Sequence[Any] | None) -> dict[str, float]:
    """An action distribution as ``{label: share}`` summing to 1 (or all 0 when empty).

    Accepts ``{label: count or share}`` or a list indexed by action value (labels "0", "1", ...);
    missing or non-finite entries count as 0.
    """
    if dist is None:
        return {}
    items = dist.items() if isinstance(dist, Mapping) else enumerate(dist)
    raw = {str(k): max(_finite(v) or 0.0, 0.0) for k, v in items}
    total = sum(raw.values())
    return {k: (v / total if total > 0 else 0.0) for k, v in raw.items()}


def plot_actions(
    picked: Mapping[str, Any], realised: Mapping[str, Any], fold: int, path: Path
) -> Path | None:
    """One panel per branch: share of validation steps per value, picked vs realised side by side.
    ``None`` when no branch has a distribution."""
    branches = [b for b in dict.fromkeys([*picked, *realised]) if picked.get(b) or realised.get(b)]
    if not branches:
        return None
    fig, axes = plt.subplots(1, len(branches), figsize=(3.6 * len(branches), 3.4), squeeze=False)
    for ax, branch in zip(axes[0], branches, strict=True):
        p, r = shares(picked.get(branch)), shares(realised.get(branch))
        labels = list(dict.fromkeys([*p, *r]))
        xs = range(len(labels))
        offset = 0.2 if (p and r) else 0.0  # side by side only when both exist
        if p:
            ax.bar([x - offset for x in xs], [p.get(k, 0.0) for k in labels], width=0.4, label="picked")
        if r:
            ax.bar([x + offset for x in xs], [r.get(k, 0.0) for k in labels], width=0.4, label="realised")
        ax.set_xticks(list(xs), labels, rotation=30, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(labels) - 0.4)
        ax.set_ylim(0, 1.15)
        ax.set_title(branch if (p and r) else f"{branch} ({'picked' if p else 'realised'} only)")
        ax.set_xlabel(f"{branch} value")
        ax.legend(fontsize=7, loc="upper right", ncols=2)
    axes[0][0].set_ylabel("share of validation steps")
    fig.suptitle(f"Fold {fold}: action distributions (picked vs realised)")
    fig.tight_layout()
    return _save(fig, path)


def plot_expert_utilisation(by_fold: Mapping[int, Sequence[Any]], path: Path) -> Path | None:
    """Share of routing weight per expert, one bar group per expert and one colour per fold.
    ``None`` when no fold recorded utilisation."""
    rows = {f: [_finite(v) or 0.0 for v in u] for f, u in by_fold.items() if u}
    if not rows:
        return None
    n_experts = max(len(u) for u in rows.values())
    width = 0.8 / len(rows)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.7 * n_experts + 2), 3.4))
    for j, (fold, util) in enumerate(rows.items()):
        ax.bar(
            [e - 0.4 + width * (j + 0.5) for e in range(len(util))], util, width=width, label=f"fold {fold}"
        )
    ax.axhline(1.0 / n_experts, color="grey", lw=0.8, ls="--", label="uniform")
    ax.set_xticks(range(n_experts), [f"expert {e}" for e in range(n_experts)], fontsize=8)
    ax.set_xlabel("expert of the mixture")
    ax.set_ylabel("routing share (of the gate's weight)")
    ax.set_title("Expert utilisation by fold")
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_seeds(summary: Mapping[str, Any], path: Path) -> Path | None:
    """A seeds study (``seeds.json``): each seed's validation net PnL per fold as bars beside the
    reference rule's (black bar outline), flat's, long's and the seeds' committee's (markers); ``None``
    when no seed finished."""
    seeds = [s for s in summary.get("seeds") or () if not s.get("stopped") and s.get("folds")]
    if not seeds:
        return None
    folds = sorted({int(f["fold"]) for s in seeds for f in s["folds"]})
    ref = {int(r["fold"]): r for r in (summary.get("reference") or {}).get("folds") or ()}
    width = 0.8 / (len(seeds) + 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(folds) * (len(seeds) + 1) ** 0.5), 3.8))
    for i, s in enumerate(seeds):
        by_fold = {int(f["fold"]): f for f in s["folds"]}
        xs = [k + (i - len(seeds) / 2) * width for k in folds if k in by_fold]
        ys = [float(by_fold[k]["net_pnl"]) for k in folds if k in by_fold]
        ax.bar(xs, ys, width=width, label=f"seed {s['seed']}")
    for name, marker in (("rule", "_"), ("flat", "."), ("long", "x"), ("buy_hold", "+")):
        pts = [(k, _finite((ref.get(k) or {}).get(name, {}).get("net_pnl"))) for k in folds]
        pts = [(k, y) for k, y in pts if y is not None]
        if pts:
            ax.scatter(
                [k + 0.4 for k, _ in pts],
                [y for _, y in pts],
                marker=marker,
                s=300 if marker == "_" else 40,
                color="black" if name == "rule" else POLICY_COLOURS.get(name),
                label=policy_label(name),
                zorder=3,
            )
    committee = {
        int(f["fold"]): float(f["net_pnl"]) for f in (summary.get("committee") or {}).get("folds") or ()
    }
    if committee:  # the seeds voting as one policy (foxhunt.tune.seeds.committee_result)
        ks = [k for k in folds if k in committee]
        ax.scatter(
            [k + 0.4 for k in ks],
            [committee[k] for k in ks],
            marker="D",
            s=40,
            color="tab:purple",
            label="committee",
            zorder=3,
        )
    ax.axhline(0.0, color="black", lw=0.6)
    ax.set_xticks(folds, [f"fold {k}" for k in folds])
    ax.set_xlabel("walk-forward fold")
    ax.set_ylabel("validation net PnL ($)")
    cap = summary.get("capture") or {}
    mean = _finite(cap.get("mean"))
    title = "Agent per seed vs the reference rule"
    if mean is not None:
        lo, hi = _finite(cap.get("lo")), _finite(cap.get("hi"))
        span = f" [{lo:.0%}, {hi:.0%}]" if lo is not None and hi is not None else ""
        title += f": mean capture {mean:.0%}{span} over {cap.get('n')} seeds"
        med = _finite((summary.get("capture_per_fold") or {}).get("median"))
        if med is not None:  # since issue 58: every seed's kept folds pooled (foxhunt.tune.seeds)
            title += f", median per fold {med:.0%}"
    com = _finite((summary.get("committee") or {}).get("capture"))
    if com is not None:
        title += f"; their committee {com:.0%}"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)
