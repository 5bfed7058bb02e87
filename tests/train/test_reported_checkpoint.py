"""The checkpoint a run reports is the one api.checkpoint_path names by default, and a missing
checkpoint's error lists the ones that exist (the default profile writes last, never best)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foxhunt import api
from foxhunt.policy.checkpoint import CheckpointError, read_checkpoint_meta


def _run(tmp_path: Path, reported: str | None) -> Path:
    """A training run folder as the default profile leaves it: fold0/last only (placeholder files:
    only their names are read here), with a folds.json naming ``reported`` (None: none yet)."""
    run = tmp_path / "run" / "train"
    fold = run / "checkpoints" / "fold0"
    fold.mkdir(parents=True)
    for suffix in (".safetensors", ".json"):
        (fold / f"last{suffix}").write_text("")
    if reported is not None:
        (run / "folds.json").write_text(json.dumps([{"fold": 0, "checkpoint_file": reported}]))
    return run


def test_the_default_is_the_reported_checkpoint(tmp_path: Path) -> None:
    run = _run(tmp_path, "checkpoints/fold0/last.safetensors")
    want = run / "checkpoints" / "fold0" / "last.safetensors"
    assert api.checkpoint_path(run, 0) == want
    assert api.checkpoint_path(run.parent, 0) == want  # the `foxhunt run` folder holding train/
    assert api.checkpoint_path(run, 0, "best").name == "best.safetensors"  # asked for by name
    with pytest.raises(CheckpointError, match="folds 0..0, not 3"):
        api.checkpoint_path(run, 3)


def test_without_folds_json_best_where_it_exists_else_last(tmp_path: Path) -> None:
    run = _run(tmp_path, None)
    assert api.checkpoint_path(run, 0).name == "last.safetensors"
    (run / "checkpoints" / "fold0" / "best.safetensors").write_text("")
    assert api.checkpoint_path(run, 0).name == "best.safetensors"


def test_a_missing_checkpoint_lists_those_that_exist(tmp_path: Path) -> None:
    run = _run(tmp_path, "checkpoints/fold0/last.safetensors")
    with pytest.raises(CheckpointError) as err:
        read_checkpoint_meta(run / "checkpoints" / "fold0" / "best.safetensors")
    assert str(run / "checkpoints" / "fold0" / "last.safetensors") in str(err.value)
    with pytest.raises(CheckpointError) as err:  # a folder that does not exist: the run's are listed
        read_checkpoint_meta(run / "checkpoints" / "fold7" / "best.safetensors")
    assert "fold0/last.safetensors" in str(err.value)
