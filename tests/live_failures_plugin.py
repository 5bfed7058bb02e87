"""Each failure written out the moment it happens, for runs that may be killed before pytest's summary.

``pytest -p tests.live_failures_plugin`` appends to ``$FOXHUNT_LIVE_FAILURES`` (default
``failures.txt`` in the current directory), as each test phase ends: one line a finished test (its
node id, outcome and wall seconds) and, for a failure or an error, the whole traceback pytest would
print in its summary. A device call that runs past its limit (``bench/issue57_gpu.sh``: the call is
killed, and pytest's ``-rfE`` summary with it) keeps the messages of the failures that came before.
"""

from __future__ import annotations

import os

import pytest


def _write(text: str) -> None:
    with open(os.environ.get("FOXHUNT_LIVE_FAILURES", "failures.txt"), "a") as out:
        out.write(text)
        out.flush()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    failed = report.failed
    if report.when == "call" or failed or (report.when == "setup" and report.skipped):
        _write(f"{report.outcome.upper():<7} {report.when:<8} {report.duration:7.1f} s  {report.nodeid}\n")
    if failed:
        _write(f"{report.longreprtext}\n{'-' * 100}\n")
