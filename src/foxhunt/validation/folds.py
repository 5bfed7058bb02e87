"""Purged walk-forward folds with an embargo (docs/design.md §4).

Layout of ``n`` rows, ``k`` folds, embargo ``e = max(embargo_rows, label_span)``::

    rows   0 ............ v0 ........ v1 ........ v2 ... v_k = n
    fold 0 [train    ]<e> [ val 0   ]
    fold 1 [train (expanding)   ]<e>  [ val 1   ]
    fold 2 [train (expanding)               ]<e> [ val 2 ]

* The first validation block starts at ``v0 = round(min_train_fraction * n)``; the validation
  blocks tile ``[v0, n)`` in time order, ``v_i = v0 + floor(i * (n - v0) / k)`` (so each is about
  ``(1 - min_train_fraction) / k`` of the rows and they never overlap).
* Fold ``i``'s training window is every row before ``v_i`` (EXPANDING), or ``[v_i - e - R, v_i)``
  with ``R = rolling_train_rows`` (ROLLING: ``R`` training rows survive, the same in every fold;
  ``R`` defaults to fold 0's training size ``v0 - e``). From the window,
  :func:`purge_and_embargo` removes

  - **purged** rows: a row ``t`` before the block whose label window ``[t, t + label_span]``
    reaches the block (``t + label_span >= v_i``), and
  - **embargoed** rows: the rest of the gap of ``e`` rows before the block (only when
    ``embargo_rows > label_span``), and any row in the ``e`` rows after the block (none in a
    walk-forward, where training always precedes validation; the rule is general).

  Hence ``max(train) + label_span < min(validation)`` and ``min(validation) - max(train) > e``.
* Deterministic: the folds depend only on ``n``, the parameters and ``label_span``.

:func:`make_folds` pairs each fold with its :class:`~foxhunt.validation.normalise.RobustScaler`,
fitted on that fold's training rows only (:class:`FoldData`): the one way later stages read training
and validation rows (the alpha check, the environment, the backtester); every path that normalises
calls :func:`foxhunt.validation.normalise.apply` through :meth:`FoldData.normalise`, and
:func:`save_folds` writes folds and scalers as JSON.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from foxhunt.atomic import write_json
from foxhunt.data.schemas import BarKind, RowUnit
from foxhunt.errors import FoxhuntError, door, setting
from foxhunt.validation.config import FoldConfig, FoldScheme, Selection
from foxhunt.validation.normalise import RobustScaler, apply, fit_robust

if TYPE_CHECKING:
    from foxhunt.data.config import DataConfig


@dataclass(frozen=True, eq=False)
class Fold:
    """One walk-forward fold: row indices (int64, ascending) and its boundaries (end exclusive)."""

    index: int
    train: np.ndarray  # [n_train] int64
    validation: np.ndarray  # [n_val] int64
    train_start: int  # first training row
    train_end: int  # one past the last training row
    validation_start: int
    validation_end: int  # one past the last validation row
    purged: int  # training-window rows removed because their label window reaches validation
    embargoed: int  # further training-window rows removed by the embargo
    embargo: int  # effective embargo in rows: max(embargo_rows, label_span)

    def summary(self) -> dict[str, int]:
        """The boundaries and counts, JSON-safe (for reports and checkpoint metadata)."""
        return {
            "index": self.index,
            "train_start": self.train_start,
            "train_end": self.train_end,
            "n_train": len(self.train),
            "validation_start": self.validation_start,
            "validation_end": self.validation_end,
            "n_validation": len(self.validation),
            "purged": self.purged,
            "embargoed": self.embargoed,
            "embargo": self.embargo,
        }


def purge_and_embargo(
    train: np.ndarray, validation_start: int, validation_end: int, label_span: int, embargo: int
) -> tuple[np.ndarray, int, int]:
    """Remove from ``train`` every row that could leak into the block ``[validation_start, validation_end)``.

    * purge: rows ``t < validation_start`` with ``t + label_span >= validation_start`` (their
      label window ``[t, t + label_span]`` reaches the block);
    * embargo: the other rows of ``[validation_start - embargo, validation_start)`` and the rows of
      ``[validation_end, validation_end + embargo)`` (after the block);
    * rows inside the block itself.

    Returns ``(kept rows int64, n_purged, n_embargoed)`` (rows inside the block count as purged).
    """
    if label_span < 0 or embargo < 0:
        raise ValueError(f"label_span and embargo must be >= 0, got {label_span}, {embargo}")
    t = np.asarray(train, dtype=np.int64)
    inside = (t >= validation_start) & (t < validation_end)
    purged = inside | ((t < validation_start) & (t + label_span >= validation_start))
    embargoed = ~purged & (
        ((t < validation_start) & (t >= validation_start - embargo))
        | ((t >= validation_end) & (t < validation_end + embargo))
    )
    keep = ~(purged | embargoed)
    return t[keep], int(purged.sum()), int(embargoed.sum())


class TooFewRowsError(FoxhuntError, ValueError):
    """The rows cannot hold the asked folds (a ValueError too, for callers of the pure function).
    ``rows``, ``need``: the rows there are and the fewest that hold the folds; ``fewer``: the fold
    count that fits, as a fix ("" when no fewer folds fit)."""

    rows: int = 0
    need: int = 0
    fewer: str = ""


def _shortfall(n: int, params: FoldConfig, label_span: int) -> str | None:
    """Why ``n`` rows cannot hold ``params``'s folds (None: they can); pure arithmetic."""
    k = params.n_folds
    e = max(params.embargo_rows, int(label_span))
    v0 = int(round(params.min_train_fraction * n))
    if (n - v0) // k < 1:
        return f"{n - v0} rows after the first training window for {k} blocks"
    first_train = v0 - e
    if first_train < 1:
        return f"the first training window keeps {first_train} rows (need >= 1)"
    if params.scheme is FoldScheme.ROLLING and params.rolling_train_rows is not None:
        if params.rolling_train_rows > first_train:
            return (
                f"rolling_train_rows {params.rolling_train_rows} exceeds the {first_train} rows "
                "before the first block"
            )
    return None


def _feasible_folds(n_rows: int, params: FoldConfig, label_span: int) -> int:
    """The largest fold count below ``params.n_folds`` that ``n_rows`` rows can hold (0: none)."""
    for k in range(params.n_folds - 1, 0, -1):
        if _shortfall(n_rows, params.model_copy(update={"n_folds": k}), label_span) is None:
            return k
    return 0


def _rows_needed(n_rows: int, params: FoldConfig, label_span: int) -> int:
    """The fewest rows (above ``n_rows``) that hold ``params``'s folds: doubling, then bisection."""
    lo, hi = n_rows, max(2 * n_rows, 2)
    while _shortfall(hi, params, label_span) is not None:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _shortfall(mid, params, label_span) is None else (mid, hi)
    return hi


def _too_short(n_rows: int, params: FoldConfig, label_span: int, problem: str) -> TooFewRowsError:
    k = _feasible_folds(n_rows, params, label_span)
    fewer = setting(f"folds.n_folds={k}") if k else ""
    need = _rows_needed(n_rows, params, label_span)
    exc = TooFewRowsError(
        "folds",
        f"{n_rows} rows are too few for {params.n_folds} {params.scheme} folds (embargo "
        f"{max(params.embargo_rows, label_span)} rows, min_train_fraction {params.min_train_fraction}): "
        f"{problem}; they need at least {need} rows",
        f"{fewer or 'fewer folds cannot help'}; or at least {need / n_rows:.3g}x the rows from the same "
        f"data: {SNAPSHOT_ROWS}, or {setting('data.bar_seconds=...')} at most {n_rows / need:.3g}x the "
        "current; or more data files",
    )
    exc.rows, exc.need, exc.fewer = n_rows, need, fewer
    exc.params, exc.label_span = params, label_span
    return exc


# Rows of book snapshots instead of bars: features build's own option, the config key in Python.
SNAPSHOT_ROWS = door("--row-unit snapshot", 'api.config(..., overrides=["data.row_unit=snapshot"])')

# Bar lengths a concrete fix proposes: those that divide an hour (bars then line up with the clock).
ROUND_BAR_SECONDS = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60, 120, 180, 300, 600, 900, 1200, 1800, 3600)
# Where a data setting is given once: on the command line features build records it in its cache and
# the later commands read it back; in Python the config given to api.build_features goes on.
BUILT_ONCE = door(
    "on foxhunt features build: the commands after it that take its --cache, and foxhunt run --out into "
    "the folder holding its cache, read it back",
    "for api.build_features, and the same config for the calls on its cache",
)
# Rows do not scale exactly with the bar length (a session's first and last bars, bars without a
# book state): a proposed length leaves this much more than the rows needed.
BAR_FIX_MARGIN = 1.1


def with_bar_fix(exc: TooFewRowsError, data: DataConfig, t: PeriodSettings) -> TooFewRowsError:
    """``exc`` with :func:`shorter_bars`'s concrete fix where the rows are time bars: enough rows for
    the folds and for training's first fold to hold one episode (``train.steps_per_epoch + 2``
    collection rows, and a selection period with its embargo unless ``train.selection = last``: the
    layout of foxhunt.train.selection), so the setting carries the walk through ``foxhunt run``."""
    if data.row_unit is not RowUnit.BAR or data.bar_kind is not BarKind.TIME:
        return exc
    episode = t.steps_per_epoch + 2
    params: FoldConfig | None = getattr(exc, "params", None)
    if params is not None and t.selection is not Selection.LAST:
        embargo = max(params.embargo_rows, getattr(exc, "label_span", 0))
        episode = math.ceil((episode + embargo) / max(1.0 - t.selection_fraction, 1e-9))
    return shorter_bars(exc, data.bar_seconds, episode)


def shorter_bars(exc: TooFewRowsError, bar_seconds: int, first_train_rows: int = 0) -> TooFewRowsError:
    """``exc`` (time bars of ``bar_seconds``) with a concrete fix: the longest round bar length
    (:data:`ROUND_BAR_SECONDS`) whose rows, scaled from these, hold the folds with a margin; to be set
    once, where the features are built (later commands read it from the cache or its folder).
    ``first_train_rows``: the rows the first fold's training window must hold besides (training's
    episode). ``exc`` as it is when no shorter round length fits."""
    rows, need = getattr(exc, "rows", 0), getattr(exc, "need", 0)
    if not rows or not need:
        return exc
    params: FoldConfig | None = getattr(exc, "params", None)
    if first_train_rows and params is not None:  # the first fold's training window holds that many
        embargo = max(params.embargo_rows, getattr(exc, "label_span", 0))
        need = max(need, math.ceil((first_train_rows + embargo + 1) / params.min_train_fraction))
    limit = bar_seconds * rows / (need * BAR_FIX_MARGIN)
    fits = [b for b in ROUND_BAR_SECONDS if b <= limit and b < bar_seconds]
    if not fits:
        return exc
    b = max(fits)
    out = TooFewRowsError(
        exc.where,
        exc.problem,
        f"{setting(f'data.bar_seconds={b}')} (about {rows * bar_seconds // b} rows of {b} s bars) "
        f"{BUILT_ONCE}{'; or ' + exc.fewer if exc.fewer else ''}; or more data files",
    )
    out.rows, out.need, out.fewer = rows, need, exc.fewer
    return out


def purged_walk_forward(n_rows: int, params: FoldConfig, label_span: int) -> list[Fold]:
    """The folds of ``n_rows`` rows (module docstring: layout). Raises ValueError when too short."""
    if label_span < 0:
        raise ValueError(f"label_span must be >= 0 rows, got {label_span}")
    n, k = int(n_rows), params.n_folds
    problem = _shortfall(n, params, label_span)
    if problem is not None:
        raise _too_short(n, params, label_span, problem)
    e = max(params.embargo_rows, int(label_span))
    v0 = int(round(params.min_train_fraction * n))
    bounds = [v0 + (i * (n - v0)) // k for i in range(k + 1)]
    first_train = v0 - e
    width = first_train
    if params.scheme is FoldScheme.ROLLING and params.rolling_train_rows is not None:
        width = params.rolling_train_rows
    folds = []
    for i in range(k):
        vs, ve = bounds[i], bounds[i + 1]
        start = 0 if params.scheme is FoldScheme.EXPANDING else vs - e - width
        window = np.arange(start, vs, dtype=np.int64)
        train, purged, embargoed = purge_and_embargo(window, vs, ve, label_span, e)
        folds.append(
            Fold(
                index=i,
                train=train,
                validation=np.arange(vs, ve, dtype=np.int64),
                train_start=int(train[0]),
                train_end=int(train[-1]) + 1,
                validation_start=vs,
                validation_end=ve,
                purged=purged,
                embargoed=embargoed,
                embargo=e,
            )
        )
    return folds


# --- folds with their normalisers ---------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FoldData:
    fold: Fold
    scaler: RobustScaler

    def normalise(self, x: np.ndarray) -> np.ndarray:
        """``x`` [n, F] with this fold's training-row statistics (the one normalisation path)."""
        return apply(self.scaler, x)

    def to_dict(self) -> dict[str, Any]:
        return {"fold": self.fold.summary(), "scaler": self.scaler.to_dict()}


def make_folds(
    features: np.ndarray, columns: tuple[str, ...] | list[str], params: FoldConfig, label_span: int
) -> list[FoldData]:
    """Purged walk-forward folds of ``features`` rows, each with a scaler fitted on its training rows
    (its z-scores clipped at +-``params.normalise_clip``)."""
    folds = purged_walk_forward(len(features), params, label_span)
    return [_fitted(features, f, columns, params) for f in folds]


def fold_at(
    features: np.ndarray,
    columns: tuple[str, ...] | list[str],
    params: FoldConfig,
    label_span: int,
    index: int,
) -> FoldData:
    """``make_folds(...)[index]``, fitting that one fold's scaler only (the leak guard's scaler check
    refits one fold of a perturbed copy at a time)."""
    return _fitted(features, purged_walk_forward(len(features), params, label_span)[index], columns, params)


def _fitted(
    features: np.ndarray, fold: Fold, columns: tuple[str, ...] | list[str], params: FoldConfig
) -> FoldData:
    return FoldData(fold, fit_robust(features, fold.train, tuple(columns), clip=params.normalise_clip))


def save_folds(folds: list[FoldData], path: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """Write the folds' boundaries and scalers as JSON (atomically)."""
    return write_json(path, {**(extra or {}), "folds": [f.to_dict() for f in folds]})


def load_scalers(path: str | Path) -> list[RobustScaler]:
    """The stored scalers of a folds file, in fold order."""
    body = json.loads(Path(path).read_text())
    return [RobustScaler.from_dict(f["scaler"]) for f in body["folds"]]


# --- a fold's training periods: collection and selection --------------------------------------


class PeriodSettings(Protocol):
    """The settings that split a fold's training rows into periods (``[train]``'s
    :class:`~foxhunt.train.config.TrainConfig` has them)."""

    selection: Selection
    selection_fraction: float
    selection_rows: int
    steps_per_epoch: int


@dataclass(frozen=True)
class FoldPeriods:
    """A fold's row ranges (end exclusive): where training episodes run and where epochs are judged."""

    selection: Selection
    collect_lo: int  # first row a training episode may start at
    collect_hi: int  # one past the last row a training episode's window may reach
    select_lo: int  # first selection row (== select_hi: no selection period)
    select_hi: int  # one past the last selection row: the fold's last usable training row + 1
    embargo: int  # rows between the collection and the selection period, at least

    @property
    def select_rows(self) -> int:
        return self.select_hi - self.select_lo


def fold_periods(fold: Fold, t: PeriodSettings) -> FoldPeriods:
    """The collection and selection periods of ``fold`` under ``t`` (:mod:`foxhunt.train.selection`: layout).

    Raises :class:`~foxhunt.errors.FoxhuntError` when the collection block is shorter than one
    episode or the selection period shorter than two rows (one backtest step)."""
    lo = int(fold.train_start)
    hi = int(fold.train.max()) + 1 if len(fold.train) else lo  # the rows after it are purged
    where = f"fold {fold.index}"
    if t.selection is Selection.LAST:
        periods = FoldPeriods(t.selection, lo, hi, hi, hi, fold.embargo)
    else:
        rows = round(t.selection_fraction * (hi - lo))
        if t.selection_rows > 0:
            rows = min(rows, t.selection_rows)
        if rows < 2:
            raise FoxhuntError(
                where,
                f"a selection period of {rows} rows ({t.selection_fraction} of {hi - lo} training rows) "
                "is too short to backtest",
                "raise train.selection_fraction or train.selection_rows, or use more data",
            )
        select_lo = hi - rows
        periods = FoldPeriods(t.selection, lo, select_lo - fold.embargo, select_lo, hi, fold.embargo)
    need = t.steps_per_epoch + 2
    if periods.collect_hi - lo < need:
        raise FoxhuntError(
            where,
            f"{max(periods.collect_hi - lo, 0)} training rows are left for collection "
            f"(of {hi - lo}: {periods.select_rows} selection rows and an embargo of {fold.embargo} before "
            f"them), fewer than one episode ({need})",
            "lower train.steps_per_epoch or train.selection_fraction, or use more data",
        )
    return periods
