"""Batched, deterministic evaluation of a policy over every validation window of a fold (SPEC §9).

The validation rows of a fold are cut into consecutive windows of ``episode_rows`` rows, one
episode each, all stepped together by one :class:`~foxhunt.env.core.TradingEnv` (the same step
and state assembly as training). A policy is a callable ``(state [N, W], env) -> actions [N, 4]``
(or a :class:`Decision`, as the agent returns, that steps the env with its sizing inputs);
a recorded action array ``[E, T, 4]`` is one too (:func:`recorded`). Scripted policies give known
answers: flat trades nothing, long and short hold one side, random picks every branch uniformly,
and the oracle peeks at the next row's price, which must look implausibly good.

**The long (short) baseline** is "always long under the env's rules", not buy-and-hold: it holds one
long position and, because the plan lock binds every policy alike (SPEC §6), the position leaves
when its plan exits (profit, stop, or the timeout after ``plan.target_bars`` rows) and the baseline
buys again on the next step, paying a round trip per plan; each window's last row closes the last
one. Its trade count is therefore the number of plans the windows hold, and ``metrics.json``'s
``exit_reasons`` says which exits made them. On snapshot rows ``target_bars`` counts book updates
(seconds of trading), so on ESH4 2023-12-25 ``long`` holds 903 plans, 864 ended by the timeout and
39 by a window's end, and its costs are those 903 round trips. That is the price of the plan lock,
which is what the agent is judged against. For the buy-and-hold figure give the plan a timeout of
at least a window (``env.plan.target_bars`` >= ``env.episode_rows``) and barriers out of reach
(large ``env.plan.profit_mult`` and ``stop_mult``; the ``labels.`` barrier settings must match, the
config says which): one trade per window, closed at its end (tests/backtest/test_trades.py).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Protocol

import torch
from torch import Tensor

from foxhunt.backtest.metrics import UNDEFINED, StepRecord, TradeDetail
from foxhunt.env.actions import Direction, OrderType, Urgency
from foxhunt.env.config import EnvConfig
from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.market import AUX_TARGETS, MarketTensors
from foxhunt.env.rewards import BRANCHES
from foxhunt.env.trades import STAGES
from foxhunt.validation.labels import Outcome

_DIR, _MAG = BRANCHES.index("direction"), BRANCHES.index("magnitude")


class Decision(Protocol):
    """A policy's richer answer (the agent's): it steps the env itself, passing its sizing inputs."""

    def step(self, env: TradingEnv) -> tuple[Tensor, StepResult]: ...


Policy = Callable[[Tensor, TradingEnv], "Tensor | Decision"]


class ScriptedPolicy(StrEnum):
    FLAT = "flat"
    LONG = "long"
    SHORT = "short"
    RANDOM = "random"
    ORACLE = "oracle"  # peeks at the price a plan horizon ahead: a look-ahead on purpose


def _constant(direction: int, magnitude: int) -> Policy:
    value = {
        "direction": direction,
        "magnitude": magnitude,
        "order_type": int(OrderType.MARKET),
        "urgency": int(Urgency.NORMAL),
    }

    def policy(obs: Tensor, env: TradingEnv) -> Tensor:
        # Filled from Python scalars on the device: no host-to-device copy per step.
        a = torch.empty(obs.shape[0], len(BRANCHES), dtype=torch.int64, device=obs.device)
        for i, name in enumerate(BRANCHES):
            a[:, i] = value[name]
        return a

    return policy


def scripted(kind: ScriptedPolicy, cfg: EnvConfig, seed: int = 0) -> Policy:
    """A scripted policy (Full size, market orders, Normal urgency unless random)."""
    full = cfg.branches.magnitude - 1
    flat = int(Direction.FLAT) if cfg.branches.direction > int(Direction.FLAT) else int(Direction.HOLD)
    if kind is ScriptedPolicy.FLAT:
        return _constant(flat, 0)
    if kind is ScriptedPolicy.LONG:
        return _constant(int(Direction.LONG), full)
    if kind is ScriptedPolicy.SHORT:
        return _constant(int(Direction.SHORT), full)
    if kind is ScriptedPolicy.RANDOM:
        gen: dict[str, torch.Generator] = {}

        def random_policy(obs: Tensor, env: TradingEnv) -> Tensor:
            if "g" not in gen:
                gen["g"] = torch.Generator(device=obs.device).manual_seed(seed)
            sizes = env.codec.sizes
            u = torch.rand(obs.shape[0], len(sizes), generator=gen["g"], device=obs.device)
            return torch.floor(u * torch.tensor(sizes, device=obs.device)).to(torch.int64)

        return random_policy

    horizon = cfg.plan.target_bars

    def oracle(obs: Tensor, env: TradingEnv) -> Tensor:
        # Peeks at the future. With the triple-barrier outcome of the row (the market's aux
        # targets: what a long entered now meets first, on the same barriers as the plan) it goes
        # long before a profit exit and short before a stop (the mirrored short's profit); before
        # a timeout, and without the outcome, it peeks at the price a plan's horizon ahead, where
        # the timeout exits, and takes the side that move pays by more than the costs.
        s = env._state()
        m = env.market
        min_move = 4 * m.instrument.tick_size  # enough to pay the spread and fees
        move = m.mid[torch.clamp(s.row + horizon, max=m.rows - 1)] - m.mid[s.row]
        up, down = move > min_move, move < -min_move
        if m.aux_targets is not None:
            outcome = m.aux_targets[s.row, AUX_TARGETS.index("outcome")]
            barrier = ~torch.isnan(outcome) & (outcome != float(Outcome.TIMEOUT))
            up = torch.where(barrier, outcome == float(Outcome.PROFIT), up)
            down = torch.where(barrier, outcome == float(Outcome.STOP), down)
        d = torch.where(up, int(Direction.LONG), torch.where(down, int(Direction.SHORT), flat))
        a = torch.zeros(obs.shape[0], len(env.codec.sizes), dtype=torch.int64, device=obs.device)
        a[:, _DIR], a[:, _MAG] = d, full
        return a

    return oracle


def recorded(actions_ETA: Tensor) -> Policy:
    """A policy that replays a recorded ``[E, T, 4]`` action array (step t uses ``[:, t]``)."""
    t = {"step": 0}

    def policy(obs: Tensor, env: TradingEnv) -> Tensor:
        a = actions_ETA[:, t["step"]].to(obs.device)
        t["step"] += 1
        return a

    return policy


def windows(lo: int, hi: int, episode_rows: int, device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Consecutive windows covering rows ``[lo, hi)``: starts and last rows (inclusive)."""
    if hi - lo < 2:
        raise ValueError(f"a validation block of {hi - lo} rows is too short to evaluate")
    starts = torch.arange(lo, hi - 1, episode_rows - 1, dtype=torch.int64, device=device)
    ends = torch.clamp(starts + episode_rows - 1, max=hi - 1)
    return starts, ends


def evaluate(market: MarketTensors, cfg: EnvConfig, lo: int, hi: int, policy: Policy) -> StepRecord:
    """Run ``policy`` over every window of rows ``[lo, hi)`` at once; the per-step record."""
    starts, ends = windows(lo, hi, cfg.episode_rows, market.device)
    env = TradingEnv(market, cfg)
    obs = env.reset(starts, ends)
    steps = int((ends - starts).max())
    rec = StepRecord.blank(len(starts), steps, market.device, trade_slots=STAGES, ledger=True)
    detail, contracts = rec.trade_detail, rec.contracts
    assert detail is not None and contracts is not None  # ledger=True
    for t in range(steps):
        decision = policy(obs, env)
        obs, res = env.step(decision) if isinstance(decision, Tensor) else decision.step(env)
        rec.written[:, t] = res.written
        rec.gross_pnl[:, t] = res.gross
        rec.costs[:, t] = res.costs
        rec.position[:, t] = env.state.position
        rec.equity[:, t] = env.state.equity
        rec.picked_direction[:, t] = res.picked[:, 0]
        rec.picked_magnitude[:, t] = res.picked[:, 1]
        rec.picked_order[:, t] = res.picked[:, 2]
        rec.picked_urgency[:, t] = res.picked[:, 3]
        rec.realised_direction[:, t] = res.realised_direction
        rec.realised_magnitude[:, t] = res.realised_magnitude
        contracts[:, t] = res.fills.abs().sum(dim=1)
        rec.trade_closed[:, t] = res.trades.closed
        rec.trade_pnl[:, t] = res.trades.pnl
        rec.closed_magnitude[:, t] = res.trades.magnitude
        for name in TradeDetail._fields:
            getattr(detail, name)[:, t] = getattr(res.trades, name)
    return rec


def evaluate_many(
    market: MarketTensors, cfg: EnvConfig, lo: int, hi: int, actions_PR4: Tensor, *, graph: bool | None = None
) -> dict[str, Tensor]:
    """Evaluate P recorded policies at once over rows ``[lo, hi)``; per-policy summary ``[P]``.

    ``actions_PR4[p, r - lo]`` is policy p's action on row r (any integer dtype). Every policy runs
    over the same windows, all P x W episodes in one batch; the per-step quantities are reduced on
    the fly (no [episodes, steps] record is kept, so thousands of policies over 10^5 rows fit in
    memory): net/gross PnL, costs, closed trades and wins, the per-step return's sum and sum of
    squares (Sharpe per bar) and the max drawdown of each policy's summed equity path. On CUDA the
    step is replayed as a captured graph (``graph=None``: when available).
    """
    p_count = actions_PR4.shape[0]
    starts, ends = windows(lo, hi, cfg.episode_rows, market.device)
    w_count = starts.shape[0]
    env = TradingEnv(market, cfg)
    env.reset(starts.repeat(p_count), ends.repeat(p_count))
    policy_of = torch.arange(p_count, device=market.device).repeat_interleave(w_count)
    acts = actions_PR4.to(market.device)
    use_graph = market.device.type == "cuda" if graph is None else graph
    stepper = None
    if use_graph:
        from foxhunt.env.graph import GraphedStep

        stepper = GraphedStep(env)
    f64 = torch.float64
    zero = torch.zeros(p_count, dtype=f64, device=market.device)
    out = {k: zero.clone() for k in ("net_pnl", "gross_pnl", "costs", "ret_sum", "ret_sq", "steps")}
    out.update(trades=zero.clone(), wins=zero.clone())
    equity = zero + cfg.contract.initial_capital * w_count  # each policy's windows, summed
    peak = equity.clone()
    drawdown = zero.clone()
    steps = int((ends - starts).max())
    for _ in range(steps):
        s = env._state()
        a = acts[policy_of, torch.clamp(s.row - lo, max=acts.shape[1] - 1)].to(torch.int64)
        res = stepper.step(a) if stepper is not None else env.step(a)[1]
        w = res.written.to(f64)
        out["net_pnl"].index_add_(0, policy_of, res.net)
        out["gross_pnl"].index_add_(0, policy_of, res.gross)
        out["costs"].index_add_(0, policy_of, res.costs)
        closed = res.trades.closed
        out["trades"].index_add_(0, policy_of, closed.sum(dim=1).to(f64))
        out["wins"].index_add_(0, policy_of, (closed & (res.trades.pnl > 0)).sum(dim=1).to(f64))
        step_net = torch.zeros_like(zero).index_add_(0, policy_of, res.net)
        step_w = torch.zeros_like(zero).index_add_(0, policy_of, w)
        ret = step_net / equity
        live = step_w > 0
        out["ret_sum"] += torch.where(live, ret, 0.0)
        out["ret_sq"] += torch.where(live, ret * ret, 0.0)
        out["steps"] += live.to(f64)
        equity = equity + step_net
        peak = torch.maximum(peak, equity)
        drawdown = torch.maximum(drawdown, (peak - equity) / peak)
    n = out["steps"].clamp(min=1.0)
    mean = out["ret_sum"] / n
    var = (out["ret_sq"] / n - mean * mean).clamp(min=0.0)
    out["sharpe_per_bar"] = torch.where(var > 0, mean / var.sqrt(), torch.zeros_like(mean))
    out["max_drawdown"] = drawdown
    has = out["trades"] > 0
    out["win_rate"] = torch.where(has, out["wins"] / out["trades"].clamp(min=1.0), UNDEFINED)
    return out
