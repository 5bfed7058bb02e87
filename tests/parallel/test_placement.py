"""Where a task trained, as tune.json and seeds.json record it: the GPU behind each task's cuda:0."""

from __future__ import annotations

import types

import pytest
import torch

from foxhunt.parallel.resources import placement, spread, tally


def test_a_cpu_task_is_placed_on_the_cpu() -> None:
    assert placement("cpu") == "cpu"


def test_a_cuda_task_names_the_physical_gpu_behind_its_cuda0(monkeypatch: pytest.MonkeyPatch) -> None:
    # As a Ray task on the second of two GPUs sees it: one device, cuda:0, and the variable Ray set.
    props = types.SimpleNamespace(name="NVIDIA H200", uuid="5c3e0f2a-0001")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert placement("cuda") == "cuda:0 (NVIDIA H200, GPU-5c3e0f2a-0001, CUDA_VISIBLE_DEVICES=1)"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert placement("cuda:0") == "cuda:0 (NVIDIA H200, GPU-5c3e0f2a-0001, CUDA_VISIBLE_DEVICES=unset)"


def test_the_tally_counts_each_place_and_the_console_names_gpus_only() -> None:
    a, b = "cuda:0 (H200, GPU-a, CUDA_VISIBLE_DEVICES=0)", "cuda:0 (H200, GPU-b, CUDA_VISIBLE_DEVICES=1)"
    places = tally([b, a, None, a, b, b])
    assert places == {a: 2, b: 3} and list(places) == [a, b]
    assert spread(places) == f"ran on {a}: 2; {b}: 3"
    assert spread(tally(["cpu", "cpu"])) is None and spread({}) is None
