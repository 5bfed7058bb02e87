"""Where `foxhunt run` spends its time: the main job in this process with timers around its stages.

    python bench/stages.py [--profile smoke] [--out DIR] [--json bench/results/stages.json]
    python bench/stages.py --profile smoke --device-sync   # also synchronise CUDA at every timer

The job is the CLI's own (``foxhunt run``, in-process); each timed function is wrapped in place
(inclusive seconds and call counts, nested timers counted in each). With ``--device-sync`` a timer
waits for the device before reading the clock, so GPU work is charged to the stage that queued it
(the job runs a little slower: the pipeline no longer overlaps host and device). The table ends
with the job's wall time and the time before it (Python and foxhunt imports).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

T_START = time.perf_counter()

import torch  # noqa: E402

# (module, attribute path): the stages of the job, the fold end and the per-epoch pieces.
TIMED = [
    ("foxhunt.pipeline", "run_job"),
    ("foxhunt.train.run", "train"),
    ("foxhunt.train.run", "FoldTrainer.__init__"),
    ("foxhunt.train.run", "FoldTrainer.run_epoch"),
    ("foxhunt.train.run", "_fold_result"),
    ("foxhunt.train.run", "_baselines"),
    ("foxhunt.train.run", "validate"),
    ("foxhunt.train.run", "evaluate_selection"),
    ("foxhunt.policy.trained", "CheckpointPolicy.__init__"),
    ("foxhunt.policy.trained", "CheckpointPolicy.policy"),
    ("foxhunt.train.run", "direction_gap"),
    ("foxhunt.train.run", "fold_policies"),
    ("foxhunt.train.run", "market_tensors"),
    ("foxhunt.train.run", "size_run"),
    ("foxhunt.policy.store", "BestCheckpoint.save"),
    ("foxhunt.policy.store", "CheckpointStore.save_epoch"),
    ("foxhunt.train.diagnostics", "DiagnosticsWriter.write"),
    ("foxhunt.train.diagnostics", "EpochStats.read"),
    ("foxhunt.agent.agent", "Agent.__init__"),
    ("foxhunt.agent.agent", "Agent.collect"),
    ("foxhunt.agent.agent", "Agent.learn"),
    ("foxhunt.agent.graph", "GraphedLearn.__init__"),
    ("foxhunt.agent.graph", "GraphedLearn.update"),
    ("foxhunt.agent.replay", "PrioritizedReplay.sample"),
    ("foxhunt.agent.replay", "PrioritizedReplay.update_priorities"),
    ("foxhunt.agent.collect", "Collector._capture"),
    ("foxhunt.backtest.evaluate", "GraphedEvaluation.__init__"),
    ("foxhunt.backtest.evaluate", "GraphedEvaluation.run"),
    ("foxhunt.train.run", "evaluate"),
    ("foxhunt.alpha.check", "run_alpha"),
    ("foxhunt.data.synth", "write_synthetic"),
    ("foxhunt.dataset.build", "get_or_build"),
    ("foxhunt.report.html", "write_report"),
    ("foxhunt.dataset.leaks", "guard"),
    ("foxhunt.dataset.leaks", "check_leaks"),
    ("foxhunt.dataset.leaks", "_run_cuts"),
    ("foxhunt.policy.checkpoint", "copy_checkpoint"),
    ("foxhunt.dataset.warmup", "start"),
    ("foxhunt.dataset.warmup", "Warmup.wait"),
]


def _wrap(fn, name: str, acc: dict, sync: bool):
    @functools.wraps(fn)
    def timed(*a, **kw):
        if sync and torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            if sync and torch.cuda.is_available():
                torch.cuda.synchronize()
            acc[name][0] += time.perf_counter() - t0
            acc[name][1] += 1

    return timed


def install(sync: bool) -> dict[str, list]:
    """Wrap every function of TIMED in place; the accumulator {name: [seconds, calls]}."""
    acc: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for mod_name, path in TIMED:
        mod = importlib.import_module(mod_name)
        owner, attr = mod, path
        if "." in path:
            cls_name, attr = path.split(".")
            owner = getattr(mod, cls_name, None)
        fn = getattr(owner, attr, None) if owner is not None else None
        if fn is None:
            print(f"(not found, not timed: {mod_name}.{path})", file=sys.stderr)
            continue
        setattr(owner, attr, _wrap(fn, path, acc, sync))
    return acc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--out", default=None, help="the run folder (default: a temporary one)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--device-sync", action="store_true")
    ap.add_argument("--set", action="append", default=[], help="config overrides, as foxhunt's --set")
    args = ap.parse_args()
    t_imp = time.perf_counter()
    from foxhunt.cli import app

    acc = install(args.device_sync)
    imports_s = time.perf_counter() - t_imp
    out = args.out or tempfile.mkdtemp(prefix="foxhunt-stages-")
    argv = ["run", "--profile", args.profile, "--out", out, "--overwrite", "-q"]
    for s in args.set:
        argv += ["--set", s]
    t0 = time.perf_counter()
    try:
        app(argv, standalone_mode=False)
    finally:
        job_s = time.perf_counter() - t0
        rows = sorted(acc.items(), key=lambda kv: -kv[1][0])
        print(f"\n{'stage (inclusive)':52s} {'seconds':>9s} {'calls':>7s} {'ms/call':>9s}")
        for name, (s, n) in rows:
            print(f"{name:52s} {s:9.3f} {n:7d} {1e3 * s / max(n, 1):9.2f}")
        print(f"{'before the job (python, torch, foxhunt imports)':52s} {t0 - T_START:9.3f}")
        print(f"{'  of which foxhunt.cli import':52s} {imports_s:9.3f}")
        print(f"{'the job (foxhunt run)':52s} {job_s:9.3f}")
        print(f"{'whole process so far':52s} {time.perf_counter() - T_START:9.3f}")
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {
                        "profile": args.profile,
                        "device_sync": args.device_sync,
                        "set": args.set,
                        "device": "cuda" if torch.cuda.is_available() else "cpu",
                        "stages": {k: {"seconds": v[0], "calls": v[1]} for k, v in acc.items()},
                        "before_job_s": t0 - T_START,
                        "job_s": job_s,
                    },
                    indent=1,
                )
            )


if __name__ == "__main__":
    main()
