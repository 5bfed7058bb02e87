"""What execution is worth on a market: every execution choice of the reference rule's entries.

    .venv/bin/python bench/counterfactual.py CACHE --profile smoke [--set KEY=VALUE ...] [--out FILE.json]

For each fold's validation rows of a feature cache, the market-order reference rule (the planted
signal's carrier, 1.5 sd, Full size; :class:`foxhunt.backtest.reference.ReferenceRule`) trades as in
every report; at each of its entries the env rolls out every (magnitude, order type, urgency) of the
configured branches with the rule's direction (:func:`foxhunt.env.counterfactual.rollout`: the
decision, then Hold until the plan has closed), on the same rows. Per execution choice it prints the
fill rate, the entry's cost per contract, the net PnL per entry and per contract over the plan, and
the sum an entry-by-entry hindsight pick of the best choice would have made beside the rule's own
(Full, Market, Normal). Pass the full action space with
``--set 'env.branches={magnitude=3, magnitude_fractions=[0.25, 0.5, 1.0], order_type=3, urgency=3}'``.
The rows are the headroom the execution branches can learn (the counterfactual targets,
``agent.counterfactual``), not an agent's result.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch

from foxhunt.backtest.evaluate import windows
from foxhunt.backtest.reference import ReferenceRule
from foxhunt.config.loader import load_config
from foxhunt.domain.actions import ActionCodec
from foxhunt.env.core import TradingEnv
from foxhunt.env.counterfactual import default_horizon, entry_mask, rollout
from foxhunt.env.market import market_tensors
from foxhunt.features.cache_file import open_cache
from foxhunt.validation.folds import make_folds


def fold_outcomes(env: TradingEnv, lo: int, hi: int, rule) -> dict[str, torch.Tensor]:  # noqa: ANN001
    """Per execution choice (the codec's magnitude x order x urgency grid), summed over the rule's
    entries on rows ``[lo, hi)``: entries, fills, contracts, entry costs, net; and the hindsight best."""
    codec = env.codec
    _, m, o, u = codec.sizes
    grid = torch.tensor(list(itertools.product(range(m), range(o), range(u))))  # [G, 3]
    starts, ends = windows(lo, hi, env.cfg.episode_rows)
    obs = env.reset(starts, ends)
    horizon = default_horizon(env)
    g = grid.shape[0]
    sums = {k: torch.zeros(g, dtype=torch.float64) for k in ("fills", "contracts", "entry_costs", "net")}
    entries, best = 0, 0.0
    for _ in range(int((ends - starts).max())):
        a = rule(obs, env)
        mask = entry_mask(env.state, a)
        idx = mask.nonzero().squeeze(1)
        if idx.numel():
            state = env.state.map(lambda x, i=idx: x.index_select(0, i))
            acts = a.index_select(0, idx)[:, None, :].repeat(1, g, 1)
            acts[:, :, 1:] = grid
            out = rollout(env, state, acts, horizon, 1.0)
            entries += int(idx.numel())
            sums["fills"] += out.filled.double().sum(0)
            sums["contracts"] += out.contracts.abs().sum(0)
            sums["entry_costs"] += out.entry_costs.sum(0)
            sums["net"] += out.net.sum(0)
            best += float(out.net.max(dim=1).values.sum())
        obs, _ = env.step(a)
    return {"entries": entries, "best": best, **sums, "grid": grid}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache", type=Path, help="a feature cache file or the folder holding one")
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--set", action="append", default=[], dest="sets", help="config override (repeatable)")
    ap.add_argument("--out", type=Path, help="write the table as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(profile=args.profile, overrides=args.sets)
    path = args.cache if args.cache.is_file() else next(args.cache.glob("*.arrow"))
    cache = open_cache(path)
    folds = make_folds(cache.features(), cache.columns, cfg.folds, int(cache.meta["label_span"]))
    rule = ReferenceRule.for_signal(cfg.synth.signal)
    labels = ActionCodec(cfg.env.branches).value_labels()
    total: dict[str, object] = {}
    for fd in folds:
        market = market_tensors(cache, fd, vol_window=cfg.env.plan.barrier.vol_window)
        got = fold_outcomes(
            TradingEnv(market, cfg.env), fd.fold.validation_start, fd.fold.validation_end, rule.policy()
        )
        for k, v in got.items():
            total[k] = v if k == "grid" else total.get(k, 0) + v  # type: ignore[operator]
    n = max(int(total["entries"]), 1)  # type: ignore[call-overload]
    rows = []
    for i, (mi, oi, ui) in enumerate(total["grid"].tolist()):  # type: ignore[union-attr]
        fills, contracts = float(total["fills"][i]), float(total["contracts"][i])  # type: ignore[index]
        cost, net = float(total["entry_costs"][i]), float(total["net"][i])  # type: ignore[index]
        rows.append({
            "magnitude": labels["magnitude"][mi], "order_type": labels["order_type"][oi],
            "urgency": labels["urgency"][ui], "fill_rate": fills / n,
            "cost_per_contract": cost / contracts if contracts else None,
            "net_per_entry": net / n, "net_per_contract": net / contracts if contracts else None, "net": net,
        })  # fmt: skip
    print(
        f"{path.name}: {total['entries']} entries of the {rule.describe()}, "
        f"{len(folds)} folds' validation rows"
    )
    print("magnitude order_type      urgency    fill   $cost/ct   net/entry   net/ct      net")
    for r in rows:
        cpc = f"{r['cost_per_contract']:9.2f}" if r["cost_per_contract"] is not None else "        -"
        npc = f"{r['net_per_contract']:8.2f}" if r["net_per_contract"] is not None else "       -"
        print(
            f"{r['magnitude']:9s} {r['order_type']:15s} {r['urgency']:9s} {r['fill_rate']:5.2f} {cpc} "
            f"{r['net_per_entry']:+10.1f} {npc} {r['net']:+9.0f}"
        )
    print(f"hindsight best choice per entry: {float(total['best']):+.0f}")  # type: ignore[arg-type]
    if args.out:
        body = {
            "cache": str(path),
            "sets": args.sets,
            "entries": total["entries"],
            "best": total["best"],
            "rows": rows,
        }
        args.out.write_text(json.dumps(body, indent=1))


if __name__ == "__main__":
    main()
