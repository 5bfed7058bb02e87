"""The command line stays thin (issue 55): every function in ``foxhunt/cli/`` parses, calls a stage
and hands the result to the presenter in at most 60 lines (decorators and docstring included)."""

from __future__ import annotations

import ast
from pathlib import Path

import foxhunt.cli

MOST_LINES = 60
CLI = Path(foxhunt.cli.__file__).parent


def lengths() -> dict[tuple[str, str], int]:
    """``(file, function) -> lines`` of every function and method in foxhunt/cli/, nested ones too."""
    found = {}
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                found[(path.name, node.name)] = node.end_lineno - first + 1  # type: ignore[operator]
    return found


def test_no_cli_function_is_over_60_lines() -> None:
    found = lengths()
    assert len(found) > 40 and ("data.py", "data_synth") in found  # the walk sees the commands
    long = {key: n for key, n in found.items() if n > MOST_LINES}
    assert long == {}, f"over {MOST_LINES} lines (split parsing, the stage's work and printing): {long}"
