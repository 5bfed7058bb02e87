"""The main job, ``foxhunt run``: data -> features -> leak guard -> alpha check -> training -> report.

With no data it first generates the embedded synthetic market (the profile's ``[synth]`` section,
planted alpha on) as DBN files, so the whole pipeline runs on a fresh machine with nothing else.
Every stage is the same code the individual commands run; the job only chains them and gathers one
summary (``metrics.json``, with a ``folds`` list: validation ``net_pnl``, ``sharpe_annual``,
``max_drawdown``, ``trades`` and the ``baselines`` flat and long) that ``report.html`` renders.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import foxhunt
from foxhunt.atomic import write_json
from foxhunt.config.loader import config_hash, write_resolved
from foxhunt.config.models import FoxhuntConfig
from foxhunt.data.sessions import iso_utc
from foxhunt.validation.leaks import LeakFoundError


def _data_summary(cache, files: list[Path], synthetic: bool, cfg: FoxhuntConfig) -> dict[str, Any]:
    ts = cache.column("ts")
    dates = np.unique(cache.column("trade_date"))
    source = (
        f"synthetic ES market (seed {cfg.synth.seed}, planted alpha {cfg.synth.alpha})"
        if synthetic
        else ", ".join(str(p) for p in files)
    )
    return {
        "source": source,
        "rows": int(len(ts)),
        "row_unit": cfg.data.row_unit.value,
        "sessions": int(len(dates)),
        "first": iso_utc(int(ts[0])) if len(ts) else "",
        "last": iso_utc(int(ts[-1])) if len(ts) else "",
        "features": int(cache.features().shape[1]),
    }


def _alpha_summary(alpha: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for h in alpha["horizons"]:
        for model, auc in h["auc"].items():
            lo, hi = h["auc_ci"][model]
            rows.append({"model": model, "horizon": h["horizon"], "auc": auc, "auc_lo": lo, "auc_hi": hi})
    return {"verdict": alpha["verdict"], "rows": rows}


def run_job(
    cfg: FoxhuntConfig,
    out_dir: str | Path,
    data: list[Path] | None = None,
    *,
    log: Callable[[str], None] = print,
    resume: bool = False,
    profile: str = "default",
) -> dict[str, Any]:
    """The whole pipeline into ``out_dir``; returns the summary written as ``metrics.json``."""
    from foxhunt.alpha.check import run_alpha
    from foxhunt.alpha.report import verdict_line
    from foxhunt.alpha.report import write_report as write_alpha
    from foxhunt.data.ingest import load_market
    from foxhunt.data.synth import write_synthetic
    from foxhunt.features.cache import get_or_build
    from foxhunt.report.html import write_report
    from foxhunt.train.run import resolve_device, train
    from foxhunt.validation.leaks import check_leaks

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    write_resolved(cfg, out / "run.config.json")
    synthetic = not data
    if synthetic:
        log(f"synthetic market: {cfg.synth.sessions} sessions, planted alpha {cfg.synth.alpha}")
        files = write_synthetic(cfg.synth, out / "market")
    else:
        files = list(data or [])
    log("leak guard")
    leaks = check_leaks(load_market(files, cfg.data), cfg)
    if not leaks.clean:
        raise LeakFoundError(
            "foxhunt run",
            f"stopped by the leak guard: look-ahead in {', '.join(leaks.leaking_columns)}",
            "fix the named feature columns; nothing is trained on leaking features",
        )
    log("features")
    cache = get_or_build(files, cfg, out / "cache")
    log("alpha check")
    horizons = cfg.alpha.horizons or tuple(cfg.labels.horizons(cfg.data.row_unit))
    alpha = run_alpha(cache, cfg, tuple(horizons))
    alpha.leak_guard = leaks.to_dict()
    write_alpha(alpha, out / "alpha")
    log(verdict_line(alpha))
    device = resolve_device(cfg)
    log(f"training on {device}")
    folds = train(cache, cfg, out / "train", resume=resume, log=log)
    summary: dict[str, Any] = {
        "run": {
            "profile": profile,
            "config_hash": config_hash(cfg),
            "seed": cfg.run.seed,
            "device": str(device),
            "foxhunt_version": foxhunt.__version__,
            "started": started,
            "elapsed_s": time.perf_counter() - t0,
        },
        "data": _data_summary(cache, files, synthetic, cfg),
        "leaks": {"passed": leaks.clean, "columns_checked": leaks.columns},
        "alpha": _alpha_summary(alpha.to_dict()),
        "folds": folds,
        "summary": {
            "mean_net_pnl": float(np.mean([f["net_pnl"] for f in folds])),
            "mean_sharpe_annual": float(np.mean([f["sharpe_annual"] for f in folds])),
            "beats_flat_folds": sum(f["net_pnl"] > f["baselines"]["flat"]["net_pnl"] for f in folds),
            "beats_long_folds": sum(f["net_pnl"] > f["baselines"]["long"]["net_pnl"] for f in folds),
        },
    }
    write_json(out / "metrics.json", summary, indent=2, default=float)
    write_report(out, summary)
    log(f"report: {out / 'report.html'}")
    return summary
