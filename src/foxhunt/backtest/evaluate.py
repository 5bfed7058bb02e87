"""Batched, deterministic evaluation of a policy over every validation window of a fold (docs/design.md §8).

The validation rows of a fold are cut into consecutive windows of ``episode_rows`` rows, one
episode each, all stepped together by one :class:`~foxhunt.env.core.TradingEnv` (the same step
and state assembly as training). A policy is a callable ``(state [N, W], env) -> actions [N, 4]``
(or an :class:`EnvStepper`, as the agent returns, that steps the env with its sizing inputs);
a recorded action array ``[E, T, 4]`` is one too (:func:`recorded`). Scripted policies give known
answers: flat trades nothing, long and short hold one side, buy_hold buys once a window and holds
to its end, random picks every branch uniformly, and the oracle peeks at the next row's price, which
must look implausibly good (the baselines' names and what they do: :mod:`foxhunt.domain.baselines`).

**The long (short) baseline** is "always long under the env's rules", not buy-and-hold: it holds one
long position and, because the plan lock binds every policy alike (docs/design.md §5), the position leaves
when its plan exits (profit, stop, or the timeout after ``plan.barrier.horizon`` rows) and the
baseline buys again on the next step, paying a round trip per plan; each window's last row closes the
last one. Its trade count is therefore the number of plans the windows hold, and ``metrics.json``'s
``exit_reasons`` says which exits made them. On snapshot rows the horizon counts book updates
(seconds of trading), so on ESH4 2023-12-25 ``long`` holds 903 plans, 864 ended by the timeout and
39 by a window's end, and its costs are those 903 round trips. That is the price of the plan lock,
which is what the agent is judged against.

**The env step** of an evaluation is a step mode's (:func:`step_function`, the values of
:class:`foxhunt.agent.collect.StepMode`; ``foxhunt train`` passes its agent's ``step_mode``, so
validation steps as collection does): ``auto`` replays the step (policy, env step, the record's
writes) as one CUDA graph on CUDA, the env step compiled by Inductor from 1,024 episodes, and on the
CPU steps the plain loop (the reference); ``fused`` runs the env step as one Triton kernel
(:mod:`foxhunt.env.fused`) in the same captured step, every window of the validation period (or
every policy x window of the recorded-policy backtest, :class:`RecordedPolicies`) one episode of the
batch, no host read inside the loop. Its records equal the eager loop's exactly
(tests/backtest/test_fused_evaluation.py); bench/validation_speed.py times the modes side by side.

**The buy-and-hold baseline** (``buy_hold``) is the same Full long under :func:`scripted_env`'s
plan: no profit or stop level and a timeout longer than a window, so it buys once at each window's
start and the window's last row sells: one round trip per window (tests/backtest/test_trades.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Protocol

import torch
from torch import Tensor

from foxhunt.backtest.decisions import DecisionRecord, DecisionRow
from foxhunt.backtest.metrics import UNDEFINED, StepRecord, TradeDetail
from foxhunt.domain.actions import BRANCHES, Direction, OrderType, Urgency
from foxhunt.domain.exits import ExitReason, outcome_class
from foxhunt.domain.sharpe import sharpe_ratio
from foxhunt.env.config import EnvConfig
from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.graph import CapturablePolicy, capture
from foxhunt.env.market import AUX_TARGETS, MarketTensors
from foxhunt.env.state import Portfolio
from foxhunt.env.trades import STAGES
from foxhunt.seeding import generator

_DIR, _MAG = BRANCHES.index("direction"), BRANCHES.index("magnitude")


class EnvStepper(Protocol):
    """A policy's richer answer (the agent's): it steps the env itself, passing its sizing inputs."""

    def step(self, env: TradingEnv) -> tuple[Tensor, StepResult]: ...


Policy = Callable[[Tensor, TradingEnv], "Tensor | EnvStepper"]


class ScriptedPolicy(StrEnum):
    FLAT = "flat"
    LONG = "long"
    BUY_HOLD = "buy_hold"  # long once a window, held to its end: scripted_env's plan
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
    """A scripted policy (Full size, market orders, Normal urgency unless random). All but random
    are pure functions of the device state, marked capturable (one CUDA graph per step on CUDA)."""
    full = cfg.branches.magnitude - 1
    flat = int(Direction.FLAT) if cfg.branches.direction > int(Direction.FLAT) else int(Direction.HOLD)
    if kind is ScriptedPolicy.FLAT:
        return CapturablePolicy(_constant(flat, 0))
    if kind in (ScriptedPolicy.LONG, ScriptedPolicy.BUY_HOLD):  # buy_hold: the plan of scripted_env
        return CapturablePolicy(_constant(int(Direction.LONG), full))
    if kind is ScriptedPolicy.SHORT:
        return CapturablePolicy(_constant(int(Direction.SHORT), full))
    if kind is ScriptedPolicy.RANDOM:
        gen: dict[str, torch.Generator] = {}

        def random_policy(obs: Tensor, env: TradingEnv) -> Tensor:
            if "g" not in gen:
                gen["g"] = generator(seed, obs.device)
            sizes = env.codec.sizes
            u = torch.rand(obs.shape[0], len(sizes), generator=gen["g"], device=obs.device)
            return torch.floor(u * torch.tensor(sizes, device=obs.device)).to(torch.int64)

        return random_policy

    horizon = cfg.plan.barrier.horizon

    def oracle(obs: Tensor, env: TradingEnv) -> Tensor:
        # Peeks at the future. With the triple-barrier outcome of the row (the market's aux
        # targets: what a long entered now meets first, on the same barriers as the plan) it goes
        # long before a profit exit and short before a stop (the mirrored short's profit); before
        # a timeout, and without the outcome, it peeks at the price where the timeout exits, and
        # takes the side that move pays by more than the costs. A market order at row r opens a plan
        # whose entry row is r+1 (its barriers are checked on r+2 .. r+1+horizon, env/core.py), so
        # the outcome that decides is the label of row r+1 and the timeout exits at r+1+horizon.
        s = env._state()
        m = env.market
        min_move = 4 * m.instrument.tick_size  # enough to pay the spread and fees
        entry = torch.clamp(s.row + 1, max=m.rows - 1)
        move = m.mid[torch.clamp(entry + horizon, max=m.rows - 1)] - m.mid[s.row]
        up, down = move > min_move, move < -min_move
        if m.aux_targets is not None:
            outcome = m.aux_targets[entry, AUX_TARGETS.index("outcome")]
            barrier = ~torch.isnan(outcome) & (outcome != float(outcome_class(ExitReason.TIMEOUT)))
            up = torch.where(barrier, outcome == float(outcome_class(ExitReason.PROFIT)), up)
            down = torch.where(barrier, outcome == float(outcome_class(ExitReason.STOP)), down)
        d = torch.where(up, int(Direction.LONG), torch.where(down, int(Direction.SHORT), flat))
        a = torch.zeros(obs.shape[0], len(env.codec.sizes), dtype=torch.int64, device=obs.device)
        a[:, _DIR], a[:, _MAG] = d, full
        return a

    return CapturablePolicy(oracle)


def scripted_env(kind: ScriptedPolicy, cfg: EnvConfig) -> EnvConfig:
    """The env config a scripted policy is evaluated under: ``cfg`` itself, but for buy-and-hold.

    Buy-and-hold's plan never exits before its window ends: profit and stop levels at infinity
    (``entry x (1 +- inf x vol)``: no row's range touches them), no trailing stop, and a timeout of a
    whole window (a plan's hold counts rows from its entry, which is at least the window's second
    row, so it never reaches ``episode_rows``); the window's last row closes it. Costs, sizing and
    the capital floor stay the config's. Built with ``model_copy`` (no validation) because the
    config's bounds are for what a person types, and infinity is the exact "never" meant here.
    """
    if kind is not ScriptedPolicy.BUY_HOLD:
        return cfg
    plan = cfg.plan
    barrier = plan.barrier.model_copy(
        update={"profit_mult": math.inf, "stop_mult": math.inf, "horizon": cfg.episode_rows}
    )
    return cfg.model_copy(update={"plan": plan.model_copy(update={"barrier": barrier, "trailing_mult": 0.0})})


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


def step_function(
    mode: str, device: torch.device, n: int, *, graph: bool | None = None, compile: bool | None = None
) -> tuple[Callable[..., tuple[StepResult, Tensor]], bool]:
    """``(advance, graph)``: the env step an evaluation of ``n`` episodes on ``device`` runs under the
    step mode ``mode`` (a :class:`foxhunt.agent.collect.StepMode` value), and whether it is captured
    as a CUDA graph. ``graph`` and ``compile``, when given, override what the mode says.

    ``auto``: a graph on CUDA, the env step compiled by Inductor from
    :data:`~foxhunt.env.graph.COMPILE_MIN_BATCH` episodes; eager on the CPU (the reference).
    ``fused``: :func:`foxhunt.env.fused.fused_advance` (the step as one Triton kernel), a graph on
    CUDA; on the CPU it runs only under Triton's interpreter (``TRITON_INTERPRET=1``, the tests).
    The others as :class:`~foxhunt.agent.collect.StepMode` says (a graph needs CUDA).
    """
    from foxhunt.agent.collect import StepMode  # the agent's modes (not imported by a scripted backtest)
    from foxhunt.env.graph import COMPILE_MIN_BATCH, advance, compiled_advance

    m, cuda = StepMode(mode), device.type == "cuda"
    if m is StepMode.AUTO:
        want_graph, want_compile = cuda, cuda and n >= COMPILE_MIN_BATCH
    else:
        want_graph = m in (StepMode.GRAPH, StepMode.COMPILED_GRAPH, StepMode.FUSED) and cuda
        want_compile = m in (StepMode.COMPILED, StepMode.COMPILED_GRAPH)
        if m in (StepMode.GRAPH, StepMode.COMPILED_GRAPH) and not cuda and graph is not False:
            raise ValueError(f"step mode {m.value} needs a CUDA device, the market is on {device}")
    graph = want_graph if graph is None else graph
    compile = want_compile if compile is None else compile
    if graph and not cuda:
        raise ValueError(f"a CUDA graph needs a CUDA device, the market is on {device}")
    if m is StepMode.FUSED:
        from foxhunt.env.fused import fused_advance  # imports Triton: only where asked for

        return fused_advance, graph
    return (compiled_advance() if compile else advance), graph


def _record_step(rec: StepRecord, t: Tensor | int, res: StepResult, state: Portfolio) -> None:
    """Write one step's result into column ``t`` of ``rec`` (``t`` a ``[1]`` device index or an int)."""
    detail, contracts, limits = rec.trade_detail, rec.contracts, rec.limit_orders
    assert detail is not None and contracts is not None and limits is not None  # ledger=True
    cols = [
        (rec.written, res.written),
        (rec.gross_pnl, res.gross),
        (rec.costs, res.costs),
        (rec.position, state.account.position),
        (rec.equity, state.account.equity),
        (rec.picked_direction, res.picked[:, 0]),
        (rec.picked_magnitude, res.picked[:, 1]),
        (rec.picked_order, res.picked[:, 2]),
        (rec.picked_urgency, res.picked[:, 3]),
        (rec.realised_direction, res.realised_direction),
        (rec.realised_magnitude, res.realised_magnitude),
        (contracts, res.fills.abs().sum(dim=1)),
        (limits, res.limit_orders),
        (rec.trade_closed, res.trades.closed),
        (rec.trade_pnl, res.trades.pnl),
        (rec.closed_magnitude, res.trades.magnitude),
        *((getattr(detail, name), getattr(res.trades, name)) for name in TradeDetail._fields),
    ]
    for dst, src in cols:
        if isinstance(t, int):
            dst[:, t] = src
        else:  # a device index: no host value, so the write can be captured in a CUDA graph
            dst.index_copy_(1, t, src.unsqueeze(1).to(dst.dtype))


def evaluate(
    market: MarketTensors,
    cfg: EnvConfig,
    lo: int,
    hi: int,
    policy: Policy,
    *,
    graph: bool | None = None,
    mode: str = "auto",
) -> StepRecord:
    """Run ``policy`` over every window of rows ``[lo, hi)`` at once; the per-step record.

    A :class:`~foxhunt.env.graph.CapturablePolicy` (a pure function of the state on the device, as
    the agent's greedy policy is) runs on CUDA as one captured step per window shape
    (``graph=None``: when available): policy, env step (Inductor-compiled) and the record's writes
    replayed once per step (:class:`GraphedEvaluation`), cached on the policy and reused by every
    later evaluation of the same rows (each epoch's validation). Other policies step eagerly.

    ``mode`` (a :class:`foxhunt.agent.collect.StepMode` value) picks the env step
    (:func:`step_function`): ``auto`` as above; ``eager`` the plain loop; ``fused`` the step as one
    Triton kernel, with the policy and the record's writes replayed as one graph per step on CUDA
    (a policy not marked capturable runs the same step without a graph).
    """
    capturable = isinstance(policy, CapturablePolicy)
    if mode == "auto":
        if (market.device.type == "cuda" and capturable) if graph is None else graph:
            return GraphedEvaluation.of(market, cfg, lo, hi, policy).run()
    elif mode != "eager" or graph:
        use = graph if graph is not None else (None if capturable else False)
        return GraphedEvaluation.of(market, cfg, lo, hi, policy, mode=mode, graph=use).run()
    starts, ends = windows(lo, hi, cfg.episode_rows, market.device)
    env = TradingEnv(market, cfg)
    obs = env.reset(starts, ends)
    steps = int((ends - starts).max())
    rec = StepRecord.blank(len(starts), steps, market.device, trade_slots=STAGES, ledger=True)
    for t in range(steps):
        decision = policy(obs, env)
        obs, res = env.step(decision) if isinstance(decision, Tensor) else decision.step(env)
        _record_step(rec, t, res, env._state())
    return rec


def capture_step(
    step: Callable[[], object], generators: Sequence[torch.Generator] = ()
) -> tuple[torch.cuda.CUDAGraph, float]:
    """``step`` warmed up twice and captured as one CUDA graph (:func:`foxhunt.env.graph.capture`; the
    caller's run resets what those steps wrote), with the seconds both took."""
    import time

    t0 = time.perf_counter()
    graph, _ = capture(step, warmup=2, generators=generators)
    return graph, time.perf_counter() - t0


class GraphedEvaluation:
    """:func:`evaluate` of a capturable policy as one CUDA graph per step, replayed ``steps`` times.

    The step writes its record column at a device-side counter; the env is reset in place before
    each run, so one capture serves every evaluation of the same windows. ``compile_seconds``: the
    warm-up (Inductor's compile of the env step on first use) and the capture. With ``decisions``
    the step also writes what decisions.csv needs into a :class:`DecisionRecord` (``foxhunt backtest
    --checkpoint``), read back once after the run by :meth:`decision_rows`.
    """

    @classmethod
    def of(
        cls,
        market: MarketTensors,
        cfg: EnvConfig,
        lo: int,
        hi: int,
        policy: Policy,
        *,
        mode: str = "auto",
        graph: bool | None = None,
    ) -> GraphedEvaluation:
        cache = policy.graphs if isinstance(policy, CapturablePolicy) else {}
        key: tuple = (id(market), id(cfg), lo, hi)
        if mode != "auto" or graph is not None:  # another step than the default one's
            key += (mode, graph)
        if key not in cache:
            cache[key] = cls(market, cfg, lo, hi, policy, mode=mode, graph=graph)
        return cache[key]

    def __init__(
        self,
        market: MarketTensors,
        cfg: EnvConfig,
        lo: int,
        hi: int,
        policy: Policy,
        *,
        graph: bool | None = None,
        compile: bool | None = None,
        decisions: bool = False,
        mode: str = "auto",
    ) -> None:
        """``graph``: capture the step (None: on CUDA); ``compile``: compile the env step with Inductor
        (None: on CUDA from ``COMPILE_MIN_BATCH`` windows). Without a graph the same step function
        runs eagerly (the CPU equivalence tests). ``decisions``: record the decision log too.
        ``mode``: the env step (:func:`step_function`: ``fused`` the one-kernel step)."""
        from foxhunt.env.graph import reset_in_place

        self.market, self.cfg, self.policy = market, cfg, policy  # kept: the cache key holds their ids
        self.starts, self.ends = windows(lo, hi, cfg.episode_rows, market.device)
        self.steps = int((self.ends - self.starts).max())
        self.env = TradingEnv(market, cfg)
        self.obs = reset_in_place(self.env, self.starts, self.ends).clone()
        n = len(self.starts)
        self.advance, graph = step_function(mode, market.device, n, graph=graph, compile=compile)
        self.rec = StepRecord.blank(n, self.steps, market.device, trade_slots=STAGES, ledger=True)
        # Allocated before the capture: the graph writes into these buffers by address.
        self.decisions = DecisionRecord.blank(n, self.steps, market.device) if decisions else None
        self.t = torch.zeros(1, dtype=torch.int64, device=market.device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.compile_seconds = 0.0
        if not graph:
            return
        self.graph, self.compile_seconds = capture_step(self._step)

    def _step(self) -> None:
        env = self.env
        state = env._state()
        # The row decided, read before the step advances the state's tensors in place.
        rows = state.row.clone() if self.decisions is not None else None
        decision = self.policy(self.obs, env)
        if isinstance(decision, Tensor):
            res, nxt = self.advance(env, state, decision, True)
        else:
            assert env.aux is not None
            env.aux.copy_(decision.aux)  # type: ignore[attr-defined]  # seen in the next state
            res, nxt = self.advance(
                env,
                state,
                decision.actions,  # type: ignore[attr-defined]
                True,
                decision.direction_conviction,  # type: ignore[attr-defined]
                decision.magnitude_conviction,  # type: ignore[attr-defined]
                decision.q_variance,  # type: ignore[attr-defined]
            )
        _record_step(self.rec, self.t, res, state)
        if self.decisions is not None:
            assert rows is not None
            self.decisions.write(self.t, rows, res)
        self.obs.copy_(nxt)
        self.t += 1

    def run(self) -> StepRecord:
        """Reset the windows in place, replay every step; a copy of the record (the next run reuses it)."""
        from foxhunt.env.graph import reset_in_place

        self.obs.copy_(reset_in_place(self.env, self.starts, self.ends))
        self.t.zero_()
        for _ in range(self.steps):
            if self.graph is not None:
                self.graph.replay()
            else:
                self._step()
        return _clone(self.rec)

    def decision_rows(self, ts_of: Callable[[int], int]) -> list[DecisionRow]:
        """The last run's decision lines (``decisions=True``), its buffers copied to the host once;
        ``ts_of(row)`` is the row's ``ts_event``."""
        if self.decisions is None:
            raise ValueError("this evaluation was built without decisions=True")
        return self.decisions.lines(self.rec, ts_of)


def _clone(rec: StepRecord) -> StepRecord:
    detail = rec.trade_detail
    kw = {
        f.name: getattr(rec, f.name).clone()
        for f in dataclasses.fields(rec)
        if isinstance(getattr(rec, f.name), Tensor)
    }
    if detail is not None:
        kw["trade_detail"] = TradeDetail(*(x.clone() for x in detail))
    return dataclasses.replace(rec, **kw)


def evaluate_many(
    market: MarketTensors,
    cfg: EnvConfig,
    lo: int,
    hi: int,
    actions_PR4: Tensor,
    *,
    graph: bool | None = None,
    mode: str = "auto",
) -> dict[str, Tensor]:
    """Evaluate P recorded policies at once over rows ``[lo, hi)``; per-policy summary ``[P]``.

    ``actions_PR4[p, r - lo]`` is policy p's action on row r (any integer dtype). Every policy runs
    over the same windows, all P x W episodes in one batch; the per-step quantities are reduced on
    the fly (no [episodes, steps] record is kept, so thousands of policies over 10^5 rows fit in
    memory): net/gross PnL, costs, closed trades and wins, the per-step return's sum and sum of
    squares (Sharpe per bar) and the max drawdown of each policy's summed equity path. On CUDA the
    whole step (the actions' gather, the env step and the reductions) is replayed as one captured
    graph per step (``graph=None``: when available; :class:`RecordedPolicies`); ``mode`` picks the
    env step (:func:`step_function`: ``fused`` the one-kernel step).
    """
    return RecordedPolicies(market, cfg, lo, hi, actions_PR4, graph=graph, mode=mode).run()


_SUMS = ("net_pnl", "gross_pnl", "costs", "ret_sum", "ret_sq", "steps", "trades", "wins")


class RecordedPolicies:
    """:func:`evaluate_many` with its buffers held: ``run()`` evaluates the P recorded policies.

    The step (gather each episode's action at its row, the env step without the ledger, the
    per-policy reductions) writes only into tensors allocated here, so on CUDA it is captured once
    as a graph and replayed once per step; :meth:`run` resets the windows and the sums in place, so
    one capture serves every run (bench/validation_speed.py times the runs apart from the capture).
    Without a graph the same step runs eagerly; with the ``auto`` (or ``eager``) step and no graph it
    is the plain ``env.step`` loop, the CPU reference.
    """

    def __init__(
        self,
        market: MarketTensors,
        cfg: EnvConfig,
        lo: int,
        hi: int,
        actions_PR4: Tensor,
        *,
        graph: bool | None = None,
        mode: str = "auto",
    ) -> None:
        from foxhunt.env.graph import reset_in_place

        dev, p_count = market.device, actions_PR4.shape[0]
        self.cfg, self.lo = cfg, lo
        starts, ends = windows(lo, hi, cfg.episode_rows, dev)
        self.w_count = starts.shape[0]
        self.starts, self.ends = starts.repeat(p_count), ends.repeat(p_count)
        self.steps = int((ends - starts).max())
        self.env = TradingEnv(market, cfg)
        reset_in_place(self.env, self.starts, self.ends)
        self.policy_of = torch.arange(p_count, device=dev).repeat_interleave(self.w_count)
        self.acts = actions_PR4.to(dev)
        n = self.policy_of.shape[0]
        # Inductor-fused for large batches under auto (1,000 policies: 1.8 s for 100 k bars)
        self.advance, use_graph = step_function(mode, dev, n, graph=graph)
        # the plain loop (env.step, as before the captured step): the CPU reference
        self.plain = not use_graph and mode in ("auto", "eager")
        self.out = {k: torch.zeros(p_count, dtype=torch.float64, device=dev) for k in _SUMS}
        self.equity, self.peak, self.drawdown = (torch.zeros_like(self.out["steps"]) for _ in range(3))
        self.graph: torch.cuda.CUDAGraph | None = None
        self.compile_seconds = 0.0  # warm-up (a compile) and capture
        if not use_graph:
            return
        self.graph, self.compile_seconds = capture_step(self._step)

    def _step(self) -> None:
        env, out, lo, acts = self.env, self.out, self.lo, self.acts
        policy_of, f64 = self.policy_of, torch.float64
        s = env._state()
        a = acts[policy_of, torch.clamp(s.row - lo, max=acts.shape[1] - 1)].to(torch.int64)
        res = env.step(a)[1] if self.plain else self.advance(env, s, a, False, ledger=False)[0]
        w = res.written.to(f64)
        net = res.net.to(f64)  # the sums stay float64 for a float32 market too
        out["net_pnl"].index_add_(0, policy_of, net)
        out["gross_pnl"].index_add_(0, policy_of, res.gross.to(f64))
        out["costs"].index_add_(0, policy_of, res.costs.to(f64))
        closed = res.trades.closed
        out["trades"].index_add_(0, policy_of, closed.sum(dim=1).to(f64))
        out["wins"].index_add_(0, policy_of, (closed & (res.trades.pnl > 0)).sum(dim=1).to(f64))
        zero = torch.zeros_like(self.equity)
        step_net = zero.index_add(0, policy_of, net)
        step_w = zero.index_add(0, policy_of, w)
        ret = step_net / self.equity
        live = step_w > 0
        out["ret_sum"] += torch.where(live, ret, 0.0)
        out["ret_sq"] += torch.where(live, ret * ret, 0.0)
        out["steps"] += live.to(f64)
        self.equity += step_net
        torch.maximum(self.peak, self.equity, out=self.peak)
        torch.maximum(self.drawdown, (self.peak - self.equity) / self.peak, out=self.drawdown)

    def run(self) -> dict[str, Tensor]:
        """Reset the windows and the sums in place, step every row; the per-policy summary (fresh
        tensors: the next run reuses the buffers)."""
        from foxhunt.env.graph import reset_in_place

        if self.plain:  # env.step replaces the state: start from a fresh one
            self.env.reset(self.starts, self.ends)
        else:  # the captured step reads and writes the state's tensors by address
            reset_in_place(self.env, self.starts, self.ends)
        for x in self.out.values():
            x.zero_()
        self.equity.fill_(self.cfg.contract.initial_capital * self.w_count)  # each policy's windows, summed
        self.peak.copy_(self.equity)
        self.drawdown.zero_()
        for _ in range(self.steps):
            if self.graph is not None:
                self.graph.replay()
            else:
                self._step()
        out = {k: x.clone() for k, x in self.out.items()}
        n = out["steps"].clamp(min=1.0)
        mean = out["ret_sum"] / n
        var = (out["ret_sq"] / n - mean * mean).clamp(min=0.0)  # one pass: E[r^2] - mu^2
        out["sharpe_per_bar"] = sharpe_ratio(mean, var.sqrt(), out["steps"])
        out["max_drawdown"] = self.drawdown.clone()
        has = out["trades"] > 0
        out["win_rate"] = torch.where(has, out["wins"] / out["trades"].clamp(min=1.0), UNDEFINED)
        return out
