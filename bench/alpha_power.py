"""Power and calibration of the alpha verdict: false calls on no-signal markets, detections on
planted ones, with Clopper-Pearson intervals.

    nice -n 10 .venv/bin/python bench/alpha_power.py --none 50 --alpha2 20 --smoke 20 --jobs 16

Every market is a fresh synthetic market of the smoke profile (30 s bars, horizons 5/20/60 bars,
3 walk-forward folds) with ``--sessions`` sessions of ``--events`` book events and its own seed,
none used elsewhere in the project: no-signal markets (``synth.alpha=0``) at ``--seed0 + i``,
alpha-2 markets at ``--seed0 + 1000 + i``, smoke-strength markets (the smoke profile's alpha, 4) at
``--seed0 + 2000 + i``; the planted carrier is the profile's (the level-1 imbalance EMA over 2000
events). On each the whole check runs as ``foxhunt alpha`` runs it (:func:`run_alpha`), and the
verdict is read with the code's rule (the forecast test, max-z over models x horizons) and, for
comparison, with the earlier AUC rules (pooled and every fold's interval above 0.5; the pooled
interval alone). Each market's row also holds every test's z and p-value.

One market is one process (``--jobs`` of them at a time; every model fit and BLAS call on one
thread). ``--keep DIR`` saves each market's fits (``DIR/<kind>-<seed>.npz``: ``close`` and
``segment_start``, and per ``<horizon>_<model>_<fold>``: ``_rows``, ``_y``, ``_p`` (usable validation
rows, labels, forecasts), ``_vrows``, ``_vp`` (every valid validation row and its forecast: what the
test reads) and ``_base`` (the fold's training share of up labels)) so that another verdict rule can be
scored on the same fits without refitting. Prints a table and writes ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
KINDS = ("none", "alpha2", "smoke")
SEED_OFFSET = {"none": 0, "alpha2": 1000, "smoke": 2000}


def _one_thread() -> None:
    # Before numpy loads in the worker: one BLAS thread per market, --jobs markets at a time.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"


def _config(kind: str, seed: int, events: int, sessions: int, extra: tuple[str, ...] = ()) -> Any:
    from foxhunt.config.loader import load_config

    base = load_config("smoke")
    alpha = {"none": 0.0, "alpha2": 2.0, "smoke": base.synth.alpha}[kind]
    return load_config(
        "smoke",
        overrides=[
            f"synth.alpha={alpha}",
            f"synth.seed={seed}",
            f"synth.sessions={sessions}",
            f"synth.events_per_session={events}",
            *extra,
        ],
    )


def _rules(result: Any) -> dict[str, bool]:
    """Signal or not under the code's rule (the forecast test, max-z adjusted) and, for comparison,
    the same tests at Bonferroni's cut (p <= family_error / m) and the earlier AUC rules (pooled and
    every fold's Bonferroni AUC interval above 0.5; the pooled interval alone)."""
    from foxhunt.alpha.check import MODELS

    pooled_every_fold = pooled_alone = False
    for h in result.horizons:
        for m in MODELS:
            lo = h.pooled.get(m.value, {}).get("auc", {}).get("lo", float("nan"))
            folds = [row[m.value]["auc_lo"] for row in h.folds if m.value in row]
            pooled_alone |= bool(lo > 0.5)
            pooled_every_fold |= bool(lo > 0.5 and folds and min(folds) > 0.5)
    cut = result.family_error / result.family_size
    bonferroni = any(t.get("p_value", math.nan) <= cut for h in result.horizons for t in h.tests.values())
    return {
        "verdict": result.verdict == "signal",
        "test_bonferroni": bonferroni,
        "auc_pooled_and_every_fold": pooled_every_fold,
        "auc_pooled_alone": pooled_alone,
    }


def run_market(
    kind: str, seed: int, events: int, sessions: int, keep: str | None, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Generate one market, build its cache, run the check; the row of the results table."""
    _one_thread()
    import numpy as np

    from foxhunt.alpha.check import run_alpha
    from foxhunt.data.synth import write_synthetic
    from foxhunt.dataset.build import get_or_build

    cfg = _config(kind, seed, events, sessions, extra)
    with tempfile.TemporaryDirectory(prefix="foxhunt-alpha-power-") as tmp:
        t0 = time.perf_counter()
        write_synthetic(cfg.synth, Path(tmp) / "m")
        t1 = time.perf_counter()
        cache = get_or_build([Path(tmp) / "m"], cfg, Path(tmp) / "c")
        t2 = time.perf_counter()
        result = run_alpha(cache, cfg.alpha, cfg.folds, cfg.alpha.horizons, cfg.run.seed)
        t3 = time.perf_counter()
        close = cache.column("close").astype(np.float64)
        seg = cache.column("segment_start").astype(bool)
    if keep:
        arrays = {"close": close, "segment_start": seg}
        for (k, m), parts in result.predictions.items():
            for f, ff in enumerate(parts):
                arrays[f"{k}_{m}_{f}_rows"] = ff.rows.astype(np.int64)
                arrays[f"{k}_{m}_{f}_y"] = ff.y.astype(np.int8)
                arrays[f"{k}_{m}_{f}_p"] = ff.p.astype(np.float64)
                arrays[f"{k}_{m}_{f}_base"] = np.float64(ff.train_base)
                arrays[f"{k}_{m}_{f}_vrows"] = ff.valid_rows.astype(np.int64)
                arrays[f"{k}_{m}_{f}_vp"] = ff.valid_p.astype(np.float64)
        np.savez_compressed(Path(keep) / f"{kind}-{seed}.npz", **arrays)
    k, model, best = result.best()
    return {
        "kind": kind,
        "seed": seed,
        "alpha": cfg.synth.alpha,
        "rows": result.rows,
        "signal": _rules(result),
        "signal_at": [{"horizon": h, "model": m} for h, m in result.signal_tests()],
        "tests": {f"{h.horizon}_{m}": t for h in result.horizons for m, t in h.tests.items()},
        "best": {"horizon": k, "model": model, "auc": best},
        "seconds": {"synth": t1 - t0, "cache": t2 - t1, "alpha": t3 - t2},
    }


def summarise(rows: list[dict[str, Any]], level: float = 0.95) -> list[dict[str, Any]]:
    """Per kind and rule: calls, markets, rate and its Clopper-Pearson interval."""
    from foxhunt.alpha.metrics import clopper_pearson

    table = []
    rules = sorted({r for row in rows for r in row["signal"]}, key=lambda r: r != "verdict")
    for kind in KINDS:
        sub = [row for row in rows if row["kind"] == kind]
        if not sub:
            continue
        for rule in rules:
            hits = sum(bool(row["signal"].get(rule)) for row in sub)
            lo, hi = clopper_pearson(hits, len(sub), level)
            table.append(
                {
                    "kind": kind,
                    "rule": rule,
                    "signal": hits,
                    "markets": len(sub),
                    "rate": hits / len(sub),
                    "lo": lo,
                    "hi": hi,
                }
            )
    return table


def print_table(table: list[dict[str, Any]]) -> None:
    what = {"none": "false calls", "alpha2": "detections", "smoke": "detections"}
    print(f"{'markets':<8} {'rule':<24} {'signal':>7} {'of':>4} {'rate':>7} {'95% interval':>16}  meaning")
    for r in table:
        print(
            f"{r['kind']:<8} {r['rule']:<24} {r['signal']:>7} {r['markets']:>4} {r['rate']:>7.1%} "
            f"[{r['lo']:>6.1%}, {r['hi']:>6.1%}]  {what[r['kind']]}"
        )


def write(args: argparse.Namespace, rows: list[dict[str, Any]], wall: float, hw: dict[str, Any]) -> None:
    """The JSON: arguments, hardware, the table and every market's row."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "argv": sys.argv[1:],
                "hardware": hw,
                "events_per_session": args.events,
                "sessions": args.sessions,
                "seconds_wall": wall,
                "table": summarise(rows),
                "markets": sorted(rows, key=lambda r: (r["kind"], r["seed"])),
            },
            indent=2,
        )
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--none", type=int, default=50, help="No-signal markets (synth.alpha=0).")
    ap.add_argument("--alpha2", type=int, default=20, help="Planted alpha-2 markets.")
    ap.add_argument("--smoke", type=int, default=20, help="Planted markets at the smoke profile's alpha.")
    ap.add_argument("--events", type=int, default=30_000, help="Book events per session.")
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--seed0", type=int, default=9000, help="First no-signal seed (planted: +1000, +2000).")
    ap.add_argument("--jobs", type=int, default=1, help="Markets at a time (one process, one thread each).")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A config override for every market (repeatable), e.g. data.row_unit=snapshot.",
    )
    ap.add_argument("--keep", type=Path, default=None, help="Save every market's forecasts here (npz).")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "alpha_power.json")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "bench"))
    from run import hardware

    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    counts = {"none": args.none, "alpha2": args.alpha2, "smoke": args.smoke}
    # Interleaved in proportion to the counts: a run stopped early still has every kind.
    order = sorted((i / n, kind, i) for kind, n in counts.items() for i in range(n))
    jobs = [(kind, args.seed0 + SEED_OFFSET[kind] + i) for _, kind, i in order]
    keep = str(args.keep) if args.keep else None
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        extra = tuple(args.set)
        futures = [pool.submit(run_market, k, s, args.events, args.sessions, keep, extra) for k, s in jobs]
        for fut in as_completed(futures):
            row = fut.result()
            rows.append(row)
            sec = row["seconds"]
            z_of = {name: t["z"] if math.isfinite(t["z"]) else -math.inf for name, t in row["tests"].items()}
            top = max(row["tests"].items(), key=lambda kv: z_of[kv[0]])
            print(
                f"{row['kind']:<7} seed {row['seed']}: signal {row['signal']}, "
                f"best AUC {row['best']['model']} {row['best']['auc']:.3f} at {row['best']['horizon']}, "
                f"top test z {top[1]['z']:.2f} (p {top[1]['p_value']:.2g}) at {top[0]}; "
                f"synth {sec['synth']:.0f} s, "
                f"cache {sec['cache']:.0f} s, check {sec['alpha']:.0f} s",
                flush=True,
            )
            write(args, rows, time.perf_counter() - t0, hardware())  # a run cut short keeps its markets
    write(args, rows, time.perf_counter() - t0, hardware())
    print_table(summarise(rows))
    print(f"{len(rows)} markets in {time.perf_counter() - t0:.0f} s with --jobs {args.jobs}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
