"""Which on-disk cache a GPU job's first collection step waits for on a fresh machine.

    python3 bench/first_step.py [--envs 256] [--out bench/results/first_step.json]

On a fresh H200 host the smoke job's first epoch took 81 s and the same job's second run 8.9 s
(issue 16): the first collection's warm-up and capture (``Collector._capture``) waits for something
that a second process finds on disk. Nothing is Inductor-compiled at the smoke profile's 256 episodes,
so the candidates are the other caches a CUDA process fills: the CUDA driver's JIT cache of PTX
(``CUDA_CACHE_PATH``), PyTorch's NVRTC ("jiterator") kernel cache (``TORCH_KERNEL_CACHE_PATH``),
Triton's (``TRITON_CACHE_DIR``), Inductor's (``TORCHINDUCTOR_CACHE_DIR``) and numba's
(``NUMBA_CACHE_DIR``).

Each row is one fresh process that builds the smoke profile's agent and a collector of ``--envs``
episodes on bench/env.py's synthetic market and times CUDA's start, the first exploring forward, the
first env step and the collector's capture (its warm-up steps and the graph capture), then one epoch
of collection. Rows: every cache in a new empty folder (``cold``); every cache as the cold process
left it (``warm``); then warm with one cache emptied at a time: the cache whose emptying brings the
cold time back is the one the first step waits for.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHES = ("CUDA_CACHE_PATH", "TORCH_KERNEL_CACHE_PATH", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
          "NUMBA_CACHE_DIR")

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
laps = {}
import torch
def lap(name):
    global t0
    torch.cuda.synchronize()
    now = time.perf_counter(); laps[name] = now - t0; t0 = now
torch.zeros(1, device="cuda"); lap("torch import, CUDA start")
sys.path.insert(0, "bench")
from env import synthetic_market
from foxhunt.agent.agent import Agent, Mode
from foxhunt.config.loader import load_config
from foxhunt.env.config import EnvConfig
from foxhunt.env.core import TradingEnv
cfg = load_config(profile="smoke")
dev = torch.device("cuda")
agent = Agent(cfg.agent, cfg.env.branches, device=dev, seed=0, replay_capacity=1 << 14)
market = synthetic_market("cuda"); lap("imports, agent and market")
n, steps = int(sys.argv[1]), 64
env = TradingEnv(market, EnvConfig(episode_rows=steps + 1))
obs = env.reset(torch.randint(0, 1000, (n,), device=dev))
agent.policy(obs, Mode.EXPLORE); lap("first exploring forward")
env.step(agent.policy(obs, Mode.GREEDY).actions); lap("first env step")
starts = torch.randint(0, 1000, (n,), device=dev)
collector = agent.collector(market, EnvConfig(episode_rows=steps + 1), n, steps)
collector._capture(); lap("collector capture (warm-up steps + graph)")
collector.collect(starts); lap("one epoch of collection")
print(json.dumps(laps))
"""


def child(env: dict[str, str], envs: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(envs)], env=env, cwd=REPO, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"first_step child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=256)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "first_step.json")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("first_step: needs a CUDA device (it times CUDA's first kernels)")
        return 2
    root = Path(tempfile.mkdtemp(prefix="foxhunt-first-step-"))
    base = {**os.environ, "PYTHONWARNINGS": "ignore"}
    dirs = {name: root / "warm" / name for name in CACHES}
    warm = base | {name: str(path) for name, path in dirs.items()}
    rows = [("cold: every cache empty", child(warm, args.envs))]  # fills the warm folders
    rows.append(("warm: every cache as left", child(warm, args.envs)))
    for name in CACHES:
        empty = root / "empty" / name
        rows.append((f"warm but {name} empty", child(warm | {name: str(empty)}, args.envs)))
        shutil.rmtree(empty, ignore_errors=True)
    keys = list(rows[0][1])
    print(f"{'process':<42}" + "".join(f"{k[:22]:>24}" for k in keys))
    for label, laps in rows:
        print(f"{label:<42}" + "".join(f"{laps[k]:>23.2f}s" for k in keys))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"envs": args.envs, "rows": [{"process": lbl, **laps} for lbl, laps in rows]}
    args.out.write_text(json.dumps(doc, indent=2))
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
