"""Checkpoint integrity: content hashes of every tensor and of the header, finite weights, the header's
config and keys checked before use, and a ring that survives a kill at any point of its save."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from foxhunt.config.loader import load_config
from foxhunt.domain.actions import BranchConfig
from foxhunt.policy import checkpoint
from foxhunt.policy.checkpoint import (
    CheckpointContents,
    CheckpointError,
    checkpoint_config,
    export_weights,
    save_checkpoint,
    verify_checkpoint,
)
from foxhunt.policy.store import CheckpointStore
from foxhunt.policy.trained import CheckpointPolicy
from tests.policy.test_checkpoint import Net, _load_into
from tests.tamper import flip_bytes


def _save(path: Path, net: torch.nn.Module | None = None, **meta: object) -> Path:
    policy = {"network": (net or Net()).state_dict()}
    return save_checkpoint(path, policy=policy, branches=BranchConfig(), meta=meta)


def _load(path: Path) -> dict:
    return _load_into(path, Net(seed=5))


def _data_start(path: Path) -> int:
    """Where a safetensors file's tensor bytes begin (after the 8-byte length and the JSON header)."""
    return 8 + struct.unpack("<Q", path.read_bytes()[:8])[0]


def _rewrite_header(source: Path, target: Path, edit) -> Path:
    """``source`` with ``edit(document)`` applied to its header and the same tensors (hash kept)."""
    with safe_open(str(source), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        doc = json.loads(f.metadata()["foxhunt"])
    edit(doc)
    save_file(tensors, str(target), metadata={"foxhunt": json.dumps(doc)})
    return target


def test_flipped_weight_bytes_are_refused_naming_the_tensor(tmp_path: Path) -> None:
    weights = _save(tmp_path / "ck", epoch=1)
    assert _load(weights)["epoch"] == 1  # the untouched file loads
    for seed in range(5):
        bad = flip_bytes(weights, tmp_path / f"bad{seed}.safetensors", 16, seed, lo=_data_start(weights))
        with pytest.raises(CheckpointError, match="content hash of tensor policy/network/") as info:
            _load(bad)
        assert str(bad) in str(info.value)


def test_nan_and_inf_weights_are_refused(tmp_path: Path) -> None:
    for value in (float("nan"), float("inf")):
        net = Net()
        with torch.no_grad():
            net.value.weight[1, 2] = value
        weights = _save(tmp_path / "ck", net, fold=0, epoch=0)
        with pytest.raises(CheckpointError, match=r"non-finite weights .* policy/network/value.weight"):
            _load(weights)
        with pytest.raises(CheckpointError, match="non-finite"):
            verify_checkpoint(weights)


def test_an_edited_header_or_one_without_hashes_is_refused(tmp_path: Path) -> None:
    weights = _save(tmp_path / "ck", fold=0, epoch=3)
    edited = _rewrite_header(weights, tmp_path / "edited.safetensors", lambda d: d["meta"].update(epoch=9))
    with pytest.raises(CheckpointError, match="header does not match its content hash"):
        _load(edited)

    def as_version_1(doc: dict) -> None:
        doc.pop("content_hash")
        doc["format_version"] = 1

    old = _rewrite_header(weights, tmp_path / "old.safetensors", as_version_1)
    with pytest.raises(CheckpointError, match="is a version 1 checkpoint"):
        _load(old)


def test_export_verifies_the_tensors_it_copies(tmp_path: Path) -> None:
    signals = {"q_gap": torch.ones(())}
    policy = {"network": Net().state_dict(), "popart": Net(seed=1).state_dict(), "signals": signals}
    weights = save_checkpoint(tmp_path / "ck", policy=policy, branches=BranchConfig(), meta={"fold": 0})
    bad = flip_bytes(weights, tmp_path / "bad.safetensors", 16, 0, lo=_data_start(weights))
    with pytest.raises(CheckpointError, match="content hash"):
        export_weights(bad, tmp_path / "export")
    assert not list(tmp_path.glob("export*"))


def test_header_config_and_keys_are_checked_before_use(tmp_path: Path) -> None:
    cfg = load_config("smoke")
    good = _save(tmp_path / "good", fold=0, epoch=2, config=cfg.model_dump(mode="json"))
    got, meta = checkpoint_config(good, load_config())
    assert got == cfg and meta["epoch"] == 2
    assert CheckpointPolicy(good, load_config()).cfg == cfg

    no_fold = _save(tmp_path / "nofold", epoch=2, config=cfg.model_dump(mode="json"))
    with pytest.raises(CheckpointError, match="lacks an integer fold") as info:
        CheckpointPolicy(no_fold, cfg)
    assert str(no_fold) in str(info.value)

    bad_cfg = cfg.model_dump(mode="json")
    bad_cfg["agent"]["no_such_key"] = 1
    invalid = _save(tmp_path / "invalid", fold=0, epoch=2, config=bad_cfg)
    with pytest.raises(CheckpointError, match=r"header config is invalid .*agent.no_such_key"):
        CheckpointPolicy(invalid, cfg)
    bad_cfg = cfg.model_dump(mode="json")
    bad_cfg["agent"]["learn"]["lr"] = "fast"
    with pytest.raises(CheckpointError, match=r"header config is invalid .*agent.learn.lr"):
        checkpoint_config(_save(tmp_path / "lr", fold=0, epoch=2, config=bad_cfg), cfg)


# --- a kill at every point of the ring's save -----------------------------------------------------


class Killed(BaseException):
    """A simulated kill -9: the folder is copied as it stands at that moment, then the save stops."""


def _kill_at(step: int, run: Path, snapshot: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make the ``step``-th file-system step of the next save copy ``run`` to ``snapshot`` (what a
    kill leaves on disk) and stop; return the steps seen (all of them when the save completes)."""
    seen: list[str] = []

    def hook(name: str) -> None:
        seen.append(name)
        if len(seen) - 1 == step:
            shutil.copytree(run, snapshot)
            raise Killed(name)

    real_save, real_replace, real_fsync, real_unlink = checkpoint.save_file, os.replace, os.fsync, Path.unlink

    def save_file_(tensors, filename, metadata=None):
        hook("before writing the tensors")
        real_save(tensors, filename, metadata=metadata)
        data = Path(filename).read_bytes()
        Path(filename).write_bytes(data[: len(data) // 2])  # half written, as a kill mid-write leaves
        hook("half the tensors written")
        Path(filename).write_bytes(data)

    def replace_(src, dst):
        hook(f"before renaming to {Path(dst).name}")
        real_replace(src, dst)

    def fsync_(fd):
        hook("before fsync")
        real_fsync(fd)

    def unlink_(self, missing_ok=False):
        hook(f"before deleting {self.name}")
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(checkpoint, "save_file", save_file_)
    monkeypatch.setattr(os, "replace", replace_)
    monkeypatch.setattr(os, "fsync", fsync_)
    monkeypatch.setattr(Path, "unlink", unlink_)
    return seen


def test_the_ring_keeps_the_newest_complete_epoch_after_a_kill_at_any_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def contents(epoch: int) -> CheckpointContents:
        return CheckpointContents(policy={"network": Net(seed=epoch).state_dict()}, branches=BranchConfig())

    step, outcomes = 0, []
    while True:
        run, snapshot = tmp_path / f"run{step}", tmp_path / f"killed{step}"
        store = CheckpointStore(run, ring=2)
        for epoch in (0, 1):
            store.save_epoch(0, epoch, contents(epoch))
        seen = _kill_at(step, run, snapshot, monkeypatch)
        try:
            store.save_epoch(0, 2, contents(2))
        except Killed:
            pass
        monkeypatch.undo()
        if not snapshot.exists():  # the save completed: every step has had its kill
            break
        after = CheckpointStore(snapshot, ring=2)
        point = after.resume_point()
        assert point is not None and point.epoch in (1, 2), seen[-1]
        # The ring's newest entry is the resume point's epoch, complete, as in a run never killed.
        newest = after.ring.latest(0)
        assert newest == after.paths.ring(0, point.epoch), seen[-1]
        for path in (point.path, newest):
            into = Net(seed=9)
            meta = _load_into(path, into)
            assert meta["epoch"] == point.epoch and torch.equal(into.support, Net(seed=point.epoch).support)
        outcomes.append((seen[-1], point.epoch))
        step += 1
    assert len(outcomes) >= 10  # every write, fsync, rename and deletion of both files was a kill point
    assert {epoch for _, epoch in outcomes} == {1, 2}
