"""``run_seeds`` hands every seed to the executor, with a GPU share on CUDA."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import foxhunt.parallel
from foxhunt.config.loader import load_config
from foxhunt.parallel import Resources
from foxhunt.tune.seeds import run_seeds, seed_folder, train_one_seed


class FakeExecutor:
    """Records what ``run_seeds`` asks for; a machine with ``gpus`` GPUs."""

    def __init__(self, workers: int, gpus: float) -> None:
        self.workers, self.gpus = workers, gpus
        self.calls: list[tuple[Any, list[tuple], Resources]] = []

    def __enter__(self) -> FakeExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def map(self, fn: Any, jobs: list[tuple], resources: Resources) -> list:
        self.calls.append((fn, jobs, resources))
        return [job[1] for job in jobs]  # the seed, standing in for its result


@pytest.mark.parametrize(("device", "share"), [("cuda", 0.25), ("cpu", 0.0)])
def test_seeds_are_tasks_sharing_one_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, device: str, share: float
) -> None:
    opened: list[FakeExecutor] = []

    def fake_open(workers: int, *, address: str | None = None, say: Any = print) -> FakeExecutor:
        assert address == "ray://head:10001"
        opened.append(FakeExecutor(workers, gpus=1.0))
        return opened[-1]

    monkeypatch.setattr(foxhunt.parallel, "open_executor", fake_open)
    cfg = load_config(profile="smoke", overrides=[f"run.device={device}"])
    got = run_seeds(cfg, tmp_path / "c.arrow", [7, 8, 9, 10, 11], tmp_path, workers=4, address="ray://head:10001")
    assert got == [7, 8, 9, 10, 11]  # seed order
    (ex,) = opened
    (fn, jobs, resources) = ex.calls[0]
    assert ex.workers == 4 and fn is train_one_seed
    assert [j[1] for j in jobs] == [7, 8, 9, 10, 11] and jobs[0][2] == seed_folder(tmp_path, 7)
    assert resources == Resources(cpus=1.0, gpus=share)  # four seeds at once on one GPU
