"""The synthetic market's kernels compiled in a forked process while the main job imports the rest.

Where numba's cache is empty (a fresh install or clone, or the first run after an edit: the cache is
stamped with the package's source, :mod:`foxhunt.jit`) ``foxhunt run`` first imports its stages (the
training stack, LightGBM, ...) and then compiles the simulator (its eager kernels when
:mod:`foxhunt.data.synth` is imported, its event loop at the first call), one after the other, before
its first line. :func:`start` forks one process before those imports, which imports the simulator and
runs it on a tiny market, so numba compiles the kernels for the same argument types and writes them to
its cache while the job imports; :func:`wait` (before the job's own market) waits for it, and the job
then loads the kernels from the cache. With a warm cache the process only loads them (a fraction of a
second).

Only where a core is idle for it and the platform forks safely (Linux); a process that fails or
outlives the wait changes nothing but the time: the job compiles what is missing, as without it.
This module imports nothing heavy: the fork happens before the job's own imports.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
import warnings
from typing import Any

WAIT_S = 120.0  # the longest wait for the process; one still compiling then is stopped

_running: list[multiprocessing.process.BaseProcess] = []


def _compile(synth: Any) -> None:
    import os

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from foxhunt.data.synth_market import synthetic_market
            from foxhunt.dataset.warmup import TINY_EVENTS

            synthetic_market(synth.model_copy(update={"sessions": 1, "events_per_session": TINY_EVENTS}))
    except BaseException:  # noqa: BLE001 - nothing the process raises matters to the job
        os._exit(1)
    os._exit(0)


def start(synth: Any, idle_cores: float) -> bool:
    """Fork the process compiling the simulator of ``synth`` (a :class:`foxhunt.data.config.SynthConfig`)
    when ``idle_cores`` leaves one for it; whether it was started. Call before threads of your own."""
    if sys.platform != "linux" or multiprocessing.current_process().daemon or idle_cores < 1:
        return False
    child = multiprocessing.get_context("fork").Process(target=_compile, args=(synth,), daemon=True)
    child.start()
    _running.append(child)
    return True


def wait(timeout: float = WAIT_S) -> int:
    """Wait for the processes :func:`start` forked (at most ``timeout`` seconds in all), stop any
    left; how many finished cleanly (0 where none was started)."""
    end = time.monotonic() + timeout
    done = 0
    while _running:
        child = _running.pop()
        child.join(max(0.0, end - time.monotonic()))
        if child.is_alive():
            child.terminate()
            child.join()
        done += child.exitcode == 0
    return done
