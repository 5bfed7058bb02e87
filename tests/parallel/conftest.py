"""One Ray for the whole package (its start-up takes seconds on a loaded 2-core host): the executor
finds it initialised and uses it as it is, and it is stopped after the last test here. It declares
two GPUs the machine need not have: Ray schedules declared GPUs and gives each task its own
``CUDA_VISIBLE_DEVICES``, which is all the placement tests look at."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="package")
def ray_session() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
