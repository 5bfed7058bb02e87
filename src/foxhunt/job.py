"""The main job, ``foxhunt run``: data -> features -> leak guard -> alpha check -> training -> report.

With no data it first generates the embedded synthetic market (the profile's ``[synth]`` section,
planted alpha on) as DBN files, so the whole pipeline runs on a fresh machine with nothing else.
Every stage is the same code the individual commands run; the job only chains them and gathers one
summary (``metrics.json``, with a ``folds`` list: validation ``net_pnl``, ``sharpe_annual``,
``max_drawdown``, ``trades``, the ``baselines`` flat, long (re-entered each plan), buy_hold and the
reference ``rule`` (foxhunt.domain.baselines), and the
``capture`` agent / rule: :mod:`foxhunt.backtest.reference`) that ``report.html`` renders.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import foxhunt
from foxhunt.atomic import write_json
from foxhunt.config.loader import config_hash, write_resolved
from foxhunt.config.models import FoxhuntConfig
from foxhunt.console import Reporter, reporter_or_lines
from foxhunt.data.sessions import iso_utc
from foxhunt.outputs import claim_run
from foxhunt.report.schema import LAST_EPOCH_KEY

if TYPE_CHECKING:
    from foxhunt.dataset.prepared import Prepared
    from foxhunt.features.cache_file import FeatureCache

# The job's resolved config, written once its data has been read: a resume is compared with it.
RECORDED_CONFIG = "run.config.json"
# What a started job leaves in its folder: a new job there needs --overwrite (or --resume).
JOB_RESULTS = (RECORDED_CONFIG, "metrics.json", "report.html", "train")


def _symbols(files: list[Path]) -> str:
    """The symbols the DBN files' metadata headers name (their records are not decoded)."""
    import databento_dbn as dbn
    from databento.common.error import BentoError

    from foxhunt.data.bento import db

    found: set[str] = set()
    for p in files:
        try:
            found.update(str(s) for s in db.DBNStore.from_file(p).symbols or ())
        except (OSError, ValueError, BentoError, dbn.DBNError):  # ingested already: the name is cosmetic
            continue
    return ", ".join(sorted(found))


def _data_summary(cache, files: list[Path], synthetic: bool, cfg: FoxhuntConfig) -> dict[str, Any]:
    ts = cache.column("ts")
    dates = np.unique(cache.column("trade_date"))
    source = (
        f"synthetic ES market (seed {cfg.synth.seed}, planted alpha {cfg.synth.alpha})"
        if synthetic
        else ", ".join(str(p) for p in files)
    )
    # The report's title names the data, never the settings profile.
    name = source if synthetic else files[0].name + (f" and {len(files) - 1} more" if len(files) > 1 else "")
    return {
        "synthetic": synthetic,
        "name": name,
        "files": [p.name for p in files],
        "instrument": _symbols(files),
        "source": source,
        "rows": int(len(ts)),
        "row_unit": cfg.data.row_unit.value,
        "sessions": int(len(dates)),
        "first": iso_utc(int(ts[0]), "ms") if len(ts) else "",
        "last": iso_utc(int(ts[-1]), "ms") if len(ts) else "",
        "features": int(cache.features().shape[1]),
    }


def _alpha_summary(alpha: dict[str, Any], line: str, plots: list[str]) -> dict[str, Any]:
    """The alpha check for metrics.json: verdict, its one line, AUC rows and the PNGs (paths relative
    to the run folder; the report embeds them)."""
    rows = []
    for h in alpha["horizons"]:
        for model, auc in h["auc"].items():
            lo, hi = h["auc_ci"][model]
            rows.append({"model": model, "horizon": h["horizon"], "auc": auc, "auc_lo": lo, "auc_hi": hi})
    return {"verdict": alpha["verdict"], "verdict_line": line, "rows": rows, "plots": plots}


def run_job(
    cfg: FoxhuntConfig,
    out_dir: str | Path,
    data: list[Path] | None = None,
    *,
    log: Callable[[str], None] = print,
    resume: bool = False,
    overwrite: bool = False,
    profile: str = "default",
    progress: Reporter | None = None,
    tracking_uri: str | None = None,
) -> dict[str, Any]:
    """The whole pipeline into ``out_dir``; returns the summary written as ``metrics.json``.

    ``progress`` shows each stage's bars and lines; without it the lines go to ``log``. A folder
    holding another job is refused unless ``overwrite``; ``resume`` needs the folder and the config
    it recorded, checked before anything is written. ``run.config.json`` is written once the data
    has passed the leak guard: data that cannot be read leaves nothing behind. Training onward is
    tracked in MLflow (``tracking_uri``: :func:`foxhunt.tracking.resolve_uri`; ``"none"``: off)."""
    from foxhunt.alpha.check import check_horizons
    from foxhunt.alpha.report import verdict_line
    from foxhunt.alpha.report import write_report as write_alpha
    from foxhunt.backtest.capture import Capture
    from foxhunt.backtest.reference import planted_column
    from foxhunt.dataset import warmup
    from foxhunt.dataset.build import get_or_build
    from foxhunt.parallel.idle import idle_cores
    from foxhunt.report.html import write_report
    from foxhunt.stages import Stopped, alpha_check, leak_guard_while
    from foxhunt.tracking import start_run
    from foxhunt.train.guard import AnomalyError
    from foxhunt.train.run import resolve_device, train, warm_compile

    rep = reporter_or_lines(progress, log)
    log = rep.say  # every line below goes through the reporter (stamped, or silenced by --quiet)
    if cfg.alpha.horizons is not None:  # refused before any stage runs, not after the cache
        check_horizons(cfg.alpha.horizons)
    out = claim_run(out_dir, cfg, RECORDED_CONFIG, JOB_RESULTS, resume=resume, overwrite=overwrite)
    t0 = time.perf_counter()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    synthetic = not data
    if synthetic:
        # Imported here, not above: importing the simulator compiles its eager-signature kernels (~10 s
        # on a cold numba cache), which a job on real data never runs.
        from foxhunt.data.synth import write_synthetic

        # The feature and label kernels compile in forked processes while the market is written (on a
        # machine with idle cores; with numba's cache warm they only load): the guard then loads them.
        warm = warmup.start(cfg, idle_cores())
        what = f"synthetic market: {cfg.synth.sessions} sessions, planted alpha {cfg.synth.alpha}"
        try:
            with rep.task(what):
                files = write_synthetic(cfg.synth, out / "market")
        except BaseException:
            warm.wait(timeout=0)  # nothing will use the kernels: the children are stopped
            raise
        warm.wait()
    else:
        files = list(data or [])

    def build_and_compile(prepared: Prepared) -> tuple[FeatureCache, float]:
        # While the guard's cuts run in forked processes (its slowest part): the cache from the
        # guard's rows and features, then training's compiles (on a GPU ~105 s on a fresh host).
        # Neither is used before the verdict; on a leak the cache this job built is removed.
        cache = get_or_build(files, cfg, out / "cache", progress=rep, prepared=prepared)
        with rep.task("compiling training's steps while the guard's cuts run"):
            return cache, warm_compile(cache, cfg)

    leaks, (cache, compile_s) = leak_guard_while(
        files, cfg, "foxhunt run", Stopped.TRAINING, rep, log, build_and_compile, builds=out / "cache"
    )
    write_resolved(cfg, out / RECORDED_CONFIG)
    if compile_s:
        log(f"training's steps compiled in {compile_s:.0f}s, beside the leak guard's cuts")
    alpha = alpha_check(cache, cfg, leaks, rep)
    alpha_paths = write_alpha(alpha, out / "alpha")
    log(verdict_line(alpha))
    device = resolve_device(cfg)
    log(f"training on {device}")
    stopped: AnomalyError | None = None
    # Started at training (the stages before it are cached or quick to rerun), so that a run that
    # ends before training leaves no run behind; ended below once the report is written.
    tracker = start_run(out.name, cfg, tracking_uri, command="run", profile=profile, out=out, resume=resume)
    try:
        folds = train(
            cache,
            cfg,
            out / "train",
            resume=resume and (out / "train").is_dir(),  # a job stopped before training starts it
            overwrite=overwrite,
            progress=rep,
            leak_guard=leaks.summary(),
            planted=planted_column(files),
            on_epoch=tracker.epoch_hook(),
        )
    except AnomalyError as err:
        # A stopped run still gets its report (the folds it finished and where it stopped); the
        # error is raised again once the report is written, so the command still fails.
        stopped = err
        done = out / "train" / "folds.json"
        folds = json.loads(done.read_text()) if done.is_file() else []
    except BaseException as err:
        tracker.end(err)
        raise
    capture = Capture.of(folds)
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
        "leaks": {
            "passed": leaks.clean,
            "columns_checked": leaks.columns,
            "verdict": leaks.verdict,
            "leaking_columns": leaks.leaking_columns,
        },
        "leak_guard": leaks.summary(),
        "alpha": _alpha_summary(
            alpha.to_dict(),
            verdict_line(alpha),
            [str(p.relative_to(out)) for p in alpha_paths.values() if p.suffix == ".png"],
        ),
        "folds": folds,
        "summary": {
            # Every fold's numbers are from the checkpoint it names (folds[k].checkpoint, .epoch).
            "reported_checkpoint": sorted({f["checkpoint"] for f in folds}),
            "mean_net_pnl": float(np.mean([f["net_pnl"] for f in folds])) if folds else None,
            "mean_sharpe_annual": float(np.mean([f["sharpe_annual"] for f in folds])) if folds else None,
            "mean_net_pnl_last_epoch": (
                float(np.mean([f[LAST_EPOCH_KEY]["net_pnl"] for f in folds])) if folds else None
            ),
            "beats_flat_folds": sum(f["net_pnl"] > f["baselines"]["flat"]["net_pnl"] for f in folds),
            "beats_long_folds": sum(f["net_pnl"] > f["baselines"]["long"]["net_pnl"] for f in folds),
            "beats_buy_hold_folds": sum(  # a fold resumed from before buy_hold has none
                f["net_pnl"] > f["baselines"]["buy_hold"]["net_pnl"]
                for f in folds
                if "buy_hold" in f["baselines"]
            ),
            "agent_trades": sum(int(f["trades"]) for f in folds),  # 0: the agent never traded
            # The agent's net PnL summed over the folds where the reference rule made money / the
            # rule's there (None: no such fold; foxhunt.backtest.reference.Capture), the median of
            # those folds' captures (per fold: folds[k].capture), the folds kept out (the rule lost or
            # was absent: why, both net PnLs) and the sum over every fold as reported before issue 58.
            "capture": capture.ratio,
            "capture_median": capture.median,
            "capture_excluded": capture.excluded(),
            "capture_all_folds": capture.all_folds,
        },
    }
    if stopped is not None:
        summary["stopped"] = {"where": stopped.where, "diagnosis": stopped.result.diagnosis}
    write_json(out / "metrics.json", summary, indent=2, default=float)
    write_report(out, summary)
    tracker.log_folds(folds, out / "train")
    for name in ("report.html", "metrics.json", RECORDED_CONFIG):
        tracker.log_artifact(out / name)
    tracker.end(stopped)
    log(f"report: {out / 'report.html'}")
    if stopped is not None:
        raise stopped
    return summary
