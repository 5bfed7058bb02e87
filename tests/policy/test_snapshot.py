"""Background saves copy into host storages reused from save to save: the pool stays within its
bound, a storage is never lent to a second save while a pending one holds it, and (on CUDA) the
asynchronous copy into pinned memory writes the state at the call."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from foxhunt.domain.actions import BranchConfig
from foxhunt.policy import checkpoint
from foxhunt.policy import store as store_module
from foxhunt.policy.checkpoint import CheckpointContents, load_checkpoint
from foxhunt.policy.snapshot import HostPool, Snapshot
from foxhunt.policy.store import CheckpointStore
from foxhunt.policy.writer import MAX_PENDING, Writes
from tests.policy.test_checkpoint import Net, _expect, _policy


def _contents(net: Net, replay: torch.Tensor) -> CheckpointContents:
    return CheckpointContents(policy=_policy(net), branches=BranchConfig(), training={"replay": replay})


def _storages(value: object) -> set[int]:
    """The data pointers of the storages of every tensor in a tree of contents."""
    if isinstance(value, torch.Tensor):
        return {value.untyped_storage().data_ptr()}
    if isinstance(value, dict):
        return set().union(*(_storages(v) for v in value.values()))
    return set()


def _state(net: Net) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}


def _same_state(path: Path, net: dict[str, torch.Tensor], replay: torch.Tensor) -> None:
    """Checkpoint ``path`` holds network state ``net`` and replay ``replay``, bit for bit."""
    loaded = load_checkpoint(path, expect=_expect(Net()), training=True)
    assert loaded.training is not None
    assert torch.equal(loaded.training["replay"], replay.cpu())
    assert loaded.policy["network"].keys() == net.keys()
    for key, value in net.items():
        assert torch.equal(loaded.policy["network"][key], value), key


def test_the_pool_keeps_within_its_bound_as_sizes_change_and_reuses_steady_ones() -> None:
    pool = HostPool(saves=3)
    sizes = [4000 - 100 * i for i in range(10)] + [3000] * 4  # a replay filling, then full
    allocations = []
    for n in sizes:
        snap = Snapshot(pool)
        snap.hold({"replay": torch.zeros(n), "net": {"w": torch.ones(10), "b": torch.ones(3)}})
        snap.seal()
        assert pool.held_bytes <= pool.limit_bytes
        snap.written_by(lambda: None)
        assert pool.held_bytes <= pool.limit_bytes == 3 * 4 * (4000 + 13)
        allocations.append(pool.allocations)
    # a new replay size allocates one storage; the network's two are reused throughout
    assert allocations[:10] == [3 + i for i in range(10)]
    assert allocations[10:] == [13] * 4  # the full replay's size is reused
    assert pool.held_bytes < sum(4 * (n + 13) for n in sizes[:10])  # stale sizes were dropped
    pool.clear()
    assert pool.held_bytes == 0


def test_six_background_saves_reuse_the_storages_of_two(tmp_path: Path) -> None:
    store, net = CheckpointStore(tmp_path, ring=2, writes=Writes.BACKGROUND), Net(seed=3)
    replay = torch.arange(4096, dtype=torch.float32)
    per_save = len(net.state_dict()) + 1  # every tensor of the net has its own storage, plus the replay
    nbytes = replay.nbytes + sum(t.untyped_storage().nbytes() for t in net.state_dict().values())
    saved = []
    for epoch in range(6):
        store.save_epoch(0, epoch, _contents(net, replay))
        saved.append((_state(net), replay))
        # at most MAX_PENDING saves hold storages; older ones gave theirs back for reuse
        assert store.writer.pool.allocations <= MAX_PENDING * per_save
        assert store.writer.pool.held_bytes <= (MAX_PENDING + 1) * nbytes == store.writer.pool.limit_bytes
        with torch.no_grad():
            for param in net.parameters():
                param.add_(1.0)
        replay = replay + 1.0
    store.wait()
    ring = store.ring.files(0)
    assert [p.name for p in ring] == ["epoch0004.safetensors", "epoch0005.safetensors"]
    for path, state in zip([*ring, store.paths.last(0)], saved[4:] + saved[5:], strict=True):
        _same_state(path, *state)
    store.close()
    assert store.writer.pool.held_bytes == 0


def test_a_pending_save_keeps_its_storages_and_a_later_save_reuses_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, save, seen = threading.Event(), checkpoint.save_checkpoint, []

    def held_back(*args, **kwargs):  # the writer thread records what it writes, then waits for the gate
        seen.append(_storages(kwargs["policy"]) | _storages(kwargs["training"]))
        assert gate.wait(timeout=30)
        return save(*args, **kwargs)

    monkeypatch.setattr(store_module, "save_checkpoint", held_back)
    store, net = CheckpointStore(tmp_path, ring=3, writes=Writes.BACKGROUND), Net(seed=4)
    replays = [torch.full((1024,), float(e)) for e in range(3)]
    states = []
    for epoch in range(2):  # the first write is held back while the second save copies
        store.ring.save(0, epoch, _contents(net, replays[epoch]))
        states.append(_state(net))
        with torch.no_grad():
            for param in net.parameters():
                param.mul_(2.0)
    first_allocations = store.writer.pool.allocations
    gate.set()
    store.wait()
    store.ring.save(0, 2, _contents(net, replays[2]))
    store.close()
    first, second, third = seen
    assert not first & second  # lent to the pending first save: the second got other storages
    assert third <= first | second and store.writer.pool.allocations == first_allocations  # reused
    for epoch, state in enumerate([*states, _state(net)]):
        _same_state(store.paths.ring(0, epoch), state, replays[epoch])


@pytest.mark.gpu
def test_a_background_save_from_cuda_writes_the_state_at_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pinned, save = [], checkpoint.save_checkpoint

    def recording(*args, **kwargs):
        pinned.append(kwargs["training"]["replay"].is_pinned())
        return save(*args, **kwargs)

    monkeypatch.setattr(store_module, "save_checkpoint", recording)
    store, net = CheckpointStore(tmp_path, ring=2, writes=Writes.BACKGROUND), Net(seed=5).cuda()
    replay = torch.randn(1 << 24, device="cuda")  # 64 MB: a copy that takes a while
    want_net, want_replay = _state(net), replay.cpu()
    for epoch in range(3):
        # The stream is held up before the save, so its copies run well after the call returns: a
        # writer that read the host buffers before the copies completed would write other bytes.
        torch.cuda._sleep(200_000_000)
        store.save_last(0, epoch, _contents(net, replay))
        replay.add_(1.0)  # queued after the copies: the file holds the values before it
        with torch.no_grad():
            for param in net.parameters():
                param.mul_(-1.0)
        store.wait()
        _same_state(store.paths.last(0), want_net, want_replay)
        want_net, want_replay = _state(net), replay.cpu()
    assert pinned == [True] * 3
    assert store.writer.pool.allocations == len(net.state_dict()) + 1  # the later saves reused the first's
    store.close()
