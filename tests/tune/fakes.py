"""Stand-ins for training in the study tests: module-level (a Ray task or a spawned worker imports
them by name), each a pure function of the config it is given, so a study's mechanics (sampling,
workers, pruning, the guard, resuming, the export) are tested in milliseconds per trial.

The fake's selection-period net PnL (what a study ranks) is highest at lr = 3e-3 (:func:`score`), its
validation net PnL at lr = 3e-2 (:func:`validation_score`): a study that ranked on the validation
periods would pick another trial. It records the config it was given as ``train()`` does
(``train.config.json``), so a test can compare the exported profile with the config a trial really
trained.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from foxhunt.config.loader import write_resolved
from foxhunt.config.models import FoxhuntConfig
from foxhunt.train.guard import AnomalyError, AnomalyVerdict, Cause, GuardResult
from foxhunt.train.run import RECORDED_CONFIG
from foxhunt.tune.seeds import with_seed
from foxhunt.tune.study import PRUNED_METRIC

GUARD_DIAGNOSIS = "validation Sharpe 99.0 above the ceiling 70.0"
SLOW_SECONDS = 0.5


def score(cfg: FoxhuntConfig) -> float:
    """The fake's selection-period net PnL: 1000 at lr = 3e-3, falling by 1000 per decade away from it."""
    return 1000.0 - 1000.0 * abs(math.log10(cfg.agent.learn.lr / 3e-3))


def validation_score(cfg: FoxhuntConfig) -> float:
    """The fake's validation net PnL: 500 at lr = 3e-2, falling by 1000 per decade away from it."""
    return 500.0 - 1000.0 * abs(math.log10(cfg.agent.learn.lr / 3e-2))


def _folds(
    cfg: FoxhuntConfig, seed: int, out: Path, on_epoch: Any, pause: float = 0.0
) -> list[dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    write_resolved(with_seed(cfg, seed), out / RECORDED_CONFIG)
    (out / "pid.json").write_text(json.dumps(os.getpid()))  # which worker trained it
    net = score(cfg)
    folds = []
    for k in range(cfg.folds.n_folds):
        for epoch in range(cfg.train.epochs):
            time.sleep(pause)
            if on_epoch is not None:
                on_epoch(k, epoch, {PRUNED_METRIC: net})
        selection = {"rows": 100, "net_pnl": net, "sharpe_annual": 1.0, "rule_net_pnl": None}
        folds.append(
            {
                "fold": k,
                "net_pnl": validation_score(cfg),
                "trades": 10,
                "sharpe_annual": 1.0,
                "baselines": {},
                "selection": selection,
            }
        )
    return folds


def fake_train(
    cfg: FoxhuntConfig, seed: int, out: Path, cache_path: Path, planted: str | None, on_epoch: Any
) -> list[dict[str, Any]]:
    """Training that scores the config (:func:`score`); a count bonus (agent.explore.count_bonus > 0)
    is "stopped by the anomaly guard" (a deterministic stand-in for an implausible run)."""
    if cfg.agent.explore.count_bonus > 0:
        verdict = GuardResult(AnomalyVerdict.ANOMALOUS, (Cause.IMPLAUSIBLE,), GUARD_DIAGNOSIS)
        raise AnomalyError("fold 0 epoch 0", verdict)
    return _folds(cfg, seed, out, on_epoch)


def slow_train(
    cfg: FoxhuntConfig, seed: int, out: Path, cache_path: Path, planted: str | None, on_epoch: Any
) -> list[dict[str, Any]]:
    """:func:`fake_train` taking ``SLOW_SECONDS`` per epoch (a kill lands mid-trial)."""
    return _folds(cfg, seed, out, on_epoch, pause=SLOW_SECONDS)


def zombie_train(
    cfg: FoxhuntConfig, seed: int, out: Path, cache_path: Path, planted: str | None, on_epoch: Any
) -> list[dict[str, Any]]:
    """:func:`fake_train` under which trial 0, while it runs, is failed and re-queued exactly as
    another worker's ``optuna.storages.fail_stale_trials`` does to a live trial whose heartbeats came
    late (its state set to FAIL, then the storage's stale-trial callback: the study's retry)."""
    import optuna
    from optuna.trial import TrialState

    from foxhunt.tune.study import TRIALS_DIR, default_storage, open_storage

    study_out = out.parent.parent
    if out.parent.name == TRIALS_DIR and out.name == "0":
        storage = open_storage(default_storage(study_out), cfg.tune)
        (name,) = optuna.study.get_all_study_names(storage)
        study = optuna.load_study(study_name=name, storage=storage)
        trial = study.trials[0]
        if trial.state is TrialState.RUNNING:
            assert storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
            storage.get_heartbeat_stale_trial_callback()(study, storage.get_trial(trial._trial_id))
    return _folds(cfg, seed, out, on_epoch)
