"""A tuning study and a multi-seed run spread over every GPU of one machine, beside the same work on
one of its GPUs (the two-GPU measurement; it runs on any number of GPUs).

    python bench/two_gpus.py [--profile gpu] [--trials 8] [--seeds 8] [--only tune seeds]
                             [--workers G] [--one-gpu-workers 1] [--set KEY=VALUE ...] [--out DIR]
                             [--json FILE]

Each piece of work runs twice, as a user runs it (a fresh ``foxhunt`` process each, tracking off):

* **all GPUs**: ``--workers G`` with G the GPUs torch sees. The commands name no GPU: each worker asks
  Ray for its share (``tune.gpus_per_trial`` left at its default, ``foxhunt.parallel.gpu_share``),
  one GPU each here, and Ray decides which. (``--workers`` sets another count: on one GPU,
  ``--workers 2`` rehearses the placement with two half shares.)
* **one GPU**: the same command with ``CUDA_VISIBLE_DEVICES`` set to the first GPU and ``--workers 1``,
  one trial (or seed) at a time, as each GPU of the first run works (``--one-gpu-workers W``: W at
  once on that GPU, each with a 1/W share).

``foxhunt tune``: the same trials in both runs. Before each study starts, the bench writes the same
``--trials`` parameter sets into its storage as enqueued trials (drawn once by Optuna's
``RandomSampler`` from the profile's space, seeded by ``run.seed``), which the workers take before
sampling anything, so the number of workers changes what runs when, never what is trained. Pruning is
off (``tune.pruner = none``): every trial trains all its epochs in both runs. ``foxhunt seeds``: the
seeds ``1..--seeds``, the same in both. Both commands start from one feature cache built beforehand
(copied into each run's ``cache/``), so neither times a build.

Reported, in a table and in JSON: each command's wall time, the speed-up, each trial's and seed's
device as its worker recorded it (``tune.json`` and ``seeds.json``: the physical GPU behind each
task's ``cuda:0``), and every trial that failed with its reason. Exit 1 when a command fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "foxhunt.cli"]


def gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def machine() -> dict[str, Any]:
    import platform

    import torch

    names = [torch.cuda.get_device_name(i) for i in range(gpus())]
    return {"gpus": names, "cores": os.cpu_count(), "torch": torch.__version__,
            "python": platform.python_version()}


def sh(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        tail = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{tail}")
    return wall, done


def one_gpu_env() -> dict[str, str]:
    """This environment with only the first GPU visible (the first of the ones already visible)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    first = visible.split(",")[0] if visible else "0"
    return os.environ | {"CUDA_VISIBLE_DEVICES": first}


def trial_sets(profile: str, sets: list[str], n: int) -> list[dict[str, Any]]:
    """``n`` parameter sets from the profile's space, drawn once by a seeded RandomSampler."""
    import optuna

    from foxhunt.config.loader import load_config
    from foxhunt.tune.space import sample

    cfg = load_config(profile=profile, overrides=sets)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    draw = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=cfg.run.seed))
    return [sample(draw.ask(), cfg.tune) for _ in range(n)]


def enqueue(out: Path, params: list[dict[str, Any]], profile: str, sets: list[str]) -> None:
    """The study ``foxhunt tune --out out`` will open, made now with ``params`` waiting in it."""
    import optuna

    from foxhunt.config.loader import load_config
    from foxhunt.tune.study import default_storage, open_storage

    cfg = load_config(profile=profile, overrides=sets)
    storage = open_storage(default_storage(out), cfg.tune)
    study = optuna.create_study(storage=storage, study_name=out.name, direction=cfg.tune.direction.value)
    for p in params:
        study.enqueue_trial(p)


@dataclass(frozen=True)
class Setup:
    """What every run shares: the market's files, its feature cache, the profile and overrides."""

    market: Path
    cache: Path
    profile: str
    sets: list[str]

    def folder(self, out: Path) -> Path:
        """``out`` with the shared cache in its ``cache/``, where the command looks for it."""
        (out / "cache").mkdir(parents=True)
        shutil.copy2(self.cache, out / "cache" / self.cache.name)
        return out

    def args(self) -> list[str]:
        return ["--profile", self.profile, "--data", str(self.market), "--tracking-uri", "none",
                *[a for s in self.sets for a in ("--set", s)]]


def command(cmd: list[str], env: dict[str, str], out: Path, workers: int, summary: str) -> tuple[dict, dict]:
    """Run one foxhunt command; what every run reports, and the body of its ``summary`` file."""
    wall, done = sh(cmd, env)
    print(f"{out.name}: {wall:.1f} s, {workers} worker(s)", flush=True)
    body = json.loads((out / summary).read_text())
    return {
        "command": " ".join(cmd[2:]),
        "visible": env.get("CUDA_VISIBLE_DEVICES", "all"),
        "workers": workers,
        "wall_s": round(wall, 1),
        "devices": body["devices"],
        "stdout_tail": done.stdout[-600:],
    }, body


def tune_run(setup: Setup, out: Path, params: list[dict], workers: int, env: dict[str, str]) -> dict:
    out = setup.folder(out)
    enqueue(out, params, setup.profile, setup.sets)
    cmd = [*CLI, "tune", "--trials", str(len(params)), "--workers", str(workers), "--out", str(out),
           *setup.args()]
    run, body = command(cmd, env, out, workers, "tune.json")
    trials = body["trials"]
    return run | {
        "states": body["states"],
        "trial_s": [t["seconds"] for t in trials],
        "params": [t["params"] for t in trials],
        "values": [t["value"] for t in trials],
        "failed": [{"trial": t["number"], "reason": t["reason"]} for t in trials if t["state"] == "FAIL"],
    }


def seeds_run(setup: Setup, out: Path, seeds: list[int], workers: int, env: dict[str, str]) -> dict:
    out = setup.folder(out)
    cmd = [*CLI, "seeds", "--seeds", ",".join(map(str, seeds)), "--workers", str(workers), "--out", str(out),
           "--keep", "reported", *setup.args()]
    run, body = command(cmd, env, out, workers, "seeds.json")
    return run | {
        "seed_s": [s["seconds"] for s in body["seeds"]],
        "totals": [s["total"] for s in body["seeds"]],
        "failed": [{"seed": s["seed"], "reason": s["stopped"]} for s in body["seeds"] if s["stopped"]],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="gpu")
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--only", nargs="+", choices=("tune", "seeds"), default=["tune", "seeds"])
    ap.add_argument("--workers", type=int, default=0, help="workers of the all-GPU runs (0: the GPUs)")
    ap.add_argument("--one-gpu-workers", type=int, default=1, help="workers of the one-GPU runs")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--out", type=Path, default=Path("/tmp/foxhunt-two-gpus"))
    ap.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "two_gpus.json")
    args = ap.parse_args()
    g = gpus()
    if g < 1:
        raise SystemExit("no CUDA device is visible: this benchmark compares GPUs")
    workers = args.workers or g
    shutil.rmtree(args.out, ignore_errors=True)
    market, build = args.out / "market", args.out / "build"
    sets = ["tune.pruner=none", *args.sets]
    sh([*CLI, "data", "synth", "--profile", args.profile, "--out", str(market), "--quiet"])
    sh([*CLI, "features", "build", "--profile", args.profile, "--data", str(market), "--out", str(build),
        "--quiet", *[a for s in sets for a in ("--set", s)]])
    (cache,) = build.glob("features-*.arrow")
    setup = Setup(market, cache, args.profile, sets)
    every, one = os.environ.copy(), one_gpu_env()
    result: dict[str, Any] = {"machine": machine(), "profile": args.profile, "sets": sets}
    rows: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    if "tune" in args.only:
        params = trial_sets(args.profile, sets, args.trials)
        many = tune_run(setup, args.out / "tune-all", params, workers, every)
        single = tune_run(setup, args.out / "tune-one", params, args.one_gpu_workers, one)
        assert many["params"] == single["params"] == params, "the two studies trained different trials"
        rows.append(("tune", many, single))
    if "seeds" in args.only:
        seeds = list(range(1, args.seeds + 1))
        many = seeds_run(setup, args.out / "seeds-all", seeds, workers, every)
        single = seeds_run(setup, args.out / "seeds-one", seeds, args.one_gpu_workers, one)
        rows.append(("seeds", many, single))
    print(f"\n{'work':<10}{f'{g} GPU(s), s':>14}{'1 GPU, s':>12}{'speed-up':>10}  failed")
    for name, many, single in rows:
        speedup = single["wall_s"] / many["wall_s"]
        result[name] = {"all_gpus": many, "one_gpu": single, "speedup": round(speedup, 2)}
        failed = [*many["failed"], *single["failed"]]
        walls = f"{many['wall_s']:>14.1f}{single['wall_s']:>12.1f}"
        print(f"{name:<10}{walls}{speedup:>9.2f}x  {failed or 'none'}")
    for name, many, single in rows:
        print(f"{name}: devices on {g} GPU(s): {many['devices']}; on one: {single['devices']}")
    print(f"machine: {result['machine']}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
