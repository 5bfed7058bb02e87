"""The environment step as one fused Triton kernel (issue 57): :func:`fused_advance`.

:func:`foxhunt.env.graph.advance` composes the transition from a few hundred PyTorch operators
(26 kernels compiled by Inductor, about 65 us of launches at 16 k envs); :func:`fused_advance` is the
same step, with the same signature and the same effect on the state's tensors, as **one kernel
launch**: each program lane runs one episode's whole transition (decide with the plan lock, Kelly
cap, or with one magnitude the Kelly factor of the effective max position; the market order; the
limit order placed, its queue; the mark; the resting order's queue-aware fill, age and expiry; the
plan's opening and its barriers, trailing stop included; the capital floor and the window's end; the
exit; the trade ledger's three fill stages, each trade's entry (magnitude, order type, urgency,
entry costs) and, with the ledger, the step's limit-order events; settle; the reward and its shaping
terms; the returns ring and the CVaR factor) and, with ``observe``, writes the next observation.
Everything the step reads is loaded once (the Kelly statistics twice: decide and settle) and
everything it writes is stored once, each value as soon as it is final and each input shortly before
its first use (decide's inputs first, the rest of the state and the market rows after it: fewer
values live at a time, fewer registers): the state in place (its tensors are the graph's static
buffers, as for :func:`~foxhunt.env.graph.advance`), the :class:`~foxhunt.env.core.StepResult` into
fresh tensors.

The eager path stays the reference and the CPU path: the kernel (:mod:`foxhunt.env.fused_kernel`)
spells each eager expression out per episode in the eager operand order. The CVaR tail is kept
incrementally: the ``k_max`` smallest returns of each episode's ring are kept between steps
(:func:`_kept_tail`, beside the state, checked against the ring's count and last return), a push
inserts the new return, and only a row whose evicted return was among the kept (about
``k_max / W`` of them, 5% at the default 5 of 100) is scanned again in one pass; then the first ``k``
are added in ascending order. Up to ``k_max = 8`` each lane holds its row's tail in registers,
ascending (stored so), and a return enters by one sorted insertion: no reduction across lanes.
The kept values are the eager path's ``k_max`` smallest
(:func:`foxhunt.env.sizing.cvar_scale`), value for value (tests/env/test_fused.py checks them every
step), so the sum is the full scan's, without reading the whole ring (838 MB at 1 M envs) a step.

The eager step rounds differently on the two devices in one place, and the kernel follows the
device it runs on (``RECIP``): a tensor divided by a Python number is a true division on the CPU and
a product with the number's reciprocal on CUDA (ATen's ``div_true_kernel_cuda``); a Python number
divided by a tensor is ``reciprocal() x number`` on both (``Tensor.__rtruediv__``).

Equality with the eager step (tests/env/test_fused.py, over random markets and actions, float64
and float32, ledger on and off, stressed costs, several branch sizes; under Triton's interpreter on
the CPU and as the ``gpu`` test on the device): every state field, result field and trade equal
exactly, except where the eager path itself is not one rounding:

* the CVaR tail sum (``risk.cvar``) and the reward (the sum of its five components): eager PyTorch
  adds a row in an order of its own (on an AVX2 CPU ``((c0 + c4) + c1 + c2) + c3`` for five, on
  CUDA another), the kernel adds in order; they agree within a few ulps (1e-12 relative in
  float64). With the shaping terms off the reward's other four components are 0 and it is exact.
* the drawdown-recovery shaping term: the kernel's ``tanh`` (an odd series below 0.05, ``exp``
  above, in float64 for both dtypes; PyTorch's is its own libm's) is within 1e-15 relative in
  float64 and a few ulps in float32, only with that bonus on.

``time_since_trade``'s ``log1p`` in the observation comes from a table of ``torch.log1p`` (built
once per env on its device, up to where the slot's clamp binds), so it is the eager value.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.state import Portfolio
from foxhunt.env.trades import LIMIT_EVENTS, ClosedTrades, lean_record
from foxhunt.features.layout import STATE_FEATURE_GROUPS, STATE_LAYOUT, STATE_SPEC

BLOCK = 128
"""Episodes per program (one per lane: ``BLOCK = 32 x NUM_WARPS``; bench/fused_step.py ``--blocks``)."""
NUM_WARPS = 4
"""Warps per program. On sm_90 the kernel takes 226 registers a thread, none spilled, at the default
``[env]`` in float64 without the ledger (bench/fused_registers.py;
docs/results/2026-12-07-fused-registers.md)."""

_ENV_SLOT = -1000  # colmap: a column the kernel writes from the state (portfolio, plan)


def available() -> bool:
    """Whether Triton can be imported (PyTorch's CUDA builds ship it; the CPU install does not)."""
    return importlib.util.find_spec("triton") is not None


@dataclass
class _Tables:
    """What the kernel reads besides the state, built once per (env, market)."""

    market: object
    consts: Tensor  # [C] the config's float constants in the state dtype (fused_kernel's C_* order)
    colmap: Tensor  # [OBS_W] int32: feature column, -2 - aux column, -1 zero, _ENV_SLOT state slot
    log1p: Tensor  # [T] torch.log1p(0 .. T - 1) in the state dtype
    ones: Tensor  # [N]-broadcast neutral sizing inputs (built per N)
    zeros: Tensor
    dummy: Tensor  # stands in for an absent market column
    k_max: int
    plan0: int
    port0: int


def constants(env: TradingEnv) -> list[float]:
    """The kernel's float constants (fused_kernel ``C_*`` order) as Python floats, each the Python
    value the eager step multiplies, adds or compares a tensor with."""
    cfg, ins = env.cfg, env.market.instrument
    c, s, r, p = cfg.costs, cfg.sizing, cfg.rewards, cfg.plan
    finfo = torch.finfo(env.dtype)
    out = [
        s.conviction_min,
        s.conviction_max,
        finfo.tiny,
        s.kelly_fraction,
        float(cfg.contract.max_position),
        s.kelly_floor,
        s.kelly_weight,
        1.0 + 1e-6,
        1e-9,
        c.slippage_ticks_per_contract,
        c.immediate_slippage_ticks,
        ins.tick_size,
        c.commission_per_contract + c.exchange_fee_per_contract,
        ins.point_value,
        8.0 * finfo.eps,
        p.barrier.profit_mult,
        p.barrier.stop_mult,
        p.trailing_mult,
        cfg.contract.capital_floor * cfg.contract.initial_capital,
        float(cfg.contract.initial_capital) * r.pnl_scale,
        r.regime_ema_alpha,
        r.regime_threshold_mult,
        r.entry_bonus,
        r.exit_timing_bonus,
        r.drawdown_recovery_bonus,
        -r.regime_shift_penalty,
        r.regime_shift_penalty,
        1.0 - s.cvar_confidence,
        1e-3,
        s.cvar_budget,
        s.cvar_floor,
        s.cvar_weight,
        float(s.cvar_min_obs),
        p.min_vol,
        float(p.barrier.horizon),
        float("nan"),
        float("inf"),
    ]
    for group in STATE_SPEC.env_groups:  # portfolio then plan: 15 slots x (times, per, clamp)
        for slot in group.slots:
            out += [slot.scale.times, slot.scale.per * env.units[slot.scale.unit], slot.clamp]
    out += [float(f) for f in cfg.branches.magnitude_fractions]
    return out


def _tables(env: TradingEnv, n: int) -> _Tables:
    cached: _Tables | None = getattr(env, "_fused_tables", None)
    if cached is not None and cached.market is env.market and cached.ones.shape[0] == n:
        return cached
    from foxhunt.env import fused_kernel as fk

    if [g.name for g in STATE_SPEC.env_groups] != ["portfolio", "plan"] or len(
        [s for g in STATE_SPEC.env_groups for s in g.slots]
    ) != 15:
        raise ValueError("the fused step's observation assumes the portfolio (8) and plan (7) slots")
    dev, dt = env.device, env.dtype
    vals = constants(env)
    if len(vals) != fk.N_CONSTANTS_BEFORE_FRACTIONS + len(env.cfg.branches.magnitude_fractions):
        raise AssertionError("fused step constants out of step with fused_kernel's C_* indices")
    consts = torch.tensor(vals, dtype=dt, device=dev)
    colmap = torch.full((STATE_LAYOUT.width,), -1, dtype=torch.int32)
    col = 0
    for name in STATE_FEATURE_GROUPS:
        g = STATE_LAYOUT.group(name)
        colmap[g.slice] = torch.arange(col, col + g.width, dtype=torch.int32)
        col += g.width
    aux = STATE_LAYOUT.group("aux")
    colmap[aux.slice] = -2 - torch.arange(aux.width, dtype=torch.int32)
    for spec in STATE_SPEC.env_groups:
        colmap[STATE_LAYOUT.group(spec.name).slice] = _ENV_SLOT
    # log1p(time_since_trade) up to where the slot's clamp binds
    since = STATE_SPEC.env_groups[0].slots[7]
    bound = since.clamp * since.scale.per * env.units[since.scale.unit] / since.scale.times
    table = torch.log1p(torch.arange(int(math.exp(bound)) + 2, dtype=dt, device=dev))
    s = env.cfg.sizing
    k_max = max(1, math.ceil((1.0 - s.cvar_confidence) * s.cvar_window - 1e-3))
    tables = _Tables(
        market=env.market,
        consts=consts,
        colmap=colmap.to(dev),
        log1p=table,
        ones=torch.ones(n, dtype=dt, device=dev),
        zeros=torch.zeros(n, dtype=dt, device=dev),
        dummy=torch.zeros(1, dtype=dt, device=dev),
        k_max=k_max,
        plan0=STATE_LAYOUT.group("plan").slice.start,
        port0=STATE_LAYOUT.group("portfolio").slice.start,
    )
    env._fused_tables = tables  # type: ignore[attr-defined]
    return tables


def fused_advance(
    env: TradingEnv,
    state: Portfolio,
    actions: Tensor,
    observe: bool,
    direction_conviction: Tensor | None = None,
    magnitude_conviction: Tensor | None = None,
    q_variance: Tensor | None = None,
    ledger: bool = True,
) -> tuple[StepResult, Tensor]:
    """:func:`foxhunt.env.graph.advance` as one kernel launch: the transition written into
    ``state``'s tensors in place, ``(result, obs)`` (module docstring). ``state`` must be
    ``env.state`` with every tensor in its own storage (:func:`~foxhunt.env.graph.own_storage`)."""
    from foxhunt.env import fused_kernel as fk

    args, meta, out = kernel_arguments(
        env, state, actions, observe, direction_conviction, magnitude_conviction, q_variance, ledger
    )
    grid = (triton_cdiv(state.row.shape[0], BLOCK),)
    fk.step_kernel[grid](*args, **meta, num_warps=NUM_WARPS, enable_fp_fusion=False)
    return out.result(ledger), out.obs


@dataclass
class _Outputs:
    """The tensors the kernel writes the step's result and observation into."""

    money: dict[str, Tensor]  # gross, costs, net, reward
    ints: dict[str, Tensor]  # picked, realised_direction, realised_magnitude, exit_reason
    written: Tensor
    components: Tensor
    closed: Tensor
    pnl: Tensor
    size: Tensor
    detail_f: list[Tensor]  # gross, costs, side, entry_price, exit_price, entry_costs [N, STAGES]
    detail_i: list[Tensor]  # entry_row, exit_row, magnitude, reason, order_type, urgency
    fills: list[Tensor]  # fills, fill_price, fill_costs
    limits: Tensor  # [N, len(LIMIT_EVENTS)] int64 limit-order events
    obs: Tensor

    def result(self, ledger: bool) -> StepResult:
        if ledger:
            f, i = self.detail_f, self.detail_i
            trades = ClosedTrades(
                closed=self.closed, pnl=self.pnl, gross=f[0], costs=f[1], side=f[2], size=self.size,
                entry_price=f[3], exit_price=f[4], entry_row=i[0], exit_row=i[1], magnitude=i[2],
                reason=i[3], order_type=i[4], urgency=i[5], entry_costs=f[5],
            )  # fmt: skip
            fills, fill_price, fill_costs = self.fills
            limits = self.limits
        else:
            fills = fill_price = fill_costs = self.pnl.new_empty(0)  # StepResult.lean: no size either
            trades = lean_record(self.closed, self.pnl, fills)
            limits = torch.empty(0, dtype=torch.int64, device=fills.device)
        return StepResult(
            **self.money,
            written=self.written,
            picked=self.ints["picked"],
            realised_direction=self.ints["realised_direction"],
            realised_magnitude=self.ints["realised_magnitude"],
            trades=trades,
            fills=fills,
            fill_price=fill_price,
            fill_costs=fill_costs,
            exit_reason=self.ints["exit_reason"],
            components=self.components,
            limit_orders=limits,
        )


def _kept_tail(env: TradingEnv, state: Portfolio, k_max: int) -> tuple[Tensor, Tensor, Tensor]:
    """The CVaR tail the kernel keeps between steps for ``state``'s ring: ``(tail [N, KP], count,
    last return)`` (fused_kernel._tail_sum). Its own buffers per ring tensor, made with a count of -1
    (no tail yet: the first step scans every row); the kernel checks them against the ring's count
    and last return, so a ring reset or stepped by another path is scanned again."""
    ring = state.risk.returns_ring
    kept = getattr(env, "_fused_tail", None)
    if kept is None or kept[0] is not ring:
        n, dev = ring.shape[0], ring.device
        kept = (
            ring,
            torch.zeros(n, triton_next_pow2(k_max), dtype=ring.dtype, device=dev),
            torch.full((n,), -1, dtype=torch.int64, device=dev),
            torch.zeros(n, dtype=ring.dtype, device=dev),
        )
        env._fused_tail = kept  # type: ignore[attr-defined]
    return kept[1], kept[2], kept[3]


def kernel_arguments(
    env: TradingEnv,
    state: Portfolio,
    actions: Tensor,
    observe: bool,
    direction_conviction: Tensor | None,
    magnitude_conviction: Tensor | None,
    q_variance: Tensor | None,
    ledger: bool,
) -> tuple[list[object], dict[str, object], _Outputs]:
    """``(positional arguments, constexpr arguments, outputs)`` of one launch of the step kernel."""
    n = state.row.shape[0]
    t = _tables(env, n)
    mk, dev, dt = env.market, env.device, env.dtype
    q = env.quotes

    def empty(*shape: int, dtype: torch.dtype = dt) -> Tensor:
        return torch.empty(shape, dtype=dtype, device=dev)

    i64, stages = torch.int64, 3
    width = STATE_LAYOUT.width
    out = _Outputs(
        money={k: empty(n) for k in ("gross", "costs", "net", "reward")},
        ints={"picked": empty(n, 4, dtype=i64)}
        | {k: empty(n, dtype=i64) for k in ("realised_direction", "realised_magnitude", "exit_reason")},
        written=empty(n, dtype=torch.bool),
        components=empty(n, 5),
        closed=empty(n, stages, dtype=torch.bool),
        pnl=empty(n, stages),
        size=empty(n, stages),
        detail_f=[empty(n, stages) for _ in range(6)] if ledger else [t.dummy] * 6,
        detail_i=[empty(n, stages, dtype=i64) for _ in range(6)] if ledger else [t.dummy] * 6,
        fills=[empty(n, stages) for _ in range(3)] if ledger else [t.dummy] * 3,
        limits=empty(n, len(LIMIT_EVENTS), dtype=i64) if ledger else t.dummy,
        obs=empty(n, width, dtype=torch.float32) if observe else empty(0, dtype=torch.float32),
    )
    assert env.aux is not None
    sizes = mk.bid_size is not None and mk.ask_size is not None
    cfg = env.cfg
    bars = cfg.costs.patience_bars
    f, i = out.detail_f, out.detail_i
    args: list[object] = [
        actions.contiguous(),
        t.ones if direction_conviction is None else direction_conviction.contiguous(),
        t.ones if magnitude_conviction is None else magnitude_conviction.contiguous(),
        t.zeros if q_variance is None else q_variance.contiguous(),
        t.consts, mk.mid, mk.high, mk.low, q.bid, q.ask, q.known,
        mk.volume if mk.volume is not None else t.dummy,
        mk.bid_size if sizes else t.dummy, mk.ask_size if sizes else t.dummy,
        env.vol, env.regime, mk.features, env.aux, t.colmap, t.log1p, *_kept_tail(env, state, t.k_max),
        *state.tensors(),
        *out.money.values(), out.written, out.ints["picked"], out.ints["realised_direction"],
        out.ints["realised_magnitude"], out.ints["exit_reason"], out.components,
        out.closed, out.pnl, f[0], f[1], f[2], out.size, f[3], f[4], i[0], i[1], i[2], i[3], i[4], i[5], f[5],
        *out.fills, out.limits,
        out.obs if observe else t.dummy,
        n, mk.rows, t.log1p.shape[0] - 1,
    ]  # fmt: skip
    ring_width = state.risk.returns_ring.shape[1]
    meta: dict[str, object] = {
        "W": ring_width,
        "K": t.k_max,
        "KP": triton_next_pow2(t.k_max),
        "M": len(cfg.branches.magnitude_fractions),
        "F": mk.features.shape[1],
        "A": env.aux.shape[1],
        "OBS_W": width,
        "OBS_CHUNK": 16,
        "PORT0": t.port0,
        "PLAN0": t.plan0,
        "PATIENCE0": bars[0],
        "PATIENCE1": bars[1],
        "PATIENCE2": bars[2],
        "HORIZON": cfg.plan.barrier.horizon,
        "KELLY_MIN": cfg.sizing.kelly_min_trades,
        "TRAILING": cfg.plan.trailing_mult > 0,
        "HAS_VOLUME": mk.volume is not None,
        "HAS_SIZES": sizes,
        "LEDGER": ledger,
        "OBSERVE": observe,
        "F64": dt == torch.float64,
        "RECIP": dev.type == "cuda",  # a division by a Python number: ATen's CUDA kernel multiplies
        "IDX32": _fits_int32(
            n, max(ring_width, triton_next_pow2(t.k_max)), mk.rows, mk.features.shape[1], width
        ),
        "BLOCK": BLOCK,
    }
    return args, meta, out


def _fits_int32(n: int, per_episode: int, rows: int, features: int, width: int) -> bool:
    """Whether every element offset the kernel forms (an episode's ring, result, observation and
    kept-tail slots; a market row's features) is below 2**31: then its index arithmetic is 32-bit."""
    return max(n * max(per_episode, width, 8), rows * max(features, 1)) < 2**31


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def triton_next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())
