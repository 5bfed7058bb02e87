"""Validation and the recorded-policy backtest on the fused step (``mode="fused"``) against the eager ones.

The fused step (:mod:`foxhunt.env.fused`, one Triton kernel) is the eager step exactly in every
field a validation record or the recorded-policy summary reads (tests/env/test_fused.py: only the
CVaR tail sum and the reward are not one rounding in eager PyTorch, and neither is recorded; the
position the CVaR factor sizes came out exact there and here). So the fused evaluation's record,
decision log and metrics equal the plain eager loop's exactly, float64 and float32, and
:func:`~foxhunt.backtest.evaluate.evaluate_many`'s per-policy sums equal its eager run's.

Without a CUDA device the kernel runs under Triton's interpreter (about a second a step on the
shared 2-core box, so the sizes are tiny: seven windows of 8 steps); the ``gpu`` tests run the same
comparisons on the device at larger sizes, the fused step replayed as one CUDA graph per step
(policy, step and record writes, or the gather, step and reductions) against the eager loop there.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from foxhunt.agent.agent import Agent
from foxhunt.backtest.evaluate import GraphedEvaluation, evaluate, evaluate_many
from foxhunt.backtest.metrics import StepRecord, TradeDetail, branch_sizes, compute_metrics
from foxhunt.env.config import EnvConfig
from tests.agent.test_agent import make_agent
from tests.env.test_fused import CONFIGS, CUDA, _on, fused, needs_triton, random_market  # noqa: F401

# The interpreter divides by zero where the eager step does too (masked lanes, a NaN queue).
pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")

LO, HI, EPISODE = 4, 60, 9  # seven windows of 8 steps


def _cfg(name: str, episode_rows: int = EPISODE) -> EnvConfig:
    return CONFIGS[name].model_copy(update={"episode_rows": episode_rows})


def _assert_same_records(got: StepRecord, want: StepRecord) -> None:
    """Every field equal exactly (NaN where NaN)."""
    for f in dataclasses.fields(want):
        a, b = getattr(got, f.name), getattr(want, f.name)
        pairs = list(zip(a, b, strict=True)) if isinstance(b, TradeDetail) else [(a, b)]
        for x, y in pairs:
            if isinstance(y, torch.Tensor):
                torch.testing.assert_close(
                    x, y, rtol=0, atol=0, equal_nan=True, msg=lambda m, n=f.name: f"{n}: {m}"
                )


def _metrics(rec: StepRecord, cfg: EnvConfig) -> dict:
    return compute_metrics(
        rec,
        bars_per_year=252 * 780,
        initial_capital=cfg.contract.initial_capital,
        **branch_sizes(cfg.branches),
    )


def _agent_policy(cfg: EnvConfig, device: str = "cpu") -> object:
    agent = make_agent(cfg.branches, network={"noisy_sigma": 0.5})
    if device != "cpu":
        agent = Agent(agent.cfg, cfg.branches, device=device, replay_capacity=64)
    return agent.policy.greedy()


def _recorded_actions(cfg: EnvConfig, policies: int, rows: int, seed: int) -> torch.Tensor:
    sizes = (cfg.branches.direction, cfg.branches.magnitude, cfg.branches.order_type, cfg.branches.urgency)
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, k, (policies, rows), generator=g) for k in sizes], dim=-1)


@needs_triton
@pytest.mark.usefixtures("fused")
@pytest.mark.skipif(CUDA, reason="the interpreter run is the CPU's; on a CUDA device the gpu tests run")
def test_fused_validation_equals_the_eager_loop_under_the_interpreter() -> None:
    """The agent's greedy policy (its sizing inputs and aux predictions through the step) over every
    window (five magnitudes, limit orders, Kelly and CVaR sizing, every shaping term): the fused
    evaluation's record, decision log and metrics are the plain eager loop's, float64 exactly; a
    second run through the same evaluator (the windows reset in place, the kernel's kept CVaR tail
    scanned again) too."""
    cfg = _cfg("shaped")
    mk = random_market(HI, 1, torch.float64, sizes=True, unknown=0.1)
    policy = _agent_policy(cfg)
    want = evaluate(mk, cfg, LO, HI, policy, mode="eager")
    assert int(want.trade_closed.sum()) > 0 and bool((want.position != 0).any())
    ref = GraphedEvaluation(mk, cfg, LO, HI, policy, mode="eager", decisions=True)
    _assert_same_records(ref.run(), want)
    ev = GraphedEvaluation(mk, cfg, LO, HI, policy, mode="fused", decisions=True)
    assert ev.graph is None  # the CPU: the same step without a graph
    got = ev.run()
    _assert_same_records(got, want)
    assert repr(ev.decision_rows(lambda r: r)) == repr(ref.decision_rows(lambda r: r))  # NaN where NaN
    m_got, m_want = _metrics(got, cfg), _metrics(want, cfg)
    assert m_got.keys() == m_want.keys()
    assert repr(m_got) == repr(m_want)  # every metric the same float (NaN where NaN)
    _assert_same_records(ev.run(), want)


@needs_triton
@pytest.mark.usefixtures("fused")
@pytest.mark.skipif(CUDA, reason="the interpreter run is the CPU's; on a CUDA device the gpu tests run")
@pytest.mark.parametrize(
    ("name", "dtype"),
    [("base", torch.float64), pytest.param("stressed", torch.float32, marks=pytest.mark.slow)],
)
def test_fused_recorded_policies_equal_the_eager_run_under_the_interpreter(
    name: str, dtype: torch.dtype
) -> None:
    """Three recorded policies over seven windows each, all 21 episodes in one batch: the fused
    step gives the eager ``env.step`` loop's per-policy sums, Sharpe, drawdown and win rate exactly."""
    cfg = _cfg(name)
    mk = random_market(HI, 5, dtype, sizes=name == "base", unknown=0.2)
    acts = _recorded_actions(cfg, 3, HI - LO, seed=7)
    want = evaluate_many(mk, cfg, LO, HI, acts, mode="eager")
    assert bool((want["trades"] > 0).all()), want
    got = evaluate_many(mk, cfg, LO, HI, acts, mode="fused")
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(
            got[k], want[k], rtol=0, atol=0, equal_nan=True, msg=lambda m, k=k: f"{k}: {m}"
        )


def test_recorded_policies_auto_on_the_cpu_is_the_plain_loop() -> None:
    """``auto`` on the CPU steps the plain ``env.step`` loop (the reference: no Triton needed), and a
    second run of one :class:`RecordedPolicies` (windows and sums reset) gives the first's sums."""
    from foxhunt.backtest.evaluate import RecordedPolicies

    cfg = _cfg("base", episode_rows=20)
    mk = random_market(120, 1, torch.float64, sizes=True, unknown=0.1)
    acts = _recorded_actions(cfg, 4, 120, seed=2)
    ev = RecordedPolicies(mk, cfg, 0, 120, acts)
    assert ev.plain and ev.graph is None
    first, second = ev.run(), ev.run()
    for k in first:
        torch.testing.assert_close(second[k], first[k], rtol=0, atol=0, equal_nan=True)
    assert bool((first["trades"] > 0).all())


@needs_triton
@pytest.mark.usefixtures("fused")
@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fused_validation_and_backtest_equal_eager_on_the_device(dtype: torch.dtype) -> None:
    """On the device: the fused step replayed as one CUDA graph per step equals the eager loop there
    (the agent's greedy validation record and metrics exactly; the recorded policies' sums within
    1e-12 relative, since ``index_add_`` on CUDA adds in the order its atomics land, the counts
    exactly; in float32 within 1e-4 of the largest sum, the order of float32 additions), and AUTO's
    compiled graph agrees with both."""
    # The shaped config, as under the interpreter: at the base config this fresh agent's greedy policy
    # rests limit orders at the touch that the random market never fills, and nothing would trade.
    cfg = _cfg("shaped", episode_rows=64)
    rows = 4000
    mk = _on(random_market(rows, 11, dtype, sizes=True, unknown=0.1), "cuda")
    policy = _agent_policy(cfg, "cuda")
    want = evaluate(mk, cfg, 0, rows, policy, mode="eager")
    got = evaluate(mk, cfg, 0, rows, policy, mode="fused")
    assert any(isinstance(k, tuple) and "fused" in k for k in policy.graphs)  # type: ignore[attr-defined]
    assert int(want.trade_closed.sum()) > 0
    _assert_same_records(got, want)
    assert repr(_metrics(got, cfg)) == repr(_metrics(want, cfg))
    acts = _recorded_actions(cfg, 16, rows, seed=3).cuda()
    base = evaluate_many(mk, cfg, 0, rows, acts, mode="eager")
    # The sums' order is the atomics' on CUDA: a sum of n terms moves by up to n roundings of its
    # terms' size, so the tolerance scales with the dtype (float32's epsilon 1.2e-7: 1e-4 of the
    # largest value, 4,000 steps; float64 as before); auto: Inductor's float64 (1e-9,
    # tests/backtest/test_graphed_evaluate).
    order = 1e-12 if dtype == torch.float64 else 1e-4
    for mode in ("fused", "auto"):
        out = evaluate_many(mk, cfg, 0, rows, acts, mode=mode)
        for k in base:
            exact = k in ("trades", "wins", "steps")
            tol = 0.0 if exact else (order if mode == "fused" else max(order, 1e-9))
            largest = float(base[k].abs().nan_to_num(posinf=0.0, neginf=0.0).max())
            atol = tol * max(largest, 1.0) if dtype == torch.float32 else tol  # float32: of the largest
            torch.testing.assert_close(
                out[k],
                base[k],
                rtol=tol,
                atol=atol,
                equal_nan=True,
                msg=lambda m, k=k, mode=mode: f"{mode} {k}: {m}",
            )
