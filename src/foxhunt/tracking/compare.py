"""``foxhunt runs compare`` and ``foxhunt runs list``: tracked runs read back from MLflow.

A comparison puts runs side by side: their final results (``result/`` metrics: per fold and totals)
and only the config keys whose values differ between them (a key one run lacks counts as differing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from foxhunt.errors import FoxhuntError
from foxhunt.tracking.record import RESULT
from foxhunt.tracking.store import experiment_name, open_client, reading_uri, run_reference, sqlite_path


@dataclass(frozen=True)
class RunSummary:
    """What a comparison shows of one run."""

    run_id: str
    name: str
    command: str
    status: str
    results: dict[str, float]
    """``result/`` metrics without the prefix (``fold0/net_pnl``, ``total/net_pnl`` ...)."""
    params: dict[str, str]


def _natural(key: str) -> list[Any]:
    """``fold10`` after ``fold2``: digit runs compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", key)]


def _summary(run: Any) -> RunSummary:
    metrics = run.data.metrics
    return RunSummary(
        run_id=run.info.run_id,
        name=run.info.run_name or "",
        command=run.data.tags.get("foxhunt.command", ""),
        status=run.info.status,
        results={k.removeprefix(RESULT): v for k, v in metrics.items() if k.startswith(RESULT)},
        params=dict(run.data.params),
    )


def _client(uri: str) -> Any:
    """A client that reads ``uri``; a SQLite file that is not there is refused, not created."""
    db = sqlite_path(uri)
    if db is not None and not db.is_file():
        raise FoxhuntError(
            db, "no tracking store here", "run a tracked command first, or pass --tracking-uri"
        )
    try:
        return open_client(uri)
    except Exception as err:
        raise FoxhuntError(
            uri, f"the tracking store cannot be opened ({err})", "check --tracking-uri"
        ) from None


def load_runs(refs: list[str], tracking_uri: str | None = None) -> list[RunSummary]:
    """The runs ``refs`` name (run folders or run ids: :func:`~foxhunt.tracking.store.run_reference`)."""
    from mlflow.exceptions import MlflowException

    out = []
    for ref in refs:
        uri, run_id = run_reference(ref, tracking_uri)
        try:
            out.append(_summary(_client(uri).get_run(run_id)))
        except MlflowException as err:
            raise FoxhuntError(
                ref, f"no run {run_id} in {uri} ({err.message})", "check the run id with foxhunt runs list"
            ) from None
    return out


@dataclass(frozen=True)
class Comparison:
    runs: list[RunSummary]
    results: dict[str, list[float | None]]
    """Every result key any run has, per run (None where a run lacks it)."""
    differing: dict[str, list[str | None]]
    """Only the config keys whose values are not the same in every run."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": [
                {"run_id": r.run_id, "name": r.name, "command": r.command, "status": r.status}
                for r in self.runs
            ],
            "results": self.results,
            "differing_config": self.differing,
        }


def compare(runs: list[RunSummary]) -> Comparison:
    """Side by side: the results of every run, and the config keys that differ between them."""
    result_keys = sorted({k for r in runs for k in r.results}, key=_natural)
    param_keys = sorted({k for r in runs for k in r.params})
    differing = {}
    for key in param_keys:
        values = [r.params.get(key) for r in runs]
        if len(set(values)) > 1:
            differing[key] = values
    return Comparison(
        runs=runs,
        results={k: [r.results.get(k) for r in runs] for k in result_keys},
        differing=differing,
    )


def list_runs(tracking_uri: str | None, experiment: str | None, limit: int) -> tuple[str, list[RunSummary]]:
    """The newest ``limit`` runs of the experiment (``foxhunt`` by default), newest first, and the store."""
    uri = reading_uri(tracking_uri)
    client = _client(uri)
    name = experiment_name(experiment)
    try:
        found = client.get_experiment_by_name(name)
        if found is None:
            return uri, []
        newest = ["attributes.start_time DESC"]
        runs = client.search_runs([found.experiment_id], order_by=newest, max_results=limit)
    except Exception as err:
        raise FoxhuntError(
            uri, f"the tracking store cannot be read ({err})", "check --tracking-uri"
        ) from None
    return uri, [_summary(r) for r in runs]
