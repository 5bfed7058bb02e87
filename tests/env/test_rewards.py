"""Rewards: a scripted trade worked by hand, the |PnL| bound of every shaping term (invariant 9, over
random trades), the branch decomposition summing to net PnL, batching, compilation and devices.

Unit: capital $100 000 x pnl_scale 1e-3 = $100 per reward unit.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from foxhunt.domain.actions import BRANCHES
from foxhunt.env.config import RewardConfig
from foxhunt.env.rewards import (
    COMPONENTS,
    TradePath,
    advance_trade,
    normalise_pnl,
    open_trade,
    regime_move_ema,
    shaping_terms,
    step_reward,
)

F64 = torch.float64
CAPITAL = 100_000.0
SHAPING = ("entry_bonus", "exit_timing_bonus", "drawdown_recovery_bonus", "regime_shift_penalty")


def t(*values: float, dtype: torch.dtype = F64, device: str = "cpu") -> torch.Tensor:
    return torch.tensor(values, dtype=dtype, device=device)


def b(*values: bool, device: str = "cpu") -> torch.Tensor:
    return torch.tensor(values, dtype=torch.bool, device=device)


def close(actual: torch.Tensor, expected: torch.Tensor, atol: float = 1e-9) -> None:
    torch.testing.assert_close(actual, expected.to(actual.device, actual.dtype), rtol=0, atol=atol)


def params(**coefficients: float) -> RewardConfig:
    return RewardConfig(pnl_scale=1e-3, regime_threshold_mult=3.0, **coefficients)


# --- the scripted trade -------------------------------------------------------------------------------
#
# bar          0 (open)  1      2      3 (peak)  4 (close)
# step PnL $   -10      -90    +300   +100      -150        (entry cost, marks, exit cost)
# trade PnL $  -10      -100   200    300       150
# regime       0.0      0.0    0.2    0.6       0.7         (entry 0.0; EMA of |change| held at 0.1)
# threshold    -        0.3    0.424  0.520     0.6         (3 x 0.1 x sqrt(hold))
#
# R = 150 / 100 = 1.5; hold = 4; peak 3.0 on bar 3 -> bars_since_peak = 1; trough -1.0 -> |m| = 1
# entry quality e = (MFE - MAE) / (MFE + MAE) = (3 - 1) / (3 + 1) = 0.5            -> entry = 0.75
# exit timing 1 - 2 x 1/4 = 0.5                                                        -> 0.75
# drawdown recovery |m| tanh(R / |m|) = tanh(1.5) = 0.9051482536448664                 -> 0.905148...
# regime: drift 0.6 > 0.520 first on bar 3, held one bar after it: -1.5 x 1/4           -> -0.375

STEP_PNL = (-10.0, -90.0, 300.0, 100.0, -150.0)
REGIME = (0.0, 0.0, 0.2, 0.6, 0.7)
EXPECTED = {
    "entry_bonus": 0.75,
    "exit_timing_bonus": 0.75,
    "drawdown_recovery_bonus": math.tanh(1.5),
    "regime_shift_penalty": -0.375,
}


def run_scripted_trade(p: RewardConfig, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor, TradePath]:
    """Rewards [5 bars, 2 envs] and components [5, 2, 5]; env 1 stays flat throughout."""
    path = TradePath.zeros(2, device=device, dtype=F64)
    ema = t(0.1, 0.1, device=device)
    rewards, components = [], []
    for bar, (pnl, regime) in enumerate(zip(STEP_PNL, REGIME, strict=True)):
        reg = t(regime, 0.0, device=device)
        if bar == 0:
            path = open_trade(path, b(True, False, device=device), t(pnl, 0.0, device=device), reg)
        else:
            path = advance_trade(path, b(True, False, device=device), t(pnl, 0.0, device=device), reg, ema, p)
        closed = b(bar == len(STEP_PNL) - 1, False, device=device)
        reward, comp = step_reward(t(pnl, 0.0, device=device), closed, path, CAPITAL, p)
        rewards.append(reward)
        components.append(comp)
    return torch.stack(rewards), torch.stack(components), path


def test_scripted_trade_path() -> None:
    _, _, path = run_scripted_trade(params())
    close(path.pnl, t(150.0, 0.0))
    close(path.peak, t(300.0, 0.0))
    close(path.trough, t(-100.0, 0.0))
    close(path.hold_bars, t(4.0, 0.0))
    close(path.bars_since_peak, t(1.0, 0.0))
    assert path.shifted.tolist() == [True, False]
    close(path.bars_after_shift, t(1.0, 0.0))


def test_all_coefficients_zero_give_exactly_normalised_net_pnl() -> None:
    rewards, components, _ = run_scripted_trade(params())
    pnl = torch.tensor(STEP_PNL, dtype=F64) / 100.0
    assert torch.equal(rewards[:, 0], pnl)
    assert torch.equal(components[:, 0, 0], pnl)
    assert torch.count_nonzero(components[..., 1:]) == 0
    assert torch.count_nonzero(rewards[:, 1]) == 0
    assert components.shape == (5, 2, len(COMPONENTS))


@pytest.mark.parametrize("name", SHAPING)
@pytest.mark.parametrize("coefficient", [1.0, 0.5])
def test_scripted_trade_each_coefficient_alone(name: str, coefficient: float) -> None:
    rewards, components, _ = run_scripted_trade(params(**{name: coefficient}))
    column = 1 + SHAPING.index(name)
    term = coefficient * EXPECTED[name]
    # shaping is paid on the closing bar only, in its own column
    close(components[-1, 0, column : column + 1], t(term))
    assert torch.count_nonzero(components[:-1, :, 1:]) == 0
    others = [c for c in range(1, len(COMPONENTS)) if c != column]
    assert torch.count_nonzero(components[:, :, others]) == 0
    close(rewards[:, 0], torch.tensor(STEP_PNL, dtype=F64) / 100.0 + t(0, 0, 0, 0, term))
    close(rewards, components.sum(-1))
    # bounded by coefficient x |R| = coefficient x 1.5
    assert abs(term) <= coefficient * 1.5


def test_losing_trade_gets_no_recovery_and_penalties_for_late_exit() -> None:
    # a trade that peaks at entry (-2 $) and falls to -102 $ with a shift at once: e = -1, late = 1
    p = params(entry_bonus=1.0, exit_timing_bonus=1.0, drawdown_recovery_bonus=1.0, regime_shift_penalty=1.0)
    path = open_trade(TradePath.zeros(1, dtype=F64), b(True), t(-2.0), t(0.0))
    for _ in range(4):
        path = advance_trade(path, b(True), t(-25.0), t(5.0), t(0.1), p)
    _, comp = step_reward(t(-25.0), b(True), path, CAPITAL, p)
    # R = -1.02: entry -1.02 (all adverse), exit timing -1.02 (peak on entry), no recovery,
    # regime shifted on bar 1, held 3 bars after: -1.02 x 3/4
    close(comp[0], t(-0.25, -1.02, -1.02, 0.0, -1.02 * 0.75))


def test_reversal_closes_one_trade_and_opens_the_next() -> None:
    p = params(exit_timing_bonus=1.0)
    path = open_trade(TradePath.zeros(1, dtype=F64), b(True), t(-5.0), t(0.0))
    path = advance_trade(path, b(True), t(105.0), t(0.0), t(0.0), p)  # +100 $, a new peak
    # reversal bar: the old trade's part (+50 $ mark, -5 $ exit) closes it; the new one opens at -5 $
    path = advance_trade(path, b(True), t(45.0), t(0.0), t(0.0), p)
    reward, comp = step_reward(t(40.0), b(True), path, CAPITAL, p)
    close(comp[0], t(0.4, 0.0, 1.45, 0.0, 0.0))  # exit on the peak: +|R| = 1.45
    path = open_trade(path, b(True), t(-5.0), t(0.0))
    close(torch.stack(path[:5]), t(-5.0, -5.0, -5.0, 0.0, 0.0).unsqueeze(-1))
    close(reward, t(1.85))


def test_regime_move_ema_cold_start_then_ema() -> None:
    p = RewardConfig(regime_ema_alpha=0.25)
    ema = torch.zeros(1, dtype=F64)
    # steps 0..2: running mean of |change| (1/(t+1) >= 0.25): 0.4, mean(0.4, 0.2) = 0.3, mean(.., 0.6) = 0.4
    # step 3 onward: rate max(0.25, 1/4) = 0.25: 0.4 + 0.25 (0.8 - 0.4) = 0.5; then 0.5 + 0.25 (0 - 0.5)
    expected = (0.4, 0.3, 0.4, 0.5, 0.375)
    for step, (change, want) in enumerate(zip((-0.4, 0.2, -0.6, 0.8, 0.0), expected, strict=True)):
        ema = regime_move_ema(ema, t(change), torch.tensor([step]), p)
        close(ema, t(want))


def test_params_reject_out_of_range_coefficients() -> None:
    with pytest.raises(ValidationError):
        RewardConfig(entry_bonus=1.5)
    with pytest.raises(ValidationError):
        RewardConfig(regime_shift_penalty=-0.1)
    with pytest.raises(ValidationError):
        RewardConfig(entry_bonsu=0.1)


# --- invariant 9: every shaping term is bounded by coefficient x |trade PnL| --------------------------


def reference_terms(
    entry_pnl: float, steps: list[float], regime: list[float], ema: float, p: RewardConfig
) -> tuple[float, list[float]]:
    """Plain-Python shaping terms of one trade (normalised R and the four unclamped terms)."""
    unit = CAPITAL * p.pnl_scale
    path = [entry_pnl]
    for s in steps:
        path.append(path[-1] + s)
    hold = len(steps)
    r, peak, trough = path[-1] / unit, max(path) / unit, min(path) / unit
    peak_bar = path.index(max(path))  # earliest bar of the maximum
    mfe, mae = max(peak, 0.0), max(-trough, 0.0)
    quality = (mfe - mae) / (mfe + mae) if mfe + mae > 0 else 0.0
    timing = 1.0 - 2.0 * (hold - peak_bar) / max(hold, 1)
    depth = max(-trough, 0.0)
    recovery = depth * math.tanh(max(r, 0.0) / depth) if depth > 0 else 0.0
    threshold = [p.regime_threshold_mult * ema * math.sqrt(k) for k in range(hold + 1)]
    shift_bar = next((k for k in range(1, hold + 1) if abs(regime[k] - regime[0]) > threshold[k]), None)
    after = 0 if shift_bar is None else hold - shift_bar
    return r, [
        p.entry_bonus * abs(r) * quality,
        p.exit_timing_bonus * abs(r) * timing,
        p.drawdown_recovery_bonus * recovery,
        -p.regime_shift_penalty * abs(r) * after / max(hold, 1),
    ]


money = st.floats(-5_000.0, 5_000.0, allow_nan=False, allow_infinity=False)
trade = st.integers(1, 25).flatmap(
    lambda n: st.tuples(
        st.floats(-50.0, 0.0),  # entry PnL (the entry cost, maybe a mark)
        st.lists(money, min_size=n, max_size=n),  # step PnLs after entry
        st.lists(st.floats(-2.0, 2.0), min_size=n + 1, max_size=n + 1),  # regime path, entry bar first
    )
)


@settings(max_examples=150, deadline=None)
@given(
    trades=st.lists(trade, min_size=1, max_size=6),
    coefficients=st.tuples(*(st.floats(0.0, 1.0) for _ in SHAPING)),
    ema=st.floats(0.0, 0.5),
)
def test_shaping_terms_bounded_by_trade_pnl(
    trades: list[tuple[float, list[float], list[float]]], coefficients: tuple[float, ...], ema: float
) -> None:
    p = params(**dict(zip(SHAPING, coefficients, strict=True)))
    n = len(trades)
    bars = max(len(steps) for _, steps, _ in trades)
    path = open_trade(
        TradePath.zeros(n, dtype=F64),
        torch.ones(n, dtype=torch.bool),
        t(*(e for e, _, _ in trades)),
        t(*(reg[0] for _, _, reg in trades)),
    )
    length = torch.tensor([len(steps) for _, steps, _ in trades])
    for bar in range(1, bars + 1):
        holding = length >= bar
        step = t(*(steps[bar - 1] if len(steps) >= bar else 0.0 for _, steps, _ in trades))
        regime = t(*(reg[bar] if len(reg) > bar else 0.0 for _, _, reg in trades))
        path = advance_trade(path, holding, step, regime, torch.full((n,), ema, dtype=F64), p)
        closed = length == bar
        reward, comp = step_reward(step, closed, path, CAPITAL, p)
        abs_r = normalise_pnl(path.pnl, CAPITAL, p).abs()
        coef = t(*coefficients)
        # the invariant, on every step: |term| <= coefficient x |R| (exactly: the code clamps)
        assert bool((comp[:, 1:].abs() <= coef * abs_r.unsqueeze(-1)).all())
        assert torch.count_nonzero(comp[~closed, 1:]) == 0
        close(reward, comp.sum(-1))
        # and the bound is not the clamp's doing: the unclamped formulas match and obey it
        for row in torch.nonzero(closed).flatten().tolist():
            r, ref = reference_terms(*trades[row], ema, p)
            close(comp[row, 1:], t(*ref), atol=1e-9 * max(1.0, abs(r)))
            for term, c in zip(ref, coefficients, strict=True):
                assert abs(term) <= c * abs(r) * (1 + 1e-12) + 1e-15


# --- branch decomposition (removed) -------------------------------------------------------------------


def test_branch_decomposition_is_gone() -> None:
    """It was computed and never read by the learner (issue 22): its weight is an unknown key now."""
    with pytest.raises(ValidationError, match="branch_decomposition"):
        RewardConfig.model_validate({"branch_decomposition": 1.0})
    assert BRANCHES == ("direction", "magnitude", "order_type", "urgency")  # the action branches stay


# --- batching, compilation, devices -------------------------------------------------------------------


def test_batched_matches_one_at_a_time() -> None:
    p = params(entry_bonus=0.3, exit_timing_bonus=0.7, drawdown_recovery_bonus=1.0, regime_shift_penalty=0.2)
    gen = torch.Generator().manual_seed(7)
    n = 8
    trade = TradePath(
        pnl=torch.randn(n, generator=gen, dtype=F64) * 300,
        peak=torch.rand(n, generator=gen, dtype=F64) * 500,
        trough=-torch.rand(n, generator=gen, dtype=F64) * 500,
        hold_bars=torch.randint(0, 20, (n,), generator=gen).to(F64),
        bars_since_peak=torch.randint(0, 5, (n,), generator=gen).to(F64),
        regime_entry=torch.zeros(n, dtype=F64),
        shifted=torch.rand(n, generator=gen) < 0.5,
        bars_after_shift=torch.randint(0, 5, (n,), generator=gen).to(F64),
    )
    capital = torch.full((n,), CAPITAL, dtype=F64)
    batch = shaping_terms(trade, capital, p)
    for row in range(n):
        one = TradePath(*(field[row : row + 1] for field in trade))
        close(batch[row : row + 1], shaping_terms(one, CAPITAL, p))


def test_step_reward_traces_without_graph_break() -> None:
    p = params(entry_bonus=0.5, exit_timing_bonus=0.5, drawdown_recovery_bonus=0.5, regime_shift_penalty=0.5)

    def fn(path: TradePath, step: torch.Tensor, regime: torch.Tensor, holding: torch.Tensor) -> torch.Tensor:
        ema = regime_move_ema(torch.zeros_like(step), regime, torch.zeros_like(step), p)
        path = advance_trade(path, holding, step, regime, ema, p)
        reward, comp = step_reward(step, holding, path, CAPITAL, p)
        path = open_trade(path, ~holding, step, regime)
        return reward + comp.sum(-1) + path.pnl

    compiled = torch.compile(fn, backend="eager", fullgraph=True)
    path = open_trade(
        TradePath.zeros(3, dtype=F64), b(True, True, False), t(-5.0, -2.0, 0.0), t(0.1, 0.2, 0.0)
    )
    args = (path, t(50.0, -30.0, 0.0), t(0.3, 0.0, 0.1), b(True, True, False))
    close(compiled(*args), fn(*args))


@pytest.mark.gpu
def test_cuda_matches_cpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    p = params(entry_bonus=1.0, exit_timing_bonus=1.0, drawdown_recovery_bonus=1.0, regime_shift_penalty=1.0)
    cpu = run_scripted_trade(p, "cpu")
    gpu = run_scripted_trade(p, "cuda")
    for a, g in zip((cpu[0], cpu[1], *cpu[2]), (gpu[0], gpu[1], *gpu[2]), strict=True):
        assert g.device.type == "cuda"
        torch.testing.assert_close(g.cpu(), a)
