"""``foxhunt backtest`` on the synthetic market: known answers of the scripted policies."""

from __future__ import annotations

import collections
import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.data.config import SynthConfig
from foxhunt.data.synth import write_synthetic

runner = CliRunner()


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("market")
    # 50k events a session: enough trades for the oracle control to clear the plausibility bound by far
    # (at 20k its trade t-statistic sat within 2% of the limit)
    write_synthetic(SynthConfig(seed=12, sessions=3, events_per_session=50_000, alpha=0.5), out)
    return out


def _run(market: Path, out: Path, policy: str) -> dict:
    result = runner.invoke(
        app, ["backtest", "--data", str(market), "--policy", policy, "--out", str(out), "-q"]
    )
    assert result.exit_code == 0, result.output
    return json.loads((out / "metrics.json").read_text())


def test_flat_oracle_and_outputs(market: Path, tmp_path: Path) -> None:
    flat = _run(market, tmp_path / "flat", "flat")
    assert (flat["trades"], flat["net_pnl"], flat["costs"]) == (0, 0.0, 0.0) and not flat["implausible"]
    keys = {
        "net_pnl",
        "gross_pnl",
        "costs",
        "sharpe_annual",
        "bars_per_year",
        "max_drawdown",
        "trades",
        "win_rate",
        "active_frac",
        "implausible",
    }
    assert keys <= set(flat)
    # Observed rows per session x 252: at most the 2,760 30-second slots of a 23-hour session.
    assert 2000 * 252 < flat["bars_per_year"] <= 2760 * 252
    oracle = _run(market, tmp_path / "oracle", "oracle")
    assert oracle["implausible"] and oracle["net_pnl"] > 0 and oracle["win_rate"] > 0.8
    rows = list(csv.DictReader((tmp_path / "oracle" / "trades.csv").open()))
    assert len(rows) == oracle["trades"]
    # The oracle reads the label of the row its plan enters at (r+1): with symmetric barriers it goes
    # long before a profit exit and short before the long's stop, so no plan of it is stopped out.
    reasons = collections.Counter(r["exit_reason"] for r in rows)
    assert reasons["profit"] > 0 and reasons["stop"] == 0, reasons
    assert sum(float(r["net_pnl"]) for r in rows) == pytest.approx(oracle["net_pnl"], rel=1e-9)
    assert flat["win_rate"] == -1.0  # no trade: undefined (docs/design.md §8), not 0
    assert (tmp_path / "oracle" / "equity.png").read_bytes()[:4] == b"\x89PNG"
    bad = runner.invoke(
        app, ["backtest", "--data", str(market), "--policy", "psychic", "--out", str(tmp_path / "x")]
    )
    assert bad.exit_code == 2 and "psychic" in bad.output


def test_random_policy_execution_block_and_trades_csv(market: Path, tmp_path: Path) -> None:
    """Every branch uniform: market and limit entries at every urgency and magnitude. The printed
    execution line, metrics.json's block (its identities) and trades.csv's entries agree."""
    full = ["env.branches.magnitude=3", "env.branches.magnitude_fractions=[0.25, 0.5, 1.0]"]
    full += ["env.branches.order_type=3", "env.branches.urgency=3"]  # the smoke profile trades one of each
    args = ["backtest", "--data", str(market), "--policy", "random", "--out", str(tmp_path), "-q"]
    result = runner.invoke(app, [*args, *(a for s in full for a in ("--set", s))])
    assert result.exit_code == 0, result.output
    assert "random execution:" in result.output and "limit fill rate" in result.output
    body = json.loads((tmp_path / "metrics.json").read_text())
    x = body["execution"]
    assert x == body["all"]["execution"] and x["entries"] == body["trades"] > 0
    assert x["net_pnl"] == pytest.approx(body["net_pnl"]) and x["costs"] == pytest.approx(body["costs"])
    assert x["cost_per_contract"] * x["contracts"] == pytest.approx(body["costs"])
    assert x["contracts"] == pytest.approx(body["all"]["contracts_traded"])
    lim = x["limit_orders"]
    assert lim["placed"] == lim["filled"] + lim["expired"] + lim["cancelled"] + lim["open_at_end"] > 0
    rows = list(csv.DictReader((tmp_path / "trades.csv").open()))
    by_type = collections.Counter(r["order_type"] for r in rows)
    for label, row in x["by_order_type"].items():
        assert by_type[label.lower()] == row["entries"] > 0, label
    by_urgency = collections.Counter(r["urgency"] for r in rows)
    assert {k.lower(): r["entries"] for k, r in x["by_urgency"].items()} == dict(by_urgency)
    assert sum(float(r["entry_costs"]) for r in rows) == pytest.approx(
        sum(r["entry_costs"] for r in x["by_magnitude"].values())
    )
