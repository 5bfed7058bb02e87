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

The reported validation metrics of a fold are those of its **last** epoch, not of its best one:
picking the epoch by its validation score and then reporting that score would select on the
validation period (the best checkpoint is kept for inspection and for rewinds).

``--resume`` continues from the last checkpoint: weights, optimizer, PopArt, signals, replay,
visit counts and every random generator are restored, so on CPU the resumed run reproduces the
uninterrupted one exactly.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foxhunt.agent.agent import Agent, Mode
from foxhunt.atomic import write_json
from foxhunt.backtest.evaluate import ScriptedPolicy, evaluate, scripted
from foxhunt.backtest.metrics import StepRecord
from foxhunt.backtest.run import METRIC_KEYS, bars_per_year, equity_curve, summarise
from foxhunt.config.models import FoxhuntConfig
from foxhunt.env.actions import ActionCodec
from foxhunt.env.core import TradingEnv
from foxhunt.env.market import MarketTensors, market_tensors
from foxhunt.errors import FoxhuntError
from foxhunt.features.cache import FeatureCache
from foxhunt.features.layout import STATE_LAYOUT
from foxhunt.train.checkpoint import (
    CheckpointContents,
    CheckpointStore,
    capture_rng,
    load_checkpoint,
    restore_rng,
)
from foxhunt.train.diagnostics import (
    HISTORY_FILE,
    TENSORBOARD_DIR,
    DiagnosticsWriter,
    EpochStats,
    console_line,
    q_key,
)
from foxhunt.train.guard import AnomalyGuard, GuardResult
from foxhunt.train.plateau import PlateauDetector, PlateauResponder, Response
from foxhunt.train.sizing import activation_bytes_per_sample, size_run
from foxhunt.validation.dataset import FoldData, make_folds


class Interrupted(Exception):
    """Raised by the ``stop_after`` hook (tests simulate an interruption with it)."""


@dataclass
class FoldResult:
    fold: int
    metrics: dict[str, Any]
    history: list[dict[str, float]]
    equity: dict[str, list[float]]
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


def config_differences(stored: dict[str, Any], cfg: FoxhuntConfig) -> list[str]:
    """``section.key: stored -> now`` for every leaf where ``cfg`` differs from a stored config dump."""

    def leaves(d: Any, prefix: str = "") -> dict[str, Any]:
        if isinstance(d, dict):
            out: dict[str, Any] = {}
            for k, v in d.items():
                out.update(leaves(v, f"{prefix}{k}."))
            return out
        return {prefix[:-1]: d}

    a, b = leaves(stored), leaves(json.loads(json.dumps(cfg.model_dump(mode="json"))))
    return [
        f"{k}: {a.get(k, '(absent)')} -> {b.get(k, '(absent)')}"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]


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


def _equity(rec: StepRecord) -> list[float]:
    curve = equity_curve(rec)
    stride = max(1, len(curve) // 500)  # enough points for a plot
    return [float(x) for x in curve[::stride]]


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


def validate(
    market: MarketTensors, fd: FoldData, cfg: FoxhuntConfig, policy, bpy: float
) -> tuple[dict, StepRecord]:
    lo, hi = fd.fold.validation_start, fd.fold.validation_end
    cap = cfg.train.validation_rows
    if cap > 0:
        hi = min(hi, lo + cap)
    rec = evaluate(market, cfg.env, lo, hi, policy)
    return _summarise(rec, bpy, cfg), rec


class FoldTrainer:
    """Trains one fold's agent; every piece of its state is checkpointable."""

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
            t.plateau, self.agent.learner.opt, heads, generator=self.agent.gen, rewind=self.rewind
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
        env = TradingEnv(self.market, self.env_cfg)
        obs = env.reset(starts, starts + steps)
        nstep = agent.nstep(n)
        obs, collect_stats = agent.collect(env, obs, nstep, steps)
        tail = nstep.flush()  # the epoch's episodes are truncated, not ended: bootstrap the tail
        if tail is not None:
            agent.replay.add(tail)
        t1 = time.perf_counter()
        batch = min(self.sizes.batch, len(agent.replay))
        agent.learn(
            self.cfg.agent.learn.updates_per_epoch,
            batch,
            sink=lambda st: [stats.add(k, v) for k, v in st.items()],
        )
        # per-step Sharpe of the collected rewards, annualised like the validation Sharpe
        stats.add("sharpe/train", collect_stats["train_sharpe"] * math.sqrt(self.bpy))
        stats.add("misc/reward_mean", collect_stats["reward_mean"])
        stats.add("misc/bonus_share", collect_stats["bonus_share"])
        stats.add("experts/utilisation", agent.signals["expert_utilisation"])
        t2 = time.perf_counter()
        val, rec = validate(
            self.market, self.fd, self.cfg, lambda o, e: agent.policy(o, Mode.GREEDY), self.bpy
        )
        t3 = time.perf_counter()
        row = stats.read()  # the one host read of the epoch
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
    metrics, curves = {}, {}
    for kind in (ScriptedPolicy.FLAT, ScriptedPolicy.LONG):
        m, rec = validate(market, fd, cfg, scripted(kind, cfg.env, seed=cfg.run.seed), bpy)
        metrics[kind.value] = {k: v for k, v in m.items() if k != "all"}
        curves[kind.value] = _equity(rec)
    return metrics, curves


def train(
    cache: FeatureCache,
    cfg: FoxhuntConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    log: Callable[[str], None] = print,
    stop_after: tuple[int, int] | None = None,
) -> list[dict[str, Any]]:
    """Train every fold; returns the per-fold results (also written to ``out_dir/folds.json``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not resume:  # a fresh run: nothing of an earlier run in this folder is judged or resumed as its own
        for old in (out / "checkpoints", out / TENSORBOARD_DIR):
            shutil.rmtree(old, ignore_errors=True)
        for old in (out / HISTORY_FILE, out / "folds.json"):
            old.unlink(missing_ok=True)
    device = resolve_device(cfg)
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
        for fd in folds[len(results) :]:
            trainer = FoldTrainer(cache, fd, cfg, device, store, log)
            last = store.last_path(trainer.k)
            if resume and last.exists():
                trainer.resume_from(last)
                log(f"fold {trainer.k}: resumed after epoch {trainer.epoch - 1}")
            result = _train_fold(trainer, store, stop_after)
            results.append(result.to_dict())
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
    }


def _train_fold(tr: FoldTrainer, store: CheckpointStore, stop_after: tuple[int, int] | None) -> FoldResult:
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
            if tr.epoch % cfg.train.log_every == 0 or not verdict.ok:
                tr.log(console_line(k, tr.epoch, row))
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
            store.save_last(k, tr.epoch, contents)
            store.save_ring(k, tr.epoch, contents)
            if not verdict.ok:
                anomaly = verdict.diagnosis
                writer.event(tr.epoch, "anomaly", verdict.diagnosis)
            tr.guard.raise_if(verdict, where=f"fold {k} epoch {tr.epoch}")
            final = ep
            if stop_after is not None and (k, tr.epoch) == stop_after:
                raise Interrupted(f"stopped after fold {k} epoch {tr.epoch}")
            tr.epoch += 1
    finally:
        writer.close()
    if final is None:  # resumed after the fold's last epoch: validate the restored policy once
        val, rec = validate(tr.market, tr.fd, cfg, lambda o, e: tr.agent.policy(o, Mode.GREEDY), tr.bpy)
    else:
        val, rec = final["val"], final["rec"]
    base, base_curves = _baselines(tr.market, tr.fd, cfg, tr.bpy)
    metrics = {kk: vv for kk, vv in val.items() if kk != "all"}
    metrics.update(
        train_rows=len(tr.fd.fold.train),
        val_rows=int(tr.fd.fold.validation_end - tr.fd.fold.validation_start),
        baselines=base,
    )
    util = tr.agent.signals["expert_utilisation"].cpu().tolist()
    return FoldResult(
        fold=k,
        metrics=metrics,
        history=tr.history,
        equity={"agent": _equity(rec), **base_curves},
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
        from foxhunt.train.checkpoint import read_checkpoint_meta

        self.path = Path(path)
        meta = read_checkpoint_meta(self.path)
        self.cfg = FoxhuntConfig.model_validate(meta["config"]) if "config" in meta else cfg
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
        return lambda obs, env: agent.policy(obs, Mode.GREEDY)
