"""The ledger's resume state (foxhunt.serve.ledger): written at every row close, read after a restart.
The kill -9 guarantees themselves are tests/serve/test_serve.py's restart tests."""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

from foxhunt.agent.actor import Mode
from foxhunt.backtest.decisions import DecisionRow
from foxhunt.env.core import TradingEnv
from foxhunt.serve import ledger
from foxhunt.serve.ledger import Ledger
from tests.serve.test_decide import ENV as ENV_CFG
from tests.serve.test_decide import START, _agent, _episode, _market, _rows


def _state() -> dict[str, Any]:
    """A resume state as the service snapshots it (RowCloser.snapshot) after a few decided closes: the
    portfolio (float64, int64 and bool tensors, the CVaR ring [1, window]), the aux predictions, the
    pending decision (a PolicyOut), Python numbers and strings."""
    env = TradingEnv(_rows(_market(), START + 6), ENV_CFG)
    _episode(env, START)
    agent = _agent()
    for _ in range(4):
        decision = agent.policy(env.observe(), Mode.GREEDY)
        decision.step(env)
    return {
        "portfolio": env.state,
        "aux": env.aux,
        "pending": agent.policy(env.observe(), Mode.GREEDY),
        "pending_forced": "",
        "episode_end": START + 39,
        "rows_done": START + 5,
        "faulted_until": -1,
    }


def _tensors(obj: Any) -> list[Tensor]:
    """Every tensor of the state, in a fixed order."""
    if isinstance(obj, Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, (tuple, list)):
        return [t for v in obj for t in _tensors(v)]
    if hasattr(obj, "__dataclass_fields__"):
        return [t for name in obj.__dataclass_fields__ for t in _tensors(getattr(obj, name))]
    return []


def _same(a: Tensor, b: Tensor) -> bool:
    """Equal dtype, shape and bits (NaN equal to NaN)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    nan_equal = a.is_floating_point() and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)
    return torch.equal(a, b) or nan_equal


def test_the_resume_state_comes_back_bit_for_bit_each_tensor_in_its_own_storage() -> None:
    """Every tensor of the state comes back with its dtype, shape and bits; the Python values and the
    structure as they were; a tensor met twice one tensor again; every other tensor in a storage of
    its own (the compiled step writes the state's tensors in place)."""
    state = _state()
    state["aux_again"] = state["aux"]  # one tensor met twice
    got = ledger._load(ledger._blob(state))
    want_t, got_t = _tensors(state), _tensors(got)
    assert len(want_t) == len(got_t) > 50
    assert {t.dtype for t in want_t} >= {torch.float64, torch.int64, torch.bool, torch.float32}
    assert [i for i, (a, b) in enumerate(zip(want_t, got_t, strict=True)) if not _same(a, b)] == []
    assert type(got["portfolio"]) is type(state["portfolio"])
    assert type(got["pending"]) is type(state["pending"])
    assert {k: v for k, v in got.items() if not _tensors(v)} == {
        k: v for k, v in state.items() if not _tensors(v)
    }
    assert got["aux_again"] is got["aux"]
    distinct = {id(t): t for t in got_t}.values()
    assert len({t.untyped_storage().data_ptr() for t in distinct}) == len(distinct)


def test_a_row_close_copies_the_state_to_the_host_once_per_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ~60 tensors of a resume state are packed into one buffer per dtype: one host copy each
    (4 here), not one per tensor (each tensor pickled as its numpy array was ~10 us, most of a
    commit)."""
    state = _state()
    copies: list[int] = []
    numpy = torch.Tensor.numpy
    monkeypatch.setattr(torch.Tensor, "numpy", lambda t, *a, **k: copies.append(1) or numpy(t, *a, **k))
    ledger._blob(state)
    assert len(_tensors(state)) > 50
    assert len(copies) == len({t.dtype for t in _tensors(state)}) == 4


def test_a_state_written_by_the_older_ledger_still_resumes() -> None:
    """A ledger written before the packed format (each tensor pickled as ``(_tensor, (array,))``)
    resumes as it was written."""

    class Older(pickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, torch.Tensor):
                return ledger._tensor, (obj.detach().cpu().numpy(),)
            return NotImplemented

    state = _state()
    buf = io.BytesIO()
    Older(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(state)
    got = ledger._load(buf.getvalue())
    assert all(_same(a, b) for a, b in zip(_tensors(state), _tensors(got), strict=True))
    assert got["rows_done"] == state["rows_done"]


def test_an_account_written_before_it_kept_its_losses_resumes() -> None:
    """A resume state whose account predates ``n_losses`` (Kelly's odds once took every trade that was
    not a win as a loss) resumes with those losses: ``n_trades - n_wins``."""
    state = _state()
    account = state["portfolio"].account
    account.n_trades, account.n_wins = torch.tensor([5]), torch.tensor([2])
    del account.__dict__["n_losses"]  # as the older foxhunt pickled it
    got = ledger._load(ledger._blob(state))["portfolio"].account
    assert (got.n_trades.item(), got.n_wins.item(), got.n_losses.item()) == (5, 2, 3)


def test_a_state_written_before_the_ledger_kept_entries_resumes() -> None:
    """A resume state whose open trade predates its entry's order type, urgency and entry costs, and
    whose resting order predates its order type, resumes: the entry unknown (-1), the open trade's
    costs so far its entry costs."""
    state = _state()
    portfolio = state["portfolio"]
    trade = portfolio.trade._replace(costs=torch.full_like(portfolio.trade.costs, 3.5))
    old = type(trade)(*trade[:9])  # as the older foxhunt pickled it: nine fields
    portfolio.trade = old
    del portfolio.order.__dict__["order_type"]
    got = ledger._load(ledger._blob(state))["portfolio"]
    assert (got.trade.order_type == -1).all() and (got.trade.urgency == -1).all()
    assert torch.equal(got.trade.entry_costs, got.trade.costs) and (got.order.order_type == -1).all()


def test_the_last_commit_is_what_a_reopened_ledger_resumes_from(tmp_path: Path) -> None:
    """Two row closes committed, the ledger closed and opened again (a restart): it resumes from the
    second close's row, record count and state."""
    path = tmp_path / "ledger.sqlite"
    led = Ledger(path)
    states = [_state(), _state()]
    states[1]["rows_done"] = 99
    for r, state in enumerate(states):
        line = DecisionRow(1_000 + r, r, 2, 1, 0, 0, float(r), 1.0, 100.25)
        led.commit_row(
            line=line, pnl=(1.0, 0.5, 0.5, 1e5), fills=[(0, 1.0, 100.25, 0.5)], forced="", latency_us=1.0,
            row=r, ts=1_000 + r, features=np.ones(3, np.float32), records=10 * (r + 1), state=state,
        )
    led.close()
    row, records, got = Ledger(path).resume()  # type: ignore[misc]
    assert (row, records, got["rows_done"]) == (1, 20, 99)
    assert all(_same(a, b) for a, b in zip(_tensors(states[1]), _tensors(got), strict=True))


def _commit(led: Ledger, r: int, state: dict) -> None:
    line = DecisionRow(1_000 + r, r, 2, 1, 0, 0, float(r), 1.0, 100.25)
    led.commit_row(
        line=line, pnl=(1.0, 0.5, 0.5, 1e5), fills=[(0, 1.0, 100.25, 0.5)], forced="", latency_us=1.0,
        row=r, ts=1_000 + r, features=np.ones(3, np.float32), records=10 * (r + 1), state=state,
    )  # fmt: skip


def test_a_close_of_many_rows_commits_all_or_none_with_the_last_rows_resume_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Ledger.rows()``: the rows committed inside are one transaction. A failure in the middle (a
    crash) leaves none of them, and the ledger resumes from the close before; a close that ends writes
    every row's line and the last row's resume point and state, packed once."""
    path = tmp_path / "ledger.sqlite"
    led = Ledger(path)
    first = _state()
    _commit(led, 0, first)  # a close of one row, alone
    packed = []
    blob = ledger._blob
    monkeypatch.setattr(ledger, "_blob", lambda s: packed.append(s) or blob(s))

    def killed() -> None:
        with led.rows():
            _commit(led, 1, _state())
            raise RuntimeError("killed between two rows of one close")

    with pytest.raises(RuntimeError):
        killed()
    assert [d.row for d in led.decisions()] == [0] and led.resume()[:2] == (0, 10)  # type: ignore[index]
    states = [_state() for _ in range(3)]
    states[-1]["rows_done"] = 42
    with led.rows():
        for r, state in enumerate(states, start=1):
            _commit(led, r, state)
    assert packed == [states[-1]]  # the resume state packed once, the last row's
    led.close()
    again = Ledger(path)
    assert [d.row for d in again.decisions()] == [0, 1, 2, 3] and sorted(again.features()) == [0, 1, 2, 3]
    row, records, got = again.resume()  # type: ignore[misc]
    assert (row, records, got["rows_done"]) == (3, 40, 42)
