"""The walk-forward training run on a tiny synthetic market: resume, determinism, fold independence,
a fresh run in an old run's folder, the anomaly guard against the oracle, the plateau ladder on a
frozen learner, and checkpoints that backtest like their own validation and refuse a network of
another width (issue 7 §3).

Every run here is a few seconds on one CPU thread: two folds x two epochs of 16 episodes x 16 steps
and four learner updates of a network a few units wide. Comparisons between runs are exact (same
seed on CPU: the same numbers), wall-clock timings aside.
"""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import foxhunt.train.run as run_mod
from foxhunt.agent.actor import Mode
from foxhunt.agent.agent import Agent, Restore
from foxhunt.agent.learner import cosine_lr
from foxhunt.agent.network import input_mask
from foxhunt.backtest.evaluate import ScriptedPolicy, scripted
from foxhunt.config.loader import load_config
from foxhunt.config.models import FoxhuntConfig
from foxhunt.errors import FoxhuntError, OutputError
from foxhunt.features.cache_file import FeatureCache
from foxhunt.features.layout import STATE_LAYOUT
from foxhunt.policy.checkpoint import (
    CheckpointMismatchError,
    Fingerprint,
    load_checkpoint,
    read_checkpoint_meta,
)
from foxhunt.policy.store import CheckpointStore
from foxhunt.policy.trained import CheckpointPolicy
from foxhunt.train.guard import AnomalyError
from foxhunt.train.run import Interrupted, train

TINY = (
    # The DQN learner, named: these tiny runs test the training loop's DQN mechanics (replay, the
    # plateau ladder, rewinds, resumes) whichever learner the smoke profile ships (PPO is the candidate:
    # docs/results/2026-12-08-fused-tests-and-smoke-ppo.md); tests/agent/test_ppo.py runs PPO through it.
    "agent.algo=dqn",
    # A seed whose tiny policy trades in its folds (seed 7's is flat in both: which seeds trade after
    # 8 updates depends on the random streams), so the checkpoint backtest compares a trading policy.
    "run.seed=10",
    "synth.sessions=2",
    "synth.events_per_session=40000",
    "folds.n_folds=2",
    "env.episode_rows=32",  # validation steps 31 rows at a time: the backtest is a sequential loop
    "train.epochs=2",
    "train.envs=16",
    "train.steps_per_epoch=16",
    "agent.learn.updates_per_epoch=4",
    "agent.learn.batch=64",
    "agent.replay.capacity=1024",
    "agent.network.hidden=16",
    "agent.network.trunk_layers=1",
    "agent.network.selection_hidden=4",
    "agent.network.experts=4",
    "agent.network.expert_hidden=4",
    "agent.network.head_hidden=16",
    "agent.network.atoms=11",
    "agent.network.quantile_embedding=8",
    "agent.network.aux_hidden=8",
    # The plain network: after 8 updates the mirror-equivariant one of the smoke profile still has
    # Q(Long) = Q(Short) up to noise and never trades, and the checkpoint backtest below must
    # reproduce a policy that trades (the symmetry has its own tests in tests/agent).
    "agent.network.symmetry=none",
    # The tiny runs' policies as these tests were written, before the smoke profile's weight decay.
    "agent.learn.weight_decay=0",
    # One agent: the smoke profile's committee of two has its own tests (tests/train/test_members.py).
    "train.members=1",
)
TIMINGS = {"epoch_s"}  # wall-clock fields of a history row: the only ones two runs may differ in


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_cfg(*overrides: str) -> FoxhuntConfig:
    return load_config(profile="smoke", overrides=[*TINY, *overrides])


def quiet(_message: str) -> None:
    pass


def canon(x: Any, run_dir: Path | None = None) -> Any:
    """JSON values made comparable: NaN as a string (NaN != NaN), timings dropped, the run folder's
    path (in a rewind's detail) replaced by RUN."""
    if isinstance(x, dict):
        return {k: canon(v, run_dir) for k, v in x.items() if k not in TIMINGS}
    if isinstance(x, list):
        return [canon(v, run_dir) for v in x]
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    if isinstance(x, str) and run_dir is not None:
        return x.replace(str(run_dir), "RUN")
    return x


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical, NaN matching NaN (replay rows without an aux target hold NaN)."""
    return a.dtype == b.dtype and torch.equal(a.nan_to_num(12345.0), b.nan_to_num(12345.0))


def folds_of(run_dir: Path) -> list[dict[str, Any]]:
    return json.loads((run_dir / "folds.json").read_text())


@pytest.fixture(scope="module")
def cache(tiny_cache: FeatureCache) -> FeatureCache:
    return tiny_cache  # tests/conftest.py: built once per run, shared with other modules' tiny trainings


@pytest.fixture(scope="module")
def run_a(cache: FeatureCache, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference run: two folds x two epochs, seed 10, never interrupted."""
    out = tmp_path_factory.mktemp("run_a")
    train(cache, tiny_cfg(), out, log=quiet)
    return out


# --- resume and determinism ----------------------------------------------------------------------


def test_interrupted_run_resumed_reaches_the_same_result(
    cache: FeatureCache, run_a: Path, tmp_path: Path
) -> None:
    cfg = tiny_cfg()
    store = CheckpointStore(tmp_path, ring=cfg.train.ring)
    with pytest.raises(Interrupted):
        train(cache, cfg, tmp_path, log=quiet, stop_after=(0, 0))  # mid-fold
    assert read_checkpoint_meta(store.paths.last(0))["epoch"] == 0 and not (tmp_path / "folds.json").exists()
    # Resumed and stopped again after a fold's last epoch, then in the next fold, then to the end.
    for stop in [(0, 1), (1, 0)]:
        with pytest.raises(Interrupted):
            train(cache, cfg, tmp_path, resume=True, log=quiet, stop_after=stop)
    assert [f["fold"] for f in folds_of(tmp_path)] == [0]
    resumed = train(cache, cfg, tmp_path, resume=True, log=quiet)
    reference = folds_of(run_a)
    assert canon(folds_of(tmp_path)) == canon(reference) == canon(json.loads(json.dumps(resumed)))
    # The comparison has teeth: the folds traded and learned differently from each other.
    assert [len(f["history"]) for f in reference] == [2, 2]
    assert reference[0]["history"][1]["loss"] != reference[1]["history"][1]["loss"]


def test_same_seed_same_run_another_seed_another_run(
    cache: FeatureCache, run_a: Path, tmp_path: Path
) -> None:
    random.seed(123)  # the process-wide generators of another process: not the run's to depend on
    np.random.seed(456)
    again = train(cache, tiny_cfg(), tmp_path / "again", log=quiet)
    assert canon(json.loads(json.dumps(again))) == canon(folds_of(run_a))
    # Every checkpoint tensor the same, the recorded numpy and Python generator states included (the
    # smoke profile reports the last epoch: no best, a ring entry instead).
    for name in ("fold0/last", "fold1/ring/epoch0000"):
        a, b = (load_file(str(d / f"checkpoints/{name}.safetensors")) for d in (run_a, tmp_path / "again"))
        assert a.keys() == b.keys() and [k for k in a if not same(a[k], b[k])] == []
    with pytest.raises(Interrupted):
        train(cache, tiny_cfg("run.seed=8"), tmp_path / "other", log=quiet, stop_after=(0, 0))
    other = read_checkpoint_meta(CheckpointStore(tmp_path / "other", ring=1).paths.last(0))["history"][0]
    first = folds_of(run_a)[0]["history"][0]
    assert other["loss"] != first["loss"] and other["q_mean"] != first["q_mean"]
    assert other["lr"] == first["lr"]  # the schedule is not random: only the seed changed


def test_a_fresh_run_into_an_old_run_folder_keeps_nothing_of_it(cache: FeatureCache, tmp_path: Path) -> None:
    """Without resume, the folder's earlier checkpoints, history and finished folds are not the new
    run's: its best is judged against its own epochs only (not the old run's best Sharpe), and a
    later resume does not take the old run's folds for its own."""
    one = ("train.epochs=1", "train.selection=train_tail")  # a best checkpoint, picked by its Sharpe
    with pytest.raises(Interrupted):  # the old run: fold 0 finished, stopped in fold 1
        train(cache, tiny_cfg(*one, "run.seed=8"), tmp_path, log=quiet, stop_after=(1, 0))
    assert [f["fold"] for f in folds_of(tmp_path)] == [0]
    with pytest.raises(OutputError, match="already holds a result"):  # not without being asked
        train(cache, tiny_cfg(*one), tmp_path, log=quiet, stop_after=(0, 0))
    assert [f["fold"] for f in folds_of(tmp_path)] == [0]
    with pytest.raises(Interrupted):
        train(cache, tiny_cfg(*one), tmp_path, overwrite=True, log=quiet, stop_after=(0, 0))
    store = CheckpointStore(tmp_path, ring=1)
    assert [read_checkpoint_meta(p)["seed"] for p in (store.paths.best(0), store.paths.last(0))] == [10, 10]
    assert store.folds() == [0] and not (tmp_path / "folds.json").exists()
    lines = (tmp_path / "diagnostics.jsonl").read_text().splitlines()
    assert [(r["fold"], r["epoch"]) for r in map(json.loads, lines)] == [(0, 0)]


def test_fold_k_plus_1_starts_from_the_same_state_whatever_fold_k_did(
    cache: FeatureCache, run_a: Path, tmp_path: Path
) -> None:
    """One epoch per fold instead of two: fold 0 ends elsewhere, yet fold 1's first epoch (collection,
    learning, validation) and its state after it (weights, optimizer, replay, signals, every random
    stream) are bit for bit those of the two-epoch run."""
    short = train(cache, tiny_cfg("train.epochs=1"), tmp_path, log=quiet)
    long = folds_of(run_a)
    assert len(short[1]["history"]) == 1
    assert canon(short[1]["history"][0]) == canon(long[1]["history"][0])
    ring = "checkpoints/fold1/ring/epoch0000.safetensors"
    a, b = load_file(str(tmp_path / ring)), load_file(str(run_a / ring))
    assert a.keys() == b.keys() and any(k.startswith("policy/network/") for k in a)
    assert [k for k in a if not same(a[k], b[k])] == []
    # ... whereas fold 0's state after its last epoch differs between the two runs.
    a0 = load_file(str(tmp_path / "checkpoints/fold0/last.safetensors"))
    b0 = load_file(str(run_a / "checkpoints/fold0/last.safetensors"))
    assert any(not same(a0[k], b0[k]) for k in a0 if k.startswith("policy/network/"))


# --- anomaly guard and plateau ladder ------------------------------------------------------------


def test_anomaly_guard_stops_a_run_fed_the_oracle_and_never_marks_it_best(
    cache: FeatureCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One fold whose selection period (half its training rows: about 1,340) runs in 128-row windows:
    # enough closed trades for the oracle to be implausible beyond sampling error (in 32-row windows
    # its plans time out at the windows' ends).
    oracle_run = (
        "folds.n_folds=1",
        "env.episode_rows=128",
        "train.selection=train_tail",  # the guard judges each epoch's selection-period backtest
        "train.selection_fraction=0.5",
    )
    cfg = tiny_cfg(*oracle_run)
    real_select, real_validate = run_mod.evaluate_selection, run_mod.validate
    calls: list[str] = []

    def evaluate_selection(market, periods, cfg_, policy, bpy, mode=None):  # epoch 1: judged with the oracle
        calls.append("select")
        if len(calls) == 2:
            policy = scripted(ScriptedPolicy.ORACLE, cfg_.env)
        return real_select(market, periods, cfg_, policy, bpy)

    def validate(market, fd, cfg_, policy, bpy):
        calls.append("validate")
        return real_validate(market, fd, cfg_, policy, bpy)

    monkeypatch.setattr(run_mod, "evaluate_selection", evaluate_selection)
    monkeypatch.setattr(run_mod, "validate", validate)
    with pytest.raises(AnomalyError) as err:
        train(cache, cfg, tmp_path, log=quiet)
    assert calls == ["select", "select"]  # it stopped there: no later epoch, no validation, no baselines
    store = CheckpointStore(tmp_path, ring=cfg.train.ring)
    oracle = read_checkpoint_meta(store.paths.last(0))  # kept as last, for inspection
    assert oracle["epoch"] == 1 and oracle["metrics"]["implausible"]
    # The diagnosis names the epoch and the backtester's reasons.
    assert "fold 0 epoch 1" in str(err.value) and oracle["metrics"]["implausible"][0] in str(err.value)
    best = read_checkpoint_meta(store.paths.best(0))
    # The oracle's Sharpe beats the best one, which is still epoch 0's: the guard, not the metric, kept it.
    assert best["epoch"] == 0 and store.best.metric(0) < oracle["metrics"]["sharpe_annual"]
    events = [json.loads(line) for line in (tmp_path / "diagnostics.jsonl").read_text().splitlines()]
    assert [(e["epoch"], e["event"]) for e in events if "event" in e] == [(1, "anomaly")]
    assert not (tmp_path / "folds.json").exists()
    # The run's own ceiling decides: raised far above the oracle's Sharpe, the same epoch passes.
    calls.clear()
    high = tiny_cfg(*oracle_run, "train.anomaly.max_sharpe_annual=1000")
    with pytest.raises(Interrupted):
        train(cache, high, tmp_path / "high", log=quiet, stop_after=(0, 1))
    passed = read_checkpoint_meta(CheckpointStore(tmp_path / "high", ring=1).paths.last(0))["metrics"]
    assert passed["implausible"] == [] and passed["sharpe_annual"] == oracle["metrics"]["sharpe_annual"]


FROZEN = (
    "folds.n_folds=1",
    "train.selection=train_tail",  # a new best (its selection Sharpe) restarts the ladder
    "train.epochs=8",
    "train.ring=8",  # keep every epoch's checkpoint: the rewind's effect is read from the ring
    "agent.replay.capacity=4096",  # 8 x 256 transitions: the replay never wraps (a wrapped one: below)
    "train.plateau.patience=1",
    # Shrink-perturb and temperature boost off (coefficient 1 / 0): ladder = momentum reset, LR bump, rewind.
    "train.plateau.shrink=1",
    "train.plateau.perturb_std=0",
    "train.plateau.temperature_boost=1",
    "train.plateau.lr_bump=2",
)
FROZEN_Q = 0.25
BEST_EPOCH = 5  # the one epoch whose selection Sharpe improves: also the epoch of the rewind


def network_of(path: Path) -> dict[str, torch.Tensor]:
    prefix = "policy/network/"
    return {k[len(prefix) :]: v for k, v in load_file(str(path)).items() if k.startswith(prefix)}


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)


@dataclass
class FrozenRuns:
    whole: Path  # never interrupted
    resumed: Path  # stopped after epochs 2, 3 and 5, resumed each time
    validated: dict[int, dict[str, torch.Tensor]]  # the network weights each epoch of `whole` validated


@pytest.fixture(scope="module")
def frozen(cache: FeatureCache, tmp_path_factory: pytest.TempPathFactory) -> FrozenRuns:
    """A frozen learner: its Q statistics read back constant (the gradient stays the real, non-zero
    one); it validates like the flat policy, with a Sharpe of 0 except at BEST_EPOCH (one new best,
    which restarts the ladder). Run whole, and interrupted: with one frozen epoch in the detector's
    window (epoch 2), after the LR bump (3), after the rewind and the best epoch (5)."""
    cfg = tiny_cfg(*FROZEN)
    root = tmp_path_factory.mktemp("frozen")
    validated: dict[int, dict[str, torch.Tensor]] = {}
    real_select, real_run_epoch = run_mod.evaluate_selection, run_mod.FoldTrainer.run_epoch

    def evaluate_selection(market, periods, cfg_, policy, bpy, mode=None):
        return real_select(market, periods, cfg_, scripted(ScriptedPolicy.FLAT, cfg_.env), bpy)

    def run_epoch(self: run_mod.FoldTrainer) -> dict[str, Any]:
        ep = real_run_epoch(self)
        row = ep["row"]
        row.update({k: FROZEN_Q for k in row if k.startswith("q/") and k.count("/") == 2})
        ep["select"]["sharpe_annual"] = row["sharpe/select"] = 1.0 if self.epoch == BEST_EPOCH else 0.0
        validated[self.epoch] = {k: v.clone() for k, v in self.agent.policy.net.state_dict().items()}
        return ep

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run_mod, "evaluate_selection", evaluate_selection)
        mp.setattr(run_mod.FoldTrainer, "run_epoch", run_epoch)
        train(cache, cfg, root / "whole", log=quiet)
        whole = dict(validated)
        with pytest.raises(Interrupted):
            train(cache, cfg, root / "resumed", log=quiet, stop_after=(0, 2))
        for stop in [(0, 3), (0, BEST_EPOCH)]:
            with pytest.raises(Interrupted):
                train(cache, cfg, root / "resumed", resume=True, log=quiet, stop_after=stop)
        train(cache, cfg, root / "resumed", resume=True, log=quiet)
    return FrozenRuns(root / "whole", root / "resumed", whole)


def test_plateau_ladder_responds_to_a_frozen_learner_in_order(frozen: FrozenRuns) -> None:
    cfg = tiny_cfg(*FROZEN)
    [fold] = folds_of(frozen.whole)
    responses = fold["diagnostics"]["plateau_responses"]
    # patience 1: frozen after two epochs, then the window restarts: epochs 1, 3, 5 and 7; epoch 7 is
    # the fold's last (no training follows: no response).
    assert [r.split(" (")[0] for r in responses] == [
        "epoch 1: momentum_reset",
        "epoch 3: lr_bump",
        "epoch 5: rewind",
    ]
    reset = re.search(r"zeroed the optimizer state of (\d+) head parameter", responses[0])
    assert reset is not None and int(reset.group(1)) > 0
    assert responses[2].endswith("ring/epoch0004.safetensors)")  # the newest ring entry
    events = [json.loads(line) for line in (frozen.whole / "diagnostics.jsonl").read_text().splitlines()]
    assert [(e["epoch"], e["event"]) for e in events if "event" in e] == [
        (1, "plateau"),
        (3, "plateau"),
        (5, "plateau"),
    ]
    # The LR bump lasts: every epoch after it runs at twice the schedule.
    learn = cfg.agent.learn
    for row in fold["history"]:
        e = row["epoch"]
        expected = cosine_lr(e, learn.lr, learn.lr_min_share, learn.restart_epochs) * (2 if e > 3 else 1)
        assert row["lr"] == pytest.approx(expected, rel=1e-12), e
    # The rewind put back epoch 4's weights; the best checkpoint (epoch 5) keeps the weights that were
    # validated, not the rewound ones; the last one holds what the fold reports (epoch 7's).
    store = CheckpointStore(frozen.whole, ring=cfg.train.ring)
    assert same_weights(network_of(store.paths.ring(0, 5)), network_of(store.paths.ring(0, 4)))
    assert not same_weights(network_of(store.paths.ring(0, 5)), frozen.validated[5])
    assert (
        read_checkpoint_meta(store.paths.best(0))["epoch"] == BEST_EPOCH == fold["diagnostics"]["best_epoch"]
    )
    assert same_weights(network_of(store.paths.best(0)), frozen.validated[BEST_EPOCH])
    assert same_weights(network_of(store.paths.last(0)), frozen.validated[7])


def test_resume_keeps_the_plateau_state(frozen: FrozenRuns) -> None:
    """The resumed run responds at the same epochs with the same rungs, keeps the LR bump and knows
    its best epoch: the same result as the uninterrupted one."""
    assert canon(folds_of(frozen.resumed), frozen.resumed) == canon(folds_of(frozen.whole), frozen.whole)


def test_resume_after_the_replay_wrapped(cache: FeatureCache, tmp_path: Path) -> None:
    # 12 episodes x 16 steps = 192 transitions an epoch into 256 slots: wrapped after epoch 1.
    cfg = tiny_cfg("folds.n_folds=1", "train.epochs=3", "train.envs=12", "agent.replay.capacity=256")
    train(cache, cfg, tmp_path / "whole", log=quiet)
    with pytest.raises(Interrupted):
        train(cache, cfg, tmp_path / "resumed", log=quiet, stop_after=(0, 1))
    train(cache, cfg, tmp_path / "resumed", resume=True, log=quiet)
    assert canon(folds_of(tmp_path / "resumed")) == canon(folds_of(tmp_path / "whole"))


@pytest.mark.parametrize("stop", [(0, 0), (0, 2)])
def test_checkpoint_every_k_epochs_and_a_resume_redoes_the_unsaved_ones(
    cache: FeatureCache, tmp_path: Path, stop: tuple[int, int]
) -> None:
    """train.checkpoint_every = 2 of 4 epochs: resumable checkpoints after epochs 1 and 3 (the last)
    only; a run stopped after an unsaved epoch resumes from the one before and reaches the same
    result, its best epoch included (a best that a redone epoch had saved is that epoch's again)."""
    every = ("train.epochs=4", "train.checkpoint_every=2", "train.selection=train_tail")
    cfg = tiny_cfg("folds.n_folds=1", *every)
    train(cache, cfg, tmp_path / "whole", log=quiet)
    whole = CheckpointStore(tmp_path / "whole", ring=cfg.train.ring)
    assert [p.name for p in whole.ring.files(0)] == ["epoch0001.safetensors", "epoch0003.safetensors"]
    with pytest.raises(Interrupted):
        train(cache, cfg, tmp_path / "resumed", log=quiet, stop_after=stop)
    store = CheckpointStore(tmp_path / "resumed", ring=cfg.train.ring)
    saved = None if stop[1] < 1 else 1
    assert (read_checkpoint_meta(store.paths.last(0))["epoch"] if saved is not None else None) == saved
    assert store.best.metric(0) is not None  # a best was saved by an epoch the resume redoes
    train(cache, cfg, tmp_path / "resumed", resume=True, log=quiet)
    assert canon(folds_of(tmp_path / "resumed")) == canon(folds_of(tmp_path / "whole"))


def test_resume_with_another_config_is_refused_naming_the_key(cache: FeatureCache, tmp_path: Path) -> None:
    cfg = tiny_cfg("folds.n_folds=1", "train.epochs=2")
    with pytest.raises(Interrupted):
        train(cache, cfg, tmp_path / "run", log=quiet, stop_after=(0, 0))
    other = cfg.model_copy(update={"run": cfg.run.model_copy(update={"seed": cfg.run.seed + 1})})
    with pytest.raises(FoxhuntError, match=r"run\.seed: 10 -> 11"):
        train(cache, other, tmp_path / "run", resume=True, log=quiet)


# --- checkpoints ---------------------------------------------------------------------------------


def test_backtest_of_a_checkpoint_reproduces_its_validation(
    cache: FeatureCache, run_a: Path, tmp_path: Path
) -> None:
    """``foxhunt backtest --checkpoint`` on the last checkpoint of a fold whose policy trades, in a
    process of its own (as a researcher runs it after training): the fold's last-epoch validation
    metrics, from the weights, PopArt, the input screen's mask and the acting signals in the file (the
    best checkpoint against the reported metrics: tests/report/test_checkpoint_numbers.py)."""
    folds = folds_of(run_a)
    # A policy that trades: flat against flat would prove nothing. Which fold's tiny policy trades
    # depends on the random streams, so the test takes the first that does.
    trading = [k for k, f in enumerate(folds) if f["last_epoch"]["trades"] > 0]
    assert trading, "run_a is flat in every fold: no checkpoint to compare"
    k = trading[0]
    path = run_a / "checkpoints" / f"fold{k}" / "last.safetensors"
    # The smoke profile screens its inputs: this checkpoint's network reads a subset of the features.
    assert folds[k]["diagnostics"]["input_screen"] and not bool(network_of(path)["input_mask"].all())
    args = ["backtest", "--cache", str(cache.path), "--checkpoint", str(path), "--out", str(tmp_path), "-q"]
    ran = subprocess.run(
        [sys.executable, "-m", "foxhunt.cli", *args], capture_output=True, text=True, timeout=600, check=False
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    body = json.loads((tmp_path / "metrics.json").read_text())
    assert body["folds"] == [k] and f"fold {k}, epoch 1" in body["policy"]
    last = folds[k]["last_epoch"]
    assert last["epoch"] == 1
    for key in ("net_pnl", "gross_pnl", "costs", "trades", "sharpe_annual", "max_drawdown", "active_frac"):
        assert body[key] == pytest.approx(last[key], rel=1e-9, abs=1e-9), key


def test_each_fold_records_where_its_reported_policy_entries_paid(cache: FeatureCache, run_a: Path) -> None:
    """``folds.json``'s calibration is the reported checkpoint's entry advantage against the plan
    horizon's move, on the fold's training rows and on its validation rows: recomputed from the file."""
    from foxhunt.env.market import market_tensors
    from foxhunt.train.diagnostics import advantage_calibration
    from foxhunt.validation.folds import make_folds

    cfg = tiny_cfg()
    folds = folds_of(run_a)
    data = make_folds(cache.features(), cache.columns, cfg.folds, int(cache.meta["label_span"]))
    for k, fold in enumerate(folds):
        fd = data[k]
        market = market_tensors(cache, fd, vol_window=cfg.env.plan.barrier.vol_window)
        agent = CheckpointPolicy(run_a / fold["checkpoint_file"], cfg).agent("cpu").policy
        horizon = cfg.env.plan.barrier.horizon
        lo, hi = fd.fold.validation_start, fd.fold.validation_end
        want = {
            "train": advantage_calibration(agent, market, cfg.env, fd.fold.train, horizon),
            "validation": advantage_calibration(agent, market, cfg.env, np.arange(lo, hi), horizon),
        }
        got = fold["calibration"]
        for part in ("train", "validation"):
            assert got[part]["rows"] == want[part]["rows"] > 0 and got[part]["horizon"] == horizon
            np.testing.assert_allclose(got[part]["move"], want[part]["move"], rtol=1e-6)
            np.testing.assert_allclose(got[part]["edges"], want[part]["edges"], rtol=1e-5, atol=1e-9)


def _expect(agent: Agent, cfg: FoxhuntConfig) -> Fingerprint:
    return Fingerprint.of(agent.policy.state_dict(), cfg.env.branches)


def test_checkpoint_policy_acts_with_the_trained_signals(run_a: Path) -> None:
    """The greedy policy's conviction and Q variance are scaled by the acting signals (Q-gap and |Q|
    running means), which the checkpoint holds next to the weights."""
    path = run_a / "checkpoints" / "fold1" / "last.safetensors"
    cfg = tiny_cfg()
    states = torch.randn(64, STATE_LAYOUT.width, generator=torch.Generator().manual_seed(0))
    acted = CheckpointPolicy(path, cfg).policy("cpu")(states, None)
    trained, cold = (Agent(cfg.agent, cfg.env.branches, seed=0, replay_capacity=16) for _ in range(2))
    policy = load_checkpoint(path, expect=_expect(trained, cfg)).policy
    trained.load_state_dict({"policy": policy}, Restore.POLICY)
    cold_policy = {**policy, "signals": cold.policy.signals.state_dict()}  # cold-start signals
    cold.load_state_dict({"policy": cold_policy}, Restore.POLICY)
    want, cold_out = trained.policy(states, Mode.GREEDY), cold.policy(states, Mode.GREEDY)
    assert torch.equal(acted.actions, want.actions)
    assert torch.equal(acted.direction_conviction, want.direction_conviction)
    assert torch.equal(acted.q_variance, want.q_variance)
    assert not torch.equal(cold_out.direction_conviction, want.direction_conviction)  # the signals matter


def test_checkpoint_refuses_a_network_of_another_width(run_a: Path) -> None:
    path = run_a / "checkpoints" / "fold0" / "last.safetensors"
    wide = tiny_cfg("agent.network.hidden=24")
    agent = Agent(wide.agent, wide.env.branches, seed=0, replay_capacity=16)
    before = {k: v.clone() for k, v in agent.policy.net.state_dict().items()}
    with pytest.raises(CheckpointMismatchError) as err:
        load_checkpoint(path, expect=_expect(agent, wide))
    # e.g. "network.trunk.0.weight: shape [24, 106] here, [16, 106] in the checkpoint"
    widths = re.compile(r"^network\.\S+: shape \[.*24.*\] here, \[.*16.*\] in the checkpoint$")
    shapes = [d for d in err.value.differences if widths.match(d)]
    assert shapes, err.value.differences
    assert shapes[0] in str(err.value)
    assert all(torch.equal(before[k], v) for k, v in agent.policy.net.state_dict().items())  # nothing loaded
    # The same width loads (the round trip of the values is the backtest test above).
    same = tiny_cfg()
    ok = Agent(same.agent, same.env.branches, seed=0, replay_capacity=16)
    meta = load_checkpoint(path, expect=_expect(ok, same)).meta
    assert meta["fold"] == 0 and meta["config"]["agent"]["network"]["hidden"] == 16


def test_the_input_screen_masks_the_network_by_the_folds_own_training_rows(
    cache: FeatureCache, tmp_path: Path
) -> None:
    """``agent.network.input_screen = K``: each fold's network reads the K columns the fold's own
    collection rows rank first (recomputed here), their mirror partners and the agent's own slots;
    the checkpoint carries the mask, and the agent loaded from it reads what training read."""
    from foxhunt.env.market import market_tensors
    from foxhunt.validation.folds import fold_periods, make_folds
    from foxhunt.validation.screen import screen_columns

    keep = 3
    cfg = tiny_cfg(f"agent.network.input_screen={keep}")
    train(cache, cfg, tmp_path, log=quiet)
    data = make_folds(cache.features(), cache.columns, cfg.folds, int(cache.meta["label_span"]))
    for k, fold in enumerate(folds_of(tmp_path)):
        market = market_tensors(cache, data[k], vol_window=cfg.env.plan.barrier.vol_window)
        periods = fold_periods(data[k].fold, cfg.train)
        columns = tuple(market.feature_columns)
        want = screen_columns(
            market.features.numpy(),
            columns,
            market.mid.numpy(),
            market.segment.numpy(),
            periods.collect_lo,
            periods.collect_hi,
            cfg.env.plan.barrier.horizon,
            keep,
        )
        kept = fold["diagnostics"]["input_screen"]
        assert kept == want.summary() and len(kept) == keep
        assert [abs(v) for v in kept.values()] == sorted((abs(v) for v in kept.values()), reverse=True)
        mask = network_of(tmp_path / fold["checkpoint_file"])["input_mask"]
        assert torch.equal(mask, input_mask(kept))
        # Every screened-out feature column reads 0: at most K columns and their K partners are read.
        features = [STATE_LAYOUT.index(c) for c in columns]
        assert keep <= int(mask[features].sum()) <= 2 * keep < len(features)
        agent = CheckpointPolicy(tmp_path / fold["checkpoint_file"], cfg).agent("cpu")
        assert torch.equal(agent.policy.net.input_mask, mask)


def test_an_input_screen_without_a_whole_forward_window_is_a_clear_error(
    cache: FeatureCache, tmp_path: Path
) -> None:
    cfg = tiny_cfg("agent.network.input_screen=3", "env.plan.barrier.horizon=5000")
    with pytest.raises(FoxhuntError, match=r"input_screen: fold 1: .*5000-row forward window") as e:
        train(cache, cfg, tmp_path, log=quiet)
    assert "input_screen=0" in e.value.fix
    assert not (tmp_path / "folds.json").exists()
