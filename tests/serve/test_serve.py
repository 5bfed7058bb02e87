"""``foxhunt serve`` on a tiny synthetic market: a replay decides row for row as ``foxhunt backtest
--checkpoint`` does on the same files, a kill -9 and a restart lose and double no fill, and every
bad-stream case is logged, flattens the policy and leaves the service running."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import astuple
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from foxhunt import api
from foxhunt.backtest.decisions import DecisionRow, read_decisions_csv
from foxhunt.cli import app
from foxhunt.config.models import FoxhuntConfig
from foxhunt.data.dbn_read import read_raw
from foxhunt.domain.actions import Direction
from foxhunt.errors import FoxhuntError, FrontDoor
from foxhunt.features.cache_file import open_cache
from foxhunt.serve.config import CloseMode, DecidePath, ServeConfig
from foxhunt.serve.ledger import Ledger
from foxhunt.serve.monitor import Fault
from foxhunt.serve.service import Service
from foxhunt.serve.source import (
    Disconnected,
    LiveSource,
    ReplaySource,
    SourceEnded,
    StreamBlock,
    StreamMeta,
    StreamRecord,
)
from foxhunt.serve.state import RecordRows

# Three 23-hour sessions of 4,000 book events in 15-minute bars: 92 rows a session, two folds.
MARKET = (
    "synth.sessions=3",
    "synth.events_per_session=4000",
    "folds.n_folds=2",
    "env.episode_rows=16",
    "data.bar_seconds=900",
)
# One epoch of a few updates of the smoke network; seed 1 is one whose briefly trained policy trades,
# which the tests need (whether a seed's does depends on every random stream of the run, so another
# seed may train a policy that never trades and leaves nothing to compare). Under train_tail, where
# seed 1 was found: the collection rows its episodes are drawn from are part of that run. And with
# Thompson sampling on half the direction choices (the default then): its draws are random streams too.
ONE_EPOCH = (
    "agent.learn.updates_per_epoch=4",
    "agent.network.symmetry=none",
    "train.envs=8",
    "train.steps_per_epoch=8",
    "train.selection=train_tail",
    "agent.explore.thompson=0.5",
    "run.seed=1",
)
FOLD = 1
FOXHUNT = str(Path(sys.executable).with_name("foxhunt"))

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def cfg() -> FoxhuntConfig:
    return api.config("smoke", overrides=[*MARKET, *ONE_EPOCH])


@pytest.fixture(scope="module")
def market(cfg: FoxhuntConfig, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return api.synthetic_market(tmp_path_factory.mktemp("market"), cfg)


@pytest.fixture(scope="module")
def export(cfg: FoxhuntConfig, market: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Fold 1's checkpoint after one epoch, exported with its fold's normaliser (what serve loads)."""
    return exported(cfg, market, tmp_path_factory.mktemp("train"))


def exported(cfg: FoxhuntConfig, market: list[Path], root: Path) -> Path:
    """The ``export`` fixture's file under ``cfg`` (another learner's too), made in ``root``."""
    from foxhunt.policy.store import CheckpointStore
    from foxhunt.train.run import FoldTrainer

    cache = api.build_features(market, cfg, root / "cache").cache
    store = CheckpointStore(root / "run", ring=1)
    fold = api.make_folds(cache, cfg)[FOLD]
    trainer = FoldTrainer(cache, fold, cfg, torch.device("cpu"), store, lambda m: None)
    trainer.run_epoch()
    saved = store.save_last(FOLD, 0, trainer.contents({}))
    api.export_weights(saved, root / "bare")  # no normaliser: what `foxhunt export` without --cache writes
    return api.export_weights(saved, root / "export", cache=cache)


@pytest.fixture(scope="module")
def replay(market: list[Path]) -> list[Path]:
    """The last two sessions (MBP-10 and trades files): 184 rows, enough for the checkpoint's folds."""
    days = sorted({p.name.split("-")[2].split(".")[0] for p in market})[-2:]
    return [p for p in market if any(d in p.name for d in days)]


@pytest.fixture(scope="module")
def backtested(export: Path, replay: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return backtest_of(export, replay, tmp_path_factory.mktemp("backtest"))


def backtest_of(export: Path, replay: list[Path], out: Path) -> Path:
    """``foxhunt backtest --checkpoint export`` over the replay's files into ``out`` (decisions.csv)."""
    args = ["backtest", "--data", *map(str, replay), "--checkpoint", str(export), "--out", str(out), "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def served(
    export: Path, replay: list[Path], backtested: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """``foxhunt serve`` on the same files, warmed up to the fold's validation start."""
    out = tmp_path_factory.mktemp("served")
    start = read_decisions_csv(backtested / "decisions.csv")[0].row
    args = ["serve", "--checkpoint", str(export), "--replay", *map(str, replay), "--out", str(out), "-q"]
    result = runner.invoke(app, [*args, "--set", f"serve.warmup_rows={start}", "--set", "serve.decide=eager"])
    assert result.exit_code == 0, result.output
    return out


def _same(a: DecisionRow, b: DecisionRow) -> bool:
    """Equal field for field, bit for bit (NaN fill price: nothing filled, equal to NaN)."""
    pairs = zip(astuple(a), astuple(b), strict=True)
    return all(x == y or (isinstance(x, float) and np.isnan(x) and np.isnan(y)) for x, y in pairs)


def test_replay_decides_row_for_row_as_the_backtest(backtested: Path, served: Path) -> None:
    """The invariant: every row the backtest decided, serve decided alike: actions, the position
    after the step and its fills (contracts and price) bit for bit, trades included."""
    bt = read_decisions_csv(backtested / "decisions.csv")
    sv = {d.row: d for d in read_decisions_csv(served / "decisions.csv")}
    assert len(bt) > 40
    assert any(d.fill_contracts != 0 for d in bt), "the checkpoint trades (else the comparison is weak)"
    assert [d.row for d in bt if not _same(d, sv.get(d.row, DecisionRow(0, -1, 0, 0, 0, 0, 0, 0, 0)))] == []
    body = json.loads((backtested / "metrics.json").read_text())
    summary = json.loads((served / "summary.json").read_text())
    assert summary["net_pnl"] == pytest.approx(body["net_pnl"], rel=1e-9, abs=1e-9)


def test_served_feature_rows_are_the_cache_rows_bit_for_bit(backtested: Path, served: Path) -> None:
    cache = open_cache(next((backtested / "cache").glob("*.arrow")))
    ledger = Ledger(served / "ledger.sqlite")
    rows = ledger.features()
    ts = dict(ledger.db.execute("SELECT row, ts FROM rows").fetchall())
    ledger.close()
    x = cache.features()
    assert sorted(rows) == list(range(len(x)))  # every row of both sessions, none missing or extra
    assert [r for r in rows if ts[r] != int(cache.column("ts")[r])] == []
    assert [r for r in rows if not np.array_equal(rows[r], x[r], equal_nan=True)] == []


@pytest.fixture(scope="module")
def member(cfg: FoxhuntConfig, market: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second agent of fold 1 (another seed, the same market and features), exported likewise: with
    ``export`` a committee of two."""
    from foxhunt.policy.store import CheckpointStore
    from foxhunt.train.run import FoldTrainer

    other = cfg.model_copy(update={"run": cfg.run.model_copy(update={"seed": 2})})
    root = tmp_path_factory.mktemp("member")
    cache = api.build_features(market, other, root / "cache").cache
    store = CheckpointStore(root / "run", ring=1)
    trainer = FoldTrainer(cache, api.make_folds(cache, other)[FOLD], other, torch.device("cpu"), store, print)
    trainer.run_epoch()
    return api.export_weights(store.save_last(FOLD, 0, trainer.contents({})), root / "export", cache=cache)


@pytest.mark.parametrize(
    "decide",
    ["eager", pytest.param("compiled", marks=pytest.mark.slow)],  # compiled: Inductor, about a minute
)
def test_a_committee_replay_decides_row_for_row_as_its_backtest(
    export: Path, member: Path, replay: list[Path], backtested: Path, tmp_path: Path, decide: str
) -> None:
    """Two exports of one fold served as a committee (--checkpoint twice) decide, fill and end as
    ``foxhunt backtest`` with the same two --checkpoint: the argmax of their mean E[Q], bit for bit,
    eager or compiled (the forward's float32 sums may move in the last bits there, never the actions);
    and not as the first member alone."""
    pair = ["--checkpoint", str(export), "--checkpoint", str(member)]
    bt, sv = tmp_path / "bt", tmp_path / "sv"
    got = runner.invoke(app, ["backtest", "--data", *map(str, replay), *pair, "--out", str(bt), "-q"])
    assert got.exit_code == 0, got.output
    decided = read_decisions_csv(bt / "decisions.csv")
    args = ["serve", *pair, "--replay", *map(str, replay), "--out", str(sv), "-q"]
    args += ["--set", f"serve.warmup_rows={decided[0].row}", "--set", f"serve.decide={decide}"]
    got = runner.invoke(app, args)
    assert got.exit_code == 0, got.output
    served = {d.row: d for d in read_decisions_csv(sv / "decisions.csv")}
    missing = DecisionRow(0, -1, 0, 0, 0, 0, 0, 0, 0)
    assert len(decided) > 40 and any(d.fill_contracts != 0 for d in decided)
    assert [d.row for d in decided if not _same(d, served.get(d.row, missing))] == []
    alone = read_decisions_csv(backtested / "decisions.csv")
    assert [d.row for d in decided] == [d.row for d in alone]
    assert any(not _same(a, b) for a, b in zip(decided, alone, strict=True)), "the committee is member 0"
    summary = json.loads((sv / "summary.json").read_text())
    net = json.loads((bt / "metrics.json").read_text())["net_pnl"]
    assert summary["net_pnl"] == pytest.approx(net, rel=1e-9, abs=1e-9)


@pytest.mark.slow  # a backtest and a replay of 184 rows
def test_book_streams_alone_decide_and_compute_as_the_backtest(
    export: Path, replay: list[Path], tmp_path: Path
) -> None:
    """The MBP-10 files without their trades files: serve decodes the book streams as they arrive
    (foxhunt.serve.state.BookStream, no DBN round trip, the logs cut between the two sessions) and
    decides, fills and computes every feature row as the backtest on the same files, bit for bit."""
    from foxhunt.domain.instrument import resolve_instrument
    from foxhunt.serve.service import load_trained
    from foxhunt.serve.state import RowState

    books = [p for p in replay if ".mbp-10." in p.name]
    assert len(books) == 2
    scaler, cfg = load_trained(export, None)
    streams = ReplaySource(books).streams
    state = RowState(streams, cfg, scaler, resolve_instrument(["ESZ6"]), tmp_path)
    assert state.books is not None and state.cuttable  # the book-stream path, not load_market's
    state.close()
    bt, sv = tmp_path / "bt", tmp_path / "sv"
    args = ["backtest", "--data", *map(str, books), "--checkpoint", str(export), "--out", str(bt), "-q"]
    got = runner.invoke(app, args)
    assert got.exit_code == 0, got.output
    decided = read_decisions_csv(bt / "decisions.csv")
    args = ["serve", "--checkpoint", str(export), "--replay", *map(str, books), "--out", str(sv), "-q"]
    args += ["--set", "serve.decide=eager"]  # the compiled path: tests/serve/test_decide.py
    got = runner.invoke(app, [*args, "--set", f"serve.warmup_rows={decided[0].row}"])
    assert got.exit_code == 0, got.output
    served = {d.row: d for d in read_decisions_csv(sv / "decisions.csv")}
    assert len(decided) > 40
    missing = DecisionRow(0, -1, 0, 0, 0, 0, 0, 0, 0)
    assert [d.row for d in decided if not _same(d, served.get(d.row, missing))] == []
    ledger = Ledger(sv / "ledger.sqlite")
    rows = ledger.features()
    ledger.close()
    x = open_cache(next((bt / "cache").glob("*.arrow"))).features()
    assert sorted(rows) == list(range(len(x)))
    assert [r for r in rows if not np.array_equal(rows[r], x[r], equal_nan=True)] == []


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux: /proc/PID/stat, fields 14 and 15);
    0 once it has gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow  # two fresh processes over 184 rows: about a minute on a shared CPU
def test_kill_9_and_restart_lose_and_double_no_fill(
    export: Path, replay: list[Path], backtested: Path, served: Path, tmp_path: Path
) -> None:
    """A serve process killed (SIGKILL) mid-replay and started again on the same --out ends with the
    same decisions, fills and ledger as the run that was never interrupted."""
    start = read_decisions_csv(backtested / "decisions.csv")[0].row
    args = [FOXHUNT, "serve", "--checkpoint", str(export), "--replay", *map(str, replay)]
    args += ["--out", str(tmp_path)]
    args += ["--set", f"serve.warmup_rows={start}", "--set", "serve.decide=eager", "-q"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ledger = tmp_path / "ledger.sqlite"
    # Wait on the process's progress, not the wall clock: on a loaded box a wall deadline ran out
    # before serve committed anything. A serve that burns 120 s of its own CPU (or sits 15 minutes)
    # without 10 decisions is stuck.
    backstop = time.monotonic() + 900
    committed = 0
    while time.monotonic() < backstop and _cpu_seconds(proc.pid) < 120 and proc.poll() is None:
        time.sleep(0.2)
        if ledger.exists():
            try:
                with sqlite3.connect(ledger) as db:
                    committed = db.execute("SELECT COUNT(*) FROM decisions").fetchone()[0]
            except sqlite3.OperationalError:
                continue
            if committed >= 10:
                break
    assert proc.poll() is None, f"serve ended before the kill: {proc.stderr.read().decode()[-2000:]}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert committed >= 10
    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    want = read_decisions_csv(served / "decisions.csv")
    got = read_decisions_csv(tmp_path / "decisions.csv")
    assert len(got) == len(want) and all(_same(a, b) for a, b in zip(got, want, strict=True))

    def fills(path: Path) -> list[tuple]:
        with sqlite3.connect(path) as db:
            sql = "SELECT row, stage, contracts, price, costs FROM fills ORDER BY row, stage"
            return db.execute(sql).fetchall()

    assert fills(ledger) == fills(served / "ledger.sqlite") and len(fills(ledger)) > 0


# --- bad streams ------------------------------------------------------------------------------------


class Scripted:
    """A record source over a list of records, with a stall or a disconnect where asked."""

    def __init__(
        self, streams: list[StreamMeta], records: list[StreamRecord], events: dict[int, str]
    ) -> None:
        self.streams, self.records, self.events = streams, records, dict(events)
        self.i = 0
        self.reconnected = 0

    def next(self, timeout: float) -> StreamRecord | None:
        event = self.events.pop(self.i, None)
        if event == "stall":
            time.sleep(timeout)
            self.events[self.i] = "stall-once-more"  # two timeouts: longer than serve.stall_seconds
            return None
        if event == "stall-once-more":
            time.sleep(timeout)
            return None
        if event == "disconnect":
            raise Disconnected("connection reset by peer")
        if self.i >= len(self.records):
            raise SourceEnded
        self.i += 1
        return self.records[self.i - 1]

    def reconnect(self) -> None:
        self.reconnected += 1

    def close(self) -> None:
        return None


@pytest.fixture(scope="module")
def stream(replay: list[Path]) -> tuple[list[StreamMeta], list[StreamRecord]]:
    """The first 800 records of the last session's MBP-10 and trades files, merged (about 18 rows)."""
    src = ReplaySource(sorted(replay)[-2:])  # the last session's two files
    records = []
    for _ in range(800):
        got = src.next(0.0)
        assert got is not None
        records.append(got)
    return src.streams, records


def _serve(export: Path, out: Path, streams, records, events=None, **serve) -> tuple[Service, Scripted]:
    source = Scripted(streams, records, events or {})
    cfg = ServeConfig(**{"warmup_rows": 2, "stall_seconds": 0.05, "reconnect_seconds": 0.0, **serve})
    svc = Service(export, source, out, cfg, log=lambda m: None)
    svc.run()
    return svc, source


def _with(records: list[StreamRecord], i: int, **fields: int) -> list[StreamRecord]:
    """``records`` with record ``i``'s fields changed."""
    out = list(records)
    rec = np.frombuffer(out[i].payload, dtype=_dtype(records, i)).copy()
    for k, v in fields.items():
        rec[k] = v
    out[i] = StreamRecord(out[i].stream, rec.tobytes())
    return out


def _dtype(records: list[StreamRecord], i: int) -> np.dtype:
    from foxhunt.data.dbn_write import record_dtype
    from foxhunt.data.schemas import Schema

    size = len(records[i].payload)
    return next(record_dtype(s) for s in (Schema.MBP_10, Schema.TRADES) if record_dtype(s).itemsize == size)


@pytest.fixture(scope="module")
def clean(export: Path, stream, tmp_path_factory: pytest.TempPathFactory) -> list[DecisionRow]:
    svc, _ = _serve(export, tmp_path_factory.mktemp("clean"), *stream)
    rows = svc.ledger.decisions()
    assert svc.ledger.faults() == [] and len(rows) > 10
    svc.close()
    return rows


def _book_index(records: list[StreamRecord], after: int) -> int:
    return next(i for i in range(after, len(records)) if len(records[i].payload) > 100)  # an MBP-10 record


def _flattened_after(svc: Service, kind: Fault, clean: list[DecisionRow]) -> None:
    """The fault is in the ledger, the service served to the end of the stream, and the decision
    after the fault is the fail-safe flatten (a flat position after it)."""
    kinds = [k for k, _ in svc.ledger.faults()]
    assert kind.value in kinds
    rows = svc.ledger.decisions()
    sql = "SELECT row, direction, position_after FROM decisions WHERE forced = 'flatten'"
    forced = svc.ledger.db.execute(sql)
    got = forced.fetchall()
    assert got and all(d == int(Direction.FLAT) and p == 0 for _, d, p in got)
    assert rows[-1].row >= clean[-1].row > max(r for r, _, _ in got)  # it kept running to the end


def test_gap_flattens(export: Path, stream, clean: list[DecisionRow], tmp_path: Path) -> None:
    streams, records = stream
    i = _book_index(records, 400)
    late = [StreamRecord(r.stream, _shift(r.payload, records, 20 * 60)) for r in records[i:]]
    svc, _ = _serve(export, tmp_path, streams, records[:i] + late, max_gap_seconds=600)
    _flattened_after(svc, Fault.GAP, clean)


def _shift(payload: bytes, records: list[StreamRecord], seconds: int) -> bytes:
    rec = np.frombuffer(payload, dtype=_dtype([StreamRecord(0, payload)], 0)).copy()
    rec["ts_event"] += np.uint64(seconds * 1_000_000_000)
    return rec.tobytes()


def test_crossed_book_flattens(export: Path, stream, clean: list[DecisionRow], tmp_path: Path) -> None:
    streams, records = stream
    i = _book_index(records, 400)
    ask = int(np.frombuffer(records[i].payload, dtype=_dtype(records, i))["ask_px_00"][0])
    svc, _ = _serve(export, tmp_path, streams, _with(records, i, bid_px_00=ask + 250_000_000))
    _flattened_after(svc, Fault.CROSSED, clean)


def test_roll_to_another_instrument_is_dropped_and_flattens(
    export: Path, stream, clean: list[DecisionRow], tmp_path: Path
) -> None:
    streams, records = stream
    i = _book_index(records, 400)
    svc, _ = _serve(export, tmp_path, streams, _with(records, i, instrument_id=4242))
    _flattened_after(svc, Fault.ROLL, clean)


def test_stalled_feed_flattens(export: Path, stream, clean: list[DecisionRow], tmp_path: Path) -> None:
    streams, records = stream
    svc, _ = _serve(export, tmp_path, streams, records, {400: "stall"})
    _flattened_after(svc, Fault.STALL, clean)


def test_disconnect_reconnects_and_flattens(
    export: Path, stream, clean: list[DecisionRow], tmp_path: Path
) -> None:
    streams, records = stream
    svc, source = _serve(export, tmp_path, streams, records, {400: "disconnect"})
    assert source.reconnected == 1
    _flattened_after(svc, Fault.DISCONNECT, clean)


def test_corrupt_and_out_of_order_records_are_dropped_without_a_trace_in_the_rows(
    export: Path, stream, clean: list[DecisionRow], tmp_path: Path
) -> None:
    """A truncated record, one without a time and a stale repeat of an old record are logged and
    dropped: the rows and decisions are those of the clean stream."""
    streams, records = stream
    bad = list(records)
    bad.insert(600, StreamRecord(0, records[550].payload[:-7]))  # truncated
    bad.insert(400, _with(records, 350, ts_event=0)[350])  # no time
    bad.insert(300, records[100])  # out of order: a repeat of an older record
    svc, _ = _serve(export, tmp_path, streams, bad)
    kinds = sorted({k for k, _ in svc.ledger.faults()})
    assert kinds == sorted({Fault.CORRUPT.value, Fault.OUT_OF_ORDER.value})
    assert all(_same(a, b) for a, b in zip(svc.ledger.decisions(), clean, strict=True))


class Crash(Exception):
    """A process dying mid-stream (in-process stand-in for kill -9: nothing after it runs)."""


def test_a_restart_after_a_crash_continues_as_if_nothing_happened(
    export: Path, stream, clean: list[DecisionRow], tmp_path: Path
) -> None:
    """Dropped records before the crash are dropped again on the restart (its resume point counts
    every record taken from the source), so the restarted run decides as the uninterrupted one."""
    streams, records = stream
    bad = list(records)
    bad.insert(300, records[100])  # out of order: dropped
    bad.insert(200, StreamRecord(0, b"garbage"))  # corrupt: dropped
    source = Scripted(streams, bad, {})
    crash_at = 600

    def dying(timeout: float) -> StreamRecord | None:
        if source.i == crash_at:
            raise Crash
        return Scripted.next(source, timeout)

    source.next = dying  # type: ignore[method-assign]
    first = Service(export, source, tmp_path, ServeConfig(warmup_rows=2), log=lambda m: None)
    with pytest.raises(Crash):
        first.run()
    before = len(first.ledger.decisions())
    first.ledger.close()
    assert 0 < before < len(clean)
    svc, _ = _serve(export, tmp_path, streams, bad)
    got = svc.ledger.decisions()
    assert len(got) == len(clean) and all(_same(a, b) for a, b in zip(got, clean, strict=True))
    assert len(svc.ledger.faults()) == 2  # each drop logged once, not again on the restart


def test_hold_keeps_the_position_instead(export: Path, stream, tmp_path: Path) -> None:
    streams, records = stream
    svc, _ = _serve(export, tmp_path, streams, records, {400: "disconnect"}, on_fault="hold")
    forced = svc.ledger.db.execute("SELECT direction FROM decisions WHERE forced = 'hold'").fetchall()
    assert forced and {d for (d,) in forced} == {int(Direction.HOLD)}


# --- records in blocks (foxhunt.serve.source.StreamBlock) ----------------------------------------


class Blocks(Scripted):
    """``Scripted`` handing out blocks: the runs of consecutive records of one stream and size, up to
    ``limit`` (a scripted event ends a block, as a live feed's quiet moment would)."""

    def __init__(self, *args, limit: int = 64) -> None:  # noqa: ANN002
        super().__init__(*args)
        self.limit = limit

    def next_block(self, timeout: float) -> StreamBlock | None:
        first = self.next(timeout)
        if first is None:
            return None
        payloads = [first.payload]
        while len(payloads) < self.limit and self.i < len(self.records) and self.i not in self.events:
            r = self.records[self.i]
            if r.stream != first.stream or len(r.payload) != len(first.payload):
                break
            payloads.append(r.payload)
            self.i += 1
        return StreamBlock(first.stream, b"".join(payloads), len(first.payload))


def _traced(
    export: Path, out: Path, source: Scripted, closes: CloseMode = CloseMode.CATCH_UP
) -> tuple[Service, list[int]]:
    """A service run on ``source``, and the records consumed at each row commit (the resume points);
    ``svc.passes``: how many times the row pipeline ran (``RowState.rows``)."""
    cfg = ServeConfig(
        warmup_rows=2, stall_seconds=0.05, reconnect_seconds=0.0, max_gap_seconds=600, closes=closes
    )
    svc = Service(export, source, out, cfg, log=lambda m: None)
    commits: list[int] = []
    commit, rows = svc.ledger.commit_row, svc.closer.state.rows
    svc.passes = 0  # type: ignore[attr-defined]

    def traced(**kw: Any) -> None:
        commits.append(kw["records"])
        commit(**kw)

    def counted() -> RecordRows:
        svc.passes += 1  # type: ignore[attr-defined]
        return rows()

    svc.ledger.commit_row = traced  # type: ignore[method-assign]
    if not hasattr(source, "ready"):  # a fork of the state would call the original's rows (serve.ahead)
        svc.closer.state.rows = counted  # type: ignore[method-assign]
    svc.run()
    return svc, commits


_EVENTS = {200: "stall", 250: "disconnect"}


@pytest.fixture(scope="module")
def faulty(export: Path, stream, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """The stream with every fault case in it, and what the service makes of it one record at a time:
    (streams, records, service, the records consumed at each commit)."""
    streams, records = stream
    i = _book_index(records, 500)
    ask = int(np.frombuffer(records[i].payload, dtype=_dtype(records, i))["ask_px_00"][0])
    bad = _with(records, i, bid_px_00=ask + 250_000_000)  # crossed
    j = _book_index(bad, 450)
    bad = _with(bad, j, instrument_id=4242)  # roll
    late = [StreamRecord(r.stream, _shift(r.payload, bad, 20 * 60)) for r in bad[650:]]
    bad = bad[:650] + late  # gap
    bad.insert(600, StreamRecord(0, records[550].payload[:-7]))  # truncated
    bad.insert(400, _with(records, 350, ts_event=0)[350])  # no time
    bad.insert(300, records[100])  # out of order
    one, commits = _traced(export, tmp_path_factory.mktemp("one"), Scripted(streams, bad, _EVENTS))
    yield streams, bad, one, commits
    one.close()


@pytest.mark.parametrize(
    ("limit", "closes"),
    [(1, CloseMode.CATCH_UP), (7, CloseMode.CATCH_UP), (4096, CloseMode.CATCH_UP)]
    + [(4096, CloseMode.EACH_BAR)],
)
def test_blocks_decide_fault_and_commit_record_for_record_as_single_records(
    export: Path, faulty, tmp_path: Path, limit: int, closes: CloseMode
) -> None:
    """Every fault case at once, read in blocks: the same faults (kind and detail, in order), the same
    decisions bit for bit and the same resume point at every commit as read one record at a time, and
    the block reader did read blocks. A block that hid a bad record (a roll or a crossed book inside
    it) would change the faults and the decisions; a close at the block's end instead of at the
    record that opens the bar would change the resume points. In catch-up (``serve.closes``) the bars
    of a block of 4,096 records are made into rows together: fewer passes of the row pipeline than
    one record at a time makes (47 -> 32 here: the stream's faults and events cut its blocks short),
    with every row's resume point still the record that closed its bar."""
    streams, bad, one, one_commits = faulty
    blocks = Blocks(streams, bad, _EVENTS, limit=limit)
    calls = 0
    read = blocks.next_block

    def counted(timeout: float) -> StreamBlock | None:
        nonlocal calls
        calls += 1
        return read(timeout)

    blocks.next_block = counted  # type: ignore[method-assign]
    got, got_commits = _traced(export, tmp_path, blocks, closes)
    kinds = {k for k, _ in one.ledger.faults()}
    assert kinds == {f.value for f in Fault} - {Fault.ERROR.value}
    assert got.ledger.faults() == one.ledger.faults()
    a, b = got.ledger.decisions(), one.ledger.decisions()
    assert len(a) == len(b) > 10 and all(_same(x, y) for x, y in zip(a, b, strict=True))
    assert got_commits == one_commits and got.intake.consumed == one.intake.consumed == len(bad)
    assert calls < len(bad) / 2 if limit > 1 else calls > len(bad)
    if limit == 4096 and closes is CloseMode.CATCH_UP:
        assert got.passes < one.passes  # type: ignore[attr-defined]
    else:
        assert got.passes == one.passes  # type: ignore[attr-defined]
    got.close()


class Idle(Blocks):
    """``Blocks`` that is never ready (``ready()``): the service makes the next close ahead after every
    block, as a live feed's quiet moments let it (serve.ahead); ``limit`` 0 hands out single records."""

    def __init__(self, *args, limit: int = 64) -> None:  # noqa: ANN002
        super().__init__(*args, limit=max(limit, 1))
        if not limit:
            self.next_block = None  # type: ignore[assignment,method-assign]

    def ready(self) -> bool:
        return False


@pytest.mark.parametrize(
    ("limit", "closes"),
    [(0, CloseMode.EACH_BAR), (1, CloseMode.CATCH_UP), (7, CloseMode.CATCH_UP)],
)
def test_closes_made_ahead_fault_decide_and_commit_as_closes_made_when_due(
    export: Path, faulty, tmp_path: Path, limit: int, closes: CloseMode
) -> None:
    """Every fault case at once, with a close made ahead (on a fork of the state) after every record
    or block: the same faults, decisions bit for bit, feature rows and resume points as the service
    that makes each close at its record, and closes made ahead were both kept (the next record opened
    a later bar) and dropped (it did not, or it was a fault: a gap, a roll, a crossed book decide the
    fail-safe way, which a kept close made before them would not). A fork that shared something a close
    changes (a carried kernel state, a buffer's rows, the env's state) would change the rows of the
    dropped ones' originals, and so the features or decisions."""
    streams, bad, one, one_commits = faulty
    got, got_commits = _traced(export, tmp_path, Idle(streams, bad, _EVENTS, limit=limit), closes)
    assert got.ledger.faults() == one.ledger.faults()
    a, b = got.ledger.decisions(), one.ledger.decisions()
    assert len(a) == len(b) > 10 and all(_same(x, y) for x, y in zip(a, b, strict=True))
    assert got_commits == one_commits and got.intake.consumed == one.intake.consumed == len(bad)
    mine, theirs = got.ledger.features(), one.ledger.features()
    assert mine.keys() == theirs.keys()
    assert all(np.array_equal(mine[r], theirs[r], equal_nan=True) for r in mine)
    if limit <= 1:  # a block of 7 rarely ends at a bar's last record
        assert got.ahead.kept >= len(a) // 2
    assert got.ahead.made > got.ahead.kept > 0
    got.close()


class Quiet(Scripted):
    """``Scripted`` one record at a time, not ready (``ready()``: a live feed's quiet moment) before the
    records of ``quiet``."""

    def __init__(self, *args, quiet: set[int]) -> None:  # noqa: ANN002
        super().__init__(*args)
        self.quiet = quiet

    def ready(self) -> bool:
        return self.i not in self.quiet


def test_closes_made_ahead_on_one_book_stream_compute_and_decide_as_when_due(
    export: Path, replay: list[Path], tmp_path: Path
) -> None:
    """One MBP-10 stream over two sessions (the incremental rows: carried bars, kernel states, row
    buffers, the session cut), quiet before every bar's first record (a close made ahead and kept) and
    before every third record (made and dropped): the same feature rows, decisions and resume points
    bit for bit as closes made at their records. A fork that shared what a close changes (the feature
    kernels' carried states, the row buffers' last row, the bars' carried state) would leave the
    dropped closes' changes in the service's state."""
    from foxhunt.data.dbn_write import write_records
    from foxhunt.domain.instrument import resolve_instrument
    from foxhunt.serve.service import load_trained
    from foxhunt.serve.state import RowState

    raws = [read_raw(p) for p in sorted(replay) if ".mbp-10." in p.name]
    one = write_records(
        tmp_path / "two-sessions.mbp-10.dbn",
        raws[0].schema,
        np.concatenate([r.records for r in raws]),
        dataset=raws[0].dataset,
        symbols={**raws[0].instrument_symbols, **raws[1].instrument_symbols},
    )
    src = ReplaySource([one])
    records = [src.next(0.0) for _ in range(len(src))]
    cfg = ServeConfig(warmup_rows=2, stall_seconds=5.0)
    scaler, full = load_trained(export, cfg)
    state = RowState(src.streams, full, scaler, resolve_instrument(["ESZ6"]), tmp_path / "s")
    buckets = [state.bucket_of(int(state.decode(r.stream, r.payload)["ts_event"][0])) for r in records]
    assert state.incremental is not None  # one book stream of time bars: the carried rows
    state.close()
    opens = {i for i in range(1, len(records)) if buckets[i] != buckets[i - 1]}
    assert len({b[0] for b in buckets}) == 2, "two sessions"
    runs = {}
    for name, quiet in (("due", set()), ("ahead", opens | set(range(0, len(records), 10)))):
        svc, commits = _traced(export, tmp_path / name, Quiet(src.streams, records, {}, quiet=quiet))
        runs[name] = (svc, commits, svc.ledger.decisions(), svc.ledger.features())
    (due, c0, d0, f0), (ahead, c1, d1, f1) = runs["due"], runs["ahead"]
    assert ahead.ahead.made > ahead.ahead.kept >= len(opens) // 2 and due.ahead.made == 0
    assert c1 == c0 and len(d1) == len(d0) > 40 and all(_same(x, y) for x, y in zip(d1, d0, strict=True))
    assert f1.keys() == f0.keys() and all(np.array_equal(f1[r], f0[r], equal_nan=True) for r in f0)
    due.close()
    ahead.close()


def test_crossed_books_in_a_block_cut_no_catch_up_short(export: Path, stream, tmp_path: Path) -> None:
    """Crossed books (kept, each a fault) every ~40 records, read in blocks in catch-up: each fault
    logged where one record at a time logs it (the same faults in order, the same fail-safe decisions
    and resume points), and they cost no pass of the row pipeline: as many passes as the stream
    without them makes in blocks. Were each crossed book handled alone (``on_record``), it would close
    the bars before it first, as many passes as one record at a time."""
    streams, records = stream
    crossed, at = list(records), 100
    while True:
        i = _book_index(crossed, at) if any(len(r.payload) > 100 for r in crossed[at:]) else -1
        if i < 0 or i > len(crossed) - 20:
            break
        ask = int(np.frombuffer(crossed[i].payload, dtype=_dtype(crossed, i))["ask_px_00"][0])
        crossed = _with(crossed, i, bid_px_00=ask + 250_000_000)
        at = i + 40
    one, one_commits = _traced(export, tmp_path / "one", Scripted(streams, crossed, {}))
    got, got_commits = _traced(export, tmp_path / "got", Blocks(streams, crossed, {}, limit=4096))
    plain, _ = _traced(export, tmp_path / "plain", Blocks(streams, records, {}, limit=4096))
    faults = got.ledger.faults()
    assert faults == one.ledger.faults() and len(faults) >= 10
    assert {k for k, _ in faults} == {Fault.CROSSED.value}
    a, b = got.ledger.decisions(), one.ledger.decisions()
    assert len(a) == len(b) > 10 and all(_same(x, y) for x, y in zip(a, b, strict=True))
    forced = "SELECT row FROM decisions WHERE forced = 'flatten' ORDER BY row"
    assert got.ledger.db.execute(forced).fetchall() == one.ledger.db.execute(forced).fetchall() != []
    assert got_commits == one_commits
    assert got.passes == plain.passes < one.passes  # type: ignore[attr-defined]
    for svc in (one, got, plain):
        svc.close()


def test_replay_blocks_are_the_records_in_order(replay: list[Path]) -> None:
    """``ReplaySource.next_block`` hands out the records ``next`` does, in the same order, each block
    one file's consecutive records (two merged files: many short runs), at most ``limit``."""
    one = ReplaySource(replay)
    want = []
    while True:
        try:
            got = one.next(0.0)
        except SourceEnded:
            break
        assert got is not None
        want.append((got.stream, got.payload))
    src, limit = ReplaySource(replay), 50
    have, sizes = [], []
    while True:
        try:
            block = src.next_block(0.0, limit=limit)
        except SourceEnded:
            break
        assert block is not None and 1 <= block.count <= limit
        sizes.append(block.count)
        p = block.payload
        have += [(block.stream, bytes(p[k * block.size : (k + 1) * block.size])) for k in range(block.count)]
    assert have == want and max(sizes) == limit and len(sizes) < len(want) / 2


def test_paced_replay_blocks_release_no_record_before_it_is_due(replay: list[Path]) -> None:
    """At ``speed`` x the recorded pace a block holds the records already due, none later: the last
    record of every block was due when the block came (its recorded time since the first, divided by
    the speed), and the replay still ends at its recorded length."""
    src = ReplaySource(replay[:1])
    span = (int(src._ts[-1]) - int(src._ts[0])) / 1e9
    speed = span / 0.5  # half a second of replay
    src = ReplaySource(replay[:1], speed=speed)
    released, blocks = 0, 0
    while True:
        try:
            block = src.next_block(1.0)
        except SourceEnded:
            break
        now = time.monotonic()
        if block is None:
            continue
        released += block.count
        blocks += 1
        last = np.frombuffer(block.payload, dtype=np.uint8)[-block.size :].view(_dtype_of(block.size))
        due = (int(last["ts_event"][0]) - int(src._ts[0])) / 1e9 / speed
        assert src._t0_wall is not None and due <= now - src._t0_wall + 1e-6
    assert released == len(src) and blocks < released
    assert src._t0_wall is not None and time.monotonic() - src._t0_wall >= 0.5 - 1e-3


def test_a_paced_replay_is_ready_only_once_its_next_record_is_due(replay: list[Path]) -> None:
    """``ready()`` (the service makes a close ahead while it is False): at full speed always; at a pace,
    False between a block and its next record's time, True from then on (and at the end)."""
    assert ReplaySource(replay[:1]).ready()
    src = ReplaySource(replay[:1])
    span = (int(src._ts[-1]) - int(src._ts[0])) / 1e9
    src = ReplaySource(replay[:1], speed=span / 0.5)  # half a second of replay
    idle = due = 0
    while True:
        try:
            block = src.next_block(1.0)
        except SourceEnded:
            break
        if block is None or src.position >= len(src):
            continue
        ready, now = src.ready(), time.monotonic()
        assert ready == (now >= src.due(src.position)) or abs(now - src.due(src.position)) < 1e-3
        idle, due = idle + (not ready), due + ready
    assert idle > 0 and src.ready()


def test_a_spinning_wait_takes_each_record_as_it_is_due_and_decides_as_a_blocked_one(
    export: Path, replay: list[Path], tmp_path: Path
) -> None:
    """``serve.wait = spin``: the service polls ``ready()`` itself and calls the source only once a
    record is due (every call with no time to wait: the source never sleeps), while ``sleep`` hands the
    wait to the source; the same decisions either way, on a paced replay of two MBP-10 files (a few
    seconds), with closes made ahead in its quiet moments. Both leave the garbage collector as they
    found it: automatic, nothing frozen (serve.loop.collected_when_idle); both serve with the
    thread's timer slack at 1 ns (on Linux: a blocked wait's sleeps end on time) and restore it."""
    import gc

    from foxhunt.serve.config import Wait
    from foxhunt.serve.waits import PR_GET_TIMERSLACK, TIMER_SLACK_NS, _prctl

    prctl = _prctl()
    slack = (lambda: prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)) if prctl is not None else (lambda: None)
    before = slack()

    files = sorted(p for p in replay if ".mbp-10." in p.name)
    times = ReplaySource(files)._ts
    span = (int(times[-1]) - int(times[0])) / 1e9
    runs = {}
    for wait in Wait:
        src = ReplaySource(files, speed=span / 3.0)  # three seconds of replay
        timeouts: list[float] = []
        take = src.next_block

        slacks: set[int | None] = set()

        def traced(timeout: float, _take=take, _seen=timeouts, _slacks=slacks) -> StreamBlock | None:  # noqa: ANN001
            _seen.append(timeout)
            _slacks.add(slack())
            return _take(timeout)

        src.next_block = traced  # type: ignore[method-assign]
        cfg = ServeConfig(warmup_rows=2, wait=wait)
        svc = Service(export, src, tmp_path / wait.value, cfg, log=lambda m: None)
        svc.run()
        runs[wait] = (svc.ledger.decisions(), timeouts, svc.ahead.made)
        assert gc.isenabled() and gc.get_freeze_count() == 0
        assert slack() == before and slacks == ({TIMER_SLACK_NS} if before is not None else {None})
        svc.close()
    (slept, slept_timeouts, _), (spun, spun_timeouts, made) = runs[Wait.SLEEP], runs[Wait.SPIN]
    assert len(spun) == len(slept) > 10 and all(_same(x, y) for x, y in zip(spun, slept, strict=True))
    assert set(spun_timeouts) == {0.0} and max(slept_timeouts) > 0 and made > 0


class _QuietBeforeBars(ReplaySource):
    """A replay at full speed, one record a block (a paced feed's), that is quiet (``ready()`` False)
    for its first ``polls`` polls before each record that opens a later time bar: a wait's
    idle moments, where closes are made ahead and rehearsed, in a test of a few seconds."""

    def __init__(self, paths: list[Path], polls: int) -> None:
        super().__init__(paths)
        self.quiet_before: set[int] = set()
        self.polls, self._left = polls, 0

    def quiet_at_bars(self, bar_ns: int) -> None:
        bars = self._ts // bar_ns
        self.quiet_before = set((np.flatnonzero(bars[1:] != bars[:-1]) + 1).tolist())

    def ready(self) -> bool:
        if self._left:
            self._left -= 1
            return False
        return True

    def next_block(self, timeout: float, limit: int = 1) -> StreamBlock | None:
        got = super().next_block(timeout, limit=1)
        self._left = self.polls if self.position in self.quiet_before else 0
        return got


@pytest.mark.parametrize("wait", ["spin", "sleep"])
def test_a_wait_rehearses_a_due_records_path_on_the_last_record_and_changes_nothing(
    export: Path, replay: list[Path], tmp_path: Path, wait: str
) -> None:
    """While a close made ahead waits, either wait (spinning, or blocked in the source a millisecond
    at a time) runs a due record's path (the source's block, its decoding, the monitor's check, its
    bar, the kept close's key) on the last record taken, never the next, every ``REHEARSE_S``: the
    decisions, faults and resume points are those of a service that never rehearses (closes made when
    due), and the closes made ahead are kept."""
    from foxhunt.serve.config import AheadMode, Wait

    files = sorted(p for p in replay if ".mbp-10." in p.name)[:1]  # one session
    runs = {}
    for ahead in AheadMode:
        cfg = ServeConfig(warmup_rows=2, wait=Wait(wait), ahead=ahead)
        src = _QuietBeforeBars(files, polls=4)
        svc = Service(export, src, tmp_path / ahead.value, cfg, log=lambda m: None)
        src.quiet_at_bars(svc.cfg.data.bar_seconds * 10**9)  # the service's bars
        rehearsed: list[bytes] = []

        def noted(block, _seen=rehearsed, _svc=svc, _src=src, _rehearse=svc.loop.waits.rehearse) -> None:  # noqa: ANN001
            assert block is not None and _svc.ahead.waiting is not None  # a close made ahead waits
            last = _src._block(_src.position - 1, _src.position)  # the last record taken
            assert bytes(block.payload) == bytes(last.payload)
            _seen.append(bytes(block.payload))
            _rehearse(block)

        resumes: list[int] = []

        def committed(_seen=resumes, _commit=svc.ledger.commit_row, **kw: Any) -> None:  # noqa: ANN001
            _seen.append(kw["records"])
            _commit(**kw)

        svc.loop.waits.rehearse = noted  # type: ignore[method-assign]
        svc.ledger.commit_row = committed  # type: ignore[method-assign]
        svc.run()
        runs[ahead] = (svc.ledger.decisions(), svc.ledger.faults(), resumes, len(rehearsed), svc.ahead.kept)
        svc.close()
    (made, faults, resumes, rehearsals, kept), (due, due_faults, due_resumes, none, _) = runs.values()
    assert len(made) == len(due) > 50 and all(_same(x, y) for x, y in zip(made, due, strict=True))
    assert faults == due_faults and resumes == due_resumes
    assert none == 0 and rehearsals >= kept > 50


def _dtype_of(size: int) -> np.dtype:
    from foxhunt.data.dbn_write import record_dtype
    from foxhunt.data.schemas import Schema

    return next(record_dtype(s) for s in (Schema.MBP_10, Schema.TRADES) if record_dtype(s).itemsize == size)


@pytest.mark.parametrize("book", [True, False], ids=["mbp-10", "mbo"])
def test_monitor_clean_is_check_record_by_record(book: bool) -> None:
    """``Monitor.clean`` passes exactly the leading records ``check`` finds no fault in, and leaves the
    monitor as ``check`` would: random MBP-10 and MBO blocks with every kind of bad record sprinkled
    in (MBO has no best levels to cross)."""
    from foxhunt.data.dbn_write import empty_records
    from foxhunt.data.schemas import Schema
    from foxhunt.serve.monitor import Monitor

    rng = np.random.default_rng(0)
    for trial in range(200):
        n = int(rng.integers(1, 40))
        recs = empty_records(Schema.MBP_10 if book else Schema.MBO, n)
        recs["ts_event"] = 10**18 + np.cumsum(rng.integers(0, 5, n)) * 10**9
        recs["instrument_id"] = 7
        if book:
            recs["bid_px_00"], recs["ask_px_00"] = 100 * 10**9, 101 * 10**9
            recs["bid_sz_00"], recs["ask_sz_00"] = 1, 1
        for _ in range(int(rng.integers(0, 3))):
            k, kind = int(rng.integers(0, n)), int(rng.integers(0, 7 if book else 5))
            if kind == 0:
                recs["ts_event"][k] = 0
            elif kind == 4:
                recs["ts_event"][k] = np.iinfo(np.uint64).max  # undefined
            elif kind == 5:
                recs["bid_px_00"][k] = 102 * 10**9  # crossed
            elif kind == 6:
                recs["bid_sz_00"][k], recs["bid_px_00"][k] = 0, 102 * 10**9  # one-sided: not crossed
            elif kind == 1:
                recs["instrument_id"][k] = 9
            elif kind == 2:
                recs["ts_event"][k:] -= np.uint64(3 * 10**9)  # back in time
            elif kind == 3:
                recs["ts_event"][k:] += np.uint64(700 * 10**9)  # a gap
        cfg = ServeConfig(max_gap_seconds=600)
        start = None if trial % 2 else 10**18 - 10**9  # a fresh monitor, or one that has seen a record
        block, single = Monitor(cfg), Monitor(cfg)
        block.last_ts = single.last_ts = start
        rehearsed = block.clean(recs, note=False)  # a rehearsal's: nothing noted
        assert (block.last_ts, block.instrument_id) == (start, None)
        k = block.clean(recs)
        assert rehearsed == k
        assert all(single.check(recs[m : m + 1]) == [] for m in range(k))
        assert (block.last_ts, block.instrument_id) == (single.last_ts, single.instrument_id)
        assert k == n or single.check(recs[k : k + 1]) != []


# --- the live adapter, the command line, the status endpoint --------------------------------------


class RecordedLive:
    """``databento.Live``'s interface over a recorded DBN file: start() plays it to the callback."""

    def __init__(self, path: Path) -> None:
        import databento as db

        self.store = db.DBNStore.from_file(path)
        self.subscribed: dict = {}
        self.symbology_map: dict = {}

    def subscribe(self, dataset, schema, symbols, stype_in):  # noqa: ANN001, ANN201
        self.subscribed = {"dataset": dataset, "schema": schema, "symbols": symbols, "stype_in": stype_in}

    def add_callback(self, record_callback, exception_callback=None) -> None:  # noqa: ANN001
        self.callback = record_callback

    def start(self) -> None:
        for rec in self.store:
            self.callback(rec)
        self.callback(None)

    def stop(self) -> None:
        return None


def test_live_adapter_hands_out_the_recorded_stream(replay: list[Path]) -> None:
    book = next(p for p in replay if "mbp-10" in p.name)
    clients: list[RecordedLive] = []

    def factory() -> RecordedLive:
        clients.append(RecordedLive(book))
        return clients[-1]

    live = LiveSource("GLBX.MDP3", ["ES.c.0"], client_factory=factory)
    want_sub = {"dataset": "GLBX.MDP3", "schema": "mbp-10", "symbols": ["ES.c.0"], "stype_in": "continuous"}
    assert clients[0].subscribed == want_sub
    got: list[bytes] = []

    def drain() -> None:
        while (r := live.next(1.0)) is not None:
            got.append(r.payload)

    with pytest.raises(Disconnected):  # the recorded session's end
        drain()
    want = read_raw(book).records
    assert len(got) == len(want) and b"".join(got) == want.tobytes()


def test_live_adapter_blocks_are_the_recorded_stream(replay: list[Path]) -> None:
    """``LiveSource.next_block``: the queued records in blocks of one size, the stream unchanged (the
    recorded client's symbol mappings and end message are no records), then the end as a disconnect."""
    book = next(p for p in replay if "mbp-10" in p.name)
    live = LiveSource("GLBX.MDP3", ["ES.c.0"], client_factory=lambda: RecordedLive(book))
    got: list[bytes] = []
    counts = []
    assert live.rehearsal() is None  # nothing handed out yet

    def drain() -> None:
        while (block := live.next_block(1.0, limit=100)) is not None:
            assert len(block.payload) == block.count * block.size
            got.append(block.payload)
            counts.append(block.count)
            last = live.rehearsal()  # the block's last record again (a spinning wait's rehearsal)
            assert last is not None and bytes(last.payload) == bytes(block.payload[-block.size :])

    with pytest.raises(Disconnected):  # the recorded session's end
        drain()
    want = read_raw(book).records
    assert b"".join(got) == want.tobytes() and max(counts) == 100 and sum(counts) == len(want)


def test_live_without_a_key_is_one_line_exit_2(
    export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABENTO_API_KEY", raising=False)
    args = ["serve", "--checkpoint", str(export), "--live", "GLBX.MDP3", "--symbols", "ES.c.0"]
    args += ["--out", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "DATABENTO_API_KEY" in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible: serve.device=cuda runs")
def test_serve_on_cuda_without_one_is_refused_in_one_line(
    export: Path, replay: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "o"
    args = ["serve", "--checkpoint", str(export), "--replay", str(replay[0]), "--out", str(out)]
    result = runner.invoke(app, [*args, "--set", "serve.device=cuda"])
    assert result.exit_code == 2, result.output
    assert "serve.device" in result.output and len(result.output.strip().splitlines()) == 1
    assert not out.exists()


def test_aot_off_the_cpu_is_refused_before_anything_is_written(
    export: Path, replay: list[Path], tmp_path: Path
) -> None:
    """serve.decide = aot builds CPU libraries: a service on another device is refused, naming the
    setting and the fix, before its folder is made."""
    with pytest.raises(FoxhuntError, match="serve.decide") as got:
        Service(
            export, ReplaySource(replay), tmp_path / "o", ServeConfig(), device="meta", decide=DecidePath.AOT
        )
    assert "compiled" in str(got.value) and not (tmp_path / "o").exists()
    # From Python the fix is the config key, on the command line the option (foxhunt.errors).
    text = str(got.value)
    assert 'api.config(..., overrides=["serve.device=cpu"])' in text and "--set" not in text
    assert "--set serve.device=cpu" in got.value.render(FrontDoor.CLI)


@pytest.mark.gpu
@pytest.mark.parametrize("decide", [DecidePath.EAGER, DecidePath.COMPILED])
def test_a_replay_on_the_gpu_decides_row_for_row_as_the_gpu_backtest(
    export: Path, replay: list[Path], tmp_path: Path, decide: DecidePath
) -> None:
    """serve.device = cuda (the market tensors, the env step and the forward on the GPU): every row the
    backtest decided on the GPU, serve decided alike, bit for bit, and the same net PnL."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    bt, sv = tmp_path / "bt", tmp_path / "sv"
    args = ["backtest", "--data", *map(str, replay), "--checkpoint", str(export), "--out", str(bt), "-q"]
    result = runner.invoke(app, [*args, "--set", "run.device=cuda"])
    assert result.exit_code == 0, result.output
    want = read_decisions_csv(bt / "decisions.csv")
    args = ["serve", "--checkpoint", str(export), "--replay", *map(str, replay), "--out", str(sv), "-q"]
    args += ["--set", f"serve.warmup_rows={want[0].row}", "--set", f"serve.decide={decide.value}"]
    result = runner.invoke(app, [*args, "--set", "serve.device=cuda"])
    assert result.exit_code == 0, result.output
    got = {d.row: d for d in read_decisions_csv(sv / "decisions.csv")}
    assert len(want) > 40 and any(d.fill_contracts != 0 for d in want)
    none = DecisionRow(0, -1, 0, 0, 0, 0, 0, 0, 0)
    assert [d.row for d in want if not _same(d, got.get(d.row, none))] == []
    body = json.loads((bt / "metrics.json").read_text())
    summary = json.loads((sv / "summary.json").read_text())
    assert summary["net_pnl"] == pytest.approx(body["net_pnl"], rel=1e-9, abs=1e-9)


def test_compiled_decisions_without_a_cpp_compiler_are_refused_in_one_line(
    export: Path, replay: list[Path], tmp_path: Path
) -> None:
    """serve.decide = aot (a live feed's default) on a machine where Inductor finds no C++ compiler: one
    line naming the setting and the fix, exit 2, nothing written (not a traceback at the first decision)."""
    from torch._inductor import config as inductor_config
    from torch._inductor.cpp_builder import cpp_compiler_search

    out = tmp_path / "o"
    args = ["serve", "--checkpoint", str(export), "--replay", str(replay[0]), "--out", str(out)]
    args += ["--set", "serve.decide=aot"]
    cpp_compiler_search.cache_clear()  # its answer is memoised per search list
    try:
        with inductor_config.patch({"cpp.cxx": ("no-such-cxx-for-foxhunt",)}):
            result = runner.invoke(app, args)
    finally:
        cpp_compiler_search.cache_clear()
    assert result.exit_code == 2, result.output
    assert "serve.decide" in result.output and "eager" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()


def test_a_checkpoint_without_normaliser_is_refused(export: Path, replay: list[Path], tmp_path: Path) -> None:
    bare = export.with_name("bare.safetensors")
    args = ["serve", "--checkpoint", str(bare), "--replay", str(replay[0]), "--out", str(tmp_path / "o")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "--cache" in result.output


def test_a_stream_of_another_instrument_is_refused_in_one_line(
    export: Path, replay: list[Path], tmp_path: Path
) -> None:
    from foxhunt.data.dbn_write import write_records
    from foxhunt.policy.checkpoint import read_checkpoint_meta

    assert read_checkpoint_meta(export)["instrument"]["root"] == "ES"  # the export records its data's
    f = read_raw(replay[0])
    symbols = {iid: "NQZ6" for iid in f.instrument_symbols}  # the same records, another product
    nq = write_records(tmp_path / "nq.mbp-10.dbn", f.schema, f.records, dataset=f.dataset, symbols=symbols)
    args = ["serve", "--checkpoint", str(export), "--replay", str(nq), "--out", str(tmp_path / "o")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "NQZ6" in result.output and "ES" in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "decisions.csv").exists()


def test_serve_config_rejects_unknown_keys() -> None:
    with pytest.raises(ValueError, match="extra"):
        ServeConfig(warmup=3)  # type: ignore[call-arg]
    assert api.config("smoke", overrides=["serve.on_fault=hold"]).serve.on_fault.value == "hold"


def test_status_endpoint(export: Path, stream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from foxhunt.serve.http import start_status_server

    streams, records = stream
    svc = Service(export, Scripted(streams, records[:300], {}), tmp_path, ServeConfig(), log=lambda m: None)
    svc.run()
    server = start_status_server(svc, 0)
    base = server.url
    try:
        assert json.load(urllib.request.urlopen(f"{base}/health"))["ok"] is True
        state = json.load(urllib.request.urlopen(f"{base}/state"))
        assert state["decisions"] == len(svc.ledger.decisions()) and "feed_lag_s" in state
        since = json.load(urllib.request.urlopen(f"{base}/decisions?since=3"))
        assert [d["row"] for d in since] == [d.row for d in svc.ledger.decisions(3)]
        monkeypatch.delenv("FOXHUNT_SERVE_TOKEN", raising=False)
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(urllib.request.Request(f"{base}/flatten", method="POST"))
        monkeypatch.setenv("FOXHUNT_SERVE_TOKEN", "s3cret")
        auth = {"Authorization": "Bearer s3cret"}
        req = urllib.request.Request(f"{base}/flatten", method="POST", headers=auth)
        assert urllib.request.urlopen(req).status == 200 and svc.closer.flatten_now
    finally:
        server.close()
        svc.close()


def test_a_normaliser_of_another_feature_layout_is_refused(export: Path, stream, tmp_path: Path) -> None:
    from foxhunt.domain.instrument import resolve_instrument
    from foxhunt.policy.checkpoint import CheckpointError
    from foxhunt.serve.service import load_trained
    from foxhunt.serve.state import RowState
    from foxhunt.validation.normalise import RobustScaler

    streams, records = stream
    s, cfg = load_trained(export, None)
    short = RobustScaler(median=s.median[:-1], scale=s.scale[:-1], clip=s.clip, columns=s.columns[:-1])
    state = RowState(streams, cfg, short, resolve_instrument(["ESZ6"]), tmp_path)
    for r in records[:200]:
        state.append(r.stream, r.payload)
    with pytest.raises(CheckpointError, match="another feature layout"):
        state.rows()
    state.close()
