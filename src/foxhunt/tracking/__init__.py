"""Experiment tracking on MLflow: every ``run``, ``train``, ``seeds`` seed and ``tune`` trial as a run
(parameters = the resolved config, metrics per epoch and per fold, the report and the best
checkpoints as artefacts) in a SQLite store in the current directory by default; ``foxhunt runs
compare`` and ``foxhunt runs list`` read them back. docs/tracking.md tells the whole story.

This package imports mlflow only when a run starts (the command line starts without it).
"""

from foxhunt.tracking.run import TrackedRun, TrackingTarget, chain_hooks, nested_run, start_run, tracked_run
from foxhunt.tracking.store import OFF, RECORD_FILE, SWITCH_ENV, create_store, resolve_uri, wait_created

__all__ = [
    "OFF",
    "RECORD_FILE",
    "SWITCH_ENV",
    "TrackedRun",
    "TrackingTarget",
    "chain_hooks",
    "create_store",
    "nested_run",
    "resolve_uri",
    "start_run",
    "tracked_run",
    "wait_created",
]
