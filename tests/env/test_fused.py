"""The fused step (:mod:`foxhunt.env.fused`, one Triton kernel) against the eager step.

Over random markets (known and unknown books, touch sizes and volume or none) and random actions,
convictions and Q-variances, in float64 and float32, with the trade ledger on and off, default,
stressed and shaped configurations, several branch sizes and a CVaR tail wider than the kernel keeps
in registers: every state field, every result field (the limit-order events with the ledger), every
closed trade (its entry: magnitude, order type, urgency, entry costs) and the observation equal; the
counts say the comparison saw Kelly size steps (with one magnitude, as the max position's factor),
limit entries and each limit-order event.
Exactly, except the fields whose eager value is not one rounding (:mod:`foxhunt.env.fused`'s
docstring): the CVaR factor and the reward (row sums whose order PyTorch picks) and the
drawdown-recovery term (``tanh``), within 1e-12 relative in float64 and, in float32, 1e-6 relative
or 1e-6 of the field's largest magnitude in the batch (a sum's ulps are its largest term's).

Without a CUDA device the kernel runs under Triton's interpreter on the CPU (when Triton is
installed; the CPU install and CI have none, and these tests skip); the ``gpu`` tests run the same
comparisons on the device, the eager step on the device as the reference.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import pytest
import torch

from foxhunt.domain.actions import BranchConfig, OrderType
from foxhunt.env.config import CostConfig, EnvConfig, PositionSizingConfig, RewardConfig
from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.graph import advance, own_storage
from foxhunt.env.market import MarketTensors
from foxhunt.env.sizing import kelly_fraction
from foxhunt.env.trades import LIMIT_EVENTS
from foxhunt.features.layout import STATE_LAYOUT
from tests.env.test_core import config, market

NO_TRITON = importlib.util.find_spec("triton") is None
needs_triton = pytest.mark.skipif(NO_TRITON, reason="triton is not importable (the CPU install has none)")
CUDA = torch.cuda.is_available()
# The interpreter divides by zero where the eager step does too (masked lanes, a NaN queue).
pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")


@pytest.fixture(scope="module")
def fused() -> Iterator[object]:
    """``foxhunt.env.fused.fused_advance``, its kernel under Triton's interpreter where there is no
    CUDA device (the interpreter runs it on CPU tensors)."""
    before = os.environ.get("TRITON_INTERPRET")
    if not CUDA:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        from foxhunt.env.fused import fused_advance

        yield fused_advance
    finally:
        if before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = before


def random_market(rows: int, seed: int, dtype: torch.dtype, *, sizes: bool, unknown: float) -> MarketTensors:
    """A random walk on the ES tick grid; a share ``unknown`` of rows without a book (NaN touch:
    the spread model, tick rounding into the bar's range), touch sizes and volume (NaN on some
    rows) when ``sizes``."""
    g = torch.Generator().manual_seed(seed)
    steps = torch.randint(-3, 4, (rows,), generator=g).double() * 0.25
    mid = 4000.0 + torch.cumsum(steps, 0)
    low = mid - 0.25 * torch.randint(0, 4, (rows,), generator=g)
    high = mid + 0.25 * torch.randint(0, 4, (rows,), generator=g)
    touch = torch.randint(0, 12, (rows,), generator=g).double()
    volume = torch.randint(0, 9, (rows,), generator=g).double()
    volume[torch.rand(rows, generator=g) < 0.1] = float("nan")
    m = market(
        mid.tolist(),
        low=low.tolist(),
        high=high.tolist(),
        bid_size=touch.tolist() if sizes else None,
        volume=volume.tolist() if sizes else None,
    )
    fields = dict(m.__dict__)
    below = 0.25 * torch.randint(0, 2, (rows,), generator=g)  # touches on the grid, 1 to 3 ticks apart
    bid, ask = mid - below, mid + 0.25 + 0.25 * torch.randint(0, 2, (rows,), generator=g) - below
    gone = torch.rand(rows, generator=g) < unknown
    bid[gone], ask[gone] = float("nan"), float("nan")
    fields.update(bid=bid, ask=ask)
    fields["vol"] = torch.rand(rows, generator=g, dtype=torch.float64) * 4e-4
    fields["features"] = torch.randn(rows, fields["features"].shape[1], generator=g)
    for k in ("mid", "high", "low", "bid", "ask", "vol", "bid_size", "ask_size", "volume"):
        if fields[k] is not None:
            fields[k] = fields[k].to(dtype)
    return MarketTensors(**fields)


def _on(mk: MarketTensors, device: str) -> MarketTensors:
    moved = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in mk.__dict__.items()}
    return MarketTensors(**moved)


# A short ring that fills and evicts within an episode, a tail of 4 (of 12) or 5 (of 16) returns.
SIZING = PositionSizingConfig(cvar_window=12, cvar_min_obs=4, cvar_confidence=0.7, kelly_min_trades=2)
CONFIGS: dict[str, EnvConfig] = {
    # tests/env/test_core's small contract (2 lots, $100 k), default branches
    "base": config(horizon=6, profit_mult=3.0, stop_mult=3.0).model_copy(
        update={"branches": BranchConfig(), "sizing": SIZING, "episode_rows": 20}
    ),
    # stressed costs: wide modelled spread, heavy slippage, short patience, a capital floor that
    # binds, a trailing stop, the smallest branches (3 directions, one value each)
    "stressed": config(horizon=4, profit_mult=1.0, stop_mult=1.0, trailing_mult=0.5).model_copy(
        update={
            "branches": BranchConfig(
                direction=3, magnitude=1, order_type=1, urgency=1, magnitude_fractions=(1.0,)
            ),
            "costs": CostConfig(
                commission_per_contract=40.0,
                exchange_fee_per_contract=25.0,
                spread_model_ticks=6.0,
                slippage_ticks_per_contract=1.5,
                immediate_slippage_ticks=3.0,
                patience_bars=(1, 3, 1),
            ),
            "contract": config().contract.model_copy(
                update={"max_position": 40, "initial_capital": 60_000.0, "capital_floor": 0.9}
            ),
            "sizing": SIZING.model_copy(update={"cvar_budget": 1e-4, "kelly_fraction": 0.2}),
            "episode_rows": 24,
        }
    ),
    # every shaping term on, five magnitudes, two order types, two urgencies, ES default costs
    "shaped": config(horizon=8, profit_mult=2.0, stop_mult=2.0).model_copy(
        update={
            "branches": BranchConfig(
                magnitude=5, order_type=2, urgency=2, magnitude_fractions=(0.1, 0.25, 0.5, 0.75, 1.0)
            ),
            "costs": CostConfig(),
            "contract": config().contract.model_copy(update={"max_position": 7}),
            "rewards": RewardConfig(
                entry_bonus=0.5,
                exit_timing_bonus=0.3,
                drawdown_recovery_bonus=0.7,
                regime_shift_penalty=0.4,
                regime_ema_alpha=0.3,
                regime_threshold_mult=0.5,
            ),
            "sizing": SIZING.model_copy(update={"cvar_window": 16, "conviction_min": 0.3}),
            "episode_rows": 20,
        }
    ),
    # a CVaR tail wider than the kernel holds in registers (9 of 18 > 8: the [BLOCK, KP] tile's path)
    "wide": config(horizon=6, profit_mult=3.0, stop_mult=3.0).model_copy(
        update={
            "branches": BranchConfig(),
            "sizing": SIZING.model_copy(update={"cvar_window": 18, "cvar_confidence": 0.5}),
            "episode_rows": 28,
        }
    ),
}

# Fields whose eager value is a row sum in PyTorch's own order, or tanh (module docstring).
_CLOSE_STATE = {"risk.cvar"}
_CLOSE_RESULT = {"reward", "components"}


def _names(state: object, prefix: str = "") -> list[str]:
    from dataclasses import fields, is_dataclass

    if isinstance(state, tuple):
        return [f"{prefix}{f}" for f in state._fields]  # type: ignore[attr-defined]
    assert is_dataclass(state)
    out: list[str] = []
    for f in fields(state):
        v = getattr(state, f.name)
        out += [f"{prefix}{f.name}"] if isinstance(v, torch.Tensor) else _names(v, f"{prefix}{f.name}.")
    return out


def _tol(dtype: torch.dtype) -> float:
    """The relative tolerance of a field that is not one rounding in the eager step (module docstring)."""
    return 1e-12 if dtype == torch.float64 else 1e-6


def _atol(a: torch.Tensor) -> torch.Tensor:
    """The absolute tolerance of a close field: float64 1e-15; float32 1e-6 of the tensor's largest
    finite magnitude, since a row sum added in another order moves by a few ulps of its largest term,
    which where the terms cancel is far more than 1e-6 of the sum (float32's ulp is 1.2e-7)."""
    tol = _tol(a.dtype)
    if a.dtype == torch.float64:
        return torch.tensor(tol * 1e-3, dtype=a.dtype, device=a.device)
    return (
        tol * a.abs().nan_to_num(posinf=0.0, neginf=0.0).amax().clamp(min=1e-3)
        if a.numel()
        else a.new_tensor(tol)
    )


def _same(name: str, a: torch.Tensor, b: torch.Tensor, close: bool) -> None:
    if close and a.is_floating_point():
        tol = _tol(a.dtype)
        atol = float(_atol(a))
        torch.testing.assert_close(b, a, rtol=tol, atol=atol, equal_nan=True, msg=lambda m: f"{name}: {m}")
    else:
        torch.testing.assert_close(b, a, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{name}: {m}")


def _agrees(a: torch.Tensor, b: torch.Tensor, close: bool) -> torch.Tensor:
    """:func:`_same`'s test as a 0-d bool tensor on the device (no host synchronisation)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return torch.zeros((), dtype=torch.bool, device=a.device)
    if close and a.is_floating_point():
        tol = _tol(a.dtype)
        ok = (a == b) | ((b - a).abs() <= _atol(a) + tol * a.abs())  # assert_close's: a expected
    else:
        ok = a == b
    if a.is_floating_point():
        ok = ok | (a.isnan() & b.isnan())
    return ok.all()


def _check_all(pairs: list[tuple[str, torch.Tensor, torch.Tensor, bool]]) -> None:
    """Every ``(name, eager, fused, close)`` pair as :func:`_same` checks it, in one host
    synchronisation when all agree (the device tests compare about 150 tensors a step); the first
    that does not is then reported by :func:`_same`, with its message."""
    if bool(torch.stack([_agrees(a, b, c) for _, a, b, c in pairs]).all()):
        return
    for name, a, b, close in pairs:
        _same(name, a, b, close)
    raise AssertionError("_agrees found a difference that assert_close does not: the two checks disagree")


def test_the_one_synchronisation_check_finds_a_single_differing_element() -> None:
    """:func:`_check_all` passes equal tensors (NaN where NaN, within tolerance where close) and names
    the field of a one-element or one-ulp difference, as :func:`_same` would."""
    a = torch.tensor([1.0, float("nan"), 3.0], dtype=torch.float64)
    i = torch.tensor([1, 2, 3])
    _check_all([("x", a, a.clone(), False), ("i", i, i.clone(), False), ("c", a, a * (1 + 1e-14), True)])
    for name, b, close in (
        ("x", torch.nextafter(a, a + 1), False),
        ("c", a * (1 + 1e-10), True),
        ("i", torch.tensor([1, 2, 4]), False),
    ):
        ref = i if name == "i" else a
        with pytest.raises(AssertionError, match=name):
            _check_all([("ok", a, a.clone(), False), (name, ref, b, close)])


def _result_pairs(ref: StepResult, got: StepResult) -> list[tuple[str, torch.Tensor, torch.Tensor, bool]]:
    pairs = []
    for name in StepResult.__dataclass_fields__:
        if name == "trades":
            trades = ref.trades._asdict().items()
            pairs += [(f"trades.{f}", x, getattr(got.trades, f), False) for f, x in trades]
        else:
            pairs.append((name, getattr(ref, name), getattr(got, name), name in _CLOSE_RESULT))
    return pairs


def _compare_results(ref: StepResult, got: StepResult, ledger: bool) -> None:
    _check_all(_result_pairs(ref, got))
    if not ledger:
        assert got.fills.numel() == 0 and got.trades.entry_price.numel() == 0
        assert got.limit_orders.numel() == 0 and got.trades.entry_costs.numel() == 0


def run_pair(
    fused_advance: object,
    cfg: EnvConfig,
    dtype: torch.dtype,
    *,
    ledger: bool,
    sizes: bool,
    unknown: float,
    device: str = "cpu",
    envs: int = 48,
    steps: int = 30,
    seed: int = 0,
) -> dict[str, int]:
    """Step an eager and a fused env side by side; compare everything each step. Returns counts of
    what happened (so a test can check the comparison covered trades, exits and floors)."""
    mk = _on(random_market(400, seed, dtype, sizes=sizes, unknown=unknown), device)
    eager, fused = TradingEnv(mk, cfg), TradingEnv(mk, cfg)
    g = torch.Generator().manual_seed(seed + 1)
    starts = torch.randint(0, 360, (envs,), generator=g).to(device)
    eager.reset(starts)
    fused.reset(starts)
    own_storage(eager)
    own_storage(fused)
    sizes_t = torch.tensor(eager.codec.sizes)
    names = _names(eager.state)
    # the fields the ledger's entry and the limit orders added are among those compared
    assert {"order.order_type", "trade.order_type", "trade.urgency", "trade.entry_costs"} <= set(names)
    seen = dict.fromkeys(("trades", "resting", "exits", "floors", "done", "kelly", "limit_entries"), 0)
    seen |= dict.fromkeys(LIMIT_EVENTS, 0)
    for _ in range(steps):
        actions = (torch.rand(envs, 4, generator=g) * sizes_t).to(torch.int64).to(device)
        d_conv = (torch.rand(envs, generator=g) * 1.2).to(device)
        m_conv = (torch.rand(envs, generator=g) * 1.2).to(device)
        q_var = (torch.randn(envs, generator=g) * 2.0).to(device)
        aux = torch.randn(envs, STATE_LAYOUT.group("aux").width, generator=g).to(device)
        assert eager.aux is not None and fused.aux is not None
        eager.aux.copy_(aux)
        fused.aux.copy_(aux)
        seen["kelly"] += int((_kelly(eager, cfg, d_conv, m_conv) < 1).sum())
        ref, obs_ref = advance(eager, eager.state, actions, True, d_conv, m_conv, q_var, ledger=ledger)
        got, obs = fused_advance(fused, fused.state, actions, True, d_conv, m_conv, q_var, ledger=ledger)  # type: ignore[operator]
        pairs = [
            (name, a, b, name in _CLOSE_STATE)
            for name, a, b in zip(names, eager.state.tensors(), fused.state.tensors(), strict=True)
        ]
        _check_all([*pairs, ("obs", obs_ref, obs, False)])
        _compare_results(ref, got, ledger)
        _check_kept_tail(eager, fused)
        seen["trades"] += int(ref.trades.closed.sum())
        seen["resting"] += int((eager.state.order.side != 0).sum())
        seen["exits"] += int((ref.exit_reason > 0).sum())
        seen["floors"] += int((ref.exit_reason == 4).sum())
        if ledger:
            for k, v in zip(LIMIT_EVENTS, ref.limit_orders.sum(dim=0).tolist(), strict=True):
                seen[k] += int(v)
            limit_entry = ref.trades.closed & (ref.trades.order_type > int(OrderType.MARKET))
            seen["limit_entries"] += int(limit_entry.sum())
    seen["done"] = int(eager.state.done.sum())
    return seen


def _kelly(env: TradingEnv, cfg: EnvConfig, d_conv: torch.Tensor, m_conv: torch.Tensor) -> torch.Tensor:
    """The Kelly factor the step about to run sizes with (transition.decide): with one magnitude it
    scales the effective max position, else it caps the magnitude."""
    a = env.state.account
    return kelly_fraction(
        a.n_wins, a.n_losses, a.sum_win, a.sum_loss, a.n_trades, d_conv, m_conv, a.equity,
        float(cfg.contract.max_position), cfg.sizing,
    )[~env.state.done]  # fmt: skip


def _check_kept_tail(eager: TradingEnv, fused: TradingEnv) -> None:
    """The CVaR tail the kernel keeps between steps is the K smallest returns of the eager ring's
    valid entries, value for value (what makes its sum the full scan's); up to K = 8 (the tail in
    registers, which inserts into it as sorted) stored in ascending order."""
    risk = eager.state.risk
    ring, width = risk.returns_ring, risk.returns_ring.shape[1]
    k_max = fused._fused_tables.k_max  # type: ignore[attr-defined]
    valid = torch.arange(width, device=ring.device) < risk.returns_count.clamp(max=width)[:, None]
    want = torch.where(valid, ring, torch.inf).sort(dim=1).values[:, :k_max]
    kept = fused._fused_tail[1][:, :k_max]  # type: ignore[attr-defined]
    assert torch.equal(kept if k_max <= 8 else kept.sort(dim=1).values, want)


CASES = [
    ("base", torch.float64, True, True, 0.0),
    ("base", torch.float32, False, True, 0.3),
    ("stressed", torch.float64, False, False, 0.5),
    ("stressed", torch.float32, True, True, 0.2),
    ("shaped", torch.float64, True, True, 0.1),
    ("shaped", torch.float32, False, False, 0.0),
    ("wide", torch.float64, False, True, 0.1),
]


@needs_triton
@pytest.mark.skipif(CUDA, reason="the interpreter run is the CPU's; on a CUDA device the gpu tests run")
@pytest.mark.parametrize(("name", "dtype", "ledger", "sizes", "unknown"), CASES)
def test_fused_step_equals_the_eager_step_under_the_interpreter(
    fused: object, name: str, dtype: torch.dtype, ledger: bool, sizes: bool, unknown: float
) -> None:
    seen = run_pair(fused, CONFIGS[name], dtype, ledger=ledger, sizes=sizes, unknown=unknown)
    assert seen["trades"] > 0 and seen["exits"] > 0 and seen["done"] > 0, seen
    assert seen["kelly"] > 0, seen  # Kelly sized some steps (one magnitude: the max position's factor)
    if name == "stressed":
        assert seen["floors"] > 0, seen  # the capital floor was reached
    if ledger and CONFIGS[name].branches.order_type > 1:  # limit orders: their entries and events compared
        assert seen["limit_entries"] > 0, seen
        # every event (the shaped config's default patience outlasts its orders: none expires there)
        events = LIMIT_EVENTS if name == "base" else ("placed", "filled", "cancelled", "open_at_end")
        assert all(seen[k] > 0 for k in events), seen


@needs_triton
@pytest.mark.gpu
@pytest.mark.parametrize(("name", "dtype", "ledger", "sizes", "unknown"), CASES)
def test_fused_step_equals_the_eager_step_on_the_device(
    fused: object, name: str, dtype: torch.dtype, ledger: bool, sizes: bool, unknown: float
) -> None:
    for seed in range(3):
        seen = run_pair(
            fused, CONFIGS[name], dtype, ledger=ledger, sizes=sizes, unknown=unknown, device="cuda",
            envs=4096, steps=60, seed=seed,
        )  # fmt: skip
        assert seen["trades"] > 0 and seen["done"] > 0, seen


@needs_triton
@pytest.mark.gpu
def test_fused_step_at_the_default_config_on_the_device(fused: object) -> None:
    """The default [env] (ES costs, 4 x 3 x 3 x 3 branches, a 100-return CVaR ring) on the device."""
    cfg = EnvConfig(episode_rows=120)
    seen = run_pair(
        fused, cfg, torch.float64, ledger=True, sizes=True, unknown=0.1, device="cuda", envs=8192, steps=150
    )
    assert seen["trades"] > 0 and seen["done"] > 0, seen


_POINTER = {
    torch.float64: "*fp64",
    torch.float32: "*fp32",
    torch.int64: "*i64",
    torch.bool: "*i1",
    torch.int32: "*i32",
}


def _ptx_for_the_h100(dtype: torch.dtype, ledger: bool, magnitudes: int) -> str:
    """The kernel compiled by Triton for an H100 (sm_90) on this host, as PTX. Run in a process whose
    TRITON_INTERPRET is off (Triton reads it at import; this suite turns it on where there is no CUDA)."""
    from triton import compile as triton_compile
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from foxhunt.env import fused_kernel as fk
    from foxhunt.env.fused import kernel_arguments

    mk = random_market(64, 0, dtype, sizes=True, unknown=0.1)
    fractions = (0.25, 0.5, 1.0) if magnitudes == 3 else (1.0,)  # one: Kelly scales the max position
    branches = BranchConfig(magnitude=magnitudes, magnitude_fractions=fractions)
    env = TradingEnv(mk, EnvConfig(episode_rows=32, branches=branches))
    env.reset(torch.arange(8))
    own_storage(env)
    actions = torch.zeros(8, 4, dtype=torch.int64)
    args, meta, _ = kernel_arguments(env, env.state, actions, True, None, None, None, ledger)
    positional = [a for a in fk.step_kernel.arg_names if a not in meta]
    signature = {
        name: _POINTER[a.dtype] if isinstance(a, torch.Tensor) else "i32"
        for name, a in zip(positional, args, strict=True)
    } | dict.fromkeys(meta, "constexpr")
    kernel = triton_compile(
        ASTSource(fk.step_kernel, signature, meta),
        target=GPUTarget("cuda", 90, 32),
        options={"enable_fp_fusion": False},
    )
    return kernel.asm["ptx"]


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize(
    ("dtype", "ledger", "magnitudes"),
    [(torch.float64, True, 3), (torch.float32, False, 3), (torch.float32, True, 1)],
)
def test_fused_kernel_compiles_for_the_h100_without_a_device(
    dtype: torch.dtype, ledger: bool, magnitudes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triton's compiler (stricter than its interpreter: globals, types, layouts) builds the kernel
    for an H100 (sm_90) on any host, about a minute each, in a spawned process with the interpreter
    off: a kernel that runs under the interpreter also compiles, its divisions and square roots the
    correctly rounded ones, and no approximate exponential (the float32 ``tanh`` is float64's)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    monkeypatch.setenv("TRITON_INTERPRET", "0")  # what the spawned process imports Triton with
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        ptx = pool.submit(_ptx_for_the_h100, dtype, ledger, magnitudes).result()
    assert ".entry step_kernel" in ptx
    assert "div.full" not in ptx and "sqrt.approx" not in ptx  # correctly rounded / and sqrt
    assert "ex2.approx" not in ptx  # no approximate exp: the float32 tanh is computed in float64
