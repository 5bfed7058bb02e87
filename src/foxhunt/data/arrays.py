"""Typed columnar containers for market data: one numpy array per field, one row per record.

Conventions (every producer follows them, every consumer may rely on them):

* timestamps are ``int64`` nanoseconds since the UNIX epoch, UTC;
* prices are ``float64`` in price units (index points for ES); an undefined price
  (Databento's ``UNDEF_PRICE``, or an empty book level) is ``NaN``;
* sizes and order counts are ``int64`` (contracts, orders); an empty level has size 0, count 0;
* book levels are ``[n, L]`` arrays, level 0 the best price, ``L`` = 10 for MBP-10;
* ``action`` and ``side`` are the ASCII codes of Databento's one-letter enums as ``uint8``
  (``ord('A')`` add, ``ord('B')`` bid or buy aggressor, ...), ``flags`` the raw DBN flag byte.

MBP-10 ingest and the MBO book rebuild both produce :class:`BookArrays`, so nothing downstream
can tell them apart.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Self

import numpy as np

ACTION_ADD = ord("A")
ACTION_CANCEL = ord("C")
ACTION_MODIFY = ord("M")
ACTION_CLEAR = ord("R")
ACTION_TRADE = ord("T")
ACTION_FILL = ord("F")
ACTION_NONE = ord("N")
SIDE_BID = ord("B")  # bid side of the book; for trades, a buy aggressor
SIDE_ASK = ord("A")  # ask side of the book; for trades, a sell aggressor
SIDE_NONE = ord("N")


@functools.cache
def field_names(cls: type) -> tuple[str, ...]:
    """A container's field names, once per class (``dataclasses.fields`` walks them at every call,
    and foxhunt serve asks a few thousand times a second)."""
    return tuple(f.name for f in dataclasses.fields(cls))


class _Columns:
    """Row selection and concatenation shared by all containers (all fields have ``n`` rows)."""

    def __len__(self) -> int:
        return len(getattr(self, field_names(type(self))[0]))

    def take(self, index: np.ndarray | slice) -> Self:
        """Rows selected by an integer index, boolean mask or slice (a new container)."""
        return type(self)(**{k: getattr(self, k)[index] for k in field_names(type(self))})

    @classmethod
    def concat(cls, parts: list[Self]) -> Self:
        """Rows of ``parts`` one after another (the caller sorts if order matters)."""
        if not parts:
            raise ValueError(f"{cls.__name__}.concat needs at least one part")
        return cls(**{k: np.concatenate([getattr(p, k) for p in parts]) for k in field_names(cls)})


@dataclass(frozen=True, eq=False)
class BookArrays(_Columns):
    """Book states (MBP-10, MBP-1/TBBO with ``L`` = 1, or rebuilt from MBO): one row per state.

    ``price``/``size``/``action``/``side`` describe the event that produced the state (for MBP
    records: the book update or trade; for a rebuilt book: the last record of the event).
    """

    ts_event: np.ndarray  # [n] int64 ns UTC, matching-engine time
    ts_recv: np.ndarray  # [n] int64 ns UTC, capture time
    instrument_id: np.ndarray  # [n] uint32
    action: np.ndarray  # [n] uint8 ASCII
    side: np.ndarray  # [n] uint8 ASCII
    flags: np.ndarray  # [n] uint8
    price: np.ndarray  # [n] float64, NaN if undefined
    size: np.ndarray  # [n] int64
    depth: np.ndarray  # [n] uint8, book level the event changed (0 = top)
    sequence: np.ndarray  # [n] uint32
    bid_px: np.ndarray  # [n, L] float64, NaN where the level is empty
    ask_px: np.ndarray  # [n, L] float64
    bid_sz: np.ndarray  # [n, L] int64
    ask_sz: np.ndarray  # [n, L] int64
    bid_ct: np.ndarray  # [n, L] int64
    ask_ct: np.ndarray  # [n, L] int64

    @property
    def levels(self) -> int:
        return int(self.bid_px.shape[1])

    def crossed(self) -> np.ndarray:
        """[n] bool: both sides populated at level 0 and best bid >= best ask (crossed or locked)."""
        both = (self.bid_sz[:, 0] > 0) & (self.ask_sz[:, 0] > 0)
        with np.errstate(invalid="ignore"):
            return both & (self.bid_px[:, 0] >= self.ask_px[:, 0])

    def mid(self) -> np.ndarray:
        """[n] float64 mid price, NaN where either side is empty."""
        return 0.5 * (self.bid_px[:, 0] + self.ask_px[:, 0])

    def with_levels(self, n_levels: int) -> BookArrays:
        """The same states with ``n_levels`` levels per side: deeper levels cut off, missing ones
        added empty (NaN price, size and count 0), so books of every depth concatenate."""
        have = self.levels
        if have == n_levels:
            return self
        n = len(self.ts_event)

        def fit(a: np.ndarray, empty: float) -> np.ndarray:
            if have > n_levels:
                return a[:, :n_levels].copy()
            return np.concatenate([a, np.full((n, n_levels - have), empty, a.dtype)], axis=1)

        return dataclasses.replace(
            self,
            bid_px=fit(self.bid_px, np.nan),
            ask_px=fit(self.ask_px, np.nan),
            bid_sz=fit(self.bid_sz, 0),
            ask_sz=fit(self.ask_sz, 0),
            bid_ct=fit(self.bid_ct, 0),
            ask_ct=fit(self.ask_ct, 0),
        )


@dataclass(frozen=True, eq=False)
class TradeArrays(_Columns):
    """Trades: one row per trade print. ``side`` is the aggressor (B buy, A sell, N unknown)."""

    ts_event: np.ndarray  # [n] int64
    ts_recv: np.ndarray  # [n] int64
    instrument_id: np.ndarray  # [n] uint32
    price: np.ndarray  # [n] float64
    size: np.ndarray  # [n] int64
    side: np.ndarray  # [n] uint8 ASCII
    flags: np.ndarray  # [n] uint8
    sequence: np.ndarray  # [n] uint32


@dataclass(frozen=True, eq=False)
class MboArrays(_Columns):
    """Market-by-order events: one row per order action.

    ``price_raw`` keeps Databento's fixed-point integer (1e-9 units) because the book builder
    keys price levels by exact integers; ``price`` is the same value in price units.
    """

    ts_event: np.ndarray  # [n] int64
    ts_recv: np.ndarray  # [n] int64
    instrument_id: np.ndarray  # [n] uint32
    order_id: np.ndarray  # [n] uint64
    price_raw: np.ndarray  # [n] int64 fixed-point 1e-9, UNDEF_PRICE where undefined
    price: np.ndarray  # [n] float64, NaN where undefined
    size: np.ndarray  # [n] int64
    action: np.ndarray  # [n] uint8 ASCII
    side: np.ndarray  # [n] uint8 ASCII
    flags: np.ndarray  # [n] uint8
    sequence: np.ndarray  # [n] uint32


@dataclass(frozen=True, eq=False)
class OhlcvArrays(_Columns):
    """OHLCV bars as published (trade prices); ``ts_event`` is the bar's *open* time."""

    ts_event: np.ndarray  # [n] int64, bar open
    instrument_id: np.ndarray  # [n] uint32
    open: np.ndarray  # [n] float64
    high: np.ndarray  # [n] float64
    low: np.ndarray  # [n] float64
    close: np.ndarray  # [n] float64
    volume: np.ndarray  # [n] int64


@dataclass(frozen=True, eq=False)
class DefinitionArrays(_Columns):
    """Instrument definitions: what the rest of the system needs from them."""

    ts_event: np.ndarray  # [n] int64
    instrument_id: np.ndarray  # [n] uint32
    raw_symbol: np.ndarray  # [n] object (str)
    min_price_increment: np.ndarray  # [n] float64 tick size
    contract_multiplier: np.ndarray  # [n] float64 (unit_of_measure_qty for CME futures)
    expiration: np.ndarray  # [n] int64 ns UTC


MarketArrays = BookArrays | TradeArrays | MboArrays | OhlcvArrays | DefinitionArrays
