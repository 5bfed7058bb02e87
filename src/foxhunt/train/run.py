"""The walk-forward training run: folds -> epochs -> collect, learn, validate (SPEC §8).

Each fold trains a fresh agent (seeded by the run seed and the fold index), so fold k+1 starts
from the same state whatever fold k did, and nothing learned on a later period reaches an earlier
fold's validation. An epoch:

1. **Collect.** ``envs`` episodes start at random rows of the fold's training block (their windows
   end before the purge, so no episode reaches validation rows) and step ``steps_per_epoch`` rows
   with the exploring policy; n-step transitions go to the device replay.
2. **Learn.** ``updates_per_epoch`` learner updates.
3. **Validate.** The greedy policy over every validation window of the fold (the backtester).
4. **Check and keep.** Diagnostics are read back once; the anomaly guard stops the run on NaN/Inf,
   an exploding loss or an implausible validation result; the plateau detector responds to a
   frozen learner (not after the fold's last epoch); checkpoints: last, a ring of recent ones, and
   the best validation Sharpe (never an anomalous one; saved before a plateau response moves the
   weights it was validated with).

The reported validation metrics of a fold (its ``net_pnl``, ``sharpe_annual``, equity and action
shares) are those of ``best.safetensors`` evaluated over the fold's whole validation period exactly
as ``foxhunt backtest --checkpoint`` evaluates it, so the report and a backtest of that file agree;
``checkpoint`` and ``epoch`` say which file and epoch. Because the best epoch is picked on the
validation period, its numbers are optimistic: the last epoch, over the same rows, is reported
beside them (``last_epoch``). A fold with no eligible best epoch reports its last one.

``--resume`` continues from the last checkpoint: weights, optimizer, PopArt, signals, replay,
visit counts and every random generator are restored, so on CPU the resumed run reproduces the
uninterrupted one exactly.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foxhunt.agent.agent import Agent
from foxhunt.atomic import write_json
from foxhunt.backtest.evaluate import evaluate, windows
from foxhunt.backtest.metrics import StepRecord
from foxhunt.backtest.reference import fold_capture, fold_policies
from foxhunt.backtest.run import METRIC_KEYS, bars_per_year, summarise
from foxhunt.config.models import FoxhuntConfig
from foxhunt.console import SILENT, Reporter, Task, epoch_line, reporter_or_lines
from foxhunt.env.actions import ActionCodec
from foxhunt.env.market import MarketTensors, market_tensors
from foxhunt.errors import FoxhuntError
from foxhunt.features.cache import FeatureCache
from foxhunt.features.layout import STATE_LAYOUT
from foxhunt.outputs import claim_run, config_differences
from foxhunt.report.schema import BEST_RULE, LAST_EPOCH_KEY, ReportedCheckpoint
from foxhunt.report.series import equity_series, net_by_row
from foxhunt.train.checkpoint import (
    CheckpointContents,
    CheckpointStore,
    capture_rng,
    load_checkpoint,
    restore_rng,
)
from foxhunt.train.diagnostics import (
    EPOCH_SECONDS,
    HISTORY_FILE,
    LOSS_TOTAL,
    QGAP_CORR,
    SHARPE_VAL,
    TENSORBOARD_DIR,
    DiagnosticsWriter,
    EpochStats,
    console_line,
    direction_gap,
    gap_correlation,
    gap_rows,
    q_key,
)
from foxhunt.train.guard import AnomalyGuard, GuardResult
from foxhunt.train.plateau import PlateauDetector, PlateauResponder, Response
from foxhunt.train.sizing import activation_bytes_per_sample, size_run
from foxhunt.validation.dataset import FoldData, make_folds

# The run's resolved config, written when it starts: a resume is compared with it, key for key.
RECORDED_CONFIG = "train.config.json"
# What a started run leaves in its folder: a new run there needs --overwrite (or --resume).
RUN_RESULTS = ("checkpoints", "folds.json", HISTORY_FILE, RECORDED_CONFIG)
# on_epoch(fold, epoch, row): the per-epoch hook of train() (tracking, a tuning study's pruner).
EpochHook = Callable[[int, int, dict[str, float]], None]


class Interrupted(Exception):
    """Raised by the ``stop_after`` hook (tests simulate an interruption with it)."""


@dataclass
class FoldResult:
    fold: int
    metrics: dict[str, Any]
    history: list[dict[str, float]]
    equity: dict[str, list]  # report.series.equity_series: "time" (ISO text) and a curve per policy
    actions: dict[str, dict[str, dict[str, float]]]
    diagnostics: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "fold": self.fold,
            **self.metrics,
            "history": self.history,
            "equity": self.equity,
            "actions": self.actions,
            "diagnostics": self.diagnostics,
        }


def resolve_device(cfg: FoxhuntConfig) -> torch.device:
    want = cfg.run.device.value
    if want == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if want == "cuda" and not torch.cuda.is_available():
        raise FoxhuntError(
            "run.device",
            "cuda was asked for but no CUDA device is visible",
            "use --set run.device=auto or cpu",
        )
    return torch.device(want)


def _summarise(rec: StepRecord, bpy: float, cfg: FoxhuntConfig) -> dict[str, Any]:
    # The run's own ceiling (train.anomaly.max_sharpe_annual), which the guard would otherwise never
    # see: these metrics carry the flag, and the guard trusts a flag that is present.
    m, reasons = summarise(rec, bpy, cfg, cfg.train.anomaly.max_sharpe_annual)
    return {**{k: m[k] for k in METRIC_KEYS}, "implausible": reasons, "all": m}


def _net_by_row(rec: StepRecord, fd: FoldData, cfg: FoxhuntConfig) -> np.ndarray:
    """Net PnL per validation row in time order, of a record over the whole validation period."""
    lo, hi = fd.fold.validation_start, fd.fold.validation_end
    starts, _ = windows(lo, hi, cfg.env.episode_rows)
    net = ((rec.gross_pnl - rec.costs) * rec.written).cpu().numpy()
    return net_by_row(net, rec.written.cpu().numpy(), starts.numpy(), lo, hi)


def _action_shares(metrics: dict[str, Any], cfg: FoxhuntConfig) -> dict[str, dict[str, dict[str, float]]]:
    """``{picked|realised: {branch: {value label: share of written steps}}}`` from
    :func:`~foxhunt.backtest.metrics.compute_metrics`' distributions (picked: every branch;
    realised: direction after the plan lock, magnitude after the Kelly cap)."""
    labels = ActionCodec(cfg.env.branches).value_labels()
    return {
        kind: {
            branch: {name: float(x) for name, x in zip(labels[branch], shares, strict=False)}
            for branch, shares in metrics[kind].items()
        }
        for kind in ("picked", "realised")
    }


def capped(fd: FoldData, cfg: FoxhuntConfig) -> bool:
    """Whether train.validation_rows cuts the per-epoch validation short of the fold's whole period."""
    cap = cfg.train.validation_rows
    return 0 < cap < fd.fold.validation_end - fd.fold.validation_start


def validate(
    market: MarketTensors, fd: FoldData, cfg: FoxhuntConfig, policy, bpy: float, *, whole: bool = False
) -> tuple[dict, StepRecord]:
    """The policy over the fold's validation rows: the first train.validation_rows of them per epoch,
    or (``whole``) all of them, as ``foxhunt backtest`` evaluates a checkpoint."""
    lo, hi = fd.fold.validation_start, fd.fold.validation_end
    if not whole and capped(fd, cfg):
        hi = lo + cfg.train.validation_rows
    rec = evaluate(market, cfg.env, lo, hi, policy)
    return _summarise(rec, bpy, cfg), rec


class FoldTrainer:
    """Trains one fold's agent; every piece of its state is checkpointable."""

    # What a person sees (set by train(); a trainer built elsewhere shows nothing): the reporter,
    # the whole run's epoch count (for the ETA) and the number of folds of the run.
    progress: Reporter = SILENT
    overall: Task | None = None
    n_folds: int = 1
    # The state column carrying the market's planted signal (a synthetic market's; None on real data,
    # where it is unknown): each epoch correlates the greedy direction gap with it (QGAP_CORR).
    planted: str | None = None

    def __init__(
        self,
        cache: FeatureCache,
        fd: FoldData,
        cfg: FoxhuntConfig,
        device: torch.device,
        store: CheckpointStore,
        log: Callable[[str], None],
    ) -> None:
        self.cfg, self.fd, self.device, self.store, self.log = cfg, fd, device, store, log
        self.k = fd.fold.index
        self.market = market_tensors(cache, fd, vol_window=cfg.env.plan.vol_window, device=device)
        self.bpy = bars_per_year(cache)
        self.ts = cache.column("ts")  # the report's equity curves are drawn against time
        t, net = cfg.train, cfg.agent.network
        b = cfg.env.branches
        self.sizes = size_run(
            device,
            STATE_LAYOUT.width,
            envs=t.envs,
            batch=cfg.agent.learn.batch,
            replay_capacity=cfg.agent.replay.capacity,
            sizing=t.sizing,
            activation_bytes=activation_bytes_per_sample(
                STATE_LAYOUT.width,
                hidden=net.hidden,
                trunk_layers=net.trunk_layers,
                experts=net.experts,
                expert_hidden=net.expert_hidden,
                head_hidden=net.head_hidden,
                atoms=net.atoms,
                branch_actions=ActionCodec(b).sizes,
            ),
            n_step=cfg.agent.learn.n_step,
        )
        seed = cfg.run.seed * 1000 + self.k
        self.agent = Agent(
            cfg.agent, cfg.env.branches, device=device, seed=seed, replay_capacity=self.sizes.replay_capacity
        )
        self.starts_gen = torch.Generator(device=device).manual_seed(seed + 1)
        # The process-wide numpy and Python generators, which every checkpoint records beside torch's
        # (seeded by the Agent): seeded per fold too, so that a run's checkpoints do not depend on the
        # process that wrote them and a resumed run's are bit-identical to an uninterrupted one's.
        random.seed(seed)
        np.random.seed(seed % 2**32)
        self.env_cfg = cfg.env.model_copy(update={"episode_rows": t.steps_per_epoch + 1})
        # Training episodes must end before the first purged row: the last usable row is the
        # largest training row index (purged and embargoed rows are excluded from fd.fold.train).
        self.train_lo = int(fd.fold.train_start)
        self.train_hi = int(fd.fold.train.max()) + 1 if len(fd.fold.train) else self.train_lo
        if self.train_hi - self.train_lo < t.steps_per_epoch + 2:
            raise FoxhuntError(
                f"fold {self.k}",
                f"{self.train_hi - self.train_lo} training rows are fewer than "
                f"one episode ({t.steps_per_epoch + 2})",
                "lower train.steps_per_epoch or use more data",
            )
        self.history: list[dict[str, float]] = []
        self.guard = AnomalyGuard(t.anomaly)
        self.plateau = PlateauDetector.from_config(t.plateau)
        heads = [
            p for name, p in self.agent.net.named_parameters() if name.startswith(("value", "advantage"))
        ]
        self.responder = PlateauResponder(
            t.plateau,
            self.agent.learner.opt,
            heads,
            generator=self.agent.gen,
            rewind=self.rewind,
            temperature=cfg.agent.explore.temperature,  # 0 (Boltzmann off): the boost rung is skipped
        )
        self.responses: list[str] = []
        self.epoch = 0
        self.best_epoch = -1

    # --- state for checkpoints --------------------------------------------------------------

    def modules(self) -> dict[str, torch.nn.Module]:
        a = self.agent
        return {"network": a.net, "target": a.learner.target, "popart": a.learner.popart}

    def extra(self) -> dict[str, torch.Tensor]:
        a = self.agent
        out = {f"replay.{k}": v for k, v in a.replay.state_dict().items()}
        out.update({f"signals.{k}": v for k, v in a.signals.state_dict().items()})
        out.update({f"counts.{i}": c for i, c in enumerate(a.counts)})
        out.update(capture_rng({"agent": a.gen, "starts": self.starts_gen}))
        return out

    def contents(self, metrics: dict[str, Any]) -> CheckpointContents:
        return CheckpointContents(
            modules=self.modules(),
            branches=self.cfg.env.branches,
            optimizers={"adam": self.agent.learner.opt},
            tensors=self.extra(),
            meta=self.meta(metrics),
        )

    def rewind(self) -> str:
        """The plateau ladder's last rung: back to the newest ring checkpoint (weights and optimizer)."""
        path = self.store.latest_ring(self.k)
        if path is None:
            return "nothing (no ring checkpoint yet)"
        load_checkpoint(
            path,
            modules=self.modules(),
            branches=self.cfg.env.branches,
            optimizers={"adam": self.agent.learner.opt},
            map_location=self.device,
        )
        return str(path)

    def load_extra(self, tensors: dict[str, torch.Tensor]) -> None:
        a = self.agent
        a.replay.load_state_dict(
            {k[len("replay.") :]: v for k, v in tensors.items() if k.startswith("replay.")}
        )
        a.signals.load_state_dict(
            {k[len("signals.") :]: v for k, v in tensors.items() if k.startswith("signals.")}
        )
        for i, c in enumerate(a.counts):
            c.copy_(tensors[f"counts.{i}"])
        restore_rng(
            {k: v for k, v in tensors.items() if k.startswith("rng/")},
            {"agent": a.gen, "starts": self.starts_gen},
        )

    def meta(self, metrics: dict[str, Any]) -> dict[str, Any]:
        return {
            "config": self.cfg.model_dump(mode="json"),
            "fold": self.k,
            "epoch": self.epoch,
            "metrics": metrics,
            "seed": self.cfg.run.seed,
            "history": self.history,
            "responses": self.responses,
            "best_epoch": self.best_epoch,
            "temperature_boost": self.agent.temperature_boost,
            "lr_scale": self.agent.learner.lr_scale,
            # The guard's loss history and the plateau detector's window and rung: a resumed run
            # judges and responds at the same epochs as an uninterrupted one.
            "guard": self.guard.state_dict(),
            "plateau": {**self.plateau.state_dict(), **self.responder.state_dict()},
        }

    def resume_from(self, path: Path) -> None:
        from foxhunt.train.checkpoint import read_checkpoint_meta

        differs = config_differences(read_checkpoint_meta(path).get("config", {}), self.cfg)
        if differs:
            raise FoxhuntError(
                "--resume",
                f"the config differs from the interrupted run's ({path}): {'; '.join(differs[:8])}",
                "resume with the same profile, --config and --set values, or start a new run with --out",
            )
        meta, tensors = load_checkpoint(
            path,
            modules=self.modules(),
            branches=self.cfg.env.branches,
            optimizers={"adam": self.agent.learner.opt},
            map_location=self.device,
        )
        self.load_extra(tensors)
        self.epoch = int(meta["epoch"]) + 1
        self.history = list(meta["history"])
        self.responses = list(meta["responses"])
        self.best_epoch = int(meta["best_epoch"])
        self.agent.temperature_boost = float(meta["temperature_boost"])
        self.agent.learner.lr_scale = float(meta.get("lr_scale", 1.0))
        if "guard" in meta:
            self.guard.load_state_dict(meta["guard"])
        if "plateau" in meta:
            self.plateau.load_state_dict(meta["plateau"])
            self.responder.load_state_dict(meta["plateau"])

    # --- one epoch --------------------------------------------------------------------------

    def run_epoch(self) -> dict[str, Any]:
        t, agent = self.cfg.train, self.agent
        t0 = time.perf_counter()
        lr = agent.learner.set_epoch(self.epoch)
        stats = EpochStats(self.device)
        n, steps = self.sizes.envs, t.steps_per_epoch
        span = self.train_hi - self.train_lo - steps - 1
        u = torch.rand(n, generator=self.starts_gen, device=self.device)
        starts = self.train_lo + (u * span).to(torch.int64)
        # The fast step (on CUDA compiled and a replayed graph); the epoch's tail is bootstrapped.
        collect_stats = agent.collect(self.market, self.env_cfg, starts, steps)
        t1 = time.perf_counter()
        batch = min(self.sizes.batch, len(agent.replay))
        updates = self.cfg.agent.learn.updates_per_epoch
        where = f"fold {self.k + 1}/{self.n_folds} epoch {self.epoch + 1}/{t.epochs}: updates"
        with self.progress.task(where, total=updates, announce=False) as bar:

            def sink(st: dict[str, torch.Tensor]) -> None:
                for k, v in st.items():
                    stats.add(k, v)
                bar.advance()  # a host-side count: no device read

            agent.learn(updates, batch, sink=sink)
        # per-step Sharpe of the collected rewards, annualised like the validation Sharpe
        stats.add("sharpe/train", collect_stats["train_sharpe"] * math.sqrt(self.bpy))
        stats.add("misc/reward_mean", collect_stats["reward_mean"])
        stats.add("misc/bonus_share", collect_stats["bonus_share"])
        stats.add("experts/utilisation", agent.signals["expert_utilisation"])
        t2 = time.perf_counter()
        val, rec = validate(
            self.market, self.fd, self.cfg, agent.greedy_policy(), self.bpy
        )
        t3 = time.perf_counter()
        row = stats.read()  # the one host read of the epoch
        if self.planted is not None and self.planted in self.market.feature_columns:
            rows = gap_rows(self.fd.fold.validation_start, self.fd.fold.validation_end)
            col = self.market.feature_columns.index(self.planted)
            signal = self.market.features[rows.to(self.device), col].cpu().numpy()
            row[QGAP_CORR] = gap_correlation(direction_gap(agent, self.market, self.cfg.env, rows), signal)
        row.update(
            {
                "misc/lr": lr,
                "sharpe/val": float(val["sharpe_annual"]),
                "misc/val_net_pnl": float(val["net_pnl"]),
                "actions/active_frac": float(val["active_frac"]),
                "misc/val_trades": float(val["trades"]),
                "time/collect_s": t1 - t0,
                "time/learn_s": t2 - t1,
                "time/validate_s": t3 - t2,
                "time/epoch_s": t3 - t0,
            }
        )
        # Validation action distributions, picked (every branch) and realised (after the plan lock
        # and the Kelly cap), as shares of the written steps: actions/<picked|realised>/<branch>/<value>.
        for kind, branches in _action_shares(val["all"], self.cfg).items():
            for branch, shares in branches.items():
                row.update({f"actions/{kind}/{branch}/{name}": x for name, x in shares.items()})
        return {"row": row, "val": val, "rec": rec}


def _baselines(market: MarketTensors, fd: FoldData, cfg: FoxhuntConfig, bpy: float) -> tuple[dict, dict]:
    """Flat, long and the reference rule (:mod:`foxhunt.backtest.reference`; where its feature is in
    the state) over the same (whole) validation period as the reported checkpoint: metrics and net
    PnL per row."""
    metrics, curves = {}, {}
    for name, policy in fold_policies(cfg, market).items():
        m, rec = validate(market, fd, cfg, policy, bpy, whole=True)
        metrics[name] = {k: v for k, v in m.items() if k != "all"}
        curves[name] = _net_by_row(rec, fd, cfg)
    return metrics, curves


def train(
    cache: FeatureCache,
    cfg: FoxhuntConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    log: Callable[[str], None] = print,
    stop_after: tuple[int, int] | None = None,
    progress: Reporter | None = None,
    leak_guard: dict[str, Any] | None = None,
    planted: str | None = None,
    on_epoch: EpochHook | None = None,
) -> list[dict[str, Any]]:
    """Train every fold; returns the per-fold results (also written to ``out_dir/folds.json``).

    ``progress`` shows bars and one line per epoch (:func:`foxhunt.console.epoch_line`); without it
    the epoch lines go to ``log``. ``leak_guard`` (the guard's summary, run by the caller on the
    cache's sources: :func:`foxhunt.validation.leaks.guard`) is carried by every fold's result.
    ``planted`` names the state column carrying a synthetic market's planted signal
    (:func:`foxhunt.backtest.reference.planted_column`); each epoch then records the correlation of
    the greedy direction gap with it (``q/direction_gap_corr``), n/a without it (real data).
    ``on_epoch(fold, epoch, row)`` is called after every epoch's checkpoints are written, with the
    epoch's row (training statistics and ``misc/val_net_pnl``, ``sharpe/val`` ...): experiment
    tracking logs it, a tuning study's pruner may raise from it to stop the run.

    A folder holding another run is refused unless ``overwrite`` (its checkpoints, history and
    folds are then deleted); ``resume`` needs the folder, and ``cfg`` equal to the config it
    recorded (:data:`RECORDED_CONFIG`), both checked before anything is written."""
    from foxhunt.config.loader import write_resolved

    rep = reporter_or_lines(progress, log)
    out = claim_run(out_dir, cfg, RECORDED_CONFIG, RUN_RESULTS, resume=resume, overwrite=overwrite)
    device = resolve_device(cfg)
    out.mkdir(parents=True, exist_ok=True)
    if not (resume and (out / RECORDED_CONFIG).is_file()):
        write_resolved(cfg, out / RECORDED_CONFIG)
    if not resume:  # a fresh run: nothing of an earlier run in this folder is judged or resumed as its own
        for old in (out / "checkpoints", out / TENSORBOARD_DIR):
            shutil.rmtree(old, ignore_errors=True)
        for old in (out / HISTORY_FILE, out / "folds.json"):
            old.unlink(missing_ok=True)
    # CPU runs are deterministic (resume reproduces them); both process-wide settings are restored.
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    threads = torch.get_num_threads()
    torch.use_deterministic_algorithms(device.type == "cpu", warn_only=True)
    if device.type == "cpu" and cfg.run.threads > 0:
        torch.set_num_threads(cfg.run.threads)
    try:
        folds = make_folds(cache.features(), cache.columns, cfg.folds, int(cache.meta["label_span"]))
        store = CheckpointStore(out, ring=cfg.train.ring)
        done_path = out / "folds.json"
        results: list[dict[str, Any]] = (
            json.loads(done_path.read_text()) if resume and done_path.exists() else []
        )
        pending = folds[len(results) :]
        with rep.task("training", total=len(pending) * cfg.train.epochs) as overall:
            for fd in pending:
                trainer = FoldTrainer(cache, fd, cfg, device, store, rep.say)
                trainer.progress, trainer.overall, trainer.n_folds = rep, overall, len(folds)
                trainer.planted = planted
                overall.update(description=f"training (fold {trainer.k + 1}/{len(folds)}) epochs")
                last = store.last_path(trainer.k)
                if resume and last.exists():
                    trainer.resume_from(last)
                    overall.update(total=(overall.total or 0) - trainer.epoch)  # epochs done before
                    rep.say(f"fold {trainer.k + 1}/{len(folds)}: resumed after epoch {trainer.epoch}")
                result = _train_fold(trainer, store, stop_after, on_epoch)
                results.append(result.to_dict() | ({"leak_guard": leak_guard} if leak_guard else {}))
                write_json(done_path, results, default=float)
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.set_num_threads(threads)
    return results


def _report_row(epoch: int, row: dict[str, float]) -> dict[str, float]:
    """The history row the report plots (flat names; the diagnostics keys stay in TensorBoard)."""
    branches = [k.split("/")[1] for k in row if k.startswith("q/") and k.endswith("/mean")]
    q_mean = float(np.mean([row[q_key(b, "mean")] for b in branches])) if branches else float("nan")
    q_spread = float(np.mean([row[q_key(b, "spread")] for b in branches])) if branches else float("nan")
    return {
        "epoch": epoch,
        "loss": row.get("loss/total", float("nan")),
        "loss_c51": row.get("loss/c51", float("nan")),
        "loss_iqn": row.get("loss/iqn", float("nan")),
        "loss_mse": row.get("loss/mse", float("nan")),
        "loss_aux": row.get("loss/aux", float("nan")),
        "grad_norm": row.get("grad/total", float("nan")),
        "q_mean": q_mean,
        "q_spread": q_spread,
        "atom_utilisation": row.get("atoms/utilisation", float("nan")),
        "gate_entropy": row.get("experts/gate_entropy", float("nan")),
        "train_sharpe": row.get("sharpe/train", float("nan")),
        "val_sharpe": row.get("sharpe/val", float("nan")),
        "active_frac": row.get("actions/active_frac", float("nan")),
        "lr": row.get("misc/lr", float("nan")),
        "epoch_s": row.get("time/epoch_s", float("nan")),
        "qgap_corr": row.get(QGAP_CORR, float("nan")),  # NaN: no planted signal known (real data)
    }


def _epoch_line(tr: FoldTrainer, row: dict[str, float]) -> str:
    """The short epoch line of :func:`foxhunt.console.epoch_line` from an epoch's diagnostics row."""
    nan = float("nan")
    return epoch_line(
        tr.k,
        tr.n_folds,
        tr.epoch,
        tr.cfg.train.epochs,
        val_net=row.get("misc/val_net_pnl", nan),
        trades=row.get("misc/val_trades", nan),
        sharpe=row.get(SHARPE_VAL, nan),
        loss=row.get(LOSS_TOTAL, nan),
        seconds=row.get(EPOCH_SECONDS, nan),
        eta_s=tr.overall.eta_s if tr.overall is not None else None,
    )


def _train_fold(
    tr: FoldTrainer,
    store: CheckpointStore,
    stop_after: tuple[int, int] | None,
    on_epoch: EpochHook | None = None,
) -> FoldResult:
    cfg, k = tr.cfg, tr.k
    writer = DiagnosticsWriter(store.run_dir, k)
    final = None
    anomaly = None
    try:
        while tr.epoch < cfg.train.epochs:
            ep = tr.run_epoch()
            row, val = ep["row"], ep["val"]
            metrics = {kk: vv for kk, vv in val.items() if kk != "all"}
            # The guard reads the reasons from implausible_reasons (here "implausible" is the list).
            verdict: GuardResult = tr.guard.check(row, {**metrics, "implausible_reasons": val["implausible"]})
            tr.history.append(_report_row(tr.epoch, row))
            writer.write(tr.epoch, row)
            if tr.overall is not None:
                tr.overall.advance()
            if tr.epoch % cfg.train.log_every == 0 or not verdict.ok:
                tr.log(_epoch_line(tr, row))
                tr.progress.detail(console_line(k, tr.epoch, row))
            # Best before any plateau response: it holds the weights whose validation it is marked by.
            best = store.save_best(
                k, tr.epoch, tr.contents(metrics), metric=float(val["sharpe_annual"]), verdict=verdict
            )
            # No response after the fold's last epoch: no training follows, and the last checkpoint
            # keeps the weights whose validation the fold reports.
            if tr.plateau.update(row) and tr.epoch + 1 < cfg.train.epochs:
                action = tr.responder.respond()
                if action.response is Response.TEMPERATURE_BOOST:
                    tr.agent.temperature_boost *= action.temperature_multiplier
                elif action.response is Response.LR_BUMP:
                    tr.agent.learner.lr_scale *= cfg.train.plateau.lr_bump  # lasts past set_epoch
                tr.responses.append(f"epoch {tr.epoch}: {action.response.value} ({action.detail})")
                writer.event(tr.epoch, "plateau", f"{action.response.value}: {action.detail}")
            if best is not None:
                tr.best_epoch = tr.epoch
                tr.responder.note_progress()
            contents = tr.contents(metrics)  # after the response: the resume point continues from here
            store.save_epoch(k, tr.epoch, contents)  # the ring, then last: a kill keeps them in step
            if not verdict.ok:
                anomaly = verdict.diagnosis
                writer.event(tr.epoch, "anomaly", verdict.diagnosis)
            tr.guard.raise_if(verdict, where=f"fold {k} epoch {tr.epoch}")
            final = ep
            if on_epoch is not None:
                on_epoch(k, tr.epoch, row)
            if stop_after is not None and (k, tr.epoch) == stop_after:
                raise Interrupted(f"stopped after fold {k} epoch {tr.epoch}")
            tr.epoch += 1
    finally:
        writer.close()
    return _fold_result(tr, store, final, anomaly)


def _fold_result(
    tr: FoldTrainer, store: CheckpointStore, final: dict[str, Any] | None, anomaly: str | None
) -> FoldResult:
    """A trained fold's result: the reported checkpoint (best, else last) and the last epoch over the
    whole validation period, the baselines over the same rows, equity in time order, diagnostics."""
    cfg, k = tr.cfg, tr.k
    # The last epoch's policy over the whole validation period (the epoch's own validation already
    # is that unless train.validation_rows cut it short, or the run resumed after the last epoch).
    if final is None or capped(tr.fd, cfg):
        last_val, last_rec = validate(
            tr.market, tr.fd, cfg, tr.agent.greedy_policy(), tr.bpy, whole=True
        )
    else:
        last_val, last_rec = final["val"], final["rec"]
    last_epoch = tr.epoch - 1
    # The reported checkpoint: best.safetensors, evaluated as `foxhunt backtest --checkpoint` does
    # (the same loader, policy and rows), so every number the report shows is that file's.
    best_path = store.best_path(k)
    if tr.best_epoch >= 0 and best_path.is_file():
        reported, ckpt = ReportedCheckpoint.BEST, CheckpointPolicy(best_path, cfg)
        val, rec = validate(tr.market, tr.fd, cfg, ckpt.policy(tr.device), tr.bpy, whole=True)
        epoch = ckpt.epoch
    else:
        reported, epoch, val, rec = ReportedCheckpoint.LAST, last_epoch, last_val, last_rec
    base, base_curves = _baselines(tr.market, tr.fd, cfg, tr.bpy)
    metrics = {kk: vv for kk, vv in val.items() if kk != "all"}
    rule = BEST_RULE + (
        f" (each epoch judged on the first {cfg.train.validation_rows:,} validation rows)"
        if capped(tr.fd, cfg)
        else ""
    )
    metrics.update(
        checkpoint=reported.value,
        epoch=epoch,
        checkpoint_file=str(best_path.relative_to(store.run_dir))
        if reported is ReportedCheckpoint.BEST
        else str(store.last_path(k).relative_to(store.run_dir)),
        best_rule=rule,
        train_rows=len(tr.fd.fold.train),
        val_rows=int(tr.fd.fold.validation_end - tr.fd.fold.validation_start),
        baselines=base,
    )
    metrics["capture"] = fold_capture(metrics)  # agent / rule net PnL; None where the rule made <= 0
    metrics[LAST_EPOCH_KEY] = {"epoch": last_epoch, **{kk: vv for kk, vv in last_val.items() if kk != "all"}}
    util = tr.agent.signals["expert_utilisation"].cpu().tolist()
    return FoldResult(
        fold=k,
        metrics=metrics,
        history=tr.history,
        equity=equity_series(
            {"agent": _net_by_row(rec, tr.fd, cfg), **base_curves}, tr.ts, tr.fd.fold.validation_start
        ),
        actions=_action_shares(val["all"], cfg),
        diagnostics={
            "expert_utilisation": util,
            "anomaly": anomaly,
            "plateau_responses": tr.responses,
            "best_epoch": tr.best_epoch,
            "sizes": {"envs": tr.sizes.envs, "batch": tr.sizes.batch, "replay": tr.sizes.replay_capacity},
        },
    )


class CheckpointPolicy:
    """A trained checkpoint as a backtest policy (greedy, the evaluation policy of SPEC §7)."""

    def __init__(self, path: str | Path, cfg: FoxhuntConfig) -> None:
        from foxhunt.train.checkpoint import checkpoint_config

        self.path = Path(path)
        # Tensors, fold, epoch and the header's config all checked before anything uses them.
        self.cfg, meta = checkpoint_config(self.path, cfg)
        self.fold = int(meta["fold"])
        self.epoch = int(meta["epoch"])
        self.value = f"checkpoint {self.path.name} (fold {self.fold}, epoch {self.epoch})"

    def policy(self, device: torch.device | str):
        agent = Agent(self.cfg.agent, self.cfg.env.branches, device=device, seed=0, replay_capacity=16)
        _, tensors = load_checkpoint(
            self.path,
            modules={"network": agent.net, "target": agent.learner.target, "popart": agent.learner.popart},
            branches=self.cfg.env.branches,
            map_location=device,
        )
        # The greedy policy's sizing inputs (conviction, Q variance) are scaled by the acting signals.
        agent.signals.load_state_dict(
            {k[len("signals.") :]: v for k, v in tensors.items() if k.startswith("signals.")}
        )
        return agent.greedy_policy()  # capturable: one CUDA graph per window shape on CUDA
