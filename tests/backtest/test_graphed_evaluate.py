"""The fused validation step (backtest/evaluate.py GraphedEvaluation) against the eager evaluation.

On the CPU the fused step runs eagerly (no graph) and must give the plain loop's record exactly. On
CUDA (gpu marker) the agent's greedy policy and the compiled env step replayed as one graph per step
give the eager record; a second evaluation through the cached graph, after the network's weights
changed in place, gives the eager record of the new weights (the graph reads them by address).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from foxhunt.agent.agent import Agent
from foxhunt.backtest.evaluate import GraphedEvaluation, ScriptedPolicy, evaluate, evaluate_many, scripted
from foxhunt.backtest.metrics import StepRecord, TradeDetail
from foxhunt.backtest.reference import threshold_rule
from foxhunt.env.graph import CapturablePolicy
from tests.agent.test_agent import env_config, make_agent, rising_market


def _cuda(x: object) -> object:
    return x.cuda() if isinstance(x, torch.Tensor) else x


def _assert_records_match(got: StepRecord, want: StepRecord, tol: float = 1e-9) -> None:
    """Integer and boolean fields exactly; money to ``tol`` relative (Inductor's fused float64)."""
    for f in dataclasses.fields(want):
        a, b = getattr(got, f.name), getattr(want, f.name)
        if isinstance(b, TradeDetail):
            pairs = list(zip(a, b, strict=True))
        elif isinstance(b, torch.Tensor):
            pairs = [(a, b)]
        else:
            continue
        for x, y in pairs:
            if x.dtype.is_floating_point:
                torch.testing.assert_close(x, y, rtol=tol, atol=tol)
            else:
                assert torch.equal(x, y), f.name


@pytest.mark.parametrize("which", ["agent", "long", "rule"])
def test_fused_validation_step_equals_the_eager_loop_on_cpu(which: str) -> None:
    """The agent's greedy policy (sizing inputs and aux slots through the step), a scripted one and
    the reference rule (each fold's third baseline, which reads the market's feature rows at the
    state's row): the fused step with its device-indexed record writes, run twice through one
    evaluator (the env reset in place), gives the plain loop's record exactly."""
    rows = 120
    mkt, ecfg = rising_market(rows), env_config(episode_rows=16)
    if which == "agent":
        policy = make_agent(ecfg.branches, network={"noisy_sigma": 0.5}).policy.greedy()
    elif which == "long":
        policy = CapturablePolicy(scripted(ScriptedPolicy.LONG, ecfg))
    else:
        policy = threshold_rule(mkt.feature_columns[0], 0.5)
        # Marked capturable, so on CUDA the fold's baseline replays as a graph (it stepped eagerly).
        assert isinstance(policy, CapturablePolicy)
    want = evaluate(mkt, ecfg, 10, rows, policy)  # the CPU runs the plain loop
    assert int(want.trade_closed.sum()) > 0 and bool((want.position != 0).any())
    fused = GraphedEvaluation(mkt, ecfg, 10, rows, policy, graph=False, compile=False)
    _assert_records_match(fused.run(), want, tol=0.0)
    _assert_records_match(fused.run(), want, tol=0.0)


@pytest.mark.gpu
def test_graphed_validation_equals_eager_and_follows_weight_updates() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    rows = 300
    mkt = rising_market(rows)
    mkt = dataclasses.replace(mkt, **{f.name: _cuda(getattr(mkt, f.name)) for f in dataclasses.fields(mkt)})
    ecfg = env_config(episode_rows=16)
    agent = Agent(make_agent(ecfg.branches).cfg, ecfg.branches, device="cuda", replay_capacity=64)
    policy = agent.policy.greedy()
    got = evaluate(mkt, ecfg, 10, rows, policy)  # captured (CUDA, a capturable policy)
    assert policy.graphs, "the evaluation was not captured"
    want = evaluate(mkt, ecfg, 10, rows, policy, graph=False)
    assert bool(want.written.any()) and int(want.trade_closed.sum()) > 0  # trades happen
    _assert_records_match(got, want)
    with torch.no_grad():  # new weights, changed in place as the learner changes them
        for p in agent.policy.net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    again = evaluate(mkt, ecfg, 10, rows, policy)
    assert len(policy.graphs) == 1  # the same capture
    want2 = evaluate(mkt, ecfg, 10, rows, policy, graph=False)
    assert not torch.equal(want2.picked_direction, want.picked_direction)  # the weights mattered
    _assert_records_match(again, want2)
    long = scripted(ScriptedPolicy.LONG, ecfg)  # a scripted baseline is captured too
    eager_long = evaluate(mkt, ecfg, 10, rows, long, graph=False)
    _assert_records_match(evaluate(mkt, ecfg, 10, rows, long), eager_long)
    rule = threshold_rule(mkt.feature_columns[0], 0.5)  # and the reference rule (feature rows by state row)
    eager_rule = evaluate(mkt, ecfg, 10, rows, rule, graph=False)
    assert int(eager_rule.trade_closed.sum()) > 0
    _assert_records_match(evaluate(mkt, ecfg, 10, rows, rule), eager_rule)
    assert len(rule.graphs) == 1


def test_recorded_policies_on_a_float32_market_sum_in_float64() -> None:
    """evaluate_many on a market with float32 prices (money in float32) keeps its sums in float64
    (it failed with a dtype error before) and lands within a cent per trade of the float64 run."""
    rows = 150
    mkt64, ecfg = rising_market(rows), env_config(episode_rows=40)
    f64 = {f.name: getattr(mkt64, f.name) for f in dataclasses.fields(mkt64)}
    f64 = {k: x for k, x in f64.items() if isinstance(x, torch.Tensor) and x.dtype == torch.float64}
    mkt32 = dataclasses.replace(mkt64, **{k: x.float() for k, x in f64.items()})
    sizes = torch.tensor([4, 2, 3, 3])
    acts = (torch.rand(3, rows, 4, generator=torch.Generator().manual_seed(1)) * sizes).to(torch.int64)
    a = evaluate_many(mkt64, ecfg, 0, rows, acts)
    b = evaluate_many(mkt32, ecfg, 0, rows, acts)
    assert b["net_pnl"].dtype == torch.float64 and bool((a["trades"] > 0).all())
    assert torch.equal(a["trades"], b["trades"])
    torch.testing.assert_close(b["net_pnl"], a["net_pnl"], rtol=0, atol=0.01 * float(a["trades"].max()))
