"""The traded contract: symbol, tick size, point value, currency and session calendar.

One :class:`Instrument` is the single source of every contract number the later stages use (the
tick grid of fills, the point value of PnL, the session calendar of annualisation). It is resolved
(:func:`resolve_instrument`), field by field, from (first match wins):

1. the ``[instrument]`` config section (:class:`InstrumentConfig`, ``--set instrument.tick_size=...``):
   overrides;
2. the DBN **definition** records among the inputs (Databento ``definition`` schema, read into
   :class:`Definition` by :mod:`foxhunt.data.instrument`: ``min_price_increment`` is the tick,
   ``unit_of_measure_qty`` the point value of CME futures, falling back to ``contract_multiplier``;
   ``currency``; ``raw_symbol``; ``asset`` the root);
3. the built-in table :data:`PRODUCTS` of common CME products, matched by the root of the data's
   symbols (``ESH4`` -> ``ES``, ``6EM4`` -> ``6E``, ``ES.FUT`` -> ``ES``).

Without a tick size and a point value from any of them the resolution is refused
(:class:`InstrumentError`, exit 2) with the ``--set`` that fixes it. Definitions are matched to
the data by product root, since tick and multiplier are properties of the product, not the month.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any, NamedTuple

import numpy as np

from foxhunt.domain.config import InstrumentConfig
from foxhunt.errors import DataError, setting

TRADING_DAYS_PER_YEAR = 252
"""Trading days of a CME year, the convention of annualised Sharpe ratios."""

GLOBEX_SESSION_HOURS = 23.0
"""Hours of the CME Globex trading day (17:00-16:00 CT, a 60-minute daily halt) of a product that is
not in :data:`PRODUCTS` (every product there trades these hours too)."""


class InstrumentError(DataError):
    """The contract specification of the data cannot be determined or is ambiguous."""


class InstrumentSource(StrEnum):
    """Where the tick size and point value came from (overrides on top are named by CONFIG)."""

    DEFINITION = "definition"  # DBN definition records among the inputs
    TABLE = "table"  # the built-in PRODUCTS table, by symbol root
    CONFIG = "config"  # the [instrument] section alone


class Product(NamedTuple):
    """One row of the built-in table: a CME product's contract specification."""

    name: str
    tick_size: float  # minimum price increment, price units
    point_value: float  # currency per price unit per contract (the multiplier)
    currency: str
    session_hours: float  # hours of the trading day


# CME Group contract specifications (outright minimum tick, contract unit, Globex hours), read from
# each product's "Contract Specs" page, cited per row. Every product below trades Sunday-Friday on
# CME Globex with a 60-minute daily halt: 23 hours a day (17:00-16:00 CT; energy and metals quote it
# as 18:00-17:00 ET, the same hours).
PRODUCTS: dict[str, Product] = {
    # https://www.cmegroup.com/markets/equities/sp/e-mini-sandp500.contractSpecs.html
    # 0.25 index points = $12.50; $50 x index
    "ES": Product("E-mini S&P 500", 0.25, 50.0, "USD", 23.0),
    # https://www.cmegroup.com/markets/equities/sp/micro-e-mini-sandp-500.contractSpecs.html
    # 0.25 index points = $1.25; $5 x index
    "MES": Product("Micro E-mini S&P 500", 0.25, 5.0, "USD", 23.0),
    # https://www.cmegroup.com/markets/equities/nasdaq/e-mini-nasdaq-100.contractSpecs.html
    # 0.25 index points = $5.00; $20 x index
    "NQ": Product("E-mini Nasdaq-100", 0.25, 20.0, "USD", 23.0),
    # https://www.cmegroup.com/markets/equities/nasdaq/micro-e-mini-nasdaq-100.contractSpecs.html
    # 0.25 index points = $0.50; $2 x index
    "MNQ": Product("Micro E-mini Nasdaq-100", 0.25, 2.0, "USD", 23.0),
    # https://www.cmegroup.com/markets/equities/dow-jones/e-mini-dow.contractSpecs.html
    # 1.0 index point = $5.00; $5 x index
    "YM": Product("E-mini Dow ($5)", 1.0, 5.0, "USD", 23.0),
    # https://www.cmegroup.com/markets/equities/dow-jones/micro-e-mini-dow.contractSpecs.html
    # 1.0 index point = $0.50; $0.50 x index
    "MYM": Product("Micro E-mini Dow", 1.0, 0.5, "USD", 23.0),
    # https://www.cmegroup.com/markets/equities/russell/e-mini-russell-2000.contractSpecs.html
    # 0.10 index points = $5.00; $50 x index
    "RTY": Product("E-mini Russell 2000", 0.1, 50.0, "USD", 23.0),
    # https://www.cmegroup.com/markets/equities/russell/micro-e-mini-russell-2000.contractSpecs.html
    # 0.10 index points = $0.50; $5 x index
    "M2K": Product("Micro E-mini Russell 2000", 0.1, 5.0, "USD", 23.0),
    # https://www.cmegroup.com/markets/energy/crude-oil/light-sweet-crude.contractSpecs.html
    # $0.01 per barrel = $10.00; 1,000 barrels
    "CL": Product("Crude Oil (WTI)", 0.01, 1_000.0, "USD", 23.0),
    # https://www.cmegroup.com/markets/energy/crude-oil/micro-wti-crude-oil.contractSpecs.html
    # $0.01 per barrel = $1.00; 100 barrels
    "MCL": Product("Micro WTI Crude Oil", 0.01, 100.0, "USD", 23.0),
    # https://www.cmegroup.com/markets/metals/precious/gold.contractSpecs.html
    # $0.10 per troy ounce = $10.00; 100 troy ounces
    "GC": Product("Gold", 0.1, 100.0, "USD", 23.0),
    # https://www.cmegroup.com/markets/metals/precious/e-micro-gold.contractSpecs.html
    # $0.10 per troy ounce = $1.00; 10 troy ounces
    "MGC": Product("Micro Gold", 0.1, 10.0, "USD", 23.0),
    # https://www.cmegroup.com/markets/interest-rates/us-treasury/10-year-us-treasury-note.contractSpecs.html
    # one-half of 1/32 of a point = 0.015625 = $15.625; face value $100,000 ($1,000 per point)
    "ZN": Product("10-Year T-Note", 1 / 64, 1_000.0, "USD", 23.0),
    # https://www.cmegroup.com/markets/interest-rates/us-treasury/30-year-us-treasury-bond.contractSpecs.html
    # 1/32 of a point = 0.03125 = $31.25; face value $100,000 ($1,000 per point)
    "ZB": Product("30-Year T-Bond", 1 / 32, 1_000.0, "USD", 23.0),
    # https://www.cmegroup.com/markets/fx/g10/euro-fx.contractSpecs.html
    # $0.00005 per EUR = $6.25; 125,000 EUR
    "6E": Product("Euro FX", 0.00005, 125_000.0, "USD", 23.0),
    # https://www.cmegroup.com/markets/fx/g10/british-pound.contractSpecs.html
    # $0.0001 per GBP = $6.25; 62,500 GBP
    "6B": Product("British Pound", 0.0001, 62_500.0, "USD", 23.0),
    # https://www.cmegroup.com/markets/fx/g10/japanese-yen.contractSpecs.html
    # $0.0000005 per JPY = $6.25; 12,500,000 JPY
    "6J": Product("Japanese Yen", 0.0000005, 12_500_000.0, "USD", 23.0),
}

# A futures contract's raw symbol: product root, month code (F G H J K M N Q U V X Z), 1-2 year digits.
_CONTRACT = re.compile(r"^(?P<root>[A-Z0-9]+?)(?P<month>[FGHJKMNQUVXZ])(?P<year>\d{1,2})$")


def symbol_root(symbol: str) -> str | None:
    """The product root of a raw, parent or continuous symbol; None for a spread or no symbol.

    ``ESH4`` -> ``ES``, ``6EM4`` -> ``6E``, ``MESZ23`` -> ``MES``, ``ES.FUT`` -> ``ES``,
    ``ES.c.0`` -> ``ES``; a calendar spread (``ESH4-ESM4``) has no outright price: None.
    """
    head = symbol.strip().upper().split(".")[0]
    if not head or "-" in head or ":" in head or head == "ALL_SYMBOLS":
        return None
    match = _CONTRACT.match(head)
    return match["root"] if match else head


@dataclass(frozen=True)
class Definition:
    """What one DBN definition record says about its contract (NaN / "" where it says nothing)."""

    instrument_id: int
    raw_symbol: str
    root: str
    tick_size: float
    point_value: float
    currency: str

    @property
    def complete(self) -> bool:
        return bool(np.isfinite(self.tick_size) and self.tick_size > 0) and bool(
            np.isfinite(self.point_value) and self.point_value > 0
        )


@dataclass(frozen=True)
class Instrument:
    """The contract every price and dollar of a run refers to (see the module docstring)."""

    root: str  # product root (ES); "" when only the config names the contract
    contracts: tuple[str, ...]  # raw symbols of the data (ESZ3, ESH4, ...), as far as known
    tick_size: float  # minimum price increment, price units
    point_value: float  # currency per price unit per contract
    currency: str
    session_hours: float  # trading hours per session day (annualisation)
    trading_days: int  # trading days per year (annualisation)
    source: InstrumentSource
    overridden: tuple[str, ...] = ()  # the [instrument] keys that replaced a value from the data

    @property
    def symbol(self) -> str:
        """The contract for one contract, else the root (a continuous series over several months)."""
        if len(self.contracts) == 1:
            return self.contracts[0]
        return self.root or ",".join(self.contracts) or "?"

    @property
    def tick_value(self) -> float:
        """Currency per tick per contract."""
        return self.tick_size * self.point_value

    @property
    def session_seconds(self) -> float:
        return self.session_hours * 3600.0

    def describe(self) -> str:
        over = f", overridden: {', '.join(self.overridden)}" if self.overridden else ""
        return (
            f"{self.symbol}: tick {self.tick_size:g}, {self.point_value:g} {self.currency} per point "
            f"({self.tick_value:g} per tick), {self.session_hours:g} h x {self.trading_days} days "
            f"(from the {self.source.value}{over})"
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(symbol=self.symbol, source=self.source.value, contracts=list(self.contracts))
        out["overridden"] = list(self.overridden)
        return out


def product_instrument(root: str, contracts: Sequence[str] = ()) -> Instrument:
    """The built-in table's instrument for ``root`` (KeyError when the table lacks it)."""
    p = PRODUCTS[root]
    return Instrument(
        root=root,
        contracts=tuple(contracts),
        tick_size=p.tick_size,
        point_value=p.point_value,
        currency=p.currency,
        session_hours=p.session_hours,
        trading_days=TRADING_DAYS_PER_YEAR,
        source=InstrumentSource.TABLE,
    )


def _fix() -> str:
    return (
        f"name the contract: {setting('instrument.tick_size=...', 'instrument.point_value=...')} "
        f"(or {setting('instrument.root=ES')} for a product of the built-in table: {', '.join(PRODUCTS)}), "
        "or add the product's DBN definition file to the inputs"
    )


def resolve_instrument(
    symbols: Iterable[str],
    definitions: Sequence[Definition] = (),
    overrides: InstrumentConfig | None = None,
    where: str = "--data",
) -> Instrument:
    """The data's :class:`Instrument` (module docstring's order); :class:`InstrumentError` if unknown.

    ``symbols`` are the raw (or parent) symbols of the data, ``definitions`` the definition records
    among the inputs, ``where`` names the inputs in messages.
    """
    over = overrides or InstrumentConfig()
    contracts = tuple(sorted({s for s in symbols if symbol_root(s) is not None}))
    roots = {symbol_root(s) for s in contracts} - {None}
    if over.root is not None:
        roots = {over.root}
    # Definitions describe products: keep those of the data's roots (all of them without symbols).
    defs = [d for d in definitions if d.complete and (not roots or d.root in roots)]
    base: Instrument | None = None
    # Tick and point value both set: the config names the contract, whatever the data holds.
    named = over.tick_size is not None and over.point_value is not None
    specs = {(d.root, d.tick_size, d.point_value) for d in defs}
    if named and (len({(t, p) for _, t, p in specs}) > 1 or (not defs and len(roots) > 1)):
        return apply_instrument_config(None, over, contracts, roots, where)
    if defs:
        if len({(t, p) for _, t, p in specs}) > 1:
            listed = "; ".join(f"{r} tick {t:g} x {p:g}" for r, t, p in sorted(specs))
            raise InstrumentError(
                where,
                f"definition records of several contract specifications ({listed})",
                "pass the files of one product, or " + _fix(),
            )
        d = defs[0]
        table = PRODUCTS.get(d.root)
        base = Instrument(
            root=d.root,
            contracts=contracts or tuple(sorted({x.raw_symbol for x in defs})),
            tick_size=d.tick_size,
            point_value=d.point_value,
            currency=d.currency or (table.currency if table else ""),
            session_hours=table.session_hours if table else GLOBEX_SESSION_HOURS,
            trading_days=TRADING_DAYS_PER_YEAR,
            source=InstrumentSource.DEFINITION,
        )
    elif roots:
        known = sorted(r for r in roots if r in PRODUCTS)
        if len(roots) > 1:
            raise InstrumentError(
                where,
                f"symbols of several products ({', '.join(sorted(r for r in roots if r))})",
                "pass the files of one product, or " + _fix(),
            )
        if known:
            base = product_instrument(known[0], contracts)
    return apply_instrument_config(base, over, contracts, roots, where)


def apply_instrument_config(
    base: Instrument | None, over: InstrumentConfig, contracts: tuple[str, ...], roots: set, where: str
) -> Instrument:
    """``base`` with every field the ``[instrument]`` section ``over`` sets (the config wins); refuse when
    incomplete. Not a dotted override (those are :mod:`foxhunt.config.loader`'s): a contract's fields."""
    values = {
        "tick_size": over.tick_size,
        "point_value": over.point_value,
        "currency": over.currency,
        "session_hours": over.session_hours,
        "trading_days": over.trading_days,
    }
    given = {k: v for k, v in values.items() if v is not None}
    if base is None:
        if over.tick_size is None or over.point_value is None:
            seen = ", ".join(contracts) or "no symbols"
            raise InstrumentError(
                where,
                f"no contract specification for the data ({seen}): no definition records among the "
                "inputs and no product of the built-in table matches",
                _fix(),
            )
        root = next(iter(roots), "") if len(roots) == 1 else ""
        return Instrument(
            root=root or "",
            contracts=contracts,
            tick_size=over.tick_size,
            point_value=over.point_value,
            currency=over.currency or "USD",
            session_hours=over.session_hours or GLOBEX_SESSION_HOURS,
            trading_days=over.trading_days or TRADING_DAYS_PER_YEAR,
            source=InstrumentSource.CONFIG,
            overridden=tuple(given),
        )
    changed = tuple(k for k, v in given.items() if getattr(base, k) != v)
    return replace(base, **given, overridden=changed)
