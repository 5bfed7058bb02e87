"""The reference rule, the capture ratio and ``foxhunt edge`` (issue 22)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from foxhunt.backtest.capture import RULE, Capture, Exclusion, capture_ratio, fold_capture, total_capture
from foxhunt.backtest.reference import REFERENCE_COLUMN, planted_column, threshold_rule
from foxhunt.cli import app
from foxhunt.data.config import PlantedSignal
from foxhunt.data.synth import MANIFEST_NAME
from foxhunt.domain.actions import BRANCHES, Direction, OrderType
from tests.train.test_run import TINY

runner = CliRunner()


def _fold(agent: float, rule: float | None) -> dict:
    base = {"flat": {"net_pnl": 0.0}, "long": {"net_pnl": -5.0}}
    return {"net_pnl": agent, "baselines": base | ({RULE: {"net_pnl": rule}} if rule is not None else {})}


def test_capture_is_agent_over_rule_and_undefined_without_an_edge() -> None:
    assert capture_ratio(2_500.0, 10_000.0) == pytest.approx(0.25)
    assert capture_ratio(-500.0, 1_000.0) == pytest.approx(-0.5)  # a losing agent captures a negative share
    # The rule made nothing or lost: no edge to capture; a ratio to a loss would flip the sign.
    assert capture_ratio(500.0, 0.0) is None
    assert capture_ratio(500.0, -1_000.0) is None
    assert fold_capture(_fold(300.0, 1_200.0)) == pytest.approx(0.25)
    assert fold_capture(_fold(300.0, None)) is None  # the rule's feature was not in the state
    # Over folds: summed agent / summed rule, (976 + 2770 - 2897) / (11790 + 2090 + 7110)
    folds = [_fold(976.0, 11_790.0), _fold(2_770.0, 2_090.0), _fold(-2_897.0, 7_110.0)]
    assert total_capture(folds) == pytest.approx(849.0 / 20_990.0)
    assert total_capture([_fold(10.0, 500.0), _fold(10.0, -600.0)]) is None  # the rule lost overall
    assert total_capture([_fold(10.0, 500.0), _fold(10.0, None)]) is None


def test_capture_shows_every_fold_and_keeps_rule_losing_folds_out_of_the_ratio() -> None:
    # Folds 0-2: 1,520 of 1,000 (152%), 1,000 of 2,000 (50%), 160 of 1,000 (16%); fold 3: the rule
    # lost 400 (the agent 50): excluded, its PnL still shown.
    folds = [_fold(1_520.0, 1_000.0), _fold(1_000.0, 2_000.0), _fold(160.0, 1_000.0), _fold(-50.0, -400.0)]
    cap = Capture.of([f | {"fold": k} for k, f in enumerate(folds)])
    assert [f.capture for f in cap.folds] == pytest.approx([1.52, 0.5, 0.16, None])
    assert [f.excluded for f in cap.folds] == [None, None, None, Exclusion.RULE_LOST]
    assert cap.ratio == pytest.approx(2_680.0 / 4_000.0)  # the kept folds summed: 67%
    assert cap.median == pytest.approx(0.5)
    # Every fold summed, the rule's loss included (the capture before issue 58): 2,630 / 3,600
    assert cap.all_folds == pytest.approx(2_630.0 / 3_600.0)
    assert total_capture(folds) == cap.all_folds
    (gone,) = cap.excluded()
    assert gone["fold"] == 3 and gone["excluded"] == "rule_lost" and "lost or broke even" in gone["why"]
    assert (gone["agent_net_pnl"], gone["rule_net_pnl"], gone["capture"]) == (-50.0, -400.0, None)
    body = cap.to_dict()
    assert body["kept_folds"] == [0, 1, 2] and len(body["folds"]) == 4
    assert body["folds"][3]["agent_net_pnl"] == -50.0
    json.dumps(body)
    # A rule that breaks even is excluded too; a run without the rule's feature has no rule anywhere.
    even = Capture.of([_fold(10.0, 0.0) | {"fold": 0}, _fold(30.0, 60.0) | {"fold": 1}])
    assert even.ratio == pytest.approx(0.5) and even.all_folds == pytest.approx(40.0 / 60.0)
    none = Capture.of([_fold(10.0, None) | {"fold": 0}])
    assert none.ratio is None and none.median is None and none.all_folds is None
    assert none.excluded()[0]["excluded"] == Exclusion.NO_RULE.value
    # Only losing folds: nothing to capture, whatever the agent made.
    assert Capture.of([_fold(5.0, -1.0) | {"fold": 0}]).ratio is None


def test_threshold_rule_goes_long_above_short_below_and_holds_between() -> None:
    column = REFERENCE_COLUMN[PlantedSignal.IMBALANCE]
    x = torch.tensor([2.0, -2.0, 0.5, 1.5, -1.6])
    env = SimpleNamespace(
        market=SimpleNamespace(features=x.unsqueeze(1), feature_columns=(column,)),
        state=SimpleNamespace(row=torch.arange(5)),
        codec=SimpleNamespace(sizes=(4, 3, 2, 3)),
    )
    a = threshold_rule(column, 1.5)(torch.zeros(5, 7), env)
    d = BRANCHES.index("direction")
    L, S, H = int(Direction.LONG), int(Direction.SHORT), int(Direction.HOLD)
    assert a[:, d].tolist() == [L, S, H, H, S]  # 1.5 itself is not above the threshold
    assert a[:, BRANCHES.index("magnitude")].tolist() == [2] * 5  # the largest size
    assert a[:, BRANCHES.index("order_type")].tolist() == [int(OrderType.MARKET)] * 5


def test_planted_column_reads_the_synthetic_manifest_and_is_unknown_on_real_data(tmp_path: Path) -> None:
    synth, real = tmp_path / "synth", tmp_path / "real"
    for d in (synth, real):
        d.mkdir()
        (d / "a.dbn.zst").write_bytes(b"")
    (synth / MANIFEST_NAME).write_text(json.dumps({"signal": "trade_flow"}))
    assert planted_column([synth / "a.dbn.zst"]) == "ofi.trade_sign_ema"
    (synth / MANIFEST_NAME).write_text(json.dumps({"alpha": 4.0}))  # written before synth.signal existed
    assert planted_column([synth / "a.dbn.zst"]) == "ofi.l1_imbalance_ema_slow"
    assert planted_column([real / "a.dbn.zst"]) is None  # real data: the planted signal is unknown
    assert planted_column([synth / "a.dbn.zst", real / "a.dbn.zst"]) is None


@pytest.mark.slow  # about 35 s on a loaded 2-core host: a market, its features and 2 x 3 backtests per fold
def test_edge_command_reports_rule_flat_and_long_per_fold(tmp_path: Path, one_thread: None) -> None:
    out = tmp_path / "edge"
    sets = [a for s in (*TINY, "synth.alpha=4", "synth.alpha_horizon_events=2000") for a in ("--set", s)]
    result = runner.invoke(app, ["edge", "--profile", "smoke", "--out", str(out), "-q", *sets])
    assert result.exit_code == 0, result.output
    body = json.loads((out / "edge.json").read_text())
    assert body["rule"]["column"] == "ofi.l1_imbalance_ema_slow" and body["rule"]["threshold"] == 1.5
    assert [r["fold"] for r in body["folds"]] == [0, 1]
    for row in body["folds"]:
        assert (row["flat"]["net_pnl"], row["flat"]["trades"]) == (0.0, 0)  # flat never trades
        assert row[RULE]["trades"] > 0 and row["long"]["trades"] > 0
        # buy-and-hold: one round trip per validation window, long one per plan
        assert 0 < row["buy_hold"]["trades"] < row["long"]["trades"]
        # each policy's execution block beside its headline (docs/execution.md): the rule's market orders
        assert row[RULE]["execution"]["entries"] == row[RULE]["trades"]
        assert row[RULE]["execution"]["limit_orders"]["fill_rate"] is None
    assert body["total"][RULE] == pytest.approx(sum(r[RULE]["net_pnl"] for r in body["folds"]))
    assert "fold 0: reference rule" in result.output and "total: reference rule" in result.output
    assert "long (per plan)" in result.output and "buy and hold" in result.output
    # The rule of the other planted kind reads the order-flow family.
    other = runner.invoke(
        app, ["edge", "--cache", str(next((out / "cache").glob("*.arrow"))), "--profile", "smoke",
              "--out", str(tmp_path / "flow"), "-q", *sets, "--set", "synth.signal=trade_flow"],
    )
    assert other.exit_code == 0, other.output
    assert json.loads((tmp_path / "flow" / "edge.json").read_text())["rule"]["column"] == "ofi.trade_sign_ema"
