"""Distributed feature build benchmark: a year-like set of session files turned into the feature cache
by one process, then by Ray tasks (one per session), in the same command; goal >= 1.7x on 2 cores.

    .venv/bin/python bench/features_parallel.py [--sessions 250] [--events 20000] [--workers 2]

The input is the synthetic market (one MBP-10 and one trades file per session; written once to
``--data``, reused by later runs). Both builds start from the same files and fingerprints and must
write the same cache (every column's content hash is compared). Ray's start-up is timed apart from
the build: ``ray.init``, and each worker's first build of one tiny session (imports, numba kernels
loaded from their on-disk cache); the single process makes the same tiny build first. Prints a
table (rows, seconds, rows/s per worker, speed-up) and the load average, and writes
bench/results/features_parallel.json. Before the builds, two pure-Python loops run in parallel
against one give the speed-up the machine allows at that moment (less than its cores when other
programs share them). The "by session" row is the same split run in one process: its speed-up over
"one process" is what splitting alone gains, ``parallel_efficiency`` what the workers add.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from foxhunt.config.loader import load_config
from foxhunt.config.models import FoxhuntConfig
from foxhunt.data.config import SynthConfig
from foxhunt.data.ingest import expand_paths, load_market
from foxhunt.data.synth import write_synthetic
from foxhunt.dataset.cache import build_cache
from foxhunt.dataset.distributed import build_by_session, build_part, session_groups
from foxhunt.features.cache_file import open_cache
from foxhunt.features.fingerprint import file_fingerprint
from foxhunt.parallel import open_executor

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from run import hardware  # noqa: E402


def warm(files: list[Path], cfg: FoxhuntConfig, path: Path) -> int:
    """A process's first build, of one tiny session: its imports and the numba kernels loaded from
    their on-disk cache, a fixed cost per process whatever the data. Returns the process id."""
    build_part(0, files, cfg, 0.25, None, path)
    time.sleep(0.5)  # hold this worker so that the next warm-up task starts in another one
    return os.getpid()


def spin(n: int) -> float:
    """Seconds of a pure-Python loop: CPU only, no memory traffic, no I/O."""
    t0 = time.perf_counter()
    total = 0
    for i in range(n):
        total += i
    return time.perf_counter() - t0


def ceiling(workers: int, n: int = 20_000_000) -> float:
    """The speed-up this machine gives ``workers`` CPU-bound processes right now (``workers`` on an
    idle machine with that many cores; less when other programs share the cores)."""
    import multiprocessing

    alone = spin(n)
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(spin, [1] * workers)  # the workers started and imported before the clock starts
        t0 = time.perf_counter()
        pool.map(spin, [n] * workers)
        together = time.perf_counter() - t0
    return workers * alone / together


def market(folder: Path, sessions: int, events: int) -> list[Path]:
    files = expand_paths([folder]) if folder.is_dir() else []
    if len(files) != 2 * sessions:
        folder.mkdir(parents=True, exist_ok=True)
        for old in files:
            old.unlink()
        write_synthetic(SynthConfig(seed=21, sessions=sessions, events_per_session=events), folder)
        files = expand_paths([folder])
    return files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=250)
    ap.add_argument("--events", type=int, default=20_000, help="book events per session")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--row-unit", default="bar", choices=["bar", "snapshot"])
    ap.add_argument("--data", type=Path, default=None, help="folder of the session files (default: /tmp/...)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "features_parallel.json")
    args = ap.parse_args()
    data = args.data or Path(tempfile.gettempdir()) / f"foxhunt-bench-sessions-{args.sessions}x{args.events}"
    t0 = time.perf_counter()
    files = market(data, args.sessions, args.events)
    t_synth = time.perf_counter() - t0
    cfg = load_config("smoke", overrides=[f"data.row_unit={args.row_unit}"])
    sources = [file_fingerprint(p) for p in files]
    groups = len(session_groups(files, cfg.data))
    tiny = market(data.with_name(data.name + "-warm"), 1, 2_000)[:2]
    load_before = os.getloadavg()
    ideal = ceiling(args.workers)
    with tempfile.TemporaryDirectory(prefix="foxhunt-bench-fp-") as tmp:
        out = Path(tmp)
        warm(tiny, cfg, out / "warm-main.arrow")  # the single-process build starts warm too
        t0 = time.perf_counter()
        build_cache(load_market(files, cfg.data), cfg, out / "one.arrow", sources)
        t_one = time.perf_counter() - t0
        # The same session groups in this process: what splitting alone gains, before any parallelism.
        t0 = time.perf_counter()
        with open_executor(1) as serial:
            build_by_session(files, cfg, out / "serial.arrow", sources, serial)
        t_serial = time.perf_counter() - t0

        ideal_ray = ceiling(args.workers)  # again: other programs come and go
        t0 = time.perf_counter()
        with open_executor(args.workers) as executor:
            t_init = time.perf_counter() - t0
            t0 = time.perf_counter()
            pids = executor.map(warm, [(tiny, cfg, out / f"warm-{i}.arrow") for i in range(args.workers)])
            t_warm = time.perf_counter() - t0
            t0 = time.perf_counter()
            build_by_session(files, cfg, out / "ray.arrow", sources, executor)
            t_ray = time.perf_counter() - t0
            backend = executor.backend
        one, ray = open_cache(out / "one.arrow"), open_cache(out / "ray.arrow")
        serial_hash = open_cache(out / "serial.arrow").meta["content_hash"]
        same = one.meta["content_hash"] == ray.meta["content_hash"] == serial_hash
        rows = int(one.meta["rows"])
    load_after = os.getloadavg()
    speedup = t_one / t_ray
    per_worker = rows / t_ray / args.workers
    table = [
        ("one process", 1, rows, t_one, rows / t_one, rows / t_one, 1.0),
        ("by session", 1, rows, t_serial, rows / t_serial, rows / t_serial, t_one / t_serial),
        (f"{backend.value} tasks", args.workers, rows, t_ray, rows / t_ray, per_worker, speedup),
    ]
    print(
        f"{args.sessions} sessions x {args.events:,} events ({len(files)} files, {groups} session groups), "
        f"{args.row_unit} rows; synthetic files {t_synth:.1f} s"
    )
    head = ("build", "workers", "rows", "seconds", "rows/s", "rows/s/worker", "speed-up")
    print("{:<14} {:>7} {:>10} {:>8} {:>10} {:>14} {:>9}".format(*head))
    for name, w, n, s, rate, per, up in table:
        print(f"{name:<14} {w:>7} {n:>10,} {s:>8.1f} {rate:>10,.0f} {per:>14,.0f} {up:>8.2f}x")
    print(
        f"ray start-up (not in the build): init {t_init:.1f} s, {len(set(pids))} workers warmed in "
        f"{t_warm:.1f} s; "
        f"caches identical: {same}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after"
    )
    print(
        f"{args.workers} CPU-bound processes ran {ideal:.2f}x / {ideal_ray:.2f}x one before the first / "
        "the Ray build (the machine's ceiling then); "
        f"parallel efficiency (by session, 1 -> {args.workers} workers) {t_serial / t_ray / args.workers:.0%}"
    )
    body = {
        "sessions": args.sessions,
        "events_per_session": args.events,
        "files": len(files),
        "session_groups": groups,
        "row_unit": args.row_unit,
        "rows": rows,
        "workers": args.workers,
        "backend": backend.value,
        "single_process_s": round(t_one, 2),
        "by_session_one_process_s": round(t_serial, 2),
        "parallel_efficiency": round(t_serial / t_ray / args.workers, 3),
        "distributed_s": round(t_ray, 2),
        "speedup": round(speedup, 3),
        "rows_per_s_single": round(rows / t_one),
        "rows_per_s_per_worker": round(rows / t_ray / args.workers),
        "ray_init_s": round(t_init, 2),
        "ray_worker_warmup_s": round(t_warm, 2),
        "caches_identical": same,
        "cpu_ceiling_speedup_before_single": round(ideal, 3),
        "cpu_ceiling_speedup_before_ray": round(ideal_ray, 3),
        "cores_usable": len(os.sched_getaffinity(0)),
        "loadavg_1min_before": round(load_before[0], 2),
        "loadavg_1min_after": round(load_after[0], 2),
        "hardware": hardware(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(body, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
