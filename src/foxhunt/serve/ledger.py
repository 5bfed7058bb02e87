"""The paper ledger: decisions, fills, PnL, faults and the service's resumable state in SQLite.

Write-ahead logging (``journal_mode=WAL``, ``synchronous=NORMAL``): a transaction is in the log when its
commit returns, and a process killed at any moment leaves the database at its last commit. Each row
close is one transaction (:meth:`Ledger.rows`): for each row it makes, the decision line of the row
just stepped and its fills, and after its last row the portfolio state and the decision taken on it
(see :mod:`foxhunt.serve.close`). After a kill -9
the service reopens the ledger and continues from that commit: a fill is either in it with the state
that follows from it, or in neither, so none is lost or booked twice.
"""

from __future__ import annotations

import contextlib
import copyreg
import io
import math
import pickle
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foxhunt.backtest.decisions import HEADER, DecisionRow
from foxhunt.serve.monitor import FaultEvent

_SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    row INTEGER PRIMARY KEY, ts_event INTEGER, direction INTEGER, magnitude INTEGER, order_type INTEGER,
    urgency INTEGER, position_after REAL, fill_contracts REAL, fill_price REAL,
    gross REAL, costs REAL, net REAL, equity REAL, forced TEXT, decided_wall REAL, latency_us REAL
);
CREATE TABLE IF NOT EXISTS fills (
    row INTEGER, stage INTEGER, contracts REAL, price REAL, costs REAL, PRIMARY KEY (row, stage)
);
CREATE TABLE IF NOT EXISTS faults (
    id INTEGER PRIMARY KEY AUTOINCREMENT, wall REAL, ts_event INTEGER, kind TEXT, detail TEXT
);
CREATE TABLE IF NOT EXISTS rows (row INTEGER PRIMARY KEY, ts INTEGER, features BLOB);
CREATE TABLE IF NOT EXISTS resume (
    id INTEGER PRIMARY KEY CHECK (id = 1), row INTEGER, records INTEGER, state BLOB
);
"""


_COLUMNS = (*HEADER, "gross", "costs", "net", "equity", "forced", "decided_wall", "latency_us")
_INSERT_DECISION = f"INSERT INTO decisions ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"


def _tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor of a state written before the packed format (:func:`_blob`): one array per tensor."""
    return torch.from_numpy(array)


_PACKED = "foxhunt.serve.ledger.packed/1"  # the first item of a packed state (:func:`_blob`)


def _packed(name: str, offset: int, shape: tuple[int, ...]) -> torch.Tensor:
    """A tensor's place in a packed state (:func:`_blob`); :class:`_Unpickler` resolves it."""
    raise pickle.UnpicklingError("a packed ledger state is read by foxhunt.serve.ledger._load")


class _Pickler(pickle.Pickler):
    """Pickles the state's structure with each tensor replaced by its place (dtype, offset, shape) in
    one flat buffer per dtype, ``groups``. Tensors go through the dispatch table, which pickle looks
    up in C for tensors alone (a ``persistent_id`` or ``reducer_override`` is a Python call for every
    object), and pickle's memo keeps a tensor met twice one tensor."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.dispatch_table = {**copyreg.dispatch_table, torch.Tensor: self._place}
        self.groups: dict[str, list[torch.Tensor]] = {}
        self._sizes: dict[str, int] = {}

    def _place(self, t: torch.Tensor) -> tuple:
        name = _dtype_name(t.dtype)
        offset = self._sizes.get(name, 0)
        self._sizes[name] = offset + t.numel()
        # most are [1]: a reshape each would be a third of the cost
        self.groups.setdefault(name, []).append(t if t.dim() == 1 else t.reshape(-1))
        return _packed, (name, offset, tuple(t.shape))


class _Unpickler(pickle.Unpickler):
    """Reads :class:`_Pickler`'s structure; each tensor a copy of its slice of ``flats`` (its own
    storage: the compiled step writes the state's tensors in place)."""

    def __init__(self, file: io.BytesIO, flats: dict[str, torch.Tensor]) -> None:
        super().__init__(file)
        self.flats = flats

    def find_class(self, module: str, name: str) -> Any:
        if module == __name__ and name == _packed.__name__:
            return self._tensor
        return super().find_class(module, name)

    def _tensor(self, name: str, offset: int, shape: tuple[int, ...]) -> torch.Tensor:
        return self.flats[name][offset : offset + math.prod(shape)].reshape(shape).clone()


def _blob(obj: Any) -> bytes:
    """``obj`` (the resume state: ~60 one-element tensors in dataclasses) as bytes: its structure
    pickled with the tensors left out, and their values packed into one buffer per dtype (one ``cat``
    and one host copy each). Pickling each tensor as its numpy array cost ~10 us a tensor, most of a
    row close's commit."""
    buf = io.BytesIO()
    pickler = _Pickler(buf)
    pickler.dump(obj)
    with torch.no_grad():  # a tensor that requires grad packs as its values
        packed = {
            name: torch.cat(ts).cpu().view(torch.uint8).numpy().tobytes()
            for name, ts in pickler.groups.items()
        }
    return pickle.dumps((_PACKED, buf.getvalue(), packed), protocol=pickle.HIGHEST_PROTOCOL)


def _load(blob: bytes) -> Any:
    """The object :func:`_blob` wrote. A state of an older ledger (tensors pickled one by one as
    numpy arrays, :func:`_tensor`) loads as it was written."""
    got = pickle.loads(blob)  # our own file: written by _blob
    if not (isinstance(got, tuple) and len(got) == 3 and got[0] == _PACKED):
        return got
    _, structure, packed = got
    flats = {
        name: torch.frombuffer(bytearray(b), dtype=torch.uint8).view(getattr(torch, name))
        if b
        else torch.empty(0, dtype=getattr(torch, name))
        for name, b in packed.items()
    }
    return _Unpickler(io.BytesIO(structure), flats).load()


_DTYPE_NAMES: dict[torch.dtype, str] = {}


def _dtype_name(dtype: torch.dtype) -> str:
    """``torch.float64`` -> ``"float64"`` (``getattr(torch, name)`` is the dtype again)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


class Ledger:
    """One SQLite file under ``--out`` (module docs)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.db = sqlite3.connect(self.path, isolation_level=None)  # explicit BEGIN/COMMIT below
        self.db.execute("PRAGMA journal_mode=WAL")
        # In WAL mode NORMAL keeps every committed transaction through a crash of the process (kill -9);
        # only a power loss may roll back the last ones (FULL would fsync the log at every commit).
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)
        self._open: tuple | None = None  # inside rows(): () or the last row's (row, records, state)
        self._begun = False  # inside rows(): whether its transaction has begun (_begin)

    def commit_row(
        self,
        *,
        line: DecisionRow | None,
        pnl: tuple[float, float, float, float] | None,
        fills: list[tuple[int, float, float, float]],
        forced: str,
        latency_us: float,
        row: int,
        ts: int,
        features: np.ndarray,
        records: int,
        state: dict[str, Any],
    ) -> None:
        """One row, atomically: the stepped row's line and fills, the new row, the resume state (inside
        :meth:`rows`, part of its transaction, which writes the last row's resume state)."""
        if self._open is not None:
            self._begin()
            self._insert(self.db.cursor(), line, pnl, fills, forced, latency_us, row, ts, features)
            self._open = (row, records, state)
            return
        blob = _blob(state)
        cur = self.db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            self._insert(cur, line, pnl, fills, forced, latency_us, row, ts, features)
            cur.execute("INSERT OR REPLACE INTO resume VALUES (1, ?, ?, ?)", (row, records, blob))
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def rows(self) -> Iterator[None]:
        """The rows of one close, committed in one transaction: their lines, fills and features, and
        the resume state of the last (a crash loses all of them or none, and a restart makes them again
        from the records before the first). One row's commit is then one transaction as alone; a close
        of many rows (catch-up, foxhunt.serve.config.CloseMode) writes its resume state once."""
        assert self._open is None, "one close at a time"
        self._open, self._begun = (), False
        try:
            yield
            if self._open:
                row, records, state = self._open
                resume = (row, records, _blob(state))
                self.db.execute("INSERT OR REPLACE INTO resume VALUES (1, ?, ?, ?)", resume)
            if self._begun:
                self.db.execute("COMMIT")
        except BaseException:
            if self._begun:
                self.db.execute("ROLLBACK")
            raise
        finally:
            self._open, self._begun = None, False

    def _begin(self) -> None:
        """Inside :meth:`rows`, its transaction begun at its first write, not at its start: a close
        made ahead is published (its decision out) before the ledger is touched (BEGIN IMMEDIATE
        takes the write lock: ~50 us)."""
        if self._open is not None and not self._begun:
            self.db.execute("BEGIN IMMEDIATE")
            self._begun = True

    def _insert(
        self,
        cur: sqlite3.Cursor,
        line: DecisionRow | None,
        pnl: tuple[float, float, float, float] | None,
        fills: list[tuple[int, float, float, float]],
        forced: str,
        latency_us: float,
        row: int,
        ts: int,
        features: np.ndarray,
    ) -> None:
        if line is not None and pnl is not None:
            cur.execute(_INSERT_DECISION, (*_values(line), *pnl, forced, time.time(), latency_us))
            cur.executemany("INSERT INTO fills VALUES (?, ?, ?, ?, ?)", [(line.row, *f) for f in fills])
        features = np.ascontiguousarray(features, np.float32)
        cur.execute("INSERT OR REPLACE INTO rows VALUES (?, ?, ?)", (row, ts, features.tobytes()))

    def fault(self, event: FaultEvent) -> None:
        self._begin()  # inside rows(): part of its transaction (a restart logs it again otherwise)
        self.db.execute(
            "INSERT INTO faults (wall, ts_event, kind, detail) VALUES (?, ?, ?, ?)",
            (time.time(), event.ts_event, event.kind.value, event.detail),
        )

    def resume(self) -> tuple[int, int, dict[str, Any]] | None:
        """``(last row closed, records consumed, state)`` of the last commit, or None for a new ledger."""
        got = self.db.execute("SELECT row, records, state FROM resume WHERE id = 1").fetchone()
        if got is None:
            return None
        return int(got[0]), int(got[1]), _load(got[2])

    def decisions(self, since: int = -1) -> list[DecisionRow]:
        cur = self.db.execute(
            f"SELECT {', '.join(HEADER)} FROM decisions WHERE row > ? ORDER BY row", (since,)
        )
        return [
            DecisionRow(
                int(t),
                int(r),
                int(d),
                int(m),
                int(o),
                int(u),
                float(p),
                float(c),
                float("nan") if f is None else float(f),
            )
            for t, r, d, m, o, u, p, c, f in cur.fetchall()
        ]

    def features(self) -> dict[int, np.ndarray]:
        got = self.db.execute("SELECT row, features FROM rows")
        return {int(r): np.frombuffer(b, np.float32) for r, b in got}

    def faults(self) -> list[tuple[str, str]]:
        return [(k, d) for k, d in self.db.execute("SELECT kind, detail FROM faults ORDER BY id")]

    def summary(self) -> dict[str, Any]:
        n, net = self.db.execute("SELECT COUNT(*), COALESCE(SUM(net), 0) FROM decisions").fetchone()
        last = self.db.execute(
            "SELECT row, position_after, equity FROM decisions ORDER BY row DESC LIMIT 1"
        ).fetchone()
        return {
            "decisions": int(n),
            "net_pnl": float(net),
            "last_row": None if last is None else int(last[0]),
            "position": 0.0 if last is None else float(last[1]),
            "equity": None if last is None else float(last[2]),
            "faults": int(self.db.execute("SELECT COUNT(*) FROM faults").fetchone()[0]),
        }

    def close(self) -> None:
        self.db.close()


def _values(line: DecisionRow) -> tuple:
    """The line's fields in HEADER order, NaN (nothing filled) as NULL."""
    values = (getattr(line, name) for name in HEADER)
    return tuple(None if isinstance(v, float) and np.isnan(v) else v for v in values)
