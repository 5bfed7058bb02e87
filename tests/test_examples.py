"""The example notebooks run: each is valid nbformat 4 JSON, and its code cells, executed in order in
one namespace in a fresh process (cwd a temporary folder), raise nothing. No Jupyter kernel needed:
the cells are plain Python (no magics).

The run as a user sees it (a fresh process: imports, numba loads, the notebook's market) takes about
16 s of CPU and is marked slow; the default run executes the same cells in this process on a
smaller market (``api.config`` is given extra overrides), a few seconds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

EXAMPLES = REPO / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))

# Executes the notebook named by argv[1]: each cell compiled under its own name, so that a traceback
# says which cell failed; a cell's last bare expression is evaluated and printed, as Jupyter shows it.
RUNNER = """
import ast, json, sys
nb = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
for i, cell in enumerate(nb["cells"]):
    if cell["cell_type"] != "code":
        continue
    tree = ast.parse("".join(cell["source"]), filename=f"<cell {i}>")
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, f"<cell {i}>", "exec"), namespace)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), f"<cell {i}>", "eval"), namespace)
        if value is not None:
            print(value)
    print(f"--- cell {i} done", flush=True)
"""


def test_there_is_a_quickstart() -> None:
    assert EXAMPLES / "quickstart.ipynb" in NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_nbformat_4(path: Path) -> None:
    nb = json.loads(path.read_text())
    assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 4 and isinstance(nb["metadata"], dict)
    assert nb["cells"], "an empty notebook"
    for cell in nb["cells"]:
        assert cell["cell_type"] in ("markdown", "code") and isinstance(cell["metadata"], dict)
        assert isinstance(cell["source"], list) and all(isinstance(s, str) for s in cell["source"])
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None  # stored without outputs
            assert not any(line.lstrip().startswith(("%", "!")) for line in cell["source"]), "no magics"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_end_to_end(path: Path, tmp_path: Path) -> None:
    code_cells = sum(c["cell_type"] == "code" for c in json.loads(path.read_text())["cells"])
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**_env(), "MPLBACKEND": "Agg"},
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("--- cell ") == code_cells
    if path.name == "quickstart.ipynb":
        # The metrics table of the last cell: the three policies, the custom one by its function's name.
        assert "imbalance rule over flat:" in done.stdout
        assert all(p in done.stdout for p in ("flat", "long", "imbalance_rule"))


def test_the_notebook_extra_installs_jupyter_and_a_kernel() -> None:
    """``pip install -e '.[notebook]'`` (the notebook's first cell says so) brings JupyterLab, a
    Python kernel and nbclient, which the kernel run below needs."""
    import re
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0].lower() for req in extras["notebook"]}
    assert {"jupyterlab", "ipykernel", "nbclient"} <= names
    intro = "".join(json.loads((EXAMPLES / "quickstart.ipynb").read_text())["cells"][0]["source"])
    assert "pip install -e '.[notebook]'" in intro


@pytest.mark.slow
def test_quickstart_runs_in_a_jupyter_kernel(tmp_path: Path) -> None:
    """The notebook as Jupyter runs it: every cell in an IPython kernel (the notebook extra's
    packages), without an error."""
    nbclient = pytest.importorskip("nbclient", reason="the notebook extra is not installed")
    pytest.importorskip("ipykernel", reason="the notebook extra is not installed")
    import nbformat

    nb = nbformat.read(EXAMPLES / "quickstart.ipynb", as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "imbalance rule over flat:" in printed


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


# The fast variant's market: fewer events per session and shorter validation windows.
SMALLER = ("synth.events_per_session=8000", "env.episode_rows=16")


def test_quickstart_runs_on_a_smaller_market(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import ast

    from foxhunt import api

    config = api.config

    def smaller(profile: str | None = None, **kwargs: object) -> object:
        overrides = [*kwargs.pop("overrides", ()), *SMALLER]  # type: ignore[misc]
        return config(profile, overrides=overrides, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(api, "config", smaller)
    monkeypatch.chdir(tmp_path)
    nb = json.loads((EXAMPLES / "quickstart.ipynb").read_text())
    namespace: dict[str, object] = {"__name__": "__main__"}
    for i, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        exec(compile(ast.parse("".join(cell["source"])), f"<code cell {i}>", "exec"), namespace)
    assert namespace["cfg"].synth.events_per_session == 8000  # type: ignore[attr-defined]
    summary = namespace["summary"]
    assert list(summary.index) == ["flat", "imbalance_rule", "long"]  # type: ignore[attr-defined]
    assert summary.loc["long", "trades"] > 0  # type: ignore[attr-defined]
    assert "imbalance rule over flat:" in capsys.readouterr().out


def test_readme_and_docs_link_only_inside_the_repository() -> None:
    """The README sends a reader to docs/ and examples/, never to a file outside the repository
    (tests/test_docs.py keeps any reference to an outside specification out of the code), and
    every relative link resolves."""
    import re

    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    assert REPO / "docs" / "design.md" in pages
    readme = pages[0].read_text()
    assert "docs/design.md" in readme and "examples/quickstart.ipynb" in readme
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)\)", page.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            path = (page.parent / target).resolve()
            assert path.is_relative_to(REPO) and path.exists(), f"{page.name} links to {target}"
