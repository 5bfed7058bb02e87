"""The executor: job order, errors, GPU shares, and the fallback without Ray."""

from __future__ import annotations

import os
import sys
import time

import pytest

from foxhunt.errors import ConfigError, FoxhuntError
from foxhunt.parallel import Backend, Resources, gpu_share, open_executor


def square_after(i: int, delay: float) -> int:
    time.sleep(delay)
    return i * i


def fail_on(i: int, bad: int) -> int:
    if i == bad:
        raise ConfigError(f"job{i}", "planted failure", "nothing to fix")
    return i


# Later jobs finish first (shorter sleeps): results must still come back in job order.
JOBS = [(i, 0.1 * (3 - i)) for i in range(4)]


@pytest.mark.usefixtures("ray_session")
def test_ray_map_keeps_job_order_and_leaves_a_joined_ray_running() -> None:
    import ray

    with open_executor(2, say=pytest.fail) as ex:
        assert ex.backend is Backend.RAY
        assert ex.map(square_after, JOBS) == [0, 1, 4, 9]
    assert ray.is_initialized()  # started by the fixture, so not the executor's to stop


@pytest.mark.usefixtures("ray_session")
def test_ray_map_reraises_the_jobs_own_error() -> None:
    with open_executor(2) as ex, pytest.raises(ConfigError) as caught:
        ex.map(fail_on, [(i, 2) for i in range(4)])
    # The job's own exception, not Ray's wrapper: the CLI prints this one line and exits 2.
    assert str(caught.value) == "job2: planted failure (fix: nothing to fix)"
    assert caught.value.exit_code == 2


@pytest.mark.usefixtures("ray_session")
def test_ray_gpu_share_past_the_gpus_is_refused_not_left_waiting() -> None:
    with open_executor(2) as ex:
        assert ex.map(square_after, [(3, 0.0)], Resources(cpus=0.5, gpus=0.0)) == [9]
        with pytest.raises(FoxhuntError, match="asks for 3.0 GPU"):
            ex.map(square_after, [(3, 0.0)], Resources(gpus=3.0))  # the fixture's Ray has two


def visible_gpu_after(delay: float) -> str:
    time.sleep(delay)  # long enough that both workers' tasks run at once
    return os.environ.get("CUDA_VISIBLE_DEVICES", "unset")


@pytest.mark.usefixtures("ray_session")
def test_ray_places_one_worker_a_gpu_on_each_of_two_gpus() -> None:
    # Two workers on a Ray of two GPUs: the share the trials and seeds ask for is one GPU each, and
    # Ray, not foxhunt, puts each task on its own GPU (no GPU count or index in foxhunt's code).
    with open_executor(2) as ex:
        share = gpu_share(ex.gpus, ex.workers)
        assert share == 1.0
        seen = ex.map(visible_gpu_after, [(0.5,)] * 4, Resources(gpus=share))
    assert sorted(set(seen)) == ["0", "1"], seen


def test_without_ray_each_spawned_worker_takes_its_own_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # A machine of two GPUs without Ray: nothing places the processes, so each spawned worker takes
    # the next visible GPU before CUDA starts in it (else every one would use the first). CPU tasks
    # on the same executor get a pool that leaves the variable as it was.
    import foxhunt.parallel.executor as executor

    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setattr(executor, "detect_gpus", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # the two this process may use
    with open_executor(2, say=lambda _: None) as ex:
        seen = ex.map(visible_gpu_after, [(0.5,)] * 4, Resources(gpus=1.0))
        assert sorted(set(seen)) == ["3", "5"], seen
        assert ex.map(visible_gpu_after, [(0.0,)] * 2) == ["3,5", "3,5"]


def test_resources_take_gpu_fractions_and_refuse_broken_shares() -> None:
    assert Resources(gpus=0.25).gpus == 0.25
    assert Resources(cpus=2, gpus=2).gpus == 2
    with pytest.raises(FoxhuntError, match="whole number"):
        Resources(gpus=1.5)
    with pytest.raises(FoxhuntError, match="Resources.cpus"):
        Resources(cpus=-1)


def test_without_ray_it_runs_in_spawned_processes_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    said: list[str] = []
    with open_executor(2, say=said.append) as ex:
        assert ex.backend is Backend.LOCAL
        assert ex.map(square_after, JOBS) == [0, 1, 4, 9]
        with pytest.raises(ConfigError, match="job1: planted failure"):
            ex.map(fail_on, [(i, 1) for i in range(3)])
    assert said == [
        "ray is not installed: running in 2 spawned processes (pip install 'foxhunt[ray]' for Ray)"
    ]
    with pytest.raises(FoxhuntError, match="ray is not installed"):
        open_executor(2, address="auto")


def test_one_worker_runs_in_process_without_starting_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("one worker started Ray"))
    with open_executor(1, say=pytest.fail) as ex:
        assert ex.backend is Backend.LOCAL
        assert ex.map(square_after, [(2, 0.0), (5, 0.0)]) == [4, 25]
    with pytest.raises(FoxhuntError, match="at least 1 worker"):
        open_executor(0)


@pytest.mark.parametrize(
    ("gpus", "workers", "share"),
    [(1, 4, 0.25), (2, 4, 0.5), (8, 4, 1.0), (3, 2, 1.0), (1, 3, 0.3333), (0, 4, 0.0)],
)
def test_gpu_share_splits_the_gpus_over_the_workers(gpus: float, workers: int, share: float) -> None:
    assert gpu_share(gpus, workers) == share
    assert gpu_share(gpus, workers) * workers <= max(gpus, 0)  # the shares never oversubscribe


def test_an_address_without_a_cluster_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")

    def no_cluster(**kwargs: object) -> None:
        raise ConnectionError("Could not find any running Ray instance.")  # what ray.init raises

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", no_cluster)
    with pytest.raises(FoxhuntError, match="--ray-address: no Ray cluster answers at 'auto'"):
        open_executor(2, address="auto")
