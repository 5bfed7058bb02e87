"""The ``[serve]`` config section: fail-safe thresholds and what a fault does to the position."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from foxhunt.config.base import Device, Frozen


class FaultAction(StrEnum):
    FLATTEN = "flatten"  # close the position at the next decision and stay flat while faulted
    HOLD = "hold"  # keep the position, decide nothing (Hold) while faulted


class DecidePath(StrEnum):
    """How a row close runs the greedy forward and the env step of the served episode
    (foxhunt.serve.decide)."""

    # aot where a decision's time is what counts (a live feed: ~0.2 ms a decision against ~20 ms
    # eager, for a build of 40-560 s once per checkpoint), eager for a replay (the same decisions; its
    # ~20 ms a decision repays such a build only past thousands of decisions: days of 30 s bars);
    # compiled on a GPU, where aot is refused (docs/serve.md, "Which decision path").
    AUTO = "auto"
    COMPILED = "compiled"  # Inductor (C++ on a CPU), compiled at the first two decided rows: ~5x faster
    AOT = "aot"  # ahead of time (torch.export + AOTInductor), cached on disk: no Dynamo frame or guards
    EAGER = "eager"  # the eager torch ops: no compile wait at start (tests, one-off replays)

    def resolve(self, live: bool, device_type: str) -> DecidePath:
        """The path ``auto`` stands for on a live feed (``live``) or a replay, on ``device_type``; any
        other path as it is."""
        if self is not DecidePath.AUTO:
            return self
        if not live:
            return DecidePath.EAGER
        return DecidePath.AOT if device_type == "cpu" else DecidePath.COMPILED


class CloseMode(StrEnum):
    """When the rows of bars that arrive together are made (foxhunt.serve.intake.Intake.on_block)."""

    # Bars whose records arrive in one block (a replay at full speed, a live feed that fell behind)
    # close together at the block's last bar: one pass of the row pipeline over all of them, then each
    # row stepped and decided in order, committed with the resume point of the record that closed it.
    CATCH_UP = "catch_up"
    EACH_BAR = "each_bar"  # every bar closes at the record that opens the next, its row made alone


class AheadMode(StrEnum):
    """Whether a row's close is made before its closing record (foxhunt.serve.ahead, docs/serve.md)."""

    # While the feed is idle (no record due), the close the next record would make if it opened a later
    # bar is made on a fork of the state: kept if it does (its decision is then out as the record
    # arrives), dropped if the record belongs to the bar still open.
    IDLE = "idle"
    OFF = "off"  # every close made at its closing record


class Wait(StrEnum):
    """How the service waits for its next record (foxhunt.serve.waits)."""

    # The source blocks (a timed sleep, a queue's wait): the core is free meanwhile, but for the due
    # record's path rehearsed every millisecond while a close made ahead waits (a few percent of the core).
    SLEEP = "sleep"
    # A busy loop on the source's ready() (a syscall a turn, which lets the live client's thread
    # queue its records): the record is taken the moment it is due, on a core that never went to
    # sleep (warm caches and clock), as trading systems wait; it burns that core, so pin the process.
    SPIN = "spin"


class ServeConfig(Frozen):
    warmup_rows: int = Field(
        0,
        ge=0,
        description="Rows the service only observes before its first decision (its features fill their "
        "windows); the first episode starts at this row, as a backtest's first window starts at its fold's "
        "validation start.",
    )
    on_fault: FaultAction = Field(
        FaultAction.FLATTEN,
        description="What a bad stream (gap, out-of-order record, crossed book, roll, stall, disconnect, "
        "corrupt record) does: flatten (market order to flat at the next decision, then flat while faulted) "
        "or hold (keep the position, Hold while faulted).",
    )
    recover_rows: int = Field(
        1, ge=1, description="Clean rows after a fault before the policy decides again."
    )
    max_gap_seconds: float = Field(
        900.0,
        ge=0,
        description="Exchange time between two records above which the stream has a gap (0 = off). The "
        "default lets through quiet minutes but not the daily halt.",
    )
    stall_seconds: float = Field(
        30.0, gt=0, description="Wall-clock seconds without a record after which a live feed is stalled."
    )
    reconnects: int = Field(
        5, ge=0, description="Reconnection attempts of a live source after a disconnect (0: stop there)."
    )
    reconnect_seconds: float = Field(2.0, ge=0, description="Wait between reconnection attempts.")
    decide: DecidePath = Field(
        DecidePath.AUTO,
        description="auto: aot on a live feed (compiled on a GPU), eager on a replay, where no compile "
        "pays; aot: the env step and forward compiled ahead of time into libraries cached on disk (built "
        "once per checkpoint, 40-120 s on an idle 2-core CPU, 558 s measured on a loaded one; later "
        "starts load them in about a second), ~0.2 ms a decision; compiled: torch.compile at start "
        "(10-80 s every start); eager: no compile, ~20 ms a decision. The same actions, positions and "
        "fills, the backtest's, on every path.",
    )
    device: Device = Field(
        Device.CPU,
        description="Where the market tensors, the env step and the forward run (the rows are made on the "
        "CPU either way): cpu (a decision at batch 1 is launch-bound on a GPU), cuda, or auto.",
    )
    ahead: AheadMode = Field(
        AheadMode.IDLE,
        description="idle: while no record is due, make the close the next record would make if it opened "
        "a later bar (on a fork of the state; kept if it does, dropped if not), so a decision is out as "
        "its bar's closing record arrives; off: every close at its closing record. The same rows and "
        "decisions either way.",
    )
    wait: Wait = Field(
        Wait.SLEEP,
        description="sleep: wait for the next record blocked (the core is free); spin: a busy loop on the "
        "source (the record is taken as it is due, on a core kept warm: a lower decision latency for a "
        "core spent on it; pin the process, e.g. taskset -c 3).",
    )
    closes: CloseMode = Field(
        CloseMode.CATCH_UP,
        description="catch_up: bars that arrive in one block of records close together (one pass of the "
        "row pipeline; the same rows, decisions and resume points as each_bar); each_bar: a row pipeline "
        "pass at every bar.",
    )
