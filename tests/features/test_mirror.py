"""The long/short mirror of the state (``STATE_MIRROR``) against the features of a mirrored market.

Mirroring the market (prices ``p -> K / p`` with ``K`` the squared median price, so every log return
is negated; bid and ask levels, sizes and counts swapped; buyer and seller volume and each trade's
aggressor swapped) must map
every feature column ``j`` to ``sign[j] * column[source[j]]`` of the original. A slot declared even
that is really odd (or a missing swap) fails here with its name.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from foxhunt.config.models import FoxhuntConfig
from foxhunt.dataset.cache import compute_features
from foxhunt.features.frame import EventInput, RowInput
from foxhunt.features.layout import STATE_LAYOUT, STATE_MIRROR, Mirror, build_layout, build_mirror

# The multiplicative mirror is exact for log returns; features that read prices in ticks (spread,
# book slopes over price distance) see K / p off the tick grid and move by a few thousandths.
TOLERANCE = 0.05


def mirror_rows(inp: RowInput) -> RowInput:
    """The market whose prices move the other way: ``p -> K / p``, sides swapped."""
    k = float(np.nanmedian(inp.close)) ** 2

    def flip(p: np.ndarray) -> np.ndarray:
        return k / p

    def sides(book: RowInput | EventInput) -> dict[str, np.ndarray]:
        return {
            "bid_px": flip(book.ask_px),
            "ask_px": flip(book.bid_px),
            "bid_sz": book.ask_sz,
            "ask_sz": book.bid_sz,
            "bid_ct": book.ask_ct,
            "ask_ct": book.bid_ct,
        }

    events = None
    if inp.events is not None:
        sign = inp.events.trade_sign
        assert sign is not None and np.any(sign != 0), "the fixture's market must hold trade states"
        events = dataclasses.replace(inp.events, **sides(inp.events), trade_sign=-sign)
    return dataclasses.replace(
        inp,
        open=flip(inp.open),
        high=flip(inp.low),
        low=flip(inp.high),
        close=flip(inp.close),
        vwap=flip(inp.vwap),
        buy_volume=inp.sell_volume,
        sell_volume=inp.buy_volume,
        events=events,
        **sides(inp),
    )


def test_state_mirror_matches_the_features_of_a_mirrored_market(bar_rows: RowInput) -> None:
    cfg = FoxhuntConfig()
    original = compute_features(bar_rows, cfg)
    mirrored = compute_features(mirror_rows(bar_rows), cfg)
    cols = list(original.columns)
    a = np.asarray(original.values, dtype=np.float64)
    b = np.asarray(mirrored.values, dtype=np.float64)
    wrong = []
    moving = 0
    for j, name in enumerate(cols):
        i = STATE_LAYOUT.index(name)
        src = STATE_LAYOUT.columns[STATE_MIRROR.source[i]]
        image = STATE_MIRROR.sign[i] * b[:, cols.index(src)]
        err = float(np.max(np.abs(a[:, j] - image)))
        moving += int(np.std(a[:, j]) > 0.1)
        if err > TOLERANCE:
            declared = f"{'-' if STATE_MIRROR.sign[i] < 0 else '+'}{src}"
            wrong.append(f"{name} (declared {declared}): off by {err:.3g}")
    assert not wrong, "mirror declarations contradict the mirrored market:\n" + "\n".join(wrong)
    assert moving > 0.8 * len(cols)  # the check compared real, varying features


def test_a_wrong_declaration_is_caught(bar_rows: RowInput) -> None:
    """The comparison above has teeth: declaring an odd slot even is off by about 2 |x|."""
    cfg = FoxhuntConfig()
    a = compute_features(bar_rows, cfg)
    b = compute_features(mirror_rows(bar_rows), cfg)
    j = list(a.columns).index("ofi.book_pressure")
    assert np.max(np.abs(a.values[:, j] - b.values[:, j])) > 1.0  # as if it were even
    assert np.max(np.abs(a.values[:, j] + b.values[:, j])) < TOLERANCE  # it is odd


def test_state_mirror_is_an_involution_over_every_group() -> None:
    src, sign = np.array(STATE_MIRROR.source), np.array(STATE_MIRROR.sign)
    assert (src[src] == np.arange(len(src))).all()
    assert (sign * sign[src] == 1).all()
    for odd in ("portfolio.position", "plan.direction", "aux.next_return", "aux.p_up"):
        assert sign[STATE_LAYOUT.index(odd)] == -1
    for even in ("portfolio.unrealised_pnl", "plan.active", "plan.distance_to_stop", "market.vol_rv_w20_bps"):
        assert sign[STATE_LAYOUT.index(even)] == 1
    profit, stop = STATE_LAYOUT.index("aux.p_profit"), STATE_LAYOUT.index("aux.p_stop")
    assert src[profit] == stop and src[stop] == profit


def test_build_mirror_refuses_a_pair_that_is_not_an_involution() -> None:
    layout = build_layout("t", [("g", ("a", "b", "c"))], 1)
    m = build_mirror(layout, odd=["g.a", "g.b"], swaps=[("g.a", "g.b")])
    assert m == Mirror(source=(1, 0, 2), sign=(-1.0, -1.0, 1.0))
    with pytest.raises(ValueError, match="both odd or both even"):
        build_mirror(layout, odd=["g.a"], swaps=[("g.a", "g.b")])
    with pytest.raises(ValueError, match="already swapped"):
        build_mirror(layout, odd=[], swaps=[("g.a", "g.b"), ("g.b", "g.c")])
    with pytest.raises(ValueError, match="not in the t layout"):
        build_mirror(layout, odd=["g.z"], swaps=[])
