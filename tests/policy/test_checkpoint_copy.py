"""An epoch's checkpoint is serialised and hashed once: ``last`` is a byte copy of the ring entry
(with the replay buffer inside, a GPU-sized checkpoint is 1-2 GB and each serialisation seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from foxhunt.domain.actions import BranchConfig
from foxhunt.policy import checkpoint
from foxhunt.policy.checkpoint import CheckpointContents, checkpoint_files, load_checkpoint
from foxhunt.policy.store import CheckpointStore
from tests.policy.test_checkpoint import Net, _expect


def _contents(epoch: int) -> CheckpointContents:
    replay = torch.arange(4096, dtype=torch.float32) * (epoch + 1)  # extra state, as the replay's
    return CheckpointContents(
        policy={"network": Net(seed=epoch).state_dict()}, branches=BranchConfig(), training={"replay": replay}
    )


def test_save_epoch_serialises_once_and_last_is_the_ring_entry(tmp_path: Path, monkeypatch) -> None:
    calls = []
    real = checkpoint.save_file
    monkeypatch.setattr(checkpoint, "save_file", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    store = CheckpointStore(tmp_path, ring=2)
    for epoch in range(3):
        last = store.save_epoch(0, epoch, _contents(epoch))
    assert len(calls) == 3  # one serialisation per epoch, not two
    ring = store.ring.latest(0)
    assert ring is not None and ring.name == "epoch0002.safetensors"
    for a, b in zip(checkpoint_files(ring), checkpoint_files(last), strict=True):
        assert a.read_bytes() == b.read_bytes()
    assert len(store.ring.files(0)) == 2  # the ring still keeps its newest entries only
    loaded = load_checkpoint(last, expect=_expect(Net(seed=9)), training=True)
    assert loaded.meta["epoch"] == 2 and loaded.training is not None
    assert torch.equal(loaded.training["replay"], torch.arange(4096, dtype=torch.float32) * 3)


def test_a_copy_is_its_own_file(tmp_path: Path) -> None:
    """A damaged ``last`` leaves the ring entry it was copied from whole (the resume falls back to it)."""
    store = CheckpointStore(tmp_path, ring=2)
    last = store.save_epoch(0, 0, _contents(0))
    ring = store.ring.latest(0)
    assert ring is not None and not ring.samefile(last)
    data = bytearray(last.read_bytes())
    data[-100] ^= 0xFF  # a byte of the tensors (the header comes first)
    last.write_bytes(bytes(data))
    with pytest.raises(checkpoint.CheckpointError):
        load_checkpoint(last, expect=_expect(Net(seed=9)), training=True)
    assert load_checkpoint(ring, expect=_expect(Net(seed=9)), training=True).meta["epoch"] == 0
