"""decisions.csv from the fused evaluation's record (backtest/decisions.py DecisionRecord) against the
log the eager backtest wrote before: a wrapper around the policy that read every step back to the host
(:class:`_EagerLog`, kept here only as the reference). Both must give the same file byte for byte,
and ``foxhunt backtest --checkpoint`` must take the fused path (GraphedEvaluation, a capturable policy).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor

from foxhunt import api
from foxhunt.agent.agent import Agent
from foxhunt.backtest import run as backtest_run
from foxhunt.backtest.decisions import DecisionRow, read_decisions_csv, step_rows, write_decisions_csv
from foxhunt.backtest.evaluate import GraphedEvaluation, Policy, ScriptedPolicy, evaluate, scripted
from foxhunt.backtest.settings import BacktestSettings
from foxhunt.config.models import FoxhuntConfig
from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.graph import CapturablePolicy
from tests.agent.test_agent import env_config, make_agent, rising_market

pytestmark = pytest.mark.usefixtures("one_thread")


class _EagerLog:
    """The old eager log: wraps the policy so that every step reads its lines back to the host."""

    def __init__(self, ts_of: Callable[[int], int]) -> None:
        self.ts_of = ts_of
        self.rows: list[DecisionRow] = []

    def wrap(self, policy: Policy) -> Policy:
        log = self

        class Recording:
            def __init__(self, inner: object) -> None:
                self.inner = inner

            def step(self, env: TradingEnv) -> tuple[Tensor, StepResult]:
                rows = env._state().row.clone()
                if isinstance(self.inner, Tensor):
                    obs, res = env.step(self.inner)
                else:
                    obs, res = self.inner.step(env)  # type: ignore[attr-defined]
                log.rows.extend(step_rows(rows, res, env._state().account.position, log.ts_of))
                return obs, res

        return lambda obs, env: Recording(policy(obs, env))


def _ts_of(row: int) -> int:
    return 1_700_000_000_000_000_000 + 900 * row  # any injective ts column


@pytest.mark.parametrize("which", ["agent", "long"])
def test_recorded_decisions_equal_the_eager_log_byte_for_byte(which: str, tmp_path: Path) -> None:
    """The agent's greedy policy (sizing inputs through the step) and a scripted one: the lines built
    from the fused step's device record, on two runs of one evaluator, equal the eager wrapper's."""
    rows = 120
    mkt, ecfg = rising_market(rows), env_config(episode_rows=16)
    if which == "agent":
        policy = make_agent(ecfg.branches, network={"noisy_sigma": 0.5}).policy.greedy()
    else:
        policy = scripted(ScriptedPolicy.LONG, ecfg)
    log = _EagerLog(_ts_of)
    evaluate(mkt, ecfg, 10, rows, log.wrap(policy))
    want = write_decisions_csv(tmp_path / "eager.csv", log.rows, ecfg.branches)
    lines = read_decisions_csv(want)
    assert len(lines) == rows - 10 - 1  # every row of the block decided once but the last
    assert any(d.fill_contracts != 0 for d in lines) and any(np.isnan(d.fill_price) for d in lines)
    ev = GraphedEvaluation(mkt, ecfg, 10, rows, policy, graph=False, compile=False, decisions=True)
    for run in range(2):  # the second run: the env and the buffers reset in place
        ev.run()
        got = write_decisions_csv(tmp_path / f"fused{run}.csv", ev.decision_rows(_ts_of), ecfg.branches)
        assert got.read_bytes() == want.read_bytes()


def test_an_evaluation_without_decisions_refuses_to_give_them() -> None:
    mkt, ecfg = rising_market(40), env_config(episode_rows=16)
    ev = GraphedEvaluation(mkt, ecfg, 0, 40, scripted(ScriptedPolicy.LONG, ecfg), graph=False)
    ev.run()
    with pytest.raises(ValueError, match="decisions=True"):
        ev.decision_rows(_ts_of)


# A tiny market (three sessions of 15-minute bars, two folds), as tests/serve/test_serve.py uses.
MARKET = (
    "synth.sessions=3",
    "synth.events_per_session=4000",
    "folds.n_folds=2",
    "env.episode_rows=16",
    "data.bar_seconds=900",
)


class _RandomCheckpoint:
    """A trained policy as run_backtest sees one: an agent of the config's network with seeded random
    weights (a fresh agent's greedy policy holds one direction and never trades; these trade)."""

    value, fold = "random weights", 1

    def __init__(self, cfg: FoxhuntConfig) -> None:
        self.cfg = cfg

    def policy(self, device: torch.device | str) -> Policy:
        agent = Agent(self.cfg.agent, self.cfg.env.branches, device=device, seed=0, replay_capacity=16)
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in agent.policy.net.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=gen).to(p.device))
        return agent.policy.greedy()


def test_backtest_checkpoint_takes_the_fused_path_and_writes_the_eager_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_backtest of a checkpoint evaluates through GraphedEvaluation with the capturable greedy
    policy (it wrapped the policy and stepped eagerly before), and its decisions.csv equals the old
    eager log of the same policy on the same fold's market, byte for byte."""
    cfg = api.config("smoke", overrides=list(MARKET))
    cache = api.build_features(api.synthetic_market(tmp_path / "market", cfg), cfg, tmp_path / "cache").cache
    made: list[tuple[GraphedEvaluation, int, int]] = []

    class Spy(GraphedEvaluation):
        def __init__(self, market, cfg, lo, hi, policy, **kw) -> None:  # type: ignore[no-untyped-def]
            super().__init__(market, cfg, lo, hi, policy, **kw)
            made.append((self, lo, hi))

    monkeypatch.setattr(backtest_run, "GraphedEvaluation", Spy)
    settings = BacktestSettings.of(cfg)
    body = backtest_run.run_backtest(cache, settings, _RandomCheckpoint(cfg), tmp_path / "out")
    assert body["folds"] == [1] and len(made) == 1
    ev, lo, hi = made[0]
    assert isinstance(ev.policy, CapturablePolicy) and ev.decisions is not None
    ts = cache.column("ts")
    log = _EagerLog(lambda r: int(ts[r]))
    evaluate(ev.market, ev.cfg, lo, hi, log.wrap(ev.policy))
    want = write_decisions_csv(tmp_path / "eager.csv", log.rows, ev.cfg.branches)
    got = tmp_path / "out" / "decisions.csv"
    lines = read_decisions_csv(got)
    assert len(lines) > 40 and lines[0].row == lo
    assert any(d.fill_contracts != 0 for d in lines), "the policy trades (else the comparison is weak)"
    assert got.read_bytes() == want.read_bytes()


@pytest.mark.gpu
def test_graphed_decisions_equal_the_eager_log_on_cuda(tmp_path: Path) -> None:
    """On CUDA the decision buffers are written inside the captured step (one replay a step) and give
    the eager log's file (few windows: the graph of the uncompiled step, the eager kernels' bits)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import dataclasses

    rows = 120
    mkt = rising_market(rows)
    on_cuda = {f.name: getattr(mkt, f.name) for f in dataclasses.fields(mkt)}
    mkt = dataclasses.replace(mkt, **{k: v.cuda() for k, v in on_cuda.items() if isinstance(v, Tensor)})
    ecfg = env_config(episode_rows=16)
    agent = make_agent(ecfg.branches, network={"noisy_sigma": 0.5})
    policy = Agent(agent.cfg, ecfg.branches, device="cuda", replay_capacity=64).policy.greedy()
    log = _EagerLog(_ts_of)
    evaluate(mkt, ecfg, 10, rows, log.wrap(policy))
    want = write_decisions_csv(tmp_path / "eager.csv", log.rows, ecfg.branches)
    ev = GraphedEvaluation(mkt, ecfg, 10, rows, policy, decisions=True)
    assert ev.graph is not None
    ev.run()
    got = write_decisions_csv(tmp_path / "graphed.csv", ev.decision_rows(_ts_of), ecfg.branches)
    assert got.read_bytes() == want.read_bytes()


def test_decisions_csv_names_every_action_code_beside_it(tmp_path: Path) -> None:
    from foxhunt.backtest.decisions import CSV_HEADER, DecisionRow

    ecfg = env_config(episode_rows=16)
    line = DecisionRow(5, 3, 2, 1, 0, 1, 1.0, 1.0, 100.25)  # Long, the second size, Market, Patient
    path = write_decisions_csv(tmp_path / "d.csv", [line], ecfg.branches)
    head, body = path.read_text().splitlines()
    assert head.split(",") == list(CSV_HEADER)
    fraction = f"{ecfg.branches.magnitude_fractions[1]:g}x"
    assert body == f"5,3,2,Long,1,{fraction},0,Market,1,Patient,1.0,1.0,100.25"
    assert read_decisions_csv(path) == [line]  # the codes read back, the names skipped
