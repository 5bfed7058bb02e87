"""Front-month selection: a hand-worked table, then the real 2013 ES minute bars."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from foxhunt.data.bars import bar_log_returns, build_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.continuous import choose_front, front_month
from foxhunt.data.ingest import MarketData, load_market
from foxhunt.data.schemas import DataSource, RollRule
from foxhunt.data.sessions import session_open_ns
from tests.factories import make_book, make_trades

S = 10**9

DATES = np.array([1, 2, 3, 4, 5])
IDS = np.array([10, 20])
# Contract 20 overtakes 10 in session 3; session 4 is a quiet day for 20 (must not roll back).
VOL = np.array([[100, 1], [90, 10], [40, 60], [30, 20], [5, 80]])


def test_prior_session_rule_rolls_the_session_after_overtaking() -> None:
    fm = choose_front(DATES, IDS, VOL, RollRule.PRIOR_SESSION_VOLUME)
    assert fm.instrument_id.tolist() == [10, 10, 10, 20, 20]
    assert [(r.trade_date, r.from_instrument, r.to_instrument) for r in fm.rolls] == [(4, 10, 20)]


def test_same_session_rule_rolls_at_overtaking_and_never_back() -> None:
    fm = choose_front(DATES, IDS, VOL, RollRule.SAME_SESSION_VOLUME)
    assert fm.instrument_id.tolist() == [
        10,
        10,
        20,
        20,
        20,
    ]  # session 4: 30 > 20, still no roll back
    assert len(fm.rolls) == 1
    assert fm.front_for(np.array([3, 9])).tolist() == [20, 0]


def test_real_2013_es_minute_bars_roll_from_z3_to_h4(real_data_dir: Path) -> None:
    path = real_data_dir / "cme-es/es-2013-lean.ohlcv-1m.dbn.zst"
    for rule, roll_date in (
        (RollRule.SAME_SESSION_VOLUME, 20131218),
        (RollRule.PRIOR_SESSION_VOLUME, 20131219),
    ):
        cfg = DataConfig(data_source=DataSource.OHLCV, bar_seconds=60, roll_rule=rule)
        md = load_market([path], cfg)
        assert sum(r.records for r in md.files) == 22_246
        assert set(md.ohlcv) == {201312, 201403, 201406, 201409, 201412}
        fm = front_month(md, cfg)
        # ESZ3 (201312) is the front until ESH4 (201403) out-trades it; ESH4 after.
        assert [(r.from_instrument, r.to_instrument, r.trade_date) for r in fm.rolls] == [
            (201312, 201403, roll_date)
        ]
        before = fm.trade_dates < roll_date
        assert np.all(fm.instrument_id[before] == 201312) and np.all(fm.instrument_id[~before] == 201403)
        j3, j4 = list(fm.instruments).index(201312), list(fm.instruments).index(201403)
        first_overtaken = fm.trade_dates[np.argmax(fm.volume[:, j4] > fm.volume[:, j3])]
        assert first_overtaken == 20131218
        bars = build_bars(md, cfg).bars
        # Bars never mix contracts: each bar is the front of its session, one contract per session.
        assert np.all(bars.instrument_id == fm.front_for(bars.trade_date))
        for d in np.unique(bars.trade_date):
            assert len(np.unique(bars.instrument_id[bars.trade_date == d])) == 1
        # Each 1-minute bar equals the front contract's own OHLCV record (no blending).
        z3 = md.ohlcv[201312]
        first = np.flatnonzero(bars.instrument_id == 201312)[0]
        k = np.flatnonzero(z3.ts_event == bars.ts_open[first])[0]
        assert (bars.trade_open[first], bars.trade_close[first], bars.volume[first]) == (
            z3.open[k],
            z3.close[k],
            z3.volume[k],
        )
        # Returns never span the roll: the first ESH4 bar's return is 0, not H4/Z3 - 1.
        r = bar_log_returns(bars, bars.trade_close)
        first_h4 = np.flatnonzero(bars.instrument_id == 201403)[0]
        assert bars.starts_segment()[first_h4] and r[first_h4] == 0.0
        assert np.all(np.abs(r) < 0.02)  # no contract-spread jumps left in the series


def _book_only_two_contracts() -> MarketData:
    """Two sessions of book states without trades. Contract 1 (the lower id) posts the first
    state of each session, then goes quiet; contract 2 updates 20 times a session."""
    opens = [session_open_ns(d, "America/Chicago", DataConfig().session_open) for d in (20260302, 20260303)]
    t1 = np.concatenate([[o + S, o + 3600 * S] for o in opens])
    t2 = np.concatenate([o + np.arange(2, 22) * 60 * S for o in opens])
    books = {
        1: make_book(t1, np.zeros(len(t1)), instrument_id=1),
        2: make_book(t2, np.arange(len(t2)) % 3, instrument_id=2),
    }
    crossed = {i: b.crossed() for i, b in books.items()}
    return MarketData(books=books, crossed=crossed, symbols={1: "ESH6", 2: "ESM6"})


@pytest.mark.parametrize("rule", list(RollRule))
def test_front_month_of_book_only_data_uses_the_whole_session(rule: RollRule) -> None:
    # Before, only each contract's first book timestamp entered the table (volume 0): contract 1,
    # first in time, won the tie, and the second session had no row at all (no bars).
    md = _book_only_two_contracts()
    cfg = DataConfig(roll_rule=rule, bar_seconds=60)
    fm = front_month(md, cfg)
    assert fm.trade_dates.tolist() == [20260302, 20260303]
    assert fm.updates.tolist() == [[2, 20], [2, 20]] and not fm.volume.any()
    assert fm.instrument_id.tolist() == [2, 2] and fm.rolls == ()
    bars = build_bars(md, cfg).bars
    assert np.unique(bars.trade_date).tolist() == [20260302, 20260303]
    assert np.all(bars.instrument_id == 2) and len(bars) == 40


def test_front_month_volume_outranks_updates_and_counts_the_whole_session() -> None:
    # Contract 1 trades first in the session (10 lots) and updates more; contract 2 trades 30 lots
    # later in the same session: 2 is the front month.
    md = _book_only_two_contracts()
    o = session_open_ns(20260302, "America/Chicago", DataConfig().session_open)
    md.trades = {
        1: make_trades([o + 5 * S], [5000.0], [10], "B", instrument_id=1),
        2: make_trades(o + np.array([600, 700, 800]) * S, [5000.0] * 3, [10] * 3, "BAB", instrument_id=2),
    }
    md.books[1] = make_book(o + np.arange(1, 60) * S, np.zeros(59), instrument_id=1)
    fm = front_month(md, DataConfig(roll_rule=RollRule.SAME_SESSION_VOLUME))
    assert fm.volume[0].tolist() == [10, 30] and fm.updates[0].tolist() == [59, 20]
    assert fm.instrument_id[0] == 2


def test_choose_front_breaks_volume_ties_by_book_updates() -> None:
    vol = np.array([[0, 0], [5, 5], [7, 6]])
    upd = np.array([[3, 9], [9, 1], [0, 50]])
    fm = choose_front(np.array([1, 2, 3]), IDS, vol, RollRule.SAME_SESSION_VOLUME, updates=upd)
    # Session 1: no volume, 20 updated more. Session 2: equal volume, 10 updated more (a roll to
    # 10). Session 3: 10 out-trades 20.
    assert fm.instrument_id.tolist() == [20, 10, 10]


def test_prior_session_rule_never_picks_a_contract_absent_from_the_session() -> None:
    # Files months apart: contract 10 in session 1, then only 20 in session 2, only 30 in 3. The
    # previous session's favourite has no data at all in the next one; before, it stayed the front
    # month and those sessions had no bars.
    vol = np.array([[50, 0, 0], [0, 40, 0], [0, 0, 0]])
    upd = np.array([[900, 0, 0], [0, 800, 0], [0, 0, 700]])
    ids = np.array([10, 20, 30])
    fm = choose_front(np.array([1, 2, 3]), ids, vol, RollRule.PRIOR_SESSION_VOLUME, updates=upd)
    assert fm.instrument_id.tolist() == [10, 20, 30]
    rolls = [(r.trade_date, r.from_instrument, r.to_instrument) for r in fm.rolls]
    assert rolls == [(2, 10, 20), (3, 20, 30)]
