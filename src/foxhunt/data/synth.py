"""Synthetic ES limit-order-book market: an event simulator that writes genuine DBN files.

The embedded default market of foxhunt (docs/design.md §1). Each session is simulated
independently by a numba event loop (:mod:`.synth_engine`) and written as MBP-10 and trades
(optionally MBO and OHLCV-1m) through :mod:`.dbn_write`, so the real ingest path is always exercised.

Model
-----
State: per side ``s`` a book of 10 visible (+2 reserve) contiguous price levels, each a FIFO
queue of orders (count ``n_{s,i}``, size ``q_{s,i}``); a regime ``r`` in {calm, volatile}; the
alpha signal ``S``. Events arrive in business time with state-dependent (queue-reactive)
intensities, with ``m_{i,r} = depth_orders[i] * depth_mult_r``, ``w_i = level_turnover[i]``,
``mu_r = cancel_rate * cancel_mult_r``, ``nu_r = modify_rate * cancel_mult_r``::

    add, level i of side s:       lambda^A = w_i mu_r m_{i,r} (1 + kappa max(0, 1 - n_{s,i}/m_{i,r}))
    cancel of one order:          lambda^C = w_i mu_r (n_{s,i} - 1)
    modify (order moves a level): lambda^M = nu_r (n_{s,i} - 1)
    market order, per side:       lambda^O = market_rate * market_mult_r    (if q_0 > 1)
    price move:                   lambda^P = move_rate * move_mult_r         (if spread = 1 tick)
    gap fill:                     lambda^G = gap_fill_rate                   (if spread = 2 ticks)

The next event is ``e`` with probability ``lambda_e / Lambda`` after ``dtau ~ Exp(Lambda *
activity_r)``, ``Lambda = sum_e lambda_e``; the queue-reactive add term refills thin queues and
the per-order cancel rate pulls each queue towards ``m_{i,r}`` orders (the depth profile).
Order sizes are ``1 + floor(exp(N(order_size_log_mean, order_size_log_sd)))`` contracts.

Price formation. No add, cancel, modify or market order can empty a level (the last order of a
level is never cancelled; a market order fills at most ``q_0 - 1`` contracts inside the touch
queue). The best prices change only in two exogenous events:

* a **price move** (P): an aggressor sweeps the whole touch level of one side (one trade of
  the level's full size at the touch); the next level becomes the touch. With probability
  ``1 - gap_prob_r`` the aggressor's residual and joining quotes form a fresh level
  (``Poisson(m_0)`` orders) at the swept price, so the mid moves one tick; otherwise the spread
  is left at two ticks and the mid has moved half a tick;
* a **gap fill** (G): one order improves a two-tick spread (mid +-half a tick).

The direction of both is drawn as ``P(up) = clip(1/2 + alpha * S_{t-1}, 0.02, 0.98)``, independently
of everything else. With ``alpha = 0`` the mid is therefore a martingale whose increments are
independent of the book and of past order flow: the queue-reactive mechanism by which a thin
queue depletes and so *predicts* the next move is deliberately absent, and no imbalance measure
predicts future mid moves.

Planted alpha (the documented carrier). Row ``t``'s level-1 book imbalance
``I_t = (bid_sz[t,0] - ask_sz[t,0]) / (bid_sz[t,0] + ask_sz[t,0])`` is smoothed into
``S_t = S_{t-1} + (I_t - S_{t-1}) / H`` (``S_0 = I_0``, ``H = alpha_horizon_events``):
:func:`alpha_signal` recomputes it exactly from :class:`BookArrays`. A move or gap fill in row
``t + 1`` goes up with probability ``1/2 + alpha * S_t``, so ``S_t`` (and ``I_t``, through it)
predicts ``mid[t + h] - mid[t]`` for ``h`` up to about ``H`` rows, with strength ``alpha``
(``E[sign of a move | S] = 2 alpha S``).

With ``signal = trade_flow`` the carrier is instead ``F``, the EMA over the last
``N = flow_horizon_trades`` market orders of their aggressor sign (+1 buy, -1 sell; ``F = 0`` before
the first): ``F <- F + (sign - F) / N`` at each market order, and a move goes up with probability
``clip(1/2 + alpha * F, 0.02, 0.98)``. Market orders pick their side independently of everything, so
``F`` is exogenous; the sweeps that move the price are its outcome and do not enter it
(:func:`trade_flow_signal` recomputes it from the book rows).

With ``signal = momentum`` the carrier is the price's own recent direction: ``M``, the EMA over the
last ``K = momentum_horizon_moves`` changes of the mid of their sign (+1 up, -1 down; ``M = 0`` before
the first), ``M <- M + (sign - M) / K`` after each price move or gap fill (the only events that change
the mid), and the next one goes up with probability ``clip(1/2 + alpha * M, 0.02, 0.98)``. It is
causal by construction (a move is drawn from the changes before it; :func:`momentum_signal`
recomputes ``M`` row for row from the mids) and self-exciting: ``E[next sign | M] = 2 alpha M``, so
``M`` reverts to 0 at ``(1 - 2 alpha) / K`` a change only while ``alpha < 1/2`` (the config refuses
more: a trend would feed itself for ever). Below it, a move of one sign raises the odds of the next,
the mid trends over a few hundred changes and reverts, and the price's variance over long spans grows
by about ``1 / (1 - 2 alpha)^2``. No bar feature counts mid changes as the simulator does; the market
family's trailing momentum (``market.mom_sma_w100``, the reference rule's column) reads it.

Regimes. A two-state Markov chain stepped once per event, switching with probability
``1 / (mean spell in events)``; the volatile state has more events per unit time, more moves,
more two-tick spreads (``gap_prob``), a thinner book, more cancels and market orders. The regime
mixture and the intraday activity profile give heavy-tailed returns (kurtosis > 3) and
volatility clustering (autocorrelated absolute returns).

Clock. Business times ``tau_k`` are rescaled to ``u_k = tau_k / tau_end`` in ``[0, 1)`` and mapped
to wall-clock time through the inverse of the cumulative intraday activity profile, so a
session's ``events_per_session`` rows fill CME Globex hours: trade date ``D`` runs from ``D - 1``
17:00 to ``D`` 16:00 America/Chicago; nothing happens in the 16:00-17:00 halt; sessions run on
consecutive weekdays. Opening prices follow their own random walk across sessions (so any session
can be simulated alone): ``open_i = start_price * exp(sigma * sum_{j<=i} z_j)``,
``sigma = open_gap_ticks * tick_size / start_price``.

Records. One MBP-10 row per event, holding the book *after* it (``F_LAST`` on each row; the first
row is the opening snapshot, also ``F_SNAPSHOT``). A trade's row has action ``T``, the aggressor's
side (``B`` buy, hits the ask), the touch price and the traded size; the trades schema lists
exactly those rows. MBO (optional): ``R`` and the snapshot's adds, then per event its adds ``A``,
cancels ``C`` (always of the order's full size), modifies ``M`` (new price and size; a partial
fill is an ``M`` to the remaining size) and, closing a trade event, the trade ``T`` (order id 0,
aggressor side); ``F_LAST`` marks each event's last record. Rebuilding it with
:func:`foxhunt.data.book.rebuild_book` reproduces the MBP-10 rows field for field.

Determinism. The event loop uses numba's generator seeded from ``SeedSequence([seed, 0,
session_index])``; opening prices (``[seed, 1]``) and capture latencies (``[seed, 2,
session_index]``) use numpy's PCG64. The same config gives the same bytes.
"""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np

from foxhunt import __version__, seeding
from foxhunt.atomic import write_json
from foxhunt.data import synth_engine as eng
from foxhunt.data.arrays import ACTION_TRADE, BookArrays, MboArrays, OhlcvArrays, TradeArrays
from foxhunt.data.config import MANIFEST_NAME, SESSION_HOURS, PlantedSignal, SynthConfig
from foxhunt.data.dbn_read import PRICE_SCALE, UNDEF_PRICE
from foxhunt.data.dbn_write import write_book, write_mbo, write_ohlcv, write_trades
from foxhunt.data.schemas import Schema
from foxhunt.errors import ConfigError
from foxhunt.parallel.resources import usable_cores

EXCHANGE_TZ = ZoneInfo("America/Chicago")
SESSION_OPEN = dt.time(17, 0)  # CT, on the day before the trade date
SESSION_CLOSE = dt.time(16, 0)  # CT, on the trade date
F_LAST = eng.F_LAST
F_SNAPSHOT = eng.F_SNAPSHOT
WRITABLE_SCHEMAS = (Schema.MBP_10, Schema.TRADES, Schema.MBO, Schema.OHLCV_1M)
# Sessions simulated and written at once (each holds its arrays and records, ~1 GB at 1 M events).
MAX_SESSION_THREADS = 8
_MINUTE_NS = 60_000_000_000
# SeedSequence([seed, stream, ...]) keys: one stream per use, so no two ever share a seed.
_STREAM_EVENTS, _STREAM_OPEN_PRICES, _STREAM_LATENCY = 0, 1, 2
_SIGNAL_CODE = {
    PlantedSignal.IMBALANCE: eng.SIGNAL_IMBALANCE,
    PlantedSignal.TRADE_FLOW: eng.SIGNAL_TRADE_FLOW,
    PlantedSignal.MOMENTUM: eng.SIGNAL_MOMENTUM,
}


@dataclass(frozen=True, eq=False)
class SynthSession:
    """One simulated session: what :func:`write_synthetic` writes for it."""

    session_index: int
    trade_date: dt.date
    session_start_ns: int  # 17:00 CT the day before the trade date, ns UTC
    session_end_ns: int  # 16:00 CT on the trade date (exclusive)
    book: BookArrays  # one MBP-10 row per event, state after the event
    trades: TradeArrays  # the trade rows of ``book`` (side = aggressor)
    mbo: MboArrays | None  # order-level records that rebuild ``book`` (None unless asked for)
    regime: np.ndarray  # [n] uint8 per book row: 0 calm, 1 volatile (ground truth, not written)

    def ohlcv_1m(self) -> OhlcvArrays:
        """One-minute bars of this session's trades (see :func:`ohlcv_from_trades`)."""
        return ohlcv_from_trades(self.trades)


# --- calendar ---------------------------------------------------------------------------------


def session_trade_dates(cfg: SynthConfig) -> list[dt.date]:
    """Trade dates of the ``cfg.sessions`` sessions: consecutive weekdays from ``start_date``."""
    dates: list[dt.date] = []
    day = cfg.start_date
    while len(dates) < cfg.sessions:
        if day.weekday() < 5:
            dates.append(day)
        day += dt.timedelta(days=1)
    return dates


def session_window_ns(trade_date: dt.date) -> tuple[int, int]:
    """``(open, close)`` of a Globex session in ns UTC: D-1 17:00 CT to D 16:00 CT."""
    opening = dt.datetime.combine(trade_date - dt.timedelta(days=1), SESSION_OPEN, EXCHANGE_TZ)
    closing = dt.datetime.combine(trade_date, SESSION_CLOSE, EXCHANGE_TZ)
    return _ns(opening), _ns(closing)


def _ns(t: dt.datetime) -> int:
    return int((t - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)) * 1000


# --- simulation -------------------------------------------------------------------------------


def _tick_raw(cfg: SynthConfig) -> int:
    return round(cfg.tick_size * PRICE_SCALE)


def _open_bid_ticks(cfg: SynthConfig, session_index: int) -> int:
    """Best bid (ticks) at a session's open: ``open_i = start * exp(sigma * sum z)``."""
    rng = seeding.rng(seeding.keyed(cfg.seed, _STREAM_OPEN_PRICES))
    sigma = cfg.open_gap_ticks * cfg.tick_size / cfg.start_price
    z = rng.standard_normal(session_index).sum() if session_index else 0.0
    mid = cfg.start_price * float(np.exp(sigma * z))
    return int(np.floor(mid / cfg.tick_size))


def _switch_probabilities(cfg: SynthConfig) -> np.ndarray:
    """Per-event regime switch probabilities from the mean spells (minutes of session time)."""
    spells = np.array([cfg.calm.mean_spell_minutes, cfg.volatile.mean_spell_minutes])
    activity = np.array([cfg.calm.activity, cfg.volatile.activity])
    share = spells / spells.sum()  # stationary time share of each state
    events_per_min = cfg.events_per_session / (SESSION_HOURS * 60.0)
    per_state = events_per_min * activity / float((share * activity).sum())
    return np.minimum(1.0, 1.0 / (spells * per_state))


def _wall_hours(u: np.ndarray, profile: tuple[tuple[float, float], ...]) -> np.ndarray:
    """Inverse cumulative activity: business fraction ``u`` -> hours since the 17:00 CT open."""
    knots = np.array([h for h, _ in profile] + [SESSION_HOURS])
    weights = np.array([w for _, w in profile])
    cum = np.concatenate([[0.0], np.cumsum(weights * np.diff(knots))])
    return np.interp(u, cum / cum[-1], knots)


def model_record(cfg: SynthConfig) -> np.void:
    """The event loop's parameters of ``cfg``: one :data:`foxhunt.data.synth_engine.MODEL` record."""
    table = np.zeros(1, eng.MODEL)
    m = table[0]
    m["depth_orders"] = np.asarray(cfg.depth_orders, np.float64)
    m["level_turnover"] = np.asarray(cfg.level_turnover, np.float64)
    m["size_mu"], m["size_sd"] = cfg.order_size_log_mean, cfg.order_size_log_sd
    m["max_size"] = cfg.max_order_size
    for name in ("cancel_rate", "refill_boost", "modify_rate", "market_rate", "move_rate", "gap_fill_rate"):
        m[name] = getattr(cfg, name)
    for name in ("activity", "move_mult", "gap_prob", "cancel_mult", "market_mult", "depth_mult"):
        m[name] = [float(getattr(r, name)) for r in (cfg.calm, cfg.volatile)]
    m["switch_prob"] = _switch_probabilities(cfg)
    m["alpha"] = cfg.alpha
    m["horizon"] = cfg.alpha_horizon_events
    m["signal_kind"] = _SIGNAL_CODE[cfg.signal]
    m["flow_horizon"] = cfg.flow_horizon_trades
    m["momentum_horizon"] = cfg.momentum_horizon_moves
    return m


def simulate_session(cfg: SynthConfig, session_index: int, *, with_mbo: bool = False) -> SynthSession:
    """Simulate session ``session_index`` (0-based) of ``cfg``; MBO records only if asked for.

    The book, trades and regimes do not depend on ``with_mbo`` (recording MBO draws no random
    numbers).
    """
    if not 0 <= session_index < cfg.sessions:
        raise ValueError(f"session_index {session_index} outside 0..{cfg.sessions - 1}")
    trade_date = session_trade_dates(cfg)[session_index]
    start_ns, end_ns = session_window_ns(trade_date)
    seed32 = int(seeding.keyed(cfg.seed, _STREAM_EVENTS, session_index).generate_state(1)[0])
    tick_raw = _tick_raw(cfg)
    bid0 = _open_bid_ticks(cfg, session_index)
    rows, mbo_table, tau_end = eng.simulate_kernel(
        seed32, int(cfg.events_per_session), bid0, tick_raw, float(PRICE_SCALE), model_record(cfg), with_mbo
    )
    tau, regime = rows[0], rows[1]
    ts_event, ts_recv = _wall_clock(cfg, session_index, tau / tau_end, start_ns, end_ns)
    book = _book_arrays(rows, ts_event, ts_recv, cfg.instrument_id)
    mbo = _mbo_arrays(mbo_table, ts_event, ts_recv, cfg.instrument_id, tick_raw) if with_mbo else None
    return SynthSession(
        session_index=session_index,
        trade_date=trade_date,
        session_start_ns=start_ns,
        session_end_ns=end_ns,
        book=book,
        trades=_trade_rows(book),
        mbo=mbo,
        regime=regime,
    )


def _wall_clock(
    cfg: SynthConfig, session_index: int, u: np.ndarray, start_ns: int, end_ns: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(ts_event, ts_recv)`` of rows at business fractions ``u``: the event times through the
    intraday activity profile (non-decreasing, inside the session), the receive times after an
    exponential capture latency (non-decreasing too)."""
    hours = _wall_hours(u, cfg.activity_profile)
    ts_event = start_ns + np.floor(hours * 3.6e12).astype(np.int64)
    ts_event = np.minimum(np.maximum.accumulate(ts_event), end_ns - 1)
    lat_rng = seeding.rng(seeding.keyed(cfg.seed, _STREAM_LATENCY, session_index))
    latency = np.rint(lat_rng.exponential(cfg.latency_ns, len(u))).astype(np.int64)
    return ts_event, np.maximum.accumulate(ts_event + latency)


def _book_arrays(
    rows: tuple[np.ndarray, ...], ts_event: np.ndarray, ts_recv: np.ndarray, instrument_id: int
) -> BookArrays:
    """The MBP-10 rows of the kernel's per-row arrays (each row an event's last record: F_LAST; the
    opening snapshot also F_SNAPSHOT)."""
    _, _, action, side, price, size, depth, bid_px, ask_px, bid_sz, ask_sz, bid_ct, ask_ct = rows
    n = len(action)
    flags = np.full(n, F_LAST, np.uint8)
    flags[0] |= F_SNAPSHOT
    return BookArrays(
        ts_event=ts_event,
        ts_recv=ts_recv,
        instrument_id=np.full(n, instrument_id, np.uint32),
        action=action,
        side=side,
        flags=flags,
        price=price,
        size=size,
        depth=depth,
        sequence=np.arange(1, n + 1, dtype=np.uint32),
        bid_px=bid_px,
        ask_px=ask_px,
        bid_sz=bid_sz,
        ask_sz=ask_sz,
        bid_ct=bid_ct,
        ask_ct=ask_ct,
    )


def _trade_rows(book: BookArrays) -> TradeArrays:
    """The trade rows of ``book`` as the trades schema lists them (side = aggressor)."""
    rows = np.flatnonzero(book.action == ACTION_TRADE)
    return TradeArrays(
        ts_event=book.ts_event[rows],
        ts_recv=book.ts_recv[rows],
        instrument_id=book.instrument_id[rows],
        price=book.price[rows],
        size=book.size[rows],
        side=book.side[rows],
        flags=book.flags[rows],
        sequence=book.sequence[rows],
    )


def _mbo_arrays(
    table: np.ndarray, ts_event: np.ndarray, ts_recv: np.ndarray, instrument_id: int, tick_raw: int
) -> MboArrays:
    row = table[eng.R_ROW]
    ticks = table[eng.R_PX]
    undefined = ticks == eng.NO_PRICE
    price_raw = np.where(undefined, UNDEF_PRICE, ticks * tick_raw)
    price = price_raw / PRICE_SCALE
    price[undefined] = np.nan
    return MboArrays(
        ts_event=ts_event[row],
        ts_recv=ts_recv[row],
        instrument_id=np.full(len(row), instrument_id, np.uint32),
        order_id=table[eng.R_OID].astype(np.uint64),
        price_raw=price_raw,
        price=price,
        size=table[eng.R_SIZE].copy(),
        action=table[eng.R_ACTION].astype(np.uint8),
        side=table[eng.R_SIDE].astype(np.uint8),
        flags=table[eng.R_FLAGS].astype(np.uint8),
        sequence=(row + 1).astype(np.uint32),
    )


# --- derived series ---------------------------------------------------------------------------


def ohlcv_from_trades(trades: TradeArrays, bar_ns: int = _MINUTE_NS) -> OhlcvArrays:
    """OHLCV bars of trade prices; ``ts_event`` is the bar's open; only bars with trades."""
    ts = trades.ts_event
    start = (ts // bar_ns) * bar_ns
    if len(ts) == 0:
        empty = np.zeros(0, np.float64)
        return OhlcvArrays(
            np.zeros(0, np.int64), np.zeros(0, np.uint32), empty, empty, empty, empty, np.zeros(0, np.int64)
        )
    first = np.flatnonzero(np.r_[True, start[1:] != start[:-1]])
    last = np.r_[first[1:], len(ts)] - 1
    return OhlcvArrays(
        ts_event=start[first],
        instrument_id=trades.instrument_id[first],
        open=trades.price[first],
        high=np.maximum.reduceat(trades.price, first),
        low=np.minimum.reduceat(trades.price, first),
        close=trades.price[last],
        volume=np.add.reduceat(trades.size, first),
    )


def level1_imbalance(book: BookArrays) -> np.ndarray:
    """[n] ``I_t = (bid_sz0 - ask_sz0) / (bid_sz0 + ask_sz0)``; NaN where both are 0."""
    bid = book.bid_sz[:, 0]
    ask = book.ask_sz[:, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        return (bid - ask) / (bid + ask)


def alpha_signal(book: BookArrays, horizon: int) -> np.ndarray:
    """[n] the planted-alpha carrier ``S_t`` (EMA of :func:`level1_imbalance` over ``horizon``).

    Equal, row for row, to the signal the simulator used for the book it generated (pass
    ``cfg.alpha_horizon_events``): the move in row ``t + 1`` goes up with probability
    ``clip(1/2 + alpha * S_t, 0.02, 0.98)``.
    """
    return eng.imbalance_ema(np.ascontiguousarray(level1_imbalance(book)), int(horizon))


def trade_flow_signal(book: BookArrays, horizon: int) -> np.ndarray:
    """[n] the trade_flow carrier ``F_t``: EMA over the market orders up to row ``t`` of their
    aggressor sign (+1 buy, -1 sell), ``F = 0`` before the first.

    Equal, row for row, to the signal the simulator used (pass ``cfg.flow_horizon_trades``). A market
    order is a trade row that leaves the touch prices where they were (a sweep moves them).
    """
    trade = book.action == ACTION_TRADE
    bid, ask = book.bid_px[:, 0], book.ask_px[:, 0]
    same_touch = np.r_[False, (bid[1:] == bid[:-1]) & (ask[1:] == ask[:-1])]
    sign = np.where(book.side == ord("B"), 1.0, -1.0)
    return eng.trade_flow_ema(sign, trade & same_touch, int(horizon))


def momentum_signal(book: BookArrays, horizon: int) -> np.ndarray:
    """[n] the momentum carrier ``M_t``: EMA over the mid's changes up to row ``t`` of their sign (+1
    up, -1 down), ``M = 0`` before the first.

    Equal, row for row, to the signal the simulator used (pass ``cfg.momentum_horizon_moves``): only
    price moves and gap fills change the mid, each by half a tick or a tick.
    """
    return eng.momentum_ema(np.ascontiguousarray(book.mid(), np.float64), int(horizon))


def planted_signal(book: BookArrays, cfg: SynthConfig) -> np.ndarray:
    """[n] the carrier of ``cfg.signal`` that the simulator used for this book (one session's)."""
    if cfg.signal is PlantedSignal.TRADE_FLOW:
        return trade_flow_signal(book, cfg.flow_horizon_trades)
    if cfg.signal is PlantedSignal.MOMENTUM:
        return momentum_signal(book, cfg.momentum_horizon_moves)
    return alpha_signal(book, cfg.alpha_horizon_events)


# --- files ------------------------------------------------------------------------------------


def synth_file_name(cfg: SynthConfig, trade_date: dt.date, schema: Schema) -> str:
    """``synth-{symbol}-{YYYYMMDD}.{schema}.dbn.zst``."""
    return f"synth-{cfg.symbol}-{trade_date:%Y%m%d}.{schema.value}.dbn.zst"


def write_synthetic(
    cfg: SynthConfig,
    out_dir: str | Path,
    schemas: tuple[Schema, ...] = (Schema.MBP_10, Schema.TRADES),
) -> list[Path]:
    """Simulate every session of ``cfg`` and write one DBN file per session and schema.

    Also writes ``synth.json`` (config, seed, files and record counts) into ``out_dir``.
    Returns the DBN paths, session by session in the order of ``schemas``. Every file is
    written atomically; the same config writes the same bytes.
    """
    wanted = tuple(dict.fromkeys(Schema(s) for s in schemas))
    bad = [s.value for s in wanted if s not in WRITABLE_SCHEMAS]
    if bad or not wanted:
        raise ConfigError(
            "schemas",
            f"the synthetic market cannot write {', '.join(bad) or 'an empty schema list'}",
            "choose from " + ", ".join(s.value for s in WRITABLE_SCHEMAS),
        )
    out = Path(out_dir)
    # Sessions are independent (each its own seed stream), so they are simulated and written at once
    # on the cores there are: the event loop (numba, nogil), the records' numpy copies and the zstd
    # compression all run outside the GIL. The files and the manifest are the same bytes in any order.
    workers = min(cfg.sessions, usable_cores(), MAX_SESSION_THREADS)
    with ThreadPoolExecutor(workers) as pool:
        written = list(pool.map(lambda i: _write_session(cfg, i, out, wanted), range(cfg.sessions)))
    paths = [p for files, _ in written for p in files]
    entries = [entry for _, entry in written]
    manifest = {
        "generator": "foxhunt.data.synth",
        "foxhunt_version": __version__,
        "seed": cfg.seed,
        "symbol": cfg.symbol,
        "instrument_id": cfg.instrument_id,
        "alpha": cfg.alpha,
        "signal": cfg.signal.value,
        "alpha_carrier": _CARRIER_TEXT[cfg.signal],
        "schemas": [s.value for s in wanted],
        "config": cfg.model_dump(mode="json"),
        "sessions": entries,
    }
    _write_json(out / MANIFEST_NAME, manifest)
    return paths


def _write_session(
    cfg: SynthConfig, index: int, out: Path, wanted: tuple[Schema, ...]
) -> tuple[list[Path], dict[str, object]]:
    """Simulate session ``index`` and write its DBN files: (their paths in the order of ``wanted``,
    its manifest entry)."""
    symbols = {cfg.instrument_id: cfg.symbol}
    sess = simulate_session(cfg, index, with_mbo=Schema.MBO in wanted)
    counts = {
        Schema.MBP_10: len(sess.book),
        Schema.TRADES: len(sess.trades),
        Schema.MBO: len(sess.mbo) if sess.mbo is not None else 0,
    }
    files: dict[str, str] = {}
    paths: list[Path] = []
    for schema in wanted:
        path = out / synth_file_name(cfg, sess.trade_date, schema)
        if schema is Schema.MBP_10:
            write_book(path, sess.book, symbols=symbols)
        elif schema is Schema.TRADES:
            write_trades(path, sess.trades, symbols=symbols)
        elif schema is Schema.MBO:
            assert sess.mbo is not None
            write_mbo(path, sess.mbo, symbols=symbols)
        else:
            bars = sess.ohlcv_1m()
            counts[Schema.OHLCV_1M] = len(bars)
            write_ohlcv(path, bars, symbols=symbols, schema=Schema.OHLCV_1M)
        files[schema.value] = path.name
        paths.append(path)
    entry = {
        "index": index,
        "trade_date": sess.trade_date.isoformat(),
        "start_ns": sess.session_start_ns,
        "end_ns": sess.session_end_ns,
        "files": files,
        "records": {s.value: c for s, c in counts.items() if s in wanted},
        "volatile_share": float(np.mean(sess.regime)),
    }
    return paths, entry


_CARRIER_TEXT = {
    PlantedSignal.IMBALANCE: "S_t = EMA_H(level-1 imbalance (bid_sz0-ask_sz0)/(bid_sz0+ask_sz0)), "
    "H = alpha_horizon_events; P(up move at t+1) = clip(1/2 + alpha*S_t, 0.02, 0.98)",
    PlantedSignal.TRADE_FLOW: "S_t = EMA_N(aggressor sign of each market order, +1 buy / -1 sell), "
    "N = flow_horizon_trades; P(up move at t+1) = clip(1/2 + alpha*S_t, 0.02, 0.98)",
    PlantedSignal.MOMENTUM: "S_t = EMA_K(sign of each change of the mid, +1 up / -1 down), "
    "K = momentum_horizon_moves; P(up move at t+1) = clip(1/2 + alpha*S_t, 0.02, 0.98)",
}


def _write_json(path: Path, body: dict[str, object]) -> None:
    write_json(path, body, indent=2, sort_keys=True)
