"""The baselines an agent is judged against: their names, their labels and what each does.

The one home of these words, for the backtest, the run's summary (``folds[k].baselines``), the
printed lines, the report's tables and its plots' legends (a light module: no torch).

* ``flat`` never trades.
* ``long`` ("long, re-entered each plan") wants a Full long on every step. The plan lock binds it as
  it binds every policy (docs/design.md §5): its position leaves when the plan exits (profit, stop,
  or the timeout after ``env.plan.barrier.horizon`` rows) and it buys again on the next step, paying
  a round trip per plan. It is the market's drift under the agent's own rules, not buy-and-hold.
* ``buy_hold`` ("buy and hold") buys a Full long once at the start of each validation window and
  holds it to the window's end: one round trip a window, the plan's barriers and timeout out of reach
  (:func:`foxhunt.backtest.evaluate.scripted_env`). Windows are the evaluation's episodes
  (``env.episode_rows`` rows, every policy starting flat in each), so this is buy-and-hold as far as
  the agent itself can hold.
* ``rule`` is the reference rule of :mod:`foxhunt.backtest.reference` (the planted signal's trade).
"""

from __future__ import annotations

from enum import StrEnum


class Baseline(StrEnum):
    """A baseline's key in ``folds[k].baselines`` (and, but for the rule, a scripted policy's name)."""

    FLAT = "flat"
    LONG = "long"
    BUY_HOLD = "buy_hold"
    RULE = "rule"


AGENT = "agent"
"""The agent's name beside the baselines (tables, plots, equity series)."""

LABELS: dict[str, str] = {
    AGENT: "agent",
    Baseline.FLAT: "flat",
    Baseline.LONG: "long (per plan)",
    Baseline.BUY_HOLD: "buy and hold",
    Baseline.RULE: "reference rule",
}
"""The short name shown for each policy in tables, legends and printed lines."""

DESCRIPTIONS: dict[str, str] = {
    Baseline.FLAT: "never trades",
    Baseline.LONG: (
        "wants a Full long on every step; each plan's exit (profit, stop or the timeout) closes it and it "
        "buys again on the next step, one round trip per plan (the plan lock every policy trades under)"
    ),
    Baseline.BUY_HOLD: (
        "buys a Full long at the start of each validation window and holds it to the window's end, "
        "one round trip per window"
    ),
    Baseline.RULE: "the one-feature trade of the planted signal (see Edge capture)",
}
"""What each baseline does, in one clause (the report's notes, ``foxhunt backtest --help``)."""

ORDER = (Baseline.FLAT, Baseline.LONG, Baseline.BUY_HOLD)
"""Baselines every run has, in the order they are shown; the reference rule follows where present."""


def label(name: str) -> str:
    """The shown name of a policy (``"long"`` -> ``"long (per plan)"``); an unknown name as it is."""
    return LABELS.get(name, name)
