"""The trade ledger: every open and close is a trade event, checked by hand and against a reference.

The property test drives the env over random markets and random action sequences and replays the
step's fills through a plain-Python ledger written here; the env's closed trades, its trade counters
and the accounting identities (trade PnL sums to net PnL per window, contracts x per-contract cost
= costs) must agree exactly (to float rounding).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from foxhunt.domain.actions import BranchConfig, Direction, OrderType, Urgency
from foxhunt.domain.exits import ExitReason
from foxhunt.env.config import ContractConfig, CostConfig, EnvConfig
from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.market import MarketTensors, state_feature_columns
from foxhunt.env.trades import STAGES, Entry, FillStage, OpenTrade, book_fill
from tests.factories import plan_config

pytestmark = pytest.mark.usefixtures("one_thread")

L, H, F = int(Direction.LONG), int(Direction.HOLD), int(Direction.FLAT)
MKT, N_ = int(OrderType.MARKET), int(Urgency.NORMAL)
FEE = 1.0  # $ per contract per side
HALF_SPREAD = 0.125  # points: the books below quote mid -/+ half a tick
POINT_VALUE = 50.0  # ES, the instrument of a hand-made market


def _market(mid: list[float], low: list[float] | None = None, high: list[float] | None = None, vol=1e-4):
    m = torch.tensor(mid, dtype=torch.float64)
    n = len(mid)
    cols = state_feature_columns()
    return MarketTensors(
        features=torch.zeros(n, len(cols)),
        mid=m,
        high=m.clone() if high is None else torch.tensor(high, dtype=torch.float64),
        low=m.clone() if low is None else torch.tensor(low, dtype=torch.float64),
        bid=m - HALF_SPREAD,
        ask=m + HALF_SPREAD,
        vol=torch.full((n,), vol, dtype=torch.float64),
        segment=torch.zeros(n, dtype=torch.int64),
        feature_columns=cols,
    )


def _config(episode_rows: int = 6, max_position: int = 2, capital: float = 100_000.0, **plan) -> EnvConfig:
    return EnvConfig(
        branches=BranchConfig(magnitude=2, magnitude_fractions=(0.5, 1.0)),
        costs=CostConfig(
            commission_per_contract=FEE,
            exchange_fee_per_contract=0.0,
            slippage_ticks_per_contract=0.0,
            immediate_slippage_ticks=0.0,
        ),
        contract=ContractConfig(max_position=max_position, initial_capital=capital),
        plan=plan_config(**({"horizon": 50, "profit_mult": 1000.0, "stop_mult": 1000.0} | plan)),
        episode_rows=episode_rows,
    )


def _act(d: int, m: int = 1) -> torch.Tensor:
    return torch.tensor([[d, m, MKT, N_]])


# --- hand-worked -------------------------------------------------------------------------------


def test_round_trip_inside_one_step_is_a_trade() -> None:
    """A two-row window: long 2 at row 0's ask, closed at row 1 (the window's end) at its bid.

    entry 100.125 vs mark 100: slippage 2 x 0.125 x 50 = 12.5 + fees 2 = 14.5; gross 2 x 1 x 50 = 100;
    exit 100.875 vs mark 101: 14.5. Net 71 = one trade (the position was 0 before and after the step,
    so the old ledger, which needed a position at the start of the step, counted none).
    """
    env = TradingEnv(_market([100.0, 101.0, 101.0]), _config(episode_rows=2))
    env.reset(torch.tensor([0]))
    _, r = env.step(_act(L))
    assert env.state.done.item() and env.state.account.position.item() == 0.0
    assert (r.gross.item(), r.costs.item(), r.net.item()) == (100.0, 29.0, 71.0)
    t = r.trades
    assert t.closed[0].tolist() == [False, False, True]  # closed by the EXIT fill
    k = int(FillStage.EXIT)
    assert (t.pnl[0, k].item(), t.gross[0, k].item(), t.costs[0, k].item()) == (71.0, 100.0, 29.0)
    assert (t.side[0, k].item(), t.size[0, k].item(), t.magnitude[0, k].item()) == (1.0, 2.0, 1)
    assert (t.entry_price[0, k].item(), t.exit_price[0, k].item()) == (100.125, 100.875)
    assert (t.entry_row[0, k].item(), t.exit_row[0, k].item()) == (0, 1)
    assert t.reason[0, k].item() == ExitReason.WINDOW_END
    assert (env.state.account.n_trades.item(), env.state.account.n_wins.item()) == (1, 1)
    assert env.state.account.sum_win.item() == 71.0 / 2  # $ per contract, for the Kelly fraction
    assert r.fills[0].tolist() == [2.0, 0.0, -2.0]


def test_stop_on_the_first_checked_row_is_a_trade() -> None:
    # Row 2 trades down through the stop 100 x (1 - 5e-4) = 99.95 of a long bought on row 0 (entry
    # reference: row 1's close; row 1 itself is not checked, the labels' convention).
    mk = _market([100.0, 100.0, 100.0, 100.0], low=[100.0, 100.0, 99.5, 100.0])
    env = TradingEnv(mk, _config(stop_mult=5.0))
    env.reset(torch.tensor([0]))
    _, r0 = env.step(_act(L))
    _, r = env.step(_act(H))
    assert env.state.account.position.item() == 0.0 and r.exit_reason.item() == ExitReason.STOP
    assert r.trades.closed.sum().item() == 1 and r.trades.pnl.sum().item() == r0.net.item() + r.net.item()
    assert (r0.net.item(), r.net.item()) == (-14.5, -14.5)  # fee 2 x $1 + half spread 2 x 0.125 x 50
    assert env.state.account.n_trades.item() == 1 and env.state.account.n_wins.item() == 0


def test_a_breakeven_trade_is_no_loss_in_kellys_odds(monkeypatch) -> None:
    """Long 2 at row 0's ask 100.125, closed at row 1's bid 100.125 without fees: net 0, a breakeven.
    Kelly's odds (env/sizing.py) count it as neither a win nor a loss; they once counted every trade
    that was not a win as a loss."""
    import foxhunt.env.transition as transition

    seen: list[tuple[int, int, int]] = []
    real = transition.kelly_fraction

    def recorded(wins, losses, sum_win, sum_loss, n_trades, *rest):
        seen.append((int(wins.item()), int(losses.item()), int(n_trades.item())))
        return real(wins, losses, sum_win, sum_loss, n_trades, *rest)

    monkeypatch.setattr(transition, "kelly_fraction", recorded)
    cfg = _config(episode_rows=3)
    cfg = cfg.model_copy(update={"costs": cfg.costs.model_copy(update={"commission_per_contract": 0.0})})
    env = TradingEnv(_market([100.0, 100.25, 100.25, 100.25]), cfg)
    env.reset(torch.tensor([0]))
    _, r0 = env.step(_act(L))
    _, r1 = env.step(_act(F))
    env.step(_act(H))
    assert r1.trades.closed.sum().item() == 1 and r1.trades.pnl.sum().item() == 0.0  # the breakeven
    assert seen[-1] == (0, 0, 1)  # the last step's Kelly: one trade, no win, no loss
    acc = env.state.account
    assert (acc.n_trades.item(), acc.n_wins.item(), acc.n_losses.item()) == (1, 0, 0)


def _trade(side: float, opened: float, entry_value: float, gross: float, costs: float) -> OpenTrade:
    def t(x: float) -> torch.Tensor:
        return torch.tensor([x], dtype=torch.float64)

    i = torch.tensor([3], dtype=torch.int64)
    # opened by a LimitAtTouch order of Patient urgency whose fill cost 4.5 of the 14.5
    return OpenTrade(
        t(side), i, i - 2, t(opened), t(entry_value), t(0.0), t(0.0), t(gross), t(costs), i - 2, i - 2, t(4.5)
    )


def _fill(trade: OpenTrade, position: float, contracts: float, price: float, costs: float):
    f64 = torch.float64
    return book_fill(
        trade,
        torch.tensor([position], dtype=f64),
        torch.tensor([contracts], dtype=f64),
        torch.tensor([price], dtype=f64),
        torch.tensor([costs], dtype=f64),
        torch.tensor([7]),
        Entry(*(torch.tensor([int(x)]) for x in (0, OrderType.MARKET, Urgency.IMMEDIATE))),
        torch.tensor([int(ExitReason.AGENT_CLOSE)]),
    )


def test_a_reversal_closes_one_trade_and_opens_the_next() -> None:
    """Long 2 (opened at 100.125 on row 3, gross 50, costs 14.5) sells 5 at 99 on row 7, costs 10.

    The first 2 contracts close the long (2/5 of the costs: 4): net 50 - 18.5 = 31.5, reason flip.
    The other 3 open a short at 99 with the remaining 6 of the costs.
    """
    nxt, closed = _fill(_trade(1.0, 2.0, 200.25, 50.0, 14.5), 2.0, -5.0, 99.0, 10.0)
    assert closed.closed.item() and closed.reason.item() == ExitReason.FLIP
    assert (closed.pnl.item(), closed.costs.item(), closed.size.item()) == (31.5, 18.5, 2.0)
    assert (closed.entry_price.item(), closed.exit_price.item()) == (100.125, 99.0)
    assert (closed.entry_row.item(), closed.exit_row.item(), closed.magnitude.item()) == (3, 7, 1)
    assert (nxt.side.item(), nxt.opened.item(), nxt.entry_value.item()) == (-1.0, 3.0, 297.0)
    assert (nxt.costs.item(), nxt.gross.item()) == (6.0, 0.0)
    assert (nxt.entry_row.item(), nxt.magnitude.item()) == (7, 0)
    # how each was entered: the closed long by its limit order (its entry fill's 4.5 of the 18.5), the
    # new short by this fill's market order (Immediate), its whole 6 an entry cost
    assert (closed.order_type.item(), closed.urgency.item(), closed.entry_costs.item()) == (1, 1, 4.5)
    assert (nxt.order_type.item(), nxt.urgency.item(), nxt.entry_costs.item()) == (0, 2, 6.0)


def test_reductions_and_additions_stay_in_the_trade() -> None:
    # Long 2 at 100; sell 1 at 101 (reduce), buy 1 at 102 (add), sell 2 at 103: one trade of 3.
    t, c1 = _fill(_trade(1.0, 2.0, 200.0, 0.0, 2.0), 2.0, -1.0, 101.0, 1.0)
    t, c2 = _fill(t, 1.0, 1.0, 102.0, 1.0)
    t, c3 = _fill(t, 2.0, -2.0, 103.0, 2.0)
    assert not c1.closed.item() and not c2.closed.item() and c3.closed.item()
    assert (c3.size.item(), c3.entry_price.item(), c3.exit_price.item()) == (3.0, 302.0 / 3, 307.0 / 3)
    assert c3.costs.item() == 6.0 and c3.reason.item() == ExitReason.AGENT_CLOSE
    assert t.side.item() == 0.0 and t.opened.item() == 0.0 and t.entry_row.item() == -1


# --- property: the env's ledger against a plain-Python one --------------------------------------


_REF_FIELDS = ("pnl", "side", "size", "entry_price", "exit_price", "entry_row", "exit_row", "reason")


class _RefLedger:
    """Round trips from the fills, one episode, plain Python (the same rules as the module docstring
    of foxhunt.env.trades: a fill against the position closes up to the position, the rest opens)."""

    def __init__(self) -> None:
        self.position = 0.0
        self.open: dict | None = None
        self.trades: list[dict] = []

    def mark(self, gross: float) -> None:
        if self.open is not None:
            self.open["gross"] += gross
        else:
            assert gross == 0.0

    def fill(self, q: float, price: float, cost: float, row: int, forced: int) -> None:
        if q == 0:
            return
        p = self.position
        closing = min(abs(q), abs(p)) if p * q < 0 else 0.0
        if closing:
            o = self.open
            o["closed"] += closing
            o["exit_value"] += closing * price
            o["costs"] += cost * closing / abs(q)
            if abs(q) >= abs(p):  # the position reached 0 or reversed: the trade is done
                reason = ExitReason.FLIP if abs(q) > abs(p) else (forced or ExitReason.AGENT_CLOSE)
                self.trades.append(
                    {
                        "pnl": o["gross"] - o["costs"],
                        "side": o["side"],
                        "size": o["opened"],
                        "entry_price": o["entry_value"] / o["opened"],
                        "exit_price": o["exit_value"] / o["closed"],
                        "entry_row": o["entry_row"],
                        "exit_row": row,
                        "reason": int(reason),
                    }
                )
                self.open = None
        opening = abs(q) - closing
        if opening:
            if self.open is None:
                side = math.copysign(1.0, q)
                self.open = {"side": side, "opened": 0.0, "entry_value": 0.0, "closed": 0.0}
                self.open |= {"exit_value": 0.0, "gross": 0.0, "costs": 0.0, "entry_row": row}
            self.open["opened"] += opening
            self.open["entry_value"] += opening * price
            self.open["costs"] += cost * opening / abs(q)
        self.position = p + q


@st.composite
def _scenarios(draw: st.DrawFn) -> dict:
    rows = draw(st.integers(8, 28))
    moves = draw(st.lists(st.integers(-2, 2), min_size=rows, max_size=rows))
    mid = [100.0 + 0.25 * sum(moves[: i + 1]) for i in range(rows)]
    wick = draw(st.lists(st.integers(0, 3), min_size=2 * rows, max_size=2 * rows))
    high = [m + 0.25 * w for m, w in zip(mid, wick[:rows], strict=True)]
    low = [m - 0.25 * w for m, w in zip(mid, wick[rows:], strict=True)]
    n_env = draw(st.integers(1, 3))
    starts = draw(st.lists(st.integers(0, rows - 3), min_size=n_env, max_size=n_env))
    episode_rows = draw(st.integers(2, 12))
    market_only = draw(st.booleans())
    steps = episode_rows - 1
    sizes = (4, 2, 1 if market_only else 3, 3)
    actions = [
        [[draw(st.integers(0, k - 1)) for k in sizes] for _ in range(n_env)] for _ in range(steps)
    ]
    return {
        "mid": mid,
        "high": high,
        "low": low,
        "starts": starts,
        "actions": actions,
        "market_only": market_only,
        "cfg": {
            "episode_rows": episode_rows,
            "max_position": draw(st.integers(1, 4)),
            "capital": draw(st.sampled_from([100_000.0, 600.0])),  # 600: the capital floor can end it
            "horizon": draw(st.integers(1, 5)),
            "profit_mult": draw(st.sampled_from([1.0, 3.0, 1000.0])),
            "stop_mult": draw(st.sampled_from([1.0, 3.0, 1000.0])),
        },
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_scenarios())
def test_env_ledger_matches_a_reference_ledger(sc: dict) -> None:
    cfg = _config(**sc["cfg"])
    if sc["market_only"]:
        cfg = cfg.model_copy(update={"branches": cfg.branches.model_copy(update={"order_type": 1})})
    env = TradingEnv(_market(sc["mid"], sc["low"], sc["high"], vol=1e-3), cfg)
    n = len(sc["starts"])
    env.reset(torch.tensor(sc["starts"]))
    refs = [_RefLedger() for _ in range(n)]
    got: list[list[dict]] = [[] for _ in range(n)]
    net = [0.0] * n
    costs = [0.0] * n
    contracts = [0.0] * n
    for acts in sc["actions"]:
        rows = env.state.row.tolist()
        pos_before = env.state.account.position.tolist()
        _, r = env.step(torch.tensor(acts))
        _check_step(r, env, pos_before)
        for e in range(n):
            if not r.written[e]:
                continue
            fills, prices, fcosts = r.fills[e].tolist(), r.fill_price[e].tolist(), r.fill_costs[e].tolist()
            ref = refs[e]
            ref.fill(fills[0], prices[0], fcosts[0], rows[e], 0)  # FillStage.ORDER at row r
            ref.mark(r.gross[e].item())
            ref.fill(fills[1], prices[1], fcosts[1], rows[e] + 1, 0)  # RESTING at row r+1
            ref.fill(fills[2], prices[2], fcosts[2], rows[e] + 1, int(r.exit_reason[e]))  # EXIT
            assert ref.position == env.state.account.position[e].item()
            net[e] += r.net[e].item()
            costs[e] += r.costs[e].item()
            contracts[e] += sum(abs(q) for q in fills)
            for k in range(STAGES):
                if r.trades.closed[e, k]:
                    got[e].append({f: getattr(r.trades, f)[e, k].item() for f in _REF_FIELDS})
    assert env.state.done.all()  # every window ran to its end or the capital floor
    for e in range(n):
        want = refs[e].trades
        assert refs[e].position == 0.0 and refs[e].open is None  # the window's end closed everything
        assert len(got[e]) == len(want) == env.state.account.n_trades[e].item()
        for g, w in zip(got[e], want, strict=True):
            assert g == pytest.approx(w, rel=1e-12, abs=1e-9)
            # No partial fills under the plan lock: the marks telescope to the fill prices.
            fees = 2 * w["size"] * FEE
            direct = w["side"] * w["size"] * (w["exit_price"] - w["entry_price"]) * POINT_VALUE - fees
            assert w["pnl"] == pytest.approx(direct, abs=1e-9)
        assert sum(t["pnl"] for t in got[e]) == pytest.approx(net[e], abs=1e-9)  # per window
        assert env.state.account.n_wins[e].item() == sum(t["pnl"] > 0 for t in want)
        if sc["market_only"]:  # every fill crosses a known book: fee + half spread per contract
            assert costs[e] == pytest.approx(contracts[e] * (FEE + HALF_SPREAD * POINT_VALUE), abs=1e-9)


def _check_step(r: StepResult, env: TradingEnv, pos_before: list[float]) -> None:
    """Per step: the fills move the position, their costs are the step's costs."""
    after = torch.tensor(pos_before, dtype=torch.float64) + r.fills.sum(dim=1)
    assert torch.equal(after, env.state.account.position)
    assert torch.allclose(r.fill_costs.sum(dim=1), r.costs, rtol=0, atol=1e-9)
    assert (r.trades.closed.sum(dim=1) <= STAGES).all()
