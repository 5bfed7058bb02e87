"""The one chain's shared steps (foxhunt.pipeline) and the command line's source and row-unit rules."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from foxhunt import pipeline
from foxhunt.cli import app
from foxhunt.cli.common import one_source, with_row_unit
from foxhunt.config.loader import load_config
from foxhunt.console import Reporter
from foxhunt.data.schemas import RowUnit
from foxhunt.errors import FoxhuntError

runner = CliRunner()


def test_row_unit_option_is_the_last_assignment() -> None:
    assert with_row_unit(None, None) == []
    assert with_row_unit(["a.b=1"], None) == ["a.b=1"]
    # --row-unit comes after every --set, so it wins over a --set of the same key
    assert with_row_unit(["data.row_unit=bar", "a.b=1"], RowUnit.SNAPSHOT) == [
        "data.row_unit=bar",
        "a.b=1",
        "data.row_unit=snapshot",
    ]
    sets = ["a.b=1"]
    with_row_unit(sets, RowUnit.BAR)
    assert sets == ["a.b=1"]  # the caller's list is not extended


@pytest.mark.parametrize(
    ("data", "cache", "required", "error"),
    [
        ([Path("a.dbn")], None, True, None),
        (None, Path("c.arrow"), True, None),
        (None, None, True, "pass exactly one of --data or --cache"),
        ([Path("a.dbn")], Path("c.arrow"), True, "pass exactly one of --data or --cache"),
        (None, None, False, None),
        ([Path("a.dbn")], Path("c.arrow"), False, "pass at most one of --data or --cache"),
    ],
)
def test_one_source(data: list[Path] | None, cache: Path | None, required: bool, error: str | None) -> None:
    if error is None:
        one_source(data, cache, "alpha", required=required)
        return
    with pytest.raises(FoxhuntError, match=error) as info:
        one_source(data, cache, "alpha", required=required)
    assert "--data/--cache" in str(info.value) and "foxhunt alpha --help" in str(info.value)


@pytest.mark.parametrize(
    "args",
    [
        ["alpha", "--out", "o"],
        ["alpha", "--out", "o", "--data", "a.dbn", "--cache", "c.arrow"],
        ["edge", "--out", "o", "--data", "a.dbn", "--cache", "c.arrow"],
    ],
)
def test_commands_refuse_a_bad_source_pair_in_one_line(args: list[str], tmp_path: Path) -> None:
    result = runner.invoke(app, [*args[:2], str(tmp_path / "o"), *args[3:]])
    assert result.exit_code == 2
    assert "one of --data or --cache" in result.output
    assert not (tmp_path / "o").exists()  # refused before anything is written


def test_alpha_horizons_are_the_configs_or_the_labels() -> None:
    cfg = load_config(profile="localdev")  # alpha.horizons unset: the labels' horizons
    assert cfg.alpha.horizons is None
    assert pipeline.alpha_horizons(cfg) == tuple(cfg.labels.horizons(cfg.data.row_unit)) == (60,)
    chosen = load_config(profile="localdev", overrides=["alpha.horizons=[3,7]"])
    assert pipeline.alpha_horizons(chosen) == (3, 7)


class _Report(SimpleNamespace):
    def to_dict(self) -> dict[str, str]:
        return {"verdict": self.verdict}


def test_leak_guard_is_one_step_then_its_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    import foxhunt.dataset.leaks as leaks

    calls: list[tuple] = []
    report = _Report(verdict="leak guard: 12 columns clean")

    prepared = object()

    def fake_guard(files, cfg, where, consequence, meanwhile, progress):  # noqa: ANN001, ANN202
        calls.append((list(files), where, consequence, progress))
        return report, meanwhile(prepared)

    monkeypatch.setattr(leaks, "guard_while", fake_guard)
    lines: list[str] = []
    rep = Reporter.lines(lines.append)
    said: list[str] = []
    no_config: Any = None  # the faked guard reads none
    stops = pipeline.Stopped.TRAINING
    both = pipeline.leak_guard_while(
        [Path("a.dbn")], no_config, "foxhunt run", stops, rep, said.append, lambda p: p
    )
    assert calls == [([Path("a.dbn")], "foxhunt run", "nothing is trained on a leak", pipeline.SILENT)]
    assert any(pipeline.LEAK_GUARD in line for line in lines)  # the step shows under its one name
    assert both == (report, prepared) and said == [report.verdict]
