"""The leak guard over the path from the feature rows to the decision (docs/design.md §4, issue 58).

The feature check of :mod:`foxhunt.dataset.leaks` proves the feature cache causal; what the agent
decides on lies further down, and each step is checked here through the code training runs:

- **the decision path at every event cut** (:func:`moved_inputs`): on the market perturbed after the
  cut (leaks.perturb_after), the fold normaliser's output (``MarketTensors.features``), the
  environment's observation (:meth:`foxhunt.env.core.TradingEnv.observe`) of the rows before the
  cut, and the labels the learner reads (the cache's label columns, the aux heads' targets) of the
  rows whose window ``[t, t + label span]`` ends at or before the cut must be bit-identical;
- **coverage** (:func:`coverage`): a one-row look-ahead shows at a cut only when the cut's own row
  leaks, so a leak on a share ``p`` of rows escapes 4 cuts with probability ``(1 - p)^4``. Here
  :func:`coverage_rows_needed` rows (459 for ``p`` = 1% at 99%) are drawn uniformly without
  replacement and each is a cut: the features are recomputed in chunks that end at the cut rows
  (the families carry their state from chunk to chunk, and chunks equal the batch bit for bit:
  tests/features/test_chunks.py), so a row's features are computed without any row after it; a
  family that cannot run in chunks is recomputed on the rows up to each cut; the labels are
  recomputed on the rows up to each cut (their rows ``<= cut - span`` compared); the observation is
  rebuilt with the feature rows after each cut replaced (:data:`PERTURBED_AHEAD` rows). A leak on a
  set of rows of share ``p`` escapes all ``k`` cut rows with probability ``C(n-m, k) / C(n, k) <=
  (1 - p)^k`` (``m = p n`` leaking rows among ``n``), stated in the verdict;
- **the input screen** (:func:`screen_problems`): per fold, every row outside the fold's collection
  rows replaced, the screen (:func:`foxhunt.validation.screen.fold_screen`, training's call) must
  rank the columns bit-identically.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from foxhunt import seeding
from foxhunt.config.models import FoxhuntConfig
from foxhunt.dataset.cache import feature_stack, label_columns, table_columns
from foxhunt.errors import FoxhuntError
from foxhunt.features.cache_file import FeatureCache
from foxhunt.features.frame import RowInput
from foxhunt.features.registry import Family
from foxhunt.features.stack import FeatureMatrix, compute_stack, resumable
from foxhunt.validation.folds import FoldData, fold_periods

COVERAGE_SHARE = 0.01  # the sparsest look-ahead (share of rows) the guard must catch ...
COVERAGE_POWER = 0.99  # ... with at least this probability
OBSERVED_ROWS = 256  # rows up to each event cut whose observation is compared
COVERAGE_PARTS = 4  # coverage jobs over the cut rows (each in a forked worker where cores are idle)
PERTURBED_AHEAD = 4  # coverage: feature rows after each cut row replaced (a look-ahead this far shows)

OBSERVATION = "the observation (TradingEnv.observe)"
NORMALISED = "the normalised state features (the fold normaliser)"


def coverage_rows_needed(share: float = COVERAGE_SHARE, power: float = COVERAGE_POWER) -> int:
    """Cut rows for a look-ahead on ``share`` of the rows to show with probability >= ``power``:
    the least ``k`` with ``(1 - share)^k <= 1 - power`` (459 for 1% and 99%)."""
    return math.ceil(math.log(1.0 - power) / math.log(1.0 - share))


def escape_probability(rows: int, share: float) -> float:
    """Upper bound on the probability that a look-ahead on ``share`` of the rows escapes ``rows``
    cut rows drawn uniformly without replacement: ``(1 - share)^rows``."""
    return (1.0 - share) ** rows


def cut_rows(n: int, k: int, seed: int) -> np.ndarray:
    """``k`` rows (all of them when fewer) drawn uniformly without replacement from ``[0, n - 1)``
    (each has a next row), sorted."""
    pool = max(n - 1, 0)
    if k >= pool:
        return np.arange(pool, dtype=np.int64)
    return np.sort(seeding.rng(seed).choice(pool, size=k, replace=False)).astype(np.int64)


def guard_cache(inp: RowInput, feats: FeatureMatrix, labels: Mapping[str, np.ndarray]) -> FeatureCache:
    """The feature cache of these rows, in memory: the columns a built cache holds
    (:func:`foxhunt.dataset.cache.table_columns`), for the environment's own market builder."""
    table = pa.table(table_columns(inp, feats, dict(labels)))
    return FeatureCache(Path("<leak guard>"), table, {"columns": list(feats.columns)})


def fold_market(cache: FeatureCache, fold: FoldData, cfg: FoxhuntConfig, instrument: Any):
    """The fold's market as training builds it (:func:`foxhunt.env.market.market_tensors`, looked up
    at call time, so the guard runs whatever the environment runs), on the CPU."""
    from foxhunt.env import market as env_market

    return env_market.market_tensors(
        cache, fold, vol_window=cfg.env.plan.barrier.vol_window, instrument=instrument
    )


def observe_rows(market: Any, cfg: FoxhuntConfig, rows: np.ndarray) -> np.ndarray:
    """The agent's observation at episodes starting at ``rows`` [N, state width] (float32)."""
    import torch

    from foxhunt.env.core import TradingEnv

    if not len(rows):
        return np.zeros((0, 0), np.float32)
    env = TradingEnv(market, cfg.env)
    return env.reset(torch.as_tensor(rows, dtype=torch.int64)).numpy()


def _same(a: Any, b: Any) -> bool:
    """Bit-identical values (NaN equal to NaN), for arrays or CPU tensors."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        return bool(((a == b) | (np.isnan(a) & np.isnan(b))).all())
    return bool(np.array_equal(a, b))


def _aux_names() -> tuple[str, ...]:
    from foxhunt.env.market import AUX_TARGETS

    return tuple(f"the aux target {name}" for name in AUX_TARGETS)


@dataclass(frozen=True, eq=False)
class DecisionBase:
    """The decision path on the unperturbed rows: built once, compared with at every cut."""

    cfg: FoxhuntConfig
    fold: FoldData  # the fold whose normaliser the observation goes through (fold 0)
    span: int  # the training label span: a label of row t is known at row t + span
    instrument: Any
    features: np.ndarray  # [R, F] the raw feature rows
    labels: dict[str, np.ndarray]
    cache: FeatureCache
    market: Any  # MarketTensors


def decision_base(
    inp: RowInput, feats: FeatureMatrix, cfg: FoxhuntConfig, fold: FoldData, span: int, instrument: Any
) -> DecisionBase:
    labels = label_columns(inp, cfg)
    cache = guard_cache(inp, feats, labels)
    market = fold_market(cache, fold, cfg, instrument)
    return DecisionBase(cfg, fold, span, instrument, feats.values, labels, cache, market)


def moved_inputs(base: DecisionBase, inp: RowInput, feats: FeatureMatrix, known: int) -> list[str]:
    """The decision inputs of the rows known at a cut (the first ``known`` rows, the same in both)
    that moved on the perturbed rows ``inp``/``feats``: the normalised features and observations of
    those rows, the labels and aux targets of those whose window ends by the cut."""
    cfg = base.cfg
    labels = label_columns(inp, cfg)
    market = fold_market(guard_cache(inp, feats, labels), base.fold, cfg, base.instrument)
    moved = []
    if not _same(base.market.features[:known], market.features[:known]):
        moved.append(NORMALISED)
    rows = np.arange(max(known - OBSERVED_ROWS, 0), known)
    if not _same(observe_rows(base.market, cfg, rows), observe_rows(market, cfg, rows)):
        moved.append(OBSERVATION)
    settled = max(known - base.span, 0)  # rows t with t + span <= the cut's row
    moved += [name for name, v in base.labels.items() if not _same(v[:settled], labels[name][:settled])]
    if base.market.aux_targets is not None:
        a, b = base.market.aux_targets[:settled], market.aux_targets[:settled]
        moved += [name for j, name in enumerate(_aux_names()) if not _same(a[:, j], b[:, j])]
    return moved


# --- coverage: many cut rows, each cheap ---------------------------------------------------------


@dataclass
class Coverage:
    """The coverage check's finding: what moved at some of ``rows`` cut rows."""

    rows: int  # cut rows, each checked for every input below
    of_rows: int  # rows they were drawn from
    leaking_columns: list[str] = field(default_factory=list)  # feature columns and decision inputs
    first_leaking_row: int | None = None

    def bound(self) -> str:
        """The detection bound the verdict states."""
        if self.rows >= self.of_rows:
            return f"every one of the {self.rows:,} rows a cut (a look-ahead on any row shows)"
        return (
            f"{self.rows} cut rows drawn at random of {self.of_rows:,}: a look-ahead on a share p of the "
            f"rows escapes with probability <= (1 - p)^{self.rows} "
            f"(p = 1%: {escape_probability(self.rows, 0.01):.2%}, "
            f"p = 10%: {escape_probability(self.rows, 0.10):.0e})"
        )


def _note(found: dict[str, int], names: Sequence[str], rows: np.ndarray) -> None:
    """``found[name] = first row`` for each name whose first differing row is in ``rows``."""
    for name, row in zip(names, rows, strict=True):
        r = int(row)  # a Python int: the report is JSON
        found[name] = min(found.get(name, r), r)


def _stack_columns(feats: FeatureMatrix, columns: Sequence[str]) -> list[int]:
    at = {c: j for j, c in enumerate(feats.columns)}
    return [at[c] for c in columns]


@dataclass(frozen=True, eq=False)
class _Run:
    """A coverage job's consecutive cut rows, all in its rows ``[lo, hi)``, and the resumable
    families' state after the rows before ``lo`` (used up by the job)."""

    cuts: np.ndarray
    lo: int
    hi: int
    carry: dict


def _feature_coverage(
    inp: RowInput, feats: FeatureMatrix, cfg: FoxhuntConfig, registry, run: _Run
) -> dict[str, int]:
    """Feature columns whose value at a cut row of ``run`` differs when computed without the rows
    after it: the resumable families in chunks of ``[lo, hi)`` ending at the cut rows, from the
    run's carried state, the others on the rows up to each cut."""
    cuts, lo, hi, carry = run.cuts, run.lo, run.hi, run.carry
    names, params, families = feature_stack(cfg, registry)
    found: dict[str, int] = {}
    chunked = tuple(n for n in names if resumable(families[n]))
    if chunked and hi > lo:
        bounds = np.unique(np.concatenate([[lo], cuts + 1, [hi]]))
        parts = [
            compute_stack(inp.rows(int(a), int(b)), chunked, params, families, carry=carry)
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]
        columns = parts[0].columns
        got = np.concatenate([p.values for p in parts])
        want = feats.values[lo:hi, _stack_columns(feats, columns)]
        differs = ~((got == want) | (np.isnan(got) & np.isnan(want)))
        bad = np.flatnonzero(differs.any(axis=0))
        _note(found, [columns[j] for j in bad], [lo + int(np.flatnonzero(differs[:, j])[0]) for j in bad])
    for name in (n for n in names if not resumable(families[n])):
        # A family without carried state: its rows up to each cut, computed on those rows alone.
        for c in cuts:
            fm = compute_stack(inp.rows(0, int(c) + 1), (name,), params, families)
            row, want = fm.values[-1], feats.values[int(c), _stack_columns(feats, fm.columns)]
            bad = np.flatnonzero(~((row == want) | (np.isnan(row) & np.isnan(want))))
            _note(found, [fm.columns[j] for j in bad], [int(c)] * len(bad))
    return found


def _label_coverage(inp: RowInput, base: DecisionBase, cuts: np.ndarray) -> dict[str, int]:
    """Label columns that differ, on the rows whose window ends by a cut, when computed on the rows
    up to the cut alone (the labels are recomputed per cut: no carried state)."""
    found: dict[str, int] = {}
    for c in cuts:
        settled = int(c) + 1 - base.span
        if settled <= 0:
            continue
        labels = label_columns(inp.rows(0, int(c) + 1), base.cfg)
        for name, v in base.labels.items():
            if not _same(v[:settled], labels[name][:settled]):
                _note(found, [name], [int(c)])
    return found


def _groups(cuts: np.ndarray, gap: int) -> list[np.ndarray]:
    """``cuts`` split into groups whose members lie more than ``gap`` rows apart (greedy, in order):
    the rows after one cut row, replaced, are then never another cut row of its group."""
    groups: list[list[int]] = []
    for c in cuts.tolist():
        for g in groups:
            if c - g[-1] > gap:
                g.append(c)
                break
        else:
            groups.append([c])
    return [np.asarray(g, np.int64) for g in groups]


def _observation_coverage(base: DecisionBase, cuts: np.ndarray, seed: int) -> dict[str, int]:
    """The observation (and normalised features) at each cut row, with the raw feature rows
    ``c + 1 .. c + PERTURBED_AHEAD`` after it replaced: what the agent sees at ``c`` must not move.
    The prices stay (the observation of a fresh episode reads the row's features and its state)."""
    rng = seeding.rng(seed)
    found: dict[str, int] = {}
    x, cols = base.features, base.cache.columns
    before = observe_rows(base.market, base.cfg, cuts)
    at = {c: j for j, c in enumerate(cuts.tolist())}
    for group in _groups(cuts, PERTURBED_AHEAD):
        ahead = (group[:, None] + np.arange(1, PERTURBED_AHEAD + 1)[None, :]).ravel()
        ahead = ahead[ahead < len(x)]
        other = x.copy()
        other[ahead] = (rng.normal(size=(len(ahead), x.shape[1])) * 100.0 + 1e3).astype(x.dtype)
        table = base.cache.table
        for j, name in enumerate(cols):
            table = table.set_column(table.column_names.index(name), name, pa.array(other[:, j]))
        cache = dataclasses.replace(base.cache, table=table)
        market = fold_market(cache, base.fold, base.cfg, base.instrument)
        if not _same(base.market.features[group], market.features[group]):
            _note(found, [NORMALISED], [int(group[0])])
        now = observe_rows(market, base.cfg, group)
        rows = [at[c] for c in group.tolist()]
        differs = ~((now == before[rows]) | (np.isnan(now) & np.isnan(before[rows]))).all(axis=1)
        if differs.any():
            _note(found, [OBSERVATION], [int(group[np.flatnonzero(differs)[0]])])
    return found


def _part(
    inp: RowInput, feats: FeatureMatrix, base: DecisionBase | None, cfg: FoxhuntConfig, registry, run: _Run
) -> dict[str, int]:
    """One coverage job: the features and labels at the cut rows of ``run``."""
    found = _feature_coverage(inp, feats, cfg, registry, run)
    if base is not None:
        found |= _label_coverage(inp, base, run.cuts)
    return found


def coverage_jobs(
    inp: RowInput,
    feats: FeatureMatrix,
    base: DecisionBase | None,
    cfg: FoxhuntConfig,
    registry: Mapping[str, Family] | None,
    seed: int,
    rows: int | None = None,
    parts: int = COVERAGE_PARTS,
) -> tuple[Coverage, list[Callable[[], dict[str, int]]]]:
    """The coverage check (module docstring) at ``rows`` cut rows (None: :func:`coverage_rows_needed`)
    as independent jobs (calls without arguments, for the guard's forked workers): the cut rows in
    ``parts`` runs of consecutive ones, each job the features and labels of one run (the families'
    state at its first row computed here, by one pass in ``parts`` chunks), and one for the
    observations. Each job returns ``{input: first row it moved at}``; :func:`covered` gathers them."""
    cuts = cut_rows(len(inp), coverage_rows_needed() if rows is None else rows, seed)
    summary = Coverage(rows=len(cuts), of_rows=max(len(inp) - 1, 0))
    runs = [r for r in np.array_split(cuts, max(1, min(parts, len(cuts)))) if len(r)]
    starts = [0] + [int(r[0]) for r in runs[1:]]  # each run's rows start after the one before's last cut
    ends = starts[1:] + [len(inp)]
    names, params, families = feature_stack(cfg, registry)
    chunked = tuple(n for n in names if resumable(families[n]))
    carries: list[dict] = []
    carry: dict = {}
    for lo, hi in zip(starts, ends, strict=True):
        carries.append(copy.deepcopy(carry))
        if chunked and hi < len(inp):  # the state at the next run's first row
            compute_stack(inp.rows(lo, hi), chunked, params, families, carry=carry)
    jobs: list[Callable[[], dict[str, int]]] = [
        partial(_part, inp, feats, base, cfg, registry, _Run(run, lo, hi, c))
        for run, lo, hi, c in zip(runs, starts, ends, carries, strict=True)
    ]
    if base is not None:
        jobs.append(partial(_observation_coverage, base, cuts, seed))
    return summary, jobs


def covered(summary: Coverage, found: Sequence[dict[str, int]]) -> Coverage:
    """``summary`` with what the coverage jobs found."""
    merged: dict[str, int] = {}
    for f in found:
        for name, row in f.items():
            merged[name] = min(merged.get(name, row), row)
    return dataclasses.replace(
        summary,
        leaking_columns=sorted(merged),
        first_leaking_row=min(merged.values()) if merged else None,
    )


# --- the input screen -----------------------------------------------------------------------------


def screen_problems(base: DecisionBase, folds: Sequence[FoldData], seed: int) -> tuple[list[str], int, str]:
    """``(problems, folds checked, why not)``: per fold, the input screen must come out bit-identical
    when every row outside the fold's collection rows (its features and prices) is replaced."""
    import torch

    from foxhunt.validation import screen as screening

    cfg = base.cfg
    keep = cfg.agent.network.input_screen
    if keep == 0:
        return [], 0, "the input screen is off (agent.network.input_screen = 0)"
    horizon = cfg.env.plan.barrier.horizon
    rng = seeding.rng(seed)
    out, checked = [], 0
    for fd in folds:
        try:
            periods = fold_periods(fd.fold, cfg.train)
        except FoxhuntError as exc:
            return out, checked, f"fold {fd.fold.index}: {exc.problem}"
        lo, hi = periods.collect_lo, periods.collect_hi
        market = fold_market(base.cache, fd, cfg, base.instrument)
        k = min(keep, len(market.feature_columns))
        try:
            before = screening.fold_screen(market, lo, hi, horizon, k)
        except ValueError as exc:
            return out, checked, str(exc)
        outside = torch.ones(market.rows, dtype=torch.bool)
        outside[lo:hi] = False
        features, mid = market.features.clone(), market.mid.clone()
        n = int(outside.sum())
        features[outside] = features.new_tensor(rng.normal(size=(n, features.shape[1])) * 3.0)
        mid[outside] = mid.new_tensor(float(mid[lo:hi].mean()) * np.exp(rng.normal(size=n) * 0.01))
        other = dataclasses.replace(market, features=features, mid=mid)
        after = screening.fold_screen(other, lo, hi, horizon, k)
        checked += 1
        if not (np.array_equal(before.ic, after.ic) and before.kept == after.kept):
            out.append(
                f"the input screen of fold {fd.fold.index} changed when only rows outside its training "
                f"(collection) rows [{lo}, {hi}) changed: it ranks columns on other rows "
                "(agent.network.input_screen)"
            )
    return out, checked, ""
