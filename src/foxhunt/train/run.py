"""The walk-forward training run: folds -> epochs -> collect, learn, select (docs/design.md §7).

Each fold trains a fresh agent (seeded by the run seed and the fold index), so fold k+1 starts
from the same state whatever fold k did, and nothing learned on a later period reaches an earlier
fold's validation. The fold's usable training rows are split (:mod:`foxhunt.train.selection`): a
collection block, then the fold's embargo, then the **selection period** (the last
``train.selection_fraction`` of them). An epoch:

1. **Collect.** ``envs`` episodes start at random rows of the collection block (their windows end
   the fold's embargo before the selection period) and step ``steps_per_epoch`` rows with the
   exploring policy; n-step transitions go to the device replay.
2. **Learn.** ``updates_per_epoch`` learner updates.
3. **Select.** The greedy policy over every window of the selection period (the backtester).
4. **Check and keep.** Diagnostics are read back once; the anomaly guard stops the run on NaN/Inf,
   an exploding loss or an implausible selection result; the plateau detector responds to a
   frozen learner (not after the fold's last epoch); checkpoints: last, a ring of recent ones, and
   the best selection Sharpe (never an anomalous one; saved before a plateau response moves the
   weights it was judged with).

Nothing of an epoch reads the validation period. When the fold's epochs are done, its validation
period is evaluated once: with ``best.safetensors`` exactly as ``foxhunt backtest --checkpoint``
evaluates it (its ``net_pnl``, ``sharpe_annual``, equity and action shares, so the report and a
backtest of that file agree; ``checkpoint`` and ``epoch`` say which file and epoch), and with the
last epoch beside it (``last_epoch``). Under ``train.selection = last``, or when no epoch was
eligible as best, the fold reports its last epoch.

``--resume`` continues from the last checkpoint: weights, optimizer, PopArt, signals, replay,
visit counts and every random generator are restored, so on CPU the resumed run reproduces the
uninterrupted one exactly.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foxhunt import seeding
from foxhunt.agent.agent import Restore
from foxhunt.agent.build import build_agent
from foxhunt.agent.network import input_mask
from foxhunt.agent.stats import q_key
from foxhunt.atomic import write_json
from foxhunt.backtest.capture import RULE, fold_capture
from foxhunt.backtest.reference import baseline_env, fold_policies
from foxhunt.backtest.run import bars_per_year
from foxhunt.backtest.settings import BacktestSettings
from foxhunt.config.models import Device, FoxhuntConfig
from foxhunt.console import SILENT, Reporter, Task, epoch_line, reporter_or_lines
from foxhunt.dataset.cache import load_cache
from foxhunt.domain.actions import ActionCodec
from foxhunt.env.market import MarketTensors, market_tensors
from foxhunt.errors import OUT, RESUME, SAME_CONFIG, FoxhuntError, setting
from foxhunt.features.cache_file import FeatureCache
from foxhunt.features.layout import STATE_LAYOUT
from foxhunt.outputs import claim_run, config_differences
from foxhunt.policy.checkpoint import (
    CheckpointContents,
    Fingerprint,
    capture_rng,
    load_checkpoint,
    restore_rng,
)
from foxhunt.policy.store import CheckpointStore
from foxhunt.policy.trained import CheckpointPolicy
from foxhunt.policy.writer import Writes
from foxhunt.report.schema import CALIBRATION_KEY, LAST_EPOCH_KEY, SELECTION_KEY, ReportedCheckpoint
from foxhunt.report.series import equity_series
from foxhunt.seeding import Stream
from foxhunt.train.diagnostics import (
    ACTIVE_FRAC,
    EPOCH_SECONDS,
    HISTORY_FILE,
    LOSS_TOTAL,
    QGAP_CORR,
    SELECT_NET_PNL,
    SELECT_SECONDS,
    SELECT_TRADES,
    SHARPE_SELECT,
    TENSORBOARD_DIR,
    DiagnosticsWriter,
    EpochStats,
    console_line,
    direction_gap,
    fold_calibration,
    gap_correlation,
    gap_rows,
)
from foxhunt.train.evaluation import action_shares, evaluate_selection, validate, validation_net
from foxhunt.train.guard import AnomalyGuard, GuardResult
from foxhunt.train.members import COMMITTEE_KEY, MEMBERS_DIR, MemberRuns, committee_folds
from foxhunt.train.memory_budget import activation_bytes_per_sample, size_run
from foxhunt.train.plateau import PlateauDetector, PlateauResponder, Response
from foxhunt.train.selection import diagnostic_rows, episode_starts, selection_rule, selection_summary
from foxhunt.validation import screen as screening
from foxhunt.validation.config import Selection
from foxhunt.validation.folds import FoldData, fold_periods, make_folds
from foxhunt.validation.screen import Screen

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
    return device_of(cfg.run.device, "run.device")


def device_of(want: Device, key: str) -> torch.device:
    """The torch device of a ``Device`` setting (auto: CUDA where visible); CUDA asked for where none
    is visible is an error naming its config ``key``."""
    if want is Device.AUTO:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if want is Device.CUDA and not torch.cuda.is_available():
        raise FoxhuntError(
            key, "cuda was asked for but no CUDA device is visible", f"use {setting(f'{key}=auto')} or cpu"
        )
    return torch.device(want.value)


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
        self.market = market_tensors(cache, fd, vol_window=cfg.env.plan.barrier.vol_window, device=device)
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
        # Every stream of the fold from the run seed and the fold index alone (foxhunt.seeding).
        seed = partial(seeding.stream_seed, cfg.run.seed, fold=self.k)
        self.agent = build_agent(
            cfg.agent,
            cfg.env.branches,
            device=device,
            seed=seed(Stream.AGENT),
            replay_capacity=self.sizes.replay_capacity,
            epochs=t.epochs,
        )
        seeding.seed_process(seed(Stream.PROCESS), torch_cpu_state=self.agent.noise_rng_state)
        self.starts_gen = seeding.generator(seed(Stream.EPISODE_STARTS), device)
        self.env_cfg = cfg.env.model_copy(update={"episode_rows": t.steps_per_epoch + 1})
        # Training episodes end the fold's embargo before the selection period, which ends before
        # the validation purge (too few rows for either: FoxhuntError).
        self.periods = fold_periods(fd.fold, t)
        self.screen = self._screen_inputs()
        self.history: list[dict[str, float]] = []
        self.guard = AnomalyGuard(t.anomaly)
        self.plateau = PlateauDetector.from_config(t.plateau)
        self.responder = PlateauResponder(
            t.plateau,
            self.agent.plateau.optimizer,
            self.agent.plateau.head_params,
            generator=self.agent.plateau.generator,
            rewind=self.rewind,
            temperature=cfg.agent.explore.temperature,  # 0 (Boltzmann off): the boost rung is skipped
        )
        self.responses: list[str] = []
        self.epoch = 0
        self.best_epoch = -1

    # --- state for checkpoints --------------------------------------------------------------

    def policy_contents(self, metrics: dict[str, Any]) -> CheckpointContents:
        """The checkpoint of this fold's policy as it stands (what acting and the report read; the
        trainer's other state is JSON, in the meta)."""
        return CheckpointContents(
            policy=self.agent.policy.state_dict(), branches=self.cfg.env.branches, meta=self.meta(metrics)
        )

    def contents(self, metrics: dict[str, Any]) -> CheckpointContents:
        """:meth:`policy_contents` and, for training, the agent's training state and the trainer's
        random streams."""
        contents = self.policy_contents(metrics)
        contents.training = {
            "agent": self.agent.state_dict()["training"],
            "rng": capture_rng({"starts": self.starts_gen}),
        }
        return contents

    def _load(self, path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """``(the agent's state_dict, the trainer's random streams, meta)`` of what :meth:`contents`
        saved as checkpoint ``path``, checked against this fold's agent (a weights-only export is
        refused: it holds no training section)."""
        expect = Fingerprint.of(self.agent.policy.state_dict(), self.cfg.env.branches)
        loaded = load_checkpoint(path, expect=expect, training=True, map_location=self.device)
        assert loaded.training is not None  # training=True: returned, or refused
        agent = {"policy": loaded.policy, "training": loaded.training["agent"]}
        return agent, loaded.training["rng"], loaded.meta

    def rewind(self) -> str:
        """The plateau ladder's last rung: back to the newest ring checkpoint (weights and optimizer)."""
        path = self.store.ring.latest(self.k)
        if path is None:
            return "nothing (no ring checkpoint yet)"
        agent, _, _ = self._load(path)
        self.agent.load_state_dict(agent, Restore.WEIGHTS)
        return str(path)

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
            # The guard's loss history and the plateau detector's window and rung: a resumed run
            # judges and responds at the same epochs as an uninterrupted one.
            "guard": self.guard.state_dict(),
            "plateau": {**self.plateau.state_dict(), **self.responder.state_dict()},
        }

    def resume_from(self, path: Path) -> None:
        from foxhunt.policy.checkpoint import read_checkpoint_meta

        differs = config_differences(read_checkpoint_meta(path).get("config", {}), self.cfg)
        if differs:
            raise FoxhuntError(
                RESUME,
                f"the config differs from the interrupted run's ({path}): {'; '.join(differs[:8])}",
                f"resume with the same {SAME_CONFIG}, or start a new run with {OUT}",
            )
        agent, rng, meta = self._load(path)
        self.agent.load_state_dict(agent, Restore.ALL)
        restore_rng(rng, {"starts": self.starts_gen})
        self.epoch = int(meta["epoch"]) + 1
        self.history = list(meta["history"])
        self.responses = list(meta["responses"])
        self.best_epoch = int(meta["best_epoch"])
        if "guard" in meta:
            self.guard.load_state_dict(meta["guard"])
        if "plateau" in meta:
            self.plateau.load_state_dict(meta["plateau"])
            self.responder.load_state_dict(meta["plateau"])

    def _screen_inputs(self) -> Screen | None:
        """The input screen (``agent.network.input_screen``), on the collection period's rows: the
        rows the agent trains on, before any selection period and the fold's purge, so the columns it
        keeps are chosen from what training sees. Sets the online and target networks' input mask
        (a checkpoint then carries it). None when the screen is off."""
        keep = self.cfg.agent.network.input_screen
        if keep == 0:
            return None
        m = self.market
        columns = tuple(m.feature_columns)
        horizon = self.cfg.env.plan.barrier.horizon
        p = self.periods
        try:
            # Through the module: the leak guard checks this very function (screening.fold_screen).
            screen = screening.fold_screen(m, p.collect_lo, p.collect_hi, horizon, min(keep, len(columns)))
        except ValueError as e:
            raise FoxhuntError(
                "agent.network.input_screen",
                f"fold {self.k + 1}: {e}",
                f"train on more rows per session than the {horizon}-row plan horizon, or "
                f"{setting('agent.network.input_screen=0')} (every column read, no screen)",
            ) from None
        self.agent.set_input_mask(input_mask(columns[j] for j in screen.kept))
        kept = ", ".join(f"{c} {ic:+.3f}" for c, ic in screen.summary().items())
        self.log(
            f"fold {self.k + 1}: the input screen keeps {len(screen.kept)} columns "
            f"(rank IC over {screen.rows} rows): {kept}"
        )
        return screen

    # --- one epoch --------------------------------------------------------------------------

    def _direction_gap_corr(self, row: dict[str, Any]) -> None:
        """``row[q/direction_gap_corr]``: corr(greedy Q(long) - Q(short), the planted carrier) over the
        fold's diagnostic rows (:func:`foxhunt.train.selection.diagnostic_rows`: the selection period,
        or under ``train.selection = last`` the in-sample tail of the collection period). Nothing
        without a known carrier (real data)."""
        if self.planted is None or self.planted not in self.market.feature_columns:
            return
        # In-sample rows are fine under last: the number reads the network's Q and the carrier's value
        # at each row (no label, no future return, no PnL) and chooses nothing.
        rows = gap_rows(*diagnostic_rows(self.periods, self.cfg.train))
        col = self.market.feature_columns.index(self.planted)
        signal = self.market.features[rows.to(self.device), col].cpu().numpy()
        gap = direction_gap(self.agent.policy, self.market, self.cfg.env, rows)
        row[QGAP_CORR] = gap_correlation(gap, signal)

    def run_epoch(self) -> dict[str, Any]:
        t, agent = self.cfg.train, self.agent
        t0 = time.perf_counter()
        lr = agent.start_epoch(self.epoch)
        stats = EpochStats(self.device)
        n, steps = self.sizes.envs, t.steps_per_epoch
        u = torch.rand(n, generator=self.starts_gen, device=self.device)
        starts = episode_starts(u, self.periods, steps)
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
        # per-step Sharpe of the collected rewards, annualised like the selection Sharpe
        stats.add("sharpe/train", collect_stats["train_sharpe"] * math.sqrt(self.bpy))
        stats.add("misc/reward_mean", collect_stats["reward_mean"])
        stats.add("misc/bonus_share", collect_stats["bonus_share"])
        stats.add("experts/utilisation", agent.expert_utilisation())
        t2 = time.perf_counter()
        row = stats.read()  # the one host read of the epoch
        row.update({"misc/lr": lr, "time/collect_s": t1 - t0, "time/learn_s": t2 - t1})
        self._direction_gap_corr(row)
        row[EPOCH_SECONDS] = time.perf_counter() - t0
        if self.periods.selection is Selection.LAST:
            return {"row": row, "select": None, "rec": None}  # nothing to judge: no backtest this epoch
        greedy, mode = agent.policy.greedy(), agent.step_mode  # validation steps as collection does
        sel, rec = evaluate_selection(self.market, self.periods, self.cfg, greedy, self.bpy, mode)
        t3 = time.perf_counter()
        row.update(
            {
                SHARPE_SELECT: float(sel["sharpe_annual"]),
                SELECT_NET_PNL: float(sel["net_pnl"]),
                ACTIVE_FRAC: float(sel["active_frac"]),
                SELECT_TRADES: float(sel["trades"]),
                SELECT_SECONDS: t3 - t2,
                EPOCH_SECONDS: t3 - t0,
            }
        )
        # Selection-period action distributions, picked (every branch) and realised (after the plan
        # lock and the Kelly cap), as shares of the written steps: actions/<picked|realised>/<branch>/<value>.
        for kind, branches in action_shares(sel["all"], self.cfg).items():
            for branch, shares in branches.items():
                row.update({f"actions/{kind}/{branch}/{name}": x for name, x in shares.items()})
        return {"row": row, "select": sel, "rec": rec}


def _baselines(market: MarketTensors, fd: FoldData, cfg: FoxhuntConfig, bpy: float) -> tuple[dict, dict]:
    """Flat, long, buy-and-hold and the reference rule (:mod:`foxhunt.backtest.reference`; where its
    feature is in the state) over the same (whole) validation period as the reported checkpoint:
    metrics and net PnL per row."""
    metrics, curves = {}, {}
    for name, policy in fold_policies(BacktestSettings.of(cfg), market).items():
        own = cfg.model_copy(update={"env": baseline_env(name, cfg.env)})  # buy-and-hold: its own plan
        m, rec = validate(market, fd, own, policy, bpy)
        metrics[name] = {k: v for k, v in m.items() if k != "all"}
        curves[name] = validation_net(rec, fd, cfg)
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
    members: MemberRuns | None = None,
) -> list[dict[str, Any]]:
    """Train every fold; returns the per-fold results (also written to ``out_dir/folds.json``).

    ``progress`` shows bars and one line per epoch (:func:`foxhunt.console.epoch_line`); without it
    the epoch lines go to ``log``. ``leak_guard`` (the guard's summary, run by the caller on the
    cache's sources: :func:`foxhunt.dataset.leaks.guard`) is carried by every fold's result.
    ``planted`` names the state column carrying a synthetic market's planted signal
    (:func:`foxhunt.backtest.reference.planted_column`); each epoch then records the correlation of
    the greedy direction gap with it (``q/direction_gap_corr``), n/a without it (real data), on the
    selection rows, or under ``train.selection = last`` on the in-sample tail of the collection rows
    (:func:`foxhunt.train.selection.diagnostic_rows`: the number reads no label or future return and
    picks nothing, so rows the agent trained on are as good as any). ``on_epoch(fold, epoch, row)``
    is called after every epoch's checkpoints are saved (handed to the background writer: on disk
    by the next save or read of the store), with the epoch's row (training statistics
    and the selection period's ``misc/select_net_pnl``, ``sharpe/select`` ..., none under ``last``;
    never a validation number): experiment tracking logs it, a tuning study's pruner may raise from
    it to stop the run.

    A folder holding another run is refused unless ``overwrite`` (its checkpoints, history and
    folds are then deleted); ``resume`` needs the folder, and ``cfg`` equal to the config it
    recorded (:data:`RECORDED_CONFIG`), both checked before anything is written.

    ``members``: members 1 .. K-1 (``train.members``) that the caller started already
    (:func:`start_members`, the main job while its alpha check runs); else they start here."""
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
    # Members 1 .. K-1 (train.members): their own runs in OUT/members, started before member 0 (this
    # run) trains so they train beside it; each fold then reports the members' committee.
    if members is None and cfg.train.members > 1:
        members = MemberRuns(cfg, out, cache.path, planted, resume=resume, train=train_member)
    with training_settings(cfg, device), contextlib.ExitStack() as closing:
        if members is not None:
            closing.enter_context(members)  # an error stops the members still training
            members.start()
            rep.say(
                f"members 1-{cfg.train.members - 1} of {cfg.train.members}: "
                f"{members.spawned} training beside this run, the rest after it ({out / MEMBERS_DIR})"
            )
        folds = make_folds(cache.features(), cache.columns, cfg.folds, int(cache.meta["label_span"]))
        # Checkpoints are written by a background thread while the next epoch trains
        # (foxhunt.policy.checkpoint: at GPU sizes the replay buffer makes them 1-2 GB).
        store = CheckpointStore(out, ring=cfg.train.ring, writes=Writes.BACKGROUND)
        closing.callback(store.close)  # every checkpoint on disk before train() returns (or raises)
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
                last = store.paths.last(trainer.k)
                if resume and last.exists():
                    trainer.resume_from(last)
                    overall.update(total=(overall.total or 0) - trainer.epoch)  # epochs done before
                    rep.say(f"fold {trainer.k + 1}/{len(folds)}: resumed after epoch {trainer.epoch}")
                if resume:  # a best saved by an epoch the resume redoes is the redo's to save
                    store.best.forget_from(trainer.k, trainer.epoch)
                result = _train_fold(trainer, store, stop_after, on_epoch)
                results.append(result.to_dict() | ({"leak_guard": leak_guard} if leak_guard else {}))
                write_json(done_path, results, default=float)
        if members is not None and not all(COMMITTEE_KEY in r for r in results):
            members.finish()
            store.wait()
            results = committee_folds(cache, cfg, out, results, members.folders, device, rep.say)
            write_json(done_path, results, default=float)
    return results


def start_members(
    cache: FeatureCache, cfg: FoxhuntConfig, out_dir: str | Path, planted: str | None
) -> MemberRuns:
    """Members 1 .. K-1 of a fresh run into ``out_dir`` (:func:`train`'s folder), those that train
    beside member 0 started now, for :func:`train`'s ``members``. On a GPU the main job starts them
    before its alpha check: a spawned member's start (imports, CUDA, its compiles: about 10 s) then
    overlaps the check's CPU work instead of trailing member 0, whose committee waits for it.
    The caller owns them until :func:`train` takes them: on an error before, leave them as a
    context manager does (``with members: ...``), which stops them."""
    members = MemberRuns(cfg, Path(out_dir), cache.path, planted, resume=False, train=train_member)
    members.start()
    return members


def train_member(cfg: FoxhuntConfig, out: Path, cache_path: Path, planted: str | None, resume: bool) -> int:
    """Train one member (``cfg`` from :func:`~foxhunt.train.members.member_config`) into its folder
    (:class:`~foxhunt.train.members.MemberRuns` calls it); a module-level function of picklable
    arguments, so a spawned process can run it. Returns the member's fold count."""
    cache = load_cache(cache_path, cfg)
    resume = resume and (out / RECORDED_CONFIG).is_file()  # a member that never started starts now
    folds = train(cache, cfg, out, resume=resume, overwrite=not resume, log=lambda _: None, planted=planted)
    return len(folds)


@contextlib.contextmanager
def training_settings(cfg: FoxhuntConfig, device: torch.device) -> Iterator[None]:
    """The process-wide settings training runs under, restored after: deterministic algorithms on
    the CPU (a resume reproduces a run; warn-only elsewhere) and ``run.threads`` CPU threads. Dynamo
    guards its compiled code on both, so :func:`warm_compile` compiles under them too: outside them
    the run's first epoch compiled its steps again (three of four, ~44 s on the H200)."""
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    threads = torch.get_num_threads()
    torch.use_deterministic_algorithms(device.type == "cpu", warn_only=True)
    if device.type == "cpu" and cfg.run.threads > 0:
        torch.set_num_threads(cfg.run.threads)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.set_num_threads(threads)


def warm_compile(cache: FeatureCache, cfg: FoxhuntConfig) -> float:
    """Compile (Inductor) and capture (CUDA graphs) training's steps ahead of :func:`train`: seconds
    taken, 0 where training compiles nothing (the CPU: its steps run eagerly).

    One epoch of a throwaway trainer of the first fold, built as :func:`train` builds it, so its
    steps have the shapes the run's have; dynamo's caches are per process, so the run's trainers
    reuse what it compiled (the compiled functions are module-level or keyed on code, not on the
    agent). Nothing of it is kept: its agent, replay and checkpoints (in a temporary folder) are
    dropped and the device's cached blocks released, so the run sizes itself from the same free
    memory (:func:`foxhunt.train.memory_budget.size_run`). On a fresh H200 the compiles took ~105 s of the
    production job's first epoch; the main job pays them while the leak guard's cuts run in other
    processes (:func:`foxhunt.dataset.leaks.guard_while`)."""
    import gc
    import tempfile

    device = resolve_device(cfg)
    if device.type != "cuda":
        return 0.0
    t0 = time.perf_counter()
    folds = make_folds(cache.features(), cache.columns, cfg.folds, int(cache.meta["label_span"]))
    with tempfile.TemporaryDirectory() as tmp, training_settings(cfg, device):
        store = CheckpointStore(tmp, ring=1)
        FoldTrainer(cache, folds[0], cfg, device, store, lambda _: None).run_epoch()  # result dropped
        store.close()
    gc.collect()  # the trainer's graphs and replay, before their memory goes back to the device
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return time.perf_counter() - t0


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
        "select_sharpe": row.get(SHARPE_SELECT, float("nan")),  # NaN: train.selection = last
        "select_net_pnl": row.get(SELECT_NET_PNL, float("nan")),
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
        select_net=row.get(SELECT_NET_PNL, nan),
        trades=row.get(SELECT_TRADES, nan),
        sharpe=row.get(SHARPE_SELECT, nan),
        loss=row.get(LOSS_TOTAL, nan),
        seconds=row.get(EPOCH_SECONDS, nan),
        eta_s=tr.overall.eta_s if tr.overall is not None else None,
        train_sharpe=row.get("sharpe/train", nan),
    )


def _train_fold(
    tr: FoldTrainer,
    store: CheckpointStore,
    stop_after: tuple[int, int] | None,
    on_epoch: EpochHook | None = None,
) -> FoldResult:
    cfg, k = tr.cfg, tr.k
    writer = DiagnosticsWriter(store.paths.run_dir, k)
    anomaly = None
    try:
        while tr.epoch < cfg.train.epochs:
            ep = tr.run_epoch()
            row, sel = ep["row"], ep["select"]  # the selection period's metrics (None: selection last)
            metrics = {kk: vv for kk, vv in (sel or {}).items() if kk != "all"}
            # The guard reads the reasons from implausible_reasons (here "implausible" is the list).
            judged = None if sel is None else {**metrics, "implausible_reasons": sel["implausible"]}
            verdict: GuardResult = tr.guard.check(row, judged)
            tr.history.append(_report_row(tr.epoch, row))
            writer.write(tr.epoch, row)
            if tr.overall is not None:
                tr.overall.advance()
            if tr.epoch % cfg.train.log_every == 0 or not verdict.ok:
                tr.log(_epoch_line(tr, row))
                tr.progress.detail(console_line(k, tr.epoch, row))
            # Best before any plateau response: it holds the weights whose selection Sharpe marks it.
            best = (
                None
                if sel is None
                else store.best.save(
                    # The policy alone: nothing resumes from best (resumes and rewinds read last and
                    # the ring), and without the replay buffer it is megabytes, not 1-2 GB an epoch.
                    k,
                    tr.epoch,
                    tr.policy_contents(metrics),
                    metric=float(sel["sharpe_annual"]),
                    verdict=verdict,
                )
            )
            # No response after the fold's last epoch: no training follows, and the last checkpoint
            # keeps the weights the fold reports as its last epoch.
            if tr.plateau.update(row) and tr.epoch + 1 < cfg.train.epochs:
                action = tr.responder.respond()
                if action.response is Response.TEMPERATURE_BOOST:
                    tr.agent.adjust(temperature=action.temperature_multiplier)
                elif action.response is Response.LR_BUMP:
                    tr.agent.adjust(lr=cfg.train.plateau.lr_bump)  # lasts past start_epoch
                tr.responses.append(f"epoch {tr.epoch}: {action.response.value} ({action.detail})")
                writer.event(tr.epoch, "plateau", f"{action.response.value}: {action.detail}")
            if best is not None:
                tr.best_epoch = tr.epoch
                tr.responder.note_progress()
            if (tr.epoch + 1) % cfg.train.checkpoint_every == 0 or tr.epoch + 1 == cfg.train.epochs:
                contents = tr.contents(metrics)  # after the response: the resume point continues from here
                store.save_epoch(k, tr.epoch, contents)  # the ring, then last: a kill keeps them in step
            if not verdict.ok:
                anomaly = verdict.diagnosis
                writer.event(tr.epoch, "anomaly", verdict.diagnosis)
            tr.guard.raise_if(verdict, where=f"fold {k} epoch {tr.epoch}")
            if on_epoch is not None:
                on_epoch(k, tr.epoch, row)
            if stop_after is not None and (k, tr.epoch) == stop_after:
                raise Interrupted(f"stopped after fold {k} epoch {tr.epoch}")
            tr.epoch += 1
    finally:
        writer.close()
    return _fold_result(tr, store, anomaly)


def _selection_result(tr: FoldTrainer, epoch: int) -> dict[str, float | None]:
    """The reported epoch's numbers over the fold's selection period (those it was picked on) and the
    reference rule's net PnL there (None where its feature is not in the state): what a tuning study
    ranks its trials by (docs/tune.md), so that no trial is chosen on a validation number. Empty
    under ``train.selection = last`` (no selection period)."""
    if tr.periods.select_rows == 0:
        return {}
    [at] = [h for h in tr.history if h["epoch"] == epoch]
    rule = fold_policies(BacktestSettings.of(tr.cfg), tr.market).get(RULE)
    rule_net = None
    if rule is not None:  # the rule learns nothing: its selection rows are as unseen as any
        rule_net = float(evaluate_selection(tr.market, tr.periods, tr.cfg, rule, tr.bpy)[0]["net_pnl"])
    return {"net_pnl": at["select_net_pnl"], "sharpe_annual": at["select_sharpe"], "rule_net_pnl": rule_net}


def _fold_result(tr: FoldTrainer, store: CheckpointStore, anomaly: str | None) -> FoldResult:
    """A trained fold's result: the reported checkpoint (best, else last) and the last epoch over the
    whole validation period, the first time anything reads it; the baselines over the same rows,
    equity in time order, the selection period and rule, diagnostics."""
    cfg, k = tr.cfg, tr.k
    # The last epoch's policy (the trainer's weights: no plateau response follows the last epoch).
    mode = tr.agent.step_mode  # the env step collection ran (agent.collect.StepMode)
    last_val, last_rec = validate(tr.market, tr.fd, cfg, tr.agent.policy.greedy(), tr.bpy, mode)
    last_epoch = tr.epoch - 1
    # The reported checkpoint: best.safetensors, evaluated as `foxhunt backtest --checkpoint` does
    # (the same loader, policy and rows), so every number the report shows is that file's.
    store.wait()  # the best and last checkpoints on disk (the writer thread may still be saving)
    best_path = store.paths.best(k)
    if tr.best_epoch >= 0 and best_path.is_file():
        reported, ckpt = ReportedCheckpoint.BEST, CheckpointPolicy(best_path, cfg)
        val, rec = validate(tr.market, tr.fd, cfg, ckpt.policy(tr.device), tr.bpy, mode)
        epoch, actor = ckpt.epoch, ckpt.agent(tr.device).policy
    else:
        reported, epoch, val, rec = ReportedCheckpoint.LAST, last_epoch, last_val, last_rec
        actor = tr.agent.policy
    base, base_curves = _baselines(tr.market, tr.fd, cfg, tr.bpy)
    metrics = {kk: vv for kk, vv in val.items() if kk != "all"}
    metrics.update(
        checkpoint=reported.value,
        epoch=epoch,
        checkpoint_file=str(best_path.relative_to(store.paths.run_dir))
        if reported is ReportedCheckpoint.BEST
        else str(store.paths.last(k).relative_to(store.paths.run_dir)),
        best_rule=selection_rule(tr.periods),
        train_rows=len(tr.fd.fold.train),  # the usable training rows: collection, embargo, selection
        val_rows=int(tr.fd.fold.validation_end - tr.fd.fold.validation_start),
        baselines=base,
    )
    metrics[SELECTION_KEY] = selection_summary(tr.periods) | _selection_result(tr, epoch)
    metrics["capture"] = fold_capture(metrics)  # agent / rule net PnL; None where the rule made <= 0
    metrics[LAST_EPOCH_KEY] = {"epoch": last_epoch, **{kk: vv for kk, vv in last_val.items() if kk != "all"}}
    # Where the reported policy's entries pay: its entry advantage against the plan horizon's move, on
    # the rows it trained on and on the validation rows (diagnostics.fold_calibration).
    horizon = cfg.env.plan.barrier.horizon
    metrics[CALIBRATION_KEY] = fold_calibration(actor, tr.market, cfg.env, tr.fd.fold, horizon)
    util = tr.agent.expert_utilisation().cpu().tolist()
    return FoldResult(
        fold=k,
        metrics=metrics,
        history=tr.history,
        equity=equity_series(
            {"agent": validation_net(rec, tr.fd, cfg), **base_curves}, tr.ts, tr.fd.fold.validation_start
        ),
        actions=action_shares(val["all"], cfg),
        diagnostics={
            "expert_utilisation": util,
            "anomaly": anomaly,
            "plateau_responses": tr.responses,
            "best_epoch": tr.best_epoch,
            # agent.network.input_screen: the feature columns the network read and their ICs
            "input_screen": None if tr.screen is None else tr.screen.summary(),
            "sizes": {"envs": tr.sizes.envs, "batch": tr.sizes.batch, "replay": tr.sizes.replay_capacity},
        },
    )
