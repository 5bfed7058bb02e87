"""The changed future of the leak guard, value by value: the perturbation builds each column once and
changes the events after the cut in place, so these pin what it must still do (the market it was
given untouched, each value change as documented, each event's capture latency kept)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from foxhunt.data.config import SynthConfig
from foxhunt.data.synth_market import synthetic_market
from foxhunt.dataset.leaks import Timing, perturb_after


@pytest.fixture(scope="module")
def md():
    return synthetic_market(SynthConfig(seed=8, sessions=1, events_per_session=4_000, alpha=0.5))


def _columns(md) -> dict[str, np.ndarray]:
    return {
        f"{kind}.{iid}.{f.name}": getattr(arrays, f.name).copy()
        for kind in ("books", "trades")
        for iid, arrays in getattr(md, kind).items()
        for f in dataclasses.fields(arrays)
    }


@pytest.mark.parametrize("timing", list(Timing))
def test_the_market_given_is_left_as_it_was(md, timing: Timing) -> None:
    before = _columns(md)
    iid = next(iter(md.books))
    t = int(md.books[iid].ts_event[len(md.books[iid]) // 3])
    other = perturb_after(md, t, seed=1, timing=timing)
    after = _columns(md)
    for name, col in before.items():
        assert np.array_equal(after[name], col, equal_nan=col.dtype.kind == "f"), name
    assert other.books[iid].bid_px is not md.books[iid].bid_px


def test_values_after_the_cut_change_as_documented(md) -> None:
    iid = next(iter(md.books))
    book, trades = md.books[iid], md.trades[iid]
    # Empty deepest levels on every other state (the synthetic book is always full): they must stay empty.
    ct = book.bid_ct.copy()
    ct[::2, -1] = 0
    book = dataclasses.replace(book, bid_ct=ct, ask_ct=ct.copy())
    md = dataclasses.replace(md, books={**md.books, iid: book})
    t = int(book.ts_event[len(book) // 2])
    k = int(np.searchsorted(book.ts_event, t, "right"))
    ob = perturb_after(md, t, seed=2, timing=Timing.NONE).books[iid]
    # Sizes rescaled by 2-4 per event, the event size to 3x+1.
    old_sz, new_sz = book.bid_sz[k:], ob.bid_sz[k:]
    filled = old_sz[:, 0] > 0
    ratio = new_sz[filled, 0] // old_sz[filled, 0]
    assert set(np.unique(ratio)) <= {2, 3, 4} and (new_sz[filled, 0] == ratio * old_sz[filled, 0]).all()
    assert np.array_equal(ob.size[k:], book.size[k:] * 3 + 1)
    # Order counts: an empty level stays empty, a populated one gets 1-3 more orders.
    for name in ("bid_ct", "ask_ct"):
        old, new = getattr(book, name)[k:], getattr(ob, name)[k:]
        assert (old == 0).any() and (new[old == 0] == 0).all()
        assert set(np.unique(new[old > 0] - old[old > 0])) <= {1, 2, 3}
    # Prices: both sides and the event price shifted by one whole-tick walk per event.
    shift = ob.bid_px[k:, 0] - book.bid_px[k:, 0]
    both = ~np.isnan(shift)
    assert np.allclose((ob.ask_px[k:, 0] - book.ask_px[k:, 0])[both], shift[both], equal_nan=True)
    assert np.allclose(shift[both] / 0.25, np.round(shift[both] / 0.25)) and np.abs(shift[both]).max() > 0
    # Before the cut, every column as it was.
    for f in dataclasses.fields(book):
        a, b = getattr(book, f.name)[:k], getattr(ob, f.name)[:k]
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), f.name
    tr = perturb_after(md, t, seed=2, timing=Timing.NONE).trades[iid]
    kt = int(np.searchsorted(trades.ts_event, t, "right"))
    assert set(np.unique(tr.side[kt:])) == {ord("A"), ord("B")} and tr.size[kt:].min() >= 1
    assert tr.size[kt:].max() < 50 and np.array_equal(tr.ts_event, trades.ts_event)


@pytest.mark.parametrize("timing", [Timing.INSERT, Timing.DELETE])
def test_each_event_keeps_its_capture_latency_when_retimed(md, timing: Timing) -> None:
    iid = next(iter(md.books))
    book = md.books[iid]
    t = int(book.ts_event[len(book) // 4])
    k = int(np.searchsorted(book.ts_event, t, "right"))
    ob = perturb_after(md, t, seed=4, timing=timing).books[iid]
    latency = ob.ts_recv[k:] - ob.ts_event[k:]
    # Sequences identify the events: a copy or a survivor carries its original's latency.
    original = dict(
        zip(book.sequence[k:].tolist(), (book.ts_recv[k:] - book.ts_event[k:]).tolist(), strict=True)
    )
    assert len(original) == len(book) - k  # sequences are unique in the synthetic market
    assert [original[s] for s in ob.sequence[k:].tolist()] == latency.tolist()
    assert len(np.unique(latency)) > 10  # latencies differ between events: a mix-up would show
    assert len(np.setdiff1d(ob.ts_event[k:], book.ts_event[k:])) > (len(book) - k) // 4  # re-timed
