"""Feature-stage benchmark: rows/s per family and for the whole stack, beside the ingest rate of
the same data, so the cost of features relative to decoding is visible.

    .venv/bin/python bench/features.py [--events 500000] [--sessions 2] [--out bench/results/features.json]

The synthetic market (2 sessions x 500 k book states = 10^6 snapshot rows by default) is written
as DBN, ingested with ``read_dbn`` (the reference row), turned into snapshot rows and bars, and
every family is timed on one core after a warm-up call (numba compiled and cached).
Goal (issue 3): the full snapshot-unit stack on 10^6 rows in <= 10 s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

from foxhunt.config.loader import load_config  # noqa: E402
from foxhunt.data.config import SynthConfig  # noqa: E402
from foxhunt.data.dbn_read import read_dbn  # noqa: E402
from foxhunt.data.ingest import load_market  # noqa: E402
from foxhunt.data.schemas import RowUnit  # noqa: E402
from foxhunt.data.synth import write_synthetic  # noqa: E402
from foxhunt.dataset.cache import _feature_params, compute_features  # noqa: E402
from foxhunt.features.layout import STACK_FAMILIES  # noqa: E402
from foxhunt.features.pipeline import rows_from_market  # noqa: E402
from foxhunt.features.registry import FAMILIES  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from run import hardware  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=500_000, help="book states per session")
    ap.add_argument("--sessions", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "features.json")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="foxhunt-bench-features-"))
    files = write_synthetic(
        SynthConfig(seed=3, sessions=args.sessions, events_per_session=args.events, alpha=1.0), tmp
    )
    mbp = [f for f in files if f.name.endswith(".mbp-10.dbn.zst")]
    t_ingest, _ = timed(lambda: [read_dbn(f) for f in mbp])
    n_events = args.sessions * args.events
    rows_out = [{"name": "ingest: read_dbn of the MBP-10 files", "rows": n_events, "seconds": t_ingest}]
    for unit in (RowUnit.SNAPSHOT, RowUnit.BAR):
        cfg = load_config("smoke", overrides=[f"data.row_unit={unit.value}"])
        md = load_market(mbp + [f for f in files if ".trades." in f.name], cfg.data)
        t_rows, inp = timed(lambda cfg=cfg, md=md: rows_from_market(md, cfg.data))
        rows_out.append({"name": f"{unit.value}: rows from market data", "rows": len(inp), "seconds": t_rows})
        params = _feature_params(cfg)
        for name in STACK_FAMILIES[unit]:
            FAMILIES[name].compute(inp.prefix(2000), params[name])  # warm-up (numba cache load)
            t, _ = timed(lambda name=name, inp=inp, params=params: FAMILIES[name].compute(inp, params[name]))
            rows_out.append({"name": f"{unit.value}: family {name}", "rows": len(inp), "seconds": t})
        t_stack, _ = timed(lambda cfg=cfg, inp=inp: compute_features(inp, cfg))
        rows_out.append(
            {"name": f"{unit.value}: whole stack (compute_features)", "rows": len(inp), "seconds": t_stack}
        )
    for r in rows_out:
        r["rows_per_s"] = r["rows"] / r["seconds"]
    w = max(len(r["name"]) for r in rows_out)
    print(f"{'step':<{w}}  {'rows':>10}  {'seconds':>8}  {'rows/s':>12}  {'x ingest time':>13}")
    for r in rows_out:
        print(
            f"{r['name']:<{w}}  {r['rows']:>10,}  {r['seconds']:>8.3f}  {r['rows_per_s']:>12,.0f}  "
            f"{r['seconds'] / t_ingest:>13.2f}"
        )
    snap = next(r for r in rows_out if r["name"].startswith("snapshot: whole stack"))
    per_million = snap["seconds"] / snap["rows"] * 1e6
    print(f"snapshot stack: {per_million:.2f} s per 10^6 rows (goal <= 10 s); hardware: {hardware()['cpu']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"hardware": hardware(), "rows": rows_out, "snapshot_seconds_per_million": per_million}, indent=2
        )
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
