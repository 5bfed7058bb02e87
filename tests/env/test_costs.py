"""Execution and costs, checked against numbers worked out by hand (ES defaults unless stated).

ES defaults: tick 0.25 points, $50 per point, fees 0.85 + 1.40 = $2.25 per contract per side,
slippage 0.02 ticks per contract beyond the first, Immediate +0.5 ticks, ohlcv spread model 1 tick,
patience (Normal, Patient, Immediate) = (2, 5, 1) rows.
"""

from __future__ import annotations

import pytest
import torch

from foxhunt.domain.actions import OrderType, Urgency
from foxhunt.domain.instrument import product_instrument
from foxhunt.env.config import CostConfig
from foxhunt.env.costs import (
    Fill,
    effective_quote,
    fees,
    limit_expired,
    limit_fill,
    limit_order,
    limit_price,
    mark_to_market,
    market_fill_price,
    market_order,
    net_pnl,
    patience,
    queue_ahead,
    volume_at_price,
)

COSTS = CostConfig()
ES = product_instrument("ES")  # the built-in table's ES: tick 0.25, $50 per point
TICK = ES.tick_size
F64 = torch.float64
NAN = float("nan")


def t(*values: float, dtype: torch.dtype = F64, device: str = "cpu") -> torch.Tensor:
    return torch.tensor(values, dtype=dtype, device=device)


def i(*values: int, device: str = "cpu") -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64, device=device)


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected.to(actual.device), rtol=0, atol=1e-9)


# --- fees and market orders -------------------------------------------------------------------


def test_fees_per_contract_per_side() -> None:
    # 3 x (0.85 + 1.40) = 6.75; a sell of 2 (negative contracts) pays 2 x 2.25 = 4.50; 0 pays 0
    close(fees(i(3, -2, 0), COSTS), t(6.75, 4.5, 0.0, dtype=torch.float32))


def test_market_buy_three_contracts_normal() -> None:
    # buy at the ask 5000.25 + slippage 0.02 ticks x (3 - 1) contracts x 0.25 = 0.01 -> 5000.26
    price = market_fill_price(i(1), i(3), t(5000.00), t(5000.25), i(Urgency.NORMAL), COSTS, TICK)
    close(price, t(5000.26))
    fill = market_order(i(1), i(3), t(5000.00), t(5000.25), t(5000.125), i(Urgency.NORMAL), COSTS, ES)
    assert isinstance(fill, Fill)
    assert fill.filled.tolist() == [True]
    close(fill.price, t(5000.26))
    close(fill.contracts, t(3.0))
    close(fill.fees, t(6.75))  # 3 x 2.25
    # (5000.26 - mid 5000.125) x 3 contracts x $50 = 0.135 x 150 = 20.25
    close(fill.slippage_cost, t(20.25))


def test_market_immediate_urgency() -> None:
    # sell 1 Immediate: bid 5000.00 - 0.5 ticks x 0.25 = 4999.875
    # sell 3 Immediate: bid 5000.00 - (0.02 x 2 + 0.5) x 0.25 = 5000 - 0.135 = 4999.865
    # buy 3 Patient (no surcharge): ask 5000.25 + 0.01 = 5000.26
    price = market_fill_price(
        i(-1, -1, 1),
        i(1, 3, 3),
        t(5000.0, 5000.0, 5000.0),
        t(5000.25, 5000.25, 5000.25),
        i(Urgency.IMMEDIATE, Urgency.IMMEDIATE, Urgency.PATIENT),
        COSTS,
        TICK,
    )
    close(price, t(4999.875, 4999.865, 5000.26))


def test_ohlcv_spread_model() -> None:
    # book unknown (NaN, 0, crossed): mid 5000.00 -/+ 1 tick / 2 = 4999.875 / 5000.125, and the
    # modelled fill goes on the tick grid against the trader (buy up, sell down):
    # buy 1 Normal -> 5000.125 -> 5000.25; sell 2 Normal -> 4999.875 - 0.02 x 1 x 0.25 = 4999.87
    # -> 4999.75; buy 1 on a crossed book (bid 5001 > ask 5000) -> the spread model too -> 5000.25
    bid = t(NAN, 0.0, 5001.0)
    ask = t(NAN, 0.0, 5000.0)
    mid = t(5000.0, 5000.0, 5000.0)
    price = market_fill_price(i(1, -1, 1), i(1, 2, 1), bid, ask, i(0, 0, 0), COSTS, TICK, mid=mid)
    close(price, t(5000.25, 4999.75, 5000.25))
    # a two-tick spread model: buy 1 at 5000 + 2 x 0.25 / 2 = 5000.25
    wide = CostConfig(spread_model_ticks=2.0)
    close(market_fill_price(i(1), i(1), t(NAN), t(NAN), i(0), wide, TICK, mid=t(5000.0)), t(5000.25))
    # the book wins where it is known, whatever the mid
    q_bid, q_ask = effective_quote(t(4990.0, NAN), t(4990.5, NAN), t(5000.0, 5000.0), COSTS, TICK)
    close(q_bid, t(4990.0, 4999.875))
    close(q_ask, t(4990.5, 5000.125))


def test_market_batched_mixed_sides() -> None:
    # book 5000.00 / 5000.25, mid 5000.125:
    # row 0: buy 1 Normal    -> 5000.25; slip cost (5000.25 - 5000.125) x 1 x 50 = 6.25
    # row 1: sell 3 Normal   -> 5000.00 - 0.01 = 4999.99; (5000.125 - 4999.99) x 3 x 50 = 20.25
    # row 2: buy 2 Immediate -> 5000.25 + (0.02 + 0.5) x 0.25 = 5000.38; 0.255 x 2 x 50 = 25.5
    # row 3: no trade (side 0) -> nothing filled, no fees, no cost, price = reference
    n = 4
    bid, ask, mid = t(*[5000.0] * n), t(*[5000.25] * n), t(*[5000.125] * n)
    fill = market_order(
        i(1, -1, 1, 0), i(1, 3, 2, 2), bid, ask, mid, i(0, 0, Urgency.IMMEDIATE, 0), COSTS, ES
    )
    assert fill.filled.tolist() == [True, True, True, False]
    close(fill.price, t(5000.25, 4999.99, 5000.38, 5000.125))
    close(fill.contracts, t(1.0, -3.0, 2.0, 0.0))
    close(fill.fees, t(2.25, 6.75, 4.5, 0.0))
    close(fill.slippage_cost, t(6.25, 20.25, 25.5, 0.0))


def test_net_pnl_identity_round_trip() -> None:
    # buy 1 at market: fill 5000.25 (mid 5000.125); next row's mid 5001.125.
    # gross (marked at mids) = 1 x (5001.125 - 5000.125) x 50 = 50.00
    # costs: slippage 0.125 x 50 = 6.25, fees 2.25 -> net 41.50
    # cash view: (5001.125 - 5000.25) x 50 - 2.25 = 43.75 - 2.25 = 41.50
    fill = market_order(i(1), i(1), t(5000.0), t(5000.25), t(5000.125), i(0), COSTS, ES)
    gross = mark_to_market(fill.contracts, t(5000.125), t(5001.125), ES.point_value)
    close(gross, t(50.0))
    close(net_pnl(gross, fill.fees, fill.slippage_cost), t(41.5))


# --- limit orders -----------------------------------------------------------------------------


def test_limit_price_at_touch_and_inside() -> None:
    # rows: (buy touch, sell touch) on 5000.00/5000.25; (buy inside, sell inside) on a one-tick
    # spread stay at the touch; on a two-tick spread 5000.00/5000.50 both improve to 5000.25;
    # a locked book 5000/5000 stays at the touch; MARKET gives the far touch
    side = i(1, -1, 1, -1, 1, -1, 1, 1, -1)
    order = i(
        OrderType.LIMIT_AT_TOUCH,
        OrderType.LIMIT_AT_TOUCH,
        OrderType.LIMIT_INSIDE,
        OrderType.LIMIT_INSIDE,
        OrderType.LIMIT_INSIDE,
        OrderType.LIMIT_INSIDE,
        OrderType.LIMIT_INSIDE,
        OrderType.MARKET,
        OrderType.MARKET,
    )
    bid = t(5000.0, 5000.0, 5000.0, 5000.0, 5000.0, 5000.0, 5000.0, 5000.0, 5000.0)
    ask = t(5000.25, 5000.25, 5000.25, 5000.25, 5000.5, 5000.5, 5000.0, 5000.25, 5000.25)
    price = limit_price(side, order, bid, ask, TICK)
    close(price, t(5000.0, 5000.25, 5000.0, 5000.25, 5000.25, 5000.25, 5000.0, 5000.25, 5000.0))


def test_limit_buy_fills_on_trade_through_not_on_thin_touch() -> None:
    # resting buy at 5000.00, 3 contracts, 50 contracts queued ahead at placement. Next rows:
    # 0: low 4999.75 trades through                          -> fill
    # 1: low 5000.00, 30 traded at the price (< 50 + 3)      -> no fill
    # 2: low 5000.00, 53 traded (>= 50 + 3)                  -> fill
    # 3: low 5000.00, 52 traded (one short of our 3)         -> no fill
    # 4: low 5000.00, queue unknown (NaN), 1000 traded       -> no fill (needs a trade-through)
    # 5: low 5000.25, never reaches the price                -> no fill
    n = 6
    side = i(*[1] * n)
    price = t(*[5000.0] * n)
    low = t(4999.75, 5000.0, 5000.0, 5000.0, 5000.0, 5000.25)
    high = t(*[5001.0] * n)
    queue = t(50.0, 50.0, 50.0, 50.0, NAN, 50.0)
    volume = t(0.0, 30.0, 53.0, 52.0, 1000.0, 500.0)
    filled, fill_price = limit_fill(side, price, low, high, queue, volume, contracts=i(*[3] * n))
    assert filled.tolist() == [True, False, True, False, False, False]
    close(fill_price, price)  # the limit price: no price improvement on row 0
    # without the order size, any volume beyond the queue fills: row 3 (52 > 50) now fills
    filled, _ = limit_fill(side, price, low, high, queue, volume)
    assert filled.tolist() == [True, False, True, True, False, False]


def test_a_limit_fill_lies_inside_its_rows_range() -> None:
    # A row that gapped through the order (its whole range beyond the price) fills it at the range's
    # near end, a price that traded, not at the limit (3 of 882 limit fills on 6E bars lay outside
    # their bar's range):
    # 0: buy at 1.0900, the row trades 1.0890 .. 1.0895 (gapped down)   -> 1.0895, its high
    # 1: sell at 1.0900, the row trades 1.0905 .. 1.0910 (gapped up)    -> 1.0905, its low
    # 2: buy at 1.0900, the row trades 1.0895 .. 1.0905 (through it)    -> 1.0900, the limit
    # 3: buy at 1.0900, the row trades 1.0902 .. 1.0905 (missed it)     -> no fill, price as given
    side = i(1, -1, 1, 1)
    price = t(1.09, 1.09, 1.09, 1.09)
    low, high = t(1.0890, 1.0905, 1.0895, 1.0902), t(1.0895, 1.0910, 1.0905, 1.0905)
    filled, fill_price = limit_fill(side, price, low, high, t(NAN, NAN, NAN, NAN), t(0.0, 0.0, 0.0, 0.0))
    assert filled.tolist() == [True, True, True, False]
    close(fill_price, t(1.0895, 1.0905, 1.09, 1.09))
    assert bool(((fill_price >= low) & (fill_price <= high))[filled].all())


def test_queue_ahead_at_placement() -> None:
    # book 5000.00 x 5000.50 (two ticks wide), 7 bid / 9 ask displayed:
    # 0: buy at the bid 5000.00 joins the bid queue       -> 7 ahead
    # 1: buy inside at 5000.25 opens a new level          -> 0 ahead
    # 2: sell at the ask 5000.50 joins the ask queue      -> 9 ahead
    # 3: sell inside at 5000.25                           -> 0 ahead
    # 4: buy at the bid, book unknown (NaN ask)           -> NaN (trade-through only)
    # 5: buy at the bid, size unknown                     -> NaN
    # 6: no order                                         -> NaN
    side = i(1, 1, -1, -1, 1, 1, 0)
    price = t(5000.0, 5000.25, 5000.5, 5000.25, 5000.0, 5000.0, 5000.0)
    bid = t(*[5000.0] * 7)
    ask = t(5000.5, 5000.5, 5000.5, 5000.5, NAN, 5000.5, 5000.5)
    bid_size = t(7.0, 7.0, 7.0, 7.0, 7.0, NAN, 7.0)
    ask_size = t(*[9.0] * 7)
    ahead = queue_ahead(side, price, bid, ask, bid_size, ask_size)
    torch.testing.assert_close(ahead, t(7.0, 0.0, 9.0, 0.0, NAN, NAN, NAN), equal_nan=True, rtol=0, atol=0)


def test_volume_at_price_counts_rows_that_reach_the_price() -> None:
    # buy at 5000.00: low 5000.00 reaches it (12 traded), low 5000.25 misses it, low 4999.75 goes
    # through; sell at 5000.50: high 5000.50 reaches it; a reaching row with unknown volume is NaN
    side = i(1, 1, 1, -1, -1, 1, 0)
    price = t(5000.0, 5000.0, 5000.0, 5000.5, 5000.5, 5000.0, 5000.0)
    low = t(5000.0, 5000.25, 4999.75, 4999.0, 4999.0, 5000.0, 4999.0)
    high = t(5001.0, 5001.0, 5001.0, 5000.5, 5000.25, 5001.0, 5001.0)
    volume = t(12.0, 12.0, 4.0, 3.0, 3.0, NAN, 5.0)
    got = volume_at_price(side, price, low, high, volume)
    torch.testing.assert_close(got, t(12.0, 0.0, 4.0, 3.0, 0.0, NAN, 0.0), equal_nan=True, rtol=0, atol=0)


def test_limit_sell_symmetric_and_side_zero_never_fills() -> None:
    # resting sells at 5000.25: high 5000.50 trades through -> fill; high 5000.25 with no queue
    # ahead (an inside order opened the level) and 1 traded for 1 contract -> fill;
    # high 5000.00 -> no fill; side 0 with a trade-through -> no fill
    side = i(-1, -1, -1, 0)
    price = t(5000.25, 5000.25, 5000.25, 5000.25)
    low = t(4999.0, 4999.0, 4999.0, 4999.0)
    high = t(5000.5, 5000.25, 5000.0, 5000.5)
    filled, _ = limit_fill(side, price, low, high, t(0, 0, 0, 0), t(0, 1, 9, 9), contracts=i(1, 1, 1, 1))
    assert filled.tolist() == [True, True, False, False]


def test_limit_touch_tolerates_float_rounding() -> None:
    # 0.1 + 0.2 = 0.30000000000000004 in float64: a low of 0.3 is AT the price, not through it
    price = torch.tensor([0.1], dtype=F64) + 0.2
    filled, _ = limit_fill(i(1), price, t(0.3), t(1.0), t(NAN), t(NAN))
    assert filled.tolist() == [False]
    filled, _ = limit_fill(i(1), price, t(0.2), t(1.0), t(NAN), t(NAN))
    assert filled.tolist() == [True]


def test_limit_order_fill_costs() -> None:
    # buy 2 at 5000.00; next row trades through (low 4999.50) and marks at 4999.75:
    #   slippage cost = +1 x (5000.00 - 4999.75) x 2 x 50 = +25.00 (adverse selection), fees 4.50
    # buy 1 at 5000.00; next row marks at 5000.125, trades through (low 4999.75):
    #   slippage cost = (5000.00 - 5000.125) x 1 x 50 = -6.25 (the half spread earned)
    # sell 1 at 5000.25, not filled: zeros, price = reference
    fill = limit_order(
        i(1, 1, -1),
        i(2, 1, 1),
        t(5000.0, 5000.0, 5000.25),
        t(4999.5, 4999.75, 4999.0),
        t(5000.0, 5000.25, 5000.0),
        t(NAN, NAN, NAN),
        t(NAN, NAN, NAN),
        t(4999.75, 5000.125, 4999.5),
        COSTS,
        ES,
    )
    assert fill.filled.tolist() == [True, True, False]
    close(fill.price, t(5000.0, 5000.0, 4999.5))
    close(fill.contracts, t(2.0, 1.0, 0.0))
    close(fill.fees, t(4.5, 2.25, 0.0))
    close(fill.slippage_cost, t(25.0, -6.25, 0.0))


def test_patience_and_expiry() -> None:
    urgency = i(Urgency.NORMAL, Urgency.PATIENT, Urgency.IMMEDIATE)
    assert patience(urgency, COSTS).tolist() == [2, 5, 1]
    # ages 1, 5, 0: Normal at 1 < 2 rests, Patient at 5 >= 5 expires, Immediate at 0 < 1 rests
    assert limit_expired(i(1, 5, 0), urgency, COSTS).tolist() == [False, True, False]
    with pytest.raises(ValueError, match="patience_bars"):
        patience(urgency, CostConfig(patience_bars=(2, 5)))


def test_mark_to_market() -> None:
    # long 2 from 5000.00 to 5001.25: 2 x 1.25 x 50 = 125; short 3 from 5000 to 4999.50:
    # -3 x -0.5 x 50 = 75; flat: 0
    pnl = mark_to_market(i(2, -3, 0), t(5000.0, 5000.0, 5000.0), t(5001.25, 4999.5, 4990.0), ES.point_value)
    close(pnl, t(125.0, 75.0, 0.0))


def test_step_functions_trace_without_graph_break() -> None:
    # fullgraph=True fails on .item(), host copies or data-dependent Python control flow
    Ten = torch.Tensor

    def fn(side: Ten, n: Ten, bid: Ten, ask: Ten) -> tuple[Ten, ...]:
        mid = torch.where(torch.isfinite(bid), 0.5 * (bid + ask), torch.full_like(bid, 5000.0))
        market = market_order(side, n, bid, ask, mid, n % 3, COSTS, ES)
        q_bid, q_ask = effective_quote(bid, ask, mid, COSTS, TICK)
        price = limit_price(side, n % 3, q_bid, q_ask, TICK)
        limit = limit_order(side, n, price, q_bid - TICK, q_ask + TICK, n * 0.0, n * 1.0, mid, COSTS, ES)
        expired = limit_expired(n, n % 3, COSTS)
        gross = mark_to_market(market.contracts, mid, mid + TICK, ES.point_value)
        return (*market, *limit, expired, net_pnl(gross, market.fees, market.slippage_cost))

    compiled = torch.compile(fn, backend="eager", fullgraph=True)
    args = (i(1, -1, 1), i(3, 1, 2), t(5000.0, NAN, 5000.0), t(5000.25, NAN, 5000.5))
    for a, b in zip(compiled(*args), fn(*args), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.gpu
def test_cuda_matches_cpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    args_cpu = (
        i(1, -1, 1, 0),
        i(1, 3, 2, 2),
        t(5000.0, 5000.0, NAN, 5000.0),
        t(5000.25, 5000.25, NAN, 5000.25),
    )
    mid = t(5000.125, 5000.125, 5000.0, 5000.125)
    urg = i(0, 0, 2, 0)
    cpu = market_order(*args_cpu, mid, urg, COSTS, ES)
    gpu = market_order(*(a.cuda() for a in args_cpu), mid.cuda(), urg.cuda(), COSTS, ES)
    for a, b in zip(cpu, gpu, strict=True):
        assert b.device.type == "cuda"
        torch.testing.assert_close(b.cpu(), a)
    filled, _ = limit_fill(
        i(1, -1, device="cuda"),
        t(5000.0, 5000.25, device="cuda"),
        t(4999.75, 4999.0, device="cuda"),
        t(5001.0, 5000.25, device="cuda"),
        t(NAN, 0.0, device="cuda"),
        t(NAN, 1.0, device="cuda"),
    )
    assert filled.device.type == "cuda" and filled.tolist() == [True, True]
    assert patience(i(0, 1, 2, device="cuda"), COSTS).device.type == "cuda"


def test_tick_round_one_rounding_equals_ceil_for_buys_and_floor_for_sells() -> None:
    """tick_round's single ``s * ceil(s * ticks - tol)`` gives, bit for bit, the ceiling (buys) and
    the floor (sells) it replaced, on and off the grid, for ES and Euro FX ticks and both dtypes."""
    from foxhunt.env.costs import _TICK_TOL, tick_round

    gen = torch.Generator().manual_seed(11)
    for tick in (0.25, 0.00005):
        for dtype in (torch.float64, torch.float32):
            on_grid = torch.randint(-40_000, 40_000, (3000,), generator=gen).to(dtype) * tick
            off = on_grid + torch.rand(3000, generator=gen).to(dtype) * tick
            price = torch.cat([on_grid, off]) + (5000.0 if tick == 0.25 else 1.09)
            side = torch.randint(-1, 2, price.shape, generator=gen)
            ticks = price / tick
            s = torch.sign(side)
            want = torch.where(
                s > 0,
                torch.ceil(ticks - _TICK_TOL) * tick,
                torch.where(s < 0, torch.floor(ticks + _TICK_TOL) * tick, price),
            )
            assert torch.equal(tick_round(price, side, tick), want)
