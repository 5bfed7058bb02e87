"""The main job's start-up: where ``foxhunt run --profile smoke`` spends its time before its first log line.

    .venv/bin/python bench/startup.py [--out bench/results/startup.json] [--no-job]

Two fresh processes per measurement: ``cold``, with numba's cache in a new empty folder (a fresh
machine or a fresh copy of the code: every kernel compiles), then ``warm``, a second process reusing
the cache the first one wrote (the everyday case). ``NUMBA_CACHE_DIR`` points both at a temporary
folder, so the checkout's own ``__pycache__`` is neither read nor written.

Rows: the phases ``foxhunt run`` goes through before its first line, in its order, each timed in one
process (an import row counts only what the rows above have not imported already):
the CLI, torch (the config models import it through ``foxhunt.domain.actions``), pandas and
databento, matplotlib, LightGBM (which imports scikit-learn and SciPy), the rest of the job's
imports, the synthetic market's engine (its eager-signature kernels compile when it is imported),
the config, and the kernel warm-up's tiny market (:mod:`foxhunt.dataset.warmup`; only on a machine
with idle cores, so on a busy 2-core box the job skips it, on a GPU host it runs before the first
line). ``job`` rows: the real ``foxhunt run --profile smoke`` until it prints its first line (then it
is stopped), with the idle-core count that decided the warm-up.
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


def first_line(env: dict[str, str], out: Path) -> tuple[float, str]:
    """Seconds until ``foxhunt run --profile smoke`` prints its first line, and the line; the job
    (and any warm-up children, in its process group) is stopped there."""
    script = Path(sys.executable).parent / "foxhunt"
    # The console script where it is installed; otherwise (a checkout on PYTHONPATH, as on the lent GPU
    # host) the same CLI as a module: the module form imports one more file, under a millisecond.
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "foxhunt.cli"]
    argv = [*cli, "run", "--profile", "smoke", "--out", str(out), "--overwrite"]
    t0 = time.perf_counter()
    job = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    assert job.stdout is not None
    line = job.stdout.readline().decode().rstrip()
    seconds = time.perf_counter() - t0
    os.killpg(job.pid, signal.SIGTERM)
    job.wait()
    return seconds, line


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "startup.json")
    ap.add_argument("--no-job", action="store_true", help="skip the two real `foxhunt run` starts")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from foxhunt.config.loader import load_config
    from foxhunt.features.layout import STACK_FAMILIES
    from foxhunt.features.registry import FAMILIES
    from foxhunt.parallel.idle import idle_cores

    # warmup.start forks one child per family and one for the labels, with a core left for the job.
    row_unit = load_config(profile="smoke").data.row_unit
    warmup_needs = len([n for n in STACK_FAMILIES[row_unit] if n in FAMILIES]) + 2

    result: dict[str, object] = {"cores": os.cpu_count(), "warmup_needs_idle_cores": warmup_needs}
    with tempfile.TemporaryDirectory() as tmp:
        for cache in ("phases", "job"):
            if cache == "job" and args.no_job:
                continue
            env = {**os.environ, "NUMBA_CACHE_DIR": str(Path(tmp) / f"numba-{cache}")}
            for run in ("cold", "warm"):  # the second process reuses the cache the first wrote
                if cache == "phases":
                    result[f"phases_{run}"] = phases(env)
                else:
                    idle = idle_cores()
                    seconds, line = first_line(env, Path(tmp) / f"job-{run}")
                    result[f"job_{run}"] = {"first_line_s": seconds, "line": line, "idle_cores": idle}
    cold, warm = result["phases_cold"], result["phases_warm"]
    w = max(len(name) for name, _ in cold)
    print(f"{'phase (fresh process, in job order)':<{w}}  {'cold s':>7}  {'warm s':>7}")
    for (name, c), (_, h) in zip(cold, warm, strict=True):
        print(f"{name:<{w}}  {c:>7.2f}  {h:>7.2f}")
    print(f"{'total':<{w}}  {sum(c for _, c in cold):>7.2f}  {sum(h for _, h in warm):>7.2f}")
    for run in ("cold", "warm"):
        job = result.get(f"job_{run}")
        if job:
            print(
                f"foxhunt run --profile smoke, {run} numba cache: "
                f"first line after {job['first_line_s']:.2f} s "
                f"({job['idle_cores']:.1f} idle cores, the warm-up needs {warmup_needs}: "
                f"{'on' if job['idle_cores'] >= warmup_needs else 'off'})"
            )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result |= {"load_average": os.getloadavg(), "argv": sys.argv}
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
