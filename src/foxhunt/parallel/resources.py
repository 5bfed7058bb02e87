"""What one task asks of the machine: CPUs and a share of a GPU, as Ray schedules them."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass

from foxhunt.errors import FoxhuntError

RAY_GRAIN = 10_000  # Ray accounts fractional resources in units of 1e-4


@dataclass(frozen=True)
class Resources:
    """Per task: ``cpus`` cores and ``gpus`` GPUs. A GPU share below 1 (0.25) lets Ray place several
    tasks on one GPU (four quarter-GPU trials on one H200); above 1 it must be whole, as Ray needs."""

    cpus: float = 1.0
    gpus: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.cpus) and self.cpus >= 0):
            raise FoxhuntError("Resources.cpus", f"{self.cpus} is not a core count >= 0", "ask for 0 or more")
        if not (math.isfinite(self.gpus) and self.gpus >= 0):
            raise FoxhuntError("Resources.gpus", f"{self.gpus} is not a GPU share >= 0", "ask for 0 or more")
        if self.gpus > 1 and not float(self.gpus).is_integer():
            raise FoxhuntError(
                "Resources.gpus",
                f"{self.gpus} GPUs per task: a share above one GPU must be a whole number",
                "ask for a fraction below 1 (0.5, 0.25) or a whole number of GPUs",
            )


def usable_cores() -> int:
    """The cores this process may run on (``taskset``, a container's CPU set), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows: no affinity call
        return os.cpu_count() or 1


def detect_gpus() -> int:
    """The CUDA devices this process sees (0 without torch's CUDA). ``device_count`` asks the driver
    without creating a CUDA context, so spawned or Ray workers can still take the GPUs after this."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def visible_gpus() -> list[str]:
    """The GPUs this process sees, as ``CUDA_VISIBLE_DEVICES`` names them (indices or UUIDs)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g.strip() for g in visible.split(",") if g.strip()]
    return [str(i) for i in range(detect_gpus())]


def gpu_share(gpus: float, workers: int) -> float:
    """Each of ``workers`` concurrent tasks' share of ``gpus`` GPUs, at most one whole GPU: 1 GPU and
    4 workers give 0.25 (four tasks on one GPU), 2 GPUs and 4 workers 0.5, 8 GPUs and 4 workers 1.
    Rounded down to Ray's resource grain (1e-4) so ``workers`` shares never sum past the GPUs."""
    if gpus <= 0 or workers < 1:
        return 0.0
    return min(1.0, math.floor(gpus / workers * RAY_GRAIN) / RAY_GRAIN)


def check_fits(resources: Resources, cpus: float, gpus: float, where: str) -> None:
    """Refuse a task that no node can ever run (Ray would wait for it forever)."""
    if resources.gpus > gpus:
        raise FoxhuntError(
            where,
            f"a task asks for {resources.gpus} GPU(s) but only {gpus:g} are available",
            "ask for gpus=0 on a machine without CUDA, or join a cluster with GPUs (--ray-address)",
        )
    if resources.cpus > cpus:
        raise FoxhuntError(
            where,
            f"a task asks for {resources.cpus} CPU(s) but only {cpus:g} are available",
            "ask for fewer CPUs per task",
        )


def placement(device: str) -> str:
    """Where a task trains, as its logs record it: ``cpu``, or the CUDA device with the physical GPU
    behind it, ``cuda:0 (NVIDIA H200, GPU-5c3e..., CUDA_VISIBLE_DEVICES=1)``. Ray gives each GPU
    task its own ``CUDA_VISIBLE_DEVICES``, so every task sees its GPU as ``cuda:0``: the UUID and the
    variable are what tell two tasks' GPUs apart."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return dev.type
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    parts = [props.name]
    uuid = getattr(props, "uuid", None)  # printed bare (as nvidia-smi's, without its GPU- prefix)
    if uuid is not None:
        text = str(uuid)
        parts.append(text if text.startswith("GPU-") else f"GPU-{text}")
    parts.append(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}")
    return f"cuda:{index} ({', '.join(parts)})"


def tally(places: Iterable[str | None]) -> dict[str, int]:
    """How many tasks ran at each :func:`placement` (None: not recorded), in name order: on a machine
    of two GPUs with two workers, two GPUs are named here."""
    seen = [p for p in places if p]
    return {p: seen.count(p) for p in sorted(set(seen))}


def spread(places: dict[str, int]) -> str | None:
    """A :func:`tally` as one line for the console (None when every task ran on the CPU)."""
    if set(places) <= {"cpu"}:
        return None
    return "ran on " + "; ".join(f"{p}: {n}" for p, n in places.items())
