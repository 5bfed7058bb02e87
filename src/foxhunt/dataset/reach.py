"""How far the labels actually read: the leak guard's purge check measures it (issue 58 item 3).

The folds purge and embargo by a label span that :func:`foxhunt.validation.labels.label_span`
computes; checking the folds with that same number would pass a ``label_span`` that forgets a
label (the barrier horizon, say), and training rows whose outcomes end inside validation would
stay. So the check asks the labels as they are written (the cache's label columns,
:func:`foxhunt.dataset.cache.label_columns`, and the alpha check's targets) instead: row ``t``'s
labels *read* row ``m`` when changing the rows from ``m`` on changes any of them. Three changes of
that tail (:class:`Tail`), each relabelled with the writer itself:

* ``CUT``: the rows from ``m`` on removed (a label reaching them loses its row: no longer valid);
* ``UP`` / ``DOWN``: every price from ``m`` on far above / far below every price of the rows.

A label that reads the tail cannot come out the same under both ``UP`` and ``DOWN``: a direction
label becomes +1 under one and -1 under the other, a LONG barrier outcome decided in the tail is
touched at the tail's first row as PROFIT under one and STOP under the other (an outcome decided
before the tail, honestly, reads none of it and stays). A label that reads nothing past ``m - 1``
is bit-identical under all three: labels are computed from each row forward, and the volatility
scale is trailing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from foxhunt.features.frame import RowInput

Labeller = Callable[[RowInput], Mapping[str, np.ndarray]]  # rows -> label column -> [n] values


class Tail(StrEnum):
    """How the rows from the cut on are changed (module docstring)."""

    CUT = "cut off"
    UP = "far above"
    DOWN = "far below"


# Every price a labeller could read: the row's path and its book (labels read close, high and low today).
_PRICES = ("open", "high", "low", "close", "vwap", "bid_px", "ask_px")


def changed_tail(rows: RowInput, m: int, tail: Tail) -> RowInput:
    """``rows`` with the rows from ``m`` on changed as ``tail`` says (rows before ``m`` untouched)."""
    if tail is Tail.CUT:
        return rows.prefix(m)
    finite = np.abs(rows.close[np.isfinite(rows.close)])
    far = 10.0 * (float(finite.max()) if len(finite) else 1.0) + 1.0
    value = far if tail is Tail.UP else -far
    fields = {}
    for name in _PRICES:
        a = np.array(getattr(rows, name), np.float64)
        a[m:] = value  # rows are the first axis, book levels the second
        fields[name] = a
    return dataclasses.replace(rows, **fields)


def _differs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: not the same value (NaN equals NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    same = a == b
    if a.dtype.kind == "f":
        same |= np.isnan(a) & np.isnan(b)
    return ~same


@dataclass(frozen=True)
class WrittenLabels:
    """The labels a set of rows was given (``labeller(rows)``, as written), and the same labeller on
    those rows with their tail changed: what :func:`reads_from` compares."""

    rows: RowInput
    labeller: Labeller
    columns: Mapping[str, np.ndarray]  # label column -> [n] values as written
    settings: str  # the settings that give the labels their reach, for the report

    @classmethod
    def of(cls, rows: RowInput, labeller: Labeller, settings: str) -> WrittenLabels:
        return cls(rows, labeller, dict(labeller(rows)), settings)

    def reads_from(self, m: int, readers: np.ndarray) -> dict[int, list[str]]:
        """The rows of ``readers`` (all below ``m``) whose written labels change when the rows from ``m``
        on change (any :class:`Tail`): row -> the label columns that changed."""
        readers = np.asarray(readers, np.int64)
        found: dict[int, set[str]] = {}
        if not len(readers) or m >= len(self.rows):
            return {}
        for tail in Tail:
            other = self.labeller(changed_tail(self.rows, m, tail))
            for name, written in self.columns.items():
                moved = readers[_differs(written[readers], np.asarray(other[name])[readers])]
                for t in moved.tolist():
                    found.setdefault(t, set()).add(name)
        return {t: sorted(found[t]) for t in sorted(found)}

    def last_row_read(self, t: int, m: int) -> int:
        """The last row row ``t``'s labels read, given that they read row ``m`` (> t): the largest
        ``j`` such that changing the rows from ``j`` on changes them (galloping, then bisection)."""
        n = len(self.rows)
        lo, step = m, 1  # lo: a row known to be read
        hi = n  # a row known not to be read (there is none past the last)
        while lo + step < hi:
            if self.reads_from(lo + step, np.array([t])):
                lo, step = lo + step, 2 * step
            else:
                hi = lo + step
                break
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.reads_from(mid, np.array([t])) else (lo, mid)
        return lo


def merged(*labellers: Labeller) -> Labeller:
    """One labeller writing every column of ``labellers`` (names are kept; later ones win)."""

    def label(rows: RowInput) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for one in labellers:
            out.update(one(rows))
        return out

    return label
