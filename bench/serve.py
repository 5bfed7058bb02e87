"""``foxhunt serve`` benchmark: replay throughput and decision latency beside the batch pipeline.

    .venv/bin/python bench/serve.py [--checkpoint EXPORT.safetensors] [--replay FILE...] [--warmup-rows N]
                                    [--json bench/results/serve.json]

For each replayed file (by default the real ESH4 MBO file of ../shared/data/real and an MBP-10 file
made from it: its rebuilt book states written as MBP-10 records, the only real ten-level book of
any length here), the file is replayed at full speed through :class:`foxhunt.serve.service.Service`
on one CPU thread: records/s and rows/s over the whole replay, and the latency of a decision (the
record that closes a row in -> the decision out: the row's market, bars, features and normaliser,
the env step, the network forward; its ledger commit follows) at p50 and p99 over the decided rows.
Beside it, the batch pipeline on the same file (ingest, rows and every feature family once
over everything: ``foxhunt features build`` without labels): records/s and rows/s. Without
``--checkpoint`` a smoke-config agent is trained for one epoch on the synthetic market and exported
(as tests/serve/test_real_es.py does; about 20 s). The issue's goals: >= 200 k records/s, p50 <= 200
us, p99 <= 1 ms. Writes the table's numbers as JSON.

Also per case: the p50 latency of the first and the last quarter of the decisions (a close that
re-ran the session would grow from one to the other; one that computes its new rows stays flat),
and where a row close's time goes (``--parts``: wall time of each step, summed over the replay and
divided by its rows: decoding and the session's market, the bars, ``from_bars``, the feature
families, normaliser and market tensors, the environment's step, the policy, the ledger's inserts
of each row and the resume state it packs once a close; the transaction's COMMIT is in the closes),
and the record handling outside the row closes per record (the replay's seconds less its closes':
reading the source, decoding, the monitor's checks, the time buckets, the logs).
``--device cuda`` serves on the GPU (serve.device: the market tensors, env step and forward; the
rows on the CPU). ``--synthetic EVENTS`` replays one synthetic session's MBP-10 file instead of ESH4
(a machine without the real files). ``--pin CORE`` runs on that CPU core only
(``os.sched_setaffinity``). ``--repeat N`` (3): each replay and the batch run N times; the table
shows the run of median records/s (the JSON every run's).

Each file is replayed once per ``--closes`` mode (``serve.closes``; default both, side by side):
``each_bar`` makes every bar's row in a pass of the row pipeline of its own, at the record that
closes it (a live feed that keeps up); ``catch_up`` makes the bars of one block of records (up to
4,096: a replay at full speed is always behind) in one pass, then steps and decides each row in turn.
A decision's latency counts from the record that closed its bar, so in catch-up it includes the wait
for the rows of the block before it.

The decision side (env step and forward, foxhunt.serve.decide) runs serve's default path, ``aot``
(the ahead-of-time libraries, loaded from the cache or built there at the first closes), unless
``--decide compiled|eager`` (or ``--eager``). Its compile (or load) is paid at the first two decided
rows and reported apart (``compile_seconds`` per part, the first two decisions' latencies): it is
taken out of the replay's seconds, of the step and policy parts and of the latency percentiles,
which are those of the service once started.

``--speed X`` replays at X times the recorded pace (a live feed: 1) and counts a decision's latency
from when its closing record was *due* (the source's wake-up and a wait behind a close still being
made ahead count too); ``--paced-from N`` releases the first N records at once (the session's
history before the feed joins: ESH4's first 146 records span the hour before the open) and counts
no row they close; the last row, closed by the file's end rather than by a record (a live feed has
no such close: its bars close at the next bar's first record), is timed from the file's last record
and reported apart. ``--ahead`` and ``--wait`` (serve.ahead, serve.wait) are rows of the table, and
the JSON keeps every latency. A paced run lasts the file's span over X (ESH4 from the open: an hour
at 1x; ``--head`` cuts it).

``--scaling EVENTS``: how a row close's own work (``RowState.rows``: the session's market, bars,
features, normaliser and market tensors; no environment or policy) grows over a session, on one
synthetic session of EVENTS book events (its MBP-10 file: one stream; 5-minute bars, 276 a
session), with a close at every bar: the median close of the session's first and last quarter, for
the incremental path and for the full path that re-runs the session's records at every close.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from foxhunt.serve.config import AheadMode, CloseMode, DecidePath, ServeConfig, Wait  # noqa: E402
from foxhunt.serve.service import Service, load_trained  # noqa: E402
from foxhunt.serve.source import BLOCK, ReplaySource, StreamBlock  # noqa: E402

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real"
ESH4 = "cme-es/esh4-glbx-mdp3-20231225.mbo.dbn.zst"
# The export tests/serve/test_real_es.py serves on ESH4: 15-second bars.
SMOKE = (
    "data.bar_seconds=15",
    "synth.sessions=3",
    "synth.events_per_session=4000",
    "folds.n_folds=2",
    "env.episode_rows=16",
    "agent.learn.updates_per_epoch=4",
    "agent.network.symmetry=none",
    "train.envs=8",
    "train.steps_per_epoch=8",
    "run.seed=0",
)


class PacedFrom(ReplaySource):
    """A replay whose first ``start`` records are released at once and the rest at ``speed`` x their
    pace from there: the session's history before a feed joins it live (ESH4's first 146 records
    span the hour before the open, which a paced replay would otherwise wait through)."""

    def __init__(self, paths: list[Path], speed: float, start: int) -> None:
        super().__init__(paths, speed=speed)
        self.start = start

    def _released(self, timeout: float) -> bool:
        return self.position < self.start or super()._released(timeout)

    def next_block(self, timeout: float, limit: int = BLOCK) -> StreamBlock | None:
        # A block of the history stops where the pace starts (its end search reads the pace's clock).
        if self.position < self.start:
            speed, self.speed = self.speed, None
            try:
                return super().next_block(timeout, min(limit, self.start - self.position))
            finally:
                self.speed = speed
        return super().next_block(timeout, limit)


def smoke_export(root: Path) -> Path:
    from foxhunt import api
    from foxhunt.policy.store import CheckpointStore
    from foxhunt.train.run import FoldTrainer

    cfg = api.config("smoke", overrides=SMOKE)
    cache = api.build_features(api.synthetic_market(root / "market", cfg), cfg, root / "cache")
    store = CheckpointStore(root / "run", ring=1)
    fold = api.make_folds(cache, cfg)[1]
    trainer = FoldTrainer(cache, fold, cfg, torch.device("cpu"), store, lambda m: None)
    trainer.run_epoch()
    return api.export_weights(store.save_last(1, 0, trainer.contents({})), root / "export", cache=cache)


def mbp10_of(mbo: Path, out: Path) -> Path:
    """The book states rebuilt from an MBO file, written as an MBP-10 file."""
    from foxhunt.data.book import rebuild_book
    from foxhunt.data.dbn_read import read_dbn, read_raw
    from foxhunt.data.dbn_write import write_book
    from foxhunt.data.schemas import Schema

    _, arrays = read_dbn(mbo, expect=Schema.MBO)
    symbols = dict(read_raw(mbo).instrument_symbols)
    return write_book(out, rebuild_book(arrays).book, symbols=symbols)  # type: ignore[arg-type]


def batch(checkpoint: Path, files: list[Path]) -> tuple[float, int]:
    """Seconds of the batch pipeline over ``files`` and the rows it makes."""
    from foxhunt.data.ingest import load_market
    from foxhunt.data.instrument import instrument_of_files
    from foxhunt.dataset.cache import compute_features
    from foxhunt.features.pipeline import rows_from_market

    _, cfg = load_trained(checkpoint, None)
    tick = instrument_of_files(files, cfg.instrument).tick_size
    rows_from_market(load_market(files, cfg.data), cfg.data, tick_size=tick)  # warm-up: numba caches
    t0 = time.perf_counter()
    inp = rows_from_market(load_market(files, cfg.data), cfg.data, tick_size=tick)
    compute_features(inp, cfg)
    return time.perf_counter() - t0, len(inp)


# The steps of a row close (module, attribute, label), timed by --parts.
PARTS = (
    # A book stream's records are decoded as their block arrives (RowState.append_block, counted in the
    # record handling); a close decodes only what is left (single records, a refused block).
    ("foxhunt.serve.state", "RowState._market", "session market (+ decoding left)"),
    ("foxhunt.serve.bars", "SessionBars.series", "bars"),
    ("foxhunt.serve.state", "from_bars", "from_bars"),
    ("foxhunt.serve.state", "compute_features", "feature families"),
    ("foxhunt.serve.state", "IncrementalRows._append", "normaliser + market tensors"),
    ("foxhunt.serve.close", "RowCloser._step", "environment step"),
    ("foxhunt.serve.close", "RowCloser._decide", "policy"),
    ("foxhunt.serve.ledger", "Ledger.commit_row", "ledger rows"),  # a row's inserts
    ("foxhunt.serve.ledger", "_blob", "ledger resume state"),  # packed once a close (Ledger.rows)
    ("foxhunt.serve.intake", "Intake.close_rows", "row closes (all of the above)"),
)
CLOSES = PARTS[-1][2]


def timed(parts: dict[str, float]) -> list:
    """Wrap the PARTS to add their wall time into ``parts``; the undo list."""
    import functools
    import importlib

    undo = []
    for module, name, label in PARTS:
        owner = importlib.import_module(module)
        attr = name
        if "." in name:
            cls, attr = name.split(".")
            owner = getattr(owner, cls, None)
        if not hasattr(owner, attr):
            continue  # a step this version has not (bench/serve.py run on an older foxhunt)
        fn = getattr(owner, attr)

        def wrapped(*a, _fn=fn, _label=label, **k):
            t = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                parts[_label] = parts.get(_label, 0.0) + time.perf_counter() - t

        setattr(owner, attr, functools.wraps(fn)(wrapped))
        undo.append((owner, attr, fn))
    return undo


def serve(
    checkpoint: Path,
    files: list[Path],
    warmup_rows: int,
    parts: bool = False,
    decide: DecidePath = DecidePath.AOT,
    closes: CloseMode = CloseMode.CATCH_UP,
    device: str = "cpu",
    speed: float | None = None,
    ahead: AheadMode = AheadMode.IDLE,
    wait: Wait = Wait.SLEEP,
    paced_from: int = 0,
) -> dict:
    source = ReplaySource(files, speed=speed) if speed is None else PacedFrom(files, speed, paced_from)
    spent: dict[str, float] = {}
    undo = timed(spent) if parts else []
    with tempfile.TemporaryDirectory() as out:
        scfg = ServeConfig(warmup_rows=warmup_rows, closes=closes, ahead=ahead, wait=wait)
        svc = Service(checkpoint, source, Path(out), scfg, device=device, log=lambda m: None, decide=decide)
        decided: list[tuple[float, float]] = []  # (when committed, latency us) of every decided row
        file_end: list[float] = []  # a paced replay's row closed by the file's end: its latency, apart
        commit = svc.ledger.commit_row

        def traced(**kw) -> None:  # noqa: ANN003
            if kw["row"] >= warmup_rows:
                if speed is None:
                    decided.append((time.perf_counter(), kw["latency_us"]))
                elif kw["records"] >= len(source):  # closed by the file's end, not by a record: no
                    # record-in to decision-out (a live feed has no such close), timed from when the
                    # file's last record was due and reported apart
                    file_end.append((time.monotonic() - source.due(len(source) - 1)) * 1e6)
                elif kw["records"] >= paced_from:  # from when the record that closed the row was due (a
                    # wait behind a close ahead too); rows closed by the history released at once: none
                    t = time.monotonic()
                    decided.append((time.perf_counter(), (t - source.due(kw["records"])) * 1e6))
            commit(**kw)

        svc.ledger.commit_row = traced  # type: ignore[method-assign]
        t0 = time.perf_counter()
        summary = svc.run()
        seconds = time.perf_counter() - t0
        rows = svc.rows_done
        # Compiled, the first decided row (the forward's compile) and the next (the step's) carry
        # Inductor's one-time compile: reported apart, and taken out of the replay's time, its parts
        # and its latencies (every decision whose record came before the compile ended: in catch-up
        # the rows queued behind it too).
        compiled = svc.decider.compile_times
        first = [lat for _, lat in decided[:2]]
        waited = svc.decider.compiled_at
        lat = np.array([lat for t, lat in decided if t - lat * 1e-6 >= waited], float)
        if compiled:
            seconds -= sum(compiled.values())
            for label, what in (("environment step", "step"), ("policy", "decide")):
                if label in spent:
                    spent[label] -= compiled.get(what, 0.0)
            if CLOSES in spent:
                spent[CLOSES] -= sum(compiled.values())
        incremental = getattr(svc.closer.state, "incremental", None) is not None
        svc.close()
    for owner, attr, fn in undo:
        setattr(owner, attr, fn)
    quarter = max(len(lat) // 4, 1)
    # Everything outside the row closes: the source, decoding, the monitor, the bucket keys, the logs.
    handling = (seconds - spent[CLOSES]) / len(source) if CLOSES in spent else None
    return {
        "closes": closes.value,
        "device": device,
        "speed": speed,
        "paced_from": paced_from,
        "ahead": ahead.value,
        "wait": wait.value,
        "latency_us_p90": float(np.percentile(lat, 90)) if len(lat) else None,
        "latency_us_max": float(lat.max()) if len(lat) else None,
        "latencies_us": lat.tolist(),
        "latency_us_file_end": file_end[0] if file_end else None,
        "closes_made_ahead": svc.ahead.made,
        "closes_kept_ahead": svc.ahead.kept,
        "record_handling_us_per_record": None if handling is None else handling * 1e6,
        "incremental": incremental,
        "latency_us_p50_first_quarter": float(np.median(lat[:quarter])) if len(lat) else None,
        "latency_us_p50_last_quarter": float(np.median(lat[-quarter:])) if len(lat) else None,
        "parts_us_per_row": {k: v * 1e6 / max(rows, 1) for k, v in spent.items()},
        "records": len(source),
        "rows": rows,
        # The decision side compiled (foxhunt.serve.decide): Inductor's seconds per part, and the
        # latencies of the two decided rows that paid them.
        "compiled": decide is not DecidePath.EAGER,
        "decide": decide.value,
        "compile_seconds": compiled,
        "latency_us_first_two_decisions": first,
        "decisions": summary["decisions"],
        "seconds": seconds,
        "records_per_s": len(source) / seconds,
        "rows_per_s": rows / seconds,
        "latency_us_p50": float(np.percentile(lat, 50)) if len(lat) else None,
        "latency_us_p99": float(np.percentile(lat, 99)) if len(lat) else None,
    }


def close_costs(checkpoint: Path, files: list[Path], incremental: bool, bar_seconds: int) -> np.ndarray:
    """Seconds of each row close's ``RowState.rows`` over a replay of ``files`` in bars of ``bar_seconds``
    (``--scaling``; the bar length changes no feature column, so the checkpoint's normaliser fits)."""
    from foxhunt.domain.instrument import resolve_instrument
    from foxhunt.serve.source import SourceEnded
    from foxhunt.serve.state import RowState

    scaler, cfg = load_trained(checkpoint, None)
    cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"bar_seconds": bar_seconds})})
    source = ReplaySource(files)
    symbols = sorted({s for m in source.streams for s in m.symbols.values()})
    instrument = resolve_instrument(symbols, (), cfg.instrument, where="the stream")
    costs = []
    with tempfile.TemporaryDirectory() as tmp:
        state = RowState(source.streams, cfg, scaler, instrument, Path(tmp))
        if not incremental:
            state.incremental = None
        while True:  # the service's loop without the policy (foxhunt.serve.intake.Intake.on_record)
            try:
                got = source.next(timeout=0.0)
            except SourceEnded:
                break
            bucket = state.bucket_of(int(state.decode(got.stream, got.payload)["ts_event"][0]))
            if state.bucket is not None and bucket != state.bucket:
                t0 = time.perf_counter()
                rows = state.rows()
                costs.append(time.perf_counter() - t0)
                if bucket[0] != state.bucket[0]:
                    state.end_session(rows)
            state.bucket = bucket
            state.append(got.stream, got.payload)
        state.close()
    return np.array(costs)


def scaling(checkpoint: Path, events: int, root: Path, bar_seconds: int = 300) -> dict:
    from foxhunt import api

    cfg = api.config("smoke", overrides=("synth.sessions=1", f"synth.events_per_session={events}"))
    files = [p for p in api.synthetic_market(root / "scaling", cfg) if ".mbp-10." in p.name]
    out: dict = {"events": events, "bar_seconds": bar_seconds}
    for name, inc in (("incremental", True), ("full", False)):
        c = close_costs(checkpoint, files, inc, bar_seconds)
        q = max(len(c) // 4, 1)
        out[name] = {
            "closes": len(c),
            "seconds": float(c.sum()),
            "close_us_p50_first_quarter": float(np.median(c[:q]) * 1e6),
            "close_us_p50_last_quarter": float(np.median(c[-q:]) * 1e6),
        }
        first, last = (o * 1e6 for o in (np.median(c[:q]), np.median(c[-q:])))
        print(
            f"scaling, {events:,} events, {name:11}: {len(c):,} closes in {c.sum():.1f} s, median close "
            f"{first:,.0f} us in the first quarter, {last:,.0f} us in the last"
        )
    return out


def synthetic_mbp10(events: int, root: Path, head: int = 0) -> list[Path]:
    """The MBP-10 file of one synthetic session of ``events`` book events (the smoke market's
    generator), cut to its first ``head`` records (0: all): a replay for a machine without the real
    files. A synthetic session spans ~5,000 rows of 15 s whatever its events: 750 k events give ESH4's
    ~150 records a row, and a head of 37 k records ESH4's MBP-10 length."""
    from foxhunt import api

    cfg = api.config("smoke", overrides=("synth.sessions=1", f"synth.events_per_session={events}"))
    files = [p for p in api.synthetic_market(root / "synthetic", cfg) if ".mbp-10." in p.name]
    return head_of(files, head, root) if head else files


def head_of(files: list[Path], head: int, root: Path) -> list[Path]:
    """Each file cut to its first ``head`` records (written under ``root``)."""
    from foxhunt.data.dbn_read import read_raw
    from foxhunt.data.dbn_write import write_records

    cuts = []
    for k, path in enumerate(files):
        raw = read_raw(path)
        cut = root / f"head{k}-{path.name.split('.')[0]}.{raw.schema.value}.dbn"
        recs = raw.records[:head]
        write_records(cut, raw.schema, recs, dataset=raw.dataset, symbols=raw.instrument_symbols)
        cuts.append(cut)
    return cuts


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path)
    ap.add_argument("--replay", type=Path, nargs="+", help="replayed together (default: ESH4 MBO; MBP-10)")
    ap.add_argument("--warmup-rows", type=int, default=0)
    ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "serve.json")
    ap.add_argument("--parts", action="store_true", help="time each step of a row close")
    ap.add_argument("--eager", action="store_true", help="the decision side eager (--decide eager)")
    ap.add_argument(
        "--decide",
        type=DecidePath,
        choices=list(DecidePath),
        nargs="+",
        default=[DecidePath.AOT],
        help="the decision side's paths, each a row (foxhunt.serve.decide; default: aot, serve's; aot "
        "runs on the CPU only)",
    )
    ap.add_argument("--pin", type=int, help="run on this CPU core only")
    ap.add_argument(
        "--device", nargs="+", default=["cpu"], help="serve's devices (serve.device), each a row: cpu, cuda"
    )
    ap.add_argument(
        "--synthetic",
        type=int,
        metavar="EVENTS",
        help="replay one synthetic session of EVENTS book events (MBP-10) instead of ESH4",
    )
    ap.add_argument("--head", type=int, default=0, help="each replayed file's first N records only (0: all)")
    ap.add_argument(
        "--speed",
        type=float,
        help="replay at SPEED x the recorded pace (a live feed: 1) instead of at full speed; the latency "
        "then counts from when the closing record was due",
    )
    for flag, kind, default, what in (
        ("--ahead", AheadMode, AheadMode.IDLE, "closes made ahead while the feed is idle, or not"),
        ("--wait", Wait, Wait.SLEEP, "a blocked wait for the next record, or a busy loop"),
    ):
        setting = f"serve.{flag.removeprefix('--')}"
        help_ = f"{setting} of the replays, each a row ({what})"
        ap.add_argument(flag, type=kind, choices=list(kind), nargs="+", default=[default], help=help_)
    ap.add_argument(
        "--paced-from",
        type=int,
        default=0,
        metavar="N",
        help="with --speed: the first N records at once (the history before a live feed joins; ESH4's "
        "first 146 are the hour before the open), the latency of the rows they close not counted",
    )
    ap.add_argument("--repeat", type=int, default=3, help="replays of each case: the median's numbers")
    ap.add_argument("--scaling", type=int, metavar="EVENTS", help="close costs over one synthetic session")
    ap.add_argument(
        "--closes",
        type=CloseMode,
        nargs="+",
        default=[CloseMode.EACH_BAR, CloseMode.CATCH_UP],
        help="serve.closes of the replays, each a row of the table (default: both, each_bar first)",
    )
    args = ap.parse_args(argv)
    if args.pin is not None:
        os.sched_setaffinity(0, {args.pin})
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint or smoke_export(Path(tmp) / "train")
        if args.replay:
            cases = {"replay": list(args.replay)}
        elif args.synthetic:
            cases = {"synthetic-mbp10": synthetic_mbp10(args.synthetic, Path(tmp), args.head)}
        else:
            mbo = REAL / ESH4
            if not mbo.is_file():
                sys.exit(f"{mbo} is absent: pass --replay FILE...")
            cases = {"esh4-mbo": [mbo], "esh4-mbp10": [mbp10_of(mbo, Path(tmp) / "esh4.mbp-10.dbn")]}
        if args.head and not args.synthetic:
            cases = {name: head_of(files, args.head, Path(tmp)) for name, files in cases.items()}
        results = {}
        decides = [DecidePath.EAGER] if args.eager else args.decide
        for name, files in cases.items():
            # Each replay (and the batch) --repeat times: the run of median records/s is reported
            # (a replay of ESH4 is ~0.2 s; one run moves by ~10% on this shared machine).
            timings = [batch(checkpoint, files) for _ in range(args.repeat)]
            batch_s, batch_rows = sorted(timings)[len(timings) // 2]
            product = itertools.product(args.device, decides, args.closes, args.ahead, args.wait)
            for device, decide, closes, ahead, wait in product:
                if decide is DecidePath.AOT and device != "cpu":
                    continue  # its libraries are the CPU's (foxhunt.serve.service.check_decide_device)
                how = {"parts": args.parts, "decide": decide, "closes": closes, "device": device}
                how.update(speed=args.speed, ahead=ahead, wait=wait, paced_from=args.paced_from)
                runs = [serve(checkpoint, files, args.warmup_rows, **how) for _ in range(args.repeat)]
                got = sorted(runs, key=lambda r: r["records_per_s"])[len(runs) // 2]
                got.update(
                    runs_records_per_s=[r["records_per_s"] for r in runs],
                    files=[str(p) for p in files],
                    batch_records_per_s=got["records"] / batch_s,
                    batch_rows_per_s=batch_rows / batch_s,
                )
                on = "" if args.device == ["cpu"] else f" {device}"
                on += "" if len(decides) == 1 else f" {decide.value}"
                on += "" if len(args.ahead) == 1 else f" ahead={ahead.value}"
                on += "" if len(args.wait) == 1 else f" wait={wait.value}"
                results[f"{name} {closes.value}{on}"] = got
        scaled = scaling(checkpoint, args.scaling, Path(tmp)) if args.scaling else None
    body = {
        "cases": results,
        "scaling": scaled,
        "goals": {"records_per_s": 200_000, "p50_us": 200, "p99_us": 1000},
        "cpu": sorted(os.sched_getaffinity(0)),
        "load_average": os.getloadavg(),
    }
    print(
        f"{'':36}{'records':>9}{'rows':>6}{'serve rec/s':>13}{'rows/s':>9}{'p50 us':>11}{'p99 us':>11}"
        f"{'batch rec/s':>13}{'rows/s':>9}"
    )
    for name, r in results.items():
        p50, p99 = (r[f"latency_us_{q}"] for q in ("p50", "p99"))
        print(
            f"{name:36}{r['records']:>9,}{r['rows']:>6}{r['records_per_s']:>13,.0f}{r['rows_per_s']:>9,.1f}"
            f"{'-' if p50 is None else f'{p50:,.0f}':>11}{'-' if p99 is None else f'{p99:,.0f}':>11}"
            f"{r['batch_records_per_s']:>13,.0f}{r['batch_rows_per_s']:>9,.1f}"
        )
    for name, r in results.items():
        q = r["latency_us_p50_first_quarter"], r["latency_us_p50_last_quarter"]
        if r["compiled"]:
            c = ", ".join(f"{k} {v:.1f} s" for k, v in r["compile_seconds"].items())
            print(f"{name}: decision side compiled at the first closes ({c}; out of the numbers above)")
        if q[0] is not None:
            print(f"{name}: p50 of the first / last quarter of decisions {q[0]:,.0f} / {q[1]:,.0f} us")
        if r["speed"] is not None and r["latency_us_p50"] is not None:
            q = r["latency_us_p90"], r["latency_us_max"], len(r["latencies_us"])
            print(f"{name}: latency p90 {q[0]:,.0f} us, max {q[1]:,.0f} us over {q[2]} decisions")
            if r["latency_us_file_end"] is not None:
                end = r["latency_us_file_end"]
                print(f"{name}: the row closed by the file's end (no record closes it) {end:,.0f} us, apart")
        if r["closes_made_ahead"]:
            print(f"{name}: closes made ahead {r['closes_made_ahead']:,}, kept {r['closes_kept_ahead']:,}")
        for label, us in sorted(r["parts_us_per_row"].items(), key=lambda kv: -kv[1]):
            print(f"    {label:30} {us:>9,.0f} us per row")
        handling = r["record_handling_us_per_record"]
        if handling is not None:
            print(f"    {'record handling (outside closes)':30} {handling:>9,.2f} us per record")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(body, indent=2) + "\n")
    return body


if __name__ == "__main__":
    main(sys.argv[1:])
