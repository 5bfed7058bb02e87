"""A served checkpoint: the service that one ``foxhunt serve`` runs (docs/serve.md).

:class:`Service` loads the checkpoint (or a committee of one fold's checkpoints), checks it against
the stream's instrument and ``serve.decide`` against the device, builds its parts and resumes from
the ledger's last commit. Each part is a module of its own concept:

- :mod:`foxhunt.serve.loop`: the loop (records in until the source ends or a stop; stalls,
  reconnects, when the garbage collector runs);
- :mod:`foxhunt.serve.waits`: the waits for the next record (``serve.wait``) and the rehearsal of a
  due record's path;
- :mod:`foxhunt.serve.intake`: records in (the monitor, the time bars, catch-up, held faults) and
  when a row closes;
- :mod:`foxhunt.serve.ahead`: closes made ahead while the feed is idle (``serve.ahead``);
- :mod:`foxhunt.serve.close`: the row close (step, decide, the fail-safe, the resume state);
- :mod:`foxhunt.serve.publish`: the ledger-facing part (commits, faults, metrics, output files).

What the HTTP endpoints (:mod:`foxhunt.serve.http`) read and order (rows served, the live status,
flatten, stop) is the service's own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from foxhunt.config.loader import load_config
from foxhunt.config.models import FoxhuntConfig
from foxhunt.domain.instrument import Instrument, resolve_instrument
from foxhunt.errors import FoxhuntError, door, setting
from foxhunt.policy.checkpoint import CheckpointError, read_checkpoint_meta
from foxhunt.policy.trained import CheckpointPolicy, CommitteePolicy
from foxhunt.serve.ahead import Ahead
from foxhunt.serve.close import RowCloser
from foxhunt.serve.config import DecidePath, ServeConfig
from foxhunt.serve.decide import Decider
from foxhunt.serve.intake import Intake
from foxhunt.serve.ledger import Ledger
from foxhunt.serve.loop import Loop
from foxhunt.serve.metrics import ServeMetrics
from foxhunt.serve.monitor import Monitor
from foxhunt.serve.publish import Publisher
from foxhunt.serve.source import RecordSource, ReplaySource
from foxhunt.serve.state import RowState
from foxhunt.validation.normalise import RobustScaler


def load_trained(checkpoint: Path, serve: ServeConfig | None) -> tuple[RobustScaler, FoxhuntConfig]:
    """The checkpoint's normaliser and its config (with ``serve`` in place of the stored one)."""
    cfg = CheckpointPolicy(checkpoint, load_config()).cfg
    meta = read_checkpoint_meta(checkpoint)
    if "normaliser" not in meta:
        raise CheckpointError(
            checkpoint,
            "holds no normaliser, and serve must scale the features as the fold did",
            "export it with the run's cache: "
            + door(
                f"foxhunt export {checkpoint} --out FILE --cache CACHE",
                f'api.export_weights("{checkpoint}", FILE, cache=CACHE)',
            ),
        )
    scaler = RobustScaler.from_dict(meta["normaliser"])
    return scaler, cfg if serve is None else cfg.model_copy(update={"serve": serve})


def check_decide_device(decide: DecidePath, device: torch.device) -> None:
    """Refuse ``serve.decide = aot`` off the CPU: its libraries are built for the CPU (an AOTInductor
    package of the forward built for CUDA crashed at load on an H100, torch 2.11)."""
    if decide is DecidePath.AOT and device.type != "cpu":
        raise FoxhuntError(
            "serve.decide",
            f"aot builds its libraries for the CPU, and serve.device is {device.type}",
            f"use {setting('serve.decide=compiled')} (or eager) on a GPU, or {setting('serve.device=cpu')}",
        )


def check_instrument(checkpoint: Path, trained: dict[str, Any] | None, stream: Instrument) -> None:
    """Refuse a checkpoint trained on another product than the stream's (one line, exit 2): its
    features count prices in its tick and its sizing and costs are in its point value. The contract
    month may differ (a policy outlives a roll). An export that records no instrument (written before
    exports did, or without ``--cache``) is not checked."""
    if not trained:
        return
    theirs = (trained["root"], float(trained["tick_size"]), float(trained["point_value"]))
    if theirs != (stream.root, stream.tick_size, stream.point_value):
        raise CheckpointError(
            checkpoint,
            f"was trained on {trained['symbol']} (tick {theirs[1]:g}, point value {theirs[2]:g}) and the "
            f"stream is {stream.symbol} (tick {stream.tick_size:g}, point value {stream.point_value:g})",
            f"serve it on a {trained['root'] or trained['symbol']} stream, or export a checkpoint trained "
            f"on {stream.root or stream.symbol}",
        )


class Service:
    """Serves one checkpoint, or a committee of one fold's checkpoints, on one record source;
    everything it writes goes under ``out``. Its parts: the loop (:mod:`.loop`) and its waits
    (:mod:`.waits`), the records in (:mod:`.intake`), closes made ahead (:mod:`.ahead`), the row
    close (:mod:`.close`) and what goes out to the ledger (:mod:`.publish`); what the HTTP endpoints
    (:mod:`.http`) read and order is here."""

    def __init__(
        self,
        checkpoint: Path | Sequence[Path],
        source: RecordSource,
        out: Path,
        serve: ServeConfig | None = None,
        device: str = "cpu",
        log: Callable[[str], None] = print,
        log_rows: bool = False,
        decide: DecidePath = DecidePath.EAGER,
    ) -> None:
        # auto: aot (compiled on a GPU) for a live feed, eager for a replay (DecidePath.AUTO).
        decide = decide.resolve(not isinstance(source, ReplaySource), torch.device(device).type)
        check_decide_device(decide, torch.device(device))
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        one = isinstance(checkpoint, str | Path)
        checkpoints = [Path(checkpoint)] if one else [Path(c) for c in checkpoint]
        if not checkpoints:
            raise FoxhuntError(
                door("--checkpoint", "checkpoint"), "no checkpoint to serve", "pass one export (or several)"
            )
        scaler, self.cfg = load_trained(checkpoints[0], serve)
        self.scfg: ServeConfig = self.cfg.serve
        # Several exports are a committee of one fold (the backtest's CommitteePolicy: the same fold,
        # market and normaliser, checked there); the rows are scaled with the first's normaliser, which
        # is every member's.
        committee = CommitteePolicy(checkpoints, self.cfg)
        # The backtest's greedy policy and env step at one episode; ``decide``: eager, Inductor-compiled
        # at the first two decided rows, or ahead of time (foxhunt.serve.decide, docs/serve.md).
        self.decider = Decider([m.agent(device) for m in committee.members], decide)
        self.source, self.log = source, log
        symbols = sorted({s for m in source.streams for s in m.symbols.values()})
        self.instrument = resolve_instrument(symbols, (), self.cfg.instrument, where="the stream")
        for path in checkpoints:
            check_instrument(path, read_checkpoint_meta(path).get("instrument"), self.instrument)
        self.device = torch.device(device)
        state = RowState(source.streams, self.cfg, scaler, self.instrument, self.out, device=self.device)
        self.ledger = Ledger(self.out / "ledger.sqlite")
        self.metrics = ServeMetrics(self.feed_lag_s)  # GET /metrics (foxhunt.serve.http)
        self.publisher = Publisher(self.ledger, self.metrics, log, log_rows)
        self.closer = RowCloser(state, self.decider, self.publisher, self.cfg, self.device)
        self.ahead = Ahead(self.closer, self.decider, self.scfg)
        self.intake = Intake(self.closer, Monitor(self.scfg), self.scfg, self.ahead)
        self.loop = Loop(source, self.intake, self.ahead, self.decider, self.scfg, log)
        resumed = self.ledger.resume()
        if resumed is not None:
            row, records, snap = resumed
            self.intake.skip = records
            self.closer.restore(snap)
            log(f"resuming after row {row} ({records:,} records consumed)")

    def run(self) -> dict[str, Any]:
        """Serve until the replay ends or ``stop()``; the ledger's summary."""
        self.loop.run()
        self.publisher.write_outputs(self.out, self.cfg.env.branches)
        return self.ledger.summary()

    # --- what the HTTP endpoints read and order (foxhunt.serve.http) ----------------------------

    @property
    def rows_done(self) -> int:
        """Rows closed and handled."""
        return self.closer.rows_done

    def flatten(self) -> None:
        """POST /flatten: the next decision flattens (whatever ``serve.on_fault`` says)."""
        self.closer.flatten_now = True

    def stop(self) -> None:
        """POST /stop: the loop ends after the current record."""
        self.intake.stopped = True

    def feed_lag_s(self) -> float:
        """Wall-clock seconds since the last record arrived (a stalled or ended feed's grows)."""
        return time.monotonic() - self.loop.last_record_wall

    def live_status(self) -> dict[str, Any]:
        """What the ledger does not hold: rows served, the last row close's latency, the feed's lag."""
        closer = self.closer
        return {
            "rows": closer.rows_done,
            "latency_us": self.publisher.last_latency_us,
            "feed_lag_s": self.feed_lag_s(),
            "faulted": closer.rows_done <= closer.faulted_until,
        }

    def close(self) -> None:
        self.closer.state.close()
        self.ledger.close()
        self.source.close()


__all__ = ["Service", "load_trained"]
