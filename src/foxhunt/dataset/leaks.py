"""The leak guard: change what a row must not see, recompute, and demand that it did not move
(docs/design.md §4).

Three checks, each through the code the commands run, so a leak planted anywhere (a feature
family, a plug-in, the normaliser, the folds) is caught by ``foxhunt check leaks`` and in front of
``alpha``, ``train`` and ``run``, not only by the unit tests:

1. **Features** (:func:`perturb_after`). For each cut time ``t`` every raw event after ``t`` is
   changed: its values (book prices shifted by a random walk of whole ticks on both sides, sizes
   and order counts rescaled, trade prices, sizes and aggressor sides redrawn) and its timing and
   number (:class:`Timing`: cuts alternate between inserting events, a copy of the first event
   after ``t`` and of a share of the others, and deleting them, the first one and a share of the
   others, so the activity right after the cut always changes, in one direction; every event left
   is re-timed within half the gaps to its neighbours, so the order holds and all stay after
   ``t``; OHLCV records, known at their *close*, are inserted into free slots or deleted). The
   rows and features are recomputed through the normal pipeline, and every row known at or before
   ``t`` must be bit-identical: its time, and every feature column. A column that changes names a
   leak: a family that reads the next row's price, size, event count or timing.
2. **Normalisers** (:func:`scaler_leaks`). Per fold, the feature values of every row outside the
   fold's training rows are replaced; the folds and their scalers are rebuilt by
   :func:`foxhunt.validation.folds.make_folds` (the one path of training and the alpha check) and
   the fold's scaler must be bit-identical. A normaliser fitted on more than the training rows
   names the columns whose statistics moved.
3. **Folds** (:func:`purge_problems`). The folds that training and the alpha check build must keep
   every training row's label window out of validation, and every validation row's out of the
   training rows after the block (docs/design.md §4). The windows are measured on the labels as
   written (the cache's label columns: direction labels, the aux heads' targets and the plan's
   barrier outcome; the alpha check's targets), not taken from the label span the folds were built
   with (:mod:`foxhunt.dataset.reach`): the rows from the block's first row on are changed (cut
   off, prices far above, far below), everything relabelled, and every training row before the
   block must keep bit-identical labels; likewise every validation row when the rows from the first
   training row after the block on change. Both gaps must also exceed ``folds.embargo_rows``, and no
   training row may lie inside the block. A violation names the fold, the row, the label it reads
   up to which row, and the settings.

4. **The path to the decision** (:mod:`foxhunt.dataset.decision`). At every cut, the fold
   normaliser's output, the environment's observation and the labels the learner reads (label
   columns, aux targets) of the rows known at the cut must be bit-identical too; a **coverage**
   check makes :func:`foxhunt.dataset.decision.coverage_rows_needed` (459) cut rows, drawn at
   random, at once (features in chunks ending at them, labels on the rows up to them, observations
   with the feature rows after them replaced), so a look-ahead on 1% of the rows shows with
   probability >= 99% (the bound is in the verdict); the input screen, per fold, must not move when
   every row outside the fold's collection rows changes.

A feature fitted over a window that reaches past its row (a trend over rows after ``t``) can lift
direction accuracy from an honest 0.50 to 0.75; the first check catches that class of bug whatever
module it hides in, because it tests the output.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from foxhunt import seeding
from foxhunt.config.models import FoxhuntConfig
from foxhunt.console import SILENT, Reporter
from foxhunt.data.arrays import BookArrays, OhlcvArrays, TradeArrays
from foxhunt.data.ingest import MarketData, expand_paths, load_market
from foxhunt.dataset.cache import compute_features, value_config
from foxhunt.dataset.decision import (
    Coverage,
    DecisionBase,
    coverage_jobs,
    covered,
    decision_base,
    moved_inputs,
    screen_problems,
)
from foxhunt.dataset.prepared import Prepared
from foxhunt.dataset.reach import Labeller, WrittenLabels, merged
from foxhunt.domain.instrument import Instrument, product_instrument
from foxhunt.errors import FoxhuntError, door
from foxhunt.features.fingerprint import file_fingerprint
from foxhunt.features.frame import RowInput
from foxhunt.features.pipeline import rows_from_market
from foxhunt.features.registry import Family
from foxhunt.features.stack import FeatureMatrix
from foxhunt.parallel.idle import idle_cores
from foxhunt.validation.folds import Fold, TooFewRowsError, fold_at, make_folds, with_bar_fix
from foxhunt.validation.labels import label_span

T = TypeVar("T")

DEFAULT_CUTS = (0.2, 0.45, 0.7, 0.9)
EVENT_SHARE = 0.3  # share of the events after a cut that are copied (Timing.INSERT) or deleted (DELETE)
MAX_RETIME_NS = 250_000_000  # re-timing moves an event by at most this (and half the gap to a neighbour)
ROWS_MOVED = "the rows themselves (their number or times before the cut: the row builder reads ahead)"


class Timing(StrEnum):
    """How :func:`perturb_after` changes the events after the cut besides their values."""

    INSERT = "insert"  # copies inserted (the first event's always), then every event re-timed
    DELETE = "delete"  # events deleted (the first one always), then the rest re-timed
    NONE = "none"  # values only: every event keeps its time and place


class LeakFoundError(FoxhuntError):
    """Something a row must not see (the future, validation rows) changed what it holds."""

    exit_code = 3


@dataclass
class CutResult:
    t: int  # ns: the cut; events after it were perturbed
    rows_checked: int  # rows known at or before t
    leaking_columns: list[str] = field(default_factory=list)
    first_leaking_row: int | None = None
    # The decision inputs of the rows known at t that moved (decision.moved_inputs): checked only
    # where the features held, a feature leak moving them all.
    moved_inputs: list[str] = field(default_factory=list)


@dataclass
class LeakReport:
    columns: int
    rows: int
    cuts: list[CutResult]
    # Check 2: columns whose fold normaliser moved when only rows outside the fold's training changed.
    scaler_columns: list[str] = field(default_factory=list)
    scaler_folds: list[int] = field(default_factory=list)
    # Check 3: one line per fold whose purge/embargo is short, naming fold, row and settings.
    fold_problems: list[str] = field(default_factory=list)
    folds_checked: int = 0  # folds whose scalers and purge were checked (0: too few rows for folds)
    fold_note: str = ""  # why the fold checks did not run, if they did not
    # Check 4: the many cut rows (None: not run), the input screen per fold.
    coverage: Coverage | None = None
    screen_problems: list[str] = field(default_factory=list)
    screen_folds: int = 0  # folds whose input screen was checked
    screen_note: str = ""  # why the screen check did not run, if it did not

    @property
    def clean(self) -> bool:
        return not (self.leaking_columns or self.scaler_columns or self.fold_problems or self.screen_problems)

    @property
    def leaking_columns(self) -> list[str]:
        """Feature columns and decision inputs that moved when only the future changed (checks 1, 4)."""
        cols = {col for c in self.cuts for col in (*c.leaking_columns, *c.moved_inputs)}
        return sorted(cols | set(self.coverage.leaking_columns if self.coverage else ()))

    def problems(self) -> list[str]:
        """One line per finding, naming the columns or settings."""
        out = []
        if self.leaking_columns:
            named = [ROWS_MOVED if c == "<rows>" else c for c in self.leaking_columns]
            out.append(f"look-ahead in {', '.join(named)}")
        if self.scaler_columns:
            cols, more = self.scaler_columns[:8], len(self.scaler_columns) - 8
            out.append(
                f"the fold normaliser of fold(s) {', '.join(map(str, self.scaler_folds))} changed when only "
                f"rows outside training changed (fitted beyond the training rows) in {', '.join(cols)}"
                + (f" and {more} more columns" if more > 0 else "")
            )
        out.extend(self.fold_problems)
        out.extend(self.screen_problems)
        return out

    @property
    def verdict(self) -> str:
        """The one line the commands print and the reports carry."""
        if not self.clean:
            return "Leak guard: LEAK: " + "; ".join(self.problems())
        folds = (
            f"fold normalisers fitted on training rows only and every training row more than "
            f"max(label span, folds.embargo_rows) rows from validation (purge and embargo) in "
            f"{self.folds_checked} folds"
            if self.folds_checked
            else f"fold checks not run ({self.fold_note})"
        )
        path = "features" if self.coverage is None else "features, normalised features, observations, labels"
        cover = "" if self.coverage is None else f"; {self.coverage.bound()}"
        screen = (
            f"; the input screen unchanged by the rows outside training in {self.screen_folds} folds"
            if self.screen_folds
            else f"; input screen not checked ({self.screen_note})"
            if self.screen_note
            else ""
        )
        return (
            f"Leak guard: clean: {self.columns} columns x {self.rows:,} rows unchanged before "
            f"{len(self.cuts)} cuts (future prices, sizes, event times and counts perturbed; {path}){cover}; "
            f"{folds}{screen}"
        )

    def summary(self) -> dict[str, Any]:
        """The short form carried by folds.json and metrics.json."""
        return {
            "clean": self.clean,
            "verdict": self.verdict,
            "leaking_columns": self.leaking_columns,
            "problems": self.problems(),
        }

    def to_dict(self) -> dict[str, object]:
        return {
            **self.summary(),
            "rows": self.rows,
            "columns": self.columns,
            "cuts": [dataclasses.asdict(c) for c in self.cuts],
            "scaler_columns": self.scaler_columns,
            "scaler_folds": self.scaler_folds,
            "fold_problems": self.fold_problems,
            "folds_checked": self.folds_checked,
            "fold_note": self.fold_note,
            "coverage": None if self.coverage is None else dataclasses.asdict(self.coverage),
            "screen_problems": self.screen_problems,
            "screen_folds": self.screen_folds,
            "screen_note": self.screen_note,
        }

    def raise_if_leaking(self, where: str, consequence: str) -> None:
        """Raise :class:`LeakFoundError` (exit 3) naming every finding unless clean."""
        if not self.clean:
            raise LeakFoundError(
                where,
                "stopped by the leak guard: " + "; ".join(self.problems()),
                f"fix the named feature columns or settings; {consequence}",
            )


# --- check 1: the future changes, the past must not --------------------------------------------


def _retime(ts: np.ndarray, t_cut: int, rng: np.random.Generator) -> np.ndarray:
    """New times for the sorted events ``ts`` (all > ``t_cut``): each moves by at most half the gap
    to either neighbour (and :data:`MAX_RETIME_NS`), so the order holds and all stay after the cut."""
    prev = np.concatenate([[t_cut], ts[:-1]])
    nxt = np.concatenate([ts[1:], ts[-1:]])
    lo = -np.minimum((ts - prev) // 2, MAX_RETIME_NS)
    hi = np.minimum((nxt - ts) // 2, MAX_RETIME_NS)
    return ts + lo + np.floor(rng.random(len(ts)) * (hi - lo + 1)).astype(np.int64)


def _reshaped_index(ts_tail: np.ndarray, t_cut: int, rng: np.random.Generator, timing: Timing):
    """(index, times): the events after the cut (times ``ts_tail``, sorted) with events copied or
    deleted (:class:`Timing`) as positions into the tail, and the new times of the events kept,
    all re-timed; a copy is inserted at its original's time, right after it."""
    chosen = rng.random(len(ts_tail)) < EVENT_SHARE
    chosen[0] = True  # the first event after the cut: the next row's activity always changes
    if timing is Timing.INSERT:
        index = np.sort(np.concatenate([np.arange(len(ts_tail)), np.flatnonzero(chosen)]), kind="stable")
    else:
        index = np.flatnonzero(~chosen)
    ts = ts_tail[index].astype(np.int64)
    return index, (_retime(ts, t_cut, rng) if len(index) else ts)


def _spliced(
    arrays, start: int, t_cut: int, rng: np.random.Generator, timing: Timing
) -> dict[str, np.ndarray]:
    """Every column of ``arrays`` as a new array: the rows before ``start`` as they are, then the
    tail reshaped by ``timing`` (:func:`_reshaped_index`), for the caller to perturb in place.

    One copy per column: a 600 k-state MBP-10 book is ~300 MB, and taking the tail, replacing its
    columns and concatenating it to the head would copy it three times, most of the guard's
    perturbation time."""
    index = ts = None  # Timing.NONE: every event stays
    if timing is not Timing.NONE:
        index, ts = _reshaped_index(arrays.ts_event[start:], t_cut, rng, timing)
    n = len(arrays) if index is None else start + len(index)
    cols = {}
    for f in dataclasses.fields(arrays):
        col = getattr(arrays, f.name)
        out = np.empty((n, *col.shape[1:]), col.dtype)
        out[:start] = col[:start]
        if index is None:
            out[start:] = col[start:]
        else:  # the indices are in range: "clip" lets take write into ``out`` without a buffer
            np.take(col[start:], index, axis=0, out=out[start:], mode="clip")
        cols[f.name] = out
    if ts is not None:
        if "ts_recv" in cols:
            cols["ts_recv"][start:] += ts - cols["ts_event"][start:]  # the same capture latency
        cols["ts_event"][start:] = ts
    return cols


def _split_at(arrays, t_cut: int, known_until: np.ndarray):
    start = int(np.searchsorted(known_until, t_cut, "right"))  # sorted: the events after are a suffix
    return arrays.take(slice(0, start)), arrays.take(slice(start, None))


def _perturb_book(book: BookArrays, t_cut: int, rng: np.random.Generator, tick: float, timing: Timing):
    start = int(np.searchsorted(book.ts_event, t_cut, "right"))  # sorted: the events after are a suffix
    if start == len(book):
        return book
    cols = _spliced(book, start, t_cut, rng, timing)
    tail = {name: col[start:] for name, col in cols.items()}  # views: changed in place below
    k = len(tail["ts_event"])
    shift = np.cumsum(rng.integers(-3, 4, k)) * tick  # a random walk of whole ticks
    scale = rng.integers(2, 5, k)
    extra = rng.integers(1, 4, k)
    tail["bid_px"] += shift[:, None]
    tail["ask_px"] += shift[:, None]
    tail["price"] += shift
    tail["bid_sz"] *= scale[:, None]
    tail["ask_sz"] *= scale[:, None]
    for name in ("bid_ct", "ask_ct"):  # a populated level gets more orders, an empty one stays empty
        ct = tail[name]
        filled = ct > 0
        np.add(ct, extra[:, None], out=ct, where=filled)
        ct[~filled] = 0
    tail["size"] *= 3
    tail["size"] += 1
    return BookArrays(**cols)


def _perturb_trades(tr: TradeArrays, t_cut: int, rng: np.random.Generator, tick: float, timing: Timing):
    start = int(np.searchsorted(tr.ts_event, t_cut, "right"))
    if start == len(tr):
        return tr
    cols = _spliced(tr, start, t_cut, rng, timing)
    k = len(cols["ts_event"]) - start
    cols["price"][start:] += np.cumsum(rng.integers(-3, 4, k)) * tick
    cols["size"][start:] = rng.integers(1, 50, k)
    cols["side"][start:] = np.where(rng.random(k) < 0.5, ord("B"), ord("A"))
    return TradeArrays(**cols)


def _perturb_ohlcv(
    bars: OhlcvArrays, t_cut: int, bar_ns: int, rng: np.random.Generator, tick: float, timing: Timing
):
    head, tail = _split_at(bars, t_cut, bars.ts_event + bar_ns)  # a record is known at its close
    if not len(tail):
        return bars
    chosen = rng.random(len(tail)) < EVENT_SHARE
    chosen[0] = True
    if timing is Timing.DELETE:
        tail = tail.take(~chosen)
    elif timing is Timing.INSERT:
        # New records one interval after chosen ones, where that slot is free (a record's time is
        # its interval: it cannot move within it).
        slots = tail.ts_event + bar_ns
        free = chosen & ~np.isin(slots, tail.ts_event)
        added = dataclasses.replace(tail.take(free), ts_event=slots[free])
        tail = OhlcvArrays.concat([tail, added])
        tail = tail.take(np.argsort(tail.ts_event, kind="stable"))
    k = len(tail)
    up = np.cumsum(rng.integers(-4, 5, k)) * tick
    tail = dataclasses.replace(
        tail,
        open=tail.open + up,
        high=tail.high + up + 2 * tick,
        low=tail.low + up - 2 * tick,
        close=tail.close + up,
        volume=rng.integers(1, 5000, k).astype(tail.volume.dtype),
    )
    return OhlcvArrays.concat([head, tail])


def perturb_after(
    md: MarketData, t_cut: int, seed: int = 0, *, tick: float = 0.25, timing: Timing = Timing.INSERT
) -> MarketData:
    """A copy of ``md`` in which every event after ``t_cut`` is different (and still valid): its
    values, and its time and number as ``timing`` says (module docstring)."""
    rng = seeding.rng(seed)
    books = {iid: _perturb_book(b, t_cut, rng, tick, timing) for iid, b in md.books.items()}
    trades = {iid: _perturb_trades(t, t_cut, rng, tick, timing) for iid, t in md.trades.items()}
    ohlcv = {iid: _perturb_ohlcv(b, t_cut, md.ohlcv_bar_ns, rng, tick, timing) for iid, b in md.ohlcv.items()}
    return dataclasses.replace(
        md,
        books=books,
        trades=trades,
        ohlcv=ohlcv,
        crossed={iid: b.crossed() for iid, b in books.items()},
    )


def _cut_result(base_ts, base_values, other_ts, other_values, columns, t_cut: int) -> CutResult:
    known = int(np.searchsorted(base_ts, t_cut, "right"))
    known_other = int(np.searchsorted(other_ts, t_cut, "right"))
    res = CutResult(t=t_cut, rows_checked=known)
    if known_other != known or not np.array_equal(base_ts[:known], other_ts[:known]):
        res.leaking_columns = ["<rows>"]  # the rows themselves (their count or times) moved
        return res
    a, b = base_values[:known], other_values[:known]
    differs = ~((a == b) | (np.isnan(a) & np.isnan(b)))
    bad_cols = np.flatnonzero(differs.any(axis=0))
    res.leaking_columns = [columns[c] for c in bad_cols]
    if len(bad_cols):
        res.first_leaking_row = int(np.flatnonzero(differs.any(axis=1))[0])
    return res


# --- check 2: fold normalisers see training rows only --------------------------------------------


def scaler_leaks(
    x: np.ndarray, columns: Sequence[str], cfg: FoxhuntConfig, label_span: int, seed: int = 0
) -> tuple[list[str], list[int], list[Fold]]:
    """(columns, folds) whose scaler from :func:`make_folds` moved when every row outside the fold's
    training rows was replaced, and the folds built on ``x``."""
    base = make_folds(x, tuple(columns), cfg.folds, label_span)
    rng = seeding.rng(seed)
    bad_cols: set[int] = set()
    bad_folds: list[int] = []
    for fd in base:
        outside = np.ones(len(x), bool)
        outside[fd.fold.train] = False
        other = x.copy()
        # Non-zero and far from the data: a fit that reads these rows cannot come out the same.
        other[outside] = (rng.normal(size=(int(outside.sum()), x.shape[1])) * 100.0 + 1e3).astype(x.dtype)
        redone = fold_at(other, tuple(columns), cfg.folds, label_span, fd.fold.index)
        moved = (redone.scaler.median != fd.scaler.median) | (redone.scaler.scale != fd.scaler.scale)
        if not np.array_equal(redone.fold.train, fd.fold.train):
            moved[:] = True  # the folds themselves depend on feature values
        if moved.any():
            bad_folds.append(fd.fold.index)
            bad_cols.update(np.flatnonzero(moved).tolist())
    return [columns[j] for j in sorted(bad_cols)], bad_folds, [fd.fold for fd in base]


# --- check 3: the purge covers the label span and the embargo -------------------------------------


def purge_problems(
    folds: Sequence[Fold], label_span: int, embargo_rows: int, user: str, written: WrittenLabels
) -> list[str]:
    """One line per fold of ``user`` (who builds them, with ``label_span``) whose training rows come
    closer to validation than their labels and the embargo allow (module docstring, check 3); empty
    when all hold.

    The reach of the labels is measured on ``written`` (:mod:`foxhunt.dataset.reach`), never taken
    from ``label_span``, the number under test: no training row before a validation block may have a
    label that reads the block (changing the rows from its first row on leaves every such label
    bit-identical), and no validation row a label that reads the first training row after the block.
    ``folds.embargo_rows`` is a setting, so it is checked as set: more than that many rows on both
    sides of the block."""
    settings = f"label span {label_span} rows, {written.settings}, folds.embargo_rows {embargo_rows}"
    out = []
    for f in folds:
        train = np.asarray(f.train, np.int64)
        vs, ve = f.validation_start, f.validation_end
        inside = train[(train >= vs) & (train < ve)]
        before, after = train[train < vs], train[train >= ve]
        if len(inside):
            out.append(f"{user} fold {f.index}: training row {int(inside[0])} lies in its validation block")
        where = f"{user} fold {f.index}"
        readers = written.reads_from(vs, before)
        if readers:
            t = next(iter(readers))  # the earliest: the one reaching farthest into the block
            last = written.last_row_read(t, vs)
            out.append(
                f"{where}: training row {t} is {vs - t} rows before validation row {vs}, but its "
                f"{', '.join(readers[t])} reads up to row {last}, so its label window [{t}, {last}] is not "
                f"purged ({len(readers)} training rows read the block; {settings})"
            )
        elif len(before) and vs - int(before.max()) <= embargo_rows:
            last = int(before.max())
            out.append(
                f"{where}: training row {last} is {vs - last} rows before validation row {vs}, inside the "
                f"embargo ({settings}: the gap must exceed {embargo_rows} rows)"
            )
        if len(after):
            first = int(after.min())
            readers = written.reads_from(first, np.arange(vs, ve))
            if readers:
                v = next(reversed(readers))  # the last validation row reading it
                out.append(
                    f"{where}: training row {first} is inside the embargo after validation row {ve - 1}: "
                    f"validation row {v}'s {', '.join(readers[v])} reads up to row "
                    f"{written.last_row_read(v, first)} ({settings})"
                )
            elif first - (ve - 1) <= embargo_rows:
                out.append(
                    f"{where}: training row {first} is inside the embargo after validation row {ve - 1} "
                    f"({settings}: the gap must exceed {embargo_rows} rows)"
                )
    return out


def fold_spans(cfg: FoxhuntConfig) -> dict[str, int]:
    """The label span each fold builder uses: training (every label of the cache) and the alpha
    check (its longest direction horizon)."""
    unit = cfg.data.row_unit
    return {
        "training": label_span(cfg.labels.horizons(unit), cfg.env.plan.barrier.horizon),
        "alpha check": max(_alpha_horizons(cfg)),
    }


def fold_users(cfg: FoxhuntConfig, rows: RowInput) -> list[tuple[int, list[str], WrittenLabels]]:
    """``(span, users, written)`` per distinct span of :func:`fold_spans` (users of one span build the
    same folds, checked once) with the labels of ``rows`` those users read (:func:`fold_labels`)."""
    users_by_span: dict[int, list[str]] = {}
    for user, span in fold_spans(cfg).items():
        users_by_span.setdefault(span, []).append(user)
    labels = fold_labels(cfg)
    return [
        (
            span,
            users,
            WrittenLabels.of(
                rows, merged(*(labels[u][0] for u in users)), ", ".join(labels[u][1] for u in users)
            ),
        )
        for span, users in users_by_span.items()
    ]


def _alpha_horizons(cfg: FoxhuntConfig) -> tuple[int, ...]:
    return tuple(cfg.alpha.horizons or cfg.labels.horizons(cfg.data.row_unit))


def fold_labels(cfg: FoxhuntConfig) -> dict[str, tuple[Labeller, str]]:
    """What each fold builder of :func:`fold_spans` trains or scores on, as written, and the settings
    that give it its reach: training the cache's label columns (direction labels, the aux heads'
    targets, and the plan's barrier outcome), the alpha check its direction targets."""
    unit, barrier = cfg.data.row_unit, cfg.env.plan.barrier
    alpha_h = _alpha_horizons(cfg)
    return {
        "training": (
            partial(_cache_labels, cfg=cfg),
            f"labels.{unit.value}_horizons {list(cfg.labels.horizons(unit))}, "
            f"env.plan.barrier.horizon {barrier.horizon}",
        ),
        "alpha check": (partial(_alpha_targets, horizons=alpha_h), f"alpha horizons {list(alpha_h)}"),
    }


def _cache_labels(rows: RowInput, cfg: FoxhuntConfig) -> dict[str, np.ndarray]:
    from foxhunt.dataset.cache import label_columns  # the writer of the cache's label columns

    return label_columns(rows, cfg)


def _alpha_targets(rows: RowInput, horizons: tuple[int, ...]) -> dict[str, np.ndarray]:
    from foxhunt.alpha.check import targets  # the alpha check's own targets

    out = {}
    for k in horizons:
        y, usable = targets(rows.close, rows.segment_start, k)
        out[f"alpha.up_h{k}"], out[f"alpha.up_h{k}.usable"] = y, usable
    return out


# --- the cuts, each in a forked process where the machine has the cores and memory ----------------

# The jobs of the running check_leaks (the cuts and the coverage check, each a call without
# arguments), read by the forked workers: inherited with the fork (the market, the base features, a
# test's planted family), never pickled. Empty outside a parallel check.
_FORKED_JOBS: list[Callable[[], Any]] = []


def _one_cut(
    md: MarketData,
    cfg: FoxhuntConfig,
    registry,
    base_ts,
    base,
    j: int,
    t_cut: int,
    seed: int,
    tick: float | None = None,
    decision: DecisionBase | None = None,
):
    """Check 1 at one cut: the market with everything after ``t_cut`` perturbed, its rows and features
    recomputed through the pipeline (rows in ``tick``, as the base's), compared with the base on the
    rows known at ``t_cut``; where they hold, the decision path's inputs of those rows (check 4)."""
    timing = (Timing.INSERT, Timing.DELETE)[j % 2]  # activity after the cut up, then down
    cut_seed = seeding.cut_seed(seed, j)
    other_md = perturb_after(md, t_cut, seed=cut_seed, tick=cfg.data.tick_size, timing=timing)
    other_inp = rows_from_market(other_md, cfg.data, tick_size=tick)
    other = compute_features(other_inp, cfg, registry)
    res = _cut_result(base_ts, base.values, other_inp.ts, other.values, base.columns, t_cut)
    if decision is not None and not res.leaking_columns:
        res.moved_inputs = moved_inputs(decision, other_inp, other, res.rows_checked)
    return res


def _forked_cut(index: int) -> CutResult | dict[str, int]:
    # Silent: the parent's base computation has already shown any warning the pipeline gives, and
    # a forked child writing to a stream that another of the parent's threads (the progress display)
    # held at the fork could wait forever.
    if "torch" in sys.modules:
        # The decision path's few small tensor ops, in this thread: an intra-op pool the parent
        # started is not in the child (torch runs them inline at one thread).
        sys.modules["torch"].set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _FORKED_JOBS[index]()


def _market_bytes(md: MarketData) -> int:
    parts = [*md.books.values(), *md.trades.values(), *md.ohlcv.values()]
    return sum(getattr(a, f.name).nbytes for a in parts for f in dataclasses.fields(a))


def _available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (None where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cut_workers(md: MarketData, n_cuts: int) -> int:
    """Processes for the cuts: one per cut, at most one per idle core (this one's included: it waits
    for them), and as many as the free memory holds at two copies of the market each (the perturbed
    copy and its rows); 1 (this process) where fork is not the safe default (not Linux) or this
    process may not have children. On busy cores a fork only adds its own cost (its first touches of
    the inherited memory: ~10% more CPU per cut), so a loaded machine checks the cuts here."""
    if sys.platform != "linux" or multiprocessing.current_process().daemon:
        return 1
    workers = min(n_cuts, int(idle_cores()) + 1)
    free = _available_bytes()
    if free is not None:
        workers = min(workers, int(free // max(2 * _market_bytes(md), 1)))
    return max(1, workers)


def _found(result: CutResult | dict[str, int]) -> bool:
    """Whether a job found a leak (a cut's result, or a coverage job's ``{input: row}``)."""
    if isinstance(result, CutResult):
        return bool(result.leaking_columns or result.moved_inputs)
    return bool(result)


def _run_cuts(
    jobs: list[Callable[[], Any]], workers: int, meanwhile: Callable[[], object] | None = None
) -> list[Any]:
    """``[job() for job in jobs]``, in ``workers`` forked processes when more than one;
    ``meanwhile()`` runs in this process while they do; where they run here, after them, and only
    when none leaks (its work would wait for a verdict that refuses the data).

    Forked, not spawned: a worker inherits the market, the base features and every compiled numba
    kernel (the base computation compiled them), where a spawned one would import, compile and be
    sent hundreds of MB. The workers run numpy, pandas and numba only, never torch's thread pools, so
    the fork's usual hazard (a pool's threads lost in the child) does not arise. The pool is made
    before any of its threads start (and before ``meanwhile`` starts any: it may start CUDA and
    compiler workers, which the children then never see), and a cut's error reaches the caller as
    itself. An error in ``meanwhile`` stops the workers and is raised."""
    if workers <= 1 or len(jobs) <= 1:
        results = [job() for job in jobs]
        if meanwhile is not None and not any(map(_found, results)):
            meanwhile()
        return results
    global _FORKED_JOBS
    _FORKED_JOBS = jobs
    try:
        with multiprocessing.get_context("fork").Pool(min(workers, len(jobs))) as pool:
            pending = pool.map_async(_forked_cut, range(len(jobs)), chunksize=1)
            if meanwhile is not None:
                meanwhile()
            return pending.get()
    finally:
        _FORKED_JOBS = []


# --- all three -------------------------------------------------------------------------------------


def check_leaks(
    md: MarketData,
    cfg: FoxhuntConfig,
    *,
    cuts: Sequence[float] = DEFAULT_CUTS,
    registry: Mapping[str, Family] | None = None,
    seed: int = 0,
    workers: int | None = None,
    tick_size: float | None = None,
    base: tuple[RowInput, FeatureMatrix] | None = None,
    meanwhile: Callable[[], object] | None = None,
    instrument: Instrument | None = None,
    coverage_rows: int | None = None,
) -> LeakReport:
    """The four checks (module docstring); feature cuts at ``cuts`` (fractions of the row timeline),
    the coverage check at ``coverage_rows`` cut rows (None: enough for a look-ahead on 1% of the rows
    to show with probability >= 99%: :func:`foxhunt.dataset.decision.coverage_rows_needed`).

    Rows count spreads in ``tick_size`` (None: ``data.tick_size``). ``base``: the unperturbed market's
    rows and features, computed so (from ``md`` in ``tick_size`` with ``registry``) by the caller, who
    keeps them for the feature cache (:func:`guard_prepared`); None computes them here.
    The cuts are independent: ``workers`` processes check them at once (None: :func:`cut_workers`;
    1: in this process), with the same result. ``meanwhile()`` runs in this process while they do
    (:func:`guard_while`). ``instrument``: the data's (None: the built-in ES, a hand-built market's),
    which the environment's market carries."""
    inp, feats = base if base is not None else _base(md, cfg, tick_size, registry)
    n = len(inp)
    # The training folds (too few rows: refused, as below) and the decision path through fold 0's
    # normaliser, built once here and inherited by the forked jobs.
    span = fold_spans(cfg)["training"]
    train_folds = make_folds(feats.values, feats.columns, cfg.folds, span)
    if instrument is None:
        instrument = product_instrument("ES")
    decision = decision_base(inp, feats, cfg, train_folds[0], span, instrument)
    summary, jobs = coverage_jobs(inp, feats, decision, cfg, registry, seed, coverage_rows)
    n_cover = len(jobs)  # first: together the longest
    jobs += [
        partial(
            _one_cut, md, cfg, registry, inp.ts, feats, j,
            int(inp.ts[int(np.clip(round(frac * (n - 1)), 0, n - 1))]), seed, tick_size, decision,
        )
        for j, frac in enumerate(cuts)
    ]  # fmt: skip
    results = _run_cuts(jobs, cut_workers(md, len(jobs)) if workers is None else workers, meanwhile)
    report = LeakReport(
        columns=feats.values.shape[1],
        rows=n,
        cuts=results[n_cover:],
        coverage=covered(summary, results[:n_cover]),
    )
    report.screen_problems, report.screen_folds, report.screen_note = screen_problems(
        decision, train_folds, seed
    )
    for span, users, written in fold_users(cfg, inp):
        user = " and ".join(users)
        try:
            cols, bad_folds, folds = scaler_leaks(feats.values, feats.columns, cfg, span, seed=seed)
        except TooFewRowsError as exc:
            # Too few rows for the training folds: nothing could be trained or backtested on them,
            # and a clean verdict over a handful of rows would only let the next command fail.
            # Refused (one line). Too few for the alpha check's longer horizon only: the training
            # folds were checked; noted in the report, and the alpha check refuses on its own.
            if "training" in users:
                raise with_bar_fix(exc, cfg.data, cfg.train) from None
            report.fold_note = f"too few rows for the {user} folds: {exc.problem}"
            continue
        report.scaler_columns = sorted(set(report.scaler_columns) | set(cols))
        report.scaler_folds = sorted(set(report.scaler_folds) | set(bad_folds))
        report.fold_problems += purge_problems(folds, span, cfg.folds.embargo_rows, user, written)
        report.folds_checked = len(folds)
    return report


def cache_sources(cache: Any, cache_path: str | Path) -> list[Path]:
    """The DBN files a cache was built from, for running the guard in front of a ``--cache`` command;
    refused (exit 2) when they are no longer where they were, or no longer hold what the cache
    recorded (their SHA-256): the guard would otherwise judge other data than the cache's."""
    sources = cache.meta["sources"]
    files = [Path(s["path"]) for s in sources if "path" in s]
    if len(files) != len(sources) or not all(p.is_file() for p in files):
        raise FoxhuntError(
            cache_path,
            "the cache's source files are not where they were, so the leak guard cannot run",
            "pass the DBN files with --data instead",
        )
    for recorded, path in zip(sources, files, strict=True):
        if file_fingerprint(path)["sha256"] != recorded.get("sha256"):
            raise FoxhuntError(
                path,
                f"this source of cache {Path(cache_path).name} has changed since the cache was built "
                "(its SHA-256 differs from the recorded one)",
                "restore the original file, or rebuild the cache from the files as they are now "
                f"({door('foxhunt features build --data ...', 'api.build_features')})",
            )
    return files


def _base(
    md: MarketData, cfg: FoxhuntConfig, tick_size: float | None, registry: Mapping[str, Family] | None = None
) -> tuple[RowInput, FeatureMatrix]:
    inp = rows_from_market(md, cfg.data, tick_size=tick_size)
    return inp, compute_features(inp, cfg, registry)


def check_files(
    files: Sequence[str | Path],
    cfg: FoxhuntConfig,
    progress: Reporter = SILENT,
    meanwhile: Callable[[Prepared], object] | None = None,
) -> tuple[LeakReport, Prepared]:
    """:func:`check_leaks` on DBN files, on the rows a cache of them holds (spreads in the instrument's
    tick, as :func:`foxhunt.dataset.cache.build_cache` counts them), with what it read and computed
    on the unperturbed files; ``meanwhile(prepared)`` runs while the cuts do (:func:`check_leaks`)."""
    from foxhunt.data.instrument import instrument_of_files

    paths = tuple(expand_paths(files))
    instrument = instrument_of_files(paths, cfg.instrument, where="--data")
    tick = instrument.tick_size
    md = load_market(paths, cfg.data, progress)
    inp, feats = _base(md, cfg, tick)
    prepared = Prepared(paths, md, inp, feats, float(tick), value_config(cfg))
    report = check_leaks(
        md,
        cfg,
        tick_size=tick,
        base=(inp, feats),
        instrument=instrument,
        meanwhile=None if meanwhile is None else partial(meanwhile, prepared),
    )
    return report, prepared


def guard_prepared(
    files: Sequence[str | Path], cfg: FoxhuntConfig, where: str, consequence: str, progress: Reporter = SILENT
) -> tuple[LeakReport, Prepared]:
    """The leak guard in front of a command (the report when clean, else :class:`LeakFoundError`), by
    :func:`check_files`, with what it computed kept for the cache."""
    return guard_while(files, cfg, where, consequence, lambda prepared: prepared, progress)


def guard_while(
    files: Sequence[str | Path],
    cfg: FoxhuntConfig,
    where: str,
    consequence: str,
    meanwhile: Callable[[Prepared], T],
    progress: Reporter = SILENT,
) -> tuple[LeakReport, T]:
    """:func:`guard_prepared`, with ``meanwhile(prepared)`` run in this process while the cuts run in
    forked ones; ``(report, what it returned)`` when the data is clean, else :class:`LeakFoundError`
    (whatever ``meanwhile`` built is the caller's to discard). The main job builds the cache and
    compiles training's steps there (:func:`foxhunt.pipeline.run_job`): work that waits for the verdict
    before anything of it is used, done while the slowest part of the guard runs instead of after it."""
    done: list[T] = []
    report, _ = check_files(files, cfg, progress, lambda prepared: done.append(meanwhile(prepared)))
    report.raise_if_leaking(where, consequence)
    return report, done[0]


def guard(
    files: Sequence[str | Path], cfg: FoxhuntConfig, where: str, consequence: str, progress: Reporter = SILENT
) -> LeakReport:
    """The leak guard in front of a command: the report when clean, else :class:`LeakFoundError`."""
    return guard_prepared(files, cfg, where, consequence, progress)[0]
