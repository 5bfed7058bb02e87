"""Names shared by the code that writes a run's summary (``foxhunt.train.run``, ``foxhunt.job``) and
the report that reads it back from ``metrics.json``. Kept free of heavy imports: the report and the
trainer both import it.
"""

from __future__ import annotations

from enum import StrEnum


class ReportedCheckpoint(StrEnum):
    """Which of a fold's checkpoints its reported validation numbers (``net_pnl``, ``sharpe_annual``,
    the equity curve, the action shares) come from: ``fold["checkpoint"]`` in ``metrics.json``."""

    BEST = "best"
    """``checkpoints/fold<k>/best.safetensors``: the epoch with the highest validation Sharpe among
    the epochs the anomaly guard passed."""
    LAST = "last"
    """``checkpoints/fold<k>/last.safetensors``: the fold's last epoch (used when no epoch qualified
    as best: every one was flagged, or none had a finite validation Sharpe)."""


BEST_RULE = "the epoch with the highest validation Sharpe (annualised) among those the anomaly guard passed"
"""How best.safetensors is chosen (``CheckpointStore.save_best`` with the epoch's validation Sharpe)."""

SELECTION_CAVEAT = (
    "the best epoch is chosen on this validation period, so its numbers are optimistic; the last "
    "epoch's numbers, beside them, involve no such choice"
)
"""Why the last epoch is shown beside the best one."""

LAST_EPOCH_KEY = "last_epoch"
"""``fold["last_epoch"]``: the fold's last epoch evaluated over the same validation rows, with its
``epoch`` number, shown beside the reported (best) checkpoint."""

EQUITY_TIME_KEY = "time"
"""``fold["equity"]["time"]``: ISO-8601 UTC time of each equity point (the row where that step's PnL
is marked); the policies' curves are lists of the same length."""
