"""The report's execution tables: how the agent and the reference rule entered their trades and what
their fills cost, pooled over the run's folds (:func:`foxhunt.backtest.execution.folds_execution`).

Two tables under the validation metrics: one row per policy (entries, contracts traded, costs, cost
per contract, the limit orders and their fill rate), then one row per value of the order-type,
urgency and magnitude branches with each policy's entries (and share), entry cost per contract and
net PnL. Every number is formatted here (foxhunt.report.fmt); the template lays them out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup

from foxhunt.backtest.execution import BY, folds_execution
from foxhunt.domain.baselines import AGENT, Baseline, label
from foxhunt.report.fmt import NA, count, money, pct

_TITLES = {"order_type": "order type", "urgency": "urgency", "magnitude": "magnitude"}


def _limits(block: Mapping[str, Any]) -> Markup:
    lim = block["limit_orders"]
    if not lim["placed"]:
        return Markup("none placed")
    return Markup(
        f"{pct(lim['fill_rate'], 0)} ({count(lim['filled'])} of {count(lim['placed'])} placed; "
        f"{count(lim['expired'])} expired, {count(lim['cancelled'])} cancelled, "
        f"{count(lim['open_at_end'])} open at the end)"
    )


def execution_view(folds: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The tables' cells, agent and rule side by side (the rule left out where the run has none);
    None where no fold recorded its execution (a run of an older foxhunt)."""
    try:
        sides = folds_execution(list(folds))
    except (KeyError, TypeError):  # a malformed fold: the section says not available
        return None
    shown = {name: b for name, b in (("agent", sides["agent"]), ("rule", sides["rule"])) if b is not None}
    if "agent" not in shown:
        return None
    names = {"agent": label(AGENT), "rule": label(Baseline.RULE)}
    summary = [
        {
            "who": names[k],
            "cells": [
                Markup(count(b["entries"])),
                Markup(count(b["contracts"])),
                Markup(money(b["costs"])),
                Markup(money(b["cost_per_contract"])),
                _limits(b),
            ],
        }
        for k, b in shown.items()
    ]
    branches = []
    for branch in BY:
        rows = []
        for value in shown["agent"][f"by_{branch}"]:
            cells = []
            for b in shown.values():
                r = b[f"by_{branch}"].get(value)
                if r is None:
                    cells += [Markup(NA)] * 3
                    continue
                entries = f"{count(r['entries'])} ({pct(r['share'], 0)})"
                per = money(r["entry_cost_per_contract"]) if r["contracts"] else NA
                cells += [Markup(entries), Markup(per), Markup(money(r["net_pnl"]))]
            rows.append({"value": value, "cells": cells})
        branches.append({"title": _TITLES[branch], "rows": rows})
    return {"who": [names[k] for k in shown], "summary": summary, "branches": branches}
