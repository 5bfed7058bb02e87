"""The commands the docs give work as written.

Every command in a shell block of the README and of ``docs/`` is parsed and checked: a ``foxhunt``
command names a command that exists, with options that command has (its ``--help``) and ``--set``
keys the configuration accepts; a script (``python bench/x.py``, ``python tools/y.py``) exists and
takes the options given; a ``make`` target exists. The commands that finish in seconds are run (the
``FAST`` table); every other one is listed in ``SLOW`` with the reason it is only checked, so a
command added to the docs without a decision fails here. The README's own-data walk and its serve
step run end to end on the real ESH4 file in a slow test. Every script in ``tools/`` and ``bench/``
is import-tested: importing one must not run it."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, real_data_root

PAGES = (REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")))
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", flags=re.M | re.S)
FOXHUNT = {"foxhunt", ".venv/bin/foxhunt"}
PYTHON = {"python", "python3", ".venv/bin/python", ".venv/bin/python3"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
VARIABLE_FROM = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\$\(")  # C=$(ls ...): a variable from a command
# Programs that are not the project's (nothing of foxhunt to check) and shell syntax; each with why.
EXTERNAL = {
    "mlflow": "MLflow's own UI",
    ".venv/bin/mlflow": "MLflow's own UI",
    "optuna-dashboard": "Optuna's own dashboard",
    "pip": "the package installer",
    "curl": "an HTTP client against a running `foxhunt serve`",
    "export": "shell: sets a variable",
    "for": "shell: a loop around foxhunt commands (its body is checked)",
    "do": "shell: a loop body's start",
    "done": "shell: a loop's end",
    "wait": "shell: waits for background jobs",
    ".venv/bin/lint-imports": "import-linter: the layer contracts of pyproject.toml, which make test runs",
    "git": "version control: a checkout of an earlier commit to measure against",
}
# The documented commands that finish in seconds, run here as written; $VARIABLES get the values given
# (a DBN file of Databento's own fixtures, from the real-data folder).
FAST: dict[str, dict[str, str]] = {
    "foxhunt data inspect $D": {"D": "databento-fixtures/GLBX.MDP3/test_data.mbp-10.dbn.zst"},
}
# Every other documented foxhunt command, by its subcommand: why it is only checked (its --help, its
# options and its --set keys), not run here. The README's own-data walk runs in
# test_the_readme_own_data_walk_runs_as_written (slow, real data).
SLOW: dict[str, str] = {
    "run": "trains agents: minutes (the README walk runs it, slow)",
    "train": "trains agents: minutes",
    "seeds": "trains several seeds: minutes to hours",
    "tune": "an Optuna study of trainings: minutes to hours",
    "serve": "compiles and replays a trained export: needs a run first (the README walk runs it, slow)",
    "export": "needs a trained checkpoint (the README walk runs it, slow)",
    "backtest": "needs a feature cache or DBN files of the reader's (the README walk runs it, slow)",
    "alpha": "trains an MLP and LightGBM per fold: a minute and more (the README walk runs it, slow)",
    "edge": "builds or reads a feature cache of the reader's",
    "features build": "builds the feature stack: tens of seconds and more (the README walk runs it, slow)",
    "features info": "needs a feature cache (the README walk runs it, slow)",
    "check leaks": "rebuilds the features four times (the README walk runs it, slow)",
    "data inspect": "reads the reader's DBN files (run here on a fixture file, as FAST)",
    "data synth": "generates a market of sessions of events: tens of seconds and more",
    "data bars": "reads the reader's DBN files",
    "data rebuild-book": "reads the reader's MBO file",
    "runs list": "opens the MLflow store, which imports MLflow: slow to start",
    "runs compare": "needs tracked runs",
    "config show": "runs in seconds, but documented only in tables, not shell blocks",
}


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    text: str
    tokens: tuple[str, ...]


def shell_lines(body: str) -> list[tuple[int, str]]:
    """(line offset, command) of a shell block: continuation lines joined, comments and blank lines
    dropped."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for i, raw in enumerate(body.splitlines()):
        if not pending:
            start = i
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        if text and not text.startswith("#"):
            out.append((start, text))
    return out


def tokens_of(text: str) -> tuple[str, ...]:
    """The words of a command, its trailing comment dropped and leading VAR=value assignments skipped."""
    try:
        words = shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote inside $(...): words split on spaces are enough here
        words = text.split(" #", 1)[0].split()
    while words and ASSIGNMENT.match(words[0]) and len(words) > 1:
        words = words[1:]
    return tuple(words)


def documented_commands(pages: tuple[Path, ...] = PAGES) -> list[Command]:
    """Every command of every shell block (```bash, sh, shell, console), and the foxhunt, python and
    make commands of untagged blocks (elsewhere an untagged block is a diagram or a listing)."""
    out = []
    for page in pages:
        text = page.read_text()
        for m in FENCE.finditer(text):
            language = m.group(1).strip().lower()
            if language and language not in SHELL_LANGUAGES:
                continue
            first_line = text[: m.start(2)].count("\n") + 1
            for offset, line in shell_lines(m.group(2)):
                tokens = tokens_of(line)
                if (
                    not tokens
                    or (len(tokens) == 1 and ASSIGNMENT.match(tokens[0]))
                    or VARIABLE_FROM.match(line)
                ):
                    continue  # a variable the commands below read
                known = tokens[0] in FOXHUNT | PYTHON or tokens[0] == "make"
                if language or known:
                    name = str(page.relative_to(REPO)) if page.is_relative_to(REPO) else page.name
                    out.append(Command(name, first_line + offset, line, tokens))
    return out


def foxhunt_click():
    import typer

    from foxhunt.cli import app

    return typer.main.get_command(app)


def subcommand(root, tokens: tuple[str, ...]) -> tuple[str, object, list[str]]:
    """(the subcommand's name, its click command, the rest of the words) for ``foxhunt ...`` words."""
    node, path, rest = root, [], list(tokens[1:])
    while rest and hasattr(node, "commands") and rest[0] in node.commands:
        node = node.commands[rest[0]]
        path.append(rest.pop(0))
    return " ".join(path), node, rest


def option_names(command) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


def set_values(words: list[str]) -> list[str]:
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--set"] + [
        w.split("=", 1)[1] for w in words if w.startswith("--set=")
    ]


def problems(cmd: Command, root) -> list[str]:
    """What is wrong with one documented command (empty when it is as the code is)."""
    where = f"{cmd.page}:{cmd.line}: {cmd.text[:90]}"
    program = cmd.tokens[0]
    if program in EXTERNAL:
        return []
    if program == "bash":  # a script of the repository's: it exists
        script = next((t for t in cmd.tokens[1:] if not t.startswith("-")), "")
        return [] if (REPO / script).is_file() else [f"{where}: no script {script}"]
    if program in ("pytest", ".venv/bin/pytest"):  # the test files it is given exist
        paths = [t.split("::")[0] for t in cmd.tokens[1:] if t.startswith("tests/")]
        return [f"{where}: no test file {t}" for t in paths if not (REPO / t).exists()]
    if program == "make":
        targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), flags=re.M))
        return [f"{where}: no make target {t}" for t in cmd.tokens[1:] if "=" not in t and t not in targets]
    if program in PYTHON:
        words = list(cmd.tokens[1:])
        if words[:1] == ["-m"]:
            return [] if words[1:2] == ["foxhunt.cli"] else [f"{where}: unknown module"]
        script = REPO / words[0]
        if not script.is_file():
            return [f"{where}: no script {words[0]}"]
        source = script.read_text()
        return [
            f"{where}: {words[0]} has no option {w.split('=')[0]}"
            for w in words[1:]
            if w.startswith("--") and f'"{w.split("=")[0]}"' not in source
        ]
    if program not in FOXHUNT:
        return [f"{where}: {program} is neither a foxhunt command nor listed in EXTERNAL with a reason"]
    name, command, rest = subcommand(root, cmd.tokens)
    if hasattr(command, "commands"):
        return [] if rest == ["--help"] else [f"{where}: '{name or 'foxhunt'}' is a group, not a command"]
    known = option_names(command) | option_names(root)
    found = [
        f"{where}: foxhunt {name} has no option {word.split('=')[0]}"
        for word in rest
        if word.startswith("--") and word.split("=")[0] not in known
    ]
    if name not in SLOW and " ".join(("foxhunt", *cmd.tokens[1:])) not in FAST:
        found.append(f"{where}: foxhunt {name} is in neither FAST nor SLOW (say why it is not run)")
    from foxhunt.config.loader import load_config

    overrides = [v for v in set_values(rest) if "$" not in v]
    if overrides:
        try:
            load_config("smoke", overrides=overrides)
        except Exception as exc:  # ConfigError: the message names the key and what is allowed
            found.append(f"{where}: --set {overrides}: {exc}")
    return found


# --- the helpers on hand-made text ------------------------------------------------------------------


def test_commands_are_read_from_shell_blocks_only(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "text `foxhunt run` in prose\n\n```bash\nD=data/es   # a variable\n"
        ".venv/bin/foxhunt backtest --cache $C \\\n    --policy long --out x   # a comment\n"
        "DATABENTO_API_KEY=db-1 foxhunt serve --live X\n```\n\n```toml\nfoxhunt = 1\n```\n\n"
        "```\nsrc/  a listing\npython bench/env.py --envs 8\n```\n"
    )
    commands = documented_commands((page,))
    assert [c.tokens[:2] for c in commands] == [
        (".venv/bin/foxhunt", "backtest"),
        ("foxhunt", "serve"),
        ("python", "bench/env.py"),
    ]
    assert commands[0].tokens[-2:] == ("--out", "x")
    assert commands[0].line == 5


def test_problems_finds_unknown_commands_options_keys_and_scripts() -> None:
    root = foxhunt_click()

    def check(text: str) -> list[str]:
        return problems(Command("p.md", 1, text, tokens_of(text)), root)

    assert check("foxhunt backtest --cache c --policy long --out x --set data.bar_seconds=15") == []
    assert "no option --polcy" in " ".join(check("foxhunt backtest --polcy long --out x"))
    assert "data.no_such_key" in " ".join(check("foxhunt backtest --out x --set data.no_such_key=1"))
    assert "group" in " ".join(check("foxhunt data --out x"))
    assert "no script" in " ".join(check("python bench/no_such.py"))
    assert "no option --no-such" in " ".join(check("python bench/env.py --no-such 1"))
    assert "neither a foxhunt command" in " ".join(check("rm -rf runs"))
    assert "no make target" in " ".join(check("make no-such-target"))
    assert check("make run") == [] and check("curl -s localhost:8787/state") == []


# --- the docs as they are ---------------------------------------------------------------------------


def test_every_documented_command_is_as_the_code_is() -> None:
    """Every command of the README and docs/ exists with the options and --set keys it is given, and
    is either run here (FAST) or listed with the reason it is not (SLOW)."""
    root = foxhunt_click()
    commands = documented_commands()
    assert len(commands) > 40, "the docs' shell blocks were not found"
    found = [p for cmd in commands for p in problems(cmd, root)]
    assert not found, "\n".join(found)


def test_the_fast_commands_run_as_written() -> None:
    """The documented commands that finish in seconds, run through the CLI in this process."""
    from typer.testing import CliRunner

    from foxhunt.cli import app

    documented = {
        " ".join(("foxhunt", *c.tokens[1:])) for c in documented_commands() if c.tokens[0] in FOXHUNT
    }
    missing = [c for c in FAST if c not in documented]
    assert not missing, f"FAST lists commands the docs no longer give: {missing}"
    real = real_data_root()
    for text, values in FAST.items():
        if any(not (real / v).exists() for v in values.values()):
            pytest.skip(f"real data folder {real} is absent (set FOXHUNT_REAL_DATA)")
        args = [str(real / values[w[1:]]) if w.startswith("$") else w for w in text.split()[1:]]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, f"{text}: exit {result.exit_code}\n{result.output[-2000:]}"


# --- the scripts of tools/ and bench/ ----------------------------------------------------------------

SCRIPTS = sorted([*(REPO / "tools").glob("*.py"), *(REPO / "bench").glob("*.py")])
# Top-level statements that do nothing but define: imports, functions, classes, constants, the
# docstring, `if __name__ == "__main__":` (and `if TYPE_CHECKING:`), import fallbacks in try.
DEFINING = (
    ast.Import,
    ast.ImportFrom,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Assign,
    ast.AnnAssign,
)


SETTING_UP = ("sys.path.insert(", "os.environ.setdefault(")


def runs_on_import(source: str) -> list[str]:
    """The top-level statements of a script that would run something on import (empty when none), and
    a note when the script has no ``if __name__ == "__main__":`` guard."""
    tree = ast.parse(source)
    found, guarded = [], False
    for i, node in enumerate(tree.body):
        if isinstance(node, DEFINING) or (
            i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        ):
            continue
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if test in ("__name__ == '__main__'", '__name__ == "__main__"'):
                guarded = True
                continue
            if test in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                continue
        if isinstance(node, ast.Try) and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in node.body):
            continue
        if isinstance(node, ast.Expr) and ast.unparse(node.value).startswith(SETTING_UP):
            continue  # makes the repository importable or sets a thread count before numba loads
        found.append(f"line {node.lineno}: {ast.unparse(node)[:60]}")
    if not guarded:
        found.append('no `if __name__ == "__main__":` guard')
    return found


def test_runs_on_import_on_hand_made_scripts() -> None:
    good = '"""doc"""\nimport sys\nX = 1\ndef main():\n    pass\nif __name__ == "__main__":\n    main()\n'
    assert runs_on_import(good) == []
    bad = "import sys\nmain()\n"
    assert runs_on_import(bad) == ["line 2: main()", 'no `if __name__ == "__main__":` guard']


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_script_runs_only_as_a_program(script: Path) -> None:
    """Its top level only defines; running happens under the `__main__` guard."""
    assert runs_on_import(script.read_text()) == []


def test_every_script_of_tools_and_bench_imports() -> None:
    """Each script imports (its imports resolve) without running: in one fresh process, with an argv
    that no script accepts, so a script that parsed its arguments on import would exit."""
    code = (
        "import importlib.util, json, sys\n"
        "sys.argv = ['script', '--not-an-option-of-any-script']\n"
        "done = []\n"
        "for i, path in enumerate(json.loads(sys.argv_paths)):\n"
        "    spec = importlib.util.spec_from_file_location(f'_docs_script_{i}', path)\n"
        "    module = importlib.util.module_from_spec(spec)\n"
        "    sys.modules[spec.name] = module  # a dataclass looks its module up there\n"
        "    spec.loader.exec_module(module)\n"
        "    done.append(path)\n"
        "print(json.dumps(done))\n"
    ).replace("sys.argv_paths", repr(json.dumps([str(p) for p in SCRIPTS])))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [str(p) for p in SCRIPTS]


@pytest.mark.slow
def test_every_documented_script_answers_help() -> None:
    """`python SCRIPT --help` of every documented script exits 0 and lists the options the docs give."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    flags: dict[str, set[str]] = {}
    for cmd in documented_commands():
        if cmd.tokens[0] in PYTHON and cmd.tokens[1].endswith(".py"):
            flags.setdefault(cmd.tokens[1], set()).update(
                w.split("=")[0] for w in cmd.tokens[2:] if w.startswith("--")
            )
    assert flags
    for script, used in flags.items():
        result = subprocess.run(
            [sys.executable, script, "--help"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, f"{script} --help: {result.stderr[-1000:]}"
        assert not [f for f in used if f not in result.stdout], f"{script}: {used} against its --help"


# --- the README's own-data walk, end to end ---------------------------------------------------------


def readme_block(heading: str) -> str:
    """The first bash block under a README heading."""
    text = (REPO / "README.md").read_text()
    section = text[text.index(heading) :]
    m = FENCE.search(section)
    assert m and m.group(1).strip() == "bash", f"no bash block under {heading}"
    return m.group(2)


@pytest.mark.slow
def test_the_readme_own_data_walk_runs_as_written(tmp_path: Path) -> None:
    """The README's own-data block, then the replay line of its serve block, run by bash as written on
    the real ESH4 MBO file (with the README's setting for a short file and one epoch), in a fresh
    folder: every step exits 0 and writes what the next one reads."""
    esh4 = real_data_root() / "cme-es" / "esh4-glbx-mdp3-20231225.mbo.dbn.zst"
    if not esh4.exists():
        pytest.skip(f"{esh4} is absent (set FOXHUNT_REAL_DATA)")
    walk = readme_block("## Run it on your own Databento files")
    serve = [line for line in readme_block("## Serve a trained agent").splitlines() if "--replay" in line]
    assert len(serve) == 1
    # the README's own first lines set D, R and S; these replace them
    lines = walk.splitlines()
    assert [line.split("=")[0] for line in lines[:3]] == ["D", "R", "S"]
    script = "\n".join(
        [
            "set -euo pipefail",
            f"ln -s {REPO / '.venv'} .venv",
            f"D={esh4}",
            "R=runs/es",
            'S="--set data.bar_seconds=5 --set train.epochs=1"',
            *lines[3:],
            serve[0],
        ]
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=3600
    )
    assert result.returncode == 0, f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stdout + result.stderr
    assert (tmp_path / "runs" / "es" / "report.html").exists()
