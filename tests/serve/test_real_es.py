"""The replay-equals-backtest invariant on real CME data: the ESH4 MBO file of 2023-12-25 (two hours,
68,792 records, the book rebuilt from MBO at every row close) served by a checkpoint trained on the
synthetic market decides row for row as ``foxhunt backtest --checkpoint`` on the same file."""

from __future__ import annotations

from dataclasses import astuple
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from foxhunt import api
from foxhunt.backtest.decisions import read_decisions_csv
from foxhunt.cli import app
from foxhunt.features.cache_file import open_cache
from foxhunt.serve.ledger import Ledger

ESH4 = "cme-es/esh4-glbx-mdp3-20231225.mbo.dbn.zst"
# 15-second bars (about 240 rows in the file's live hour: enough for two folds); the rest as
# tests/serve/test_serve.py.
OVERRIDES = (
    "data.bar_seconds=15",
    "synth.sessions=3",
    "synth.events_per_session=4000",
    "folds.n_folds=2",
    "env.episode_rows=16",
    "agent.learn.updates_per_epoch=4",
    "agent.network.symmetry=none",
    "train.envs=8",
    "train.steps_per_epoch=8",
    "run.seed=0",
)

runner = CliRunner()
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from foxhunt.policy.store import CheckpointStore
    from foxhunt.train.run import FoldTrainer

    cfg = api.config("smoke", overrides=OVERRIDES)
    root = tmp_path_factory.mktemp("train")
    cache = api.build_features(api.synthetic_market(root / "market", cfg), cfg, root / "cache").cache
    store = CheckpointStore(root / "run", ring=1)
    fold = api.make_folds(cache, cfg)[1]
    trainer = FoldTrainer(cache, fold, cfg, torch.device("cpu"), store, lambda m: None)
    trainer.run_epoch()
    return api.export_weights(store.save_last(1, 0, trainer.contents({})), root / "export", cache=cache)


def test_real_es_replay_decides_as_the_backtest(real_data_dir: Path, export: Path, tmp_path: Path) -> None:
    data = real_data_dir / ESH4
    if not data.is_file():
        pytest.skip(f"{data} is absent")
    bt, sv = tmp_path / "bt", tmp_path / "sv"
    args = ["backtest", "--data", str(data), "--checkpoint", str(export), "--out", str(bt), "-q"]
    got = runner.invoke(app, args)
    assert got.exit_code == 0, got.output
    decided = read_decisions_csv(bt / "decisions.csv")
    args = ["serve", "--checkpoint", str(export), "--replay", str(data), "--out", str(sv), "-q"]
    args += ["--set", "serve.decide=eager"]  # the compiled path: tests/serve/test_decide.py
    got = runner.invoke(app, [*args, "--set", f"serve.warmup_rows={decided[0].row}"])
    assert got.exit_code == 0, got.output
    served = {d.row: d for d in read_decisions_csv(sv / "decisions.csv")}
    assert len(decided) > 30

    def same(a: object, b: object) -> bool:
        pairs = zip(astuple(a), astuple(b), strict=True)  # type: ignore[arg-type]
        return all(x == y or (isinstance(x, float) and np.isnan(x) and np.isnan(y)) for x, y in pairs)

    assert [d.row for d in decided if d.row not in served or not same(d, served[d.row])] == []
    cache = open_cache(next((bt / "cache").glob("*.arrow")))
    ledger = Ledger(sv / "ledger.sqlite")
    rows = ledger.features()
    ledger.close()
    x = cache.features()
    assert sorted(rows) == list(range(len(x)))
    assert [r for r in rows if not np.array_equal(rows[r], x[r], equal_nan=True)] == []


def test_real_es_replay_faults_are_the_recorded_gaps_only(
    real_data_dir: Path, export: Path, tmp_path: Path
) -> None:
    """ESH4's folder as the batch commands take it (the MBO file beside a definition file): the replay
    leaves the definition out, and its only faults are the file's two recorded gaps (the snapshot 33 h
    before the live records, 16.5 quiet minutes in the pre-open). Before: the closes before the first
    bar (the snapshot, the pre-open) were ERROR faults, and the first close after the open refused 143
    crossed pre-open states of 146 as a corrupt book (97.9%, where the batch saw 0.39% of the file)."""
    data = real_data_dir / ESH4
    definition = real_data_dir / "cme-es" / "definition-glbx-es-fut.dbn.zst"
    if not data.is_file() or not definition.is_file():
        pytest.skip(f"{data} or {definition} is absent")
    folder = tmp_path / "es"
    folder.mkdir()
    for f in (data, definition):
        (folder / f.name).symlink_to(f)
    sv = tmp_path / "sv"
    args = ["serve", "--checkpoint", str(export), "--replay", str(folder), "--out", str(sv)]
    got = runner.invoke(app, args)  # serve.decide = auto: eager on a replay
    assert got.exit_code == 0, got.output
    assert "definition-glbx-es-fut.dbn.zst left out" in got.output
    assert "serve.decide = auto -> eager" in got.output
    ledger = Ledger(sv / "ledger.sqlite")
    faults = ledger.faults()
    ledger.close()
    assert [kind for kind, _ in faults] == ["gap", "gap"], faults
