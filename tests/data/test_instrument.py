"""The instrument: from DBN definitions, else the built-in CME table by symbol root, else refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.config.loader import load_config
from foxhunt.data.config import DataConfig
from foxhunt.data.dbn_write import write_ohlcv
from foxhunt.data.inspect import inspect_files
from foxhunt.data.instrument import instrument_of_cache, instrument_of_files
from foxhunt.domain.config import InstrumentConfig
from foxhunt.domain.instrument import (
    PRODUCTS,
    Definition,
    InstrumentError,
    InstrumentSource,
    product_instrument,
    resolve_instrument,
    symbol_root,
)
from foxhunt.errors import ConfigError, FrontDoor
from tests.euro_fx import POINT_VALUE, SYMBOL, TICK, euro_fx_bars, write_euro_fx

ES_DEF = "cme-es/futures_definition.dbn.zst"  # ESU4 (tick 0.25, 50) and NQU4 (tick 0.25, 20)
ES_2013 = "cme-es/es-2013-lean.ohlcv-1m.dbn.zst"  # no symbology mappings: ESZ3 ... ESZ4 listed


@pytest.mark.parametrize(
    ("symbol", "root"),
    [
        ("ESH4", "ES"),
        ("6EM4", "6E"),
        ("MESZ23", "MES"),
        ("MNQH4", "MNQ"),  # N is a month code too: the year digits decide
        ("YMM4", "YM"),
        ("M2KU4", "M2K"),
        ("ZNH4", "ZN"),
        ("ES.FUT", "ES"),
        ("ES.c.0", "ES"),
        ("ESH4-ESM4", None),  # a calendar spread has no outright price
    ],
)
def test_symbol_root(symbol: str, root: str | None) -> None:
    assert symbol_root(symbol) == root


def test_table_holds_the_common_cme_products_with_their_tick_values() -> None:
    assert {"ES", "MES", "NQ", "MNQ", "YM", "RTY", "CL", "GC", "ZN", "6E"} <= set(PRODUCTS)
    # tick x point value = the CME contract specs' "minimum price fluctuation" in dollars
    tick_value = {"ES": 12.5, "MES": 1.25, "NQ": 5.0, "MNQ": 0.5, "YM": 5.0, "RTY": 5.0}
    tick_value |= {"CL": 10.0, "GC": 10.0, "ZN": 15.625, "6E": 6.25}
    for root, dollars in tick_value.items():
        assert product_instrument(root).tick_value == pytest.approx(dollars, rel=1e-12), root
    assert all(p.session_hours == 23.0 and p.currency == "USD" for p in PRODUCTS.values())


def test_non_es_symbol_gets_its_own_contract_not_es() -> None:
    """Finding: ES's tick 0.25 and $50 were applied to every file (6E modelled at 1.26 vs 1.09)."""
    ins = resolve_instrument(["6EM4"])
    assert (ins.root, ins.tick_size, ins.point_value, ins.source) == ("6E", 5e-05, 125_000.0, "table")


def test_definitions_are_read_from_real_files(real_data_dir: Path) -> None:
    nq = instrument_of_files([real_data_dir / ES_DEF], InstrumentConfig(root="NQ"))
    assert (nq.tick_size, nq.point_value, nq.currency, nq.source) == (0.25, 20.0, "USD", "definition")
    es = instrument_of_files([real_data_dir / "databento-fixtures/GLBX.MDP3/test_data.definition.dbn.zst"])
    assert (es.symbol, es.tick_size, es.point_value, es.source) == ("ESH1", 0.25, 50.0, "definition")
    # a definition of another month of the same product describes the data's product
    esm4 = real_data_dir / "cme-es/orderbooks_definition.dbn.zst"
    both = instrument_of_files([real_data_dir / ES_2013, esm4])
    assert (both.root, both.source, both.point_value) == ("ES", InstrumentSource.DEFINITION, 50.0)
    assert both.contracts == ("ESH4", "ESM4", "ESU4", "ESZ3", "ESZ4")


def test_definitions_win_over_the_table_and_the_config_wins_over_both() -> None:
    odd = Definition(1, "ESH4", "ES", tick_size=0.5, point_value=25.0, currency="USD")
    ins = resolve_instrument(["ESH4"], [odd])
    assert (ins.tick_size, ins.point_value, ins.source) == (0.5, 25.0, "definition")
    over = resolve_instrument(["ESH4"], [odd], InstrumentConfig(point_value=5.0, trading_days=250))
    assert (over.tick_size, over.point_value, over.trading_days) == (0.5, 5.0, 250)
    assert over.overridden == ("point_value", "trading_days")


def test_unknown_contract_is_refused_with_the_settings_that_fix_it() -> None:
    with pytest.raises(InstrumentError) as err:
        resolve_instrument(["FOOH4"], where="data/foo.dbn.zst")
    msg = str(err.value)
    assert err.value.exit_code == 2 and "\n" not in msg and msg.startswith("data/foo.dbn.zst: ")
    assert 'api.config(..., overrides=["instrument.tick_size=...", "instrument.point_value=..."])' in msg
    cli = err.value.render(FrontDoor.CLI)
    assert "--set instrument.tick_size=... --set instrument.point_value=..." in cli and "overrides" not in cli
    named = resolve_instrument(["FOOH4"], overrides=InstrumentConfig(tick_size=0.5, point_value=10.0))
    assert (named.tick_size, named.point_value, named.source) == (0.5, 10.0, "config")


def test_several_products_are_refused_unless_the_config_names_one(real_data_dir: Path) -> None:
    mixed = real_data_dir / "cme-es/futures_ohlcv-1m_2024-07-01T23-40_2024-07-02T00-10.dbn.zst"
    with pytest.raises(InstrumentError, match=r"several products \(ES, NQ\)"):
        instrument_of_files([mixed])
    assert instrument_of_files([mixed], InstrumentConfig(root="NQ")).point_value == 20.0


def test_instrument_section_rejects_bad_values() -> None:
    assert load_config(overrides=["instrument.tick_size=0.00005"]).instrument.tick_size == 5e-05
    for bad in ("instrument.tick_size=0", "instrument.root=es", "instrument.ticks=1"):
        with pytest.raises(ConfigError):
            load_config(overrides=[bad])


def test_cache_instrument_comes_from_its_source_files(tmp_path: Path) -> None:
    path = write_euro_fx(tmp_path, sessions=1)
    meta = {"sources": [{"name": path.name, "path": str(path)}]}
    assert instrument_of_cache(meta).tick_size == TICK
    gone = {"sources": [{"name": "x.dbn.zst", "path": str(tmp_path / "gone.dbn.zst")}]}
    with pytest.raises(InstrumentError, match="instrument.point_value"):
        instrument_of_cache(gone)
    assert instrument_of_cache(gone, InstrumentConfig(tick_size=0.1, point_value=2.0)).tick_value == 0.2


def test_inspect_shows_symbols_not_numbers(real_data_dir: Path, tmp_path: Path) -> None:
    """Finding: `data inspect` showed an instrument id where the file has no symbology mapping."""
    (es,) = inspect_files([real_data_dir / ES_2013], DataConfig())
    assert {i["symbol"] for i in es["instruments"]} == {"ES"}  # ids 201312 ... are not symbols
    assert (es["instrument"]["root"], es["instrument"]["tick_size"]) == ("ES", 0.25)
    (fx,) = inspect_files([write_euro_fx(tmp_path, sessions=1)], DataConfig())
    assert [i["symbol"] for i in fx["instruments"]] == [SYMBOL]
    assert (fx["instrument"]["tick_size"], fx["instrument"]["point_value"]) == (TICK, POINT_VALUE)


def test_inspect_cli_json_reports_the_contract(real_data_dir: Path) -> None:
    result = CliRunner().invoke(app, ["data", "inspect", str(real_data_dir / ES_DEF), "--json", "-q"])
    assert result.exit_code == 0, result.output
    (report,) = json.loads(result.output)["files"]
    assert [i["symbol"] for i in report["instruments"]] == ["ESU4", "NQU4"]
    assert report["instrument"] is None and "several contract specifications" in report["instrument_problem"]


def test_backtest_of_an_unknown_contract_is_refused_before_any_work(tmp_path: Path) -> None:
    """A product outside the table without definitions: exit 2, one line naming the settings."""
    bars = euro_fx_bars(sessions=1)
    data = write_ohlcv(tmp_path / "foo.ohlcv-1m.dbn.zst", bars, symbols={int(bars.instrument_id[0]): "FOOH4"})
    args = ["backtest", "--data", str(data), "--policy", "flat", "--out", str(tmp_path / "out"), "-q"]
    args += ["--set", "data.data_source=ohlcv", "--set", "data.bar_seconds=60"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "FOOH4" in text and "--set instrument.tick_size=... --set instrument.point_value=..." in text
    assert not (tmp_path / "out" / "cache").exists()  # refused before the features were built
