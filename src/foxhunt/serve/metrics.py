"""The service's Prometheus metrics, updated where the service already measures (``GET /metrics``).

Each :class:`~foxhunt.serve.service.Service` owns one registry (not prometheus_client's global one),
so several services in one process (the tests) count apart. The hot loop pays one counter increment
per stepped decision, one histogram observation per decision and one per fault; the feed lag is read
when scraped, so a record costs nothing. Counters count this process's work: after a restart they
start at zero, as Prometheus expects (``rate()`` treats the drop as a reset), while the ledger keeps
every decision since the first start.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from foxhunt.serve.monitor import Fault

PREFIX = "foxhunt_serve"
# Record-in to decision-out, in seconds: from 50 us (the goal is p50 <= 200 us, p99 <= 1 ms)
# to 2.5 s (a row close of the batch pipeline on a long session).
LATENCY_BUCKETS_S = (
    5e-5,
    1e-4,
    2e-4,
    5e-4,
    1e-3,
    2e-3,
    5e-3,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.5,
)


class ServeMetrics:
    """Decisions, decision latency, faults by kind and the feed's lag of one service."""

    def __init__(self, feed_lag_s: Callable[[], float]) -> None:
        self.registry = CollectorRegistry()
        self.decisions = Counter(
            f"{PREFIX}_decisions",
            "Decisions stepped and committed to the ledger by this process (its decisions.csv lines).",
            registry=self.registry,
        )
        self.latency = Histogram(
            f"{PREFIX}_decision_latency_seconds",
            "Record-in to decision-out: from the record that closes a row to the decision on that row.",
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.faults = Counter(
            f"{PREFIX}_faults",
            "Faults of the stream or the row pipeline by kind (foxhunt.serve.monitor.Fault).",
            ["kind"],
            registry=self.registry,
        )
        for kind in Fault:  # every kind from the start: a scrape shows 0, not a missing series
            self.faults.labels(kind=kind.value)
        lag = Gauge(
            f"{PREFIX}_feed_lag_seconds",
            "Wall-clock seconds since the last record arrived from the source.",
            registry=self.registry,
        )
        lag.set_function(feed_lag_s)

    def exposition(self) -> bytes:
        """The registry in Prometheus's text format (what ``GET /metrics`` returns)."""
        return generate_latest(self.registry)
