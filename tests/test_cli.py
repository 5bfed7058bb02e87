"""The command line: help texts, inspect output, and the demo path end to end."""

from __future__ import annotations

import json
from pathlib import Path

import databento as db
import pytest
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.data.arrow_io import column, read_ipc

runner = CliRunner()

COMMANDS = [
    [],
    ["data"],
    ["config"],
    ["data", "inspect"],
    ["data", "rebuild-book"],
    ["data", "synth"],
    ["data", "bars"],
    ["config", "show"],
    ["features"],
    ["features", "build"],
    ["features", "info"],
    ["check"],
    ["check", "leaks"],
    ["alpha"],
    ["backtest"],
]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "root")
def test_every_command_explains_itself(cmd: list[str]) -> None:
    result = runner.invoke(app, [*cmd, "--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output and len(result.output) > 200


def test_inspect_json_on_real_files(real_data_dir: Path) -> None:
    mbp10 = real_data_dir / "databento-fixtures/GLBX.MDP3/test_data.mbp-10.dbn.zst"
    ohlcv = real_data_dir / "cme-es/futures_ohlcv-1m_2024-07-01T23-40_2024-07-02T00-10.dbn.zst"
    result = runner.invoke(app, ["data", "inspect", str(mbp10), str(ohlcv), "--json"])
    assert result.exit_code == 0, result.output
    files = json.loads(result.stdout)["files"]
    assert [f["schema"] for f in files] == ["mbp-10", "ohlcv-1m"]
    for f in files:
        assert {"schema", "records", "instruments", "start", "end"} <= set(f)
    assert files[0]["records"] == 4 and files[0]["instruments"] == [{"instrument_id": 5482, "symbol": "ESH1"}]
    # All four states: bid 3702.25, ask 3702.75 -> two ticks, none crossed.
    assert files[0]["median_spread_ticks"] == 2.0 and files[0]["crossed_share"] == 0.0
    assert {i["symbol"] for i in files[1]["instruments"]} == {"ESU4", "NQU4"}
    assert files[1]["start"].startswith("2024-07-01T23:40")


def test_config_show_json() -> None:
    result = runner.invoke(
        app, ["config", "show", "--profile", "smoke", "--set", "data.bar_seconds=60", "--json"]
    )
    assert result.exit_code == 0
    body = json.loads(result.stdout)
    assert body["config"]["data"]["bar_seconds"] == 60 and len(body["config_hash"]) == 16
    bad = runner.invoke(app, ["config", "show", "--set", "data.row_unit=tick"])
    assert bad.exit_code == 2 and "data.row_unit" in bad.output


def test_synth_then_bars_end_to_end(tmp_path: Path) -> None:
    market, out = tmp_path / "market", tmp_path / "bars"
    args = ["--seed", "3", "--sessions", "2", "--events-per-session", "20000", "--alpha", "0.5"]
    result = runner.invoke(
        app,
        ["data", "synth", "--out", str(market), *args, "-q", "--schemas", "mbp-10,trades,ohlcv-1m"],
    )
    assert result.exit_code == 0, result.output
    files = sorted(market.glob("*.dbn.zst"))
    assert len(files) == 6
    for f in files:
        assert len(db.DBNStore.from_file(f).to_ndarray()) > 0
    book_files = [str(f) for f in files if "ohlcv" not in f.name]
    result = runner.invoke(
        app,
        [
            "data",
            "bars",
            "--data",
            *book_files,
            "--out",
            str(out),
            "-q",
            "--profile",
            "smoke",
            "--set",
            "data.bar_seconds=60",
        ],
    )
    assert result.exit_code == 0, result.output
    table = read_ipc(out / "bars.arrow")
    assert sorted(set(column(table, "trade_date").tolist())) == [20260302, 20260303]  # both files
    assert table.num_rows > 100 and column(table, "bid_px").shape[1] == 10
    assert json.loads((out / "bars.config.json").read_text())["config"]["data"]["bar_seconds"] == 60
    # The same files as ohlcv: bars from the 1-minute records, book fields masked.
    result = runner.invoke(
        app,
        [
            "data",
            "bars",
            "--data",
            *[str(f) for f in files if "ohlcv" in f.name],
            "--out",
            str(tmp_path / "o"),
            "-q",
            "--set",
            "data.data_source=ohlcv",
            "--set",
            "data.bar_seconds=60",
        ],
    )
    assert result.exit_code == 0, result.output
    assert not column(read_ipc(tmp_path / "o" / "bars.arrow"), "book_mask").any()


def test_rebuild_book_writes_a_dbn_file_databento_reads(real_data_dir: Path, tmp_path: Path) -> None:
    src = real_data_dir / "cme-es/esh4-glbx-mdp3-20231225.mbo.dbn.zst"
    target = tmp_path / "esh4.mbp-10.dbn.zst"
    result = runner.invoke(app, ["data", "rebuild-book", str(src), "--out", str(target), "-q"])
    assert result.exit_code == 0, result.output
    records = db.DBNStore.from_file(target).to_ndarray()
    assert 30_000 < len(records) < 45_000
    assert (tmp_path / "esh4.mbp-10.config.json").is_file()
    inspected = runner.invoke(app, ["data", "inspect", str(target), "--json"])
    report = json.loads(inspected.stdout)["files"][0]
    assert report["schema"] == "mbp-10" and report["records"] == len(records)
    assert report["instruments"] == [{"instrument_id": 17077, "symbol": "ESH4"}]
    assert report["median_spread_ticks"] == 1.0 and report["crossed_share"] < 0.01
