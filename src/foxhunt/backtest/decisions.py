"""``decisions.csv``: one line per decided row, written by ``foxhunt backtest --checkpoint`` and by
``foxhunt serve``, so that the two can be compared row for row.

A line is the decision taken on row ``row`` (the state saw rows <= row) and what the environment's
step of that row made of it: each branch's picked action, the position held after the step (after
the row's order, the resting order against row + 1 and any plan exit at row + 1) and the step's
fills (signed contracts summed over the fill stages, and their contract-weighted price; empty when
nothing filled). ``ts_event`` is the row's ``ts`` column (foxhunt.features.cache).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable
from dataclasses import astuple, dataclass, fields
from pathlib import Path

import numpy as np
from torch import Tensor

from foxhunt.atomic import atomic_path
from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.rewards import BRANCHES


@dataclass(frozen=True)
class DecisionRow:
    ts_event: int
    row: int
    direction: int
    magnitude: int
    order_type: int
    urgency: int
    position_after: float
    fill_contracts: float
    fill_price: float  # NaN: nothing filled

    def as_csv(self) -> list[str]:
        return [
            "" if isinstance(v, float) and np.isnan(v) else repr(v) if isinstance(v, float) else str(v)
            for v in astuple(self)
        ]


HEADER = tuple(f.name for f in fields(DecisionRow))
assert HEADER[2:6] == BRANCHES, "decisions.csv names the action branches in BRANCHES order"


def step_rows(
    rows_N: Tensor, res: StepResult, position_N: Tensor, ts_of: Callable[[int], int]
) -> list[DecisionRow]:
    """The decision lines of one environment step: ``rows_N`` the rows stepped (before the step),
    ``position_N`` the positions after it; episodes that were not live write nothing."""
    live = res.written.cpu().numpy()
    rows = rows_N.cpu().numpy()
    picked = res.picked.cpu().numpy()
    pos = position_N.double().cpu().numpy()
    fills_NS = res.fills.double().cpu().numpy()
    price_NS = res.fill_price.double().cpu().numpy()
    out = []
    for i in np.flatnonzero(live):
        contracts = float(fills_NS[i].sum())
        size = np.abs(fills_NS[i])
        price = float((size * price_NS[i]).sum() / size.sum()) if size.sum() > 0 else float("nan")
        r = int(rows[i])
        out.append(DecisionRow(ts_of(r), r, *(int(a) for a in picked[i]), float(pos[i]), contracts, price))
    return out


class _Recording:
    """A decision that steps the env through the wrapped one and records the step's lines."""

    def __init__(self, inner: object, log: DecisionLog) -> None:
        self.inner, self.log = inner, log

    def step(self, env: TradingEnv) -> tuple[Tensor, StepResult]:
        rows = env._state().row.clone()
        if isinstance(self.inner, Tensor):
            obs, res = env.step(self.inner)
        else:
            obs, res = self.inner.step(env)  # type: ignore[attr-defined]
        self.log.rows.extend(step_rows(rows, res, env._state().position, self.log.ts_of))
        return obs, res


class DecisionLog:
    """Wraps a backtest policy so that every step it takes is recorded as decision lines."""

    def __init__(self, ts: np.ndarray) -> None:
        self._ts = ts
        self.rows: list[DecisionRow] = []

    def ts_of(self, row: int) -> int:
        return int(self._ts[row])

    def wrap(
        self, policy: Callable[[Tensor, TradingEnv], object]
    ) -> Callable[[Tensor, TradingEnv], _Recording]:
        return lambda obs, env: _Recording(policy(obs, env), self)


def write_decisions_csv(path: str | Path, rows: Iterable[DecisionRow]) -> Path:
    """Write the lines sorted by row (the backtest steps its windows side by side)."""
    ordered = sorted(rows, key=lambda d: d.row)
    with atomic_path(Path(path)) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(HEADER)
        w.writerows(d.as_csv() for d in ordered)
    return Path(path)


def read_decisions_csv(path: str | Path) -> list[DecisionRow]:
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        head = next(reader)
        if tuple(head) != HEADER:
            raise ValueError(f"{path}: not a decisions.csv (header {head})")
        out = []
        for line in reader:
            ts, row, d, m, o, u, pos, fc, fp = line
            out.append(
                DecisionRow(
                    int(ts), int(row), int(d), int(m), int(o), int(u), float(pos), float(fc),
                    float(fp) if fp else float("nan"),
                )
            )
    return out

