"""The ablation table of issue 22: each learning mechanism switched off (or on) alone, over seeds.

    .venv/bin/python bench/ablation.py --profile smoke --seeds 101,102,103,104 --out runs/ablation \\
        [--rows baseline,per,mirror_off] [--set KEY=VALUE ...] [--workers 4] [--chunk 4] [--data PATH ...]

Every row is one ``foxhunt seeds`` study of the profile with the row's ``--set`` overrides after the
common ones (so a row's value wins), run as a subprocess (a row's GPU memory and Ray instance end
with it). Its seeds run in parts of ``--chunk`` seeds, ``OUT/<row>/seeds-<s>-<s>.../``, merged into
``OUT/<row>/seeds.json`` (:func:`foxhunt.tune.seeds.merge_studies`). A part whose ``seeds.json``
records the same profile and overrides (and only wanted seeds) is reused, whatever chunk size made
it, so the same command run again after a time limit cut it off carries on where it stopped. After
every row the script rewrites ``OUT/ablation.json`` and ``OUT/ablation.md``: per row the capture
(mean and Student-t 95% interval over the seeds, agent / reference rule over the folds), the seeds
that beat flat, the mean net PnL over the folds and the mean trades per seed, every number read
from the row's ``seeds.json``.

The rows name each mechanism's config switch (0 = off, as everywhere in foxhunt); ``MISSING`` lists
what the table cannot isolate and why. Exit status: 0 when every row finished, 1 when a row's study
failed (its line in the table says so), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foxhunt.atomic import write_json, write_text
from foxhunt.config.models import FoxhuntConfig
from foxhunt.errors import FoxhuntError, FrontDoor
from foxhunt.outputs import Keep
from foxhunt.tune.seeds import SEEDS_FILE, committee_result, interval, merge_studies, voters

ABLATION_FILE = "ablation.json"
TABLE_FILE = "ablation.md"
INPUTS_FILE = "ablation.inputs.json"


@dataclass(frozen=True)
class Row:
    """One study of the table: ``sets`` applied after the common overrides."""

    name: str
    sets: tuple[str, ...]
    what: str


BASELINE = Row("baseline", (), "the profile as it is")

PPO_SETS = (
    "agent.algo=ppo",
    "agent.ppo.lr=3e-3",
    "agent.ppo.minibatches=16",
    "agent.ppo.gamma=0.97",
    "train.epochs=20",
)

# Relative to the smoke and gpu profiles: C51 (1.0) + IQN (0.25) losses, n_step 21 with the decision
# bootstrap, uniform replay, NoisyNet (sigma 0.5) + epsilon 0.1 (Thompson sampling off since it was
# measured to hurt: the `thompson_on` row), an 8-expert mixture, trained aux heads, the long/short
# mirror, PopArt, AdamW decay 0.1, the input screen, no CQL, no shaping. A row is a change from that:
# one that set what is now a default would retrain the baseline under another name.
ROWS: tuple[Row, ...] = (
    BASELINE,
    Row("iqn_off", ("agent.loss.iqn=0",), "C51 only: the IQN loss off"),
    # Actions, targets, the Thompson draw, the Q-variance and the magnitude branch's input read only the
    # trained heads (foxhunt.agent.network.TrainedHeads). The atom-entropy bonus regularises the C51
    # heads: left on, it would train them and the trunk beneath through a head the row switches off.
    Row(
        "c51_off",
        ("agent.loss.c51=0", "agent.loss.magnitude_c51=0", "agent.loss.atom_entropy=0"),
        "IQN only: the C51 losses off",
    ),
    Row("n_step_1", ("agent.learn.n_step=1",), "one-step targets instead of 21-step windows"),
    Row("bootstrap_steps", ("agent.learn.bootstrap=steps",), "fixed 21-step windows, not to a decision"),
    Row("per", ("agent.replay.alpha=0.6",), "prioritised replay (alpha 0.6, beta 0.4) instead of uniform"),
    Row("noisy_off", ("agent.network.noisy_sigma=0",), "NoisyNet off (plain linear heads)"),
    Row("epsilon_off", ("agent.explore.epsilon=0",), "epsilon-greedy off"),
    Row("thompson_on", ("agent.explore.thompson=0.5",), "Thompson sampling of half the direction choices"),
    # With Thompson off by default, NoisyNet alone is `epsilon_off` and epsilon alone `noisy_off`.
    Row(
        "thompson_only",
        ("agent.network.noisy_sigma=0", "agent.explore.epsilon=0", "agent.explore.thompson=0.5"),
        "exploration by Thompson sampling alone",
    ),
    # One expert under a gate of 1 is a plain residual MLP block: the mixture without its mixing.
    Row("moe_off", ("agent.network.experts=1", "agent.loss.moe_balance=0"), "plain MLP trunk (one expert)"),
    Row("aux_off", ("agent.loss.aux=0",), "aux heads untrained (loss weight 0), their state slots 0"),
    Row("mirror_off", ("agent.network.symmetry=none",), "no long/short mirror symmetry"),
    Row("popart_off", ("agent.learn.popart=0",), "PopArt off"),
    Row("cql_on", ("agent.loss.cql=0.1",), "conservative Q-learning penalty 0.1"),
    Row("entry_bonus", ("env.rewards.entry_bonus=0.5",), "shaping: entry-quality bonus 0.5"),
    Row("exit_timing", ("env.rewards.exit_timing_bonus=0.5",), "shaping: exit-timing bonus 0.5"),
    Row(
        "drawdown_recovery",
        ("env.rewards.drawdown_recovery_bonus=0.5",),
        "shaping: drawdown-recovery bonus 0.5",
    ),
    Row("regime_shift", ("env.rewards.regime_shift_penalty=0.5",), "shaping: regime-shift penalty 0.5"),
    Row("weight_decay_off", ("agent.learn.weight_decay=0",), "no AdamW decay of the weight matrices"),
    Row("screen_off", ("agent.network.input_screen=0",), "the input screen off: every column read"),
    # The second learner (docs/ppo.md): its settings as measured on the smoke market of synth.seed 101
    # (docs/results/2026-12-07-ppo.md); 20 epochs of one rollout each, the DQN rows' 6 epochs of 256
    # updates costing about as much on a CPU.
    Row("ppo", PPO_SETS, "PPO (agent.algo = ppo) instead of the DQN learner"),
    # The dormant machinery of issue 56 (docs/results/2026-12-07-dormant.md). Kelly sizing acts on the
    # one magnitude of the direction-only profiles as a factor of the max position (it once did nothing).
    Row("kelly_off", ("env.sizing.kelly_weight=0",), "no Kelly factor (what one magnitude did before)"),
    Row("restarts_3", ("agent.learn.restart_epochs=3",), "a warm restart of the cosine schedule at epoch 3"),
    Row("plateau_on", ("train.plateau.patience=2",), "the plateau ladder at a patience a 6-epoch fold fits"),
    # Curriculum and per-branch epsilon act on the execution branches: run them over the full action space
    # (--set 'env.branches={magnitude=3, magnitude_fractions=[0.25, 0.5, 1.0], order_type=3, urgency=3}').
    Row(
        "curriculum",
        ("agent.curriculum.magnitude=2", "agent.curriculum.order_type=4", "agent.curriculum.urgency=4"),
        "direction alone for 2 epochs, + magnitude for 2, then every branch",
    ),
    Row(
        "branch_epsilon",
        (
            "agent.explore.branch_epsilon.magnitude=0.3",
            "agent.explore.branch_epsilon.order_type=0.3",
            "agent.explore.branch_epsilon.urgency=0.3",
        ),
        "epsilon 0.3 on the execution branches (0.1 on the direction)",
    ),
    Row(
        "counterfactual",
        ("agent.counterfactual.weight=1",),
        "counterfactual execution targets: every untaken magnitude, order type, urgency relabelled",
    ),
    # The same two under PPO (docs/ppo.md), beside the `ppo` row; over the full action space too. The
    # curriculum keeps the DQN row's order (direction, + magnitude, then every branch) at 4 and 8 of
    # PPO's 20 epochs: the released execution heads have 12 epochs to learn in.
    Row(
        "ppo_counterfactual",
        (*PPO_SETS, "agent.counterfactual.weight=1"),
        "PPO + counterfactual targets: the all-action gradient over every execution value at each entry",
    ),
    Row(
        "ppo_curriculum",
        (
            *PPO_SETS,
            "agent.curriculum.magnitude=4",
            "agent.curriculum.order_type=8",
            "agent.curriculum.urgency=8",
        ),
        "PPO, direction alone for 4 epochs, + magnitude for 4, then every branch",
    ),
)
ROW_NAMES = {r.name: r for r in ROWS}

MISSING: tuple[str, ...] = ()


def seed_chunks(seeds: list[int], size: int) -> list[list[int]]:
    """``seeds`` in consecutive parts of at most ``size``."""
    return [seeds[i : i + size] for i in range(0, len(seeds), size)]


def part_folder(row_dir: Path, seeds: list[int]) -> Path:
    return row_dir / ("seeds-" + "-".join(map(str, seeds)))


def row_sets(common: list[str], row: Row) -> list[str]:
    """The ``--set`` list of a row's study, as ``foxhunt seeds`` records it in ``seeds.json``."""
    return [*common, *row.sets]


def finished_parts(
    row_dir: Path, profile: str, sets: list[str], seeds: list[int]
) -> list[tuple[Path, dict[str, Any]]]:
    """The parts under ``row_dir`` that already hold a result of these inputs: a ``seeds.json`` with
    the same profile and overrides whose seeds are all wanted (and in no other part found), in the
    order of their first seed in ``seeds``. Any chunk size of an earlier call counts."""
    found: list[tuple[Path, dict[str, Any]]] = []
    covered: set[int] = set()
    for path in sorted(row_dir.glob(f"seeds-*/{SEEDS_FILE}")):
        body = json.loads(path.read_text())
        got = {int(s["seed"]) for s in body.get("seeds", [])}
        same = body.get("profile") == profile and body.get("sets") == sets
        if same and got and got <= set(seeds) and not got & covered:
            found.append((path, body))
            covered |= got
    return sorted(found, key=lambda part: seeds.index(int(part[1]["seeds"][0]["seed"])))


def seeds_command(
    profile: str,
    sets: list[str],
    seeds: list[int],
    out: Path,
    data: list[Path],
    workers: int,
    tracking: str,
    keep: Keep = Keep.REPORTED,
) -> list[str]:
    """The ``foxhunt seeds`` command line of one part."""
    cmd = [sys.executable, "-m", "foxhunt.cli", "seeds", "--profile", profile, "--out", str(out)]
    cmd += ["--seeds", ",".join(map(str, seeds)), "--workers", str(workers), "--tracking-uri", tracking]
    cmd += ["--keep", keep.value]
    cmd += ["--overwrite", "-q"]  # a part is rerun only when it holds no result of these inputs
    for path in data:
        cmd += ["--data", str(path)]
    for s in sets:
        cmd += ["--set", s]
    return cmd


@dataclass
class Part:
    """Seeds of one row's study still to train: one ``foxhunt seeds`` call into ``folder``."""

    row: Row
    seeds: list[int]
    folder: Path
    cmd: list[str]
    returncode: int | None = None


def plan_row(row: Row, args: argparse.Namespace, say: Any = print) -> list[Part]:
    """The parts of ``row`` that hold no result yet (the others are reused), ``args.chunk`` seeds each."""
    row_dir = args.out / row.name
    sets = row_sets(args.set, row)
    if args.overwrite:  # nothing of an earlier ablation here is this one's (its data may differ)
        for stale in row_dir.glob(f"seeds-*/{SEEDS_FILE}"):
            stale.unlink()
    reused = finished_parts(row_dir, args.profile, sets, args.seeds)
    done = {int(s["seed"]) for _, body in reused for s in body["seeds"]}
    if reused:
        say(f"{row.name}: seeds {sorted(done)} reused from {', '.join(str(p.parent) for p, _ in reused)}")
    parts = []
    for chunk in seed_chunks([s for s in args.seeds if s not in done], args.chunk):
        folder = part_folder(row_dir, chunk)
        workers = min(args.workers, len(chunk))
        cmd = seeds_command(
            args.profile, sets, chunk, folder, args.data, workers, args.tracking_uri, args.keep
        )
        parts.append(Part(row, chunk, folder, cmd))
    return parts


def run_part(part: Part, say: Any = print) -> Part:
    """One ``foxhunt seeds`` call; its output goes to ``<folder>.log`` beside the part's folder."""
    (part.folder / SEEDS_FILE).unlink(missing_ok=True)  # a result of other inputs must not survive
    part.folder.parent.mkdir(parents=True, exist_ok=True)
    log = part.folder.with_suffix(".log")
    say(f"{part.row.name}: seeds {part.seeds} ... ({log})")
    t0 = time.perf_counter()
    with log.open("w") as sink:
        ran = subprocess.run(part.cmd, check=False, stdout=sink, stderr=subprocess.STDOUT)
    part.returncode = ran.returncode
    say(f"{part.row.name}: seeds {part.seeds} rc {part.returncode} in {time.perf_counter() - t0:.0f} s")
    return part


def row_study(row: Row, args: argparse.Namespace, failed: list[Part]) -> dict[str, Any]:
    """The row's merged study of every wanted seed (written to ``OUT/<row>/seeds.json``), or
    ``{"failed": ...}`` when one of its parts failed or a seed has no result."""
    if failed:
        part = failed[0]
        log = part.folder.with_suffix(".log")
        return {"failed": f"foxhunt seeds exited {part.returncode} on seeds {part.seeds} (log {log})"}
    row_dir = args.out / row.name
    parts = finished_parts(row_dir, args.profile, row_sets(args.set, row), args.seeds)
    missing = set(args.seeds) - {int(s["seed"]) for _, body in parts for s in body["seeds"]}
    if missing:
        return {"failed": f"no result for seeds {sorted(missing)}"}
    merged = merge_studies(parts) | {
        "committee": parts_committee(parts, args.device),
        "part_committees": part_committees(parts),
    }
    write_json(row_dir / SEEDS_FILE, merged, indent=2, default=float)
    return merged


def part_committees(parts: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any] | None:
    """Each part's own committee (its ``foxhunt seeds`` call's, over the part's seeds) as one unit: a
    GPU measurement of committees of 8 is ``--chunk 8 --workers 8``, one part per committee. Their
    captures (mean and 95% interval over the parts, :func:`foxhunt.tune.seeds.interval`) and how many
    beat flat; None when no part has a committee (parts of one seed)."""
    found = [body["committee"] for _, body in parts if body.get("committee")]
    if not found:
        return None
    captures = [c["capture"] for c in found if c["capture"] is not None]
    return {
        "members": [len(body["seeds"]) for _, body in parts if body.get("committee")],
        "captures": captures,
        "capture": interval(captures),
        "beats_flat": sum(bool(c["beats_flat"]) for c in found),
        "n": len(found),
    }


def parts_committee(parts: list[tuple[Path, dict[str, Any]]], device: str) -> dict[str, Any] | None:
    """The committee of every finished seed of a row's parts (:func:`foxhunt.tune.seeds.
    committee_result`), on the first part's cache and config; None when a part's runs, checkpoints or
    cache are not on this machine (only its ``seeds.json`` was kept)."""
    first = parts[0][0].parent
    runs = [
        path.parent / f"seed{s['seed']}" for path, body in parts for s in body["seeds"] if not s["stopped"]
    ]
    caches = sorted((first / "cache").glob("*.arrow"))
    if not caches or not all((r / "folds.json").exists() for r in runs):
        return None
    named = [r / v for r in runs for f in json.loads((r / "folds.json").read_text()) for v in voters(f)]
    if not all(path.exists() for path in named):  # checkpoints deleted to save space: no votes
        return None
    cfg = FoxhuntConfig.model_validate(json.loads((first / "seeds.config.json").read_text())["config"])
    result = committee_result(caches[0], cfg, runs, device=device)
    return result.to_dict() if result is not None else None


def table_row(row: Row, study: dict[str, Any], sets: list[str]) -> dict[str, Any]:
    """What the table shows of one row's study, every number taken from its ``seeds.json`` body."""
    entry: dict[str, Any] = {"row": row.name, "what": row.what, "sets": list(row.sets), "all_sets": sets}
    if "failed" in study:
        return entry | {"failed": study["failed"]}
    done = [s for s in study["seeds"] if not s["stopped"]]
    trades = [sum(f["trades"] for f in s["folds"]) for s in done]
    return entry | {
        "capture": study["capture"],
        "beats_flat": study["beats_flat"],
        "finished": study["finished"],
        "stopped": study["stopped"],
        "net_pnl_total": study["net_pnl_total"],
        "trades_mean": sum(trades) / len(trades) if trades else None,
        "seeds": [s["seed"] for s in study["seeds"]],
        "committee": study.get("committee"),
        "part_committees": study.get("part_committees"),
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    """The table: row, overrides, capture mean, 95% interval, beat flat, mean net PnL, trades, and the
    seeds' committee (its capture and net PnL over the folds; with parts of several seeds, each part's
    committee too)."""
    lines = [
        header,
        "",
        "| row | overrides | capture mean | 95% interval | beat flat | mean net PnL | trades | committee |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sets = " ".join(f"`{s}`" for s in r["sets"]) or "(none)"
        if "failed" in r:
            lines.append(f"| {r['row']} | {sets} | failed: {r['failed']} | | | | | |")
            continue
        c, pnl = r["capture"], r["net_pnl_total"]
        ci = f"[{_pct(c['lo'])}, {_pct(c['hi'])}]" if c["lo"] is not None else "n/a"
        beat = f"{r['beats_flat']}/{r['finished']}"
        beat += f" ({len(r['stopped'])} stopped)" if r["stopped"] else ""
        net = "n/a" if pnl["mean"] is None else f"{pnl['mean']:+,.0f}"
        trades = "n/a" if r["trades_mean"] is None else f"{r['trades_mean']:.1f}"
        com = r.get("committee")
        committee = "n/a" if not com else f"{_pct(com['capture'])} ({com['total']:+,.0f})"
        units = r.get("part_committees")
        if units:  # each part's committee a unit: their captures, mean, interval and beat flat
            uc = units["capture"]
            span = f" [{_pct(uc['lo'])}, {_pct(uc['hi'])}]" if uc["lo"] is not None else ""
            each = ", ".join(_pct(c) for c in units["captures"])
            unit_beat = f"{units['beats_flat']}/{units['n']} beat flat"
            committee += f"; per part: {each} (mean {_pct(uc['mean'])}{span}, {unit_beat})"
        lines.append(
            f"| {r['row']} | {sets} | {_pct(c['mean'])} | {ci} | {beat} | {net} | {trades} | {committee} |"
        )
    return "\n".join(lines) + "\n"


def choose_rows(names: str | None, baseline: bool = True) -> list[Row]:
    """``--rows a,b``: those rows, the baseline first whether named or not (unless ``baseline`` is
    off: ``--no-baseline``, for a table of other learners' rows alone); default every row."""
    if not names:
        return list(ROWS)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in ROW_NAMES]
    if unknown:
        raise FoxhuntError("--rows", f"unknown rows {unknown}", f"choose from {', '.join(ROW_NAMES)}")
    first = [BASELINE] if baseline else []
    return [*first, *(ROW_NAMES[n] for n in wanted if n != BASELINE.name)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="smoke", help="packaged profile of every row (default smoke)")
    ap.add_argument("--seeds", required=True, help="comma-separated run seeds, e.g. 101,102,103,104")
    ap.add_argument("--out", type=Path, required=True, help="folder for the rows' studies and the table")
    ap.add_argument("--rows", default=None, help=f"comma-separated rows (default all): {','.join(ROW_NAMES)}")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every row")
    ap.add_argument("--data", action="append", type=Path, default=[], help="DBN files (default: synthetic)")
    ap.add_argument("--workers", type=int, default=1, help="seeds trained at once within a part")
    ap.add_argument("--chunk", type=int, default=0, help="seeds per foxhunt seeds call (default: all)")
    ap.add_argument("--jobs", type=int, default=1, help="foxhunt seeds calls at once (e.g. CPU rows)")
    ap.add_argument("--tracking-uri", default="none", help="MLflow store of the studies (default: none)")
    ap.add_argument(
        "--keep",
        type=Keep,
        default=Keep.REPORTED,
        choices=list(Keep),
        help="checkpoints each part keeps of its seeds (default reported: the voters; all: the rings too)",
    )
    ap.add_argument("--overwrite", action="store_true", help="retrain every part, whatever --out holds")
    ap.add_argument(
        "--no-baseline",
        dest="baseline",
        action="store_false",
        help="with --rows: only the rows named (no baseline row; e.g. PPO's rows against each other)",
    )
    ap.add_argument("--device", default="cpu", help="where each row's committee is judged (default cpu)")
    args = ap.parse_args(argv)
    try:
        args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        args.seeds = []
    if not args.seeds or len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0:
        raise FoxhuntError("--seeds", "not a list of distinct seeds", "pass e.g. --seeds 101,102,103,104")
    if args.workers < 1 or args.jobs < 1 or args.chunk < 0:
        raise FoxhuntError(
            "--workers/--jobs/--chunk", "must be >= 1 / >= 1 / >= 0", "pass e.g. --workers 4 --chunk 4"
        )
    args.chunk = args.chunk or len(args.seeds)
    args.rows = choose_rows(args.rows, args.baseline)
    return args


def claim(args: argparse.Namespace) -> None:
    """Refuse an ``--out`` holding an ablation of another profile, overrides or data (its parts would
    be silently mixed with this one's), unless ``--overwrite``; record this one's inputs."""
    inputs = {"profile": args.profile, "sets": args.set, "data": [str(p) for p in args.data]}
    marker = args.out / INPUTS_FILE
    if marker.exists() and json.loads(marker.read_text()) != inputs and not args.overwrite:
        raise FoxhuntError(
            args.out, f"holds an ablation of other inputs ({INPUTS_FILE})", "pass --overwrite or a new --out"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(marker, inputs, indent=2)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        claim(args)
    except FoxhuntError as err:
        print(err.render(FrontDoor.CLI), file=sys.stderr)  # a script of options: fixes worded as them
        return err.exit_code
    header = (
        f"Ablation: profile `{args.profile}`, seeds {','.join(map(str, args.seeds))}"
        + (f", common overrides {' '.join(f'`{s}`' for s in args.set)}" if args.set else "")
        + ". Capture = agent / reference rule net PnL over the folds (mean and Student-t 95% interval over "
        "the seeds); beat flat = seeds whose net PnL over the folds beats flat's; mean net PnL = over the "
        "folds, mean over the seeds; trades = per seed over the folds."
    )
    plans = {row.name: plan_row(row, args) for row in args.rows}
    pending = {row.name: len(plans[row.name]) for row in args.rows}
    failed: dict[str, list[Part]] = {row.name: [] for row in args.rows}
    rows: dict[str, dict[str, Any]] = {}

    def settle() -> None:
        """Table the rows whose parts have all ended (in row order), rewrite the outputs."""
        for row in args.rows:
            if row.name not in rows and pending[row.name] == 0:
                study = row_study(row, args, failed[row.name])
                rows[row.name] = table_row(row, study, row_sets(args.set, row))
        tabled = [rows[r.name] for r in args.rows if r.name in rows]
        body = {
            "profile": args.profile,
            "sets": args.set,
            "seeds": args.seeds,
            "data": [str(p) for p in args.data],
            "rows": tabled,
            "missing": list(MISSING),
        }
        write_json(args.out / ABLATION_FILE, body, indent=2, default=float)
        write_text(args.out / TABLE_FILE, markdown(tabled, header))

    settle()  # rows with every seed reused
    # Parts in row order, `--jobs` at once (each its own process; threads only wait on them).
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_part, part) for row in args.rows for part in plans[row.name]]
        for future in as_completed(futures):
            part = future.result()
            pending[part.row.name] -= 1
            if part.returncode != 0:
                failed[part.row.name].append(part)
            settle()
    rows_in_order = [rows[r.name] for r in args.rows]
    print(markdown(rows_in_order, header))
    for note in MISSING:
        print(f"not isolated: {note}")
    return 1 if any("failed" in r for r in rows_in_order) else 0


if __name__ == "__main__":
    sys.exit(main())
