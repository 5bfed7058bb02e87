"""The ledger-facing part of the service: what goes out of it (docs/serve.md, "What happens at a row
close", step 3, and the files under ``--out``).

A row's decision goes out through :meth:`Publisher.publish`: its latency, its commit in the ledger
(:mod:`foxhunt.serve.ledger`: the decision line, fills, PnL, the row's raw features and the resume
state), the Prometheus metrics (:mod:`foxhunt.serve.metrics`) and, with ``log_rows``, a printed line;
a fault through :meth:`Publisher.fault` (the log, the ledger, the metrics). When the service ends,
``decisions.csv`` (the backtest's format, written from the ledger) and ``summary.json``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from foxhunt.backtest.decisions import HEADER, write_decisions_csv
from foxhunt.domain.actions import BranchConfig
from foxhunt.serve.ledger import Ledger
from foxhunt.serve.metrics import ServeMetrics
from foxhunt.serve.monitor import FaultEvent


@dataclasses.dataclass(frozen=True)
class Made:
    """A row stepped and decided, to publish: whether it was decided, its ledger commit's fields."""

    decided: bool
    commit: dict[str, Any]


class Publisher:
    """Decisions and faults out to the ledger, the metrics and the log; the output files."""

    def __init__(
        self, ledger: Ledger, metrics: ServeMetrics, log: Callable[[str], None], log_rows: bool
    ) -> None:
        self.ledger, self.metrics, self.log, self.log_rows = ledger, metrics, log, log_rows
        self.last_latency_us = 0.0

    def publish(self, made: Made, latency_us: float) -> None:
        """A row's decision out: its latency, its ledger commit, the metrics and the log."""
        self.last_latency_us = latency_us
        self.ledger.commit_row(**made.commit, latency_us=latency_us)
        line = made.commit["line"]
        if line is not None:
            self.metrics.decisions.inc()
        if made.decided:
            self.metrics.latency.observe(latency_us * 1e-6)
        if self.log_rows and line is not None:
            self.log(", ".join(f"{k} {v}" for k, v in zip(HEADER, line.as_csv(), strict=True)))

    def fault(self, event: FaultEvent) -> None:
        """A fault in the log, the ledger and the metrics."""
        self.log(f"fault: {event.kind.value}: {event.detail}")
        self.ledger.fault(event)
        self.metrics.faults.labels(kind=event.kind.value).inc()

    def write_outputs(self, out: Path, branches: BranchConfig) -> None:
        """``decisions.csv`` and ``summary.json`` under ``out``, from the ledger."""
        write_decisions_csv(out / "decisions.csv", self.ledger.decisions(), branches)
        (out / "summary.json").write_text(json.dumps(self.ledger.summary(), indent=2))
