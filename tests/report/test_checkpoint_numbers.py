"""One checkpoint everywhere a number is reported: a fold's metrics.json numbers (and the report's
row) are those ``foxhunt backtest --checkpoint best.safetensors`` gives for that fold, and the last
epoch's numbers shown beside them are those of ``last.safetensors``.

One fold of the tiny training run of ``tests/train/test_run.py``, three epochs, seed 14: there the
best selection-period Sharpe is epoch 1's, neither the first epoch's nor the last's, and the last epoch
(2) validates differently (both checkpoints trade, -1,066 against -1,196.5 net on fold 0), so a report
that gave the first or the last epoch's numbers as the fold's fails the comparison with the best
checkpoint. Which epoch is best, and whether both checkpoints trade, depends on the seed's random
streams. Marked slow: run it with ``pytest -m slow tests/report/test_checkpoint_numbers.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.data.synth import write_synthetic
from foxhunt.dataset.build import get_or_build
from foxhunt.features.cache_file import FeatureCache
from foxhunt.policy.store import CheckpointStore
from foxhunt.report.html import money, render
from foxhunt.train.run import FoldTrainer, _train_fold
from foxhunt.validation.folds import make_folds
from tests.report.test_html import parse
from tests.train.test_run import tiny_cfg

# ~30 s of CPU (market, features, three epochs, two backtests): over the default run's budget.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

OVERRIDES = ("train.epochs=3", "run.seed=14", "train.selection=train_tail")  # a best epoch, picked by Sharpe
KEYS = ("net_pnl", "gross_pnl", "costs", "trades", "sharpe_annual", "max_drawdown", "active_frac", "win_rate")
runner = CliRunner()


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[FeatureCache, Path, dict[str, Any]]:
    """Fold 0 trained for three epochs: (cache, run folder, the fold's metrics.json entry)."""
    cfg = tiny_cfg(*OVERRIDES)
    root = tmp_path_factory.mktemp("ckpt_numbers")
    cache = get_or_build(write_synthetic(cfg.synth, root / "market"), cfg, root / "cache")
    fd = make_folds(cache.features(), cache.columns, cfg.folds, int(cache.meta["label_span"]))[0]
    store = CheckpointStore(root / "run", ring=cfg.train.ring)
    trainer = FoldTrainer(cache, fd, cfg, torch.device("cpu"), store, lambda _m: None)
    fold = json.loads(json.dumps(_train_fold(trainer, store, None).to_dict(), default=float))
    return cache, root / "run", fold


def backtest(cache: FeatureCache, checkpoint: Path, out: Path) -> dict[str, Any]:
    args = ["backtest", "--cache", str(cache.path), "--checkpoint", str(checkpoint), "--out", str(out), "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads((out / "metrics.json").read_text())


def test_fold_numbers_are_the_best_checkpoints_backtest(
    trained: tuple[FeatureCache, Path, dict[str, Any]], tmp_path: Path
) -> None:
    cache, run_dir, fold = trained
    assert fold["checkpoint"] == "best" and fold["checkpoint_file"] == "checkpoints/fold0/best.safetensors"
    assert fold["epoch"] == fold["diagnostics"]["best_epoch"] == 1
    assert fold["last_epoch"]["epoch"] == 2
    body = backtest(cache, run_dir / fold["checkpoint_file"], tmp_path / "best")
    assert body["folds"] == [0] and "epoch 1" in body["policy"]
    assert fold["trades"] > 0  # a policy that trades: not flat compared with flat
    for key in KEYS:
        assert fold[key] == pytest.approx(body[key], rel=1e-9, abs=1e-9), key
    # the equity curve ends at the same net PnL, in time order
    assert fold["equity"]["agent"][-1] == pytest.approx(body["net_pnl"], abs=1e-6)
    assert fold["equity"]["time"] == sorted(fold["equity"]["time"])


def test_last_epoch_beside_it_is_the_last_checkpoints_backtest(
    trained: tuple[FeatureCache, Path, dict[str, Any]], tmp_path: Path
) -> None:
    cache, run_dir, fold = trained
    body = backtest(cache, run_dir / "checkpoints" / "fold0" / "last.safetensors", tmp_path / "last")
    assert "epoch 2" in body["policy"]
    for key in KEYS:
        assert fold["last_epoch"][key] == pytest.approx(body[key], rel=1e-9, abs=1e-9), key
    # the two differ here: the report's choice of checkpoint matters
    assert fold["last_epoch"]["net_pnl"] != fold["net_pnl"]


def test_report_row_shows_the_best_checkpoints_numbers(
    trained: tuple[FeatureCache, Path, dict[str, Any]], tmp_path: Path
) -> None:
    _, _, fold = trained
    page = tmp_path / "report.html"
    page.write_text(render({"folds": [fold]}, {}, None))  # the page without its plots (drawn elsewhere)
    p = parse(page)
    row = next(cells for sec, _, cells in p.rows if sec == "metrics" and cells[:1] == ["0"])
    assert row[1] == "best, epoch 1" and row[2] == money(fold["net_pnl"])
    assert money(fold["last_epoch"]["net_pnl"]) not in row[:5]
