"""The anomaly guard (docs/design.md §7): an epoch whose statistics are broken or too good stops the
run with a diagnosis instead of being saved as the best.

Checked once per epoch, on the host dict of :meth:`foxhunt.train.diagnostics.EpochStats.read` and
the validation backtest's metrics:

* **non-finite**: any ``loss/``, ``grad/`` or ``q/`` statistic is NaN or ±Inf -> ANOMALOUS at once
  (the weights or the targets are poisoned; continuing only spreads it);
* **exploding loss**: ``|loss/total| > factor x median(|loss/total|)`` over the last
  ``median_window`` healthy epochs, once ``warmup_epochs`` of them exist -> SUSPECT, and ANOMALOUS
  on the ``max_consecutive``-th such epoch in a row (an exploding epoch never enters the median);
* **implausible backtest** (in training, each epoch's selection-period backtest): the backtester's
  flag (``metrics["implausible"]`` with its ``implausible_reasons``, as ``foxhunt backtest`` writes
  them) or, when the metrics carry no flag,
  :func:`foxhunt.backtest.metrics.implausibility` run on them -> ANOMALOUS at once (the
  oracle that peeks at the future must be stopped here, docs/design.md §8).

Only an OK epoch may be marked best (:attr:`GuardResult.may_be_best`); :meth:`AnomalyGuard.check_or_raise`
raises :class:`AnomalyError` on ANOMALOUS. Call :meth:`AnomalyGuard.reset` at a fold boundary.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from foxhunt.backtest.metrics import implausibility
from foxhunt.errors import FoxhuntError
from foxhunt.train.config import AnomalyConfig
from foxhunt.train.diagnostics import LOSS_TOTAL, QGAP_CORR, BoardSection

WATCHED_GROUPS = (BoardSection.LOSS, BoardSection.GRAD, BoardSection.Q)
"""Statistics under these groups must be finite."""


class AnomalyVerdict(StrEnum):
    OK = "ok"
    SUSPECT = "suspect"  # anomalous but tolerated for now (exploding loss below max_consecutive)
    ANOMALOUS = "anomalous"  # the run stops


class Cause(StrEnum):
    NON_FINITE = "non_finite"
    EXPLODING_LOSS = "exploding_loss"
    IMPLAUSIBLE = "implausible"


_FIX = {
    Cause.NON_FINITE: "lower agent.learn.lr, check the reward scale and the inputs for non-finite values, "
    "then resume from the last good checkpoint",
    Cause.EXPLODING_LOSS: "lower agent.learn.lr or agent.learn.clip_norm, or raise "
    "train.anomaly.loss_explosion_factor if the spike is expected, then resume from the last good checkpoint",
    Cause.IMPLAUSIBLE: "look for future information in the features (the leak guard) or a cost bug "
    "before trusting this run",
}


@dataclass(frozen=True)
class GuardResult:
    verdict: AnomalyVerdict
    causes: tuple[Cause, ...] = ()
    diagnosis: str = ""
    """Empty when OK; else each finding names the quantity, its value and the threshold."""

    @property
    def may_be_best(self) -> bool:
        """Only a healthy epoch's checkpoint may be marked best."""
        return self.verdict is AnomalyVerdict.OK

    @property
    def ok(self) -> bool:
        return self.verdict is AnomalyVerdict.OK


class AnomalyError(FoxhuntError):
    """The anomaly guard stopped the run; ``result`` holds the verdict and its diagnosis."""

    exit_code = 3  # not bad input: the run itself went wrong

    def __init__(self, where: str, result: GuardResult) -> None:
        self.result = result
        fix = "; ".join(_FIX[c] for c in result.causes) or "inspect the diagnostics history"
        super().__init__(where, f"training stopped by the anomaly guard: {result.diagnosis}", fix)


_NOT_WATCHED = frozenset({QGAP_CORR})
"""Keys of the watched groups that are diagnostics, not training state: the direction gap's
correlation with the planted signal is NaN where the gap is constant (a policy that has not learned
a direction yet), which the report shows as n/a and which must not stop the run."""


def _non_finite(stats: Mapping[str, float]) -> list[str]:
    prefixes = tuple(f"{g}/" for g in WATCHED_GROUPS)
    return [
        f"{k} is {v}"
        for k, v in stats.items()
        if k.startswith(prefixes) and k not in _NOT_WATCHED and not math.isfinite(v)
    ]


class AnomalyGuard:
    """Per-epoch checks with a running loss median; one instance per run, :meth:`reset` per fold."""

    def __init__(self, cfg: AnomalyConfig | None = None) -> None:
        self.cfg = cfg if cfg is not None else AnomalyConfig()
        self._losses: deque[float] = deque(maxlen=self.cfg.median_window)  # |loss/total| of healthy epochs
        self._exploding = 0  # consecutive exploding epochs

    def reset(self) -> None:
        """Forget the loss history (a fold boundary)."""
        self._losses.clear()
        self._exploding = 0

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state (checkpoint metadata): a resumed run judges the same epochs alike."""
        return {"losses": list(self._losses), "exploding": self._exploding}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.reset()
        self._losses.extend(float(x) for x in state["losses"])
        self._exploding = int(state["exploding"])

    def check(
        self, stats: Mapping[str, float], validation: Mapping[str, Any] | bool | None = None
    ) -> GuardResult:
        """The verdict on one epoch (call once per epoch: it updates the loss history).

        ``validation``: the epoch's backtest metrics (training: the selection period's; a
        :func:`~foxhunt.backtest.metrics.compute_metrics` dict, or a body with ``implausible`` /
        ``implausible_reasons``), or just the backtester's boolean flag, or None when no backtest ran
        this epoch (``train.selection = last``).
        """
        causes: list[Cause] = []
        findings: list[str] = []

        bad = _non_finite(stats)
        if bad:
            causes.append(Cause.NON_FINITE)
            shown = ", ".join(bad[:6]) + (f" and {len(bad) - 6} more" if len(bad) > 6 else "")
            findings.append(
                f"non-finite statistics: {shown} (threshold: every loss/, grad/, q/ statistic must be finite)"
            )

        exploding = False
        loss = stats.get(LOSS_TOTAL)
        factor = self.cfg.loss_explosion_factor
        warm = len(self._losses) >= self.cfg.warmup_epochs
        if factor > 0 and warm and loss is not None and math.isfinite(loss):
            median = statistics.median(self._losses)
            threshold = factor * median
            if median > 0 and abs(loss) > threshold:  # a zero median gives no scale to compare with
                exploding = True
                self._exploding += 1
                findings.append(
                    f"exploding loss: {LOSS_TOTAL} = {loss:.4g} exceeds {factor:g} x the running median "
                    f"{median:.4g} of the last {len(self._losses)} epochs (threshold {threshold:.4g}); "
                    f"{self._exploding} consecutive epoch(s), the run stops at {self.cfg.max_consecutive}"
                )
        if not exploding:
            self._exploding = 0
        stop_on_loss = exploding and self._exploding >= self.cfg.max_consecutive
        if exploding:
            causes.append(Cause.EXPLODING_LOSS)

        if validation is not None:
            reasons = self._implausible(validation)
            if reasons:
                causes.append(Cause.IMPLAUSIBLE)
                findings.append("implausible backtest result: " + "; ".join(reasons))

        if not causes:
            if loss is not None and math.isfinite(loss):
                self._losses.append(abs(loss))
            return GuardResult(AnomalyVerdict.OK)
        stop = stop_on_loss or Cause.NON_FINITE in causes or Cause.IMPLAUSIBLE in causes
        return GuardResult(
            AnomalyVerdict.ANOMALOUS if stop else AnomalyVerdict.SUSPECT, tuple(causes), "; ".join(findings)
        )

    def _implausible(self, validation: Mapping[str, Any] | bool) -> list[str]:
        if isinstance(validation, bool):
            return ["flagged implausible by the backtester"] if validation else []
        if "implausible" in validation:  # the backtester already judged (maybe with an AUC ceiling)
            if not validation["implausible"]:
                return []
            return list(validation.get("implausible_reasons") or ["flagged implausible by the backtester"])
        return implausibility(dict(validation), max_sharpe_annual=self.cfg.max_sharpe_annual)

    def check_or_raise(
        self, stats: Mapping[str, float], validation: Mapping[str, Any] | bool | None = None, *, where: str
    ) -> GuardResult:
        """:meth:`check`, raising :class:`AnomalyError` (naming ``where``, e.g. ``"fold 2 epoch 17"``)
        when the verdict is ANOMALOUS; an OK or SUSPECT result is returned."""
        return self.raise_if(self.check(stats, validation), where=where)

    @staticmethod
    def raise_if(result: GuardResult, *, where: str) -> GuardResult:
        """Raise :class:`AnomalyError` for an ANOMALOUS ``result`` (after the caller logged it and saved
        the checkpoint as last, never best); return it otherwise."""
        if result.verdict is AnomalyVerdict.ANOMALOUS:
            raise AnomalyError(where, result)
        return result
