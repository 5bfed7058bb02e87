"""What a market order pays for the spread on OHLCV bars, where the book is unknown and
``env.costs.spread_model_ticks`` models it (``foxhunt.env.costs.market_fill_price``): the modelled
fill against the bar's close (the env's mark), in ticks a side, on every bar of real and synthetic
minute bars, for several configured spreads.

    .venv/bin/python bench/ohlcv_spread.py [--spreads 0.68,1,2,3,4] [--out bench/results/ohlcv_spread.json]
    FOXHUNT_REAL_DATA=/work/shared/data/real .venv/bin/python bench/ohlcv_spread.py   # from a worktree

Rows: a market (ES 2013 minute bars, real, from ../shared/data/real when present; synthetic 6E minute
bars, tests/euro_fx.py), a configured spread, and the mean cost a side in ticks (buys and sells
together) beside the configured half spread, with the share of fills at 0, 1 and 2+ ticks from the
close. Runs in seconds on a CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from foxhunt.config.loader import load_config  # noqa: E402
from foxhunt.data.ingest import load_market  # noqa: E402
from foxhunt.data.instrument import instrument_of_files  # noqa: E402
from foxhunt.domain.actions import Urgency  # noqa: E402
from foxhunt.env.config import CostConfig  # noqa: E402
from foxhunt.env.costs import market_fill_price  # noqa: E402
from foxhunt.features.pipeline import rows_from_market  # noqa: E402

# The real-data folder as the tests find it (tests/conftest.py): ../shared/data/real or FOXHUNT_REAL_DATA.
REAL = Path(os.environ.get("FOXHUNT_REAL_DATA", REPO / ".." / "shared" / "data" / "real")).resolve()


def bars(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """``(close, low, high, tick)`` of the bars of an OHLCV-1m file, as the env reads them."""
    cfg = load_config(None, overrides=["data.data_source=ohlcv", "data.bar_seconds=60"])
    tick = instrument_of_files([path], cfg.instrument, where="--data").tick_size
    rows = rows_from_market(load_market([path], cfg.data), cfg.data, tick_size=tick)
    ok = np.isfinite(rows.close) & np.isfinite(rows.low) & np.isfinite(rows.high)
    return rows.close[ok], rows.low[ok], rows.high[ok], float(tick)


def cost_ticks(close, low, high, tick: float, spread_ticks: float) -> np.ndarray:
    """Cost a side in ticks against the close of one-contract market buys and sells on every bar."""
    c, lo, hi = (torch.tensor(a, dtype=torch.float64) for a in (close, low, high))
    nan = torch.full_like(c, float("nan"))  # no book: the spread model prices the fill
    costs = CostConfig(spread_model_ticks=spread_ticks)
    out = []
    for side in (1.0, -1.0):
        s = torch.full_like(c, side)
        fill = market_fill_price(
            s, torch.ones_like(c), nan, nan, torch.full_like(c, int(Urgency.NORMAL), dtype=torch.int64),
            costs, tick, mid=c, low=lo, high=hi,
        )  # fmt: skip
        out.append((side * (fill - c) / tick).numpy())
    return np.concatenate(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spreads", default="0.68,1,2,3,4", help="configured spreads in ticks, comma-separated")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "ohlcv_spread.json")
    args = ap.parse_args()
    markets = {}
    es = REAL / "cme-es" / "es-2013-lean.ohlcv-1m.dbn.zst"
    if es.is_file():
        markets["ES 2013 minute bars (real)"] = bars(es)
    from tests.euro_fx import write_euro_fx

    with tempfile.TemporaryDirectory() as tmp:
        markets["6E minute bars (synthetic, tests/euro_fx.py)"] = bars(write_euro_fx(Path(tmp), sessions=4))
    rows = []
    print(f"{'market':46} {'spread':>6} {'half':>5} {'mean':>6} {'at 0':>6} {'at 1':>6} {'2+':>6}  bars")
    for name, (close, low, high, tick) in markets.items():
        for spread in (float(x) for x in args.spreads.split(",")):
            t = np.round(cost_ticks(close, low, high, tick, spread), 6)
            row = {
                "market": name,
                "spread_model_ticks": spread,
                "half_spread_ticks": spread / 2,
                "mean_cost_ticks_a_side": float(t.mean()),
                "share_at_0": float((t == 0).mean()),
                "share_at_1": float((t == 1).mean()),
                "share_2_or_more": float((t >= 2).mean()),
                "bars": len(close),
            }
            rows.append(row)
            print(
                f"{name:46} {spread:6.2f} {spread / 2:5.2f} {row['mean_cost_ticks_a_side']:6.3f} "
                f"{row['share_at_0']:6.1%} {row['share_at_1']:6.1%} {row['share_2_or_more']:6.1%}  "
                f"{len(close)}"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
