"""Is a one-feature edge above the trading costs? A research probe, not a test or a benchmark.

For one state feature of a feature cache it prints, on the last fold's rows:

* the decay curve: correlation of the feature with the mid move over K rows and the move per
  standard deviation of the feature in ticks, next to the move's own standard deviation;
* the round-trip cost of one contract with market orders (spread + fees, in ticks);
* a threshold rule through the backtester on every fold's validation window: long above +thr,
  short below -thr (in the feature's fold-normalised units), Full size, market or limit at touch,
  under the configured plan lock; net PnL / trades / annualised Sharpe per fold;
* the look-ahead oracle per fold: its Sharpe and closed trades' t-statistic against the most the
  anomaly guard's Sharpe ceiling (``train.anomaly.max_sharpe_annual``) allows.

The rule is the control for the planted-alpha known answer: where it cannot beat flat after
costs, an agent that learns the same signal cannot either. The rule itself is the package's
(:func:`foxhunt.backtest.reference.threshold_rule`); ``foxhunt edge`` runs the reference setting of
it (the planted signal's carrier, 1.5 sd, market orders) beside flat and long and writes JSON, and
every training report shows it beside the agent. This probe is the wider grid around it.

    .venv/bin/python tools/edge.py runs/main/cache ofi.book_pressure --profile smoke [--set key=value ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from foxhunt.backtest.evaluate import ScriptedPolicy, evaluate, scripted
from foxhunt.backtest.metrics import SHARPE_BOUND_Z, branch_sizes, compute_metrics, trade_t_stat
from foxhunt.backtest.reference import threshold_rule
from foxhunt.backtest.run import bars_per_year
from foxhunt.config.loader import load_config
from foxhunt.domain.actions import OrderType
from foxhunt.env.market import MarketTensors, market_tensors
from foxhunt.features.cache_file import open_cache
from foxhunt.validation.folds import make_folds

HORIZONS = (1, 2, 5, 10, 20, 60)
THRESHOLDS = (1.0, 1.5, 2.0)


def decay(m: MarketTensors, column: str, tick: float) -> list[tuple[int, float, float, float]]:
    """Per horizon K: (K, corr(x_t, mid_{t+K} - mid_t), ticks per sigma of x, sd of the move in ticks)."""
    x = m.features[:, m.feature_columns.index(column)].numpy()
    mid, seg = m.mid.numpy(), m.segment.numpy()
    out = []
    for k in HORIZONS:
        move = mid[k:] - mid[:-k]
        ok = (seg[k:] == seg[:-k]) & np.isfinite(x[:-k])
        xs, ys = x[:-k][ok], move[ok]
        out.append(
            (
                k,
                float(np.corrcoef(xs, ys)[0, 1]),
                float(np.polyfit(xs, ys, 1)[0] / tick),
                float(ys.std() / tick),
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache", type=Path, help="a feature cache file or the folder holding one")
    ap.add_argument("column", help="state feature column, e.g. ofi.book_pressure")
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--set", action="append", default=[], dest="sets", help="config override (repeatable)")
    args = ap.parse_args()
    cfg = load_config(profile=args.profile, overrides=args.sets)
    path = args.cache if args.cache.is_file() else next(args.cache.glob("*.arrow"))
    cache = open_cache(path)
    folds = make_folds(cache.features(), cache.columns, cfg.folds, int(cache.meta["label_span"]))
    c = cfg.env.costs
    last = market_tensors(cache, folds[-1], vol_window=cfg.env.plan.barrier.vol_window)
    # The contract's tick and point value are the data's (the cache's instrument), not a setting.
    tick, point_value = last.instrument.tick_size, last.instrument.point_value
    fees = 2 * (c.commission_per_contract + c.exchange_fee_per_contract) / (tick * point_value)
    print(f"{path.name}: {cache.meta['rows']} rows; market round trip: 1 tick spread + {fees:.2f} ticks fees")
    print(f"decay of {args.column} (last fold's rows):")
    print("  K   corr   ticks/sigma   sd(move) ticks")
    for k, corr, slope, sd in decay(last, args.column, tick):
        print(f"{k:3d} {corr:+.3f} {slope:12.2f} {sd:14.1f}")
    bpy = bars_per_year(cache)
    print(
        f"threshold rule, plan {cfg.env.plan.barrier.horizon} rows: "
        "validation net PnL / trades / Sharpe per fold"
    )

    def per_fold(policy) -> list[dict]:
        """The policy's validation metrics on every fold."""
        out = []
        for fd in folds:
            m = market_tensors(cache, fd, vol_window=cfg.env.plan.barrier.vol_window)
            rec = evaluate(m, cfg.env, fd.fold.validation_start, fd.fold.validation_end, policy)
            out.append(
                compute_metrics(
                    rec,
                    bars_per_year=bpy,
                    initial_capital=cfg.env.contract.initial_capital,
                    # The rule picks limit orders too, which a profile of market orders alone has no branch
                    # for: the metrics' range check takes every order type.
                    **{**branch_sizes(cfg.env.branches), "n_order_types": len(OrderType)},
                )
            )
        return out

    for thr in THRESHOLDS:
        for order in (OrderType.MARKET, OrderType.LIMIT_AT_TOUCH):
            cells = [
                f"{met['net_pnl']:+9.0f} / {met['trades']:3d} / {met['sharpe_annual']:+6.1f}"
                for met in per_fold(threshold_rule(args.column, thr, order))
            ]
            print(f"  |x| > {thr:.1f} {order.name.lower():15s} " + "   ".join(cells))
    # The look-ahead oracle against the anomaly guard's ceiling: the guard must stop it in every fold
    # while the rules above (a plausible edge) stay below it.
    ceiling = cfg.train.anomaly.max_sharpe_annual
    cells = []
    for met in per_fold(scripted(ScriptedPolicy.ORACLE, cfg.env)):
        t, t_max = trade_t_stat(met, ceiling, SHARPE_BOUND_Z)
        cells.append(f"Sharpe {met['sharpe_annual']:+6.1f}, trade t {t:5.2f} vs {t_max:5.2f}")
    print(f"oracle (guard ceiling Sharpe {ceiling:g}): " + "   ".join(cells))


if __name__ == "__main__":
    main()
