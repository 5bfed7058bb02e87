"""Names shared by the code that writes a run's summary (``foxhunt.train.run``, ``foxhunt.pipeline``) and
the report that reads it back from ``metrics.json``. Kept free of heavy imports: the report and the
trainer both import it.
"""

from __future__ import annotations

from enum import StrEnum


class ReportedCheckpoint(StrEnum):
    """Which of a fold's checkpoints its reported validation numbers (``net_pnl``, ``sharpe_annual``,
    the equity curve, the action shares) come from: ``fold["checkpoint"]`` in ``metrics.json``."""

    BEST = "best"
    """``checkpoints/fold<k>/best.safetensors``: the epoch with the highest selection-period Sharpe
    (the tail of the fold's training rows, :mod:`foxhunt.train.selection`) among the epochs the
    anomaly guard passed."""
    LAST = "last"
    """``checkpoints/fold<k>/last.safetensors``: the fold's last epoch (``train.selection = last``, or
    no epoch qualified as best: every one was flagged, or none had a finite selection Sharpe)."""


BEST_RULE = (
    "best selection-period Sharpe (annualised; the last training rows, among the epochs the anomaly "
    "guard passed); validation never seen before the end"
)
"""How best.safetensors is chosen (``train.selection = train_tail``: ``BestCheckpoint.save`` with
each epoch's Sharpe over the fold's selection period); a fold's ``best_rule`` in metrics.json."""

LAST_RULE = "the last epoch (train.selection = last: no selection); validation never seen before the end"
"""A fold's ``best_rule`` when nothing is selected."""

SELECTION_KEY = "selection"
"""``fold["selection"]``: the fold's selection period (``rule``, ``start``, ``end``, ``rows``;
:func:`foxhunt.train.selection.selection_summary`) and the reported epoch's numbers there
(``net_pnl``, ``sharpe_annual``, and the reference rule's ``rule_net_pnl``: what ``foxhunt tune``
ranks trials on, :mod:`foxhunt.tune.objective`). A summary without it predates honest selection:
its best epoch was picked on the validation period it reports."""

SELECTION_CAVEAT = (
    "the best epoch was chosen on the validation period itself, so its numbers are optimistic; the last "
    "epoch's numbers, beside them, involve no such choice"
)
"""Why the last epoch is shown beside the best one, in a summary that predates :data:`SELECTION_KEY`."""

OUT_OF_SAMPLE = (
    "the epoch is chosen on the selection period (the tail of the fold's training rows, before the "
    "validation purge), so both numbers are out of sample"
)
"""What the best-vs-last comparison means when every fold records its selection period."""

LAST_EPOCH_KEY = "last_epoch"
"""``fold["last_epoch"]``: the fold's last epoch evaluated over the same validation rows, with its
``epoch`` number, shown beside the reported (best) checkpoint."""

CALIBRATION_KEY = "calibration"
"""``fold["calibration"]``: ``{"train": ..., "validation": ...}``, each
:func:`foxhunt.train.diagnostics.calibration_buckets` of the reported policy's entry advantage against
the next ``horizon`` rows' move per contract (with ``horizon``), on the fold's training rows and on its
validation rows."""

EQUITY_TIME_KEY = "time"
"""``fold["equity"]["time"]``: ISO-8601 UTC time of each equity point (the row where that step's PnL
is marked); the policies' curves are lists of the same length."""
