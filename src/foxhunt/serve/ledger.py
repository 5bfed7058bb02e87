"""The paper ledger: decisions, fills, PnL, faults and the service's resumable state in SQLite.

Write-ahead logging (``journal_mode=WAL``, ``synchronous=NORMAL``): a transaction is in the log when its
commit returns, and a process killed at any moment leaves the database at its last commit. Each row
close is one transaction: the decision line of the row just stepped, its fills, the portfolio state
after it and the decision taken on the new row (see :mod:`foxhunt.serve.service`). After a kill -9
the service reopens the ledger and continues from that commit: a fill is either in it with the state
that follows from it, or in neither, so none is lost or booked twice.
"""

from __future__ import annotations

import io
import pickle
import sqlite3
import time
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
    return torch.from_numpy(array)


class _Pickler(pickle.Pickler):
    """Pickles tensors as their numpy arrays: a row's resume state is a few dozen one-element
    tensors, which ``torch.save`` (a zip archive) writes in about 10 ms and this in under 1 ms."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return _tensor, (obj.detach().cpu().numpy(),)
        return NotImplemented


def _blob(obj: Any) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


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
        """One row close, atomically: the stepped row's line and fills, the new row, the resume state."""
        blob = _blob(state)
        cur = self.db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            if line is not None and pnl is not None:
                cur.execute(
                    _INSERT_DECISION,
                    (*_values(line), *pnl, forced, time.time(), latency_us),
                )
                cur.executemany(
                    "INSERT INTO fills VALUES (?, ?, ?, ?, ?)", [(line.row, *f) for f in fills]
                )
            cur.execute(
                "INSERT OR REPLACE INTO rows VALUES (?, ?, ?)",
                (row, ts, np.ascontiguousarray(features, np.float32).tobytes()),
            )
            cur.execute("INSERT OR REPLACE INTO resume VALUES (1, ?, ?, ?)", (row, records, blob))
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise

    def fault(self, event: FaultEvent) -> None:
        self.db.execute(
            "INSERT INTO faults (wall, ts_event, kind, detail) VALUES (?, ?, ?, ?)",
            (time.time(), event.ts_event, event.kind.value, event.detail),
        )

    def resume(self) -> tuple[int, int, dict[str, Any]] | None:
        """``(last row closed, records consumed, state)`` of the last commit, or None for a new ledger."""
        got = self.db.execute("SELECT row, records, state FROM resume WHERE id = 1").fetchone()
        if got is None:
            return None
        return int(got[0]), int(got[1]), pickle.loads(got[2])  # our own file: written by _blob

    def decisions(self, since: int = -1) -> list[DecisionRow]:
        cur = self.db.execute(
            f"SELECT {', '.join(HEADER)} FROM decisions WHERE row > ? ORDER BY row", (since,)
        )
        return [
            DecisionRow(int(t), int(r), int(d), int(m), int(o), int(u), float(p), float(c),
                        float("nan") if f is None else float(f))
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
