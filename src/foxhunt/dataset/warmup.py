"""The feature and label kernels compiled ahead, one forked process per family, while the caller works.

On a machine whose numba cache is empty (a fresh install, a fresh copy of the code) the first feature
computation compiles every family's kernels one after another: ~13 s on an H200 host, ~30 s on a busy
2-core one, paid inside the leak guard. :func:`start` forks one process per family of the stack (and
one for the labels), each computing its family on a tiny synthetic market, so numba compiles the same
kernels for the same argument types and writes them to its cache; :meth:`Warmup.wait` (before the
first real computation) waits for them, and the caller's kernels then load from the cache instead of
compiling. With a warm cache a child only loads and runs the tiny input (a fraction of a second).

Only where the machine has idle cores for it (one per child beside the caller's own work); a child
that fails or outlives the wait changes nothing but the time: the caller compiles what is missing.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
import warnings
from dataclasses import dataclass, field

from foxhunt.config.models import FoxhuntConfig
from foxhunt.features.frame import RowInput

TINY_EVENTS = 4000  # book events of the tiny market: rows for every family, a fraction of a second
WAIT_S = 120.0  # the longest wait for the children; a child still compiling then is stopped


@dataclass
class Warmup:
    """The forked compiling processes (none where there were no idle cores for them)."""

    children: list[multiprocessing.process.BaseProcess] = field(default_factory=list)

    def wait(self, timeout: float = WAIT_S) -> int:
        """Wait for the children (at most ``timeout`` seconds in all), stop any left; the number
        that finished cleanly."""
        end = time.monotonic() + timeout
        done = 0
        for child in self.children:
            child.join(max(0.0, end - time.monotonic()))
            if child.is_alive():
                child.terminate()
                child.join()
            done += child.exitcode == 0
        self.children = []
        return done


def _compile_family(inp: RowInput, cfg: FoxhuntConfig, name: str) -> None:
    # Silent and self-contained: a warm-up that fails only leaves the compiling to the caller.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "labels":
            from foxhunt.dataset.cache import label_columns

            label_columns(inp, cfg)
            return
        from foxhunt.features.registry import FAMILIES
        from foxhunt.features.stack import compute_stack

        compute_stack(inp, (name,), {name: getattr(cfg.features, name)}, FAMILIES)


def _run_child(inp: RowInput, cfg: FoxhuntConfig, name: str) -> None:
    import os

    try:
        _compile_family(inp, cfg, name)
    except BaseException:  # noqa: BLE001 - nothing a warm-up child raises matters to the caller
        os._exit(1)
    os._exit(0)


def start(cfg: FoxhuntConfig, idle_cores: float) -> Warmup:
    """Fork the compiling processes for ``cfg``'s built-in feature families and labels when
    ``idle_cores`` leaves one for each and the platform forks safely (Linux); else none.

    Call before starting threads of your own: the children are forked from this process as it is,
    and run numpy, pandas and numba only."""
    from foxhunt.features.layout import STACK_FAMILIES
    from foxhunt.features.registry import FAMILIES

    names = [n for n in STACK_FAMILIES[cfg.data.row_unit] if n in FAMILIES] + ["labels"]
    if sys.platform != "linux" or multiprocessing.current_process().daemon or idle_cores < len(names) + 1:
        return Warmup()
    from foxhunt.data.synth_market import synthetic_market
    from foxhunt.features.pipeline import rows_from_market

    tiny = cfg.synth.model_copy(update={"sessions": 1, "events_per_session": TINY_EVENTS})
    try:
        # In this process: the simulator's kernel is the one the caller's market needs next anyway.
        inp = rows_from_market(synthetic_market(tiny), cfg.data)
    except Exception:  # noqa: BLE001 - e.g. a data source the synthetic book cannot feed: no warm-up
        return Warmup()
    ctx = multiprocessing.get_context("fork")
    children = [ctx.Process(target=_run_child, args=(inp, cfg, name), daemon=True) for name in names]
    for child in children:
        child.start()
    return Warmup(children)
