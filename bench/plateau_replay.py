"""Would the plateau ladder have fired? ``train.plateau``'s detector replayed over recorded runs.

    .venv/bin/python bench/plateau_replay.py RUN/train/diagnostics.jsonl [...] [--patience 1,2,3,5]
        [--tolerance 0.01,0.05,0.1] [--json OUT.json]

Reads each ``diagnostics.jsonl`` a training run writes (one line per fold and epoch, its statistics)
and feeds every fold's epochs, in order, to :class:`foxhunt.train.plateau.PlateauDetector` at each
patience and tolerance asked for. Prints per fold the epochs, the largest relative move of any
``q/<branch>/<stat>`` statistic between consecutive epochs (its range over the pair over the branch's
largest |statistic|: what the detector holds against the tolerance), and the epochs at which the
detector would have fired, at or before the fold's last epoch (the run loop responds only before
it). A move of 0.3 means the Q statistics moved by 30% of their scale in one epoch: at a tolerance
of 0.01 (the default) such a learner is far from frozen. ``--json`` writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from foxhunt.train.plateau import PlateauDetector


def _q(stats: dict[str, float | None]) -> dict[str, float]:
    return {
        k: float(v) for k, v in stats.items() if k.startswith("q/") and k.count("/") == 2 and v is not None
    }


def largest_moves(epochs: list[dict[str, float | None]]) -> list[float]:
    """Per consecutive pair of epochs: the largest ``|x_e - x_(e-1)| / scale_b`` over the Q statistics
    (``scale_b`` the branch's largest |statistic| over the pair, as the detector scales)."""
    moves = []
    for a, b in zip(epochs, epochs[1:], strict=False):
        qa, qb = _q(a), _q(b)
        keys = [k for k in qa if k in qb]
        scale: dict[str, float] = defaultdict(lambda: 1e-12)
        for k in keys:
            br = k.split("/")[1]
            scale[br] = max(scale[br], abs(qa[k]), abs(qb[k]))
        moves.append(max((abs(qb[k] - qa[k]) / scale[k.split("/")[1]] for k in keys), default=float("nan")))
    return moves


def fires(epochs: list[dict[str, float | None]], patience: int, tolerance: float) -> list[int]:
    """The epochs at which the detector fires (``None`` statistics read as NaN, as the run writes)."""
    det = PlateauDetector(patience, tolerance)
    nan = float("nan")
    return [e for e, s in enumerate(epochs) if det.update({k: nan if v is None else v for k, v in s.items()})]


def replay(path: Path, patience: list[int], tolerance: list[float]) -> list[dict]:
    folds: dict[int, list[dict]] = defaultdict(list)
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            folds[int(record["fold"])].append(record["stats"])
    out = []
    for fold, epochs in sorted(folds.items()):
        out.append(
            {
                "file": str(path),
                "fold": fold,
                "epochs": len(epochs),
                "largest_moves": largest_moves(epochs),
                "fires": {f"{p}/{t:g}": fires(epochs, p, t) for p in patience for t in tolerance},
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", type=Path, help="diagnostics.jsonl files of training runs")
    ap.add_argument("--patience", default="1,2,3,5", help="comma-separated patiences (default 1,2,3,5)")
    ap.add_argument("--tolerance", default="0.01,0.05,0.1", help="comma-separated tolerances")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    patience = [int(p) for p in args.patience.split(",")]
    tolerance = [float(t) for t in args.tolerance.split(",")]
    rows = [r for f in args.files for r in replay(f, patience, tolerance)]
    print("| file | fold | epochs | largest Q move, epoch to epoch | fires (patience/tolerance: epochs) |")
    print("|---|---|---|---|---|")
    for r in rows:
        m = [x for x in r["largest_moves"] if x == x]
        span = f"{min(m):.3f} .. {max(m):.3f}" if m else "n/a"
        fired = "; ".join(f"{k}: {v}" for k, v in r["fires"].items() if v) or "never"
        print(f"| {r['file']} | {r['fold']} | {r['epochs']} | {span} | {fired} |")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
