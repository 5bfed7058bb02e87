"""The main job's start-up (bench/startup.py measures it): what it must not compile before its work.

Each check runs in a fresh interpreter: what a process has compiled or imported already would hide
the cost in this one.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from foxhunt.data import synth_engine as eng


def _fresh(code: str) -> str:
    argv = [sys.executable, "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600)
    return done.stdout.strip().splitlines()[-1]


def test_grow_keeps_every_record_and_doubles_the_room() -> None:
    mbo = np.arange(eng.N_RCOLS * 5, dtype=np.int64).reshape(eng.N_RCOLS, 5)
    assert eng._grow(mbo, 5) is mbo  # room enough: the same table
    grown = eng._grow(mbo, 6)
    assert grown.shape == (eng.N_RCOLS, 10)  # doubled: 2 x 5 > 6
    np.testing.assert_array_equal(grown[:, :5], mbo)
    assert eng._grow(mbo, 23).shape == (eng.N_RCOLS, 23)  # more than double asked: that much


def test_the_simulators_import_compiles_no_error_message_formatting() -> None:
    # _grow compiles when foxhunt.data.synth is imported (eager signature), before `foxhunt run`
    # prints anything. A slice assignment there made numba compile its broadcast error message
    # (string formatting): 5 s of a cold numba cache's start-up, 0.35 s without it.
    code = """
import json, numba
from numba.core import event
from foxhunt.data import synth_engine as eng
with event.install_recorder("numba:compile") as rec:
    numba.njit(f"{eng._I2}({eng._I2}, int64)")(eng._grow.py_func)  # compiled anew, not from the cache
print(json.dumps(sorted({ev.data["dispatcher"].py_func.__qualname__ for _, ev in rec.buffer})))
"""
    compiled = json.loads(_fresh(code))
    assert "_grow" in compiled
    assert not [name for name in compiled if "shape_context" in name or "unicode" in name or "str" in name]


def test_a_job_on_real_data_never_imports_the_simulator() -> None:
    # Importing foxhunt.data.synth compiles the simulator's eager kernels (~10 s on a cold numba
    # cache). run_job imported it for every job, and planted_column for its manifest's name.
    code = """
import json, sys
from pathlib import Path
from foxhunt.backtest.reference import planted_column
from foxhunt.config.loader import load_config
from foxhunt.errors import FoxhuntError
from foxhunt.pipeline import run_job
cfg = load_config(profile="smoke", overrides=["alpha.horizons=[0]"])
refused = False
try:  # refused right after run_job's imports, before anything is written
    run_job(cfg, Path("never-written"), [Path("real.dbn.zst")], log=lambda line: None)
except FoxhuntError:
    refused = True
assert refused
assert planted_column([Path("real.dbn.zst")]) is None
print(json.dumps("foxhunt.data.synth_engine" in sys.modules))
"""
    assert json.loads(_fresh(code)) is False


def test_no_compile_ahead_without_an_idle_core() -> None:
    from foxhunt.config.loader import load_config
    from foxhunt.dataset import ahead

    assert ahead.start(load_config(profile="smoke").synth, idle_cores=0.5) is False
    assert ahead.wait() == 0


@pytest.mark.slow  # compiles the simulator from an empty numba cache: a minute on a busy 2-core box
def test_the_simulator_compiled_ahead_is_loaded_from_the_cache(tmp_path) -> None:
    # foxhunt run forks foxhunt.dataset.ahead's process before its imports; its own market then loads
    # the simulator's kernels from the cache the process wrote instead of compiling them.
    code = f"""
import json, os
os.environ["NUMBA_CACHE_DIR"] = {str(tmp_path / "numba")!r}  # empty: every kernel compiles
from foxhunt.config.loader import load_config
from foxhunt.dataset import ahead
from foxhunt.dataset.warmup import TINY_EVENTS
cfg = load_config(profile="smoke").synth
started = ahead.start(cfg, idle_cores=2.0)
done = ahead.wait()
from foxhunt.data import synth_engine as eng
from foxhunt.data.synth_market import synthetic_market
synthetic_market(cfg.model_copy(update={{"sessions": 1, "events_per_session": TINY_EVENTS}}))
stats = eng.simulate_kernel.stats
print(json.dumps([started, done, sum(stats.cache_hits.values()), sum(stats.cache_misses.values())]))
"""
    started, done, hits, misses = json.loads(_fresh(code))
    assert started and done == 1
    assert hits >= 1 and misses == 0
