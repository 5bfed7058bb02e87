"""Capture: how much of the reference rule's edge an agent harvests (:mod:`foxhunt.backtest.reference`
has the rule), fold by fold and over a run's folds. Pure arithmetic on net PnLs: no torch, so the
report reads it as cheaply as training writes it.

**Capture** is the agent's validation net PnL over the rule's (:func:`capture_ratio`). It is
defined only where the rule made money (``rule > 0``): where the rule loses or breaks even there is
no edge after costs to capture in that period, and a ratio to a loss would flip its sign (an agent
that loses less than the rule would "capture" a positive share) or explode near zero. Such a period
reports no capture (``None``, "n/a" in the report).

Over several folds (:class:`Capture`, issue 58) every fold's capture is kept beside the total, and a
fold where the rule lost or broke even (or had no rule) is **excluded** (:class:`Exclusion`): its PnL
is still shown, but it enters neither the ratio nor the median. The ratio is the agent's net PnL
summed over the kept folds over the rule's summed over them; the median is that of the kept folds'
captures, so one fold that the rule barely won cannot carry the total unseen. The sum over every
fold, rule-losing folds included (:func:`total_capture`), is what foxhunt reported as the capture
before issue 58; it is kept, labelled ``capture_all_folds``, so earlier results stay comparable.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

RULE = "rule"
"""The reference rule's name among a fold's baselines (``folds[k].baselines.rule``)."""


def capture_ratio(agent_net: float, rule_net: float) -> float | None:
    """Agent net PnL / rule net PnL; ``None`` when the rule made nothing (``rule_net <= 0``): no edge
    after costs to capture, and a ratio to a loss would have the wrong sign (module docstring)."""
    if not rule_net > 0:
        return None
    return float(agent_net) / float(rule_net)


def fold_capture(fold: dict[str, Any]) -> float | None:
    """The capture of one fold result (``net_pnl`` beside ``baselines.rule.net_pnl``); None without a rule."""
    rule = (fold.get("baselines") or {}).get(RULE)
    return capture_ratio(fold["net_pnl"], rule["net_pnl"]) if rule else None


def total_capture(folds: list[dict[str, Any]]) -> float | None:
    """Sum of the agent's net PnL over every fold / sum of the rule's, rule-losing folds included (None
    without a rule in every fold): the capture foxhunt reported before issue 58 (``capture_all_folds``)."""
    return Capture.of(folds).all_folds


class Exclusion(StrEnum):
    """Why a fold is kept out of a capture's ratio and median (its PnL is still shown)."""

    NO_RULE = "no_rule"
    RULE_LOST = "rule_lost"

    @property
    def text(self) -> str:
        return _EXCLUSION_TEXT[self]


_EXCLUSION_TEXT = {
    Exclusion.NO_RULE: "no reference rule (its carrier feature is not in the state)",
    Exclusion.RULE_LOST: "the reference rule lost or broke even (net <= 0): no edge to capture",
}


@dataclass(frozen=True)
class FoldCapture:
    """One fold's agent and rule net PnL (``rule`` None: no rule in that run) and what follows."""

    fold: int
    agent: float
    rule: float | None

    @property
    def excluded(self) -> Exclusion | None:
        if self.rule is None:
            return Exclusion.NO_RULE
        return None if self.rule > 0 else Exclusion.RULE_LOST

    @property
    def capture(self) -> float | None:
        return None if self.rule is None else capture_ratio(self.agent, self.rule)

    def to_dict(self) -> dict[str, Any]:
        why = self.excluded
        return {
            "fold": self.fold,
            "agent_net_pnl": self.agent,
            "rule_net_pnl": self.rule,
            "capture": self.capture,
            "excluded": why.value if why else None,
            "why": why.text if why else None,
        }


@dataclass(frozen=True)
class Capture:
    """The capture over several folds, every fold shown (module docstring)."""

    folds: tuple[FoldCapture, ...]

    @classmethod
    def of(cls, folds: Sequence[dict[str, Any]]) -> Capture:
        """From fold results (``fold``, ``net_pnl`` beside ``baselines.rule.net_pnl``): ``train``'s."""
        rules = [(f.get("baselines") or {}).get(RULE) for f in folds]
        return cls(
            tuple(
                FoldCapture(int(f.get("fold", k)), float(f["net_pnl"]), float(r["net_pnl"]) if r else None)
                for k, (f, r) in enumerate(zip(folds, rules, strict=True))
            )
        )

    @property
    def kept(self) -> tuple[FoldCapture, ...]:
        return tuple(f for f in self.folds if f.excluded is None)

    @property
    def ratio(self) -> float | None:
        """The agent's net PnL over the kept folds / the rule's over them (None: no fold kept)."""
        kept = self.kept
        return capture_ratio(sum(f.agent for f in kept), sum(f.rule or 0.0 for f in kept)) if kept else None

    @property
    def kept_captures(self) -> list[float]:
        """The captures of the kept folds, in fold order."""
        return [c for f in self.kept if (c := f.capture) is not None]

    @property
    def median(self) -> float | None:
        """The median of the kept folds' captures (None: no fold kept)."""
        caps = self.kept_captures
        return float(statistics.median(caps)) if caps else None

    @property
    def all_folds(self) -> float | None:
        """Every fold summed, rule-losing ones included: the capture before issue 58 (None without a
        rule in every fold, or where the summed rule made <= 0)."""
        if not self.folds or any(f.rule is None for f in self.folds):
            return None
        return capture_ratio(sum(f.agent for f in self.folds), sum(f.rule or 0.0 for f in self.folds))

    def excluded(self) -> list[dict[str, Any]]:
        """The folds kept out of the ratio and median, each as :meth:`FoldCapture.to_dict` (both net PnLs)."""
        return [f.to_dict() for f in self.folds if f.excluded is not None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ratio": self.ratio,
            "median": self.median,
            "all_folds": self.all_folds,
            "kept_folds": [f.fold for f in self.kept],
            "excluded": self.excluded(),
            "folds": [f.to_dict() for f in self.folds],
        }
