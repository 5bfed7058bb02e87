"""Each test's CPU seconds, for timing the slow suite on a shared box where wall time says little.

``pytest -p tests.cputime_plugin`` appends one JSON line per test to ``$FOXHUNT_CPUTIME`` (default
``cputime.jsonl`` in the current directory): its node id, outcome, wall seconds and CPU seconds
(user + system of the pytest process and of the children it waited for, ``resource.getrusage``),
about what the test takes on an idle core. Children nobody waits for (a Ray node's workers) are not
counted. docs/results/2026-12-07-slow-suite.md has the numbers it gave."""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Generator

import pytest

_PHASES: dict[str, list[str]] = {}
"""Node id -> the outcome of each phase run so far (setup, call, teardown)."""


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object]:
    cpu, wall = _cpu(), time.perf_counter()
    result = yield
    phases = _PHASES.pop(item.nodeid, [])
    outcome = next((o for o in ("failed", "skipped") if o in phases), "passed")
    line = {
        "nodeid": item.nodeid,
        "outcome": outcome,
        "cpu_s": round(_cpu() - cpu, 1),
        "wall_s": round(time.perf_counter() - wall, 1),
    }
    with open(os.environ.get("FOXHUNT_CPUTIME", "cputime.jsonl"), "a") as out:
        out.write(json.dumps(line) + "\n")
    return result


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _PHASES.setdefault(report.nodeid, []).append(report.outcome)
