"""Per-epoch diagnostics (docs/design.md §7): accumulated on the device, read back once per epoch, written to
TensorBoard, a JSON-lines history and one console line.

Key names
---------
A statistic is named ``<group>/<name>``; the group is its TensorBoard section (:class:`BoardSection`). The
names below are the ones the guard, the plateau detector and :func:`console_line` read; learners
and collectors may add any others::

    loss/total, loss/<component>          mean-reduced losses (the guard watches loss/total)
    grad/total, grad/<component>          gradient norms before clipping
    q/<branch>/mean, q/<branch>/spread    E[Q] mean and its spread over the batch, per branch
    atoms/utilisation                     share of C51 atoms carrying probability
    experts/gate_entropy, experts/util/k  gate entropy (nats) and each expert's utilisation
    actions/picked/<branch>/k, actions/realised/<branch>/k, actions/active_frac   on the selection period
    sharpe/train, sharpe/select           annualised Sharpe of the collection and of the selection
                                          period's greedy backtest (it picks best.safetensors)
    misc/select_net_pnl, misc/select_trades   that backtest's net PnL and closed trades
    q/direction_gap_corr                  corr(greedy Q(long) - Q(short), planted carrier) on the
                                          selection rows; under train.selection = last on the
                                          in-sample tail of the collection rows (it reads no label:
                                          foxhunt.train.selection.diagnostic_rows). Synthetic
                                          markets only: real data has no known carrier
    time/epoch_s                          wall seconds of the epoch

A vector statistic ``name`` of ``k`` elements expands to ``name/0 .. name/k-1`` (or to the labels
given with it). A key outside the groups is written under ``misc/``.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foxhunt.agent.stats import Q_GROUP, q_key
from foxhunt.errors import FoxhuntError

LOSS_TOTAL = "loss/total"
GRAD_TOTAL = "grad/total"
ATOM_UTILISATION = "atoms/utilisation"
GATE_ENTROPY = "experts/gate_entropy"
SHARPE_TRAIN = "sharpe/train"
SHARPE_SELECT = "sharpe/select"
"""Annualised Sharpe of the epoch's greedy backtest over the fold's selection period (never validation)."""
SELECT_NET_PNL = "misc/select_net_pnl"
SELECT_TRADES = "misc/select_trades"
SELECT_SECONDS = "time/select_s"
ACTIVE_FRAC = "actions/active_frac"
EPOCH_SECONDS = "time/epoch_s"
QGAP_CORR = "q/direction_gap_corr"
"""corr(Q(long) - Q(short) of the greedy policy, the planted signal's carrier) over the fold's
diagnostic rows (:func:`foxhunt.train.selection.diagnostic_rows`: the selection period, or under
``train.selection = last`` the in-sample tail of the collection period; no label or future return is
read, so in-sample rows are legitimate)."""
QGAP_MAX_ROWS = 4096
"""Diagnostic rows the direction-gap correlation reads at most (evenly spaced): one forward pass."""

TENSORBOARD_DIR = "tensorboard"
"""Under the run folder: one TensorBoard log folder per fold, ``tensorboard/fold_<k>``."""
HISTORY_FILE = "diagnostics.jsonl"
"""Under the run folder: one JSON line per epoch (``{"fold", "epoch", "time", "stats"}``) or event."""


class BoardSection(StrEnum):
    """TensorBoard sections: the part of a key before its first ``/``."""

    LOSS = "loss"
    GRAD = "grad"
    Q = Q_GROUP  # the learner's per-branch Q statistics (foxhunt.agent.stats.q_key)
    ATOMS = "atoms"
    EXPERTS = "experts"
    ACTIONS = "actions"
    SHARPE = "sharpe"
    TIME = "time"
    MISC = "misc"


def q_branches(stats: Mapping[str, float]) -> list[str]:
    """Branch names that have a ``q/<branch>/mean`` statistic, in key order."""
    return [
        k.split("/")[1] for k in stats if k.startswith("q/") and k.count("/") == 2 and k.endswith("/mean")
    ]


# --- learner or gambler: the direction gap against the planted signal ---------------------------


def gap_rows(lo: int, hi: int, most: int = QGAP_MAX_ROWS) -> torch.Tensor:
    """At most ``most`` evenly spaced rows of ``[lo, hi - 1)`` (each needs a next row to step to)."""
    n = hi - 1 - lo
    if n <= most:
        return torch.arange(lo, hi - 1)
    return torch.linspace(lo, hi - 2, most).round().to(torch.int64).unique()


def direction_q(agent: Any, market: Any, env_cfg: Any, rows: torch.Tensor) -> np.ndarray:
    """[N, D] E[Q] of the direction branch of the greedy network (no noise) at a flat portfolio on
    each row (an episode reset there), de-normalised by PopArt."""
    from foxhunt.domain.actions import BRANCHES
    from foxhunt.env.core import TradingEnv

    env = TradingEnv(market, env_cfg.model_copy(update={"episode_rows": 2}))
    rows = rows.to(market.device)
    obs = env.reset(rows, rows + 1)
    q_BA = agent.expected_q(obs)[BRANCHES.index("direction")]
    return q_BA.cpu().numpy()


def direction_gap(agent: Any, market: Any, env_cfg: Any, rows: torch.Tensor) -> np.ndarray:
    """[N] Q(long) - Q(short) of :func:`direction_q`: the greedy direction gap."""
    from foxhunt.domain.actions import Direction

    q_BA = direction_q(agent, market, env_cfg, rows)
    return q_BA[:, int(Direction.LONG)] - q_BA[:, int(Direction.SHORT)]


def gap_correlation(gap: np.ndarray, signal: np.ndarray) -> float:
    """Pearson correlation over the rows where the signal is finite; NaN when either is constant
    (a network that has not separated long from short yet has no correlation, not a zero one)."""
    ok = np.isfinite(signal) & np.isfinite(gap)
    g, x = gap[ok], signal[ok]
    if len(g) < 2 or g.std() == 0 or x.std() == 0:
        return float("nan")
    return float(np.corrcoef(g, x)[0, 1])


CALIBRATION_QUANTILES = (0.0, 0.5, 0.75, 0.9, 0.97, 1.0)
"""The buckets of :func:`calibration_buckets`: below the median, 50-75%, 75-90%, 90-97%, the top 3%."""


def entry_advantage(
    agent: Any, market: Any, env_cfg: Any, rows: torch.Tensor
) -> tuple[np.ndarray, np.ndarray]:
    """``([N] advantage, [N] side)`` of the greedy network at a flat portfolio on each row: the best
    entry's E[Q] over the best of staying out, ``max(Q(long), Q(short)) - max(Q(hold)[, Q(flat)])``,
    and that entry's side (+1 long, -1 short)."""
    from foxhunt.domain.actions import Direction

    q = direction_q(agent, market, env_cfg, rows)
    long_q, short_q = q[:, int(Direction.LONG)], q[:, int(Direction.SHORT)]
    stay = q[:, int(Direction.HOLD)]
    if q.shape[1] > int(Direction.FLAT):
        stay = np.maximum(stay, q[:, int(Direction.FLAT)])
    return np.maximum(long_q, short_q) - stay, np.where(long_q > short_q, 1.0, -1.0)


def forward_rows(mid: np.ndarray, segment: np.ndarray, rows: np.ndarray, horizon: int) -> np.ndarray:
    """The ``rows`` whose ``horizon``-th next row exists, in the same segment, and has a finite price
    at both ends (the rows a forward move is defined on)."""
    rows = rows[rows + horizon < len(mid)]
    same = segment[rows + horizon] == segment[rows]
    return rows[same & np.isfinite(mid[rows]) & np.isfinite(mid[rows + horizon])]


def calibration_buckets(
    advantage: np.ndarray, move: np.ndarray, quantiles: Sequence[float] = CALIBRATION_QUANTILES
) -> dict[str, Any]:
    """The mean ``move`` of the rows in each ``advantage`` quantile bucket (``[lo, hi)``, the last one
    ``[lo, hi]``; NaN for an empty one) and ``corr(advantage, move)`` (NaN when either is constant).
    A learner's means rise with its advantage on rows it never trained on; a network that fitted
    noise ranks its training rows and not the others."""
    if len(advantage) == 0:
        return {"rows": 0, "quantiles": list(quantiles), "edges": [], "move": [], "corr": float("nan")}
    edges = np.quantile(advantage, quantiles)
    means = []
    last = len(edges) - 2
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        below = advantage <= hi if i == last else advantage < hi
        inside = (advantage >= lo) & below
        means.append(float(move[inside].mean()) if inside.any() else float("nan"))
    return {
        "rows": int(len(advantage)),
        "quantiles": list(quantiles),
        "edges": [float(e) for e in edges],
        "move": means,
        "corr": gap_correlation(advantage, move),
    }


def advantage_calibration(
    agent: Any, market: Any, env_cfg: Any, rows: np.ndarray, horizon: int, most: int = QGAP_MAX_ROWS
) -> dict[str, Any]:
    """:func:`calibration_buckets` of the greedy entry advantage (:func:`entry_advantage`) on ``rows``
    (at most ``most``, evenly spaced) against the next ``horizon`` rows' mid move in the entry's
    direction, in money per contract (the market's point value): where along its advantage the agent's
    entries pay, before costs. It reads future prices: a fold's result computes it once its training
    is over, on its training rows and its validation rows, and nothing is chosen on it."""
    mid, segment = market.mid.cpu().numpy(), market.segment.cpu().numpy()
    rows = forward_rows(mid, segment, np.asarray(rows, dtype=np.int64), horizon)
    if len(rows) > most:
        rows = rows[np.linspace(0, len(rows) - 1, most).round().astype(np.int64)]
    if len(rows) == 0:
        return calibration_buckets(np.zeros(0), np.zeros(0)) | {"horizon": horizon}
    advantage, side = entry_advantage(agent, market, env_cfg, torch.as_tensor(rows))
    move = (mid[rows + horizon] - mid[rows]) * market.instrument.point_value * side
    return calibration_buckets(advantage, move) | {"horizon": horizon}


def fold_calibration(agent: Any, market: Any, env_cfg: Any, fold: Any, horizon: int) -> dict[str, Any]:
    """``fold["calibration"]``: :func:`advantage_calibration` on the ``fold``'s training rows and on its
    validation rows (a :class:`~foxhunt.validation.folds.Fold`). ``agent``: anything with the
    ``expected_q(states)`` of an agent (a committee's mean: :class:`foxhunt.agent.committee.MeanValues`)."""
    validation = np.arange(fold.validation_start, fold.validation_end)
    return {
        "train": advantage_calibration(agent, market, env_cfg, fold.train, horizon),
        "validation": advantage_calibration(agent, market, env_cfg, validation, horizon),
    }


# --- accumulation on the device ----------------------------------------------------------------


class EpochStats:
    """Running means of named statistics, kept on ``device`` until :meth:`read`.

    ``add(name, value)`` adds a detached 0-dim or small tensor (or a host float) to ``name``'s sum,
    element by element (a ``[k]`` vector gives ``k`` means), and counts the call on the host (the
    count is known there, so it costs no transfer). With ``weight`` (a tensor broadcastable to
    ``value`` of any size, e.g. a mask over the batch) the statistic is the scalar weighted mean
    ``sum(value * weight) / sum(weight)`` over every element of every call, both sums on the device.
    Nothing is read back until :meth:`read`, which stacks every sum and weighted count into one
    vector and moves it to the host once: no ``.item()``, no synchronisation per update (STYLE:
    metrics are read back every K steps).
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self._sum: dict[str, torch.Tensor] = {}  # float64 [k] on the device
        self._wcount: dict[str, torch.Tensor] = {}  # float64 [k] on the device (weighted names)
        self._count: dict[str, int] = {}  # calls (unweighted names)
        self._labels: dict[str, tuple[str, ...] | None] = {}
        self._host: dict[str, list[float]] = {}  # host floats: [sum, count]

    def __contains__(self, name: str) -> bool:
        return name in self._sum or name in self._host

    def add(
        self,
        name: str,
        value: torch.Tensor | float,
        *,
        weight: torch.Tensor | None = None,
        labels: Sequence[str] | None = None,
    ) -> None:
        """Add one observation of ``name`` (its shape and weighting are fixed by the first call)."""
        if not isinstance(value, torch.Tensor):
            if weight is not None or labels is not None:
                raise ValueError(f"EpochStats.add({name!r}): weight and labels need a tensor value")
            if name in self._sum:
                raise ValueError(f"EpochStats.add({name!r}): was a tensor statistic, got a host float")
            acc = self._host.setdefault(name, [0.0, 0.0])
            acc[0] += float(value)
            acc[1] += 1.0
            return
        if name in self._host:
            raise ValueError(f"EpochStats.add({name!r}): was a host float statistic, got a tensor")
        w = None
        if weight is not None:  # a weighted mean over every element: sum(v w) / sum(w), a scalar
            w64 = torch.broadcast_to(weight.detach().to(device=self.device, dtype=torch.float64), value.shape)
            v = (value.detach().to(device=self.device, dtype=torch.float64) * w64).sum().reshape(1)
            w = w64.sum().reshape(1)
        else:
            v = value.detach().to(device=self.device, dtype=torch.float64).reshape(-1)  # [k]
            if v.numel() > 4096:
                raise ValueError(
                    f"EpochStats.add({name!r}): {v.numel()} elements; reduce on the device first or pass "
                    f"a weight (statistics are scalars or small vectors)"
                )
        if name not in self._sum:
            if labels is not None and len(labels) != v.numel():
                raise ValueError(f"EpochStats.add({name!r}): {len(labels)} labels for {v.numel()} values")
            self._sum[name] = v.clone()
            self._labels[name] = tuple(labels) if labels is not None else None
            if w is None:
                self._count[name] = 1
            else:
                self._wcount[name] = w.clone()
            return
        if v.numel() != self._sum[name].numel():
            raise ValueError(
                f"EpochStats.add({name!r}): {v.numel()} values, first call had {self._sum[name].numel()}"
            )
        if (w is None) != (name in self._count):
            raise ValueError(f"EpochStats.add({name!r}): weighted and unweighted calls mixed")
        self._sum[name].add_(v)
        if w is None:
            self._count[name] += 1
        else:
            self._wcount[name].add_(w)

    def reset(self) -> None:
        self._sum.clear()
        self._wcount.clear()
        self._count.clear()
        self._labels.clear()
        self._host.clear()

    def read(self, *, reset: bool = True) -> dict[str, float]:
        """Every statistic's mean as a flat ``{key: float}`` after one host transfer.

        A weighted statistic with zero total weight reads NaN (no observation, not a zero).
        """
        names = list(self._sum)
        weighted = [n for n in names if n in self._wcount]
        parts = [self._sum[n] for n in names] + [self._wcount[n] for n in weighted]
        flat: list[float] = torch.cat(parts).cpu().tolist() if parts else []  # the one transfer
        sums: dict[str, list[float]] = {}
        i = 0
        for n in names:
            k = self._sum[n].numel()
            sums[n], i = flat[i : i + k], i + k
        counts: dict[str, list[float]] = {}
        for n in weighted:
            k = self._sum[n].numel()
            counts[n], i = flat[i : i + k], i + k
        out: dict[str, float] = {}
        for n in names:
            c = counts[n] if n in counts else [float(self._count[n])] * len(sums[n])
            means = [s / ci if ci > 0 else math.nan for s, ci in zip(sums[n], c, strict=True)]
            labels = self._labels[n]
            if labels is None and self._sum[n].numel() == 1:
                out[n] = means[0]
            else:
                keys = labels if labels is not None else [str(j) for j in range(len(means))]
                out.update({f"{n}/{key}": m for key, m in zip(keys, means, strict=True)})
        for n, (s, c) in self._host.items():
            out[n] = s / c
        if reset:
            self.reset()
        return out


# --- writing ------------------------------------------------------------------------------------


def tensorboard_tag(key: str) -> str:
    """The TensorBoard tag of a key: the key itself when its group is known, else ``misc/<key>``."""
    group = key.split("/", 1)[0]
    return key if "/" in key and group in {g.value for g in BoardSection} else f"{BoardSection.MISC}/{key}"


def _json_value(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None  # strict JSON has no NaN/Inf; read back as NaN


def _append_line(path: Path, record: Mapping[str, Any]) -> None:
    """Append one JSON line with a single ``write`` on an ``O_APPEND`` descriptor (no torn lines)."""
    data = (json.dumps(record, allow_nan=False) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


class DiagnosticsWriter:
    """One fold's diagnostics: TensorBoard scalars under ``run_dir/tensorboard/fold_<fold>`` and JSON
    lines appended to ``run_dir/diagnostics.jsonl`` (shared by every fold). Use as a context manager
    or call :meth:`close`."""

    def __init__(self, run_dir: str | Path, fold: int) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # torch.utils.tensorboard needs the tensorboard package
            raise FoxhuntError(
                "torch.utils.tensorboard", f"cannot import it ({exc})", "pip install tensorboard"
            ) from exc
        self.run_dir = Path(run_dir)
        self.fold = int(fold)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.run_dir / TENSORBOARD_DIR / f"fold_{self.fold}"
        self.history_path = self.run_dir / HISTORY_FILE
        self._tb = SummaryWriter(log_dir=str(self.log_dir))

    def write(self, epoch: int, stats: Mapping[str, float]) -> None:
        """One scalar per key at step ``epoch`` and one history line; flushed."""
        for key, value in stats.items():
            self._tb.add_scalar(tensorboard_tag(key), float(value), global_step=epoch)
        self._tb.flush()
        record = {
            "fold": self.fold,
            "epoch": int(epoch),
            "time": time.time(),
            "stats": {k: _json_value(float(v)) for k, v in stats.items()},
        }
        _append_line(self.history_path, record)

    def event(self, epoch: int, kind: str, message: str) -> None:
        """A plateau response, an anomaly or another event: TensorBoard text and a history line."""
        self._tb.add_text(f"events/{kind}", message, global_step=epoch)
        self._tb.flush()
        record = {"fold": self.fold, "epoch": int(epoch), "time": time.time(), "event": kind}
        record["message"] = message
        _append_line(self.history_path, record)

    def close(self) -> None:
        self._tb.close()

    def __enter__(self) -> DiagnosticsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_history(run_dir: str | Path) -> list[dict[str, Any]]:
    """The epoch lines of ``run_dir/diagnostics.jsonl``, the last line per ``(fold, epoch)`` kept (a
    resumed run rewrites the epochs after its checkpoint), sorted by fold and epoch; ``null`` values
    (non-finite when written) read back as NaN. Event lines are left out (see :func:`read_events`)."""
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    for rec in _lines(run_dir):
        if "stats" in rec:
            rec["stats"] = {k: math.nan if v is None else float(v) for k, v in rec["stats"].items()}
            rows[(rec["fold"], rec["epoch"])] = rec
    return [rows[k] for k in sorted(rows)]


def read_events(run_dir: str | Path) -> list[dict[str, Any]]:
    """The event lines of ``run_dir/diagnostics.jsonl`` in the order written."""
    return [rec for rec in _lines(run_dir) if "event" in rec]


def _lines(run_dir: str | Path) -> Iterable[dict[str, Any]]:
    path = Path(run_dir) / HISTORY_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --- console ------------------------------------------------------------------------------------


def _g(v: float) -> str:
    return f"{v:.3g}"


def console_line(fold: int, epoch: int, stats: Mapping[str, float]) -> str:
    """One compact line: loss, grad norm, Q mean±spread per branch, atom utilisation, gate entropy,
    train/val Sharpe, active fraction, seconds. A statistic that is absent is left out; numbers are
    printed with 3 significant digits (``format(v, ".3g")``)."""
    parts = [f"fold {fold} epoch {epoch}"]
    if LOSS_TOTAL in stats:
        parts.append(f"loss {_g(stats[LOSS_TOTAL])}")
    if GRAD_TOTAL in stats:
        parts.append(f"grad {_g(stats[GRAD_TOTAL])}")
    qs = []
    for b in q_branches(stats):
        spread = stats.get(q_key(b, "spread"))
        qs.append(f"{b} {_g(stats[q_key(b, 'mean')])}" + (f"±{_g(spread)}" if spread is not None else ""))
    if qs:
        parts.append("Q " + " ".join(qs))
    if ATOM_UTILISATION in stats:
        parts.append(f"atoms {_g(stats[ATOM_UTILISATION])}")
    if GATE_ENTROPY in stats:
        parts.append(f"gate H {_g(stats[GATE_ENTROPY])}")
    named = (("train", SHARPE_TRAIN), ("select", SHARPE_SELECT))
    sharpe = [f"{n} {_g(stats[k])}" for n, k in named if k in stats]
    if sharpe:
        parts.append("Sharpe " + " ".join(sharpe))
    if ACTIVE_FRAC in stats:
        parts.append(f"active {_g(stats[ACTIVE_FRAC])}")
    if EPOCH_SECONDS in stats:
        parts.append(f"{stats[EPOCH_SECONDS]:.1f} s")
    return " | ".join(parts)
