"""Continuous front-month series: one contract per session, chosen by traded volume.

Several ES contract months trade at once. For each session (trade date, see
:mod:`foxhunt.data.sessions`) we pick one contract:

* ``RollRule.PRIOR_SESSION_VOLUME`` (default, causal): the contract with the most volume in the
  previous session with data; the first session uses its own volume (there is nothing earlier).
* ``RollRule.SAME_SESSION_VOLUME``: the contract with the most volume in the session itself.

Either way the series only rolls forward: once it leaves a contract it never returns to it (a
quiet day in the new front month must not flip back to the expiring one). A roll is recorded at
the first session of the new contract. Rolls happen only at session boundaries, so a bar (which
never spans a session) never mixes contracts, and consumers that compute returns must not
difference across the ``rolls`` (no back-adjustment is applied).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from foxhunt.config.data import DataConfig
from foxhunt.data.ingest import MarketData
from foxhunt.data.schemas import DataSource, RollRule
from foxhunt.data.sessions import session_dates


@dataclass(frozen=True)
class Roll:
    trade_date: int  # YYYYMMDD of the first session on the new contract
    from_instrument: int
    to_instrument: int
    from_symbol: str
    to_symbol: str


@dataclass(frozen=True)
class FrontMonth:
    """The chosen contract per session and the volume table it was chosen from."""

    trade_dates: np.ndarray  # [S] int64 YYYYMMDD, ascending
    instrument_id: np.ndarray  # [S] uint32 chosen contract
    instruments: np.ndarray  # [I] uint32, columns of ``volume``
    volume: np.ndarray  # [S, I] int64 traded volume per session and contract
    rolls: tuple[Roll, ...]

    def front_for(self, trade_date: np.ndarray) -> np.ndarray:
        """[n] uint32 front contract for each trade date (0 where the date has no session)."""
        idx = np.searchsorted(self.trade_dates, trade_date)
        idx = np.clip(idx, 0, len(self.trade_dates) - 1)
        hit = self.trade_dates[idx] == trade_date
        return np.where(hit, self.instrument_id[idx], 0).astype(np.uint32)


def choose_front(
    trade_dates: np.ndarray,
    instruments: np.ndarray,
    volume: np.ndarray,
    rule: RollRule,
    symbols: dict[int, str] | None = None,
) -> FrontMonth:
    """Pure rule: pick a contract per session from a ``[S, I]`` volume table."""
    symbols = symbols or {}
    n_sessions = len(trade_dates)
    chosen = np.zeros(n_sessions, np.uint32)
    abandoned: set[int] = set()
    current = -1
    rolls: list[Roll] = []
    for s in range(n_sessions):
        # The volume row the decision may look at (never the future for the causal rule).
        row = s - 1 if (rule is RollRule.PRIOR_SESSION_VOLUME and s > 0) else s
        vol = volume[row].astype(np.float64).copy()
        for j, iid in enumerate(instruments):
            if int(iid) in abandoned:
                vol[j] = -1.0
        pick = int(instruments[int(np.argmax(vol))])
        if current >= 0 and pick != current:
            if vol[list(instruments).index(current)] >= vol.max():
                pick = current  # ties keep the current contract
            else:
                abandoned.add(current)
                rolls.append(
                    Roll(
                        trade_date=int(trade_dates[s]),
                        from_instrument=current,
                        to_instrument=pick,
                        from_symbol=symbols.get(current, str(current)),
                        to_symbol=symbols.get(pick, str(pick)),
                    )
                )
        current = pick
        chosen[s] = pick
    return FrontMonth(
        trade_dates=trade_dates.astype(np.int64),
        instrument_id=chosen,
        instruments=instruments.astype(np.uint32),
        volume=volume.astype(np.int64),
        rolls=tuple(rolls),
    )


def volume_table(md: MarketData, cfg: DataConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(trade_dates [S], instruments [I], volume [S, I]) from trades, or OHLCV for ``ohlcv``."""
    per_instrument: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    if cfg.data_source is DataSource.OHLCV:
        for iid, bars in md.ohlcv.items():
            per_instrument[iid] = (bars.ts_event, bars.volume)
    else:
        for iid in md.books:
            trades = md.trades.get(iid)
            if trades is not None and len(trades):
                per_instrument[iid] = (trades.ts_event, trades.size)
            else:  # a contract with a book but no trades traded nothing
                per_instrument[iid] = (md.books[iid].ts_event[:1], np.zeros(1, np.int64))
    dates_per = {
        iid: session_dates(ts, cfg.session_timezone, cfg.session_open)
        for iid, (ts, _) in per_instrument.items()
    }
    all_dates = np.unique(np.concatenate(list(dates_per.values())))
    instruments = np.array(sorted(per_instrument), dtype=np.uint32)
    table = np.zeros((len(all_dates), len(instruments)), np.int64)
    for j, iid in enumerate(instruments):
        _, vol = per_instrument[int(iid)]
        rows = np.searchsorted(all_dates, dates_per[int(iid)])
        np.add.at(table[:, j], rows, vol.astype(np.int64))
    return all_dates, instruments, table


def front_month(md: MarketData, cfg: DataConfig) -> FrontMonth:
    dates, instruments, table = volume_table(md, cfg)
    return choose_front(dates, instruments, table, cfg.roll_rule, md.symbols)
