"""Execution: how a policy entered its trades and what its fills cost, from the trade ledger (issue 56).

The environment's ledger (:mod:`foxhunt.env.trades`) records for every closed trade how the order
that opened it was placed (its magnitude, order type and urgency) and what its opening fills cost,
and for every step what it did to limit orders (:data:`~foxhunt.env.trades.LIMIT_EVENTS`). The
backtest keeps both in its :class:`~foxhunt.backtest.metrics.StepRecord`; :func:`execution_summary`
reduces them to the ``execution`` block of every backtest (a fold's, each baseline's, ``foxhunt
backtest``'s ``metrics.json``), :func:`pool_execution` adds blocks of several folds or seeds into
one, and :func:`folds_execution` gives a run's agent and reference rule side by side
(``metrics.json``'s ``summary.execution``, each seed's in ``seeds.json``).

Definitions (written steps only; an **entry** is a trade, counted once, by the order that opened
it: every trade opened in a window is closed by the window's last row at the latest, so the
entries are the closed trades of :func:`~foxhunt.backtest.metrics.compute_metrics`)::

    entries             number of trades (metrics' ``trades``)
    contracts           contracts of every fill, entries and exits (metrics' ``contracts_traded``)
    costs               $ fees + slippage of every fill (metrics' ``costs``)
    cost_per_contract   costs / contracts ($ a contract a side; 0 without a fill)
    net_pnl             $ the trades' net PnL summed (metrics' ``net_pnl``)

    by_order_type / by_urgency / by_magnitude, one row per branch value (every value, used or not):
      entries           trades entered with that value
      share             entries / all entries (0 without entries)
      contracts         contracts those trades opened (their size)
      entry_costs       $ their opening fills' fees + slippage (a limit fill on the passive side earns
                        part of the spread: negative)
      entry_cost_per_contract  entry_costs / contracts (0 without contracts)
      costs             $ their whole costs, entry and exit
      net_pnl           $ their net PnL summed

    limit_orders:
      placed, filled, expired, cancelled, open_at_end   counts of LIMIT_EVENTS
      fill_rate         filled / placed (None without a limit order placed)

Identities (tests/backtest/test_execution.py): each ``by_*``'s entries sum to ``entries``, its
shares to 1 (with entries), its net PnL to ``net_pnl`` and its contracts to ``contracts / 2`` (a
trade's exit trades what its entry opened); ``cost_per_contract x contracts = costs``; ``placed =
filled + expired + cancelled + open_at_end``. The **fill-rate denominator counts every limit order
placed**: one that expired unfilled, one the policy replaced or cancelled with a market order (or
the capital floor cancelled) and one still resting when its window ended all count as not filled.
Exits are market orders and open nothing: they are costs and contracts, never entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from foxhunt.backtest.capture import RULE

if TYPE_CHECKING:  # torch only where a record is reduced: the report and the CLI pool without it
    import torch

    from foxhunt.backtest.metrics import StepRecord
    from foxhunt.domain.actions import BranchConfig

EXECUTION_KEY = "execution"
"""The block's key in a metrics dict (a fold's, a baseline's, a backtest body's, ``metrics.json``'s)."""

BY = ("order_type", "urgency", "magnitude")
"""The branches entries are broken down by: ``by_<branch>``."""

_ROW_SUMS = ("entries", "contracts", "entry_costs", "costs", "net_pnl")


def execution_summary(rec: StepRecord, branches: BranchConfig) -> dict[str, Any]:
    """The execution block of one backtest record (module docstring), plain Python values.

    ``rec`` must carry the trade ledger's detail and limit-order events (``StepRecord.blank(...,
    ledger=True)``, as every evaluation records). Computed on ``rec.device``, one host transfer.
    Raises ValueError without the ledger, or for a closed trade whose entry lies outside a branch.
    """
    import torch

    from foxhunt.domain.actions import ActionCodec
    from foxhunt.env.trades import LIMIT_EVENTS

    f64 = torch.float64
    detail, limits = rec.trade_detail, rec.limit_orders
    if detail is None or limits is None or rec.contracts is None:
        raise ValueError("the StepRecord keeps no trade ledger: record it with StepRecord.blank(ledger=True)")
    labels = ActionCodec(branches).value_labels()
    w = rec.written
    closed = rec.trade_closed & w[:, :, None]
    values = {"order_type": detail.order_type, "urgency": detail.urgency, "magnitude": rec.closed_magnitude}
    zero = torch.zeros((), dtype=f64, device=rec.device)
    per_trade = torch.stack(  # [E, T, K, 5] what each closed trade adds to its row
        [
            closed.to(f64),
            torch.where(closed, detail.size, zero),
            torch.where(closed, detail.entry_costs, zero),
            torch.where(closed, detail.costs, zero),
            torch.where(closed, rec.trade_pnl, zero),
        ],
        dim=-1,
    ).reshape(-1, len(_ROW_SUMS))
    out: dict[str, torch.Tensor] = {
        "contracts": torch.where(w, rec.contracts, zero).sum(),
        "costs": torch.where(w, rec.costs, zero).sum(),
        "limit_orders": (limits * w[:, :, None]).sum(dim=(0, 1)).to(f64),
    }
    outside = []
    for branch in BY:
        k = len(labels[branch])
        v = values[branch].reshape(-1)
        ok = closed.reshape(-1) & (v >= 0) & (v < k)
        outside.append((closed.reshape(-1) & ~ok).sum().to(f64))
        table = torch.zeros((k + 1, len(_ROW_SUMS)), dtype=f64, device=rec.device)
        out[branch] = table.index_add_(0, torch.where(ok, v, k), per_trade)[:k]
    out["outside"] = torch.stack(outside)
    host = _to_host(out)
    bad = {b: int(n) for b, n in zip(BY, host["outside"], strict=True) if n}
    if bad:
        raise ValueError(f"closed trades with an entry outside its branch: {bad}")
    sums: dict[str, Any] = {
        "contracts": host["contracts"][0],
        "costs": host["costs"][0],
        "limit_orders": {e: int(x) for e, x in zip(LIMIT_EVENTS, host["limit_orders"], strict=True)},
    }
    for branch in BY:
        rows = host[branch]
        width = len(_ROW_SUMS)
        sums[f"by_{branch}"] = {
            label: dict(zip(_ROW_SUMS, rows[i * width : (i + 1) * width], strict=True))
            for i, label in enumerate(labels[branch])
        }
    return _finish(sums)


def _to_host(out: dict[str, torch.Tensor]) -> dict[str, list[float]]:
    import torch

    flat = torch.cat([v.reshape(-1).to(torch.float64) for v in out.values()]).cpu().tolist()
    host, i = {}, 0
    for k, v in out.items():
        host[k], i = flat[i : i + v.numel()], i + v.numel()
    return host


def _div0(num: float, den: float) -> float:
    return num / den if den else 0.0


def _finish(sums: dict[str, Any]) -> dict[str, Any]:
    """The block from its additive parts (``contracts``, ``costs``, ``limit_orders`` counts and the
    ``by_*`` rows' :data:`_ROW_SUMS`): the totals, shares and ratios derived from them."""
    first = sums[f"by_{BY[0]}"]
    entries = int(round(sum(r["entries"] for r in first.values())))
    net = sum(r["net_pnl"] for r in first.values())
    limits = dict(sums["limit_orders"])
    placed = limits["placed"]
    block: dict[str, Any] = {
        "entries": entries,
        "contracts": float(sums["contracts"]),
        "costs": float(sums["costs"]),
        "cost_per_contract": _div0(float(sums["costs"]), float(sums["contracts"])),
        "net_pnl": float(net),
        "limit_orders": limits | {"fill_rate": limits["filled"] / placed if placed else None},
    }
    for branch in BY:
        rows = {}
        for label, r in sums[f"by_{branch}"].items():
            n = int(round(r["entries"]))
            rows[label] = {
                "entries": n,
                "share": _div0(n, entries),
                "contracts": float(r["contracts"]),
                "entry_costs": float(r["entry_costs"]),
                "entry_cost_per_contract": _div0(float(r["entry_costs"]), float(r["contracts"])),
                "costs": float(r["costs"]),
                "net_pnl": float(r["net_pnl"]),
            }
        block[f"by_{branch}"] = rows
    return block


def pool_execution(blocks: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The execution block of several backtests together (folds of a run, seeds of a study): their
    counts, contracts and dollars added, the shares and ratios derived again from the sums (never an
    average of ratios). Blocks that are None (a fold without one) are skipped; None when none is left
    or when they break entries down by different branch values (other branch sizes)."""
    have = [b for b in blocks if b]
    if not have:
        return None
    keys = {tuple((k, tuple(have[0][k])) for k in (f"by_{b}" for b in BY))}
    if any(tuple((k, tuple(b[k])) for k in (f"by_{x}" for x in BY)) not in keys for b in have):
        return None
    events = [e for e in have[0]["limit_orders"] if e != "fill_rate"]  # LIMIT_EVENTS, in order
    sums: dict[str, Any] = {
        "contracts": sum(b["contracts"] for b in have),
        "costs": sum(b["costs"] for b in have),
        "limit_orders": {e: sum(int(b["limit_orders"][e]) for b in have) for e in events},
    }
    for branch in BY:
        key = f"by_{branch}"
        sums[key] = {
            label: {s: sum(b[key][label][s] for b in have) for s in _ROW_SUMS} for label in have[0][key]
        }
    return _finish(sums)


def folds_execution(folds: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any] | None]:
    """``{"agent": ..., "rule": ...}``: the execution blocks of a run's fold results (``folds[k].execution``
    and ``folds[k].baselines.rule.execution``) pooled over its folds (:func:`pool_execution`); None for
    a side that a fold lacks (no rule: its carrier feature is off; a fold written by an older foxhunt)."""
    agent = [f.get(EXECUTION_KEY) for f in folds]
    rule = [((f.get("baselines") or {}).get(RULE) or {}).get(EXECUTION_KEY) for f in folds]
    return {
        "agent": pool_execution(agent) if agent and all(agent) else None,
        "rule": pool_execution(rule) if rule and all(rule) else None,
    }


def _shares(rows: dict[str, dict[str, Any]]) -> str:
    return ", ".join(f"{label} {r['share']:.0%}" for label, r in rows.items())


def execution_text(name: str, block: dict[str, Any] | None) -> str:
    """One line of a block as the commands print it: entries and their shares by order type, urgency
    and magnitude, the limit fill rate (of every order placed), cost per contract, net by magnitude."""
    if not block:
        return f"{name} execution: n/a"
    lim = block["limit_orders"]
    fill = (
        "no limit orders"
        if lim["fill_rate"] is None
        else f"limit fill rate {lim['fill_rate']:.0%} ({lim['filled']} of {lim['placed']} placed; "
        f"{lim['expired']} expired, {lim['cancelled']} cancelled, {lim['open_at_end']} open at the end)"
    )
    by_mag = ", ".join(f"{label} {r['net_pnl']:+,.0f}" for label, r in block["by_magnitude"].items())
    return (
        f"{name} execution: {block['entries']} entries (order type {_shares(block['by_order_type'])}; "
        f"urgency {_shares(block['by_urgency'])}; magnitude {_shares(block['by_magnitude'])}), {fill}, "
        f"cost {block['cost_per_contract']:,.2f} a contract, net by magnitude {by_mag}"
    )
