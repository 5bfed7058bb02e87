"""An independent check: scripted backtests recomputed from the raw DBN files, then compared metric by
metric with foxhunt's ``metrics.json``.

The recomputation (everything above ``# --- the foxhunt side``) imports no foxhunt code: it reads the
DBN records with databento's ``DBNStore.to_df`` and re-derives every rule from docs/design.md §5 and §8
and the rules issue 14 fixed, with plain pandas/numpy loops:

* rows: trade dates from the 17:00 America/Chicago session open, the daily halt [16:00, 17:00)
  dropped, one front-month contract per session (the most active contract of the previous session,
  by volume then record count; only forward rolls; ties keep the current one), time bars of
  ``bar_seconds`` counted from the session open; a segment starts at a new session or contract;
* folds: validation blocks ``v_i = v0 + floor(i (n - v0) / k)``, ``v0 = round(min_train_fraction n)``,
  each cut into windows of ``episode_rows`` rows that share their end row with the next window;
* the step: the plan lock, the CVaR factor of the last ``cvar_window`` step returns and the Kelly
  cap after ``kelly_min_trades`` trades, market fills at the touch (bar data: the close +/- half
  the modelled spread, on the tick grid, buys up and sells down, inside the bar's [low, high])
  plus slippage (Immediate: half a tick more), limit orders at the touch or a tick inside that
  fill on a trade-through of a later row, at their price or, where the row gapped through it, at
  the row's near end (neither file has book sizes together with traded volume,
  so the queue-aware fill at the price never applies) and expire after their urgency's patience, fees per
  contract and side, the mark to the next row, plan exits by stop, profit or timeout at the next
  row (a plan's entry reference is the close of the row its fill moved to, so that row's own range
  is not checked: the triple-barrier label's convention), the window's last row closes what is
  open, the capital floor;
* policies: long and short (Full size, market orders, Normal urgency), flat (to no position) and random (every
  branch uniform over the profile's branch sizes; its draws are torch's stream seeded per fold with
  the run's scripted-policy seed, reproduced with torch alone, an input of the backtest rather than
  part of it);
* metrics: every closed trade counted (and its exit reason), win rate -1 without trades,
  per-step returns on the equity before the step, Sharpe and Sortino per bar times sqrt(bars per
  year) with bars per year from the instrument's session calendar (ES: 23 h x 252 days), drawdown
  from the running peak, the picked and realised action shares;
* execution: every trade counted once by the order that opened it (market: the step's urgency; limit:
  the order type and urgency it was placed with) with its size, its opening fills' costs, all its
  costs and its net PnL, by order type, urgency and magnitude; every limit order placed, filled,
  expired, cancelled (replaced, cancelled by a market order or the capital floor) or left resting
  at its window's end, and the fill rate filled / placed; cost per contract = costs / contracts.

The foxhunt side runs the same scripted policies through the backtest API on a feature cache built
from the same file, and every number of ``metrics.json`` (headline and ``all``) must match.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import databento as db
import numpy as np
import pandas as pd
import pytest

NS = 1_000_000_000
SHORT, HOLD, LONG, FLAT = 0, 1, 2, 3
STOP, PROFIT, TIMEOUT, FLOOR, WINDOW_END = "stop", "profit", "timeout", "capital_floor", "window_end"
POLICIES = {"flat": FLAT, "long": LONG, "short": SHORT, "random": -1}  # random: every branch drawn
ES_SESSION_HOURS, ES_TRADING_DAYS = 23.0, 252  # CME Globex ES: 17:00-16:00 CT, 252 sessions a year


# --- rows from the raw DBN ---------------------------------------------------------------------


@dataclass
class Rows:
    """One row per bar of the continuous front-month series."""

    close: np.ndarray  # [R] price path (trade close for OHLCV, mid close for book data)
    high: np.ndarray  # [R]
    low: np.ndarray  # [R]
    bid: np.ndarray  # [R] best bid at the bar's close, NaN for OHLCV
    ask: np.ndarray  # [R]
    segment_start: np.ndarray  # [R] bool


def trade_dates(ts: pd.Series, zone: str, session_open: dt.time) -> np.ndarray:
    """YYYYMMDD of each timestamp's session: the local clock shifted so the open becomes midnight."""
    local = pd.to_datetime(ts, utc=True).dt.tz_convert(zone).dt.tz_localize(None)
    shift = pd.Timedelta(hours=24 - session_open.hour, minutes=-session_open.minute)
    d = local + shift
    return (d.dt.year * 10_000 + d.dt.month * 100 + d.dt.day).to_numpy(np.int64)


def in_halt(ts: pd.Series, zone: str, session_open: dt.time, session_close: dt.time) -> np.ndarray:
    local = pd.to_datetime(ts, utc=True).dt.tz_convert(zone)
    sec = (local.dt.hour * 3600 + local.dt.minute * 60 + local.dt.second).to_numpy()
    lo = session_close.hour * 3600 + session_close.minute * 60
    hi = session_open.hour * 3600 + session_open.minute * 60
    return (sec >= lo) & (sec < hi)


def session_open_utc_ns(date: int, zone: str, session_open: dt.time) -> int:
    day = dt.date(date // 10_000, date // 100 % 100, date % 100) - dt.timedelta(days=1)
    return int(pd.Timestamp(dt.datetime.combine(day, session_open)).tz_localize(zone).tz_convert("UTC").value)


def front_month(activity: pd.DataFrame) -> dict[int, int]:
    """Session -> contract: the previous session's most active contract (volume, then records) among
    the contracts with a record in this session; only forward rolls, ties keep the current one."""
    vol = activity.pivot_table(index="date", columns="iid", values="volume", aggfunc="sum", fill_value=0)
    cnt = activity.pivot_table(index="date", columns="iid", values="records", aggfunc="sum", fill_value=0)
    dates, iids = list(vol.index), list(vol.columns)
    chosen: dict[int, int] = {}
    current, abandoned = None, set()
    for s, date in enumerate(dates):
        cand = [i for i in iids if i not in abandoned and (vol.at[date, i] > 0 or cnt.at[date, i] > 0)]
        ref = dates[s - 1] if s > 0 else date
        if not any(vol.at[ref, i] > 0 or cnt.at[ref, i] > 0 for i in cand):
            ref = date
        rank = {i: (int(vol.at[ref, i]), int(cnt.at[ref, i])) if i in cand else (-1, -1) for i in iids}
        pick = max(iids, key=lambda i: (rank[i], -iids.index(i)))  # the first of equal ranks
        if current is not None and pick != current:
            if rank[current] >= rank[pick]:
                pick = current
            else:
                abandoned.add(current)
        current = pick
        chosen[int(date)] = int(pick)
    return chosen


def continuous(
    df: pd.DataFrame, size_col: str | None, zone: str, s_open: dt.time, s_close: dt.time
) -> pd.DataFrame:
    """The records of each session's front-month contract, in time order, halt dropped."""
    df = df.reset_index()
    df["date"] = trade_dates(df["ts_event"], zone, s_open)
    df["iid"] = df["instrument_id"].astype(np.int64)
    activity = pd.DataFrame(
        {
            "date": df["date"],
            "iid": df["iid"],
            "volume": df[size_col] if size_col else 0,
            "records": 1,
        }
    )
    front = front_month(activity)
    keep = (df["iid"].to_numpy() == df["date"].map(front).to_numpy()) & ~in_halt(
        df["ts_event"], zone, s_open, s_close
    )
    out = df[keep].sort_values("ts_event", kind="stable").reset_index(drop=True)
    out["ts"] = pd.to_datetime(out["ts_event"], utc=True).astype("int64")
    return out


def bars_of(
    recs: pd.DataFrame, bar_seconds: int, zone: str, s_open: dt.time
) -> tuple[np.ndarray, np.ndarray]:
    """(first record, one past the last record) of each time bar: buckets of ``bar_seconds`` counted
    from the session open, in time order (the records are in time order)."""
    opens = {d: session_open_utc_ns(int(d), zone, s_open) for d in recs["date"].unique()}
    bucket = (recs["ts"].to_numpy() - recs["date"].map(opens).to_numpy()) // (bar_seconds * NS)
    key = recs["date"].to_numpy() * 10**9 + bucket
    lo = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    return lo, np.r_[lo[1:], len(key)]


def segments(date: np.ndarray, iid: np.ndarray) -> np.ndarray:
    seg = np.ones(len(date), bool)
    seg[1:] = (date[1:] != date[:-1]) | (iid[1:] != iid[:-1])
    return seg


def ohlcv_rows(path: Path, bar_seconds: int, zone: str, s_open: dt.time, s_close: dt.time) -> Rows:
    recs = continuous(db.DBNStore.from_file(path).to_df(), "volume", zone, s_open, s_close)
    lo, hi = bars_of(recs, bar_seconds, zone, s_open)
    nan = np.full(len(lo), np.nan)
    return Rows(
        close=recs["close"].to_numpy(np.float64)[hi - 1],
        high=np.maximum.reduceat(recs["high"].to_numpy(np.float64), lo),
        low=np.minimum.reduceat(recs["low"].to_numpy(np.float64), lo),
        bid=nan,
        ask=nan.copy(),
        segment_start=segments(recs["date"].to_numpy()[lo], recs["iid"].to_numpy()[lo]),
    )


def mbp10_rows(path: Path, bar_seconds: int, zone: str, s_open: dt.time, s_close: dt.time) -> Rows:
    """Bars of the book states' mid price (NaN where a side is empty): high and low over the bar's
    states, close and touch from its last state."""
    recs = continuous(db.DBNStore.from_file(path).to_df(), None, zone, s_open, s_close)
    bid, ask = recs["bid_px_00"].to_numpy(np.float64), recs["ask_px_00"].to_numpy(np.float64)
    mid = 0.5 * (bid + ask)
    lo, hi = bars_of(recs, bar_seconds, zone, s_open)
    return Rows(
        close=mid[hi - 1],
        high=np.fmax.reduceat(mid, lo),
        low=np.fmin.reduceat(mid, lo),
        bid=bid[hi - 1],
        ask=ask[hi - 1],
        segment_start=segments(recs["date"].to_numpy()[lo], recs["iid"].to_numpy()[lo]),
    )


def trailing_vol(close: np.ndarray, seg: np.ndarray, window: int) -> np.ndarray:
    """Std (ddof 1) of the one-row log returns of the last ``window`` rows of the segment, 0 before
    ``window`` returns exist."""
    ids = np.cumsum(seg)
    r = pd.Series(np.log(close)).diff()
    r[seg] = np.nan
    vol = r.groupby(ids).transform(lambda x: x.rolling(window, min_periods=window).std(ddof=1))
    return np.nan_to_num(vol.to_numpy())


# --- the environment, one window at a time -----------------------------------------------------


@dataclass
class Params:
    tick: float
    point_value: float
    fee: float  # $ per contract per side
    spread_ticks: float
    slip_ticks: float  # per contract beyond the first
    immediate_ticks: float  # extra slippage of an Immediate market order
    patience: tuple[int, ...]  # rows a limit order rests, per urgency
    max_position: int
    capital: float
    floor: float
    horizon: int  # the triple barrier's timeout in rows
    profit_mult: float
    stop_mult: float
    min_vol: float
    vol_window: int
    fractions: tuple[float, ...]
    branch_sizes: tuple[int, int, int, int]  # direction, magnitude, order type, urgency (the config's)
    policy_seeds: tuple[int, ...]  # the random policy's seed per fold (an input, as the config is)
    cvar: dict[str, float]
    kelly: dict[str, float]
    episode_rows: int
    n_folds: int
    min_train_fraction: float
    bars_per_year: float


@dataclass
class Step:
    gross: float = 0.0
    costs: float = 0.0
    position: float = 0.0
    equity: float = 0.0
    contracts: float = 0.0
    picked: tuple[int, ...] = ()  # direction, magnitude, order type, urgency
    realised: int = HOLD
    magnitude: int = 0
    # (net PnL, magnitude, exit reason, order type, urgency, size, entry costs, costs)
    closed: list[tuple[float, int, str, int, int, float, float, float]] = field(default_factory=list)
    limits: dict[str, int] = field(default_factory=dict)  # limit-order events of the step


def market_fill(
    side: float, n: float, r: int, rows: Rows, mid: np.ndarray, p: Params, urgency: int
) -> tuple[float, float]:
    """(price, costs) of a market order of ``n`` contracts on row ``r``."""
    known = np.isfinite(rows.bid[r]) and np.isfinite(rows.ask[r]) and 0 < rows.bid[r] <= rows.ask[r]
    half = 0.5 * p.spread_ticks * p.tick
    bid, ask = (rows.bid[r], rows.ask[r]) if known else (mid[r] - half, mid[r] + half)
    slip = p.slip_ticks * max(n - 1.0, 0.0) + (p.immediate_ticks if urgency == 2 else 0.0)
    price = (ask if side > 0 else bid) + side * slip * p.tick
    if not known:  # modelled: on the tick grid (buy up, sell down), inside the bar's traded range
        ticks = price / p.tick
        price = (math.ceil(ticks - 1e-6) if side > 0 else math.floor(ticks + 1e-6)) * p.tick
        price = min(max(price, rows.low[r]), rows.high[r])
    return price, p.fee * n + side * (price - mid[r]) * n * p.point_value


def cvar_factor(ring: list[float], c: dict[str, float]) -> float:
    n = len(ring)
    if n < c["min_obs"]:
        return 1.0
    k = max(1, math.ceil((1.0 - c["confidence"]) * n - 1e-3))
    tail = -sum(sorted(ring)[:k]) / k
    raw = min(max(c["budget"] / tail, c["floor"]), 1.0) if tail > 0 else 1.0
    return 1.0 - c["weight"] * (1.0 - raw)


def kelly_cap(
    n_trades: int, wins: int, losses: int, sum_win: float, sum_loss: float, equity: float, p: Params
) -> int:
    """Largest magnitude whose fraction the Kelly factor allows (all of them before enough trades)."""
    k = p.kelly
    factor = 1.0
    if n_trades >= k["min_trades"]:
        decided = max(wins + losses, 1)
        pw, q = wins / decided, losses / decided
        avg_win, avg_loss = sum_win / max(wins, 1), sum_loss / max(losses, 1)
        q_over_b = q * avg_loss / avg_win if avg_win > 0 else (2.0 if q > 0 else 0.0)
        f_star = min(max(pw - q_over_b, -1.0), 1.0)
        if avg_loss > 0:
            raw = min(max(k["fraction"] * f_star * equity / avg_loss / p.max_position, k["floor"]), 1.0)
        else:
            raw = 1.0
        factor = 1.0 - k["weight"] * (1.0 - raw)
    return max(sum(f <= factor * (1 + 1e-6) for f in p.fractions) - 1, 0)


MARKET, AT_TOUCH, INSIDE = 0, 1, 2  # order types
NORMAL, PATIENT, IMMEDIATE = 0, 1, 2  # urgencies
Action = tuple[int, int, int, int]  # direction, magnitude, order type, urgency


def limit_price(side: float, order: int, r: int, rows: Rows, mid: np.ndarray, p: Params) -> float:
    """At the touch, or one tick inside when the spread is at least two ticks; a modelled quote (no
    book) is put on the tick grid away from the market (buy down, sell up)."""
    known = np.isfinite(rows.bid[r]) and np.isfinite(rows.ask[r]) and 0 < rows.bid[r] <= rows.ask[r]
    half = 0.5 * p.spread_ticks * p.tick
    bid, ask = (rows.bid[r], rows.ask[r]) if known else (mid[r] - half, mid[r] + half)
    improve = p.tick if order == INSIDE and round((ask - bid) / p.tick) >= 2 else 0.0
    price = bid + improve if side > 0 else ask - improve
    if not known:
        ticks = price / p.tick
        price = (math.floor(ticks + 1e-6) if side > 0 else math.ceil(ticks - 1e-6)) * p.tick
    return price


def run_window(
    start: int, end: int, rows: Rows, mid: np.ndarray, vol: np.ndarray, action: Any, p: Params
) -> list[Step]:
    """One episode over rows start..end; ``action(step)`` gives the policy's picked branches."""
    pos, equity, row = 0.0, p.capital, start
    plan: dict[str, Any] = {"active": False}
    trade: dict[str, Any] = {"pnl": 0.0, "magnitude": 0, "size": 0.0}
    order: dict[str, Any] = {"side": 0.0}  # the resting limit order
    wins = losses = n_trades = 0
    sum_win = sum_loss = 0.0
    ring: list[float] = []
    out: list[Step] = []
    while row < end:
        r, r1 = row, row + 1
        direction, picked_mag, order_type, urgency = action(len(out))
        st = Step(picked=(direction, picked_mag, order_type, urgency))
        st.limits = dict.fromkeys(("placed", "filled", "expired", "cancelled", "open_at_end"), 0)
        cap = kelly_cap(n_trades, wins, losses, sum_win, sum_loss, equity, p)
        mag = min(picked_mag, cap)
        st.realised = HOLD if plan["active"] else direction
        st.magnitude = mag
        eff_max = p.max_position * cvar_factor(ring[-p.cvar["window"] :], p.cvar)
        if st.realised == HOLD:
            target = pos
        else:
            sign = {LONG: 1.0, SHORT: -1.0, FLAT: 0.0}[st.realised]
            target = float(np.round(sign * p.fractions[mag] * eff_max))
        delta = target - pos
        side = float(np.sign(delta))
        is_market = order_type == MARKET or st.realised == FLAT
        costs = 0.0
        if side != 0 and is_market:  # fills now at row r, and cancels a resting order
            price, c = market_fill(side, abs(delta), r, rows, mid, p, urgency)
            costs += c
            st.contracts += abs(delta)
            if pos == 0:
                trade = {"pnl": 0.0, "magnitude": mag, "size": abs(delta), "order": MARKET}
                trade |= {"urgency": urgency, "entry_costs": c, "costs": 0.0}
            trade["pnl"] -= c
            trade["costs"] += c
            st.limits["cancelled"] += order["side"] != 0
            order = {"side": 0.0}
        elif side != 0:  # a new limit order replaces the resting one
            st.limits["cancelled"] += order["side"] != 0
            st.limits["placed"] += 1
            order = {
                "side": side,
                "contracts": abs(delta),
                "price": limit_price(side, order_type, r, rows, mid, p),
                "age": 0,
                "urgency": urgency,
                "magnitude": mag,
                "order_type": order_type,
            }
        pos_a = pos + (delta if side != 0 and is_market else 0.0)
        gross = pos_a * (mid[r1] - mid[r]) * p.point_value
        trade["pnl"] += gross
        pos_b = pos_a
        if order["side"] != 0:  # the resting order against row r+1: a trade-through fills it
            px, tol = order["price"], 8.0 * np.finfo(np.float64).eps * abs(order["price"])
            lo1, hi1 = rows_low(rows, mid, r1), rows_high(rows, mid, r1)
            if (order["side"] > 0 and lo1 < px - tol) or (order["side"] < 0 and hi1 > px + tol):
                n = order["contracts"]
                px = min(max(px, lo1), hi1)  # a row that gapped through the price: its near end
                c = p.fee * n + order["side"] * (px - mid[r1]) * n * p.point_value
                costs += c
                st.contracts += n
                if pos_a == 0:
                    trade = {"pnl": 0.0, "magnitude": order["magnitude"], "size": n}
                    trade |= {"order": order["order_type"], "urgency": order["urgency"], "entry_costs": c}
                    trade["costs"] = 0.0
                trade["pnl"] -= c
                trade["costs"] += c
                pos_b = pos_a + order["side"] * n
                order["filled"] = True
                st.limits["filled"] += 1
            order["age"] += 1
            if order.get("filled") or order["age"] >= p.patience[order["urgency"]]:
                st.limits["expired"] += not order.get("filled")
                order = {"side": 0.0}
        hold_reset = False
        if pos_b != 0 and (pos == 0 or math.copysign(1, pos_b) != math.copysign(1, pos)):
            v = max(vol[r1], p.min_vol)
            d = math.copysign(1.0, pos_b)
            plan = {
                "active": True,
                "dir": d,
                "profit": mid[r1] * (1.0 + d * p.profit_mult * v),
                "stop": mid[r1] * (1.0 - d * p.stop_mult * v),
                "hold": 0,
            }
            hold_reset = True
        if plan["active"] and not hold_reset:
            plan["hold"] += 1
        reason = None
        if plan["active"] and not hold_reset:  # first checked on the row after the entry reference
            d = plan["dir"]
            hi, lo = rows_high(rows, mid, r1), rows_low(rows, mid, r1)
            hit_profit = hi >= plan["profit"] if d > 0 else lo <= plan["profit"]
            hit_stop = lo <= plan["stop"] if d > 0 else hi >= plan["stop"]
            if plan["hold"] >= p.horizon:
                reason = TIMEOUT
            if hit_profit:
                reason = PROFIT
            if hit_stop:
                reason = STOP
        equity_b = equity + gross - costs
        floor = equity_b < p.floor * p.capital
        if floor:
            reason = FLOOR
            st.limits["cancelled"] += order["side"] != 0
            order = {"side": 0.0}
        if reason is None and r1 >= end:
            reason = WINDOW_END
        exit_costs = 0.0
        if reason is not None and pos_b != 0:
            _, exit_costs = market_fill(-math.copysign(1.0, pos_b), abs(pos_b), r1, rows, mid, p, NORMAL)
            st.contracts += abs(pos_b)
            trade["pnl"] -= exit_costs
            trade["costs"] += exit_costs
            entry = (trade["order"], trade["urgency"], trade["size"], trade["entry_costs"], trade["costs"])
            st.closed.append((trade["pnl"], trade["magnitude"], reason, *entry))
            per_contract = trade["pnl"] / trade["size"]
            n_trades += 1
            if trade["pnl"] > 0:
                wins, sum_win = wins + 1, sum_win + per_contract
            elif trade["pnl"] < 0:
                losses, sum_loss = losses + 1, sum_loss - per_contract
            pos_b = 0.0
            plan = {"active": False}
        costs += exit_costs
        net = gross - costs
        ring.append(net / max(equity, 1.0))
        equity = equity_b - exit_costs
        pos = pos_b
        st.gross, st.costs, st.position, st.equity = gross, costs, pos, equity
        out.append(st)
        row += 1
        if floor:
            break
    if out and order["side"] != 0:  # still resting when the window ends
        out[-1].limits["open_at_end"] += 1
    return out


def rows_high(rows: Rows, mid: np.ndarray, r: int) -> float:
    return rows.high[r] if np.isfinite(rows.high[r]) else mid[r]


def rows_low(rows: Rows, mid: np.ndarray, r: int) -> float:
    return rows.low[r] if np.isfinite(rows.low[r]) else mid[r]


def windows(n: int, p: Params) -> list[list[tuple[int, int]]]:
    """Per fold, its validation block's windows as (first row, last row)."""
    v0 = int(round(p.min_train_fraction * n))
    bounds = [v0 + (i * (n - v0)) // p.n_folds for i in range(p.n_folds + 1)]
    return [
        [(s, min(s + p.episode_rows - 1, hi - 1)) for s in range(lo, hi - 1, p.episode_rows - 1)]
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    ]


def random_actions(n_windows: int, n_steps: int, seed: int, sizes: tuple[int, ...]) -> np.ndarray:
    """[steps, windows, 4] uniform branch picks: the policy's own draws. The stream is torch's
    (a seeded torch.Generator, ``floor(u * sizes)`` per step for every window of the fold): an input
    of the backtest, reproduced here with torch alone, no foxhunt code."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    size_t = torch.tensor(sizes)
    draws = [torch.floor(torch.rand(n_windows, len(sizes), generator=gen) * size_t) for _ in range(n_steps)]
    return torch.stack(draws).to(torch.int64).numpy()


def ffill(x: np.ndarray) -> np.ndarray:
    s = pd.Series(x).ffill().bfill()
    return np.nan_to_num(s.to_numpy())


def independent_metrics(rows: Rows, policy: str, p: Params) -> dict[str, float]:
    """The backtest of a scripted policy (long and short: Full size market orders, Normal
    urgency; flat: to no position; random: every branch uniform, fold k's draws seeded
    ``p.policy_seeds[k]``), metrics as docs/design.md §8."""
    mid = ffill(rows.close)
    vol = trailing_vol(mid, rows.segment_start, p.vol_window)
    full = len(p.fractions) - 1
    episodes = []
    for k, fold in enumerate(windows(len(mid), p)):
        if policy == "random":
            acts = random_actions(len(fold), max(e - s for s, e in fold), p.policy_seeds[k], p.branch_sizes)
            pick = [lambda t, a=acts[:, w]: tuple(int(x) for x in a[t]) for w in range(len(fold))]
        else:
            size = 0 if policy == "flat" else full  # flat sizes nothing: it picks the first magnitude
            pick = [lambda t, c=(POLICIES[policy], size, MARKET, NORMAL): c] * len(fold)
        episodes += [run_window(s, e, rows, mid, vol, pick[w], p) for w, (s, e) in enumerate(fold)]
    steps = [st for ep in episodes for st in ep]
    n = len(steps)
    rets, max_dd = [], 0.0
    for ep in episodes:
        eq_before, peak = p.capital, p.capital
        for st in ep:
            rets.append((st.gross - st.costs) / eq_before)
            eq_before = st.equity
            peak = max(peak, st.equity)
            max_dd = max(max_dd, (peak - st.equity) / peak)
    ret = np.array(rets)
    mu = ret.mean()
    sigma = math.sqrt(((ret - mu) ** 2).mean())
    down = math.sqrt((np.minimum(ret, 0.0) ** 2).mean())
    sharpe = mu / sigma if sigma > 1e-10 * abs(mu) else 0.0
    sortino = mu / down if down > 1e-10 * abs(mu) else 0.0
    pnl = np.array([t[0] for st in steps for t in st.closed])
    mags = [t[1] for st in steps for t in st.closed]
    n_mag = len(p.fractions)
    trades_m = [sum(m == k for m in mags) for k in range(n_mag)]
    wins_m = [sum(1 for x, m in zip(pnl, mags, strict=True) if m == k and x > 0) for k in range(n_mag)]
    contracts = sum(st.contracts for st in steps)
    sizes = dict(zip(("direction", "magnitude", "order_type", "urgency"), p.branch_sizes, strict=True))
    picked = {
        b: np.bincount([st.picked[i] for st in steps], minlength=k) / n
        for i, (b, k) in enumerate(sizes.items())
    }
    realised = {
        "direction": np.bincount([st.realised for st in steps], minlength=4) / n,
        "magnitude": np.bincount([st.magnitude for st in steps], minlength=n_mag) / n,
    }
    dist = picked["direction"][picked["direction"] > 0]
    reasons = [t[2] for st in steps for t in st.closed]
    execution = independent_execution(steps, p)
    annual = mu * p.bars_per_year
    return {
        "steps": n,
        "episodes": len(episodes),
        "net_pnl": sum(st.gross - st.costs for st in steps),
        "gross_pnl": sum(st.gross for st in steps),
        "costs": sum(st.costs for st in steps),
        "trades": len(pnl),
        "win_rate": float((pnl > 0).mean()) if len(pnl) else -1.0,
        "win_rate_by_magnitude": [wins_m[k] / trades_m[k] if trades_m[k] else -1.0 for k in range(n_mag)],
        "trades_by_magnitude": trades_m,
        "avg_trade_pnl": float(pnl.mean()) if len(pnl) else 0.0,
        "trade_pnl_std": float(pnl.std()) if len(pnl) else 0.0,
        "mean_return_per_bar": mu,
        "sharpe_per_bar": sharpe,
        "sharpe_annual": sharpe * math.sqrt(p.bars_per_year),
        "sortino_annual": sortino * math.sqrt(p.bars_per_year),
        "bars_per_year": p.bars_per_year,
        "annual_return": annual,
        "max_drawdown": max_dd,
        "calmar": annual / max_dd if max_dd > 0 else 0.0,
        "active_frac": sum(st.position != 0 for st in steps) / n,
        "direction_entropy": float(-(dist * np.log(dist)).sum()),
        "contracts_traded": contracts,
        "turnover": contracts / n,
        "exposure": sum(abs(st.position) for st in steps) / n,
        "picked": {b: v.tolist() for b, v in picked.items()},
        "realised": {b: v.tolist() for b, v in realised.items()},
        "exit_reasons": {r: reasons.count(r) for r in (PROFIT, STOP, TIMEOUT, FLOOR, WINDOW_END)},
        "execution": execution,
    }


def independent_execution(steps: list[Step], p: Params) -> dict[str, Any]:
    """The execution block: trades by the order that opened them, limit orders, cost per contract."""
    trades = [t for st in steps for t in st.closed]
    contracts = sum(st.contracts for st in steps)
    costs = sum(st.costs for st in steps)
    limits = {k: sum(st.limits[k] for st in steps) for k in steps[0].limits}
    fill_rate = limits["filled"] / limits["placed"] if limits["placed"] else None  # of every order placed
    labels = {  # the column of the closed-trade tuple, the branch's value names
        "order_type": (3, ("Market", "Limit_At_Touch", "Limit_Inside")[: p.branch_sizes[2]]),
        "urgency": (4, ("Normal", "Patient", "Immediate")[: p.branch_sizes[3]]),
        "magnitude": (1, tuple(f"{f:g}x" for f in p.fractions)),
    }
    out: dict[str, Any] = {
        "entries": len(trades),
        "contracts": contracts,
        "costs": costs,
        "cost_per_contract": costs / contracts if contracts else 0.0,
        "net_pnl": sum(t[0] for t in trades),
        "limit_orders": limits | {"fill_rate": fill_rate},
    }
    for branch, (col, names) in labels.items():
        rows = {}
        for k, name in enumerate(names):
            mine = [t for t in trades if t[col] == k]
            size, entry = sum(t[5] for t in mine), sum(t[6] for t in mine)
            rows[name] = {
                "entries": len(mine),
                "share": len(mine) / len(trades) if trades else 0.0,
                "contracts": size,
                "entry_costs": entry,
                "entry_cost_per_contract": entry / size if size else 0.0,
                "costs": sum(t[7] for t in mine),
                "net_pnl": sum(t[0] for t in mine),
            }
        out[f"by_{branch}"] = rows
    return out


# --- the foxhunt side --------------------------------------------------------------------------



def _params(cfg: Any, bar_seconds: int) -> Params:
    from foxhunt.seeding import Stream, stream_seed

    e = cfg.env
    b = e.branches
    return Params(
        tick=0.25,  # ES (CME contract specs); the file's instrument definitions say the same
        point_value=50.0,
        fee=e.costs.commission_per_contract + e.costs.exchange_fee_per_contract,
        spread_ticks=e.costs.spread_model_ticks,
        slip_ticks=e.costs.slippage_ticks_per_contract,
        immediate_ticks=e.costs.immediate_slippage_ticks,
        patience=tuple(e.costs.patience_bars),
        max_position=e.contract.max_position,
        capital=e.contract.initial_capital,
        floor=e.contract.capital_floor,
        horizon=e.plan.barrier.horizon,
        profit_mult=e.plan.barrier.profit_mult,
        stop_mult=e.plan.barrier.stop_mult,
        min_vol=e.plan.min_vol,
        vol_window=e.plan.barrier.vol_window,
        fractions=tuple(e.branches.magnitude_fractions),
        # The profile's branch sizes (the smoke profile trades market orders at Normal urgency only):
        # the random policy draws each branch over these, as the backtest's does.
        branch_sizes=(b.direction, b.magnitude, b.order_type, b.urgency),
        # The run seed's scripted-policy stream per fold: which draws the backtest makes is an input.
        policy_seeds=tuple(
            stream_seed(cfg.run.seed, Stream.SCRIPTED_POLICY, k) for k in range(cfg.folds.n_folds)
        ),
        cvar={
            "window": e.sizing.cvar_window,
            "min_obs": e.sizing.cvar_min_obs,
            "confidence": e.sizing.cvar_confidence,
            "budget": e.sizing.cvar_budget,
            "floor": e.sizing.cvar_floor,
            "weight": e.sizing.cvar_weight,
        },
        kelly={
            "min_trades": e.sizing.kelly_min_trades,
            "fraction": e.sizing.kelly_fraction,
            "floor": e.sizing.kelly_floor,
            "weight": e.sizing.kelly_weight,
        },
        episode_rows=e.episode_rows,
        n_folds=cfg.folds.n_folds,
        min_train_fraction=cfg.folds.min_train_fraction,
        bars_per_year=ES_SESSION_HOURS * 3600 * ES_TRADING_DAYS / bar_seconds,
    )


FULL_BRANCHES = (
    "env.branches.magnitude=3",
    "env.branches.magnitude_fractions=[0.25, 0.5, 1.0]",
    "env.branches.order_type=3",
    "env.branches.urgency=3",
)


def _foxhunt(data: Path, overrides: list[str], tmp: Path) -> tuple[Any, dict[str, dict[str, Any]]]:
    from foxhunt.backtest.evaluate import ScriptedPolicy
    from foxhunt.backtest.run import run_backtest
    from foxhunt.backtest.settings import BacktestSettings
    from foxhunt.config.loader import load_config
    from foxhunt.dataset.build import get_or_build

    cfg = load_config(None, overrides=overrides)
    cache = get_or_build([data], cfg, tmp / "cache")
    out = {}
    for name in POLICIES:
        run_backtest(cache, BacktestSettings.of(cfg), ScriptedPolicy(name), tmp / name)
        out[name] = json.loads((tmp / name / "metrics.json").read_text())
    return cfg, out


def _compare(name: str, fox: dict[str, Any], ind: dict[str, Any]) -> list[str]:
    bad = []
    for key, want in ind.items():
        got = _value(fox, key)
        if key == "execution":
            ok = _close(got, want)
        elif isinstance(want, dict):  # exit reasons, picked and realised shares per branch
            ok = all(
                np.allclose(got[k], v, rtol=1e-9, atol=1e-12) for k, v in want.items()
            ) and all(got[k] == 0 for k in set(got) - set(want))
        elif isinstance(want, list):
            ok = len(got) == len(want) and all(
                math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-9) for g, w in zip(got, want, strict=True)
            )
        else:
            ok = math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=1e-9)
        if not ok:
            bad.append(f"{name} {key}: foxhunt {got} independent {want}")
    for key in ("net_pnl", "gross_pnl", "costs", "trades", "win_rate", "sharpe_annual", "max_drawdown"):
        assert fox[key] == fox["all"][key], (name, key)  # the headline is the "all" value
    return bad


def _close(got: Any, want: Any) -> bool:
    """Nested dicts of numbers equal to 1e-9 (None only where None is wanted)."""
    if isinstance(want, dict):
        same = isinstance(got, dict) and got.keys() == want.keys()
        return same and all(_close(got[k], want[k]) for k in want)
    if want is None or got is None:
        return got is want
    return math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=1e-9)


def _value(fox: dict[str, Any], key: str) -> Any:
    """A metric of ``metrics.json``: the exit reasons are a headline field, the rest live in ``all``."""
    return fox[key] if key == "exit_reasons" else fox["all"][key]


def _table(file: str, fox: dict[str, dict[str, Any]], ind: dict[str, dict[str, Any]]) -> str:
    lines = [f"{file}: metric | policy | foxhunt | independent"]
    for name in fox:
        for key, want in ind[name].items():
            lines.append(f"  {key} | {name} | {_value(fox[name], key)} | {want}")
    return "\n".join(lines)


@pytest.mark.slow
def test_es_ohlcv_minute_bars_recompute_exactly(real_data_dir: Path, tmp_path: Path) -> None:
    path = real_data_dir / "cme-es" / "es-2013-lean.ohlcv-1m.dbn.zst"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    # The full action space (the default profile trades one magnitude, market orders, Normal urgency):
    # the random policy then places limit orders at every urgency, which the execution block counts.
    cfg, fox = _foxhunt(path, ["data.data_source=ohlcv", "data.bar_seconds=60", *FULL_BRANCHES], tmp_path)
    d = cfg.data
    rows = ohlcv_rows(path, 60, d.session_timezone, d.session_open, d.session_close)
    p = _params(cfg, 60)
    ind = {name: independent_metrics(rows, name, p) for name in POLICIES}
    print(_table(path.name, fox, ind))
    bad = [b for name in POLICIES for b in _compare(name, fox[name], ind[name])]
    assert not bad, "\n".join(bad)


@pytest.mark.slow
def test_rebuilt_mbp10_book_bars_recompute_exactly(real_data_dir: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from foxhunt.cli import app

    mbo = real_data_dir / "cme-es" / "esh4-glbx-mdp3-20231225.mbo.dbn.zst"
    if not mbo.is_file():
        pytest.skip(f"{mbo} is absent")
    path = tmp_path / "esh4.mbp10.dbn.zst"
    built = CliRunner().invoke(app, ["data", "rebuild-book", str(mbo), "--out", str(path), "-q"])
    assert built.exit_code == 0, built.output
    # One short holiday session: 5 s bars give the three folds enough rows (30 s bars: 120 rows).
    cfg, fox = _foxhunt(path, ["data.bar_seconds=5"], tmp_path)
    d = cfg.data
    rows = mbp10_rows(path, 5, d.session_timezone, d.session_open, d.session_close)
    p = _params(cfg, 5)
    ind = {name: independent_metrics(rows, name, p) for name in POLICIES}
    print(_table(path.name, fox, ind))
    bad = [b for name in POLICIES for b in _compare(name, fox[name], ind[name])]
    assert not bad, "\n".join(bad)
