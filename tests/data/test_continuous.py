"""Front-month selection: a hand-worked table, then the real 2013 ES minute bars."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from foxhunt.config.data import DataConfig
from foxhunt.data.bars import build_bars, log_returns
from foxhunt.data.continuous import choose_front, front_month
from foxhunt.data.ingest import load_market
from foxhunt.data.schemas import DataSource, RollRule

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
        r = log_returns(bars, bars.trade_close)
        first_h4 = np.flatnonzero(bars.instrument_id == 201403)[0]
        assert bars.starts_segment()[first_h4] and r[first_h4] == 0.0
        assert np.all(np.abs(r) < 0.02)  # no contract-spread jumps left in the series
