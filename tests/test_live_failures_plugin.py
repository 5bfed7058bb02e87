"""tests/live_failures_plugin.py: a failure's traceback is on disk when the test ends, not at the summary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_each_failure_is_written_with_its_traceback_as_it_happens(tmp_path: Path) -> None:
    (tmp_path / "test_three.py").write_text(
        "import os\n"
        "def test_passes():\n    assert True\n"
        "def test_fails():\n    x = 41\n    assert x == 42, 'the planted failure'\n"
        # the file already holds the failure above when the third test runs: killed here, it is kept
        "def test_sees_the_failure_on_disk():\n"
        "    assert 'the planted failure' in open(os.environ['FOXHUNT_LIVE_FAILURES']).read()\n"
    )
    out = tmp_path / "failures.txt"
    env = {**os.environ, "FOXHUNT_LIVE_FAILURES": str(out), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.live_failures_plugin", "-p", "no:cacheprovider",
         "-p", "no:xdist", "-o", "addopts=", "-q", str(tmp_path / "test_three.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # one test failed, the others passed
    text = out.read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith(("PASSED", "FAILED"))]
    assert [ln.split()[0] for ln in lines] == ["PASSED", "FAILED", "PASSED"], text
    assert "test_three.py::test_fails" in lines[1]
    assert "assert 41 == 42" in text and "the planted failure" in text  # the traceback, as pytest prints it
