"""foxhunt data-stage benchmarks: one command, a table on stdout, JSON in bench/results/.

    .venv/bin/python bench/run.py [--events 1000000] [--repeat 3] [--out bench/results/data.json]

Rows (each foxhunt number sits beside its reference, measured in the same process on the same
file, best of ``--repeat`` runs, after one warm-up run that also compiles numba code):

* MBP-10 ingest: ``foxhunt.data.dbn_read.read_dbn`` (zstd check + Databento decode + typed
  ``[n, 10]`` arrays) against the bare ``databento.DBNStore.from_file(...).to_ndarray()``.
  Ratio = reference time / foxhunt time (>= 1.0 means our typed arrays cost no more).
* MBO book rebuild: ``foxhunt.data.book.rebuild_book`` events/s on one core, against the goal
  of 2 M events/s.
* Synthetic market: ``foxhunt.data.synth.simulate_session`` book events/s on one core, and the
  same including the DBN write (``write_synthetic``), against the goal of 200 k events/s.

The other stages have their own script beside this one, in the same form (a table, JSON in
bench/results/): features.py, alpha.py, env.py, replay.py, learner.py, epoch.py, backtest.py,
cli_startup.py (``foxhunt --help`` and every subcommand's help against ``python -c pass``) and
stages.py (where ``foxhunt run`` spends its time, stage by stage).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import databento as db  # noqa: E402
import numpy as np  # noqa: E402

from foxhunt.data.arrays import MboArrays  # noqa: E402
from foxhunt.data.book import rebuild_book  # noqa: E402
from foxhunt.data.config import SynthConfig  # noqa: E402
from foxhunt.data.dbn_read import read_dbn  # noqa: E402
from foxhunt.data.dbn_write import write_book, write_mbo  # noqa: E402
from foxhunt.data.schemas import Schema  # noqa: E402
from foxhunt.data.synth import simulate_session, write_synthetic  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("FOXHUNT_REAL_DATA", REPO / ".." / "shared" / "data" / "real")).resolve()


def best_of(fn, repeat: int) -> tuple[float, object]:
    fn()  # warm-up (page cache, numba compilation)
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def hardware() -> dict[str, object]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "databento": db.__version__,
    }


def synth_config(events: int, seed: int = 11) -> SynthConfig:
    return SynthConfig(seed=seed, sessions=1, events_per_session=events, alpha=0.5)


def replicated_real_mbo(min_events: int) -> MboArrays | None:
    """The real ESH4 MBO day repeated to >= ``min_events`` records, timestamps shifted per copy.

    Each copy starts with the day's snapshot, and the book builder empties the book at the start
    of a snapshot run, so every copy rebuilds the same book.
    """
    path = REAL / "cme-es/esh4-glbx-mdp3-20231225.mbo.dbn.zst"
    if not path.is_file():
        return None
    _, mbo = read_dbn(path, expect=Schema.MBO)
    copies = -(-min_events // len(mbo))
    span = int(mbo.ts_event.max() - mbo.ts_event.min()) + 1
    parts = []
    for k in range(copies):
        fields = {f: getattr(mbo, f) for f in mbo.__dataclass_fields__}
        fields["ts_event"] = mbo.ts_event + k * span
        fields["ts_recv"] = mbo.ts_recv + k * span
        parts.append(MboArrays(**fields))
    return MboArrays.concat(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000, help="book events in the test files")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "data.json")
    args = ap.parse_args()
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="foxhunt-bench-"))

    # 1. Synthetic generation (also makes the MBP-10 file for the ingest row).
    cfg = synth_config(args.events)
    t_syn, session = best_of(lambda: simulate_session(cfg, 0), args.repeat)
    n_syn = len(session.book)
    rows.append(
        {
            "name": "synthetic market (simulate_session)",
            "unit": "book events/s",
            "foxhunt": n_syn / t_syn,
            "reference": 200_000.0,
            "reference_name": "goal",
            "n": n_syn,
            "seconds": t_syn,
        }
    )

    t_write, _ = best_of(lambda: write_synthetic(cfg, tmp / "synth"), 1)
    rows.append(
        {
            "name": "synthetic market + DBN write (write_synthetic)",
            "unit": "book events/s",
            "foxhunt": n_syn / t_write,
            "reference": 200_000.0,
            "reference_name": "goal",
            "n": n_syn,
            "seconds": t_write,
        }
    )

    # 2. MBP-10 ingest vs Databento's own decode of the same file.
    mbp = write_book(tmp / "bench.mbp-10.dbn.zst", session.book, symbols={cfg.instrument_id: cfg.symbol})
    t_ref, ref = best_of(lambda: db.DBNStore.from_file(mbp).to_ndarray(), args.repeat)
    t_fox, (_, book) = best_of(lambda: read_dbn(mbp, expect=Schema.MBP_10), args.repeat)
    assert len(ref) == len(book) == n_syn
    rows.append(
        {
            "name": "MBP-10 ingest (read_dbn vs DBNStore.to_ndarray)",
            "unit": "records/s",
            "foxhunt": n_syn / t_fox,
            "reference": n_syn / t_ref,
            "reference_name": "DBNStore.from_file().to_ndarray()",
            "n": n_syn,
            "seconds": t_fox,
            "reference_seconds": t_ref,
        }
    )

    # 3. MBO book rebuild: synthetic MBO when the simulator makes it, and the real ESH4 day.
    sources = []
    with_mbo = simulate_session(cfg, 0, with_mbo=True)
    if with_mbo.mbo is not None:
        sources.append(("synthetic MBO", with_mbo.mbo))
    real = replicated_real_mbo(args.events)
    if real is not None:
        sources.append(("real ESH4 MBO x copies", real))
        write_mbo(tmp / "real.mbo.dbn.zst", real)
    for label, mbo in sources:
        t_bk, res = best_of(lambda mbo=mbo: rebuild_book(mbo), args.repeat)
        rows.append(
            {
                "name": f"book rebuild ({label})",
                "unit": "MBO events/s",
                "foxhunt": len(mbo) / t_bk,
                "reference": 2_000_000.0,
                "reference_name": "goal",
                "n": len(mbo),
                "seconds": t_bk,
                "states": res.n_states,
            }
        )

    for r in rows:
        r["ratio"] = r["foxhunt"] / r["reference"]
    name_w = max(len(r["name"]) for r in rows)
    print(
        f"{'benchmark':<{name_w}}  {'n':>10}  {'foxhunt':>14}  {'reference':>14}  {'ratio':>6}  reference is"
    )
    for r in rows:
        print(
            f"{r['name']:<{name_w}}  {r['n']:>10,}  {r['foxhunt']:>14,.0f}  {r['reference']:>14,.0f}  "
            f"{r['ratio']:>6.2f}  {r['reference_name']} ({r['unit']})"
        )
    hw = hardware()
    print(f"hardware: {hw['cpu']}, {hw['cores']} cores; numba threads: {os.environ['NUMBA_NUM_THREADS']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"hardware": hw, "rows": rows, "argv": sys.argv}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
