"""Position sizing: conviction, variance scale, Kelly, CVaR, the effective max position (docs/design.md §5).

Pure batched functions over ``[N]`` tensors (any broadcastable shape): outputs live on the inputs'
device, there is no ``.item()``, no Python loop over N and no data-dependent Python branch, so the
env step can be compiled with ``torch.compile(fullgraph=True)`` or graph-captured.

The effective max position (docs/design.md §5) is the product of five factors, each in ``(0, 1]``::

    effective_max = max_position * cvar * conviction * kelly * variance

    conviction = clamp(q_gap, conviction_min, conviction_max)                 [0.25, 1]
    variance   = max(1 / (1 + sqrt(var_Q)), conviction)                        [conviction, 1]
    kelly      = 1 before kelly_min_trades trades, else
                 1 - kelly_weight * (1 - clamp(K / max_position, kelly_floor, 1))   [kelly_floor, 1]
    cvar       = 1 before cvar_min_obs returns, else
                 1 - cvar_weight * (1 - clamp(cvar_budget / CVaR, cvar_floor, 1))   [cvar_floor, 1]

How the floors compose
----------------------
Each factor carries **its own** floor, applied once, by ``max`` / ``clamp`` on that factor alone;
no factor's floor is multiplied into another factor's floor. In particular the variance scale is
floored *at the conviction* with ``max``: a network that is sure (conviction 1) is never shrunk by
its Q-variance, and an unsure one loses at most one more factor of its conviction to the variance.
The old system multiplied a conviction shrink, a variance shrink, a Kelly shrink and a risk shrink,
each with its own small floor, and silenced a network that wanted Full 91% of the time. Here::

    effective_max >= max_position * cvar_floor * kelly_floor * conviction * max(1/(1+sqrt(var_Q)), conviction)
                  >= max_position * cvar_floor * kelly_floor * conviction**2

and with conviction 1 the variance factor is exactly 1 whatever ``var_Q`` is.

Kelly (:func:`kelly_optimal_f`, :func:`kelly_fraction`)
--------------------------------------------------------
From the episode's closed trades (breakeven trades count toward ``n_trades`` but not the odds)::

    p = wins / (wins + losses),  q = losses / (wins + losses)
    W = sum_win / wins,          L = |sum_loss| / losses         (average win / loss, $ per contract)
    b = W / L                                                     (payoff ratio)
    f* = p - q / b                                                (clamped to [-1, 1])

``f*`` is the share of equity to put at risk per trade, so the Kelly position in contracts is::

    s = max(direction_conviction, magnitude_conviction)           (safety: the surer of the two)
    K = s * kelly_fraction * f* * equity / L                      (fractional Kelly, in contracts)

and the factor is ``K / max_position`` clamped to ``[kelly_floor, 1]`` (1 with no loss yet: no risk
estimate, no cap). Using the *max* of the two convictions (not their product) keeps an unsure
magnitude head from shrinking a sure direction call. The Kelly factor binds only on a thin or
negative edge: with ES at $250 000 equity and a $250 average loss per contract, half Kelly allows 10
contracts as soon as ``f* >= 0.02``.

:func:`kelly_cap_by_magnitude` turns the same factor into the per-magnitude hard constraint: the
largest magnitude whose fraction does not exceed it. **Apply Kelly once**: either clip the magnitude
with the cap and pass ``kelly=1`` to :func:`effective_max_position`, or multiply the factor into the
effective max position without the cap; both together shrink by Kelly twice.

CVaR (:func:`cvar_scale`)
-------------------------
From the trailing per-step returns of the episode (step net PnL / equity) in a ``[N, W]`` ring buffer
(:func:`push_return`), over the ``n = min(count, W)`` written slots::

    k    = max(1, ceil((1 - cvar_confidence) * n))                (tail size)
    CVaR = -mean(k smallest returns)                              (expected tail loss, > 0 if losing)
    raw  = clamp(cvar_budget / CVaR, cvar_floor, 1)               (1 when CVaR <= 0)

The k smallest are the first ``k_max = ceil((1 - cvar_confidence) * W)`` of the row in ascending
order, summed under a mask of the first ``k`` (:func:`smallest_sum`). Two implementations, one per
path, because what is fast differs:

* **compiled on CUDA** (the training step, validation and the backtest): ``k_max`` rounds of a row
  minimum and its tie count, in plain tensor operations (:func:`smallest_sum_by_rounds`). Inductor
  turns the dependent row reductions into one persistent-reduction kernel (the row of W in
  registers, as it does a softmax's max and sum), fused with the step's other reads of the ring: one
  pass over the buffer and no sort.
* **eager** (CPU training, CUDA outside a graph): one custom operator (``foxhunt::smallest_sum``):
  ATen's row sort on CUDA, its ``topk`` on the CPU, a single operator where the rounds would launch
  ~5 kernels a round.

The ways tried for the compiled CUDA step, on an H200 at 16,384 envs (``bench/env.py --profile``,
W = 100, k_max = 5):

* a ``sort`` lowered by Inductor, fused with the step into one pass over the ring: the step alone
  8.5e7 env-steps/s, but the fused kernel (an in-register bitonic sort, a 4.5 MB cubin) took Triton
  about two minutes to build on every fresh host (the step's first compile 162.9 s, against 19.6 s);
* ATen's ``topk`` (Inductor calls it as an extern kernel): compiled in 19.6 s, but its radix-select
  kernel (``gatherTopK``, built for long rows) took 309 us of the step's 427 us of kernels: 3.9e7
  (4.5e7 at 1,048,576 envs);
* ATen's ``sort`` behind the custom operator: compiled in 18.6 s; a radix sort of the double rows
  (``radixSortKVInPlace``), 210 us of ~330 us: 4.5e7 (5.7e7 at 1,048,576 envs);
* the rounds (now): fused into one persistent reduction with the step's other reads of the ring,
  34 us of the step's 124 us of kernels: 1.21e8 (1.59e8 at 1,048,576 envs).

Both give the same k_max values; their sums can differ in the last bit (the rounds add value x tie
count, the others add the sorted values one by one; CPU and CUDA reduce in different orders).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from foxhunt.env.config import PositionSizingConfig

_TAIL_ROUNDING = 1e-3  # (1 - confidence) * n within this of an integer counts as that integer


# --- conviction and variance -------------------------------------------------------------------


def conviction(q_gap: Tensor, params: PositionSizingConfig) -> Tensor:
    """``clamp(q_gap, conviction_min, conviction_max)``; scripted policies pass a neutral ``q_gap = 1``."""
    return q_gap.clamp(params.conviction_min, params.conviction_max)


def variance_scale(var_q: Tensor, conviction: Tensor | float) -> Tensor:
    """``max(1 / (1 + sqrt(var_Q)), conviction)``: shrink on Q-variance, floored at the conviction.

    ``var_q`` is the variance of the chosen action's return distribution (reward units; negative
    values, from round-off, count as 0). The floor composes by ``max``: conviction 1 gives exactly 1.
    """
    raw = 1.0 / (1.0 + var_q.clamp(min=0.0).sqrt())
    if isinstance(conviction, Tensor):
        return torch.maximum(raw, conviction.to(raw.dtype))
    return raw.clamp(min=float(conviction))  # a scalar floor without a host-to-device copy


# --- Kelly -------------------------------------------------------------------------------------


def kelly_optimal_f(wins: Tensor, losses: Tensor, sum_win: Tensor, sum_loss: Tensor) -> Tensor:
    """Kelly ``f* = p - q / b`` from trade counts and sums, clamped to ``[-1, 1]``.

    ``p = wins / (wins + losses)``, ``q = 1 - p``, ``b = (sum_win / wins) / (|sum_loss| / losses)``.
    No decided trade gives 0; no loss gives ``f* = p = 1``; losses without a win give -1 (the limit
    ``b -> 0``). ``sum_loss`` may be given as a positive magnitude or a negative sum.
    """
    dtype = sum_win.dtype
    w = wins.to(dtype)
    l = losses.to(dtype)
    decided = (w + l).clamp(min=1.0)
    p = w / decided
    q = l / decided
    avg_win = sum_win / w.clamp(min=1.0)
    avg_loss = sum_loss.abs() / l.clamp(min=1.0)
    tiny = torch.finfo(dtype).tiny
    # q / b = q * L / W; with W = 0 (no win) and q > 0 the term is unbounded -> f* clamps to -1
    q_over_b = torch.where(avg_win > 0, q * avg_loss / avg_win.clamp(min=tiny), 2.0 * (q > 0).to(dtype))
    return (p - q_over_b).clamp(-1.0, 1.0)


def _as(x: Tensor | float, dtype: torch.dtype) -> Tensor | float:
    return x.to(dtype) if isinstance(x, Tensor) else float(x)


def _maximum(a: Tensor | float, b: Tensor | float) -> Tensor | float:
    # A Python scalar stays a scalar (a clamp bound): no host-to-device copy.
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return torch.maximum(a, b)
    if isinstance(a, Tensor):
        return a.clamp(min=float(b))
    if isinstance(b, Tensor):
        return b.clamp(min=float(a))
    return max(a, b)


def kelly_fraction(
    wins: Tensor,
    losses: Tensor,
    sum_win: Tensor,
    sum_loss: Tensor,
    n_trades: Tensor,
    direction_conviction: Tensor | float,
    magnitude_conviction: Tensor | float,
    equity: Tensor | float,
    max_position: Tensor | float,
    params: PositionSizingConfig,
) -> Tensor:
    """The Kelly factor of the effective max position, in ``[kelly_floor, 1]`` (module docstring).

    ``sum_win`` / ``sum_loss``: sums of the closed trades' net PnL **per contract** ($ per contract:
    a trade's net PnL divided by the contracts it closed), so that ``L`` is the risk per contract.
    ``n_trades``: closed trades so far (wins, losses and breakevens). Before ``kelly_min_trades`` the
    factor is 1 (no history, no cap); after, ``1 - kelly_weight * (1 - clamp(K / max_position,
    kelly_floor, 1))`` with ``K = max(direction_conviction, magnitude_conviction) * kelly_fraction *
    f* * equity / L`` contracts. No loss yet (``L = 0``) gives 1.
    """
    dtype = sum_win.dtype
    f_star = kelly_optimal_f(wins, losses, sum_win, sum_loss)
    l = losses.to(dtype)
    avg_loss = sum_loss.abs() / l.clamp(min=1.0)  # L, $ per contract
    # Python scalars stay scalars (broadcast in the arithmetic): a torch.as_tensor of a float is a
    # host-to-device copy per step, which also breaks CUDA-graph capture.
    safety = _maximum(_as(direction_conviction, dtype), _as(magnitude_conviction, dtype))
    equity_t = _as(equity, dtype)
    max_pos = _as(max_position, dtype)
    tiny = torch.finfo(dtype).tiny
    kelly_contracts = safety * params.kelly_fraction * f_star * equity_t / avg_loss.clamp(min=tiny)
    ratio = torch.where(avg_loss > 0, kelly_contracts / max_pos, torch.ones_like(kelly_contracts))
    raw = ratio.clamp(params.kelly_floor, 1.0)
    blended = 1.0 - params.kelly_weight * (1.0 - raw)
    active = n_trades >= params.kelly_min_trades
    return torch.where(active, blended, torch.ones_like(blended))


def kelly_cap_by_magnitude(kelly: Tensor, magnitude_fractions: Sequence[float]) -> Tensor:
    """Per-magnitude Kelly cap: the largest magnitude index ``i`` with ``fractions[i] <= kelly``.

    ``magnitude_fractions`` must be increasing (``BranchConfig.magnitude_fractions``). The smallest
    magnitude (index 0) is always allowed: the cap limits size, it never forbids trading. Since
    :func:`kelly_fraction` is 1 before ``kelly_min_trades`` trades, the cap is then the largest index.
    Returns int64 indices shaped like ``kelly``; the env clips the picked magnitude with
    ``torch.minimum(picked, cap)``. See the module docstring: apply Kelly once.
    """
    fractions = tuple(float(f) for f in magnitude_fractions)
    if not fractions or any(b <= a for a, b in zip(fractions, fractions[1:], strict=False)):
        raise ValueError(f"magnitude_fractions must be non-empty and increasing, got {fractions}")
    # count of fractions within the Kelly factor (a small tolerance keeps kelly = 0.5 allowing Half);
    # a loop over the few fractions, so no host-to-device copy of a fractions tensor per step
    limit = kelly * (1.0 + 1e-6)
    allowed = torch.zeros_like(kelly, dtype=torch.int64)
    for f in fractions:
        allowed = allowed + (limit >= f).to(torch.int64)
    return (allowed - 1).clamp(min=0)


# --- CVaR --------------------------------------------------------------------------------------


def push_return(
    ring_NW: Tensor, count_N: Tensor, value_N: Tensor, mask_N: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Write ``value`` into slot ``count % W`` of each row of the ring buffer; returns ``(ring, count + 1)``.

    Pure (returns a new buffer). ``count`` (int64) is the number of returns written since the episode
    began. Rows where ``mask`` is False are left unchanged (ring and count): the slot is rewritten
    with its own value, so only one element per row changes (no pass over the whole buffer).
    """
    width = ring_NW.shape[-1]
    rows = torch.arange(ring_NW.shape[0], device=ring_NW.device)
    slot = count_N % width
    value = value_N.to(ring_NW.dtype)
    if mask_N is not None:
        value = torch.where(mask_N, value, ring_NW[rows, slot])
    # index_put (not scatter): Inductor rewrites it in place when the step writes the ring back,
    # instead of copying the whole [N, W] buffer twice.
    ring = ring_NW.index_put((rows, slot), value)
    return ring, count_N + (1 if mask_N is None else mask_N.to(count_N.dtype))


@torch.library.custom_op("foxhunt::smallest_sum", mutates_args=())
def _smallest_sum(values_NW: Tensor, k_N: Tensor, k_max: int) -> Tensor:
    return _select_sum(values_NW, k_N, k_max)


def _select_sum(values_NW: Tensor, k_N: Tensor, k_max: int) -> Tensor:
    """The custom operator's body: the ``k_max`` smallest of each row, the first ``k`` summed."""
    if values_NW.is_cuda:  # a row sort: ATen's kernel for short rows beats its topk (module docstring)
        low = values_NW.sort(dim=-1).values[..., :k_max]
    else:  # the CPU's partial selection: one operator, faster there than a sort for a few of a row
        low = values_NW.topk(k_max, dim=-1, largest=False).values  # ascending, as the sort's head
    take = torch.arange(k_max, device=values_NW.device) < k_N.unsqueeze(-1)
    return torch.where(take, low, torch.zeros_like(low)).sum(dim=-1)


@_smallest_sum.register_fake
def _(values_NW: Tensor, k_N: Tensor, k_max: int) -> Tensor:
    return values_NW.new_empty(values_NW.shape[:-1])


def smallest_sum_by_rounds(values_NW: Tensor, k_N: Tensor, k_max: int) -> Tensor:
    """Sum of the ``k`` smallest entries of each row by ``k_max`` rounds of a row minimum.

    Round r takes the smallest value above the last round's, ``m_r``, and its count ``c_r`` in the
    row, and adds ``m_r x min(c_r, k left)``: ties are counted, and each round takes at least one
    entry while ``k`` is left, so ``k_max`` rounds cover any ``k <= k_max``. A round past the
    finite entries finds ``+inf`` with nothing left to take and adds 0. Written for Inductor, which
    fuses the dependent row reductions into one kernel (module docstring); eager, each round is
    ~5 kernels.
    """
    dtype = values_NW.dtype
    total = values_NW.new_zeros(values_NW.shape[:-1])
    left = k_N.to(dtype)
    floor = torch.full_like(total, float("-inf"))
    inf = torch.full_like(values_NW, float("inf"))
    for _ in range(k_max):
        low = torch.where(values_NW > floor.unsqueeze(-1), values_NW, inf).amin(dim=-1)  # m_r
        ties = (values_NW == low.unsqueeze(-1)).sum(dim=-1).to(dtype)  # c_r
        take = torch.minimum(ties, left)
        total = total + torch.where(take > 0, low * take, torch.zeros_like(low))  # inf x 0 never formed
        left = left - take
        floor = low
    return total


def smallest_sum(values_NW: Tensor, k_N: Tensor, k_max: int) -> Tensor:
    """Sum of the ``k`` smallest entries of each row (``k <= k_max``, float ``[N]``), ties counted.

    Compiled on CUDA, :func:`smallest_sum_by_rounds` (one fused kernel); otherwise one custom
    operator: the ``k_max`` smallest in ascending order (a row sort on CUDA, ``topk`` on the CPU),
    then a masked sum of the first ``k`` (module docstring: why each). Entries of ``+inf`` (padding)
    are never taken while ``k`` does not exceed the finite entries.
    """
    if torch.compiler.is_compiling():
        if values_NW.is_cuda:
            return smallest_sum_by_rounds(values_NW, k_N, k_max)
        # Compiled on the CPU (foxhunt serve's step): the operator's body traced, so that the
        # compiled step calls ATen's topk directly and fuses the masked sum, instead of calling the
        # Python operator back (~30 us a call at one episode).
        return _select_sum(values_NW, k_N, k_max)
    return _smallest_sum(values_NW, k_N, k_max)


def cvar_scale(returns_NW: Tensor, count_N: Tensor, params: PositionSizingConfig) -> Tensor:
    """The CVaR factor in ``[cvar_floor, 1]`` from a ``[N, W]`` ring buffer of per-step returns.

    ``count_N``: returns written so far (slots ``0 .. min(count, W) - 1`` are valid, see
    :func:`push_return`). With ``n = min(count, W)``::

        k    = max(1, ceil((1 - cvar_confidence) * n))
        CVaR = -mean of the k smallest valid returns
        raw  = clamp(cvar_budget / CVaR, cvar_floor, 1)      (1 when CVaR <= 0: no tail loss)
        out  = 1 - cvar_weight * (1 - raw)                    (1 while n < cvar_min_obs)
    """
    width = returns_NW.shape[-1]
    dtype = returns_NW.dtype
    n = count_N.clamp(max=width).to(dtype)  # [N]
    slot = torch.arange(width, device=returns_NW.device, dtype=dtype)  # [W]
    valid = slot < n.unsqueeze(-1)  # [N, W]
    padded = torch.where(valid, returns_NW, torch.full_like(returns_NW, float("inf")))
    k = torch.ceil((1.0 - params.cvar_confidence) * n - _TAIL_ROUNDING).clamp(min=1.0)  # [N]
    k_max = max(1, math.ceil((1.0 - params.cvar_confidence) * width - _TAIL_ROUNDING))  # k <= k_max
    tail_sum = smallest_sum(padded, k, k_max)  # k <= n: the tail never reaches the +inf padding
    cvar = -tail_sum / k
    tiny = torch.finfo(dtype).tiny
    raw = torch.where(cvar > 0, params.cvar_budget / cvar.clamp(min=tiny), torch.ones_like(cvar))
    blended = 1.0 - params.cvar_weight * (1.0 - raw.clamp(params.cvar_floor, 1.0))
    active = n >= params.cvar_min_obs
    return torch.where(active, blended, torch.ones_like(blended))


# --- the product -------------------------------------------------------------------------------


def effective_max_position(
    max_position: Tensor | float,
    cvar_scale: Tensor | float,
    conviction: Tensor | float,
    kelly: Tensor | float,
    variance_scale: Tensor | float,
) -> Tensor:
    """``max_position * cvar * conviction * kelly * variance`` in contracts (float, not rounded).

    Each factor arrives already floored on its own (module docstring, "How the floors compose"): the
    variance factor by ``max`` at the conviction, Kelly and CVaR by their clamps. This function only
    multiplies; it adds no floor. Target exposure = sign(direction) * magnitude fraction * this.
    """
    factors = (max_position, cvar_scale, conviction, kelly, variance_scale)
    ref = next((f for f in factors if isinstance(f, Tensor)), None)
    if ref is None:
        raise TypeError("effective_max_position needs at least one tensor factor (batched [N] input)")
    dtype = ref.dtype if ref.is_floating_point() else torch.get_default_dtype()
    # Left to right; Python scalars stay scalars, so no host-to-device copy (which a CUDA-graph
    # capture refuses).
    out: Tensor | float = 1.0
    for factor in factors:
        out = out * (factor.to(dtype) if isinstance(factor, Tensor) else float(factor))
    return out  # type: ignore[return-value]  # a tensor: one factor is
