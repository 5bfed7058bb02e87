"""Counterfactual execution: every execution choice of an entry evaluated on the same market path.

At a decision where the agent enters (Short or Long, no plan locking the direction), the simulator
knows what each other magnitude, order type and urgency would have done on the very rows that
followed: whether a limit order would have filled and when (its queue, the volume that traded at its
price), at what price, what it would have cost, and what the plan it opened would have earned. This
module computes that with the environment's own pure transition (:meth:`TradingEnv.transition`, so
fills, queue, costs, sizing, barriers and rewards are the env's and nothing is re-implemented):

    rollout(env, state, actions[N, K, 4])   each of N states repeated K times, one action each,
                                            then ``horizon - 1`` steps of Hold (the plan runs,
                                            a resting order works or expires)

Hold is the continuation because under the plan lock it is the only action that acts, and for an
order still resting it lets the order work (Hold trades nothing and keeps the resting order). With
``horizon`` covering the longest patience and the plan's horizon, every variant's trade has closed
by the end, so the variants differ only by what the execution choice did.

:func:`execution_variants` builds, from the action taken, the variants one branch at a time:
the columns ``[magnitude values | order-type values | urgency values]`` (``M + O + U`` columns, the
taken action once in each block), each the taken action with that one branch set to the column's
value. :func:`branch_deltas` turns their discounted returns into the counterfactual advantage of
every execution value over the value taken, per branch (0 at the taken value, exactly): the
relabelled targets of the DQN learner (:mod:`foxhunt.agent.counterfactual`, which reads each path's
n-step window) and, through :func:`window_values` and :func:`execution_advantages`, per-entry
advantages of each execution choice for a policy-gradient learner.

Everything is batched tensor arithmetic on the state's device (the only loop is over the
``horizon`` steps); nothing reads the device from the host.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from foxhunt.domain.actions import Direction
from foxhunt.env.core import TradingEnv
from foxhunt.env.state import Portfolio
from foxhunt.env.trades import FillStage

EXECUTION_BRANCHES = ("magnitude", "order_type", "urgency")
"""The branches a counterfactual varies (every branch but the direction), in ``BRANCHES`` order."""

_SHORT, _HOLD, _LONG = int(Direction.SHORT), int(Direction.HOLD), int(Direction.LONG)
_ORDER, _RESTING = int(FillStage.ORDER), int(FillStage.RESTING)


class Window(NamedTuple):
    """The value learner's n-step window, applied to each counterfactual path as replay applies it to
    the real one (:func:`foxhunt.agent.replay.nstep_windows`): at most ``n`` steps (``limit`` ``[N]``:
    fewer for a state near the end of the collected sequence), ending early after a step that ended
    the episode (discount 0) or, with ``decision``, one after which no plan locks the direction."""

    n: int
    decision: bool
    limit: Tensor | None = None  # [N] int64 steps at most per state (None: n)


class ExecutionOutcome(NamedTuple):
    """What each of ``K`` actions would have done from each of ``N`` states; every field ``[N, K]``.

    ``ret`` is the discounted reward ``sum_k gamma^k r_k`` over the whole rollout, ``net``/``costs``
    the $ sums over it; ``window_ret``/``window_discount``/``window_len`` the same path cut by the
    :class:`Window` (the n-step return, ``gamma^m`` or 0, and ``m``). The entry fill is the first fill
    of the order the action placed (a market order at once, or its limit order on a later row).
    """

    ret: Tensor  # discounted reward sum over the horizon
    net: Tensor  # $ net PnL summed over the horizon
    costs: Tensor  # $ fees + slippage summed over the horizon (entry and exit)
    filled: Tensor  # bool: the entry order filled within the horizon
    fill_step: Tensor  # int64 steps after the decision the entry filled on (0: at once; -1: never)
    fill_price: Tensor  # the entry fill's price (NaN: never filled)
    contracts: Tensor  # signed contracts of the entry fill (0: never filled)
    entry_costs: Tensor  # $ the entry fill's fees + slippage against the mark (0: never filled)
    window_ret: Tensor  # the window's discounted reward
    window_discount: Tensor  # gamma^m, 0 where the episode ended inside the window
    window_len: Tensor  # int64 m, the window's steps

    def cost_per_contract(self) -> Tensor:
        """$ the entry fill's cost per contract (NaN where nothing filled)."""
        n = self.contracts.abs()
        return torch.where(n > 0, self.entry_costs / n.clamp(min=1.0), torch.full_like(n, float("nan")))


def default_horizon(env: TradingEnv) -> int:
    """Steps that hold a whole entry: the longest patience (a limit order filling last), the plan's
    horizon after it, and the exit's row."""
    return max(env.cfg.costs.patience_bars) + env.cfg.plan.barrier.horizon + 2


def entry_mask(state: Portfolio, actions: Tensor) -> Tensor:
    """``[N]`` bool: the action enters (Short or Long) where the direction acts (live, no plan lock)."""
    d = actions[:, 0]
    return ~state.done & ~state.plan.active & ((d == _SHORT) | (d == _LONG))


def execution_variants(actions: Tensor, sizes: tuple[int, int, int, int]) -> Tensor:
    """``[N, M + O + U, 4]``: per execution branch, the taken ``actions`` ``[N, 4]`` with that branch
    set to each of its values (blocks in :data:`EXECUTION_BRANCHES` order, values ascending)."""
    blocks = []
    for b, size in enumerate(sizes[1:], start=1):
        block = actions.unsqueeze(1).repeat(1, size, 1)  # [N, size, 4]
        block[:, :, b] = torch.arange(size, device=actions.device)
        blocks.append(block)
    return torch.cat(blocks, dim=1)


def rollout(
    env: TradingEnv,
    state: Portfolio,
    actions: Tensor,
    horizon: int,
    gamma: float,
    sizing: tuple[Tensor | None, Tensor | None, Tensor | None] = (None, None, None),
    window: Window | None = None,
    ledger: bool = True,
) -> ExecutionOutcome:
    """Each of the ``N`` states taking each of its ``K`` actions (``actions`` ``[N, K, 4]``), then
    Hold for ``horizon - 1`` steps, with ``env``'s pure transition (``env.state`` is not touched).

    ``sizing``: the policy's direction conviction, magnitude conviction and Q-variance ``[N]`` (None:
    neutral); they size the first step as they sized the real one (Hold trades nothing after it).
    ``window`` (None: the whole horizon) cuts the n-step window of each path (:class:`Window`); a
    window still open after ``horizon`` steps ends there. Without ``ledger`` only the windows are
    computed (the lean step; the entry-fill fields stay at their "never filled" values and ``ret``,
    ``net``, ``costs`` cover the steps run), and the rollout stops once every window has ended: one
    host read a step, for what a learner's targets need at a fraction of the cost.
    """
    if horizon < 1:
        raise ValueError(f"a counterfactual rollout needs at least one step, got {horizon}")
    n, k = actions.shape[0], actions.shape[1]
    s = state.map(lambda x: x.repeat_interleave(k, dim=0))
    first = actions.reshape(n * k, -1).to(env.device)
    hold = torch.zeros_like(first)
    hold[:, 0] = _HOLD
    conv = tuple(None if x is None else x.repeat_interleave(k, dim=0) for x in sizing)
    window = window if window is not None else Window(horizon, False)
    dev, i64 = env.device, torch.int64
    limit = torch.full((n * k,), window.n, dtype=i64, device=dev)
    if window.limit is not None:
        limit = torch.minimum(limit, window.limit.to(dev, i64).repeat_interleave(k))
    z = torch.zeros(n * k, dtype=env.dtype, device=dev)
    ret, net, costs, w_ret = z.clone(), z.clone(), z.clone(), z.clone()
    filled, terminal = (
        torch.zeros(n * k, dtype=torch.bool, device=dev),
        torch.zeros(n * k, dtype=torch.bool, device=dev),
    )
    open_ = torch.ones(n * k, dtype=torch.bool, device=dev)
    fill_step, w_len = (
        torch.full((n * k,), -1, dtype=i64, device=dev),
        torch.zeros(n * k, dtype=i64, device=dev),
    )
    price, contracts, entry_costs = torch.full_like(z, float("nan")), z.clone(), z.clone()
    for step in range(horizon):
        done = s.done  # replay's done: the episode was over before this step
        s, res = env.transition(
            s, first if step == 0 else hold, *(conv if step == 0 else (None,) * 3), ledger=ledger
        )
        ret = ret + gamma**step * res.reward
        w_ret = torch.where(open_, w_ret + gamma**step * res.reward, w_ret)
        w_len = w_len + open_.to(i64)
        stop = done | (w_len >= limit) | (~s.plan.active if window.decision else torch.zeros_like(done))
        terminal = terminal | (open_ & done)
        open_ = open_ & ~stop
        net, costs = net + res.net, costs + res.costs
        # The entry: the action's market order (ORDER at step 0) or its limit order (RESTING, this
        # step's next row or a later one); under Hold no other order is placed.
        if not ledger:
            if not bool(open_.any()):
                break
            continue
        for st in (_ORDER, _RESTING) if step == 0 else (_RESTING,):
            new = ~filled & (res.fills[:, st] != 0)
            fill_step = torch.where(new, step, fill_step)
            price = torch.where(new, res.fill_price[:, st], price)
            contracts = torch.where(new, res.fills[:, st], contracts)
            entry_costs = torch.where(new, res.fill_costs[:, st], entry_costs)
            filled = filled | new
    w_disc = torch.where(
        terminal, torch.zeros_like(z), torch.pow(torch.full_like(z, gamma), w_len.to(z.dtype))
    )

    def nk(x: Tensor) -> Tensor:
        return x.view(n, k)

    return ExecutionOutcome(
        *(
            nk(x)
            for x in (ret, net, costs, filled, fill_step, price, contracts, entry_costs, w_ret, w_disc, w_len)
        )
    )


def branch_deltas(ret: Tensor, actions: Tensor, sizes: tuple[int, int, int, int]) -> Tensor:
    """``[N, M + O + U]``: each execution value's return (``ret`` ``[N, M + O + U]`` of
    :func:`execution_variants`' columns) minus the return of the value taken in its branch.

    Within a block the taken value's column is the taken action itself, so its delta is 0 exactly.
    """
    out, col = [], 0
    for b, size in enumerate(sizes[1:], start=1):
        block = ret[:, col : col + size]
        taken = block.gather(1, actions[:, b : b + 1].long())
        out.append(block - taken)
        col += size
    return torch.cat(out, dim=1)


def window_values(out: ExecutionOutcome, bootstrap: Tensor) -> Tensor:
    """``[N, K]`` each path's n-step value ``R_v + d_v x bootstrap``: its window's return and discount
    with a learner's value ``bootstrap`` ``[N]`` at the taken window's end state (what a critic bootstraps
    the taken action with). :func:`branch_deltas` of these is each execution value's advantage over
    the value taken, continuation included (an unfilled limit order frees the agent sooner)."""
    return out.window_ret + out.window_discount * bootstrap.to(out.window_ret.dtype)[:, None]


def split_blocks(x: Tensor, sizes: tuple[int, int, int, int]) -> tuple[Tensor, ...]:
    """The ``[..., M + O + U]`` columns as one ``[..., size]`` tensor per execution branch."""
    return tuple(x.split(list(sizes[1:]), dim=-1))


def execution_advantages(
    deltas: Tensor, probs: tuple[Tensor, ...], sizes: tuple[int, int, int, int]
) -> Tensor:
    """Per-entry advantages of each execution value under a policy: ``A_b(v) = Delta_b(v) - sum_w
    pi_b(w) Delta_b(w)`` (the counterfactual return of ``v`` over the policy's expected one), for a
    policy-gradient learner's execution heads; ``probs`` are the policy's ``[N, size]`` per execution
    branch. The all-actions gradient ``-sum_b sum_v pi_b(v | s) A_b(v)`` (A detached) then moves every
    execution head toward what the same market path paid, the untaken values included. NaN rows (no
    counterfactual) stay NaN."""
    out = []
    for d, p in zip(split_blocks(deltas, sizes), probs, strict=True):
        out.append(d - (p.to(d.dtype) * d).sum(dim=-1, keepdim=True))
    return torch.cat(out, dim=-1)


def counterfactual_deltas(
    env: TradingEnv,
    state: Portfolio,
    actions: Tensor,
    horizon: int,
    gamma: float,
    sizing: tuple[Tensor | None, Tensor | None, Tensor | None] = (None, None, None),
    window: Window | None = None,
) -> tuple[Tensor, ExecutionOutcome]:
    """:func:`branch_deltas` of the taken ``actions`` ``[N, 4]`` from ``state`` and the outcomes of
    every variant (:func:`execution_variants`, :func:`rollout`)."""
    sizes = env.codec.sizes
    acts = actions.to(env.device).long()
    out = rollout(env, state, execution_variants(acts, sizes), horizon, gamma, sizing, window)
    return branch_deltas(out.ret, acts, sizes), out
