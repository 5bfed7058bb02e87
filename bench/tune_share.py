"""Trials sharing one GPU: the same study run one trial at a time and W trials at once, each of the
concurrent trials declaring a 1/W share of the GPU to Ray (``tune.gpus_per_trial`` left at its
default: the visible GPUs divided among the workers).

    python bench/tune_share.py [--trials 4] [--workers 4] [--profile smoke] [--set KEY=VALUE ...]

Both studies run ``foxhunt tune`` as a user would (a fresh process each, tracking off, pruning off so
both train every trial to the end), on the same synthetic market written once. Reported: wall time
of each command, the mean seconds per trial (a trial's own ``seconds``), and the speed-up of the
study. Prints a table and writes bench/results/tune_share.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from run import hardware  # noqa: E402


def machine() -> dict:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return hardware() | {"gpu": gpu, "torch": torch.__version__}


def study(out: Path, market: Path, trials: int, workers: int, profile: str, sets: list[str]) -> dict:
    cmd = [
        sys.executable, "-m", "foxhunt.cli", "tune", "--profile", profile, "--data", str(market),
        "--trials", str(trials), "--workers", str(workers), "--out", str(out), "--tracking-uri", "none",
        "--quiet", "--set", "tune.pruner=none", *[a for s in sets for a in ("--set", s)],
    ]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    body = json.loads((out / "tune.json").read_text())
    print(f"{workers} worker(s): {wall:.1f} s wall; {done.stdout.strip()[-300:]}", flush=True)
    seconds = [t["seconds"] for t in body["trials"] if t.get("seconds") is not None]
    return {
        "workers": workers,
        "wall_s": round(wall, 1),
        "trials_finished": len(seconds),
        "trial_s_mean": round(sum(seconds) / max(len(seconds), 1), 1),
        "best_value": body.get("best", {}).get("value") if isinstance(body.get("best"), dict) else None,
        "stdout_tail": done.stdout[-400:],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "tune_share.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        market = root / "market"
        subprocess.run(
            [sys.executable, "-m", "foxhunt.cli", "data", "synth", "--profile", args.profile,
             "--out", str(market), "--quiet"],
            check=True,
        )
        one = study(root / "one", market, args.trials, 1, args.profile, args.sets)
        many = study(root / "many", market, args.trials, args.workers, args.profile, args.sets)
    speedup = one["wall_s"] / many["wall_s"]
    print(f"{'study':<28}{'wall s':>10}{'s / trial':>12}{'trials':>8}")
    for name, r in (("1 trial at a time", one), (f"{args.workers} at once, 1/{args.workers} GPU each", many)):
        print(f"{name:<28}{r['wall_s']:>10.1f}{r['trial_s_mean']:>12.1f}{r['trials_finished']:>8}")
    print(f"speed-up of the study: {speedup:.2f}x  ({machine()})")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {"hardware": machine(), "trials": args.trials, "sets": args.sets, "one_at_a_time": one,
             "concurrent": many, "speedup": round(speedup, 2)},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
