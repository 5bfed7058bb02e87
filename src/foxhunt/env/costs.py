"""Execution and costs: fills, fees, slippage, mark-to-market as pure batched functions (docs/design.md §5).

Every function takes ``[N]`` tensors (any broadcastable shape works) and returns tensors on the
inputs' device: no ``.item()``, no Python loop over N, no host round trip, so the env step can be
compiled or graph-captured. Prices are in price units (index points for ES), money in the contract's
currency; the tick size and point value come from the data's
:class:`~foxhunt.domain.instrument.Instrument` (the one source of every contract number).

Conventions
-----------
* ``side``: +1 buy, -1 sell, 0 no trade (any int or float tensor; only its sign is read).
  ``contracts``: the order size; only ``|contracts|`` is read, the direction comes from ``side``.
* The **book is unknown** on a row when ``bid`` or ``ask`` is NaN, <= 0, or crossed (ask < bid),
  as on ohlcv rows. :func:`effective_quote` then uses the spread model around the given ``mid``::

      bid = mid - spread_model_ticks * tick / 2        ask = mid + spread_model_ticks * tick / 2

* ``mid`` / reference price: the price the env **marks positions at** (the mid for book data, the
  close for ohlcv). With that reference the accounting identity is exact::

      net PnL = gross PnL (mark_to_market at the reference) - fees - slippage_cost

Formulas
--------
Fees, per side (:func:`fees`)::

    fees = (commission_per_contract + exchange_fee_per_contract) * |contracts|

Market orders (:func:`market_fill_price`) cross the spread and pay slippage in the trade's
direction::

    touch     = ask if buy, bid if sell                    (from effective_quote)
    slip_tick = slippage_ticks_per_contract * max(|contracts| - 1, 0)
                + immediate_slippage_ticks * [urgency == IMMEDIATE]
    fill      = touch + side * slip_tick * tick_size

Where the book is known the touch is a quoted price (on the tick grid) and the slippage an expected
size impact averaged over the order's contracts, which need not lie on the grid (a three-contract
sweep at 5000.25, 5000.25, 5000.50 averages 5000.33). Where the book is unknown (ohlcv bars) the
modelled price is anchored to what traded (:func:`tick_round`, :func:`into_range`)::

    fill = clamp(ceil_tick(fill) if buy else floor_tick(fill), low, high)

the tick grid rounded against the trader (buy up, sell down), then never outside the bar's traded
range ``[low, high]`` (a buy when the bar closed at its high pays the high).

Limit orders (:func:`limit_price`, :func:`limit_fill`)::

    LIMIT_AT_TOUCH: buy at bid, sell at ask (joins the queue at the touch)
    LIMIT_INSIDE:   buy at bid + tick, sell at ask - tick (a new level, queue ahead 0);
                    when the spread is one tick or less that price would lock or cross the book,
                    so the order stays at the touch (joins bid / ask) instead.

Where the book is unknown the modelled touch is put on the grid away from the market (buy down,
sell up): a resting order rests at a price that can trade.

A limit order placed on row t rests from row t+1; on each later row it fills, all or nothing and at
its limit price (no price improvement; on a row that gapped through it, with its whole range beyond
the price, at the range's near end: a fill never lies outside the row's ``[low, high]``), when that
row's prices trade **through** it::

    buy:  next_low  < price        sell: next_high > price

or trade **at** it (``next_low == price`` for a buy) with enough volume to consume the queue ahead
of the order (and the order itself when ``contracts`` is given)::

    traded_volume_at_price >= queue_ahead + |contracts|        (> queue_ahead without contracts)

``queue_ahead`` (:func:`queue_ahead`) is the size displayed at the order's price on its side when it
was placed: the touch size for an order that joins the touch, 0 for a new level inside the spread.
``traded_volume_at_price`` (:func:`volume_at_price`, summed by the env over the rows the order
rested) is the volume of every row whose range reached the price (``low <= price`` for a buy). The
cache has no volume per price, so a touching row's whole volume counts: an upper bound on the volume
at the price. When the queue or the traded volume is unknown (NaN, or a negative queue; no book,
as on ohlcv rows, or no sizes) a touch does not fill: only a trade-through does.

Prices are compared with a tolerance of a few float ulps so that ``bid + tick`` computed in float32
still equals a tick-aligned low. An order still unfilled when
its age (rows since placement, counted by the env) reaches :func:`patience` expires and is
cancelled (:func:`limit_expired`).

Costs (:class:`Fill`)::

    slippage_cost = side * (fill - reference) * |contracts| * point_value

The sign is kept: for market orders it is the half spread plus slippage (> 0); a limit order that
fills on the passive side of the reference earns part of the spread (< 0), and one filled after the
price ran through it pays the adverse move (> 0). Mark-to-market (:func:`mark_to_market`)::

    gross = position * (price - prev_price) * point_value
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from foxhunt.domain.actions import OrderType, Urgency
from foxhunt.domain.instrument import Instrument
from foxhunt.env.config import CostConfig

_ULPS = 8.0  # price comparison tolerance, in units of the dtype's epsilon x |price|
_TICK_TOL = 1e-6  # a price within this many ticks of a grid line is on it (float division residue)
# Plain ints for tensor comparisons: torch.compile (dynamo) mis-traces `tensor == IntEnum member`.
_MARKET = int(OrderType.MARKET)
_LIMIT_INSIDE = int(OrderType.LIMIT_INSIDE)
_NORMAL, _PATIENT, _IMMEDIATE = int(Urgency.NORMAL), int(Urgency.PATIENT), int(Urgency.IMMEDIATE)


class Fill(NamedTuple):
    """Result of executing a batch of orders; every field is ``[N]``, zero where ``filled`` is False."""

    filled: Tensor  # bool: the order traded on this row
    price: Tensor  # fill price (points); the reference price where not filled
    contracts: Tensor  # signed contracts traded (+ bought, - sold)
    fees: Tensor  # $ commission + exchange fees
    slippage_cost: Tensor  # $ side * (fill - reference) * |contracts| * point_value


# --- quotes and fees --------------------------------------------------------------------------


def book_known(bid: Tensor, ask: Tensor) -> Tensor:
    """Bool mask: the row has a usable book (both sides finite and > 0, not crossed)."""
    return torch.isfinite(bid) & torch.isfinite(ask) & (bid > 0) & (ask > 0) & (ask >= bid)


def effective_quote(
    bid: Tensor, ask: Tensor, mid: Tensor | None, costs: CostConfig, tick_size: float
) -> tuple[Tensor, Tensor]:
    """``(bid, ask)`` from the book where known, else ``mid -/+ spread_model_ticks * tick / 2``.

    Without ``mid`` the unknown rows stay NaN (pass the mark price on ohlcv data).
    """
    known = book_known(bid, ask)
    if mid is None:
        mid = torch.full_like(bid, float("nan"))
    half = 0.5 * costs.spread_model_ticks * tick_size
    return torch.where(known, bid, mid - half), torch.where(known, ask, mid + half)


class Quote(NamedTuple):
    """A row's effective quote (:func:`effective_quote`) and whether its book is known (:func:`book_known`
    of the raw quote). The env computes it once per market row; the ``*_quoted`` functions take it."""

    bid: Tensor
    ask: Tensor
    known: Tensor  # bool


def quote(bid: Tensor, ask: Tensor, mid: Tensor | None, costs: CostConfig, tick_size: float) -> Quote:
    """:class:`Quote` of the raw ``bid``/``ask`` with the spread model around ``mid`` where unknown."""
    q_bid, q_ask = effective_quote(bid, ask, mid, costs, tick_size)
    return Quote(q_bid, q_ask, book_known(bid, ask))


def tick_round(price: Tensor, side: Tensor, tick_size: float) -> Tensor:
    """``price`` on the tick grid (multiples of ``tick_size``): buys rounded up, sells down.

    Rows with ``side == 0`` are returned unchanged. A price within 1e-6 ticks of a grid line counts
    as on it (``5000.25 / 0.25`` is exact, ``1.09035 / 0.00005`` is not).
    """
    s = torch.sign(side).to(price.dtype)
    # One rounding for both sides: s * ceil(s * ticks - tol) is ceil(ticks - tol) for a buy and,
    # for a sell, -ceil(-(ticks + tol)) = floor(ticks + tol) exactly (negation is exact).
    rounded = s * torch.ceil(s * (price / tick_size) - _TICK_TOL) * tick_size
    return torch.where(s != 0, rounded, price)


def into_range(price: Tensor, low: Tensor, high: Tensor) -> Tensor:
    """``price`` clamped into ``[low, high]`` where both are finite (a bar's traded range)."""
    ok = torch.isfinite(low) & torch.isfinite(high) & (low <= high)
    return torch.where(ok, torch.minimum(torch.maximum(price, low), high), price)


def fees(contracts: Tensor, costs: CostConfig) -> Tensor:
    """$ fees for one side: ``(commission + exchange fee) * |contracts|``."""
    n = contracts.abs()
    if not n.is_floating_point():
        n = n.to(torch.get_default_dtype())
    return (costs.commission_per_contract + costs.exchange_fee_per_contract) * n


def _sign(side: Tensor, like: Tensor) -> Tensor:
    return torch.sign(side).to(like.dtype)


def _size(contracts: Tensor, like: Tensor) -> Tensor:
    return contracts.abs().to(like.dtype)


# --- market orders ----------------------------------------------------------------------------


def slippage_ticks(contracts: Tensor, urgency: Tensor, costs: CostConfig) -> Tensor:
    """Market-order slippage in ticks: per contract beyond the first, plus the Immediate surcharge."""
    n = contracts.abs()
    n = n if n.is_floating_point() else n.to(torch.get_default_dtype())
    extra = torch.clamp(n - 1.0, min=0.0)
    immediate = (urgency == _IMMEDIATE).to(n.dtype)
    return costs.slippage_ticks_per_contract * extra + costs.immediate_slippage_ticks * immediate


def market_fill_price(
    side: Tensor,
    contracts: Tensor,
    bid: Tensor,
    ask: Tensor,
    urgency: Tensor,
    costs: CostConfig,
    tick_size: float,
    mid: Tensor | None = None,
    low: Tensor | None = None,
    high: Tensor | None = None,
) -> Tensor:
    """Fill price of a market order: the far touch plus slippage in the trade's direction.

    Buys pay ``ask + slip``, sells receive ``bid - slip`` (``slip`` = :func:`slippage_ticks` x tick);
    rows with ``side == 0`` get the quote mid. ``mid`` feeds the spread model where the book is
    unknown; there the price is put on the tick grid (buy up, sell down) and, with ``low`` and
    ``high`` (the row's traded range), clamped into it.
    """
    q = quote(bid, ask, mid, costs, tick_size)
    return market_fill_price_quoted(side, contracts, q, urgency, costs, tick_size, low, high)


def market_fill_price_quoted(
    side: Tensor,
    contracts: Tensor,
    q: Quote,
    urgency: Tensor,
    costs: CostConfig,
    tick_size: float,
    low: Tensor | None = None,
    high: Tensor | None = None,
) -> Tensor:
    """:func:`market_fill_price` from a precomputed :class:`Quote`."""
    s = _sign(side, q.bid)
    touch = torch.where(s > 0, q.ask, torch.where(s < 0, q.bid, 0.5 * (q.bid + q.ask)))
    slip = slippage_ticks(_size(contracts, q.bid), urgency, costs) * tick_size  # in the price dtype
    price = touch + s * slip
    modelled = tick_round(price, s, tick_size)
    if low is not None and high is not None:
        modelled = into_range(modelled, low.to(price.dtype), high.to(price.dtype))
    return torch.where(q.known | (s == 0), price, modelled)


def market_order(
    side: Tensor,
    contracts: Tensor,
    bid: Tensor,
    ask: Tensor,
    mid: Tensor,
    urgency: Tensor,
    costs: CostConfig,
    instrument: Instrument,
    low: Tensor | None = None,
    high: Tensor | None = None,
) -> Fill:
    """Execute market orders now: fills every row with ``side != 0`` and ``contracts != 0``.

    ``mid`` is the reference (mark) price: it prices the spread model and the slippage cost.
    ``low``/``high`` bound a modelled fill where the book is unknown (:func:`market_fill_price`).
    """
    q = quote(bid, ask, mid, costs, instrument.tick_size)
    return market_order_quoted(side, contracts, q, mid, urgency, costs, instrument, low, high)


def market_order_quoted(
    side: Tensor,
    contracts: Tensor,
    q: Quote,
    mid: Tensor,
    urgency: Tensor,
    costs: CostConfig,
    instrument: Instrument,
    low: Tensor | None = None,
    high: Tensor | None = None,
) -> Fill:
    """:func:`market_order` from a precomputed :class:`Quote` (the env's per-row table: the quote's
    eleven operators are paid once per market row, not twice per step)."""
    price = market_fill_price_quoted(side, contracts, q, urgency, costs, instrument.tick_size, low, high)
    filled = (side != 0) & (contracts != 0)
    return _fill(filled, side, contracts, price, mid, costs, instrument.point_value)


# --- limit orders -----------------------------------------------------------------------------


def limit_price(
    side: Tensor,
    order_type: Tensor,
    bid: Tensor,
    ask: Tensor,
    tick_size: float,
    book: Tensor | None = None,
) -> Tensor:
    """Limit price: at the touch, or one tick inside when the spread is at least two ticks.

    ``LIMIT_AT_TOUCH``: buy at bid, sell at ask. ``LIMIT_INSIDE``: buy at bid + tick, sell at
    ask - tick; with a spread of one tick (or a locked book) that would lock or cross, so it stays at
    the touch. ``MARKET`` rows get the far touch (ask for a buy, bid for a sell: the price a market
    order crosses to) and ``side == 0`` rows the mid; the env routes those through
    :func:`market_order`. Pass a quote from :func:`effective_quote` when the book may be unknown,
    with ``book`` (:func:`book_known` of the raw quote): where it is False the modelled price is put
    on the tick grid away from the market (buy down, sell up).
    """
    s = _sign(side, bid)
    spread_ticks = torch.round((ask - bid) / tick_size)
    inside = (order_type == _LIMIT_INSIDE) & (spread_ticks >= 2)
    improve = inside.to(bid.dtype) * tick_size
    buy = torch.where(order_type == _MARKET, ask, bid + improve)
    sell = torch.where(order_type == _MARKET, bid, ask - improve)
    price = torch.where(s > 0, buy, torch.where(s < 0, sell, 0.5 * (bid + ask)))
    if book is None:
        return price
    keep = book | (s == 0) | (order_type == _MARKET)  # MARKET rows: the touch market_order models
    return torch.where(keep, price, tick_round(price, -s, tick_size))


def _tol(price: Tensor) -> Tensor:
    return _ULPS * torch.finfo(price.dtype).eps * price.abs()


def queue_ahead(
    side: Tensor,
    price: Tensor,
    bid: Tensor,
    ask: Tensor,
    bid_size: Tensor,
    ask_size: Tensor,
    known: Tensor | None = None,
) -> Tensor:
    """Contracts displayed ahead of a new limit order at ``price``: the queue it joins.

    A buy at (or below) the bid joins the bid queue (``bid_size``); a buy above the bid is a new level
    inside the spread (0 ahead); sells mirror this with the ask. NaN where the book is unknown
    (:func:`book_known` on the raw ``bid``/``ask``, not the spread model) or the size is not finite,
    and for ``side == 0``: such orders fill only on a trade-through (:func:`limit_fill`). ``known``:
    that :func:`book_known` when the caller has it (the quote may then be the effective one: where the
    book is known the two are the same).
    """
    s = torch.sign(side)
    tol = _tol(price)
    size = torch.where(s > 0, bid_size, ask_size).to(price.dtype)
    new_level = torch.where(s > 0, price > bid + tol, price < ask - tol)
    ahead = torch.where(new_level, torch.zeros_like(size), size)
    known = (book_known(bid, ask) if known is None else known) & (s != 0) & torch.isfinite(size)
    return torch.where(known, ahead, torch.full_like(ahead, float("nan")))


def volume_at_price(side: Tensor, price: Tensor, low: Tensor, high: Tensor, volume: Tensor) -> Tensor:
    """Volume traded at or through a resting order's price on one row (0 where the row missed it).

    ``volume`` (the row's traded contracts) counts when the row's range reached the price: ``low <=
    price`` for a buy, ``high >= price`` for a sell (with :func:`limit_fill`'s tolerance). A row that
    reached it with unknown (NaN) volume gives NaN; ``side == 0`` gives 0.
    """
    s = torch.sign(side)
    tol = _tol(price)
    reached = ((s > 0) & (low <= price + tol)) | ((s < 0) & (high >= price - tol))
    return torch.where(reached, volume.to(price.dtype), torch.zeros_like(price))


def limit_fill(
    side: Tensor,
    price: Tensor,
    next_low: Tensor,
    next_high: Tensor,
    queue_ahead: Tensor,
    traded_volume_at_price: Tensor,
    contracts: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Does a resting limit order fill on a later row? Returns ``(filled [bool], price)``.

    A buy fills when ``next_low < price`` (trade-through) or ``next_low == price`` with
    ``traded_volume_at_price >= queue_ahead + |contracts|`` (``> queue_ahead`` when ``contracts`` is
    None); a sell symmetrically with ``next_high``. Unknown queue or volume (NaN, or a negative
    queue) needs a trade-through. ``queue_ahead`` comes from :func:`queue_ahead` at placement,
    ``traded_volume_at_price`` sums :func:`volume_at_price` over the rows since. The fill price is the
    limit price (no price improvement), returned for every row, except on a row whose whole range lies
    beyond it (a buy's ``next_high`` below it: the row gapped through the order), where a fill is
    booked at the range's near end (the buy at ``next_high``), inside what traded; ``side == 0``
    never fills.
    """
    s = torch.sign(side)
    tol = _tol(price)
    buy_through = next_low < price - tol
    sell_through = next_high > price + tol
    buy_at = (next_low - price).abs() <= tol
    sell_at = (next_high - price).abs() <= tol

    queue = queue_ahead.to(price.dtype)
    volume = traded_volume_at_price.to(price.dtype)
    queue_known = torch.isfinite(queue) & (queue >= 0) & torch.isfinite(volume)
    if contracts is None:
        consumed = volume > queue
    else:
        consumed = volume >= queue + _size(contracts, price)
    at_fills = queue_known & consumed

    buy = (s > 0) & (buy_through | (buy_at & at_fills))
    sell = (s < 0) & (sell_through | (sell_at & at_fills))
    filled = buy | sell
    # A row whose whole range lies beyond the price (it gapped through the order: a buy's high below
    # it) fills at the range's near end, never at a price that did not trade on the row.
    inside = into_range(price, next_low.to(price.dtype), next_high.to(price.dtype))
    return filled, torch.where(filled, inside, price)


def limit_order(
    side: Tensor,
    contracts: Tensor,
    price: Tensor,
    next_low: Tensor,
    next_high: Tensor,
    queue_ahead: Tensor,
    traded_volume_at_price: Tensor,
    mid: Tensor,
    costs: CostConfig,
    instrument: Instrument,
) -> Fill:
    """Check resting limit orders against the next row and book the fills as a :class:`Fill`.

    ``mid`` is the reference (mark) price of the row where the fill is booked (the next row).
    """
    filled, fill_price = limit_fill(
        side, price, next_low, next_high, queue_ahead, traded_volume_at_price, contracts=contracts
    )
    filled = filled & (contracts != 0)
    return _fill(filled, side, contracts, fill_price, mid, costs, instrument.point_value)


def patience(urgency: Tensor, costs: CostConfig) -> Tensor:
    """Rows a limit order of this urgency rests before it expires (int64, ``costs.patience_bars``)."""
    bars = costs.patience_bars
    if len(bars) != len(Urgency):
        raise ValueError(
            f"costs.patience_bars needs one value per urgency ({', '.join(u.name for u in Urgency)}), "
            f"got {len(bars)}: {bars}"
        )
    # Arithmetic select instead of a table lookup: no host-to-device copy, no cache.
    u = urgency.long()
    out = torch.full_like(u, bars[_NORMAL])
    out = torch.where(u == _PATIENT, bars[_PATIENT], out)
    return torch.where(u == _IMMEDIATE, bars[_IMMEDIATE], out)


def limit_expired(age: Tensor, urgency: Tensor, costs: CostConfig) -> Tensor:
    """Bool: a resting order of this ``age`` (rows since placement) has used up its patience."""
    return age >= patience(urgency, costs)


# --- PnL --------------------------------------------------------------------------------------


def mark_to_market(position: Tensor, prev_price: Tensor, price: Tensor, point_value: float) -> Tensor:
    """$ gross PnL of holding ``position`` contracts (signed) from ``prev_price`` to ``price``."""
    pos = position if position.is_floating_point() else position.to(price.dtype)
    return pos * (price - prev_price) * point_value


def net_pnl(gross: Tensor, fees_paid: Tensor, slippage_cost: Tensor) -> Tensor:
    """$ net PnL = gross (marked at the reference price) - fees - slippage cost."""
    return gross - fees_paid - slippage_cost


def _fill(
    filled: Tensor,
    side: Tensor,
    contracts: Tensor,
    price: Tensor,
    reference: Tensor,
    costs: CostConfig,
    point_value: float,
) -> Fill:
    s = _sign(side, price)
    n = torch.where(filled, _size(contracts, price), torch.zeros_like(price))
    fill_price = torch.where(filled, price, reference.to(price.dtype))
    slip = s * (fill_price - reference) * n * point_value
    return Fill(filled=filled, price=fill_price, contracts=s * n, fees=fees(n, costs), slippage_cost=slip)
