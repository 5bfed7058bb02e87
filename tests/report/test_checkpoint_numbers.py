"""One checkpoint everywhere a number is reported: a fold's metrics.json numbers (and the report's
row) are those ``foxhunt backtest --checkpoint best.safetensors`` gives for that fold, and the last
epoch's numbers shown beside them are those of ``last.safetensors``.

One fold of the tiny training run of ``tests/train/test_run.py``, three epochs, picked on the
selection period's Sharpe. The comparison has teeth only where the best epoch is the middle one
(neither the first's nor the last's numbers pass for it) and both checkpoints trade (not flat
compared with flat): the fixture takes the first seed of ``tests.conftest.TRADING_SEEDS`` whose run
is so, and the comparisons below hold for any such run. Marked slow: run it with
``pytest -m slow tests/report/test_checkpoint_numbers.py``.
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
from tests.conftest import first_that_trades
from tests.report.test_html import parse
from tests.train.test_run import tiny_cfg

# ~30 s of CPU (market, features, three epochs, two backtests): over the default run's budget.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

OVERRIDES = ("train.epochs=3", "train.selection=train_tail")  # a best epoch, picked by Sharpe
KEYS = ("net_pnl", "gross_pnl", "costs", "trades", "sharpe_annual", "max_drawdown", "active_frac", "win_rate")
runner = CliRunner()


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[FeatureCache, Path, dict[str, Any]]:
    """Fold 0 trained for three epochs: (cache, run folder, the fold's metrics.json entry).

    Why a seed matters, and which: on this tiny market (no edge the learner can find in 12 updates,
    costs on every round trip) a trading epoch loses, so its selection Sharpe is below a flat epoch's
    0, and within a few updates most seeds' greedy policies stop trading (at b1f14e5 seeds 14, 1, 3, 4
    and 5 had a flat best epoch, 1 and 3 after a losing first epoch). Only a run whose three epochs all
    trade has a trading best checkpoint that differs from the last; at b1f14e5 seed 2 is one (selection
    Sharpe -116, -59, -72: best epoch 1; 90 and 82 validation round trips for best and last). Which
    seeds' runs are so depends on every random stream, so a profile change may move it: the seeds are
    tried in turn, and none being so fails the test, naming them."""
    root = tmp_path_factory.mktemp("ckpt_numbers")
    cfg = tiny_cfg(*OVERRIDES)
    cache = get_or_build(write_synthetic(cfg.synth, root / "market"), cfg, root / "cache")

    def attempt(seed: int) -> tuple[tuple[Path, dict[str, Any]], int]:
        cfg = tiny_cfg(*OVERRIDES, f"run.seed={seed}")
        fd = make_folds(cache.features(), cache.columns, cfg.folds, int(cache.meta["label_span"]))[0]
        store = CheckpointStore(root / f"run{seed}", ring=cfg.train.ring)
        trainer = FoldTrainer(cache, fd, cfg, torch.device("cpu"), store, lambda _m: None)
        fold = json.loads(json.dumps(_train_fold(trainer, store, None).to_dict(), default=float))
        middle = fold["diagnostics"]["best_epoch"] == 1
        return (root / f"run{seed}", fold), min(fold["trades"], fold["last_epoch"]["trades"]) if middle else 0

    run_dir, fold = first_that_trades(attempt)
    return cache, run_dir, fold


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
    assert row[1] == "agent (best, epoch 1)" and row[2] == money(fold["net_pnl"])
    assert money(fold["last_epoch"]["net_pnl"]) not in row[:5]
