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
