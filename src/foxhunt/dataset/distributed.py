"""The feature cache built one session at a time in parallel tasks, bit for bit the single-process
cache of :func:`foxhunt.dataset.cache.build_cache`.

Why a session is a unit of work. Every stage after ingest is local to a *segment* (a session of
one contract, ``segment_start``): bars never span a session (time bars are keyed by the session's
open, volume bars restart each session); every feature family restarts its windows, EWMAs, rolling
sums and bucket rings at ``segment_start`` and counts positions from it (``_kernels``: ``pos``,
the exact re-sum every ``window`` rows included); labels are valid only inside their segment and
their trailing volatility restarts there. So the rows of a session, computed from that session's
files alone, are the rows the whole build gives it, and the merge only has to put them end to end.

What does cross sessions, and where it is handled:

* **The front month** (:mod:`foxhunt.data.continuous`): the causal rule picks each session's
  contract by the *previous* session's activity and never returns to an abandoned contract, a
  sequential choice over every session. Each task reports its activity table (volume and book
  updates per session and contract) and the contract it chose on its own; the merge runs the same
  :func:`choose_front` over the concatenated tables, and a group whose choice differs (a roll at its
  first session) is built again with the whole build's contract per session (its other contracts'
  records removed, so that contract is the only candidate).
* **Which files belong together**: a file's metadata gives its time range, hence its sessions;
  files sharing a session are one group (a UTC-day file holds the next session's first hour), so
  the trades-file-over-carried-trades rule, overlap checks and the per-file trade coverage see the
  same files for every session as the whole build does. Definition files go to every group.
  Should a group's records fall in another group's sessions after all (a file's metadata not
  bounding its records), the groups' actual sessions overlap and the build runs in one process.
* **Book depth** (``book_levels``, the minimum over all book files): it decides which columns are
  masked on every row. Groups of unequal depth (mixed MBP-1 and MBP-10 input): one process.
* **The cache's metadata**: ``rows``, ``coverage`` (share of non-zero values per column, computed
  from the merged matrix by the same :meth:`FeatureMatrix.coverage`), ``masked`` (the union of the
  groups', in layout order, as the whole stack inserts them), the row-count check against the folds,
  the source fingerprints and the cache key: all computed once in the merge, over everything.

Any refusal inside a task (the file errors, a session with no rows) makes the build run again in
one process, which gives the whole build's answer: a refusal that is genuine, or the cache.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from foxhunt.config.models import FoxhuntConfig
from foxhunt.console import SILENT, Reporter
from foxhunt.data.arrow_io import read_ipc, write_ipc
from foxhunt.data.config import DataConfig
from foxhunt.data.continuous import choose_front, front_month
from foxhunt.data.dbn_read import peek_metadata
from foxhunt.data.ingest import MarketData, load_market
from foxhunt.data.instrument import instrument_of_files
from foxhunt.data.schemas import MaskReason, Schema
from foxhunt.data.sessions import session_dates
from foxhunt.dataset.cache import (
    barrier_horizon,
    build_cache,
    cache_meta,
    compute_features,
    horizons,
    label_columns,
    table_columns,
)
from foxhunt.domain.instrument import Instrument
from foxhunt.errors import FoxhuntError
from foxhunt.features.cache_file import seal_table
from foxhunt.features.layout import Layout
from foxhunt.features.pipeline import rows_from_market
from foxhunt.features.stack import FeatureMatrix
from foxhunt.parallel import Executor
from foxhunt.validation.folds import purged_walk_forward
from foxhunt.validation.labels import label_span

_INT64_MAX = 2**63 - 1  # a DBN `end` above this is undefined (u64 sentinel)


@dataclass(frozen=True)
class Part:
    """What one group's task reports; its cache columns are in the Arrow file ``path``."""

    index: int
    path: Path
    rows: int
    dates: np.ndarray  # [S] int64 sessions with any record (the activity table's rows)
    instruments: np.ndarray  # [I] uint32
    volume: np.ndarray  # [S, I] int64
    updates: np.ndarray  # [S, I] int64
    chosen: np.ndarray  # [S] uint32 the group's own front month per session
    book_levels: int
    layout: Layout
    masked: dict[str, MaskReason]


# --- grouping ----------------------------------------------------------------------------------


def session_groups(files: Sequence[Path], cfg: DataConfig) -> list[list[Path]]:
    """``files`` in groups that share no session, in session order (each group in the given order).

    A file's sessions are those of its metadata's time range; definition files join every group.
    One group when a file's range is unknown (no readable metadata, undefined end)."""
    spans: list[tuple[int, int, int]] = []  # (first session, last session, position in files)
    definitions: list[int] = []
    for k, path in enumerate(files):
        meta = peek_metadata(path)
        if meta is None or not (0 <= int(meta.start) <= int(meta.end) <= _INT64_MAX):
            return [list(files)]
        if str(meta.schema) == Schema.DEFINITION.value:
            definitions.append(k)
            continue
        last = max(int(meta.start), int(meta.end) - 1)  # DBN's end is exclusive
        ends = np.array([int(meta.start), last], np.int64)
        lo, hi = session_dates(ends, cfg.session_timezone, cfg.session_open)
        spans.append((int(lo), int(hi), k))
    groups: list[tuple[int, list[int]]] = []  # (last session, positions)
    for lo, hi, k in sorted(spans):
        if groups and lo <= groups[-1][0]:
            groups[-1] = (max(groups[-1][0], hi), [*groups[-1][1], k])
        else:
            groups.append((hi, [k]))
    # Each group keeps the files' given order: ingest's stable sort by time breaks ties by it.
    return [[files[k] for k in sorted(ks + definitions)] for _, ks in groups] or [list(files)]


# --- one group (a task) --------------------------------------------------------------------------


def only_front(md: MarketData, cfg: DataConfig, front: dict[int, int]) -> MarketData:
    """``md`` with each contract's records kept only in the sessions where ``front`` (session ->
    contract) names it: the front-month rule then has one candidate per session, that contract."""

    def keep(arrays: Any) -> np.ndarray:
        dates = session_dates(arrays.ts_event, cfg.session_timezone, cfg.session_open)
        uniq, at = np.unique(dates, return_inverse=True)
        wanted = np.array([front.get(int(d), -1) for d in uniq], np.int64)
        return wanted[at] == arrays.instrument_id.astype(np.int64)

    books, crossed = {}, {}
    for iid, book in md.books.items():
        sel = keep(book)
        if sel.any():
            books[iid], crossed[iid] = book.take(sel), md.crossed[iid][sel]
    trades = {iid: t.take(s) for iid, t in md.trades.items() if (s := keep(t)).any()}
    ohlcv = {iid: b.take(s) for iid, b in md.ohlcv.items() if (s := keep(b)).any()}
    return dataclasses.replace(md, books=books, crossed=crossed, trades=trades, ohlcv=ohlcv)


def build_part(
    index: int, files: list[Path], cfg: FoxhuntConfig, tick: float, front: dict[int, int] | None, path: Path
) -> Part:
    """One group's rows, features and labels (the single-process build's code on its files), written
    to ``path``; ``front`` (session -> contract) forces the whole build's front month."""
    md = load_market(files, cfg.data)
    if front is not None:
        md = only_front(md, cfg.data, front)
    own = front_month(md, cfg.data)  # what rows_from_market picks below, and the activity it read
    inp = rows_from_market(md, cfg.data, tick_size=tick)
    fm = compute_features(inp, cfg)
    cols = table_columns(inp, fm, label_columns(inp, cfg))
    write_ipc(pa.table(cols), path)
    return Part(
        index=index,
        path=path,
        rows=len(inp),
        dates=own.trade_dates,
        instruments=own.instruments,
        volume=own.volume,
        updates=own.updates,
        chosen=own.instrument_id,
        book_levels=md.book_levels,
        layout=fm.layout,
        masked=dict(fm.masked),
    )


# Tasks per worker: each task builds a run of consecutive session groups. One task per group (250 for
# a year) left each worker idle between tasks while the driver heard of the result and handed out the
# next, and shipped the config with every group: 1.61-1.63x on 2 cores (bench/features_parallel.py).
# A few tasks per worker keep that overhead small and still balance uneven sessions.
TASKS_PER_WORKER = 4


def build_parts(jobs: list[tuple]) -> list[Part]:
    """:func:`build_part` of each job in order: one task for a run of session groups."""
    return [build_part(*job) for job in jobs]


def batches(jobs: list[tuple], n: int) -> list[list[tuple]]:
    """``jobs`` cut into ``min(n, len(jobs))`` consecutive runs whose sizes differ by at most one."""
    n = max(1, min(n, len(jobs)))
    size, extra = divmod(len(jobs), n)
    cuts = [0]
    for i in range(n):
        cuts.append(cuts[-1] + size + (1 if i < extra else 0))
    return [jobs[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]


def _map_parts(executor: Executor, jobs: list[tuple]) -> list[Part]:
    runs = batches(jobs, TASKS_PER_WORKER * executor.workers)
    return [part for run in executor.map(build_parts, [(run,) for run in runs]) for part in run]


# --- the merge -----------------------------------------------------------------------------------


def whole_front(parts: list[Part], cfg: DataConfig) -> dict[int, int]:
    """Session -> contract by :func:`choose_front` over every group's activity, as the whole build."""
    instruments = np.unique(np.concatenate([p.instruments for p in parts])).astype(np.uint32)
    dates = np.concatenate([p.dates for p in parts])
    volume = np.zeros((len(dates), len(instruments)), np.int64)
    updates = np.zeros_like(volume)
    row = 0
    for p in parts:
        cols = np.searchsorted(instruments, p.instruments)
        volume[row : row + len(p.dates), cols] = p.volume
        updates[row : row + len(p.dates), cols] = p.updates
        row += len(p.dates)
    chosen = choose_front(dates, instruments, volume, cfg.roll_rule, None, updates).instrument_id
    return {int(d): int(i) for d, i in zip(dates, chosen, strict=True)}


def _disjoint_in_order(parts: list[Part]) -> bool:
    return all(len(p.dates) for p in parts) and all(
        a.dates[-1] < b.dates[0] for a, b in zip(parts, parts[1:], strict=False)
    )


def merge_parts(
    parts: list[Part], cfg: FoxhuntConfig, sources: list[dict[str, Any]], instrument: Instrument, path: Path
) -> Path:
    """The cache file from the groups' columns, end to end, with the metadata of the whole."""
    tables = [read_ipc(p.path) for p in parts]
    names = tables[0].column_names
    cols = {n: pa.concat_arrays([c for t in tables for c in t.column(n).chunks]) for n in names}
    rows = sum(p.rows for p in parts)
    purged_walk_forward(rows, cfg.folds, label_span(horizons(cfg), barrier_horizon(cfg)))
    layout = parts[0].layout
    union = {c: r for p in parts for c, r in p.masked.items()}
    masked = {c: union[c] for c in layout.columns if c in union}  # the stack's insertion order
    values = np.empty((rows, layout.width), np.float32)
    for j, name in enumerate(layout.columns):
        values[:, j] = cols[name].to_numpy(zero_copy_only=False)
    fm = FeatureMatrix(values=values, layout=layout, masks={}, masked=masked)
    meta = cache_meta(cfg, sources, instrument, fm, rows)
    return write_ipc(seal_table(cols, meta), path)


def build_by_session(
    files: Sequence[Path],
    cfg: FoxhuntConfig,
    path: Path,
    sources: list[dict[str, Any]],
    executor: Executor,
    progress: Reporter = SILENT,
) -> Path:
    """:func:`build_cache` of ``files``, one :func:`build_part` per session group, in runs of
    consecutive groups on ``executor`` (:data:`TASKS_PER_WORKER`); the same file
    content (every column and its hash, every metadata field but ``created_at``)."""
    # Absolute paths: a Ray worker's working folder is not necessarily this process's.
    files, path = [Path(f).absolute() for f in files], Path(path).absolute()
    groups = session_groups(files, cfg.data)
    if len(groups) < 2:
        progress.say("features: one session group, built in one process")
        return _whole(files, cfg, path, sources)
    instrument = instrument_of_files([s["path"] for s in sources], cfg.instrument, where="--data")
    path.parent.mkdir(parents=True, exist_ok=True)
    # The parts beside the cache: on a cluster, a folder every node sees (the tasks write them).
    with tempfile.TemporaryDirectory(prefix=".parts-", dir=path.parent) as tmp:
        where = Path(tmp)
        tick = instrument.tick_size
        jobs = [(i, g, cfg, tick, None, where / f"part{i}.arrow") for i, g in enumerate(groups)]
        try:
            parts: list[Part] = _map_parts(executor, jobs)
        except FoxhuntError as err:
            progress.say(f"features: a session group was refused ({err}); building in one process")
            return _whole(files, cfg, path, sources)
        if not _disjoint_in_order(parts) or len({p.book_levels for p in parts}) > 1:
            progress.say("features: session groups overlap or differ in book depth; building in one process")
            return _whole(files, cfg, path, sources)
        front = whole_front(parts, cfg.data)
        redo = [p.index for p in parts if _differs(p, front)]
        if redo:
            progress.say(f"features: {len(redo)} session group(s) built again with the whole front month")
            again = [(i, groups[i], cfg, tick, front, where / f"part{i}.front.arrow") for i in redo]
            for part in _map_parts(executor, again):
                parts[part.index] = part
            if any(_differs(p, front) for p in parts):  # cannot happen: one candidate per session
                progress.say("features: the front month could not be imposed; building in one process")
                return _whole(files, cfg, path, sources)
        return merge_parts(parts, cfg, sources, instrument, path)


def _differs(part: Part, front: dict[int, int]) -> bool:
    """The group chose another contract than the whole build for one of its sessions."""
    return any(front[int(d)] != int(c) for d, c in zip(part.dates, part.chosen, strict=True))


def _whole(files: list[Path], cfg: FoxhuntConfig, path: Path, sources: list[dict[str, Any]]) -> Path:
    return build_cache(load_market(files, cfg.data), cfg, path, sources)
