"""Parallel execution of trials, seeds and feature builds: Ray when installed, processes otherwise."""

from foxhunt.parallel.executor import Backend, Executor, open_executor
from foxhunt.parallel.resources import Resources, detect_gpus, gpu_share

__all__ = ["Backend", "Executor", "Resources", "detect_gpus", "gpu_share", "open_executor"]
