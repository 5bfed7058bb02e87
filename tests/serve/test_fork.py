"""foxhunt.serve.fork: a fork changes without changing its original (what a close made ahead and then
dropped relies on: serve.ahead). The service-level invariant (closes made ahead decide and compute
as closes made when due) is in tests/serve/test_serve.py."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
import torch

from foxhunt.serve.buffers import Appended, Grown
from foxhunt.serve.fork import fork
from foxhunt.serve.state import _RowBuffers


@dataclasses.dataclass
class _Two:
    a: np.ndarray
    b: np.ndarray


def _part(values: list[float]) -> _Two:
    x = np.array(values)
    return _Two(x, -x)


def test_a_forked_appended_writes_below_its_original_rows_into_storage_of_its_own() -> None:
    orig = Appended()
    orig.append(_part([1.0, 2.0, 3.0]))
    twin = fork(orig)
    twin.append(_part([4.0]))  # past the shared rows: into the shared storage
    assert orig.rows().a.tolist() == [1.0, 2.0, 3.0] and twin.rows().a.tolist() == [1.0, 2.0, 3.0, 4.0]
    twin.truncate(1)
    twin.append(_part([9.0, 8.0]))  # over rows the original holds: copied first
    assert twin.rows().a.tolist() == [1.0, 9.0, 8.0] and twin.rows().b.tolist() == [-1.0, -9.0, -8.0]
    assert orig.rows().a.tolist() == [1.0, 2.0, 3.0] and orig.rows().b.tolist() == [-1.0, -2.0, -3.0]
    assert twin.buffers["a"] is not orig.buffers["a"]


def test_a_forked_grown_appends_past_its_original() -> None:
    orig = Grown(np.int64)
    orig.append(np.arange(3))
    twin = fork(orig)
    twin.append(np.array([7]))
    assert orig.rows().tolist() == [0, 1, 2] and twin.rows().tolist() == [0, 1, 2, 7]


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_a_forked_row_buffer_rewrites_the_last_row_without_touching_the_original(kind: str) -> None:
    """A close rewrites the session's last row (its look-ahead aux target) and appends the new one."""

    def arr(v: list[float]):  # noqa: ANN202
        return np.array(v) if kind == "numpy" else torch.tensor(v)

    orig = _RowBuffers()
    orig.write(0, {"x": arr([1.0, 2.0, 3.0]), "y": arr([5.0, 6.0, 7.0])})
    twin = fork(orig)
    twin.write(3, {"y": arr([8.0])})  # past the shared rows: the storage stays shared
    twin.write(2, {"x": arr([30.0, 40.0])})  # the last row again: copied first
    assert list(twin.rows("x")) == [1.0, 2.0, 30.0, 40.0] and list(twin.rows("y")) == [5.0, 6.0, 7.0, 8.0]
    assert list(orig.rows("x")) == [1.0, 2.0, 3.0] and list(orig.rows("y")) == [5.0, 6.0, 7.0]
    assert twin.buffers["y"] is orig.buffers["y"] and twin.buffers["x"] is not orig.buffers["x"]


def test_fork_copies_what_can_be_written_and_shares_what_cannot() -> None:
    written = np.zeros(3)
    read_only = np.arange(4.0)
    read_only.flags.writeable = False
    t = torch.zeros(2)
    x = {"carry": [written, written], "view": read_only, "tensor": t, "n": 3, "bytes": bytearray(b"ab")}
    y = fork(x)
    assert y["carry"][0] is not written and y["carry"][0] is y["carry"][1]  # once, as in the original
    assert y["view"] is read_only and y["tensor"] is t and y["bytes"] == x["bytes"]
    y["carry"][0][0] = 1.0
    y["bytes"].append(99)
    assert written[0] == 0.0 and x["bytes"] == bytearray(b"ab")


def test_fork_refuses_what_it_does_not_know_unless_shared_in_memo() -> None:
    lock = threading.Lock()
    with pytest.raises(TypeError, match="cannot fork a _thread.lock"):
        fork({"lock": lock})
    assert fork({"lock": lock}, {id(lock): lock})["lock"] is lock
