"""Continuous front-month series: one contract per session, chosen by its activity.

Several ES contract months trade at once. For each session (trade date, see
:mod:`foxhunt.data.sessions`) we pick one contract by its activity over the *whole* session:
traded volume first, then the number of book updates (which decides for book-only data, such as
MBP-10 rebuilt from MBO, and between contracts that traded the same volume):

* ``RollRule.PRIOR_SESSION_VOLUME`` (default, causal): the most active contract in the previous
  session with data; the first session uses its own activity (there is nothing earlier).
* ``RollRule.SAME_SESSION_VOLUME``: the most active contract in the session itself.

Only contracts with a record in the session are candidates for it (the one fact about a session
that the causal rule reads from the session itself); when none of them was active in the previous
session, as after a gap between input files, the session's own activity decides.

Either way the series only rolls forward: once it leaves a contract it never returns to it (a
quiet day in the new front month must not flip back to the expiring one). A roll is recorded at
the first session of the new contract. Rolls happen only at session boundaries, so a bar (which
never spans a session) never mixes contracts, and consumers that compute returns must not
difference across the ``rolls`` (no back-adjustment is applied).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from foxhunt.data.config import DataConfig
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
    """The chosen contract per session and the activity tables it was chosen from."""

    trade_dates: np.ndarray  # [S] int64 YYYYMMDD, ascending
    instrument_id: np.ndarray  # [S] uint32 chosen contract
    instruments: np.ndarray  # [I] uint32, columns of ``volume``
    volume: np.ndarray  # [S, I] int64 traded volume per session and contract
    rolls: tuple[Roll, ...]
    updates: np.ndarray  # [S, I] int64 book updates (OHLCV records for ohlcv data) per session

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
    updates: np.ndarray | None = None,
) -> FrontMonth:
    """Pure rule: pick a contract per session from ``[S, I]`` volume and book-update tables.

    A contract ranks above another by volume, then (equal volume, e.g. none traded) by updates.
    """
    symbols = symbols or {}
    updates = np.zeros_like(volume) if updates is None else updates
    n_sessions = len(trade_dates)
    chosen = np.zeros(n_sessions, np.uint32)
    abandoned: set[int] = set()
    current = -1
    rolls: list[Roll] = []
    for s in range(n_sessions):
        # A contract with no record at all in the session cannot be its front month (inputs with a
        # gap, e.g. files months apart): it ranks last, like an abandoned one.
        candidate = [
            int(iid) not in abandoned and (volume[s, j] > 0 or updates[s, j] > 0)
            for j, iid in enumerate(instruments)
        ]
        # The row the decision may look at (never the future for the causal rule), unless no
        # candidate was active in the previous session: then there is nothing earlier to go by,
        # as in the first session, and the session's own activity decides.
        row = s - 1 if (rule is RollRule.PRIOR_SESSION_VOLUME and s > 0) else s
        if not any(c and (volume[row, j] > 0 or updates[row, j] > 0) for j, c in enumerate(candidate)):
            row = s
        # (volume, updates) per contract, compared as tuples.
        rank = [
            (int(volume[row, j]), int(updates[row, j])) if candidate[j] else (-1, -1)
            for j in range(len(instruments))
        ]
        best = max(rank)
        pick = int(instruments[rank.index(best)])
        if current >= 0 and pick != current:
            if rank[list(instruments).index(current)] >= best:
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
        updates=updates.astype(np.int64),
    )


def activity_tables(md: MarketData, cfg: DataConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(trade_dates [S], instruments [I], volume [S, I], updates [S, I]) over every session.

    Book data: volume from the trades, updates = book states, for every contract with a book;
    ``ohlcv``: volume and record counts of the OHLCV bars. Every session in which a contract has
    any record is a row, so book-only data (no trades) still has all its sessions.
    """
    # instrument -> [(timestamps, volume per record, updates per record)]
    events: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    if cfg.data_source is DataSource.OHLCV:
        for iid, bars in md.ohlcv.items():
            events[iid] = [(bars.ts_event, bars.volume, np.ones(len(bars), np.int64))]
    else:
        for iid, book in md.books.items():
            events[iid] = [(book.ts_event, np.zeros(len(book), np.int64), np.ones(len(book), np.int64))]
            trades = md.trades.get(iid)
            if trades is not None and len(trades):
                events[iid].append((trades.ts_event, trades.size, np.zeros(len(trades), np.int64)))
    ts = {iid: np.concatenate([e[0] for e in parts]) for iid, parts in events.items()}
    dates_per = {iid: session_dates(t, cfg.session_timezone, cfg.session_open) for iid, t in ts.items()}
    all_dates = np.unique(np.concatenate(list(dates_per.values())))
    instruments = np.array(sorted(events), dtype=np.uint32)
    volume = np.zeros((len(all_dates), len(instruments)), np.int64)
    updates = np.zeros_like(volume)
    for j, iid in enumerate(instruments):
        rows = np.searchsorted(all_dates, dates_per[int(iid)])
        np.add.at(volume[:, j], rows, np.concatenate([e[1] for e in events[int(iid)]]).astype(np.int64))
        np.add.at(updates[:, j], rows, np.concatenate([e[2] for e in events[int(iid)]]))
    return all_dates, instruments, volume, updates


def front_month(md: MarketData, cfg: DataConfig) -> FrontMonth:
    dates, instruments, volume, updates = activity_tables(md, cfg)
    return choose_front(dates, instruments, volume, cfg.roll_rule, md.symbols, updates)
