"""Shared fixtures. Real-data tests read ../shared/data/real (override: FOXHUNT_REAL_DATA)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest
import torch

# Without a CUDA device the fused-step tests run Triton's interpreter (where Triton is installed; CI's
# CPU build has none). Triton reads TRITON_INTERPRET when it is imported: switched on later, after
# some test's torch.compile imported Triton, its own language functions (tl.zeros) stay compiled-only
# and the interpreted kernel fails ("Cannot call @triton.jit'd outside of the scope of a kernel"). So
# it is on for the whole session, before anything imports Triton; the CPU's Inductor emits C++, not
# Triton, and never reads it.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

if TYPE_CHECKING:
    from foxhunt.features.cache_file import FeatureCache

REPO = Path(__file__).resolve().parents[1]


T = TypeVar("T")

TRADING_SEEDS = (2, 1, 3, 4, 7, 8, 9, 10)
"""Seeds tried in turn by :func:`first_that_trades`, the first one that traded when it was written
first: which seeds' briefly trained policies trade depends on every random stream of the run and on
the state's columns, so a profile change can turn any one of them flat."""


def first_that_trades(attempt: Callable[[int], tuple[T, int]], seeds: tuple[int, ...] = TRADING_SEEDS) -> T:
    """``attempt(seed)`` -> (what it made, its policy's round trips): the first result whose policy
    trades. Tests that compare two paths on a trained policy need one that trades, or the comparison
    is between two flat ledgers; a run of seeds that all stay flat fails the test, naming them."""
    for seed in seeds:
        made, trades = attempt(seed)
        if trades > 0:
            return made
    pytest.fail(f"no seed of {seeds} trained a policy that trades; the comparison needs one")


MANUAL: dict[str, str] = {
    "tests/test_job.py": "three full smoke runs and a 3-seed smoke study: tens of CPU minutes",
    "tests/alpha/test_check.py": "the verdict over many synthetic markets: too long for CI's slow run",
    "tests/agent/test_ppo.py": (
        "PPO's known answer: 20 epochs of the full action space, about 10 CPU minutes (2,807 s of wall on "
        "a loaded box): with it CI's slow run would pass its 40 minutes"
    ),
    "tests/corpus/test_kill.py": (
        "445 CPU s, and its kill moments assume a steady load: on the shared box at a falling load 6 of "
        "12 kills fell after their run ended (it wants 10)"
    ),
    "tests/serve": "12 tests, 716 CPU s together (Inductor and AOT compiles): past CI's slow-run budget",
    "tests/tune/test_objective.py": (
        "passes, 49.6 CPU s (two tiny 3-trial studies): with it CI's slow run would pass its 40 minutes"
    ),
}
"""Slow tests that CI's slow run (``make test-slow-ci``: ``-m "slow and not manual"``) leaves out, by
file or folder (every slow test under it) or node id, with why; ``make test-manual`` runs them (at
every session's close, on the GPU machine) and ``make test-slow`` runs them with the rest. A test
leaves the table once it passed on the 2-core box and its CPU seconds (``-p tests.cputime_plugin``),
times 1.5, keep CI's slow run under about 40 minutes (docs/testing.md has the timings)."""


def _manual(nodeid: str) -> str | None:
    """Why :data:`MANUAL` leaves ``nodeid`` out of CI's slow run (None: it does not)."""
    for key, why in MANUAL.items():
        if nodeid == key or nodeid.startswith((f"{key}::", f"{key}/")):
            return why
    return None


def pytest_configure(config: pytest.Config) -> None:
    # Registered here, beside the table that applies it (pyproject.toml registers slow and gpu).
    config.addinivalue_line("markers", "manual: a slow test CI's slow run leaves out (MANUAL says why)")


@pytest.hookimpl(tryfirst=True)  # before -m selects: the manual marker is part of the selection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``manual`` marker on the tests :data:`MANUAL` names; without a CUDA device every ``gpu``
    test skips, saying so (``make test-gpu`` on a CPU machine skips them all cleanly)."""
    cuda = torch.cuda.is_available()
    skip = pytest.mark.skip(reason="no CUDA device: gpu tests run on a GPU machine (make test-gpu)")
    for item in items:
        if "slow" in item.keywords and (why := _manual(item.nodeid)) is not None:
            item.add_marker(pytest.mark.manual(reason=why))
        if not cuda and "gpu" in item.keywords:
            item.add_marker(skip)


def real_data_root() -> Path:
    return Path(os.environ.get("FOXHUNT_REAL_DATA", REPO / ".." / "shared" / "data" / "real")).resolve()


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    """The read-only real-data folder; tests using it skip when it is absent."""
    root = real_data_root()
    if not root.is_dir():
        pytest.skip(f"real data folder {root} is absent (set FOXHUNT_REAL_DATA to point at it)")
    return root


@pytest.fixture(scope="session", autouse=True)
def tracking_off() -> Iterator[None]:
    """No run of the suite is tracked in MLflow unless its test names a store (``--tracking-uri``):
    the first tracked run of a process costs seconds (importing mlflow, creating a SQLite store), each
    later one about a second, and a default store would be written into the current directory (the
    repository). Environment-wide, so commands the tests run in subprocesses inherit it."""
    from foxhunt.tracking.store import SWITCH_ENV

    before = os.environ.get(SWITCH_ENV)
    os.environ[SWITCH_ENV] = "off"
    yield
    if before is None:
        os.environ.pop(SWITCH_ENV, None)
    else:
        os.environ[SWITCH_ENV] = before


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory: pytest.TempPathFactory) -> FeatureCache:
    """The feature cache of ``tests.train.test_run.tiny_cfg()``'s synthetic market, built once for the
    whole run (seconds each time on a loaded host). Training only reads it, each run writing into its
    own folder; the cache key leaves out training, folds and env settings, so any TINY variant that
    keeps its data, features, labels and instrument sections (``value_config``) can train on it."""
    from foxhunt.data.synth import write_synthetic
    from foxhunt.dataset.build import get_or_build
    from tests.train.test_run import tiny_cfg

    cfg = tiny_cfg()
    root = tmp_path_factory.mktemp("tiny_market")
    return get_or_build(write_synthetic(cfg.synth, root / "market"), cfg, root / "cache")


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Tiny networks and many small ops: intra-op threads only add overhead on a shared 2-core host
    (50x on a loaded one). Module-scoped: request it in a test, or for a whole module with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
