"""The command line: help texts, inspect output, and the demo path end to end."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import databento as db
import pytest
import typer
import typer.completion
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


def _at_80_columns(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The command's result console as an 80-column terminal draws it (recorded, not printed)."""
    from rich.console import Console

    import foxhunt.cli.present

    console = Console(width=80, record=True, markup=False, file=io.StringIO())
    monkeypatch.setattr(foxhunt.cli.present, "out", console)
    return console


def test_inspect_reads_at_80_columns(real_data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    console = _at_80_columns(monkeypatch)
    mbp10 = real_data_dir / "databento-fixtures/GLBX.MDP3/test_data.mbp-10.dbn.zst"
    ohlcv = real_data_dir / "cme-es/futures_ohlcv-1m_2024-07-01T23-40_2024-07-02T00-10.dbn.zst"
    assert runner.invoke(app, ["data", "inspect", str(mbp10), str(ohlcv), "-q"]).exit_code == 0
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    # a table per file, a field per line, nothing cut short
    for want in ("test_data.mbp-10.dbn.zst", "mbp-10", "ESH1 (5482)", "0.00% of book states", "2 ticks"):
        assert want in text
    assert re.search(r"start \(UTC\)\s*│\s*2024-07-01T23:40", text)


def test_config_show_prints_a_table_of_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    console = _at_80_columns(monkeypatch)
    shown = runner.invoke(app, ["config", "show", "--profile", "smoke", "--set", "data.bar_seconds=60"])
    assert shown.exit_code == 0, shown.output
    text = console.export_text()
    assert "{'" not in text and "config_hash" not in text  # not a Python dict
    assert re.search(r"│ data\.bar_seconds\s+│ 60\s+│", text)  # the key --set takes, and its value
    assert max(len(line) for line in text.splitlines()) <= 80


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


# --- the console: start-up, help, progress, --quiet/--verbose, TOML ---------------------------------

STAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \S")
# Modules that cost seconds to import: `foxhunt --help` must not wait for any of them.
HEAVY = (
    "torch", "lightgbm", "sklearn", "pandas", "matplotlib", "numba", "scipy", "mlflow", "optuna", "ray",
    "fastapi", "uvicorn", "tensorboard", "sqlalchemy", "alembic", "databento", "pyarrow",
)  # fmt: skip


def all_commands(groups: bool = True) -> list[list[str]]:
    """Every command of the CLI (and group, the root ``[]`` first), read from the app itself, so a
    new command is covered at once."""
    found: list[list[str]] = []

    def walk(cmd: object, path: list[str]) -> None:
        subs = getattr(cmd, "commands", {})  # a group's subcommands
        if groups or not subs:
            found.append(path)
        for name, sub in subs.items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command line in a fresh process, stdout and stderr captured (so neither is a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "foxhunt.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_importing_the_cli_imports_nothing_heavy() -> None:
    code = f"import sys, foxhunt.cli; print([m for m in {HEAVY!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("cmd", [[], ["run"], ["train"], ["alpha"], ["serve"], ["tune"], ["runs", "list"]])
def test_help_imports_nothing_heavy(cmd: list[str]) -> None:
    # `foxhunt ... --help` in a fresh process (the command line as a person runs it): the heavy
    # libraries are imported by the commands' bodies only, never to print their help.
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: print([m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr))\n"
        "from foxhunt.cli import app\n"
        f"app({[*cmd, '--help']!r})\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout
    assert done.stderr.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("cmd", all_commands(), ids=lambda c: " ".join(c) or "root")
def test_help_names_values_as_a_person_types_them(cmd: list[str]) -> None:
    result = runner.invoke(app, [*cmd, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for python_type in ("list[", "<class", "<bool>", "<str>", "<int>", "<path>", "<float>"):
        assert python_type not in result.output, python_type
    if cmd in all_commands(groups=False):
        assert "--quiet" in result.output and "--verbose" in result.output


def test_help_shows_readable_value_names() -> None:
    text = runner.invoke(app, ["backtest", "--help"], env={"COLUMNS": "200"}).output
    for shown in ("PATH...", "DIR", "FILE", "KEY=VALUE", "NAME", "bar|snapshot"):
        assert shown in text, shown
    assert "PATH" in runner.invoke(app, ["data", "inspect", "--help"]).output


def test_shell_completion_is_switched_on(monkeypatch: pytest.MonkeyPatch) -> None:
    text = runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    assert "--install-completion" in text and "--show-completion" in text
    # The shell as detected in a terminal: typer asks shellingham, which reads the parent processes
    # and finds none under nohup or some CI runners ("Shell  not supported").
    monkeypatch.setattr(typer.completion, "_get_shell_name", lambda: "bash")
    script = runner.invoke(app, ["--show-completion"])
    assert script.exit_code == 0 and "complete -o default -F" in script.output


def test_config_show_toml_round_trips_through_config(tmp_path: Path) -> None:
    sets = ["--set", "data.bar_seconds=60", "--set", "folds.n_folds=2"]
    shown = runner.invoke(app, ["config", "show", "--profile", "smoke", *sets, "--toml"])
    assert shown.exit_code == 0, shown.output
    assert "[data]" in shown.stdout and "bar_seconds = 60" in shown.stdout
    path = tmp_path / "mine.toml"
    path.write_text(shown.stdout)
    asked = json.loads(runner.invoke(app, ["config", "show", "--profile", "smoke", *sets, "--json"]).stdout)
    again = runner.invoke(app, ["config", "show", "--config", str(path), "--json"])
    assert again.exit_code == 0, again.output
    body = json.loads(again.stdout)
    assert body["config_hash"] == asked["config_hash"] and body["config"] == asked["config"]
    # The plain default differs: the equality above is not an accident of defaults.
    default = json.loads(runner.invoke(app, ["config", "show", "--json"]).stdout)
    assert default["config_hash"] != body["config_hash"]


def test_quiet_and_verbose_together_are_refused() -> None:
    result = runner.invoke(app, ["config", "show", "-q", "-v"])
    assert result.exit_code == 2 and "--quiet/--verbose" in result.output


def test_progress_lines_are_stamped_off_a_terminal_and_quiet_prints_only_the_result(tmp_path: Path) -> None:
    """In-process (fast); the same through a real process and pipe below (slow: each process pays the
    config's imports, torch included)."""
    synth = ["data", "synth", "--sessions", "1", "--events-per-session", "1000", "--seed", "3"]
    normal = runner.invoke(app, [*synth, "--out", str(tmp_path / "a")])
    assert normal.exit_code == 0, normal.output
    lines = normal.stderr.splitlines()
    assert len(lines) == 2 and all(STAMPED.match(x) for x in lines), normal.stderr
    assert lines[0].endswith("simulating 1 session(s) ...")
    assert re.search(r"simulating 1 session\(s\): done in \d+s$", lines[1])
    written = [Path(x).name for x in normal.stdout.split()]
    assert written == ["synth-ESZ6-20260302.mbp-10.dbn.zst", "synth-ESZ6-20260302.trades.dbn.zst"]
    quiet = runner.invoke(app, [*synth, "--out", str(tmp_path / "b"), "-q"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    assert [Path(x).name for x in quiet.stdout.split()] == written  # the result, and nothing else


@pytest.mark.slow
def test_a_process_writing_to_a_pipe_gets_stamped_lines_and_quiet_only_the_result(tmp_path: Path) -> None:
    synth = ["data", "synth", "--sessions", "1", "--events-per-session", "1000", "--seed", "3"]
    normal = cli(*synth, "--out", str(tmp_path / "a"), cwd=tmp_path)
    assert normal.returncode == 0, normal.stderr
    lines = normal.stderr.splitlines()
    assert lines and all(STAMPED.match(x) for x in lines), normal.stderr
    assert any(x.endswith("simulating 1 session(s) ...") for x in lines)
    assert re.search(r"simulating 1 session\(s\): done in \d+s$", lines[-1])
    written = [Path(x).name for x in normal.stdout.split()]
    assert written == ["synth-ESZ6-20260302.mbp-10.dbn.zst", "synth-ESZ6-20260302.trades.dbn.zst"]
    quiet = cli(*synth, "--out", str(tmp_path / "b"), "--quiet", cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert [Path(x).name for x in quiet.stdout.split()] == written  # the result, and nothing else


@pytest.mark.slow
def test_training_prints_one_short_stamped_line_per_epoch(tmp_path: Path) -> None:
    from tests.train.test_run import TINY

    sets = [a for s in TINY for a in ("--set", s)]
    market = cli("data", "synth", "--out", str(tmp_path / "m"), "-q", "--profile=smoke", *sets, cwd=tmp_path)
    assert market.returncode == 0, market.stderr
    files = market.stdout.split()
    run = ["--out", str(tmp_path / "run"), "--profile", "smoke", *sets]
    done = cli("train", "--data", *files, *run, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert all(STAMPED.match(x) for x in lines), done.stderr
    epochs = [x.split(" ", 1)[1] for x in lines if " train Sharpe " in x]
    # TINY: 2 folds x 2 epochs, each logged (smoke logs every epoch)
    assert [e.split("  ")[0] for e in epochs] == [
        "fold 1/2 epoch 1/2",
        "fold 1/2 epoch 2/2",
        "fold 2/2 epoch 1/2",
        "fold 2/2 epoch 2/2",
    ]
    for e in epochs:
        # the smoke profile's train.selection = last: no selection backtest, the collection's Sharpe
        assert len(e) < 100 and re.search(r"epoch \d/2  train Sharpe (-|-?[\d,]+(\.\d)?)  loss ", e), e
        assert "atoms" not in e and "gate" not in e
    assert "ETA" in epochs[0] and "ETA" not in epochs[-1]  # nothing left after the last epoch
    assert any("done" in x for x in lines) and "fold 0: net" in done.stdout  # bars' ends, the result


def test_a_short_real_file_is_one_line_naming_the_fixes(real_data_dir: Path, tmp_path: Path) -> None:
    # Two hours of ESH4 MBO give 120 thirty-second bars: too few for 3 folds with a 60-row label
    # span: a user error, so one line (exit 2) naming every fix, not a traceback (exit 1).
    mbo = real_data_dir / "cme-es/esh4-glbx-mdp3-20231225.mbo.dbn.zst"
    result = runner.invoke(app, ["alpha", "--data", str(mbo), "--out", str(tmp_path / "a"), "-q"])
    assert result.exit_code == 2, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("error")]
    assert "120 rows are too few" in line and "--row-unit snapshot" in line and "data.bar_seconds" in line
    assert "Traceback" not in result.output and not (tmp_path / "a" / "alpha.json").exists()


def test_an_output_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = runner.invoke(
        app,
        ["data", "synth", "--out", str(blocker / "m"), "--sessions", "1", "--events-per-session", "2000"],
    )
    assert result.exit_code == 2, result.output
    assert "is a file, so nothing can be written under it" in result.output and "--out" in result.output
    assert "Traceback" not in result.output


def test_a_corrupt_file_is_one_line_before_any_contract_lookup(tmp_path: Path) -> None:
    bad = tmp_path / "x.mbp-10.dbn.zst"
    bad.write_bytes(b"\x28\xb5\x2f\xfd" + b"garbage" * 4)  # zstd magic, then nothing readable
    out = str(tmp_path / "o")
    result = runner.invoke(app, ["backtest", "--data", str(bad), "--policy", "long", "--out", out])
    assert result.exit_code == 2, result.output
    assert "not a readable DBN file" in result.output and "Traceback" not in result.output
