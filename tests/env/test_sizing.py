"""Sizing: conviction, variance scale, Kelly, CVaR and their product, checked against hand-worked numbers.

Defaults unless stated: conviction clamp [0.25, 1], half Kelly after 20 trades with floor 0.25,
CVaR at 95% over a 100-step window after 20 returns, budget 0.5% of equity, floor 0.25.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from foxhunt.env.config import PositionSizingConfig
from foxhunt.env.sizing import (
    conviction,
    cvar_scale,
    effective_max_position,
    kelly_cap_by_magnitude,
    kelly_fraction,
    kelly_optimal_f,
    push_return,
    smallest_sum,
    smallest_sum_by_rounds,
    variance_scale,
)

P = PositionSizingConfig()
F64 = torch.float64
FRACTIONS = (0.25, 0.5, 1.0)


def t(*values: float, dtype: torch.dtype = F64, device: str = "cpu") -> torch.Tensor:
    return torch.tensor(values, dtype=dtype, device=device)


def i(*values: int, device: str = "cpu") -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64, device=device)


def close(actual: torch.Tensor, expected: torch.Tensor, atol: float = 1e-9) -> None:
    torch.testing.assert_close(actual, expected.to(actual.device, actual.dtype), rtol=0, atol=atol)


# --- params --------------------------------------------------------------------------------------


def test_params_reject_inverted_conviction_range_and_unknown_keys() -> None:
    with pytest.raises(ValidationError, match="conviction_min"):
        PositionSizingConfig(conviction_min=0.8, conviction_max=0.5)
    with pytest.raises(ValidationError, match="cvar_min_obs"):
        PositionSizingConfig(cvar_window=10, cvar_min_obs=20)
    with pytest.raises(ValidationError):
        PositionSizingConfig(kelly_fractoin=0.5)  # typo: unknown keys are rejected
    with pytest.raises(ValidationError):
        PositionSizingConfig(
            kelly_fraction=0.0
        )  # zero Kelly would size to the floor forever: use kelly_weight


# --- conviction and variance -----------------------------------------------------------------------


def test_conviction_clamps_q_gap() -> None:
    close(conviction(t(0.1, 0.5, 2.0, 1.0, -3.0), P), t(0.25, 0.5, 1.0, 1.0, 0.25))


def test_variance_scale_floored_at_conviction_by_max() -> None:
    # raw 1/(1+sqrt(v)): v=0 -> 1; v=1 -> 0.5; v=9 -> 0.25; v=0.25 -> 1/1.5 = 0.6667; v=-1e-9 -> 1 (round-off)
    var_q = t(0.0, 1.0, 9.0, 0.25, 9.0, -1e-9)
    conv = t(0.25, 0.25, 0.5, 0.5, 1.0, 0.25)
    close(variance_scale(var_q, conv), t(1.0, 0.5, 0.5, 2.0 / 3.0, 1.0, 1.0))
    # a scripted policy passes the neutral conviction 1.0 as a float: variance never shrinks it
    close(variance_scale(var_q, 1.0), torch.ones(6, dtype=F64))


# --- Kelly ---------------------------------------------------------------------------------------


def test_kelly_optimal_f_hand_worked() -> None:
    # row 0: 12 wins of $300, 8 losses of $200: p = 0.6, b = 1.5, f* = 0.6 - 0.4/1.5 = 1/3
    # row 1: 10 wins of $100, 10 losses of $100: f* = 0.5 - 0.5 = 0
    # row 2: 20 wins, no loss: f* = p = 1;  row 3: 20 losses, no win: f* -> -inf, clamped to -1
    # row 4: 5 wins of $100, 15 losses of $100: f* = 0.25 - 0.75 = -0.5;  row 5: no trade: 0
    f = kelly_optimal_f(
        i(12, 10, 20, 0, 5, 0),
        i(8, 10, 0, 20, 15, 0),
        t(3600.0, 1000.0, 2000.0, 0.0, 500.0, 0.0),
        t(1600.0, 1000.0, 0.0, 4000.0, 1500.0, 0.0),
    )
    close(f, t(1.0 / 3.0, 0.0, 1.0, -1.0, -0.5, 0.0))
    # the sign convention of sum_loss does not matter
    close(kelly_optimal_f(i(12), i(8), t(3600.0), t(-1600.0)), t(1.0 / 3.0))


def _kelly(n_trades: int, dir_conv: float, mag_conv: float, params: PositionSizingConfig = P) -> torch.Tensor:
    # 12 wins of $300/contract, 8 losses of $200/contract, equity $10 000, max position 10 contracts
    return kelly_fraction(
        i(12), i(8), t(3600.0), t(1600.0), i(n_trades), t(dir_conv), t(mag_conv), 10_000.0, 10, params
    )


def test_kelly_fraction_hand_worked() -> None:
    # s = max(0.4, 0.8) = 0.8; K = 0.8 * 0.5 * (1/3) * 10 000 / 200 = 6.6667 contracts -> 0.66667 of 10
    close(_kelly(20, 0.4, 0.8), t(2.0 / 3.0))
    # the max of the two convictions, not their product (0.32 would give 0.2667)
    close(_kelly(20, 0.8, 0.4), t(2.0 / 3.0))
    # kelly_weight blends toward 1: 1 - 0.5 * (1 - 2/3) = 5/6; weight 0 switches Kelly off
    close(_kelly(20, 0.4, 0.8, PositionSizingConfig(kelly_weight=0.5)), t(5.0 / 6.0))
    close(_kelly(20, 0.4, 0.8, PositionSizingConfig(kelly_weight=0.0)), t(1.0))
    # full Kelly with full conviction: K = 1 * 1 * (1/3) * 50 = 16.7 contracts -> capped at 1
    close(_kelly(20, 1.0, 1.0, PositionSizingConfig(kelly_fraction=1.0)), t(1.0))


def test_kelly_inactive_before_min_trades_active_after() -> None:
    # a losing history (f* = -0.5) gives the floor once 20 trades are in, and 1 (no cap) before
    args = (
        i(5, 5, 5, 5),
        i(15, 15, 15, 15),
        t(500.0, 500.0, 500.0, 500.0),
        t(1500.0, 1500.0, 1500.0, 1500.0),
    )
    k = kelly_fraction(*args, i(0, 19, 20, 50), 1.0, 1.0, 250_000.0, 10, P)
    close(k, t(1.0, 1.0, P.kelly_floor, P.kelly_floor))
    k30 = kelly_fraction(
        *args, i(19, 20, 29, 30), 1.0, 1.0, 250_000.0, 10, PositionSizingConfig(kelly_min_trades=30)
    )
    close(k30, t(1.0, 1.0, 1.0, P.kelly_floor))


def test_kelly_cap_by_magnitude() -> None:
    kelly = t(1.0, 2.0 / 3.0, 0.5, 0.3, 0.25, 0.1)
    assert kelly_cap_by_magnitude(kelly, FRACTIONS).tolist() == [2, 1, 1, 0, 0, 0]
    # float32 Kelly of exactly Half still allows Half
    assert kelly_cap_by_magnitude(torch.tensor([0.5], dtype=torch.float32), FRACTIONS).tolist() == [1]
    # before 20 trades the Kelly factor is 1, so every magnitude is allowed (5 magnitudes here)
    k = _kelly(19, 0.25, 0.25)
    assert kelly_cap_by_magnitude(k, (0.1, 0.2, 0.4, 0.7, 1.0)).tolist() == [4]
    # after: K = 0.25 * 0.5 * (1/3) * 50 = 2.083 contracts = 0.2083 -> floor 0.25: Quarter only
    assert kelly_cap_by_magnitude(_kelly(20, 0.25, 0.25), FRACTIONS).tolist() == [0]
    with pytest.raises(ValueError, match="increasing"):
        kelly_cap_by_magnitude(kelly, (0.5, 0.25, 1.0))


# --- CVaR ----------------------------------------------------------------------------------------


def test_push_return_ring_buffer() -> None:
    ring = torch.zeros(2, 3, dtype=F64)
    ring, count = push_return(ring, i(0, 4), t(0.1, 0.2))
    close(ring, t(0.1, 0.0, 0.0, 0.0, 0.2, 0.0).reshape(2, 3))  # slots 0 % 3 and 4 % 3
    assert count.tolist() == [1, 5]


def test_push_return_masked_rows_unchanged() -> None:
    ring = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=F64)
    out, count = push_return(ring, i(1, 2), t(0.1, 0.2), torch.tensor([True, False]))
    close(out, t(1.0, 0.1, 3.0, 4.0, 5.0, 6.0).reshape(2, 3))  # row 0 slot 1 written; row 1 as it was
    assert count.tolist() == [2, 2]


def test_smallest_sum_counts_ties() -> None:
    inf = float("inf")
    rows = torch.tensor(
        [
            [0.0, -1.0, 0.0, -1.0, 2.0],  # k = 3: -1 -1 0 -> -2
            [0.0, 0.0, 0.0, 0.0, 0.0],  # k = 4 of five equal zeros -> 0
            [3.0, -2.0, inf, inf, inf],  # k = 2 of the two finite entries -> 1
            [5.0, 4.0, 3.0, 2.0, 1.0],  # k = 1 -> 1
        ],
        dtype=F64,
    )
    close(smallest_sum(rows, t(3.0, 4.0, 2.0, 1.0), k_max=4), t(-2.0, 0.0, 1.0, 1.0))
    # against a sort, on random rows with many ties
    gen = torch.Generator().manual_seed(3)
    x = torch.randint(-3, 4, (200, 20), generator=gen).to(F64) * 0.01
    k = torch.randint(1, 6, (200,), generator=gen).to(F64)
    ref = torch.where(torch.arange(20) < k[:, None], x.sort(-1).values, 0.0).sum(-1)
    close(smallest_sum(x, k, k_max=5), ref)


def test_smallest_sum_by_rounds_hand_worked() -> None:
    """The rounds (the compiled CUDA path) count ties and stop at the +inf padding: each round takes
    the next distinct value times as many of its copies as k still needs."""
    inf = float("inf")
    rows = torch.tensor(
        [
            [0.0, -1.0, 0.0, -1.0, 2.0],  # k 3: round 1 takes -1 twice, round 2 one 0 of two -> -2
            [0.0, 0.0, 0.0, 0.0, 0.0],  # k 4: round 1 takes 4 of five zeros, rounds 2-4 find +inf
            [3.0, -2.0, inf, inf, inf],  # k 2: -2 then 3 -> 1; the padding is never summed
            [5.0, 4.0, 3.0, 2.0, 1.0],  # k 4: 1 + 2 + 3 + 4 -> 10
        ],
        dtype=F64,
    )
    got = smallest_sum_by_rounds(rows, t(3.0, 4.0, 2.0, 4.0), k_max=4)
    close(got, t(-2.0, 0.0, 1.0, 10.0))
    assert torch.isfinite(got).all()
    gen = torch.Generator().manual_seed(13)  # against a sort, many ties and padding
    x = torch.randint(-3, 4, (500, 100), generator=gen).to(F64) * 0.01
    x[:80, 30:] = inf
    k = torch.randint(1, 6, (500,), generator=gen).to(F64)
    ref = torch.where(torch.arange(100) < k[:, None], x.sort(-1).values, 0.0).sum(-1)
    close(smallest_sum_by_rounds(x, k, k_max=5), ref, atol=1e-12)


def test_smallest_sum_is_one_selection() -> None:
    """The tail is one selection (topk on the CPU, a row sort on CUDA) and a masked sum: the same few
    operators whatever the tail size (the rounds it replaced launched ~17 a round, 88 at the default
    tail of 5), equal to a plain sort's sum, ties and +inf padding included."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.n += 1
            return func(*args, **(kwargs or {}))

    gen = torch.Generator().manual_seed(5)
    x = torch.randint(-3, 4, (300, 100), generator=gen).to(F64) * 0.01
    x[:50, 60:] = float("inf")  # padding past the written slots
    counts = []
    cases = [(k_max, torch.randint(1, k_max + 1, (300,), generator=gen).to(F64)) for k_max in (5, 16, 40)]
    for k_max, k in cases:
        with Count() as c:
            got = smallest_sum(x, k, k_max)
        counts.append(c.n)
        ref = torch.where(torch.arange(100) < k[:, None], x.sort(-1).values, 0.0).sum(-1)
        close(got, ref, atol=1e-12)
    assert counts[0] == counts[1] == counts[2] <= 8, counts


def test_cvar_scale_hand_worked() -> None:
    params = PositionSizingConfig(cvar_confidence=0.9, cvar_window=20, cvar_min_obs=5, cvar_budget=0.005)
    base = [0.001] * 18 + [-0.02, -0.01]
    rows = [
        base,  # n = 20, k = ceil(0.1 * 20) = 2: CVaR = (0.02 + 0.01) / 2 = 0.015 -> 0.005 / 0.015 = 1/3
        [0.001] * 9 + [-0.01] + [-1.0] * 10,  # count 10: n = 10, k = 1, CVaR 0.01 -> 0.5 (slots >= 10 unread)
        base,  # count 45 > W: the whole (wrapped) buffer is valid -> 1/3
        [-0.1] * 20,  # CVaR 0.1 -> 0.05, floored at 0.25
        [0.001] * 20,  # no tail loss (CVaR < 0) -> 1
        base,  # count 4 < cvar_min_obs -> 1
    ]
    out = cvar_scale(torch.tensor(rows, dtype=F64), i(20, 10, 45, 20, 20, 4), params)
    close(out, t(1.0 / 3.0, 0.5, 1.0 / 3.0, 0.25, 1.0, 1.0))
    # cvar_weight blends toward 1; 0 switches the factor off
    half = cvar_scale(
        torch.tensor(rows, dtype=F64),
        i(20, 10, 45, 20, 20, 4),
        params.model_copy(update={"cvar_weight": 0.5}),
    )
    close(half, t(2.0 / 3.0, 0.75, 2.0 / 3.0, 0.625, 1.0, 1.0))
    off = cvar_scale(
        torch.tensor(rows, dtype=F64),
        i(20, 10, 45, 20, 20, 4),
        params.model_copy(update={"cvar_weight": 0.0}),
    )
    close(off, torch.ones(6, dtype=F64))


def test_cvar_tail_size_is_exact_at_95_percent() -> None:
    # 100 returns at 95%: the tail is exactly 5 (not 6 from 0.05 * 100 = 5.000000000000004)
    returns = torch.zeros(1, 100, dtype=torch.float32)
    returns[0, :6] = torch.tensor([-0.01, -0.01, -0.01, -0.01, -0.01, -0.005])
    close(cvar_scale(returns, i(100), P), t(0.5, dtype=torch.float32), atol=1e-6)  # 0.005 / 0.01


# --- the product and how the floors compose --------------------------------------------------------


def test_effective_max_position_hand_worked() -> None:
    # 10 x 0.5 x 0.8 x (2/3) x 0.9 = 2.4 contracts; 20 x 1 x 0.25 x 0.25 x 0.25 = 0.3125
    out = effective_max_position(t(10.0, 20.0), t(0.5, 1.0), t(0.8, 0.25), t(2.0 / 3.0, 0.25), t(0.9, 0.25))
    close(out, t(2.4, 0.3125))
    # python numbers broadcast against [N] tensors
    close(effective_max_position(10, t(0.5, 1.0), 1.0, 1.0, 1.0), t(5.0, 10.0))
    with pytest.raises(TypeError, match="tensor"):
        effective_max_position(10, 1.0, 1.0, 1.0, 1.0)


def test_sure_network_wanting_full_is_not_silenced() -> None:
    # the network is sure (Q-gap >= 1) but its Q distribution is wide (var_Q = 9): the old
    # compounded shrink gave conviction x 1/(1+sqrt(var)) = 0.25 of the size; here variance is floored
    # at the conviction by max, so the sure call keeps the full size
    conv = conviction(t(1.5, 1.5), P)
    var = variance_scale(t(9.0, 0.0), conv)
    close(var, t(1.0, 1.0))
    full = effective_max_position(10, 1.0, conv, 1.0, var)
    close(full, t(10.0, 10.0))
    # a moderately sure call (conviction 0.6) with low Q-variance (0.01): variance 1/1.1 = 0.909
    conv = conviction(t(0.6), P)
    close(effective_max_position(10, 1.0, conv, 1.0, variance_scale(t(0.01), conv)), t(6.0 / 1.1))


@settings(max_examples=200, deadline=None)
@given(
    q_gap=st.floats(-2.0, 3.0),
    var_q=st.floats(0.0, 1e4),
    cvar=st.floats(P.cvar_floor, 1.0),
    wins=st.integers(0, 60),
    losses=st.integers(0, 60),
    avg_win=st.floats(0.0, 1e4),
    avg_loss=st.floats(0.0, 1e4),
    mag_q_gap=st.floats(-2.0, 3.0),
)
def test_effective_size_lower_bound(
    q_gap: float,
    var_q: float,
    cvar: float,
    wins: int,
    losses: int,
    avg_win: float,
    avg_loss: float,
    mag_q_gap: float,
) -> None:
    # every factor keeps its own floor: size >= max_pos x cvar x kelly_floor x conviction^2, and the
    # variance factor never goes under the conviction
    conv = conviction(t(q_gap), P)
    var = variance_scale(t(var_q), conv)
    n = wins + losses
    kelly = kelly_fraction(
        i(wins),
        i(losses),
        t(wins * avg_win),
        t(losses * avg_loss),
        i(n),
        conv,
        conviction(t(mag_q_gap), P),
        250_000.0,
        10,
        P,
    )
    assert P.kelly_floor <= kelly.item() <= 1.0
    assert var.item() >= conv.item()
    size = effective_max_position(10, t(cvar), conv, kelly, var).item()
    assert size >= 10 * cvar * P.kelly_floor * conv.item() ** 2 * (1 - 1e-12)
    assert size <= 10 * cvar * (1 + 1e-12)


# --- batching, compilation, devices ------------------------------------------------------------------


def _all_factors(device: str, dtype: torch.dtype = F64) -> tuple[torch.Tensor, ...]:
    n = 6
    gen = torch.Generator().manual_seed(0)
    conv = conviction((torch.rand(n, generator=gen, dtype=dtype) * 1.5).to(device), P)
    var = variance_scale((torch.rand(n, generator=gen, dtype=dtype) * 4).to(device), conv)
    kelly = kelly_fraction(
        torch.tensor([12, 5, 0, 20, 12, 3], device=device),
        torch.tensor([8, 15, 20, 0, 8, 3], device=device),
        t(3600.0, 500.0, 0.0, 2000.0, 360.0, 30.0, dtype=dtype, device=device),
        t(1600.0, 1500.0, 4000.0, 0.0, 16_000.0, 30.0, dtype=dtype, device=device),
        torch.tensor([20, 20, 20, 20, 20, 6], device=device),
        conv,
        0.5,
        t(10_000.0, 10_000.0, 10_000.0, 10_000.0, 10_000.0, 10_000.0, dtype=dtype, device=device),
        10,
        P,
    )
    returns = (torch.randn(n, 100, generator=gen, dtype=dtype) * 0.004).to(device)
    cvar = cvar_scale(returns, torch.tensor([100, 50, 19, 20, 150, 100], device=device), P)
    cap = kelly_cap_by_magnitude(kelly, FRACTIONS)
    return conv, var, kelly, cvar, cap, effective_max_position(10, cvar, conv, kelly, var)


def test_batched_rows_match_one_at_a_time() -> None:
    conv, var, kelly, cvar, cap, size = _all_factors("cpu")
    assert all(x.shape == (6,) for x in (conv, var, kelly, cvar, cap, size))
    # row 1 (f* = -0.5) sits at the Kelly floor, row 5 (6 trades) is not yet capped
    assert kelly[1].item() == P.kelly_floor and kelly[5].item() == 1.0
    for row in range(6):
        close(size[row], effective_max_position(10, cvar[row], conv[row], kelly[row], var[row]))
    assert math.isfinite(size.sum().item())


def test_sizing_traces_without_graph_break() -> None:
    def fn(
        q_gap: torch.Tensor, var_q: torch.Tensor, returns: torch.Tensor, count: torch.Tensor
    ) -> torch.Tensor:
        conv = conviction(q_gap, P)
        var = variance_scale(var_q, conv)
        kelly = kelly_fraction(
            count // 2, count - count // 2, var_q * 100, q_gap * 50, count, conv, 0.5, 10_000.0, 10, P
        )
        cap = kelly_cap_by_magnitude(kelly, FRACTIONS)
        size = effective_max_position(10, cvar_scale(returns, count, P), conv, kelly, var)
        return size * cap

    compiled = torch.compile(fn, backend="eager", fullgraph=True)
    args = (t(0.3, 1.2), t(0.5, 4.0), torch.randn(2, 100, dtype=F64) * 0.01, i(30, 100))
    close(compiled(*args), fn(*args))


@pytest.mark.gpu
def test_cuda_matches_cpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    for a, b in zip(_all_factors("cpu"), _all_factors("cuda"), strict=True):
        assert b.device.type == "cuda"
        torch.testing.assert_close(b.cpu(), a)


def test_smallest_sum_compiles_as_one_opaque_operator() -> None:
    """Under ``torch.compile(fullgraph=True)`` the tail is the custom operator, called rather than
    lowered (Inductor's fused sort took minutes to build on CUDA: foxhunt.env.sizing), and gives the
    eager values."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randint(-3, 4, (64, 100), generator=gen).to(F64) * 0.01
    k = torch.randint(1, 6, (64,), generator=gen).to(F64)
    compiled = torch.compile(lambda v, kk: smallest_sum(v * 1.0, kk, 5), fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x, k), smallest_sum(x, k, 5))
    graph = torch._dynamo.explain(lambda v, kk: smallest_sum(v, kk, 5))(x, k)
    assert graph.graph_break_count == 0


@pytest.mark.gpu
def test_smallest_sum_on_cuda_takes_topk_s_values() -> None:
    """The CUDA path (a row sort) sums the values topk takes, in its order, bit for bit on the device;
    against the CPU within the last bit of a differently ordered sum."""
    gen = torch.Generator().manual_seed(11)
    x = torch.randint(-300, 301, (4096, 100), generator=gen).to(F64) * 1e-4
    x[:500, 40:] = float("inf")
    k = torch.randint(1, 6, (4096,), generator=gen).to(F64)
    xc, kc = x.cuda(), k.cuda()
    low = xc.topk(5, dim=-1, largest=False).values
    ref = torch.where(torch.arange(5, device="cuda") < kc[:, None], low, torch.zeros_like(low)).sum(-1)
    got = smallest_sum(xc, kc, 5)
    assert torch.equal(got, ref)
    torch.testing.assert_close(got.cpu(), smallest_sum(x, k, 5), rtol=1e-15, atol=1e-18)


@pytest.mark.gpu
def test_smallest_sum_compiled_on_cuda_takes_the_rounds() -> None:
    """Compiled on CUDA the tail is the rounds (fused by Inductor), equal to the eager operator's
    sort to the last bits of a differently ordered sum, ties and padding included."""
    gen = torch.Generator().manual_seed(17)
    x = torch.randint(-300, 301, (4096, 100), generator=gen).to(F64) * 1e-4
    x[:500, 40:] = float("inf")
    k = torch.randint(1, 6, (4096,), generator=gen).to(F64)
    xc, kc = x.cuda(), k.cuda()
    compiled = torch.compile(lambda v, kk: smallest_sum(v * 1.0, kk, 5), fullgraph=True)
    got = compiled(xc, kc)
    torch.testing.assert_close(got, smallest_sum(xc, kc, 5), rtol=1e-14, atol=1e-16)
    torch.testing.assert_close(got, smallest_sum_by_rounds(xc, kc, 5), rtol=1e-14, atol=1e-16)
