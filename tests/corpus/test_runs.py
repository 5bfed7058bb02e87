"""The corpus of issue 15 as a table (groups 3 and 4): runs that cannot lose or mix work, and no
traceback for any failure a user can cause.

Each row drives ``foxhunt.cli.app`` in-process over generated fixtures (a tiny synthetic market, its
feature cache, a finished two-fold training run and the same run as if killed between its folds)
and asserts the exit code, the one error line (a distinctive substring, no "Traceback") and that
no output was left behind: every path a row names is byte for byte as it was (absent stays
absent). The rows that passed before issue 15 are kept so that they stay passing.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from foxhunt.atomic import atomic_path, is_stale_temp
from foxhunt.cli import app
from foxhunt.config.loader import load_config, write_resolved
from tests.train.test_run import TINY, canon

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")

# The tiny market and run of tests/train, one epoch per fold.
SETS = [a for s in (*TINY, "train.epochs=1") for a in ("--set", s)]
SMOKE = ["--profile", "smoke", *SETS]
ROOT_IS_GOD = os.geteuid() == 0  # root writes into read-only folders: that row cannot fail as root


@dataclass(frozen=True)
class World:
    root: Path
    files: list[Path]  # the synthetic market: mbp-10 and trades DBN files of two sessions
    market: Path  # their folder, a finished `data synth` result
    mbo: Path  # an MBO file for rebuild-book
    cache: Path  # the market's feature cache
    run: Path  # a finished training run (2 folds x 1 epoch)
    between: Path  # the same run as left by a kill between fold 0 and fold 1
    backtest: Path  # a finished backtest
    job: Path  # a started `foxhunt run` folder (its recorded config)
    a_file: Path  # a plain file where a folder is expected
    a_folder: Path  # an empty folder where a file is expected
    readonly: Path  # a folder nobody but root may write into
    bad_dbn: Path  # zstd magic, then nothing readable
    bad_toml: Path  # a TOML file that is not UTF-8


def invoke(*args: object) -> object:
    return runner.invoke(app, [str(a) for a in args])


def ok(*args: object) -> str:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("corpus")
    market = root / "market"
    files = [Path(p) for p in ok("data", "synth", "--out", market, "-q", *SMOKE).split()]
    mbo_dir = root / "mbo"
    ok("data", "synth", "--out", mbo_dir, "--sessions", "1", "--events-per-session", "1000", "--schemas=mbo")
    ok("features", "build", "--data", *files, "--out", root / "cache", "-q", *SMOKE)
    (cache,) = (root / "cache").glob("*.arrow")
    run = root / "run"
    ok("train", "--cache", cache, "--out", run, "-q", *SMOKE)
    # A kill after fold 0 finished and before fold 1 saved anything: fold 1 has no checkpoint, so
    # only the recorded config can tell a resume with other settings from the run's own.
    between = root / "between"
    shutil.copytree(run, between)
    shutil.rmtree(between / "checkpoints" / "fold1")
    folds = json.loads((between / "folds.json").read_text())
    (between / "folds.json").write_text(json.dumps(folds[:1]))
    backtest = root / "backtest"
    ok("backtest", "--cache", cache, "--policy", "flat", "--out", backtest, "-q", *SMOKE)
    job = root / "job"
    write_resolved(load_config("smoke", overrides=TINY), job / "run.config.json")
    a_file = root / "a-file"
    a_file.write_text("not a folder")
    a_folder = root / "a-folder"
    a_folder.mkdir()
    readonly = root / "readonly"
    readonly.mkdir(mode=0o555)
    bad_dbn = root / "bad.mbp-10.dbn.zst"
    bad_dbn.write_bytes(b"\x28\xb5\x2f\xfd" + b"garbage" * 4)
    bad_toml = root / "latin1.toml"
    bad_toml.write_bytes("[data]\nbar_seconds = 60  # d\xe9faut\n".encode("latin-1"))
    return World(
        root=root,
        files=files,
        market=market,
        mbo=next(mbo_dir.glob("*.mbo.dbn.zst")),
        cache=cache,
        run=run,
        between=between,
        backtest=backtest,
        job=job,
        a_file=a_file,
        a_folder=a_folder,
        readonly=readonly,
        bad_dbn=bad_dbn,
        bad_toml=bad_toml,
    )


@dataclass(frozen=True)
class Case:
    args: Callable[[World], list[object]]
    says: str  # a distinctive part of the one error line
    untouched: Callable[[World], list[Path]]  # absent stays absent, present stays byte for byte
    code: int = 2


CASES: dict[str, Case] = {
    # --- group 3: runs that cannot lose or mix work -----------------------------------------
    "train --resume with another lr, killed between folds": Case(
        lambda w: ["train", "--resume", w.between, "--cache", w.cache, *SMOKE, "--set=agent.learn.lr=0.01"],
        "agent.learn.lr: 0.003 -> 0.01",
        lambda w: [w.between],
    ),
    "train --resume of a folder that does not exist": Case(
        lambda w: ["train", "--resume", w.root / "nowhere", "--cache", w.cache, *SMOKE],
        "no such run folder to resume",
        lambda w: [w.root / "nowhere"],
    ),
    "train --out onto a finished run": Case(
        lambda w: ["train", "--out", w.run, "--cache", w.cache, *SMOKE],
        "already holds a result (checkpoints, folds.json, diagnostics.jsonl, train.config.json)",
        lambda w: [w.run],
    ),
    "run --out onto a started job": Case(
        lambda w: ["run", "--out", w.job, "--data", *w.files, *SMOKE],
        "already holds a result (run.config.json)",
        lambda w: [w.job],
    ),
    "run with bad data writes no run.config.json": Case(
        lambda w: ["run", "--out", w.root / "job-bad", "--data", w.bad_dbn, *SMOKE],
        "bad.mbp-10.dbn.zst: ",  # the reader's own words for the damage are tests/data's
        lambda w: [w.root / "job-bad"],
    ),
    "data synth --out onto a finished market": Case(
        lambda w: ["data", "synth", "--out", w.market, "--sessions", "1", "--events-per-session", "1000"],
        "already holds a result (synth.json, synth.config.json)",
        lambda w: [w.market],
    ),
    "backtest --out onto a finished backtest": Case(
        lambda w: ["backtest", "--cache", w.cache, "--policy", "long", "--out", w.backtest, *SMOKE],
        "pass --overwrite to replace it",
        lambda w: [w.backtest],
    ),
    # --- group 4: outputs that cannot be written --------------------------------------------
    "data bars --out a file": Case(
        lambda w: ["data", "bars", "--data", *w.files, "--out", w.a_file],
        "a-file: is a file, not a folder",
        lambda w: [w.a_file],
    ),
    "features build --out a file": Case(
        lambda w: ["features", "build", "--data", *w.files, "--out", w.a_file],
        "a-file: is a file, not a folder",
        lambda w: [w.a_file],
    ),
    "data synth --out a file": Case(
        lambda w: ["data", "synth", "--out", w.a_file, "--sessions", "1", "--events-per-session", "1000"],
        "a-file: is a file, not a folder",
        lambda w: [w.a_file],
    ),
    "backtest --out a file": Case(
        lambda w: ["backtest", "--cache", w.cache, "--out", w.a_file, *SMOKE],
        "a-file: is a file, not a folder",
        lambda w: [w.a_file],
    ),
    "run --out a file": Case(
        lambda w: ["run", "--out", w.a_file, "--data", *w.files, *SMOKE],
        "a-file: is a file, not a folder",
        lambda w: [w.a_file],
    ),
    "data rebuild-book --out an existing folder": Case(
        lambda w: ["data", "rebuild-book", w.mbo, "--out", w.a_folder],
        "a-folder: is a folder, not a file",
        lambda w: [w.a_folder],
    ),
    "data rebuild-book --out under a file": Case(
        lambda w: ["data", "rebuild-book", w.mbo, "--out", w.a_file / "book.mbp-10.dbn.zst"],
        "is a file, so nothing can be written under it",
        lambda w: [w.a_file],
    ),
    "features build --out under a file (an unwritable parent)": Case(
        lambda w: ["features", "build", "--data", *w.files, "--out", w.a_file / "cache"],
        "is a file, so nothing can be written under it",
        lambda w: [w.a_file],
    ),
    "train --out under a file": Case(
        lambda w: ["train", "--out", w.a_file / "run", "--cache", w.cache, *SMOKE],
        "is a file, so nothing can be written under it",
        lambda w: [w.a_file],
    ),
    "data bars --out inside a read-only folder": Case(
        lambda w: ["data", "bars", "--data", *w.files, "--out", w.readonly / "bars"],
        "readonly is not writable",
        lambda w: [w.readonly],
    ),
    # --- group 4: bad settings refused before anything is written ---------------------------
    "a --config TOML file that is not UTF-8": Case(
        lambda w: ["data", "bars", "--config", w.bad_toml, "--data", *w.files, "--out", w.root / "bars-l1"],
        "latin1.toml: not UTF-8 text (byte 28",
        lambda w: [w.root / "bars-l1"],
    ),
    "alpha --horizons 0 (before the cache is built)": Case(
        lambda w: ["alpha", "--data", *w.files, "--out", w.root / "alpha0", "--horizons", "0", *SMOKE],
        "--horizons: horizons must be whole numbers of rows >= 1, got [0]",
        lambda w: [w.root / "alpha0"],
    ),
    "alpha --horizons -5": Case(
        lambda w: ["alpha", "--data", *w.files, "--out", w.root / "alpha5", "--horizons", "-5", *SMOKE],
        "got [-5]",
        lambda w: [w.root / "alpha5"],
    ),
    "error text with Rich markup in a path prints intact": Case(
        lambda w: ["data", "bars", "--data", w.root / "[bold]gone[/bold].dbn.zst", "--out", w.root / "b-m"],
        "[bold]gone[/bold].dbn.zst: no such file",
        lambda w: [w.root / "b-m"],
    ),
    # --- cases that passed before issue 15 (they stay passing) ------------------------------
    "unknown profile": Case(
        lambda w: ["data", "bars", "--data", *w.files, "--out", w.root / "bars-p", "--profile", "nope"],
        "unknown profile",
        lambda w: [w.root / "bars-p"],
    ),
    "unknown --set key": Case(
        lambda w: ["train", "--out", w.root / "run-k", "--cache", w.cache, "--set", "train.nope=1"],
        "train.nope: unknown key",
        lambda w: [w.root / "run-k"],
    ),
    "a corrupt DBN file": Case(
        lambda w: ["backtest", "--data", w.bad_dbn, "--policy", "long", "--out", w.root / "bt-bad"],
        "bad.mbp-10.dbn.zst: ",  # the reader's own words for the damage are tests/data's
        lambda w: [w.root / "bt-bad"],
    ),
    "a missing data file": Case(
        lambda w: ["features", "build", "--data", w.root / "missing.dbn.zst", "--out", w.root / "cache-m"],
        "missing.dbn.zst: no such file",
        lambda w: [w.root / "cache-m"],
    ),
    "train --out and --resume together": Case(
        lambda w: ["train", "--out", w.root / "run-2", "--resume", w.run, "--cache", w.cache, *SMOKE],
        "pass exactly one of --out or --resume",
        lambda w: [w.root / "run-2", w.run],
    ),
    "backtest of an unknown policy": Case(
        lambda w: ["backtest", "--cache", w.cache, "--policy", "nope", "--out", w.root / "bt-p", *SMOKE],
        "unknown policy 'nope'",
        lambda w: [w.root / "bt-p"],
    ),
    "backtest of a fold that does not exist": Case(
        lambda w: ["backtest", "--cache", w.cache, "--fold", "9", "--out", w.root / "bt-f", *SMOKE],
        "fold 9 does not exist",
        lambda w: [w.root / "bt-f"],
    ),
    "--quiet with --verbose": Case(
        lambda w: ["data", "synth", "--out", w.root / "m-qv", "-q", "-v"],
        "--quiet/--verbose: both given",
        lambda w: [w.root / "m-qv"],
    ),
}
READ_ONLY_ROW = "data bars --out inside a read-only folder"


def snapshot(path: Path) -> dict[str, bytes] | None:
    """Every file under ``path`` (or ``path`` itself) with its bytes; None if it does not exist."""
    if path.is_file():
        return {".": path.read_bytes()}
    if not path.is_dir():
        return None
    return {str(p.relative_to(path)): p.read_bytes() if p.is_file() else b"<dir>" for p in path.rglob("*")}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.skipif(ROOT_IS_GOD, reason="root writes into read-only folders"))
        if n == READ_ONLY_ROW
        else n
        for n in CASES
    ],
)
def test_a_user_error_is_one_line_exit_2_and_writes_nothing(name: str, world: World) -> None:
    case = CASES[name]
    watched = case.untouched(world)
    before = [snapshot(p) for p in watched]
    result = invoke(*case.args(world), "-q")
    assert result.exit_code == case.code, result.output
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    (line,) = result.output.strip().splitlines()  # -q: the error line and nothing else
    assert line.startswith("error: ") and case.says in line, line
    assert [snapshot(p) for p in watched] == before, f"{name}: something was written"


# --- what the refusals make room for ------------------------------------------------------------


def test_resume_with_the_recorded_config_finishes_the_run_as_an_uninterrupted_one(
    world: World, tmp_path: Path
) -> None:
    between = tmp_path / "between"
    shutil.copytree(world.between, between)
    ok("train", "--resume", between, "--cache", world.cache, "-q", *SMOKE)
    folds, reference = (json.loads((d / "folds.json").read_text()) for d in (between, world.run))
    assert [f["fold"] for f in folds] == [0, 1]
    assert canon(folds, between) == canon(reference, world.run)


def test_overwrite_replaces_a_finished_result(tmp_path: Path) -> None:
    synth = ["data", "synth", "--out", tmp_path, "--sessions", "1", "--events-per-session", "1000", "-q"]
    (book,) = [Path(p) for p in ok(*synth, "--seed", "1").split() if "mbp-10" in p]
    first = book.read_bytes()
    refused = invoke(*synth, "--seed", "2")
    assert refused.exit_code == 2 and "--overwrite" in refused.output and book.read_bytes() == first
    ok(*synth, "--seed", "2", "--overwrite")
    assert book.read_bytes() != first  # another seed, another market, in the same file


def test_stale_temps_of_killed_writes_are_removed_on_the_next_start(tmp_path: Path) -> None:
    """A write killed outright leaves its (often 0-byte) temp file; the next command writing into
    the folder removes it, and keeps a temp file whose writer is still alive."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    dead_pid = int(dead.stdout)  # a process that has exited
    nested = tmp_path / "checkpoints" / "fold0"
    nested.mkdir(parents=True)
    stale = [nested / f".last.safetensors.{dead_pid}.k2j4h5x1.tmp", tmp_path / ".synth.json.abcd1234.tmp"]
    for p in stale:
        p.touch()  # 0 bytes, as mkstemp leaves it
    with atomic_path(tmp_path / "live.json") as live:  # this process: alive, writing
        assert not is_stale_temp(live) and all(is_stale_temp(p) for p in stale)
        ok("data", "synth", "--out", tmp_path, "--sessions", "1", "--events-per-session", "1000", "-q")
        assert live.exists()
        live.write_text("{}")
    assert not any(p.exists() for p in stale)
    assert [p for p in tmp_path.rglob("*") if p.is_file() and p.stat().st_size == 0] == []


def test_a_programming_error_is_one_line_exit_1_and_its_traceback_under_debug(monkeypatch) -> None:
    import foxhunt.config.loader as loader

    def broken(**_: object) -> None:
        raise ZeroDivisionError("[bold]division[/bold] by zero")

    monkeypatch.setattr(loader, "load_config", broken)
    plain = invoke("config", "show")
    assert plain.exit_code == 1 and "Traceback" not in plain.output
    (line,) = plain.output.strip().splitlines()
    assert line.startswith("internal error: ZeroDivisionError: [bold]division[/bold] by zero")
    assert "rerun with --debug" in line
    debug = invoke("--debug", "config", "show")
    assert debug.exit_code == 1 and isinstance(debug.exception, ZeroDivisionError)
    # --debug does not change a user error: still one line, exit 2.
    monkeypatch.undo()
    user = invoke("--debug", "config", "show", "--profile", "nope")
    assert user.exit_code == 2 and user.output.startswith("error: --profile nope: unknown profile")


def _limit_memory() -> None:  # runs in the child, before it execs
    resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))


def test_the_largest_allowed_synthetic_session_under_a_memory_limit_is_one_line(tmp_path: Path) -> None:
    """synth.events_per_session's maximum (1e8 events) needs tens of GB; under a 3 GB address-space
    limit it was a MemoryError traceback."""
    out = tmp_path / "big"
    args = ["data", "synth", "--out", str(out), "--sessions", "1", "--events-per-session", "100000000", "-q"]
    done = subprocess.run(
        [sys.executable, "-m", "foxhunt.cli", *args],
        preexec_fn=_limit_memory,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "error: memory: the request needs more memory" in done.stderr
    assert "--events-per-session" in done.stderr and not out.exists()


def test_result_lines_print_paths_as_text_not_markup(tmp_path: Path) -> None:
    """A result line names the user's path as typed: ``[bold]`` in a folder name is not Rich markup
    (it was: the printed path lost the bracketed words)."""
    out_dir = tmp_path / "[bold]m[/bold]"
    printed = ok(
        "data", "synth", "--out", out_dir, "--sessions", "1", "--events-per-session", "1000", "--schemas=mbo"
    )
    (path,) = [line for line in printed.splitlines() if line.endswith(".dbn.zst")]
    assert path.startswith(str(out_dir))
    assert Path(path).exists()
