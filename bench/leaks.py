"""Leak-guard benchmark: seconds of ``guard()`` (the call in front of alpha, train, run and seeds) on
the market of a profile, written once, and of its parts, median of ``--repeat`` runs after a warm-up
(numba compiled and cached).

    .venv/bin/python bench/leaks.py [--profile smoke] [--repeat 3] [--out bench/results/leaks.json]
    git show HEAD:src/foxhunt/dataset/leaks.py > /tmp/leaks_head.py
    .venv/bin/python bench/leaks.py --leaks /tmp/leaks_head.py   # another version, same market
    .venv/bin/python bench/leaks.py --set synth.sessions=6 --workers 4   # a larger market, 4 forks

``--leaks FILE`` times that version of ``foxhunt/dataset/leaks.py`` instead of the installed one
(before/after comparisons on one machine in one minute). ``--set KEY=VALUE`` (repeatable) changes
the profile as the command line's ``--set`` does (e.g. the market's size: ``synth.sessions``,
``synth.events_per_session``); ``--workers N`` replaces ``leaks.cut_workers`` (the processes for
the cuts, chosen from the idle cores and free memory) by N, so a loaded machine still times the
forked path. The parts: ``load_market`` (the DBN decode), ``check_leaks`` (the three checks; its
cuts in ``leaks.cut_workers`` forked processes where the version has them, and ``check_leaks, 1p``
with all of them in this process) and, inside it, ``perturb_after`` (the changed future; in this
process only, so 0 where the cuts are forked); then the pieces of the check, each alone in this
process, from which a many-core host's time can be estimated: ``base rows`` and ``base features``
(the unperturbed market's), ``slowest cut`` (one cut's ``perturb_after``, rows and features, the
slowest of the cuts) and ``fold checks`` (checks 2 and 3 on the base features); where the version
has them, the decision path's (issue 58): ``decision base`` (the unperturbed labels, cache and
market), ``coverage`` (its jobs one after the other: the many cut rows) and ``input screen``.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from foxhunt.config.loader import load_config
from foxhunt.data.ingest import load_market
from foxhunt.data.synth import write_synthetic
from foxhunt.dataset.cache import compute_features
from foxhunt.features.pipeline import rows_from_market

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from run import hardware  # noqa: E402


def leaks_module(path: Path | None):
    """The installed leak guard, or the version in ``path`` (loaded under its own name)."""
    if path is None:
        from foxhunt.dataset import leaks

        return leaks
    spec = importlib.util.spec_from_file_location("foxhunt_bench_leaks", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def check_parts(leaks, perturb, md, cfg) -> dict[str, float]:
    """Seconds of the pieces of the check, each alone in this process (module docstring), computed
    as ``check_leaks`` does (its cuts placed and perturbed alike: the version's ``Timing``)."""
    out = {}
    t0 = time.perf_counter()
    inp = rows_from_market(md, cfg.data)
    out["base rows"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    feats = compute_features(inp, cfg)
    out["base features"] = time.perf_counter() - t0
    n, cuts = len(inp), []
    for j, frac in enumerate(leaks.DEFAULT_CUTS):
        t_cut = int(inp.ts[min(max(round(frac * (n - 1)), 0), n - 1)])
        timing = (leaks.Timing.INSERT, leaks.Timing.DELETE)[j % 2]
        t0 = time.perf_counter()
        other = perturb(md, t_cut, seed=j, tick=cfg.data.tick_size, timing=timing)
        compute_features(rows_from_market(other, cfg.data), cfg)
        cuts.append(time.perf_counter() - t0)
    out["slowest cut"] = max(cuts)
    t0 = time.perf_counter()
    if not hasattr(leaks, "fold_users"):  # a leaks.py before the measured purge check
        for span in set(leaks.fold_spans(cfg).values()):
            _, _, folds = leaks.scaler_leaks(feats.values, feats.columns, cfg, span)
            leaks.purge_problems(folds, span, cfg.folds.embargo_rows, "bench")
    for span, _, written in getattr(leaks, "fold_users", lambda *_: [])(cfg, inp):
        _, _, folds = leaks.scaler_leaks(feats.values, feats.columns, cfg, span)
        leaks.purge_problems(folds, span, cfg.folds.embargo_rows, "bench", written)
    out["fold checks"] = time.perf_counter() - t0
    if hasattr(leaks, "coverage_jobs"):  # the decision path's checks (issue 58), each alone here
        span = leaks.fold_spans(cfg)["training"]
        folds = leaks.make_folds(feats.values, feats.columns, cfg.folds, span)
        t0 = time.perf_counter()
        decision = leaks.decision_base(inp, feats, cfg, folds[0], span, leaks.product_instrument("ES"))
        out["decision base"] = time.perf_counter() - t0
        summary, jobs = leaks.coverage_jobs(inp, feats, decision, cfg, None, 0)
        t0 = time.perf_counter()
        for job in jobs:
            job()
        out[f"coverage ({summary.rows} rows)"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        leaks.screen_problems(decision, folds, 0)
        out["input screen"] = time.perf_counter() - t0
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--leaks", type=Path, default=None, help="another leaks.py to time (default: installed)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a profile override")
    ap.add_argument("--workers", type=int, default=None, help="processes for the cuts (default: cut_workers)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "leaks.json")
    args = ap.parse_args()
    cfg = load_config(args.profile, overrides=args.set)
    leaks = leaks_module(args.leaks)
    if args.workers is not None:
        leaks.cut_workers = lambda *_a, **_kw: args.workers  # check_leaks looks it up at each call
    # The market is removed afterwards: a production-sized one is gigabytes.
    with tempfile.TemporaryDirectory(prefix="foxhunt-bench-leaks-") as market_dir:
        return bench(args, cfg, leaks, write_synthetic(cfg.synth, Path(market_dir)))


def bench(args: argparse.Namespace, cfg, leaks, files: list[Path]) -> int:
    perturb = leaks.perturb_after
    spent = {"perturb": 0.0}

    def timed_perturb(*a, **kw):
        t0 = time.perf_counter()
        try:
            return perturb(*a, **kw)
        finally:
            spent["perturb"] += time.perf_counter() - t0

    leaks.perturb_after = timed_perturb  # check_leaks looks it up in its module at each call
    leaks.guard(files, cfg, "bench", "none")  # warm-up: numba compiled, files in the page cache
    # This version checks its cuts in forked processes (leaks.cut_workers); older ones in one.
    forks = "workers" in inspect.signature(leaks.check_leaks).parameters
    runs: dict[str, list[float]] = {
        "guard": [],
        "guard (CPU s)": [],
        "load_market": [],
        "check_leaks": [],
        "perturb_after": [],
    }
    for _ in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        report = leaks.guard(files, cfg, "bench", "none")
        runs["guard"].append(time.perf_counter() - t0)
        # This process's CPU (less load-bound), without the forked cuts' (theirs is not counted here).
        runs["guard (CPU s)"].append(time.process_time() - c0)
        t0 = time.perf_counter()
        md = load_market(files, cfg.data)
        runs["load_market"].append(time.perf_counter() - t0)
        spent["perturb"] = 0.0
        t0 = time.perf_counter()
        leaks.check_leaks(md, cfg)
        runs["check_leaks"].append(time.perf_counter() - t0)
        runs["perturb_after"].append(spent["perturb"])
        if forks:  # the same check with every cut in this process (the cuts' share of the forked gain)
            t0 = time.perf_counter()
            leaks.check_leaks(md, cfg, workers=1)
            runs.setdefault("check_leaks, 1p", []).append(time.perf_counter() - t0)
        for name, seconds in check_parts(leaks, perturb, md, cfg).items():
            runs.setdefault(name, []).append(seconds)
    rows = [{"name": name, "median_s": statistics.median(ts), "runs_s": ts} for name, ts in runs.items()]
    print(
        f"leak guard on the {args.profile} market: {report.rows:,} rows x {report.columns} columns, "
        f"{len(report.cuts)} cuts, {report.folds_checked} folds ({args.leaks or 'installed leaks.py'}; "
        f"cuts in {leaks.cut_workers(md, len(report.cuts)) if forks else 1} process(es))"
    )
    print(f"{'part':<22}{'median s':>10}  runs (wall seconds unless named)")
    for r in rows:
        print(f"{r['name']:<22}{r['median_s']:>10.2f}  " + " ".join(f"{t:.2f}" for t in r["runs_s"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "profile": args.profile,
                "overrides": args.set,
                "workers": args.workers,
                "leaks": str(args.leaks or "installed"),
                "rows": report.rows,
                "columns": report.columns,
                "cuts": len(report.cuts),
                "repeat": args.repeat,
                "hardware": hardware(),
                "parts": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
