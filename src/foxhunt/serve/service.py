"""The service loop: records in, decisions out, one environment step per closed row.

At the close of row ``r`` (:mod:`foxhunt.serve.state`: the market now holds rows ``0 .. r``):

1. **Step** the decision taken on row ``r - 1`` through the environment (foxhunt.env.core, the
   backtest's step, costs and fill model): its market order fills at row ``r - 1``'s touch, a
   resting order and the plan's exits are checked against row ``r``. That is the paper execution.
2. **Decide** on row ``r``: the greedy policy of the checkpoint on the environment's state
   (normalised features, portfolio and plan slots, the aux predictions of the last decision).
3. **Commit** both in one ledger transaction (:mod:`foxhunt.serve.ledger`).

Episodes follow the backtest's windows (foxhunt.backtest.evaluate.windows): the first starts at
row ``serve.warmup_rows``, each runs ``env.episode_rows`` rows, closes its position on its last
row and the next starts flat on that row. So a replay decides row for row as ``foxhunt backtest
--checkpoint`` does on the same file when the warm-up is the fold's validation start.

A close made ahead (``serve.ahead = idle``): while the source has no record due (``ready()``), the
service runs the close that a next record of a later bar would run, on a shallow copy of itself whose
row state and env are forks (:mod:`foxhunt.serve.fork`) and whose commits are held back. The next
record keeps it if it opens a later bar and nothing the close reads has changed (``_key``: no record
taken in or dropped, no fault, no flatten); its decision is then out at once and committed as the close
made at the record would be. Otherwise it is dropped and the original state, which it never touched,
makes the close when due. So the rows, decisions, commits and faults are those of closes made at their
records (tests/serve/test_serve.py), and a quiet feed's decision latency is the keeping, not the close.

While the stream is faulted (:mod:`foxhunt.serve.monitor`) the decision is the fail-safe one
(``serve.on_fault``): flatten (a market order to flat that overrides the plan lock: the lock binds
the policy, not the risk control) or hold.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import dataclasses
import gc
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foxhunt.agent.actor import PolicyOut
from foxhunt.backtest.decisions import HEADER, DecisionRow, step_rows
from foxhunt.domain.actions import Direction, OrderType, Urgency
from foxhunt.domain.instrument import Instrument, resolve_instrument
from foxhunt.env.core import TradingEnv
from foxhunt.env.state import Portfolio
from foxhunt.errors import FoxhuntError, door, setting
from foxhunt.serve.bars import NoBarsYet
from foxhunt.serve.config import Ahead, CloseMode, DecidePath, FaultAction, ServeConfig, Wait
from foxhunt.serve.decide import Decider
from foxhunt.serve.fork import fork
from foxhunt.serve.ledger import Ledger
from foxhunt.serve.metrics import ServeMetrics
from foxhunt.serve.monitor import DROPPED, Fault, FaultEvent, Monitor
from foxhunt.serve.source import Disconnected, RecordSource, ReplaySource, SourceEnded, StreamBlock
from foxhunt.serve.state import Rows, RowState
from foxhunt.train.checkpoint import CheckpointError, read_checkpoint_meta
from foxhunt.train.policy import CommitteePolicy


def load_trained(checkpoint: Path, serve: ServeConfig | None, device: str = "cpu"):
    """The checkpoint's agent, its config (with ``serve`` in place of the stored one) and normaliser."""
    from foxhunt.api import TrainedAgent

    agent = TrainedAgent(checkpoint, device=device)
    if agent.scaler is None:
        raise CheckpointError(
            checkpoint,
            "holds no normaliser, and serve must scale the features as the fold did",
            "export it with the run's cache: "
            + door(
                f"foxhunt export {checkpoint} --out FILE --cache CACHE",
                f'api.export_weights("{checkpoint}", FILE, cache=CACHE)',
            ),
        )
    cfg = agent.cfg if serve is None else agent.cfg.model_copy(update={"serve": serve})
    return agent, cfg


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
    everything it writes goes under ``out``."""

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
        agent, self.cfg = load_trained(checkpoints[0], serve, device)
        self.scfg: ServeConfig = self.cfg.serve
        # Several exports are a committee of one fold (the backtest's CommitteePolicy: the same fold,
        # market and normaliser, checked there); the rows are scaled with the first's normaliser, which
        # is every member's.
        committee = CommitteePolicy(checkpoints, agent.cfg)
        # The backtest's greedy policy and env step at one episode; ``decide``: eager, Inductor-compiled
        # at the first two decided rows, or ahead of time (foxhunt.serve.decide, docs/serve.md).
        self.decider = Decider([m.agent(device) for m in committee.members], decide)
        self.source, self.log, self.log_rows = source, log, log_rows
        symbols = sorted({s for m in source.streams for s in m.symbols.values()})
        self.instrument = resolve_instrument(symbols, (), self.cfg.instrument, where="the stream")
        for path in checkpoints:
            check_instrument(path, read_checkpoint_meta(path).get("instrument"), self.instrument)
        self.device = torch.device(device)
        self.state = RowState(
            source.streams, self.cfg, agent.scaler, self.instrument, self.out, device=self.device
        )
        self.monitor = Monitor(self.scfg)
        self.ledger = Ledger(self.out / "ledger.sqlite")
        self.env: TradingEnv | None = None
        self.pending: Any = None  # the decision taken on the last closed row (a PolicyOut or actions)
        self.pending_forced = ""
        self.episode_end = -1
        self.rows_done = 0  # rows closed and handled
        self.buckets = 0  # time buckets the records have opened (each row is one; a halt's are not)
        self.consumed = 0  # records taken from the source, dropped ones included (the resume point)
        self.faulted_until = -1  # rows <= this decide the fail-safe way
        # Bars closed in catch-up (serve.closes) and not yet made into rows: (the start of the time
        # bucket whose first record closed them, the records consumed before that record, when it came).
        self._closed_by: list[tuple[int, int, float]] = []
        # Crossed-book faults of records a block's runs took in (``_holds``), not yet logged: (the
        # records consumed before the record, the fault), in order; each is logged where one record at
        # a time would have logged it: before the first row its record closes or comes before.
        self._held: list[tuple[int, FaultEvent]] = []
        self.stopped = False
        self.flatten_now = False  # POST /flatten (the HTTP endpoint)
        self.last_latency_us = 0.0
        self.last_record_wall = time.monotonic()
        self.metrics = ServeMetrics(self.feed_lag_s)  # GET /metrics (foxhunt.serve.http)
        self._skip_records = 0
        self._restored: dict[str, Any] | None = None
        self._last_forced = ""
        # serve.ahead: the close made ahead on a fork while the feed was idle (kept or dropped at the
        # next record), the closes made ahead and those kept; on a fork, the rows it made (_Made), whose
        # commits wait for the fork to be kept.
        self._ahead: _Ahead | None = None
        self._retired: list[Any] = []  # what closes replaced, freed once their decisions are out
        self.ahead_made = self.ahead_kept = 0
        self._deferred: list[_Made] | None = None
        resumed = self.ledger.resume()
        if resumed is not None:
            self._restore(*resumed)

    # --- resume -----------------------------------------------------------------------------

    def _snapshot(self) -> dict[str, Any]:
        env = self.env
        return {
            "portfolio": None if env is None else env.state,
            "aux": None if env is None else env.aux,
            "pending": self.pending,
            "pending_forced": self.pending_forced,
            "episode_end": self.episode_end,
            "rows_done": self.rows_done,
            "faulted_until": self.faulted_until,
        }

    def _restore(self, row: int, records: int, snap: dict[str, Any]) -> None:
        self._skip_records = records
        self._restored = {k: _on(v, self.device) for k, v in snap.items()}  # the ledger's are host tensors
        self.pending, self.pending_forced = self._restored["pending"], snap["pending_forced"]
        self.episode_end, self.rows_done = snap["episode_end"], snap["rows_done"]
        self.faulted_until = snap["faulted_until"]
        self.log(f"resuming after row {row} ({records:,} records consumed)")

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Serve until the replay ends or ``stop()``; the ledger's summary."""
        self._fast_forward()
        # Records in blocks where the source has them (foxhunt.serve.source.StreamBlock), else one by one.
        take = getattr(self.source, "next_block", None) or self.source.next
        ready = getattr(self.source, "ready", None)
        ahead = self.scfg.ahead is Ahead.IDLE and ready is not None
        spin = self.scfg.wait is Wait.SPIN and ready is not None
        rehearsal = getattr(self.source, "rehearsal", None) if ahead else None
        with _collected_when_idle(), _timer_slack(TIMER_SLACK_NS):
            self._loop(take, ready, ahead, spin, rehearsal)
        self.write_outputs()
        return self.ledger.summary()

    def _loop(self, take: Any, ready: Any, ahead: bool, spin: bool, rehearsal: Any) -> None:
        frozen_at = self.decider.compiled_at
        while not self.stopped:
            # The last block's decisions are out: what its closes replaced is freed now, not inside them.
            self._retired.clear()
            if self.decider.compiled_at != frozen_at:  # what the compile loaded: frozen too
                frozen_at = self.decider.compiled_at
                gc.collect()
                gc.freeze()
            idle = ready is not None and not ready()
            if idle and ahead:
                self._prepare()  # nothing due: the next close, ahead (serve.ahead)
            gen = _due_generation(busy=not idle)
            if gen is not None and (not idle or not ready()):
                gc.collect(gen)  # the cyclic garbage collector where it delays no decision
            timeout = min(self.scfg.stall_seconds, 1.0)
            wait = self._take_spinning if spin else self._take_rehearsing
            try:
                got = wait(take, ready, rehearsal, timeout)
            except SourceEnded:
                self._close_rows()  # the files' last row is complete when they end
                break
            except Disconnected as exc:
                self._fault(FaultEvent(Fault.DISCONNECT, str(exc) or "connection lost"))
                if not self._reconnect():
                    break
                continue
            if got is None:
                if time.monotonic() - self.last_record_wall > self.scfg.stall_seconds:
                    self._fault(FaultEvent(Fault.STALL, f"no record for {self.scfg.stall_seconds:g} s"))
                    self.last_record_wall = time.monotonic()
                continue
            self.last_record_wall = time.monotonic()
            if isinstance(got, StreamBlock):
                self.on_block(got)
                continue
            self.on_record(got.stream, got.payload)
            self.consumed += 1  # after: a row close inside on_record commits the records before this one

    def _fast_forward(self) -> None:
        """After a restart: hand the records consumed before the last commit to the state again
        without closing rows (theirs are in the ledger), through a fresh monitor, which drops the
        same records as the first time (its checks depend on the records alone) without logging."""
        for _ in range(self._skip_records):
            got = self.source.next(timeout=0.0)
            assert got is not None  # a replay at full speed always has its next record
            self.consumed += 1
            try:
                rec = self.state.decode(got.stream, got.payload)
            except ValueError:
                continue
            if any(f.kind in DROPPED for f in self.monitor.check(rec)):  # the same drops, not logged again
                continue
            bucket = self.state.bucket_of(int(rec["ts_event"][0]))
            if self.state.bucket is not None and bucket[0] != self.state.bucket[0] and self.state.cuttable:
                self.state.end_session(self.state.rows())  # rows already served: only the market is kept
            if bucket != self.state.bucket:
                self.buckets += 1
            self.state.bucket = bucket
            self.state.append(got.stream, got.payload)

    def _take_spinning(self, take: Any, ready: Any, rehearsal: Any, timeout: float) -> Any:
        """``take`` for a spinning wait (``serve.wait = spin``): ``ready()`` polled here until a record
        is due (or ``timeout``), the due record's path rehearsed every ``REHEARSE_S`` while a close made
        ahead waits (the first at once: making the close left the caches cold); the source is then
        called with its record due, or none, and never sleeps."""
        now = time.monotonic()
        deadline, rehearsed = now + timeout, now - REHEARSE_S
        while not ready() and now < deadline and not self.stopped:
            if rehearsal is not None and self._ahead is not None and now - rehearsed >= REHEARSE_S:
                self._rehearse(rehearsal())
                rehearsed = now
            # A syscall of ~1 us that lets another thread take the GIL (the live client's, to queue a
            # record; the HTTP server's). time.sleep(0) would sleep ~75 us (timer slack).
            os.sched_yield()
            now = time.monotonic()
        return take(timeout=0.0)

    def _take_rehearsing(self, take: Any, ready: Any, rehearsal: Any, timeout: float) -> Any:
        """``take(timeout)`` for a blocked wait (``serve.wait = sleep``): while a close made ahead
        waits, blocked in the source ``REHEARSE_S`` at a time with the due record's path rehearsed
        between (the first at once: making the close left the caches cold), so that a blocked wait
        keeps that path warm too; the core sleeps all but a few percent of the time. Otherwise one
        plain take."""
        if rehearsal is None or self._ahead is None:
            return take(timeout=timeout)
        now = time.monotonic()
        deadline = now + timeout
        while True:
            if not ready():
                self._rehearse(rehearsal())
                now = time.monotonic()
            got = take(timeout=min(REHEARSE_S, max(deadline - now, 0.0)))
            now = time.monotonic()
            if got is not None or now >= deadline or self.stopped or self._ahead is None:
                return got

    def _rehearse(self, block: StreamBlock | None) -> None:
        """What a due record's block goes through before a close made ahead is kept (``on_block``: the
        source's block, its decoding, the monitor's check, its time bar; ``_ahead_holds``), run again
        on the last record taken, with no effect (the monitor notes nothing): either wait runs it
        every ``REHEARSE_S`` while a close made ahead waits, so that the code and data of that path stay
        in the caches, as trading systems keep their order path warm. On this kind of machine an idle
        core's caches go cold within 10-100 ms even when it spins (measured: the source's block and
        the monitor's check take 8 us back to back, 16 us after 10 ms of spinning, 50 us after 100 ms),
        and a live feed's next record is usually ~1 s away."""
        if block is None:
            return
        try:
            recs = self.state.decode_block(block.stream, block.payload, block.size)
        except ValueError:
            return
        if self.monitor.clean(recs, note=False) and self.monitor.last_ts is not None:
            self.state.bucket_of(self.monitor.last_ts)
        self._ahead_holds()

    def _kept(self, rec: np.ndarray) -> bool:
        """Whether a record reaches the rows; its faults are logged."""
        faults = self.monitor.check(rec)
        for f in faults:
            self._fault(f)
        return not any(f.kind in DROPPED for f in faults)

    def _reconnect(self) -> bool:
        for attempt in range(1, self.scfg.reconnects + 1):
            time.sleep(self.scfg.reconnect_seconds)
            try:
                self.source.reconnect()
                self.log(f"reconnected (attempt {attempt})")
                return True
            except Exception as exc:  # noqa: BLE001 (any failure to connect is one more attempt)
                self.log(f"reconnect attempt {attempt} failed: {exc}")
        return False

    def on_record(self, stream: int, payload: bytes) -> None:
        """One record in: checked, a row closed if it opens a later bar, then logged."""
        try:
            rec = self.state.decode(stream, payload)
        except ValueError as exc:
            self._fault(FaultEvent(Fault.CORRUPT, str(exc)))
            return
        if not self._kept(rec):
            return
        self._enter(self.state.bucket_of(int(rec["ts_event"][0])))
        self.state.append(stream, payload)

    def on_block(self, block: StreamBlock) -> None:
        """Records of one stream, handled as ``on_record`` handles them one by one (the same faults,
        closes and ``consumed`` at each close): the runs of clean records of one time bar at once, a
        record with a fault (or a block that is not the stream's records) through ``on_record``."""
        base = self.consumed
        try:
            recs = self.state.decode_block(block.stream, block.payload, block.size)
        except ValueError:
            for k in range(block.count):
                self.consumed = base + k
                self.on_record(block.stream, block.payload[k * block.size : (k + 1) * block.size])
            self.consumed = base + block.count
            return
        i, n = 0, len(recs)
        while i < n and not self.stopped:
            self.consumed = base + i
            clean = i + self.monitor.clean(recs[i:])
            while clean < n and self._holds(recs, clean, base):  # a crossed book joins the run
                clean += 1 + self.monitor.clean(recs[clean + 1 :])
            # A stop waits for the bars closed in catch-up to be made (at the run that ends them).
            while i < clean and (not self.stopped or self._closed_by):
                self.consumed = base + i
                if clean - i == 1:  # one record (a paced feed's block): its time is the monitor's last
                    run, t = clean, self.monitor.last_ts
                else:
                    ts = recs["ts_event"][i:clean]
                    run, t = i + self.state.in_bucket(ts), int(ts[0])
                bucket = self.state.bucket_of(t)
                if run < clean and self._catches_up(bucket) and not self._ahead_holds():
                    self._close_later(bucket)  # a later run of clean records closes this bar with its own
                else:
                    self._enter(bucket)
                self.state.append_block(block.stream, recs[i:run])
                i = run
            if i < n and not self.stopped:
                self.consumed = base + i
                self._release()  # the faults before this record's, logged before it
                self.on_record(block.stream, recs[i : i + 1].tobytes())
                i += 1
        self._release(base + i - 1)
        self._held.clear()  # a stop's: of records not taken in (a restart reads them again)
        self.consumed = base + i

    def _holds(self, recs: np.ndarray, k: int, base: int) -> bool:
        """Whether record ``k`` of a block, whose only faults are crossed books (kept, as the batch
        keeps them), joins the block's run of clean records: its faults are held (``_held``) until
        the rows before it are made, so a crossed book neither ends a catch-up nor goes through
        ``on_record`` alone. Otherwise the monitor is left as it was, for ``on_record``."""
        rec = recs[k : k + 1]
        faults = self.monitor.check(rec, note=False)
        if not faults or any(f.kind is not Fault.CROSSED for f in faults):
            return False
        self.monitor.note(rec)
        self._held.extend((base + k, f) for f in faults)
        return True

    def _release(self, upto: int | None = None) -> None:
        """Log the held faults of the records before the ``upto``-th and that record's (all without
        ``upto``): one record at a time would have logged them before it closed a row."""
        held, k = self._held, 0
        while k < len(held) and (upto is None or held[k][0] <= upto):
            self._fault(held[k][1])
            k += 1
        del held[:k]

    def _catches_up(self, bucket: tuple[int, int]) -> bool:
        """Whether the bar before ``bucket`` (a later bucket of the same session, which closes it) can
        wait for a later run of the block to be made into rows with it (``serve.closes``): ``_enter``
        would close it now, and no session ends between them."""
        last = self.state.bucket
        return (
            self.scfg.closes is CloseMode.CATCH_UP
            and last is not None
            and bucket != last
            and bucket[0] == last[0]
            and self.buckets >= self.scfg.warmup_rows
        )

    def _close_later(self, bucket: tuple[int, int]) -> None:
        """``_enter(bucket)`` with its close left to the next one: the rows it would make get its resume
        point and its time (the latency of their decisions counts from here)."""
        self._closed_by.append((self.state.bucket_start(bucket), self.consumed, time.perf_counter()))
        self.buckets += 1
        self.state.bucket = bucket

    def _enter(self, bucket: tuple[int, int]) -> None:
        """A kept record of ``bucket`` arrives: a row closes first when it opens a later bar."""
        if self.state.bucket is not None and bucket != self.state.bucket:
            new_session = bucket[0] != self.state.bucket[0]
            # Rows <= buckets: while fewer buckets than serve.warmup_rows have passed no row is
            # decided, so the pipeline waits for the session's end (the next close commits every
            # row it has not yet committed).
            if new_session or self.buckets >= self.scfg.warmup_rows:
                rows = self._close_rows()
                if rows is not None and new_session:
                    self.state.end_session(rows)
        if bucket != self.state.bucket:
            self.buckets += 1
        self.state.bucket = bucket

    def _fault(self, event: FaultEvent) -> None:
        self.log(f"fault: {event.kind.value}: {event.detail}")
        self.ledger.fault(event)
        self.metrics.faults.labels(kind=event.kind.value).inc()
        if event.kind not in (Fault.CORRUPT, Fault.OUT_OF_ORDER):  # dropped: the book is as it was
            self.faulted_until = max(self.faulted_until, self.rows_done + self.scfg.recover_rows)

    # --- a row close --------------------------------------------------------------------------

    def _close_rows(self) -> Rows | None:
        t0 = time.perf_counter()
        if self._ahead_holds():  # made ahead of records that are still the state's (_prepare checked)
            return self._adopt(t0)
        if not self.state.has_records():
            return None
        self._drop_ahead()
        closed_by, self._closed_by = self._closed_by, []
        try:
            rows = self.state.rows()
        except CheckpointError:
            raise  # the checkpoint does not fit the features: nothing can be served
        except NoBarsYet:  # the session has no bar yet (a snapshot, a pre-open): no row, no fault
            if self._deferred is not None:
                raise
            self._release()
            return None
        except Exception as exc:  # noqa: BLE001 (a stream the batch path refuses must not stop the service)
            if self._deferred is not None:
                raise  # a close made ahead: the close made when due reports it
            self._release()
            self._fault(FaultEvent(Fault.ERROR, f"{type(exc).__name__}: {exc}"))
            return None
        # The close's rows in one transaction (made ahead: committed when kept, in the keeper's).
        with self.ledger.rows() if self._deferred is None else contextlib.nullcontext():
            for r in range(self.rows_done, rows.count):
                # A row of a bar closed in catch-up: the resume point and time of the record that closed
                # it (its bar ends at or before that record's bucket: rows are stamped with their bar's
                # close).
                ts = int(rows.ts[r])
                _, records, t_in = next((c for c in closed_by if ts <= c[0]), (0, self.consumed, t0))
                self._row(r, rows, t_in, records)
        return rows

    def _row(self, r: int, rows: Rows, t0: float, records: int) -> None:
        self._release(records)  # the crossed books that came before the record that closed this row
        line, pnl, fills = None, None, []
        decided = r >= self.scfg.warmup_rows
        if self.env is None and (decided or self.pending is not None):
            self.env = TradingEnv(rows.market, self.cfg.env)
            restored = self._restored
            if restored is not None and restored["portfolio"] is not None:
                self.env.state, self.env.aux = restored["portfolio"], restored["aux"]
        if self.env is not None and self.env.market is not rows.market:
            # The env's per-row tables (its market setter) once a close: a close's rows share a market.
            self.env.market = rows.market
        self._last_forced = ""
        if self.pending is not None:
            line, pnl, fills = self._step(rows)
        if decided:
            assert self.env is not None
            if self.episode_end < 0 or r >= self.episode_end:
                self._new_episode(r)
            self.pending, self.pending_forced = self._decide(r)
        self.rows_done = r + 1
        made = _Made(
            decided,
            {
                "line": line,
                "pnl": pnl,
                "fills": fills,
                "forced": self._last_forced,
                "row": r,
                "ts": int(rows.ts[r]),
                "features": rows.features[r],
                "records": records,
                "state": self._snapshot(),
            },
        )
        if self._deferred is not None:  # made ahead: published if the fork is kept
            self._deferred.append(made)
            return
        self._publish(made, (time.perf_counter() - t0) * 1e6)

    def _publish(self, made: _Made, latency_us: float) -> None:
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

    # --- a close made ahead (serve.ahead) ---------------------------------------------------------

    def _key(self) -> tuple:
        """What a close depends on besides the market: a close made ahead is kept only if none of it
        changed (a record taken in or dropped, a fault, an operator's flatten, a row closed)."""
        return (
            self.consumed,
            self.state.records,
            self.state.bucket,
            self.buckets,
            self.rows_done,
            self.faulted_until,
            self.flatten_now,
            id(self.pending),
        )

    def _prepare(self) -> None:
        """While no record is due: make the close that a next record of a later bar would make, on a
        fork of the state (the service's own close code on a shallow copy of the service whose row
        state and env are forks, :mod:`foxhunt.serve.fork`), its commits held back. It is kept by
        :meth:`_close_rows` if nothing changed before the close (``_key``), else dropped unseen."""
        key = self._key()
        if self._ahead is not None and self._ahead.key == key:
            return
        self._drop_ahead()
        if (
            self.state.bucket is None
            or self.buckets < self.scfg.warmup_rows  # the next close may not come at the next bar
            or self._held
            or self._closed_by
            or self.flatten_now
            or self.stopped
            or not self.state.has_records()
        ):
            return
        decider = self.decider
        cache = (decider._next, decider._owned)  # what the fork's step leaves in the shared decider
        twin = copy.copy(self)
        twin.state = fork(self.state, {id(self.state._tmp): self.state._tmp})
        if self.env is not None:
            twin.env = env = copy.copy(self.env)
            env.state = None if env.state is None else env.state.map(torch.clone)
        twin._deferred, twin._closed_by, twin._held = [], [], []
        try:
            rows = twin._close_rows()
        except Exception:  # noqa: BLE001 (the close made when due reports it)
            rows = None
        if rows is None or twin.faulted_until != self.faulted_until:
            decider._next, decider._owned = cache
            return
        self._ahead = _Ahead(key, twin, rows, cache)
        self.ahead_made += 1

    def _ahead_holds(self) -> bool:
        """Whether the close made ahead is this close: nothing it depends on has changed and no held
        fault comes before its rows."""
        a = self._ahead
        return a is not None and not self._held and not self._closed_by and a.key == self._key()

    def _drop_ahead(self) -> None:
        a, self._ahead = self._ahead, None
        if a is not None:
            self.decider._next, self.decider._owned = a.decider_cache
            self._retired.append(a)  # freed after the close in hand (_loop)

    def _adopt(self, t0: float) -> Rows:
        """Keep the close made ahead: its state becomes the service's, its rows are published (their
        latency counts from ``t0``, the closing record's close, to now)."""
        a, self._ahead = self._ahead, None
        assert a is not None
        twin = a.twin
        latency = (time.perf_counter() - t0) * 1e6
        assert twin._deferred is not None
        # The decisions out first (their rows were made, snapshots included, by the fork), then the
        # fork's state becomes the service's; what it replaces (the row state, the env) is freed after
        # the block (freeing a row state here took 0.2-0.7 ms of the decision's latency).
        with self.ledger.rows():
            for made in twin._deferred:
                self._publish(made, latency)
        self.ahead_kept += 1
        self._retired.extend(getattr(self, name) for name in _CLOSED)
        self._retired.append(a)
        for name in _CLOSED:
            setattr(self, name, getattr(twin, name))
        return a.rows

    def _new_episode(self, r: int) -> None:
        assert self.env is not None
        on = self.device
        self.env.reset(torch.tensor([r], device=on))
        # reset() clamps the end to the rows that exist; a stream's rows are still to come.
        self.episode_end = r + self.cfg.env.episode_rows - 1
        s = self.env._state()
        end, done = torch.tensor([self.episode_end], device=on), torch.tensor([False], device=on)
        self.env.state = dataclasses.replace(s, end=end, done=done)

    def _decide(self, r: int) -> tuple[Any, str]:
        assert self.env is not None
        if self.flatten_now or r <= self.faulted_until:
            # POST /flatten is the operator's order: it flattens whatever a fault would do (serve.on_fault).
            action = FaultAction.FLATTEN if self.flatten_now else self.scfg.on_fault
            self.flatten_now = False
            return self._failsafe(action), action.value
        return self.decider.decide(self.env), ""

    def _failsafe(self, action: FaultAction) -> torch.Tensor:
        b = self.cfg.env.branches
        flat = int(Direction.FLAT) if b.direction > int(Direction.FLAT) else int(Direction.HOLD)
        direction = flat if action is FaultAction.FLATTEN else int(Direction.HOLD)
        return torch.tensor([[direction, 0, int(OrderType.MARKET), int(Urgency.NORMAL)]], device=self.device)

    def _step(self, rows: Rows) -> tuple[DecisionRow, tuple[float, float, float, float], list]:
        env = self.env
        assert env is not None
        before = env._state()
        stepped = before.row.clone()
        self._last_forced = self.pending_forced
        if isinstance(self.pending, torch.Tensor):
            if self.pending_forced == FaultAction.FLATTEN.value:
                # The fail-safe overrides the plan lock (it binds the policy, not the risk control) and
                # cancels a resting order, which could otherwise fill after the position is closed.
                plan = dataclasses.replace(before.plan, active=torch.zeros_like(before.plan.active))
                order = dataclasses.replace(before.order, side=torch.zeros_like(before.order.side))
                env.state = dataclasses.replace(before, plan=plan, order=order)
        res = self.decider.step(env, self.pending)
        after = env._state()
        line = step_rows(stepped, res, after.account.position, lambda i: int(rows.ts[i]))[0]
        # The ledger's numbers read from the tensors in one host copy (float64: exact as float()): the
        # money of the one episode, then its fill stages' contracts, prices and costs.
        money = [res.gross, res.costs, res.net, after.account.equity]
        values = torch.cat([*money, res.fills[0], res.fill_price[0], res.fill_costs[0]]).double().tolist()
        gross, costs, net, equity = values[:4]
        n = res.fills.shape[1]
        stages = (values[4 : 4 + n], values[4 + n : 4 + 2 * n], values[4 + 2 * n :])
        fills = [(k, c, p, f) for k, (c, p, f) in enumerate(zip(*stages, strict=True)) if c != 0]
        self.pending = None
        pnl = (gross, costs, net, equity)
        return line, pnl, fills

    # --- outputs ------------------------------------------------------------------------------

    def feed_lag_s(self) -> float:
        """Wall-clock seconds since the last record arrived (a stalled or ended feed's grows)."""
        return time.monotonic() - self.last_record_wall

    def live_status(self) -> dict[str, Any]:
        """What the ledger does not hold: rows served, the last row close's latency, the feed's lag."""
        return {
            "rows": self.rows_done,
            "latency_us": self.last_latency_us,
            "feed_lag_s": self.feed_lag_s(),
            "faulted": self.rows_done <= self.faulted_until,
        }

    def write_outputs(self) -> None:
        from foxhunt.backtest.decisions import write_decisions_csv

        write_decisions_csv(self.out / "decisions.csv", self.ledger.decisions(), self.cfg.env.branches)
        (self.out / "summary.json").write_text(json.dumps(self.ledger.summary(), indent=2))

    def close(self) -> None:
        self.state.close()
        self.ledger.close()
        self.source.close()


# What a close changes of the service (kept from the fork that made it ahead).
# How often a wait rehearses a due record's path (Service._rehearse): ~30 us warm, so ~3% of the
# core, and a record that comes during one waits for its end (~3% of them, <= ~30 us).
REHEARSE_S = 1e-3
# Linux's prctl options for a thread's timer slack (<linux/prctl.h>), and the serving thread's.
PR_SET_TIMERSLACK, PR_GET_TIMERSLACK = 29, 30
TIMER_SLACK_NS = 1

_CLOSED = ("state", "env", "pending", "pending_forced", "episode_end", "rows_done", "_last_forced")


@dataclasses.dataclass(frozen=True)
class _Made:
    """A row stepped and decided, to publish: whether it was decided, its ledger commit's fields."""

    decided: bool
    commit: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class _Ahead:
    """A close made ahead: the service's key when made, the forked service that made it, its rows,
    the decider's caches before it (restored if it is dropped)."""

    key: tuple
    twin: Service
    rows: Rows
    decider_cache: tuple


# A source that is never idle (a replay at full speed) has its garbage collected after this many
# times the automatic collector's thresholds (its decisions wait for their block either way).
GC_BUSY = 100


def _due_generation(busy: bool) -> int | None:
    """The generation the automatic collector would collect now (the oldest whose count has reached its
    threshold; ``busy``: GC_BUSY times the thresholds), or None."""
    scale = GC_BUSY if busy else 1
    due = [
        g
        for g, (n, limit) in enumerate(zip(gc.get_count(), gc.get_threshold(), strict=True))
        if n >= limit * scale
    ]
    return due[-1] if due else None


@contextlib.contextmanager
def _timer_slack(ns: int) -> Iterator[None]:
    """The serving thread's timer slack set to ``ns`` (Linux's ``prctl(PR_SET_TIMERSLACK)``; a no-op
    elsewhere), the old one restored at the end. Linux lets a timed sleep of a normal thread end up to
    its slack late (50 us by default) so that wake-ups coalesce: a blocked wait for a record due in
    1 ms woke 68 us late at the median (387 us p99) on this kind of machine, with 1 ns 15 us (50 us),
    and that lateness is part of every decision's latency under ``serve.wait = sleep``."""
    prctl = _prctl()
    old = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0) if prctl is not None else -1
    if old > 0:
        prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0)
    try:
        yield
    finally:
        if old > 0:
            prctl(PR_SET_TIMERSLACK, old, 0, 0, 0)


def _prctl() -> Any:
    """libc's ``prctl`` where there is one (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


@contextlib.contextmanager
def _collected_when_idle() -> Iterator[None]:
    """The serve loop with the automatic collector off (``Service._loop`` collects where it delays no
    decision: while nothing is due, or after a block's decisions are out), and what was loaded before
    it (modules, the network, the libraries: ~400 k objects) frozen out of every collection. Left
    automatic, a collection runs whenever allocations pass a threshold, inside a close as likely as
    anywhere, and a full one of those objects took 160-200 ms (docs/serve.md). Both undone at the end
    (a test process runs many services)."""
    gc.collect()
    gc.freeze()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


def _on(x: Any, device: torch.device) -> Any:
    """A snapshot's value (a tensor, a portfolio, a policy's decision, a number) on ``device``."""
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, Portfolio):
        return x.map(lambda t: t.to(device))
    if isinstance(x, PolicyOut):
        return PolicyOut(*(getattr(x, f.name).to(device) for f in dataclasses.fields(x)))
    return x


__all__ = ["HEADER", "Service", "load_trained"]
