"""The executor: the one place that knows Ray. Trials, seeds and per-session feature builds hand it a
module-level function and a list of argument tuples; it runs them on an embedded local Ray, on a Ray
cluster (``--ray-address auto|ray://host:port``), or, without Ray, in this process or in spawned
processes, and gives the results back in job order.

Tasks return small values (numbers, paths); anything large (checkpoints, feature parts, reports) the
task writes itself to a path it was given, so the same code runs on one machine or on a cluster whose
nodes share that path.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from enum import StrEnum
from types import ModuleType, TracebackType
from typing import Any

from foxhunt.errors import FoxhuntError
from foxhunt.parallel.resources import Resources, check_fits, detect_gpus, usable_cores, visible_gpus

ONE_CPU = Resources()  # the default task: one core, no GPU
NO_RAY = "ray is not installed: running"


class Backend(StrEnum):
    LOCAL = "local"  # this process (one worker) or spawned processes
    RAY = "ray"  # an embedded local Ray or a joined cluster


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """The one Ray task: ``fn(*args)``. Taking ``fn`` as an argument (pickled by reference to its
    module) lets any module-level callable run, builtins included, without a decorator per function."""
    return fn(*args)


def _claim_gpu(counter: Any, gpus: list[str]) -> None:
    """A spawned worker's initializer, before anything starts CUDA in it: this process takes the
    next of the visible ``gpus`` in turn (one each while there are enough), as Ray gives each task
    its own ``CUDA_VISIBLE_DEVICES``."""
    with counter.get_lock():
        turn = counter.value
        counter.value += 1
    os.environ["CUDA_VISIBLE_DEVICES"] = gpus[turn % len(gpus)]


def _import_ray() -> ModuleType | None:
    try:
        import ray
    except ImportError:  # the `ray` extra is not installed (or the import is blocked, as in the tests)
        return None
    return ray


class Executor:
    """Runs ``fn(*job)`` for every job, at most ``workers`` at once. A context manager: leaving it
    stops what it started (the embedded Ray, the process pool), never a cluster it joined."""

    def __init__(
        self, backend: Backend, workers: int, *, ray: ModuleType | None = None, owns_ray: bool = False
    ) -> None:
        self.backend = backend
        self.workers = workers
        self._ray = ray
        self._owns_ray = owns_ray
        self._remote: Any = None
        self._pool: ProcessPoolExecutor | None = None
        self._pinned = False  # the pool's workers each hold one GPU (_claim_gpu)

    def __enter__(self) -> Executor:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._ray is not None and self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()
        self._owns_ray = False

    @property
    def gpus(self) -> float:
        """The GPUs this executor can place tasks on: the Ray cluster's, or this machine's."""
        if self.backend is Backend.RAY:
            assert self._ray is not None
            return float(self._ray.cluster_resources().get("GPU", 0.0))
        return float(detect_gpus())

    def map(self, fn: Callable[..., Any], jobs: Sequence[tuple], resources: Resources = ONE_CPU) -> list:
        """``[fn(*job) for job in jobs]``, run in parallel; the first exception raised by a job is
        re-raised here (a FoxhuntError stays a FoxhuntError with its message) and the jobs still
        waiting are cancelled."""
        jobs = [tuple(job) for job in jobs]
        if not jobs:
            return []
        if self.backend is Backend.RAY:
            return self._map_ray(fn, jobs, resources)
        gpus = detect_gpus()
        check_fits(resources, float(usable_cores()), float(gpus), "executor (local)")
        if self.workers == 1 or len(jobs) == 1:
            return [fn(*job) for job in jobs]
        return self._map_pool(fn, jobs, pin=resources.gpus > 0 and gpus > 1)

    def _map_pool(self, fn: Callable[..., Any], jobs: list[tuple], *, pin: bool) -> list:
        # pin: GPU tasks on a machine of several GPUs. Without Ray nothing places them, and every
        # process would take the first GPU: each spawned worker takes the next visible GPU instead.
        if self._pool is not None and self._pinned != pin:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._pool is None:
            # Spawned, not forked: a fork of a process that has started torch's or numba's threads
            # can deadlock, and spawn is what a Ray worker or a fresh machine sees anyway.
            ctx = multiprocessing.get_context("spawn")
            init, args = (_claim_gpu, (ctx.Value("i", 0), visible_gpus())) if pin else (None, ())
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers, mp_context=ctx, initializer=init, initargs=args
            )
            self._pinned = pin
        futures: list[Future] = [self._pool.submit(fn, *job) for job in jobs]
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in futures if f in done and f.exception() is not None]
        if failed:
            for f in pending:
                f.cancel()
            raise failed[0].exception()  # type: ignore[misc]
        return [f.result() for f in futures]

    def _map_ray(self, fn: Callable[..., Any], jobs: list[tuple], resources: Resources) -> list:
        ray = self._ray
        assert ray is not None
        total = ray.cluster_resources()
        check_fits(resources, float(total.get("CPU", 0.0)), float(total.get("GPU", 0.0)), "executor (ray)")
        if self._remote is None:
            self._remote = ray.remote(_call)
        task = self._remote.options(num_cpus=resources.cpus, num_gpus=resources.gpus, max_retries=0)
        # At most `workers` jobs in flight, whatever the cluster's size: the caller's `--workers`
        # is the concurrency it asked for (and the memory it budgeted).
        refs: list[Any] = []
        pending: list[Any] = []
        next_job = 0
        while next_job < len(jobs) or pending:
            while next_job < len(jobs) and len(pending) < self.workers:
                ref = task.remote(fn, *jobs[next_job])
                refs.append(ref)
                pending.append(ref)
                next_job += 1
            ready, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(ready)
            except ray.exceptions.RayTaskError as err:
                for ref in pending:
                    ray.cancel(ref)
                cause = getattr(err, "cause", None)
                if isinstance(cause, BaseException):
                    raise cause from err  # the job's own exception, message intact
                raise
        return ray.get(refs)


def open_executor(
    workers: int, *, address: str | None = None, say: Callable[[str], None] = print
) -> Executor:
    """An executor running ``workers`` jobs at once.

    ``address`` None: an embedded local Ray started here (one CPU per worker, at least one per core;
    the CUDA devices torch sees) and stopped on exit; with one worker, this process (no Ray start-up
    for nothing to share). ``"auto"`` or ``"ray://host:port"``: join that cluster. A Ray already
    initialised in this process (a test's fixture, a notebook) is used as it is. Ray not importable:
    in this process (one worker) or in ``workers`` spawned processes, and ``say`` tells the user."""
    if workers < 1:
        raise FoxhuntError("--workers", f"{workers} workers", "run at least 1 worker")
    ray = _import_ray()
    if ray is None:
        if address is not None:
            raise FoxhuntError(
                "--ray-address",
                f"{address!r} names a Ray cluster but ray is not installed",
                "pip install 'foxhunt[ray]' or leave out --ray-address",
            )
        how = "in-process" if workers == 1 else f"in {workers} spawned processes"
        say(f"{NO_RAY} {how} (pip install 'foxhunt[ray]' for Ray)")
        return Executor(Backend.LOCAL, workers)
    if ray.is_initialized():
        return Executor(Backend.RAY, workers, ray=ray)
    if address is not None:
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        except ConnectionError as err:  # no cluster there, or its client port unreachable
            raise FoxhuntError(
                "--ray-address",
                f"no Ray cluster answers at {address!r} ({err})",
                "start one (ray start --head) or check the address; leave out --ray-address for a local Ray",
            ) from err
        say(f"ray: joined the cluster at {address} ({_describe(ray.cluster_resources())})")
        return Executor(Backend.RAY, workers, ray=ray, owns_ray=True)
    if workers == 1:
        return Executor(Backend.LOCAL, 1)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # address="local": always a new instance of our own, never a cluster someone else started on
    # this machine (plain ray.init() would join the latest `ray start`).
    ray.init(
        address="local",
        num_cpus=max(workers, usable_cores()),
        num_gpus=detect_gpus(),
        include_dashboard=False,
        logging_level=logging.WARNING,
        log_to_driver=False,
    )
    say(f"ray: embedded local instance ({_describe(ray.cluster_resources())}), {workers} workers")
    return Executor(Backend.RAY, workers, ray=ray, owns_ray=True)


def _describe(total: dict[str, float]) -> str:
    return f"{total.get('CPU', 0):g} CPUs, {total.get('GPU', 0):g} GPUs"
