"""``foxhunt backtest`` on bar data of two products: the data's contract, fills near what traded.

Findings: on Euro FX (6E) minute bars the modelled ask was 1.26035 while the market traded at
1.09035 (ES's tick and point value), gross PnL 0.82 against 150,470 of costs, and the look-ahead
oracle lost 57,305 without being flagged; bars per year came from the file, not the calendar.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from foxhunt.cli import app
from tests.euro_fx import POINT_VALUE, SYMBOL, TICK, write_euro_fx

pytestmark = pytest.mark.slow  # each case builds a feature cache and backtests it (~1-2 min)

runner = CliRunner()
OHLCV = ["--set", "data.data_source=ohlcv", "--set", "data.bar_seconds=60"]
FEES = 0.85 + 1.40  # CostConfig defaults, per contract per side
MAX_POSITION = 10  # ContractConfig default


def _backtest(data: Path, out: Path, policy: str, *extra: str) -> dict:
    args = ["backtest", "--data", str(data), "--policy", policy, "--out", str(out), "-q", *OHLCV, *extra]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads((out / "metrics.json").read_text())


def _costs_near_the_market(body: dict, tick_value: float) -> None:
    # a closed trade is at most two market orders of MAX_POSITION contracts, each paying the fees
    # and at most the modelled half spread rounded up to a whole tick plus slippage (< 2 ticks)
    assert body["costs"] / body["trades"] < 2 * MAX_POSITION * (FEES + 2 * tick_value)


def test_euro_fx_bars_trade_on_their_own_contract(tmp_path: Path) -> None:
    data = write_euro_fx(tmp_path / "data", sessions=4)
    long = _backtest(data, tmp_path / "long", "long")
    ins = long["instrument"]
    assert (ins["symbol"], ins["tick_size"], ins["point_value"]) == (SYMBOL, TICK, POINT_VALUE)
    _costs_near_the_market(long, TICK * POINT_VALUE)  # ES's specs cost 15,625 a contract side here
    assert long["bars_per_year"] == 347_760.0 and "23 h x 252 trading days / 60 s" in long["annualisation"]
    oracle = _backtest(data, tmp_path / "oracle", "oracle")
    assert oracle["net_pnl"] > 0 and oracle["gross_pnl"] > oracle["costs"]
    assert oracle["implausible"]
    over = _backtest(data, tmp_path / "over", "flat", "--set", "instrument.point_value=62500")
    assert over["instrument"]["point_value"] == 62_500.0
    assert over["instrument"]["overridden"] == ["point_value"]


def test_real_es_minute_bars(real_data_dir: Path, tmp_path: Path) -> None:
    data = real_data_dir / "cme-es/es-2013-lean.ohlcv-1m.dbn.zst"
    long = _backtest(data, tmp_path / "long", "long")
    assert (long["instrument"]["root"], long["instrument"]["tick_size"]) == ("ES", 0.25)
    assert long["bars_per_year"] == 347_760.0  # 23 h x 60 x 252, whatever the file holds
    _costs_near_the_market(long, 12.5)
    oracle = _backtest(data, tmp_path / "oracle", "oracle")
    assert oracle["net_pnl"] > 0 and oracle["implausible"]
