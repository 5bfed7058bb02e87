"""Honest model selection (docs/design.md §7): which of a fold's rows train the agent, which pick the
epoch it reports, and the rule, so that the fold's validation period is evaluated once, at the end,
by a checkpoint chosen without it.

Layout of one fold's usable training rows ``[lo, hi)`` (purged and embargoed rows already removed,
:mod:`foxhunt.validation.folds`), ``e`` the fold's embargo (``max(embargo_rows, label_span)``)::

    train_tail:  [lo ... collection ...)<e>[ selection )<e, purge>[ validation )
    last:        [lo ........... collection ..........)<e, purge>[ validation )

* **selection** (``Selection.TRAIN_TAIL``): the last ``round(selection_fraction x (hi - lo))`` rows,
  at most ``selection_rows`` (0: no cap); every epoch's greedy backtest runs there and the best
  Sharpe picks ``best.safetensors``.
* **collection**: training episodes start at ``lo`` and their windows end before
  ``collect_hi = select_lo - e``: the gap between the two is the one the folds leave between training
  and validation, so no reward, label or aux target of a training step reaches a selection row.
* ``Selection.LAST`` has no selection period: training uses every usable row, nothing is evaluated per
  epoch, and the fold reports its last epoch.
The periods themselves (:func:`foxhunt.validation.folds.fold_periods`) live with the folds: the leak
guard checks the input screen on the same collection rows.

* **diagnostic rows** (:func:`diagnostic_rows`): where each epoch's direction-gap correlation
  (``q/direction_gap_corr``) is read: the selection period, or under ``last`` the in-sample tail of
  the collection period of the same size.
"""

from __future__ import annotations

from typing import Any

import torch

from foxhunt.report.schema import BEST_RULE, LAST_RULE
from foxhunt.train.config import TrainConfig
from foxhunt.validation.config import Selection
from foxhunt.validation.folds import FoldPeriods


def selection_rule(periods: FoldPeriods) -> str:
    """How the fold's reported checkpoint is chosen (a fold's ``best_rule``)."""
    return BEST_RULE if periods.selection is Selection.TRAIN_TAIL else LAST_RULE


def selection_summary(periods: FoldPeriods) -> dict[str, Any]:
    """``fold["selection"]`` of metrics.json (:data:`foxhunt.report.schema.SELECTION_KEY`)."""
    return {
        "rule": selection_rule(periods),
        "mode": periods.selection.value,
        "start": periods.select_lo,
        "end": periods.select_hi,
        "rows": periods.select_rows,
        "collect_end": periods.collect_hi,
    }


def diagnostic_rows(periods: FoldPeriods, t: TrainConfig) -> tuple[int, int]:
    """The rows ``[lo, hi)`` each epoch's direction-gap correlation reads (``q/direction_gap_corr``,
    :func:`foxhunt.train.diagnostics.gap_correlation`): the selection period under ``train_tail``;
    under ``last`` (no selection period) the last rows of the collection period, as many as
    ``train_tail`` would hold out (``round(selection_fraction x (collect_hi - collect_lo))``, at most
    ``selection_rows`` where it caps), and at least 2 (one row and the next it steps to). The
    collection period of ``last`` ends where the fold's usable rows do, so these are the very rows
    ``train_tail`` would have made its selection period: the two modes' curves read the same rows.

    In-sample rows are legitimate here: the number correlates the greedy network's Q(long) - Q(short)
    at each row with the planted feature's value at that row. It reads no label, no future return and
    no PnL, picks no checkpoint and is reported beside the run, never acted on; it asks whether the
    network has learned to read the carrier, which the rows it was trained on answer as well as any."""
    if periods.selection is Selection.TRAIN_TAIL:
        return periods.select_lo, periods.select_hi
    span = periods.collect_hi - periods.collect_lo
    rows = round(t.selection_fraction * span)
    if t.selection_rows > 0:
        rows = min(rows, t.selection_rows)
    rows = min(max(rows, 2), span)  # fold_periods guarantees span >= steps_per_epoch + 2 >= 3
    return periods.collect_hi - rows, periods.collect_hi


def episode_starts(u: torch.Tensor, periods: FoldPeriods, steps: int) -> torch.Tensor:
    """Start rows of training episodes of ``steps`` steps from uniform draws ``u`` in [0, 1) [N].

    A window covers rows ``[start, start + steps]``; ``start <= collect_hi - steps - 1`` even where a
    float32 ``u`` rounds ``u x span`` up to ``span``, so the last row is below ``collect_hi``."""
    span = periods.collect_hi - periods.collect_lo - steps - 1
    return periods.collect_lo + (u * span).to(torch.int64)
