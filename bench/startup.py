"""The main job's start-up: where ``foxhunt run --profile smoke`` spends its time before its first epoch.

    .venv/bin/python bench/startup.py [--repeat 3] [--stop-at epoch|training] [--set KEY=VALUE ...]
                                      [--no-job] [--no-phases] [--out bench/results/startup.json]
    .venv/bin/python bench/startup.py --cprofile bench/results/startup.pstats   # where in the code

Two tables, each from fresh processes, ``cold`` (numba's, Inductor's and Triton's caches in new empty
folders: a fresh machine or a fresh copy of the code, every kernel compiles) beside ``warm`` (a second
process reusing the caches the first one wrote, the everyday case), ``--repeat`` pairs, medians shown.
``NUMBA_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` point at temporary folders, so
the checkout's own caches are neither read nor written.

1. ``phases``: the imports and compiles before the job's first line, each timed in one process in the
   job's order (an import row counts only what the rows above have not imported already): the CLI,
   torch, pandas and databento, matplotlib, LightGBM (with scikit-learn and SciPy), the rest of the
   job's imports, the simulator's eager kernels, the config, the kernel warm-up's tiny market.
2. ``job``: the real ``foxhunt run --profile smoke`` (``--set`` passed on; on a GPU host it trains on
   the GPU) into a fresh folder, tracked to a fresh MLflow store as a new user's would be, timed by
   its own log lines as they arrive, stopped at its first epoch line (``--stop-at training``: at the
   start of training): start-up (imports, the simulator's compiles), the synthetic market, the leak
   guard (with the feature cache and training's compiles beside its cuts), the alpha check (models,
   intervals, report), training's set-up (the tracking run, members, folds), the first epoch.

``--cprofile FILE`` instead runs the job once in this process under cProfile (the caches as they are),
stopped where its first epoch would start, and writes the statistics to FILE.

The idle-core count at each job's start is printed: the kernel warm-up, the leak guard's forked cuts
and the tracking store made ahead all run only where cores are idle.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# One process: the phases in the job's order, each lap's seconds as one JSON line at the end.
PHASES = r"""
import json, sys, time
laps = []
t = time.perf_counter()
def lap(name):
    global t
    now = time.perf_counter(); laps.append([name, now - t]); t = now
import foxhunt.cli; lap("import foxhunt.cli")
import torch; lap("import torch")
import pandas, databento; lap("import pandas, databento")
import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot; lap("import matplotlib.pyplot")
import lightgbm; lap("import lightgbm (+ sklearn, scipy)")
import foxhunt.pipeline
from foxhunt.alpha.check import check_horizons
from foxhunt.backtest.reference import planted_column
from foxhunt.report.html import write_report
from foxhunt.pipeline import leak_guard_while
from foxhunt.tracking import start_run
from foxhunt.train.run import train
lap("import foxhunt.pipeline + run_job's imports (rest)")
from foxhunt.data.synth import write_synthetic; lap("import foxhunt.data.synth (eager kernels)")
from foxhunt.config.loader import load_config
cfg = load_config(profile="smoke"); lap("load_config(profile='smoke')")
from foxhunt.data.synth_market import synthetic_market
from foxhunt.features.pipeline import rows_from_market
from foxhunt.dataset.warmup import TINY_EVENTS
tiny = cfg.synth.model_copy(update={"sessions": 1, "events_per_session": TINY_EVENTS})
market = synthetic_market(tiny); lap("warm-up: tiny synthetic market (simulator kernels)")
rows_from_market(market, cfg.data); lap("warm-up: rows_from_market")
print(json.dumps(laps))
"""


def phases(env: dict[str, str]) -> list[list]:
    done = subprocess.run([sys.executable, "-c", PHASES], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


# The job's log lines that end each phase (the first line matching, in order), after a UTC stamp.
JOB_PHASES = (
    ("start-up (imports, simulator kernels)", r"synthetic market: .*\.\.\.$"),
    ("synthetic market", r"synthetic market: .*: done"),
    ("leak guard (+ cache, compiles ahead)", r"leak guard: done"),
    ("alpha check (+ report)", r"Verdict: "),
    ("training set-up (tracking, members)", r"training \.\.\.$"),
    ("first epoch", r"fold 1/\d+ epoch 1/"),
)


def job_timeline(env: dict[str, str], out: Path, sets: list[str], stop_at: str) -> dict[str, object]:
    """``foxhunt run --profile smoke`` into ``out``, timed by its log lines as they arrive: the seconds
    of each of :data:`JOB_PHASES`; stopped (with its process group: members, warm-up children) at the
    first epoch line, or at the start of training (``stop_at="training"``)."""
    import re

    script = Path(sys.executable).parent / "foxhunt"
    # The console script where it is installed; otherwise (a checkout on PYTHONPATH, as on the lent GPU
    # host) the same CLI as a module: the module form imports one more file, under a millisecond.
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "foxhunt.cli"]
    argv = [*cli, "run", "--profile", "smoke", "--out", str(out), "--overwrite"]
    for kv in sets:
        argv += ["--set", kv]
    last = len(JOB_PHASES) - (1 if stop_at == "training" else 0)
    marks: dict[str, float] = {}
    lines: list[str] = []
    import resource

    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    job = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    assert job.stdout is not None
    k = 0
    for raw in job.stdout:
        line = raw.decode(errors="replace").rstrip()
        lines.append(line)
        now = time.perf_counter() - t0
        while k < last and re.search(JOB_PHASES[k][1], line):
            marks[JOB_PHASES[k][0]] = now
            k += 1
        if k == last:
            break
    total = time.perf_counter() - t0
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGTERM)
    job.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - used.ru_utime) + (after.ru_stime - used.ru_stime)
    phases: dict[str, float | None] = {}
    before = 0.0
    for name, _ in JOB_PHASES[:last]:
        at = marks.get(name)
        phases[name] = None if at is None else at - before
        before = at if at is not None else before
    # cpu_s: the job process's own CPU seconds (user + system; its stopped children not counted),
    # the steadier number on a shared machine, where wall time also counts waiting for a core.
    return {"phases_s": phases, "total_s": total, "cpu_s": cpu, "complete": k == last, "tail": lines[-3:]}


class _FirstEpoch(BaseException):
    """Raised where the first epoch would start (:func:`profile_job`)."""


def profile_job(path: Path, out: Path, sets: list[str]) -> None:
    """``foxhunt run --profile smoke`` in this process under cProfile, stopped where its first epoch
    would start; the statistics written to ``path`` (``python -m pstats``, snakeviz), the 30 foxhunt
    functions of largest cumulative time printed."""
    import cProfile
    import pstats

    import foxhunt.train.run as training
    from foxhunt.cli import app

    def stop(*_: object, **__: object) -> None:
        raise _FirstEpoch

    training.FoldTrainer.run_epoch = stop  # type: ignore[method-assign]
    argv = ["run", "--profile", "smoke", "--out", str(out), "--overwrite"]
    for kv in sets:
        argv += ["--set", kv]
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    try:
        app(argv, standalone_mode=False)
    except _FirstEpoch:
        pass
    finally:
        prof.disable()
    print(f"to the first epoch: {time.perf_counter() - t0:.1f} s (under cProfile)")
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.dump_stats(path)
    pstats.Stats(str(path)).sort_stats("cumulative").print_stats(r"foxhunt", 30)


def _median(values: list[float | None]) -> float | None:
    import statistics

    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def _cell(v: float | None) -> str:
    return f"{v:>7.2f}" if v is not None else f"{'-':>7}"


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "startup.json")
    ap.add_argument("--repeat", type=int, default=1, help="cold/warm pairs of each table (medians shown)")
    ap.add_argument("--stop-at", choices=("epoch", "training"), default="epoch")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--no-job", action="store_true", help="skip the real `foxhunt run` starts")
    ap.add_argument("--no-phases", action="store_true", help="skip the in-process import/compile table")
    ap.add_argument(
        "--cprofile", type=Path, metavar="FILE", help="instead: the job here under cProfile, to FILE"
    )
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    if args.cprofile is not None:
        with tempfile.TemporaryDirectory() as tmp:
            profile_job(args.cprofile, Path(tmp) / "job", args.sets)
        return 0
    from foxhunt.parallel.idle import idle_cores

    result: dict[str, object] = {"cores": os.cpu_count(), "repeat": args.repeat, "sets": args.sets}
    runs: dict[str, list] = {"phases_cold": [], "phases_warm": [], "job_cold": [], "job_warm": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            for what in ("phases", "job"):
                if (what == "job" and args.no_job) or (what == "phases" and args.no_phases):
                    continue
                caches = Path(tmp) / f"{what}-{i}"
                env = {
                    **os.environ,
                    "NUMBA_CACHE_DIR": str(caches / "numba"),
                    "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
                    "TRITON_CACHE_DIR": str(caches / "triton"),
                }
                for run in ("cold", "warm"):  # the second process reuses the caches the first wrote
                    if what == "phases":
                        runs[f"phases_{run}"].append(phases(env))
                        continue
                    idle = idle_cores()
                    got = job_timeline(env, caches / f"job-{run}", args.sets, args.stop_at)
                    runs[f"job_{run}"].append(got | {"idle_cores": idle})
                    done = "" if got["complete"] else " (incomplete: " + " | ".join(got["tail"]) + ")"
                    took = f"{got['total_s']:.1f} s ({got['cpu_s']:.1f} s CPU), {idle:.1f} idle cores"
                    print(f"job {run} {i + 1}/{args.repeat}: {took}{done}")
    result |= runs
    if runs["phases_cold"]:
        names = [name for name, _ in runs["phases_cold"][0]]
        cold = [_median([dict(r)[n] for r in runs["phases_cold"]]) for n in names]
        warm = [_median([dict(r)[n] for r in runs["phases_warm"]]) for n in names]
        w = max(len(n) for n in names)
        print(f"\n{'phase (fresh process, in job order)':<{w}}  {'cold s':>7}  {'warm s':>7}")
        for name, c, h in zip(names, cold, warm, strict=True):
            print(f"{name:<{w}}  {_cell(c)}  {_cell(h)}")
        print(f"{'total':<{w}}  {_cell(sum(cold))}  {_cell(sum(warm))}")
        result["phases_median"] = {
            "cold": dict(zip(names, cold, strict=True)),
            "warm": dict(zip(names, warm, strict=True)),
        }
    if runs["job_cold"]:
        names = list(runs["job_cold"][0]["phases_s"])
        med = {
            run: {n: _median([r["phases_s"][n] for r in runs[f"job_{run}"]]) for n in names}
            for run in ("cold", "warm")
        }
        totals = {run: _median([r["total_s"] for r in runs[f"job_{run}"]]) for run in ("cold", "warm")}
        cpus = {run: _median([r["cpu_s"] for r in runs[f"job_{run}"]]) for run in ("cold", "warm")}
        w = max(len(n) for n in names)
        print(f"\n{'foxhunt run --profile smoke, phase':<{w}}  {'cold s':>7}  {'warm s':>7}")
        for n in names:
            print(f"{n:<{w}}  {_cell(med['cold'][n])}  {_cell(med['warm'][n])}")
        print(
            f"{'to the ' + ('first epoch' if args.stop_at == 'epoch' else 'training') + ' (end)':<{w}}  "
            f"{_cell(totals['cold'])}  {_cell(totals['warm'])}"
        )
        print(f"{'(the job process, CPU s)':<{w}}  {_cell(cpus['cold'])}  {_cell(cpus['warm'])}")
        result["job_median"] = {"phases_s": med, "total_s": totals, "cpu_s": cpus}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (median of {args.repeat})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result |= {"load_average": os.getloadavg(), "argv": sys.argv}
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
