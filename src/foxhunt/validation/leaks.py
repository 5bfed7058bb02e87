"""The leak guard: change the future, recompute, and demand that the past did not move (SPEC §5).

For each cut time ``t``: every raw event after ``t`` is perturbed (book prices shifted by a random
walk of whole ticks on both sides, sizes and order counts rescaled, trade prices, sizes and
aggressor sides redrawn; an OHLCV record counts as an event at its *close*, open + interval), the
rows and features are recomputed through the normal pipeline, and every feature row known at or
before ``t`` must be bit-identical to the unperturbed one. A column that changes names a leak.

The old system's forward-window trend feature lifted accuracy from 0.49 to 0.75 (honest: 0.50);
this check catches that class of bug whatever module it hides in, because it tests the output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from foxhunt.config.models import FoxhuntConfig
from foxhunt.data.ingest import MarketData
from foxhunt.errors import FoxhuntError
from foxhunt.features.cache import compute_features
from foxhunt.features.pipeline import rows_from_market
from foxhunt.features.registry import Family

DEFAULT_CUTS = (0.2, 0.45, 0.7, 0.9)


class LeakFoundError(FoxhuntError):
    """Features at or before a cut changed when only the future changed."""

    exit_code = 3


@dataclass
class CutResult:
    t: int  # ns: the cut; events after it were perturbed
    rows_checked: int  # rows known at or before t
    leaking_columns: list[str] = field(default_factory=list)
    first_leaking_row: int | None = None


@dataclass
class LeakReport:
    columns: int
    rows: int
    cuts: list[CutResult]

    @property
    def clean(self) -> bool:
        return all(not c.leaking_columns for c in self.cuts)

    @property
    def leaking_columns(self) -> list[str]:
        return sorted({col for c in self.cuts for col in c.leaking_columns})

    def to_dict(self) -> dict[str, object]:
        return {
            "clean": self.clean,
            "rows": self.rows,
            "columns": self.columns,
            "leaking_columns": self.leaking_columns,
            "cuts": [dataclasses.asdict(c) for c in self.cuts],
        }


def _replace(obj, **changes):
    return dataclasses.replace(obj, **changes)


def perturb_after(md: MarketData, t_cut: int, seed: int = 0) -> MarketData:
    """A copy of ``md`` in which every event after ``t_cut`` is different (and still valid)."""
    rng = np.random.default_rng(seed)
    books, trades, ohlcv = {}, {}, {}
    for iid, book in md.books.items():
        after = book.ts_event > t_cut
        k = int(after.sum())
        if not k:
            books[iid] = book
            continue
        tick = 0.25
        shift = np.zeros(len(book))
        shift[after] = np.cumsum(rng.integers(-3, 4, k)) * tick  # a random walk of whole ticks
        scale = np.ones(len(book), np.int64)
        scale[after] = rng.integers(2, 5, k)
        extra = np.zeros(len(book), np.int64)
        extra[after] = rng.integers(1, 4, k)
        books[iid] = _replace(
            book,
            bid_px=book.bid_px + shift[:, None],
            ask_px=book.ask_px + shift[:, None],
            price=book.price + shift,
            bid_sz=book.bid_sz * scale[:, None],
            ask_sz=book.ask_sz * scale[:, None],
            bid_ct=np.where(book.bid_ct > 0, book.bid_ct + extra[:, None], 0),
            ask_ct=np.where(book.ask_ct > 0, book.ask_ct + extra[:, None], 0),
            size=np.where(after, book.size * 3 + 1, book.size),
        )
    for iid, tr in md.trades.items():
        after = tr.ts_event > t_cut
        k = int(after.sum())
        price, size, side = tr.price.copy(), tr.size.copy(), tr.side.copy()
        price[after] += np.cumsum(rng.integers(-3, 4, k)) * 0.25
        size[after] = rng.integers(1, 50, k)
        side[after] = np.where(rng.random(k) < 0.5, ord("B"), ord("A")).astype(np.uint8)
        trades[iid] = _replace(tr, price=price, size=size, side=side)
    for iid, bars in md.ohlcv.items():
        after = bars.ts_event + md.ohlcv_bar_ns > t_cut  # an OHLCV record is known at its close
        k = int(after.sum())
        up = np.zeros(len(bars))
        up[after] = np.cumsum(rng.integers(-4, 5, k)) * 0.25
        volume = bars.volume.copy()
        volume[after] = rng.integers(1, 5000, k)
        ohlcv[iid] = _replace(
            bars,
            open=bars.open + up,
            high=bars.high + up + np.where(after, 0.5, 0.0),
            low=bars.low + up - np.where(after, 0.5, 0.0),
            close=bars.close + up,
            volume=volume,
        )
    return dataclasses.replace(
        md,
        books=books or md.books,
        trades=trades or md.trades,
        ohlcv=ohlcv or md.ohlcv,
        crossed={iid: b.crossed() for iid, b in books.items()} if books else md.crossed,
    )


def check_leaks(
    md: MarketData,
    cfg: FoxhuntConfig,
    *,
    cuts: Sequence[float] = DEFAULT_CUTS,
    registry: Mapping[str, Family] | None = None,
    seed: int = 0,
) -> LeakReport:
    """Run the future-perturbation check at ``cuts`` (fractions of the row timeline)."""
    inp = rows_from_market(md, cfg.data)
    base = compute_features(inp, cfg, registry)
    n = len(inp)
    results: list[CutResult] = []
    for j, frac in enumerate(cuts):
        row = int(np.clip(round(frac * (n - 1)), 0, n - 1))
        t_cut = int(inp.ts[row])
        other_inp = rows_from_market(perturb_after(md, t_cut, seed=seed + j), cfg.data)
        other = compute_features(other_inp, cfg, registry)
        known = int(np.searchsorted(inp.ts, t_cut, "right"))
        known_other = int(np.searchsorted(other_inp.ts, t_cut, "right"))
        res = CutResult(t=t_cut, rows_checked=known)
        if known_other != known or not np.array_equal(inp.ts[:known], other_inp.ts[:known]):
            res.leaking_columns = ["<rows>"]  # the rows themselves (their count or times) moved
            results.append(res)
            continue
        a, b = base.values[:known], other.values[:known]
        differs = ~((a == b) | (np.isnan(a) & np.isnan(b)))
        bad_cols = np.flatnonzero(differs.any(axis=0))
        res.leaking_columns = [base.columns[c] for c in bad_cols]
        if len(bad_cols):
            res.first_leaking_row = int(np.flatnonzero(differs.any(axis=1))[0])
        results.append(res)
    return LeakReport(columns=base.values.shape[1], rows=n, cuts=results)
