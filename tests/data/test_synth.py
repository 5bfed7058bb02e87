"""The synthetic ES market: files, determinism, book realism, stylised facts and planted alpha."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from foxhunt.data.arrays import ACTION_TRADE, SIDE_ASK, SIDE_BID, BookArrays
from foxhunt.data.config import SynthConfig
from foxhunt.data.dbn_read import read_dbn
from foxhunt.data.schemas import Schema
from foxhunt.data.synth import (
    F_LAST,
    F_SNAPSHOT,
    MANIFEST_NAME,
    SynthSession,
    alpha_signal,
    level1_imbalance,
    ohlcv_from_trades,
    session_trade_dates,
    session_window_ns,
    simulate_session,
    synth_file_name,
    write_synthetic,
)
from foxhunt.errors import ConfigError

TICK = 0.25
ALL_SCHEMAS = (Schema.MBP_10, Schema.TRADES, Schema.MBO, Schema.OHLCV_1M)
# Friday then Monday: the weekend is skipped and Monday's session opens on the Sunday on which
# US daylight saving time starts (2026-03-08).
SMALL = SynthConfig(seed=7, sessions=2, events_per_session=30_000, start_date=dt.date(2026, 3, 6))


def assert_columns_equal(got: object, want: object) -> None:
    """Every field of two typed containers has the same dtype, shape and values (NaN == NaN)."""
    assert type(got) is type(want)
    for f in dataclasses.fields(want):  # type: ignore[arg-type]
        a, b = getattr(got, f.name), getattr(want, f.name)
        assert a.dtype == b.dtype, f.name
        assert a.shape == b.shape, f.name
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), f.name


def corr_and_se(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Pearson correlation and its heteroskedasticity-robust standard error under r = 0."""
    x = x - x.mean()
    y = y - y.mean()
    norm = np.sqrt((x * x).sum() * (y * y).sum())
    return float((x * y).sum() / norm), float(np.sqrt((x * x * y * y).sum()) / norm)


@pytest.fixture(scope="module")
def sessions() -> list[SynthSession]:
    return [simulate_session(SMALL, i, with_mbo=True) for i in range(SMALL.sessions)]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("synth")
    return out, write_synthetic(SMALL, out, ALL_SCHEMAS)


# --- config and calendar ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"events_per_session": 999},
        {"sessions": 0},
        {"alpha": -0.1},
        {"start_date": "2026-03-07"},  # a Saturday
        {"tick_size": 1e-10},  # not a whole number of DBN price units
        {"depth_orders": (10.0,) * 9},
        {"activity_profile": ((1.0, 1.0),)},  # must start at the open
        {"no_such_key": 1},
    ],
)
def test_config_rejects_bad_values(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        SynthConfig(**bad)  # type: ignore[arg-type]


def test_config_is_frozen_and_parses_iso_dates() -> None:
    cfg = SynthConfig(start_date="2026-03-04")  # type: ignore[arg-type]
    assert cfg.start_date == dt.date(2026, 3, 4)
    with pytest.raises(ValidationError):
        cfg.seed = 3  # type: ignore[misc]


def test_sessions_are_consecutive_weekdays_in_globex_hours() -> None:
    cfg = SynthConfig(start_date=dt.date(2026, 3, 5), sessions=4)  # Thursday
    assert session_trade_dates(cfg) == [
        dt.date(2026, 3, 5),
        dt.date(2026, 3, 6),
        dt.date(2026, 3, 9),
        dt.date(2026, 3, 10),
    ]
    # Friday's session: Thu 17:00 CST (23:00 UTC) to Fri 16:00 CST (22:00 UTC).
    assert session_window_ns(dt.date(2026, 3, 6)) == (
        int(np.datetime64("2026-03-05T23:00", "ns").astype(np.int64)),
        int(np.datetime64("2026-03-06T22:00", "ns").astype(np.int64)),
    )
    # Monday's: Sunday 17:00 CDT (22:00 UTC, after the DST change) to Mon 16:00 CDT (21:00 UTC).
    assert session_window_ns(dt.date(2026, 3, 9)) == (
        int(np.datetime64("2026-03-08T22:00", "ns").astype(np.int64)),
        int(np.datetime64("2026-03-09T21:00", "ns").astype(np.int64)),
    )


# --- records ----------------------------------------------------------------------------------


def test_rows_timestamps_and_flags(sessions: list[SynthSession]) -> None:
    for sess in sessions:
        book = sess.book
        assert len(book) == SMALL.events_per_session
        ts = book.ts_event
        assert np.all(np.diff(ts) >= 0) and np.all(np.diff(book.ts_recv) >= 0)
        assert np.all(book.ts_recv >= ts)
        # inside [17:00 CT, 16:00 CT next day): never in the 16:00-17:00 halt
        assert ts[0] == sess.session_start_ns and ts[-1] < sess.session_end_ns
        assert sess.session_end_ns - sess.session_start_ns == 23 * 3_600_000_000_000
        # events span the session: some in its first and its last hour
        hour = 3_600_000_000_000
        assert np.any(ts > sess.session_end_ns - hour) and np.count_nonzero(ts < ts[0] + hour) > 1
        assert np.all(book.flags & F_LAST)
        assert book.flags[0] & F_SNAPSHOT and not np.any(book.flags[1:] & F_SNAPSHOT)
        assert np.all(np.diff(book.sequence.astype(np.int64)) == 1)
        assert np.all(book.instrument_id == SMALL.instrument_id)
    assert sessions[1].trade_date == dt.date(2026, 3, 9)  # Friday, then Monday


def test_files_read_back_unchanged(sessions: list[SynthSession], written: tuple[Path, list[Path]]) -> None:
    out, paths = written
    assert len(paths) == SMALL.sessions * len(ALL_SCHEMAS)
    for sess in sessions:
        want = {
            Schema.MBP_10: sess.book,
            Schema.TRADES: sess.trades,
            Schema.MBO: sess.mbo,
            Schema.OHLCV_1M: sess.ohlcv_1m(),
        }
        for schema, arrays in want.items():
            path = out / synth_file_name(SMALL, sess.trade_date, schema)
            assert path in paths
            f, got = read_dbn(path, expect=schema)
            assert f.instrument_symbols == {SMALL.instrument_id: SMALL.symbol}
            assert_columns_equal(got, arrays)
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["seed"] == SMALL.seed
    assert SynthConfig.model_validate(manifest["config"]) == SMALL
    first = manifest["sessions"][0]
    assert first["records"]["mbp-10"] == SMALL.events_per_session
    assert first["records"]["trades"] == len(sessions[0].trades)
    assert first["files"]["mbp-10"] == "synth-ESZ6-20260306.mbp-10.dbn.zst"


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    cfg = SynthConfig(seed=3, events_per_session=20_000)
    schemas = (Schema.MBP_10, Schema.TRADES, Schema.MBO)
    a = write_synthetic(cfg, tmp_path / "a", schemas)
    b = write_synthetic(cfg, tmp_path / "b", schemas)
    c = write_synthetic(cfg.model_copy(update={"seed": 4}), tmp_path / "c", schemas)
    for pa, pb, pc in zip(a, b, c, strict=True):
        assert pa.read_bytes() == pb.read_bytes()
        assert pa.read_bytes() != pc.read_bytes()
    assert (tmp_path / "a" / MANIFEST_NAME).read_bytes() == (tmp_path / "b" / MANIFEST_NAME).read_bytes()


def test_mbo_recording_does_not_change_the_market() -> None:
    cfg = SynthConfig(seed=9, events_per_session=5_000)
    with_mbo, without = simulate_session(cfg, 0, with_mbo=True), simulate_session(cfg, 0)
    assert without.mbo is None
    assert_columns_equal(with_mbo.book, without.book)


def test_mbo_rebuilds_the_mbp10_book(sessions: list[SynthSession]) -> None:
    book_mod = pytest.importorskip("foxhunt.data.book", reason="MBO book builder not written yet")
    for sess in sessions:
        assert sess.mbo is not None
        assert np.all(np.diff(np.flatnonzero(sess.mbo.flags & F_LAST)) > 0)
        rebuilt = book_mod.rebuild_book(sess.mbo)
        assert rebuilt.n_unknown_cancels == rebuilt.n_overcancels == rebuilt.n_invalid == 0
        assert_columns_equal(rebuilt.book, sess.book)


def test_unknown_schema_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mbp-1"):
        write_synthetic(SMALL, tmp_path, (Schema.MBP_1,))


# --- book realism -----------------------------------------------------------------------------


def test_book_is_es_like(sessions: list[SynthSession]) -> None:
    for sess in sessions:
        b = sess.book
        assert not b.crossed().any()
        spread = (b.ask_px[:, 0] - b.bid_px[:, 0]) / TICK
        assert np.mean(spread == 1) >= 0.9 and set(np.unique(spread)) <= {1.0, 2.0}
        for px, sz, ct, step in ((b.bid_px, b.bid_sz, b.bid_ct, -1), (b.ask_px, b.ask_sz, b.ask_ct, 1)):
            assert np.all(sz > 0) and np.all(ct > 0) and np.all(sz >= ct)  # 10 levels, >= 1 lot/order
            ticks = px / TICK
            assert np.array_equal(ticks, np.round(ticks))  # on the tick grid
            assert np.all(np.sign(np.diff(px, axis=1)) == step)  # strictly monotone
            assert 5 <= np.median(ct) <= 100  # several to dozens of orders per level
            assert np.median(sz[:, 3:]) >= 100  # hundreds of contracts deeper in the book


def test_trades_hit_the_touch(sessions: list[SynthSession]) -> None:
    for sess in sessions:
        b, t = sess.book, sess.trades
        rows = np.flatnonzero(b.action == ACTION_TRADE)
        assert len(rows) == len(t) > 0 and rows[0] > 0
        assert np.array_equal(t.price, b.price[rows]) and np.array_equal(t.size, b.size[rows])
        assert np.all(t.size > 0)
        buy = t.side == SIDE_BID
        assert np.all(buy | (t.side == SIDE_ASK)) and 0.3 < buy.mean() < 0.7
        before = rows - 1  # the book the aggressor met
        assert np.array_equal(t.price[buy], b.ask_px[before[buy], 0])
        assert np.array_equal(t.price[~buy], b.bid_px[before[~buy], 0])


def test_ohlcv_bars_summarise_the_trades(sessions: list[SynthSession]) -> None:
    t = sessions[0].trades
    bars = ohlcv_from_trades(t)
    minute = 60_000_000_000
    assert np.all(bars.ts_event % minute == 0) and np.all(np.diff(bars.ts_event) > 0)
    assert len(bars) == len(np.unique(t.ts_event // minute))
    assert bars.volume.sum() == t.size.sum()
    assert np.all(bars.high >= np.maximum(bars.open, bars.close))
    assert np.all(bars.low <= np.minimum(bars.open, bars.close))
    assert bars.open[0] == t.price[0] and bars.close[-1] == t.price[-1]


# --- stylised facts ---------------------------------------------------------------------------


def minute_returns(book: BookArrays) -> np.ndarray:
    minute = book.ts_event // 60_000_000_000
    last = np.flatnonzero(np.r_[minute[1:] != minute[:-1], True])
    return np.diff(book.mid()[last])


def test_returns_are_heavy_tailed_and_clustered() -> None:
    cfg = SynthConfig(seed=21, sessions=2, events_per_session=100_000)
    r = np.concatenate([minute_returns(simulate_session(cfg, i).book) for i in range(2)])
    z = r - r.mean()
    kurtosis = (z**4).mean() / (z**2).mean() ** 2
    a = np.abs(r) - np.abs(r).mean()
    acf1 = (a[1:] * a[:-1]).mean() / (a * a).mean()
    assert kurtosis > 4.0  # Gaussian: 3
    assert acf1 > 0.1  # i.i.d. returns: 0 +- 0.03 here


# --- planted alpha ----------------------------------------------------------------------------


def test_alpha_signal_by_hand() -> None:
    base = simulate_session(SynthConfig(events_per_session=1_000), 0).book.take(slice(0, 3))
    sz = np.full((3, 10), 5, np.int64)
    bid, ask = sz.copy(), sz.copy()
    bid[:, 0], ask[:, 0] = [30, 10, 20], [10, 30, 20]
    book = dataclasses.replace(base, bid_sz=bid, ask_sz=ask)
    assert np.allclose(level1_imbalance(book), [0.5, -0.5, 0.0])
    # S_0 = I_0; S_t = S_{t-1} + (I_t - S_{t-1}) / H with H = 4
    assert np.allclose(alpha_signal(book, 4), [0.5, 0.25, 0.1875])


@pytest.fixture(scope="module")
def alpha_runs() -> dict[float, BookArrays]:
    return {
        alpha: simulate_session(SynthConfig(seed=5, events_per_session=200_000, alpha=alpha), 0).book
        for alpha in (0.0, 0.3, 1.0)
    }


def test_imbalance_predicts_moves_only_with_planted_alpha(alpha_runs: dict[float, BookArrays]) -> None:
    h = SynthConfig().alpha_horizon_events
    stats = {}
    for alpha, book in alpha_runs.items():
        s, mid = alpha_signal(book, h), book.mid()
        t = np.arange(0, len(book) - h, h)  # non-overlapping horizons: independent moves
        stats[alpha] = corr_and_se(s[t], mid[t + h] - mid[t])
    c0, se0 = stats[0.0]
    assert abs(c0) < 3 * se0  # no signal: within noise of zero
    c3, se3 = stats[0.3]
    assert c3 > 3 * se3  # planted signal, clearly positive
    assert stats[1.0][0] > c3 + 2 * se3  # and stronger with more alpha


@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_move_direction_follows_the_documented_carrier(
    alpha_runs: dict[float, BookArrays], alpha: float
) -> None:
    """P(mid up at row t | it moves) = 1/2 + alpha * S_{t-1}: the slope of 1{up} on S is alpha."""
    book = alpha_runs[alpha]
    s = alpha_signal(book, SynthConfig().alpha_horizon_events)
    d = np.diff(book.mid())
    moved = np.flatnonzero(d != 0)
    x, y = s[moved], (d[moved] > 0).astype(np.float64)
    xc = x - x.mean()
    slope = (xc * (y - y.mean())).sum() / (xc * xc).sum()
    resid = y - y.mean() - slope * xc
    se = np.sqrt((xc * xc * resid * resid).sum()) / (xc * xc).sum()
    assert abs(slope - alpha) < 4 * se
    assert abs(y.mean() - 0.5 - alpha * x.mean()) < 0.03  # intercept 1/2
