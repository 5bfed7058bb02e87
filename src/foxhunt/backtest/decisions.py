"""``decisions.csv``: one line per decided row, written by ``foxhunt backtest --checkpoint`` and by
``foxhunt serve``, so that the two can be compared row for row.

A line is the decision taken on row ``row`` (the state saw rows <= row) and what the environment's
step of that row made of it: each branch's picked action, the position held after the step (after
the row's order, the resting order against row + 1 and any plan exit at row + 1) and the step's
fills (signed contracts summed over the fill stages, and their contract-weighted price; empty when
nothing filled). Each action code is followed by its name (``direction, direction_label, ...``).
``ts_event`` is the row's ``ts`` column (foxhunt.dataset.cache).

The backtest builds its lines from the evaluation's record (:class:`DecisionRecord`, written by the
fused step on the device and read back once after the run); serve builds each step's line as it
steps (:func:`step_rows`). Both go through one formula (:func:`_lines`), so they compare bit for bit.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from foxhunt.atomic import atomic_path
from foxhunt.backtest.metrics import StepRecord
from foxhunt.domain.actions import BRANCHES, ActionCodec, BranchConfig
from foxhunt.env.core import StepResult
from foxhunt.env.trades import STAGES


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
            for v in (getattr(self, k) for k in HEADER)  # flat fields: no astuple's deep copy
        ]


HEADER = tuple(f.name for f in fields(DecisionRow))
assert HEADER[2:6] == BRANCHES, "decisions.csv names the action branches in BRANCHES order"


def _lines(
    live: np.ndarray,
    rows: np.ndarray,
    picked: np.ndarray,
    pos: np.ndarray,
    fills_NS: np.ndarray,
    price_NS: np.ndarray,
    ts_of: Callable[[int], int],
) -> list[DecisionRow]:
    """The lines of the live entries of host arrays over N decisions: the one formula of a line
    (fills summed over the stages, their contract-weighted price), for serve's step and the record."""
    out = []
    for i in np.flatnonzero(live):
        contracts = float(fills_NS[i].sum())
        size = np.abs(fills_NS[i])
        price = float((size * price_NS[i]).sum() / size.sum()) if size.sum() > 0 else float("nan")
        r = int(rows[i])
        out.append(DecisionRow(ts_of(r), r, *(int(a) for a in picked[i]), float(pos[i]), contracts, price))
    return out


def step_rows(
    rows_N: Tensor, res: StepResult, position_N: Tensor, ts_of: Callable[[int], int]
) -> list[DecisionRow]:
    """The decision lines of one environment step: ``rows_N`` the rows stepped (before the step),
    ``position_N`` the positions after it; episodes that were not live write nothing."""
    return _lines(
        res.written.cpu().numpy(),
        rows_N.cpu().numpy(),
        res.picked.cpu().numpy(),
        position_N.double().cpu().numpy(),
        res.fills.double().cpu().numpy(),
        res.fill_price.double().cpu().numpy(),
        ts_of,
    )


@dataclass(frozen=True)
class DecisionRecord:
    """What decisions.csv needs beyond the evaluation's :class:`StepRecord` (which holds ``written``,
    the picked actions and the position after each step), in preallocated ``[E, T(, S)]`` device
    buffers written by the fused evaluation step at a device-side step index (no host read per
    step, so the write is captured with the step in a CUDA graph): the row each step decided and
    its fills per fill stage (signed contracts and price, float64 as :func:`step_rows` reads them).
    """

    row: Tensor  # int64 [E, T]: the row stepped (the state's row before the step)
    fills: Tensor  # float64 [E, T, S]: signed contracts filled per stage
    fill_price: Tensor  # float64 [E, T, S]: their prices

    @classmethod
    def blank(cls, n_episodes: int, n_steps: int, device: torch.device | str) -> DecisionRecord:
        f64 = torch.float64
        return cls(
            row=torch.zeros(n_episodes, n_steps, dtype=torch.int64, device=device),
            fills=torch.zeros(n_episodes, n_steps, STAGES, dtype=f64, device=device),
            fill_price=torch.zeros(n_episodes, n_steps, STAGES, dtype=f64, device=device),
        )

    def write(self, t: Tensor, rows_N: Tensor, res: StepResult) -> None:
        """Column ``t`` (a ``[1]`` int64 device index): ``rows_N`` the rows stepped, ``res`` the step."""
        for dst, src in ((self.row, rows_N), (self.fills, res.fills), (self.fill_price, res.fill_price)):
            dst.index_copy_(1, t, src.unsqueeze(1).to(dst.dtype))

    def lines(self, rec: StepRecord, ts_of: Callable[[int], int]) -> list[DecisionRow]:
        """Every written step's line, copied to the host once; in step-major order (step 0 of every
        episode, then step 1, ...), as a step-by-step log would list them."""
        picked = torch.stack(
            [rec.picked_direction, rec.picked_magnitude, rec.picked_order, rec.picked_urgency], dim=-1
        )  # [E, T, 4] in BRANCHES order (HEADER asserts it)

        def host(x: Tensor) -> np.ndarray:  # [E, T, ...] -> [T * E, ...], step-major
            return x.transpose(0, 1).reshape(-1, *x.shape[2:]).cpu().numpy()

        return _lines(
            host(rec.written),
            host(self.row),
            host(picked),
            host(rec.position.double()),
            host(self.fills),
            host(self.fill_price),
            ts_of,
        )


LABEL_SUFFIX = "_label"
CSV_HEADER = tuple(c for k in HEADER for c in ((k, k + LABEL_SUFFIX) if k in BRANCHES else (k,)))
"""decisions.csv's columns: :data:`HEADER` with each action code followed by its name
(``direction, direction_label, magnitude, magnitude_label, ...``): the codes compare bit for bit,
the names are for a person (``Long``, ``0.5x``, ``Market``, ``Normal``)."""


def write_decisions_csv(path: str | Path, rows: Iterable[DecisionRow], branches: BranchConfig) -> Path:
    """Write the lines sorted by row (the backtest steps its windows side by side), every action
    code beside its name under ``branches`` (:meth:`ActionCodec.value_labels`: the magnitudes' fractions
    are the config's)."""
    names = ActionCodec(branches).value_labels()
    ordered = sorted(rows, key=lambda d: d.row)

    def cells(d: DecisionRow) -> list[str]:
        out = []
        for k, v in zip(HEADER, d.as_csv(), strict=True):
            out.append(v)
            if k in BRANCHES:
                code = getattr(d, k)
                out.append(names[k][code] if 0 <= code < len(names[k]) else "")
        return out

    with atomic_path(Path(path)) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_HEADER)
        w.writerows(cells(d) for d in ordered)
    return Path(path)


def read_decisions_csv(path: str | Path) -> list[DecisionRow]:
    """The lines of a decisions.csv (with or without the label columns; the codes are what is read)."""
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        head = tuple(reader.fieldnames or ())
        if head not in (HEADER, CSV_HEADER):
            raise ValueError(f"{path}: not a decisions.csv (header {list(head)})")
        out = []
        for line in reader:
            ts, row, d, m, o, u, pos, fc, fp = (line[k] for k in HEADER)
            out.append(
                DecisionRow(
                    int(ts),
                    int(row),
                    int(d),
                    int(m),
                    int(o),
                    int(u),
                    float(pos),
                    float(fc),
                    float(fp) if fp else float("nan"),
                )
            )
    return out
