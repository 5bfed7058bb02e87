"""Checkpoints: exact round trip (policy, Adam state, nested training state), a tensor shared by both
sections stored once, acting without the training section, refusal of an older format and of a
network of another fingerprint with named differences, corrupt files, atomic writes, the per-fold
store (ring, best, resume) and RNG streams."""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from foxhunt.domain.actions import ActionCodec, BranchConfig
from foxhunt.errors import FoxhuntError
from foxhunt.features.layout import STATE_LAYOUT, build_layout
from foxhunt.policy import checkpoint
from foxhunt.policy import store as store_module
from foxhunt.policy.checkpoint import (
    CheckpointContents,
    CheckpointMismatchError,
    Fingerprint,
    capture_rng,
    checkpoint_files,
    load_checkpoint,
    read_checkpoint_meta,
    restore_rng,
    save_checkpoint,
)
from foxhunt.policy.store import CheckpointStore, ResumePoint
from foxhunt.policy.writer import Writes

N_IN = 8


class Net(nn.Module):
    def __init__(self, hidden: int = 16, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.body = nn.Sequential(nn.Linear(N_IN, hidden), nn.LayerNorm(hidden), nn.ReLU())
        self.value = nn.Linear(hidden, 3)
        self.register_buffer("support", torch.linspace(-1.0, 1.0, 5) + seed)
        self.register_buffer("updates", torch.tensor(seed, dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.value(self.body(x)) * self.support.mean()


class Tied(nn.Module):
    """Two state_dict keys on one storage (safetensors refuses shared memory unless cloned)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight


def _step(net: Net, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    opt.zero_grad()
    net(x).pow(2).mean().backward()
    opt.step()


def _batches(n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(123)
    return [torch.randn(4, N_IN, generator=g) for _ in range(n)]


def _assert_same(a: object, b: object) -> None:
    """Recursive exact equality of optimizer state dicts (tensors bit for bit, types kept)."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y)
    else:
        assert a == b


def _policy(net: nn.Module) -> dict[str, dict[str, torch.Tensor]]:
    return {"network": net.state_dict()}


def _expect(net: nn.Module, branches: BranchConfig | None = None, layout=STATE_LAYOUT) -> Fingerprint:
    return Fingerprint.of(_policy(net), branches or BranchConfig(), layout)


def _load_into(path: Path, net: nn.Module) -> dict:
    """Load checkpoint ``path``'s policy network into ``net``; return the meta."""
    loaded = load_checkpoint(path, expect=_expect(net))
    net.load_state_dict(loaded.policy["network"])
    return loaded.meta


def test_round_trip_restores_adam_exactly_and_the_next_step_is_bit_identical(tmp_path: Path) -> None:
    batches = _batches(4)
    net, tied = Net(seed=0), Tied(seed=0)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2, betas=(0.8, 0.95))
    for x in batches[:3]:
        _step(net, opt, x)
    base = torch.arange(20.0)
    extras = {"obs": base, "head": base[5:10], "t": base.view(4, 5).t()}  # three views of one storage
    save_checkpoint(
        tmp_path / "ck",
        policy={"network": net.state_dict(), "tied": tied.state_dict()},
        branches=BranchConfig(),
        training={"adam": opt.state_dict(), "replay": extras, "step": 3},
        meta={"fold": 1, "epoch": 7, "seed": 42},
    )

    net2, tied2 = Net(seed=5), Tied(seed=5)  # different weights and buffers, other lr and betas
    opt2 = torch.optim.Adam(net2.parameters(), lr=1e-3)
    policy2 = {"network": net2.state_dict(), "tied": tied2.state_dict()}
    expect = Fingerprint.of(policy2, ActionCodec(BranchConfig()))
    loaded = load_checkpoint(tmp_path / "ck", expect=expect, training=True)
    net2.load_state_dict(loaded.policy["network"])
    tied2.load_state_dict(loaded.policy["tied"])
    assert loaded.training is not None
    opt2.load_state_dict(loaded.training["adam"])
    meta, got = loaded.meta, loaded.training["replay"]

    assert (meta["fold"], meta["epoch"], meta["seed"]) == (1, 7, 42)
    assert meta["foxhunt_version"] and meta["created"].endswith("Z")
    stored = Fingerprint.from_json(meta["fingerprint"])
    assert stored.digest == meta["fingerprint"]["hash"]
    assert stored == Fingerprint.of({"network": net.state_dict(), "tied": tied.state_dict()}, BranchConfig())
    for k, v in net.state_dict().items():
        assert torch.equal(v, net2.state_dict()[k]), k
    assert tied2.head.weight is tied2.emb.weight and torch.equal(tied2.emb.weight, tied.emb.weight)
    assert got.keys() == extras.keys() and loaded.training["step"] == 3
    for k, v in extras.items():
        assert torch.equal(got[k], v), k
    _assert_same(opt.state_dict(), opt2.state_dict())
    assert opt2.param_groups[0]["lr"] == 1e-2 and opt2.param_groups[0]["betas"] == (0.8, 0.95)

    _step(net, opt, batches[3])
    _step(net2, opt2, batches[3])
    for (name, p), p2 in zip(net.named_parameters(), net2.parameters(), strict=True):
        assert torch.equal(p, p2), name


def test_a_tensor_in_both_sections_is_stored_once_and_read_back_in_both(tmp_path: Path) -> None:
    # The agent's learner state repeats the policy's network (Learner.state_dict holds it too).
    net = Net(seed=3)
    weights = save_checkpoint(
        tmp_path / "ck", policy=_policy(net), branches=BranchConfig(), training={"learner": _policy(net)}
    )
    with safe_open(str(weights), framework="pt") as f:
        keys = sorted(f.keys())
    assert keys == sorted(f"policy/network/{k}" for k in net.state_dict())  # one copy, the policy's
    loaded = load_checkpoint(weights, expect=_expect(net), training=True)
    assert loaded.training is not None
    for k, v in net.state_dict().items():
        assert torch.equal(loaded.policy["network"][k], v)
        assert torch.equal(loaded.training["learner"]["network"][k], v)


def test_acting_reads_no_training_tensor_and_an_export_cannot_train(tmp_path: Path) -> None:
    net = Net(seed=1)
    save_checkpoint(
        tmp_path / "full", policy=_policy(net), branches=BranchConfig(), training={"big": torch.ones(4)}
    )
    loaded = load_checkpoint(tmp_path / "full", expect=_expect(net))
    assert loaded.training is None and loaded.policy["network"].keys() == net.state_dict().keys()
    save_checkpoint(tmp_path / "policy", policy=_policy(net), branches=BranchConfig())
    with pytest.raises(FoxhuntError, match="weights-only export .* cannot resume training"):
        load_checkpoint(tmp_path / "policy", expect=_expect(net), training=True)


def test_a_version_2_checkpoint_is_refused_naming_the_file_the_release_and_the_fix(tmp_path: Path) -> None:
    # Version 2 stored named modules and flat extras; its header has no policy section to read.
    doc = {"format": checkpoint.FORMAT, "format_version": 2, "meta": {"foxhunt_version": "0.0.9"}}
    old = tmp_path / "old.safetensors"
    save_file({"module/network/w": torch.zeros(2)}, str(old), metadata={"foxhunt": json.dumps(doc)})
    with pytest.raises(FoxhuntError) as info:
        load_checkpoint(old, expect=_expect(Net()))
    message = str(info.value)
    assert str(old) in message
    assert "version 2 checkpoint (written by foxhunt 0.0.9)" in message
    assert f"reads version {checkpoint.FORMAT_VERSION} only" in message
    assert "retrain, or load it with the foxhunt release that wrote it" in message
    with pytest.raises(FoxhuntError, match="version 2"):
        read_checkpoint_meta(old)


def test_changed_width_is_refused_naming_the_parameter_and_both_shapes(tmp_path: Path) -> None:
    save_checkpoint(tmp_path / "ck", policy=_policy(Net(hidden=16)), branches=BranchConfig())
    wider = Net(hidden=32, seed=3)
    with pytest.raises(CheckpointMismatchError) as info:
        load_checkpoint(tmp_path / "ck", expect=_expect(wider))
    message = str(info.value)
    assert "network.body.0.weight: shape [32, 8] here, [16, 8] in the checkpoint" in message
    assert "network.value.weight: shape [3, 32] here, [3, 16] in the checkpoint" in message
    assert str(checkpoint_files(tmp_path / "ck")[0]) in message
    assert isinstance(info.value, FoxhuntError)


def test_layout_and_branch_size_mismatch_are_named(tmp_path: Path) -> None:
    save_checkpoint(
        tmp_path / "ck",
        policy=_policy(Net()),
        branches=BranchConfig(magnitude=2, magnitude_fractions=(0.5, 1.0)),
    )
    ofi_width = STATE_LAYOUT.group("ofi").width
    narrower = build_layout(
        "state",
        [(g.name, g.slots[:-2] if g.name == "ofi" else g.slots) for g in STATE_LAYOUT.groups],
        STATE_LAYOUT.align,
    )
    with pytest.raises(CheckpointMismatchError) as info:
        load_checkpoint(tmp_path / "ck", expect=_expect(Net(), BranchConfig(), narrower))
    assert info.value.differences == [
        f"state layout group ofi: width {ofi_width - 2} here, {ofi_width} in the checkpoint",
        "branch magnitude: 3 here, 2 in the checkpoint",
    ]
    assert all(d in str(info.value) for d in info.value.differences)


def test_fingerprint_diff_and_hash() -> None:
    a = _expect(Net())
    assert a.diff(_expect(Net(seed=9))) == []  # values do not count
    assert a.digest == Fingerprint.from_json(json.loads(json.dumps(a.to_json()))).digest

    double = _expect(Net().double())
    assert double.digest != a.digest
    assert "network.value.bias: dtype float64 here, float32 in the checkpoint" in double.diff(a)

    extra = Net()
    extra.register_buffer("scale", torch.ones(2))
    assert _expect(extra).diff(a) == ["network.scale: [2] float32 only here"]
    two = Fingerprint.of({"network": Net().state_dict(), "target": Net().state_dict()}, BranchConfig())
    assert two.diff(a) == ["module target: only here"]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "missing"])
def test_missing_or_corrupt_file_names_the_file(tmp_path: Path, damage: str) -> None:
    weights = save_checkpoint(tmp_path / "ck", policy=_policy(Net()), branches=BranchConfig())
    data = weights.read_bytes()
    if damage == "truncate":
        weights.write_bytes(data[: len(data) - 100])
    elif damage == "garbage":
        weights.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not a safetensors header")
    else:
        weights.unlink()
    with pytest.raises(FoxhuntError) as info:
        load_checkpoint(tmp_path / "ck", expect=_expect(Net()))
    assert str(weights) in str(info.value)


def test_saves_leave_no_temp_files_and_a_failed_save_keeps_the_old_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(seed=1)
    for epoch in (1, 2):
        save_checkpoint(tmp_path / "ck", policy=_policy(net), branches=BranchConfig(), meta={"epoch": epoch})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.json", "ck.safetensors"]
    side = json.loads((tmp_path / "ck.json").read_text())
    assert side["meta"] == read_checkpoint_meta(tmp_path / "ck")
    assert side["meta"]["epoch"] == 2

    with pytest.raises(TypeError):  # refused before anything is written
        save_checkpoint(
            tmp_path / "ck",
            policy=_policy(Net(seed=2)),
            branches=BranchConfig(),
            meta={"epoch": 3, "bad": object()},
        )

    def crash_mid_write(tensors: object, filename: str, metadata: object) -> None:
        Path(filename).write_bytes(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint, "save_file", crash_mid_write)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(
            tmp_path / "ck", policy=_policy(Net(seed=2)), branches=BranchConfig(), meta={"epoch": 4}
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.json", "ck.safetensors"]
    monkeypatch.undo()
    into = Net(seed=7)
    assert _load_into(tmp_path / "ck.safetensors", into)["epoch"] == 2
    assert torch.equal(into.value.weight, net.value.weight)


@dataclass(frozen=True)
class Guard:
    """Stands in for the anomaly guard's result (foxhunt.train.guard.GuardResult)."""

    may_be_best: bool


CLEAN, FLAGGED = Guard(True), Guard(False)


def _contents(net: Net, **meta: object) -> CheckpointContents:
    return CheckpointContents(policy=_policy(net), branches=BranchConfig(), meta=meta)


def test_ring_keeps_the_newest_n(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, ring=2)
    for epoch in range(5):
        store.ring.save(0, epoch, _contents(Net(seed=epoch)))
    assert [p.name for p in store.ring.files(0)] == ["epoch0003.safetensors", "epoch0004.safetensors"]
    assert sorted(p.name for p in (store.paths.fold_dir(0) / "ring").iterdir()) == [
        "epoch0003.json",
        "epoch0003.safetensors",
        "epoch0004.json",
        "epoch0004.safetensors",
    ]
    assert store.ring.latest(0) == store.paths.ring(0, 4)
    into = Net(seed=9)
    latest = store.ring.latest(0)
    assert latest is not None
    meta = _load_into(latest, into)
    assert (meta["fold"], meta["epoch"]) == (0, 4)
    assert torch.equal(into.support, Net(seed=4).support)
    assert store.ring.latest(1) is None


def test_best_is_replaced_only_by_a_better_clean_metric(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, ring=3)
    assert store.best.metric(0) is None
    assert store.best.save(0, 0, _contents(Net(seed=0)), metric=1.0, verdict=CLEAN) is not None
    assert store.best.save(0, 1, _contents(Net(seed=1)), metric=0.5, verdict=CLEAN) is None
    assert store.best.save(0, 2, _contents(Net(seed=2)), metric=9.0, verdict=FLAGGED) is None
    assert store.best.save(0, 3, _contents(Net(seed=3)), metric=1.0, verdict=CLEAN) is None  # a tie
    assert store.best.save(0, 4, _contents(Net(seed=4)), metric=float("nan"), verdict=CLEAN) is None
    assert store.best.metric(0) == 1.0
    assert read_checkpoint_meta(store.paths.best(0))["epoch"] == 0

    assert store.best.save(0, 5, _contents(Net(seed=5)), metric=2.0, verdict=CLEAN) is not None
    into = Net(seed=0)
    meta = _load_into(store.paths.best(0), into)
    assert (meta["epoch"], meta["best_metric"], store.best.metric(0)) == (5, 2.0, 2.0)
    assert torch.equal(into.support, Net(seed=5).support)
    assert store.best.metric(1) is None  # folds are independent

    lower = CheckpointStore(tmp_path / "loss", ring=1, higher_is_better=False)
    lower.best.save(0, 0, _contents(Net()), metric=1.0, verdict=CLEAN)
    assert lower.best.save(0, 1, _contents(Net()), metric=2.0, verdict=CLEAN) is None
    assert lower.best.save(0, 2, _contents(Net()), metric=0.5, verdict=CLEAN) is not None
    assert lower.best.metric(0) == 0.5


def test_resume_point_is_the_last_fold_and_epoch_saved(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, ring=2)
    assert store.resume_point() is None
    for fold, epochs in ((0, 3), (1, 2)):
        for epoch in range(epochs):
            store.ring.save(fold, epoch, _contents(Net()))
            store.save_last(fold, epoch, _contents(Net()))
    assert store.resume_point() == ResumePoint(1, 1, store.paths.last(1))
    store.paths.last(1).write_bytes(b"\x00" * 3)  # an unreadable last falls back to the ring
    assert store.resume_point() == ResumePoint(1, 1, store.paths.ring(1, 1))


def _epochs(store: CheckpointStore, net: Net, history: list[int]) -> None:
    """Four epochs of saves as training makes them, the live net and meta changed after each save."""
    for epoch in range(4):
        contents = CheckpointContents(
            policy=_policy(net),
            branches=BranchConfig(),
            training={"learner": _policy(net), "step": torch.tensor(epoch)},
            meta={"history": history},
        )
        store.best.save(0, epoch, contents, metric=float(epoch % 3), verdict=CLEAN)
        store.save_epoch(0, epoch, contents)
        with torch.no_grad():  # the next epoch trains in place while the writer may still be writing
            for param in net.parameters():
                param.add_(1.0)
        history.append(epoch)


def test_background_writes_hold_the_state_of_the_save_call_and_equal_immediate_ones(tmp_path: Path) -> None:
    now, later = (
        CheckpointStore(tmp_path / "now", ring=2),
        CheckpointStore(tmp_path / "bg", ring=2, writes=Writes.BACKGROUND),
    )
    _epochs(now, Net(seed=1), [])
    _epochs(later, Net(seed=1), [])
    later.close()
    for a, b in ((now.paths.last(0), later.paths.last(0)), (now.paths.best(0), later.paths.best(0))):
        want = load_checkpoint(a, expect=_expect(Net()), training=True)
        got = load_checkpoint(b, expect=_expect(Net()), training=True)
        assert want.training is not None and got.training is not None
        for key, value in want.policy["network"].items():
            assert torch.equal(got.policy["network"][key], value), key
            assert torch.equal(got.training["learner"]["network"][key], value), key
        assert (got.meta["epoch"], got.meta["history"]) == (want.meta["epoch"], want.meta["history"])
        with safe_open(str(a), framework="pt") as fa, safe_open(str(b), framework="pt") as fb:
            assert sorted(fa.keys()) == sorted(fb.keys())  # shared storages still stored once
    # last is epoch 3 as it was when saved: the +1 after the save did not reach the file
    assert read_checkpoint_meta(later.paths.last(0))["history"] == [0, 1, 2]
    assert (read_checkpoint_meta(later.paths.best(0))["epoch"], later.best.metric(0)) == (2, 2.0)
    assert [p.name for p in later.ring.files(0)] == ["epoch0002.safetensors", "epoch0003.safetensors"]


def test_a_background_save_writes_the_state_at_the_call_not_at_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, save = threading.Event(), checkpoint.save_checkpoint

    def held_back(*args, **kwargs):  # the writer thread writes only once training has moved on
        assert gate.wait(timeout=30)
        return save(*args, **kwargs)

    monkeypatch.setattr(store_module, "save_checkpoint", held_back)
    store, net, history = CheckpointStore(tmp_path, ring=1, writes=Writes.BACKGROUND), Net(seed=2), [0]
    store.save_epoch(
        0, 0, CheckpointContents(policy=_policy(net), branches=BranchConfig(), meta={"h": history})
    )
    with torch.no_grad():
        net.value.weight.add_(1.0)
    history.append(1)
    gate.set()
    store.close()
    into = Net(seed=9)
    assert _load_into(store.paths.last(0), into)["h"] == [0]
    assert torch.equal(into.value.weight, Net(seed=2).value.weight)


def test_a_failed_background_write_raises_at_the_next_wait(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, ring=1, writes=Writes.BACKGROUND)
    store.paths.root.mkdir(parents=True)
    store.paths.fold_dir(0).write_text("a file where the fold's folder goes")
    store.save_epoch(0, 0, _contents(Net()))  # returns: the write fails on the writer thread
    with pytest.raises(OSError):
        store.wait()
    store.wait()  # reported once
    store.close()


def _draw(gens: dict) -> tuple:
    return (
        torch.rand(3),
        np.random.rand(3),
        random.random(),
        torch.rand(3, generator=gens["torch"]),
        gens["numpy"].random(3),
        gens["mt"].random(2),
    )


def _equal(a: tuple, b: tuple) -> bool:
    return all(
        torch.equal(x, y) if isinstance(x, torch.Tensor) else bool(np.array_equal(x, y))
        for x, y in zip(a, b, strict=True)
    )


def test_rng_capture_restore_through_a_checkpoint_reproduces_the_next_numbers(tmp_path: Path) -> None:
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    gens = {
        "torch": torch.Generator().manual_seed(4),
        "numpy": np.random.default_rng(5),
        "mt": np.random.Generator(np.random.MT19937(6)),
    }
    _draw(gens)  # move every stream away from its seed
    save_checkpoint(
        tmp_path / "ck", policy=_policy(Net()), branches=BranchConfig(), training=capture_rng(gens)
    )
    expected = _draw(gens)
    later = _draw(gens)
    assert not _equal(expected, later)

    extras = load_checkpoint(tmp_path / "ck", expect=_expect(Net()), training=True).training
    assert extras is not None
    assert all(t.dtype == torch.uint8 for t in extras.values())
    restore_rng(extras, gens)
    assert _equal(_draw(gens), expected)
    assert _equal(_draw(gens), later)
    with pytest.raises(FoxhuntError, match="other"):
        restore_rng(extras, {"other": torch.Generator()})
