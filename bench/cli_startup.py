"""Command-line start-up: ``foxhunt --help`` and every subcommand's ``--help`` against ``python -c pass``.

    .venv/bin/python bench/cli_startup.py [--repeat 7] [--goal 1.0] [--out bench/results/cli_startup.json]

Each row is a fresh process (the installed ``foxhunt`` script beside this interpreter), run
``--repeat`` times after one warm-up run (page cache, .pyc files); the median wall time and the
median CPU time (user + system of the child) are shown beside the same for ``python -c pass``, the
floor of any Python command, and for a one-command typer app's ``--help``, the floor of any typer
command line. The goal (issue 20): every help under ``--goal`` seconds of wall time.
CPU time is the steadier number on a shared machine: wall time also counts waiting for a core.
The commands are read from the CLI itself, so a new command is measured without editing this file.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))


# The framework's own floor: a one-command typer app's --help (typer imports rich and pydantic to
# render and coerce; no foxhunt code).
BARE_TYPER = "import typer; app = typer.Typer(); app.command()(lambda name='x': None); app()"


def commands() -> list[list[str]]:
    """Every group and command path of the CLI (``[]`` is ``foxhunt`` itself), in help order."""
    import typer

    from foxhunt.cli import app

    found: list[list[str]] = []

    def walk(cmd: object, path: list[str]) -> None:
        found.append(path)
        for name, sub in getattr(cmd, "commands", {}).items():  # a group's subcommands
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


def foxhunt_argv() -> list[str]:
    script = Path(sys.executable).parent / "foxhunt"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "foxhunt.cli"]


def timed(argv: list[str], repeat: int) -> dict[str, float]:
    """Median wall and CPU seconds of ``argv`` over ``repeat`` runs (after one warm-up run)."""
    env = {**os.environ, "COLUMNS": "100"}
    subprocess.run(argv, env=env, capture_output=True, check=True)
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=True)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus), "runs": repeat}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--goal", type=float, default=1.0, help="wall seconds every help must stay under")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "cli_startup.json")
    args = ap.parse_args()
    from run import hardware

    base = timed([sys.executable, "-c", "pass"], args.repeat)
    imported = timed([sys.executable, "-c", "import foxhunt.cli"], args.repeat)
    bare = timed([sys.executable, "-c", BARE_TYPER, "--help"], args.repeat)
    rows = [
        {"command": "python -c pass", **base},
        {"command": "bare typer app --help", **bare},
        {"command": "python -c 'import foxhunt.cli'", **imported},
    ]
    fox = foxhunt_argv()
    for path in commands():
        cost = timed([*fox, *path, "--help"], args.repeat)
        rows.append({"command": " ".join(["foxhunt", *path, "--help"]), **cost})
    for r in rows:
        r["over_python_s"] = r["wall_s"] - base["wall_s"]
        r["meets_goal"] = r["wall_s"] < args.goal
    helps = [r for r in rows if r["command"].endswith("--help")]
    w = max(len(r["command"]) for r in rows)
    print(f"{'command':<{w}}  {'wall s':>7}  {'cpu s':>6}  {'- python':>8}  goal < {args.goal:g} s")
    for r in rows:
        mark = ("yes" if r["meets_goal"] else "NO") if r in helps else ""
        cost = f"{r['wall_s']:>7.3f}  {r['cpu_s']:>6.3f}  {r['over_python_s']:>8.3f}"
        print(f"{r['command']:<{w}}  {cost}  {mark}")
    worst = max(helps, key=lambda r: r["wall_s"])
    print(
        f"{sum(r['meets_goal'] for r in helps)}/{len(helps)} helps under {args.goal:g} s; slowest "
        f"{worst['command']} {worst['wall_s']:.3f} s (median of {args.repeat}); load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    hw = hardware()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    body = {"hardware": hw, "load_average": os.getloadavg(), "goal_s": args.goal, "rows": rows}
    args.out.write_text(json.dumps(body | {"argv": sys.argv}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
