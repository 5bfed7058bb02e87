"""The feature cache: one Arrow IPC file per (sources, data_source, row unit, config, schema hash).

Contents (one row per bar or snapshot row): ``ts`` (when the row is known), ``trade_date``,
``segment_start``, the price path ``close``/``high``/``low`` (float64, for labels and the
backtester), the touch ``bid``/``ask``/``bid_size``/``ask_size`` and traded ``volume`` (for
execution), every feature column ``family.slot`` (float32), one ``mask.<family>`` per family,
and the labels: ``label.dir_h<K>`` (sign of the move over K rows, int8) with
``label.dir_h<K>.valid``, and the triple-barrier ``label.outcome`` (profit/stop/timeout, int8)
with ``label.outcome.valid`` and ``label.outcome.exit`` (rows to the exit).

Metadata (JSON under the schema key ``foxhunt``): format version, schema hash, cache key, the
stack layout and the RL state layout (names, offsets, widths), data_source, row unit, source
fingerprints, row count, creation time, the config sections that shape values, coverage, and the
content hashes that every open verifies (:mod:`foxhunt.features.cache_file`, the file's format).

The **schema hash** covers every code path and setting that changes a value: the digest of the
package's source (the one numba stamps its kernels with: any edit of foxhunt's code rebuilds a cache,
as it recompiles the kernels), the code of plug-in families, the RL state layout, and the value
sections of the config (:data:`VALUE_SECTIONS`). A cache whose stored hash differs from the running
code's is refused (docs/design.md §3).
:func:`foxhunt.dataset.build.get_or_build` is the only way in: a miss and a rebuild run the same
:func:`build_cache`, and the caller always reads the file.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from foxhunt.config.base import leaves
from foxhunt.config.models import FoxhuntConfig
from foxhunt.data.arrow_io import write_ipc
from foxhunt.data.ingest import MarketData
from foxhunt.data.instrument import instrument_of_files
from foxhunt.domain.instrument import Instrument
from foxhunt.errors import FoxhuntError, door
from foxhunt.features.cache_file import (
    BUILD,
    FORMAT_VERSION,
    CacheMismatchError,
    FeatureCache,
    open_cache,
    seal_table,
)
from foxhunt.features.fingerprint import combine, digest, module_fingerprint
from foxhunt.features.frame import RowInput
from foxhunt.features.layout import STATE_LAYOUT
from foxhunt.features.pipeline import rows_from_market
from foxhunt.features.plugins import load_plugins, stack_families, with_plugins
from foxhunt.features.registry import FAMILIES
from foxhunt.features.stack import FeatureMatrix, compute_stack
from foxhunt.jit import PACKAGE, package_digest
from foxhunt.validation.folds import purged_walk_forward
from foxhunt.validation.labels import compute_labels, label_span

if TYPE_CHECKING:
    from foxhunt.dataset.prepared import Prepared

CODE_ROOT = PACKAGE
"""The source folder whose digest the schema hash holds: foxhunt's own (a test points it at a copy)."""


def _families(cfg: FoxhuntConfig) -> tuple[str, ...]:
    return stack_families(cfg.data.row_unit, load_plugins(cfg.features))


def _feature_params(cfg: FoxhuntConfig) -> dict[str, Any]:
    builtin = {name: getattr(cfg.features, name) for name in type(cfg.features).model_fields}
    return builtin | {name: p.params for name, p in load_plugins(cfg.features).items()}


def horizons(cfg: FoxhuntConfig) -> tuple[int, ...]:
    return tuple(cfg.labels.horizons(cfg.data.row_unit))


def barrier_horizon(cfg: FoxhuntConfig) -> int:
    return int(cfg.env.plan.barrier.horizon)


# The config sections that change cached values (not seeds, devices or training), as dotted paths:
# the triple barrier of the outcome labels is the env plan's (one home, env.plan.barrier).
VALUE_SECTIONS = ("data", "features", "labels", "instrument", "env.plan.barrier")


def _subtree(tree: Any, path: str) -> Any:
    """The value at a dotted ``path`` of a nested config dump (None where it is missing)."""
    for part in path.split("."):
        tree = tree.get(part) if isinstance(tree, dict) else None
    return tree


def _graft(tree: dict[str, Any], path: str, value: Any) -> None:
    """Set the value at a dotted ``path`` of a nested config dump."""
    *parents, last = path.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[last] = value


def value_config(cfg: FoxhuntConfig) -> dict[str, Any]:
    """The config sections that change cached values (not seeds, devices or training)."""
    dump = cfg.model_dump(mode="json")
    return {section: _subtree(dump, section) for section in VALUE_SECTIONS}


def schema_hash(cfg: FoxhuntConfig) -> str:
    """Hash of the running code and settings that produce the cache's values.

    The code is one fingerprint, the one numba stamps every cached kernel with
    (:func:`foxhunt.jit.package_digest`: every ``.py`` file of the package, its path and bytes), so
    no list of modules can miss one that changes a value; code outside the package that the stack
    runs (a plug-in, a family registered at run time) is hashed by what its module holds."""
    plugins = load_plugins(cfg.features)
    outside = [FAMILIES[n] for n in _families(cfg) if n not in plugins and not _own(FAMILIES[n])]
    parts = [f"format={FORMAT_VERSION}", "code=" + package_digest(str(CODE_ROOT)).hex()]
    parts += [f"family {m.__name__}={module_fingerprint(m)}" for m in outside]
    parts += [f"plugin {name}={p.fingerprint()}" for name, p in plugins.items()]  # the plug-in's code
    parts.append("state_layout=" + digest(STATE_LAYOUT.describe()))
    parts.append("config=" + digest(value_config(cfg)))
    return combine(parts)[:32]


def _own(module: ModuleType) -> bool:
    """Whether a family's code is foxhunt's (in the package digest) rather than registered at run time."""
    return module.__name__.split(".")[0] == "foxhunt"


def cache_key(sources: list[dict[str, Any]], cfg: FoxhuntConfig, schema: str) -> str:
    return digest(
        {
            "sources": sorted(s["sha256"] for s in sources),
            "data_source": cfg.data.data_source.value,
            "row_unit": cfg.data.row_unit.value,
            "features": value_config(cfg),
            "schema_hash": schema,
        }
    )[:20]


def cache_path(out_dir: Path, cfg: FoxhuntConfig, key: str) -> Path:
    return Path(out_dir) / f"features-{cfg.data.row_unit.value}-{cfg.data.data_source.value}-{key}.arrow"


# --- computing ---------------------------------------------------------------------------------


def feature_stack(
    cfg: FoxhuntConfig, registry=None
) -> tuple[tuple[str, ...], dict[str, Any], dict[str, Any]]:
    """``(family names, their params, the registry)`` of the configured stack: what
    :func:`compute_features` runs (the leak guard's coverage check runs them family by family)."""
    families = with_plugins(load_plugins(cfg.features)) | dict(registry or {})
    return _families(cfg), _feature_params(cfg), families


def compute_features(inp: RowInput, cfg: FoxhuntConfig, registry=None, carry=None) -> FeatureMatrix:
    """The configured stack on ``inp`` (the leak guard and the cache both call this; foxhunt serve
    with ``carry``, the families' state after the rows before ``inp``: compute_stack)."""
    names, params, families = feature_stack(cfg, registry)
    return compute_stack(inp, names, params, families, carry=carry)


def label_columns(inp: RowInput, cfg: FoxhuntConfig) -> dict[str, np.ndarray]:
    labels = compute_labels(inp, cfg.labels, cfg.env.plan.barrier)
    out: dict[str, np.ndarray] = {}
    for j, k in enumerate(labels.horizons):
        out[f"label.dir_h{k}"] = labels.direction[:, j]
        out[f"label.dir_h{k}.valid"] = labels.direction_valid[:, j]
    out["label.outcome"] = labels.outcome
    out["label.outcome.valid"] = labels.outcome_valid
    out["label.outcome.exit"] = labels.exit_offset.astype(np.int32)
    return out


def _table(inp: RowInput, fm: FeatureMatrix, labels: dict[str, np.ndarray], meta: dict[str, Any]) -> pa.Table:
    return seal_table(table_columns(inp, fm, labels), meta)


def row_columns(inp: RowInput) -> dict[str, np.ndarray]:
    """The cache's columns before the features: the rows' time, prices, touch and flow."""
    return {
        "ts": inp.ts.astype(np.int64),
        "trade_date": inp.trade_date.astype(np.int64),
        "segment_start": inp.segment_start,
        "close": inp.close.astype(np.float64),
        "high": inp.high.astype(np.float64),
        "low": inp.low.astype(np.float64),
        # The touch and the flow, for execution in the environment and the backtester (raw, not
        # features: NaN/0 where unknown, e.g. ohlcv data).
        "bid": inp.bid_px[:, 0].astype(np.float64),
        "ask": inp.ask_px[:, 0].astype(np.float64),
        "bid_size": inp.bid_sz[:, 0].astype(np.float64),
        "ask_size": inp.ask_sz[:, 0].astype(np.float64),
        "volume": np.where(inp.volume_known(), inp.volume, np.nan),  # NaN: no trade data
    }


def table_columns(inp: RowInput, fm: FeatureMatrix, labels: dict[str, np.ndarray]) -> dict[str, pa.Array]:
    """The cache's columns, in file order: the rows' prices and touch, the features, masks, labels
    (a per-session part of :mod:`foxhunt.dataset.distributed` is these columns of its rows)."""
    cols: dict[str, pa.Array] = {name: pa.array(v) for name, v in row_columns(inp).items()}
    for j, name in enumerate(fm.columns):
        cols[name] = pa.array(np.ascontiguousarray(fm.values[:, j]))
    for name, mask in fm.masks.items():
        cols[f"mask.{name}"] = pa.array(mask)
    for name, values in labels.items():
        cols[name] = pa.array(values)
    return cols


def build_cache(
    md: MarketData,
    cfg: FoxhuntConfig,
    path: Path,
    sources: list[dict[str, Any]],
    prepared: Prepared | None = None,
) -> Path:
    """Compute rows, features and labels from ``md`` and write the cache file atomically.

    Spreads and book distances are measured in the data's own tick (its instrument: definitions,
    the built-in table, or ``[instrument]``), so a 6E or CL cache is not scaled by ES's 0.25.
    ``prepared``: the leak guard's rows and features of this ``md`` in that tick, used as they are.
    """
    instrument = instrument_of_files([s["path"] for s in sources], cfg.instrument, where="--data")
    if prepared is not None and prepared.tick_size == float(instrument.tick_size):
        inp = prepared.rows
    else:
        prepared = None
        inp = rows_from_market(md, cfg.data, tick_size=instrument.tick_size)
    # Rows too few for the configured folds are refused before anything is computed or written:
    # every command that reads a cache splits it into these folds (TooFewRowsError, one line).
    purged_walk_forward(len(inp), cfg.folds, label_span(horizons(cfg), barrier_horizon(cfg)))
    fm = prepared.features if prepared is not None else compute_features(inp, cfg)
    labels = label_columns(inp, cfg)
    meta = cache_meta(cfg, sources, instrument, fm, len(inp))
    return write_ipc(_table(inp, fm, labels, meta), path)


def cache_meta(
    cfg: FoxhuntConfig, sources: list[dict[str, Any]], instrument: Instrument, fm: FeatureMatrix, rows: int
) -> dict[str, Any]:
    """The cache's metadata before its hashes (:func:`seal_table` adds them)."""
    schema = schema_hash(cfg)
    coverage = fm.coverage()
    return {
        "format_version": FORMAT_VERSION,
        "schema_hash": schema,
        "cache_key": cache_key(sources, cfg, schema),
        "layout": fm.layout.describe(),
        "state_layout": STATE_LAYOUT.describe(),
        "columns": list(fm.columns),
        "data_source": cfg.data.data_source.value,
        "row_unit": cfg.data.row_unit.value,
        "sources": sources,
        "rows": rows,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "config": value_config(cfg),
        "coverage": {c: round(float(v), 6) for c, v in zip(fm.columns, coverage, strict=True)},
        # Columns set to 0 because the input lacks book depth or trades (column -> MaskReason).
        "masked": {c: r.value for c, r in fm.masked.items()},
        "instrument": instrument.to_dict(),
        "label_span": label_span(horizons(cfg), barrier_horizon(cfg)),
        "horizons": list(horizons(cfg)),
    }


def differences(meta: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """Which of the identifying fields differ between a stored and an expected metadata."""
    out = []
    for field in ("format_version", "schema_hash", "data_source", "row_unit", "config", "sources"):
        if field == "sources":
            a = sorted(s["sha256"] for s in meta.get("sources", []))
            b = sorted(s["sha256"] for s in expected["sources"])
            if a != b:
                out.append("sources")
        elif meta.get(field) != expected[field]:
            out.append(field)
    return out


def expected_meta(cfg: FoxhuntConfig, sources: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "schema_hash": schema_hash(cfg),
        "data_source": cfg.data.data_source.value,
        "row_unit": cfg.data.row_unit.value,
        "config": json.loads(json.dumps(value_config(cfg))),
        "sources": sources,
    }


def load_cache(
    path: str | Path, cfg: FoxhuntConfig, sources: list[dict[str, Any]] | None = None
) -> FeatureCache:
    """Open a cache; refuse it unless it matches the running code, ``cfg`` and ``sources``."""
    cache = open_cache(path)
    expected = expected_meta(cfg, sources if sources is not None else cache.meta.get("sources", []))
    diff = differences(cache.meta, expected)
    if diff:
        if "config" in diff and "schema_hash" in diff:
            diff.remove("schema_hash")  # the settings are hashed into it: name them, not the hash
        detail = "; ".join(_describe(f, cache.meta.get(f), expected[f]) for f in diff)
        fix = (
            f"rebuild it: {BUILD} (or delete the file)"
            if {"format_version", "schema_hash", "sources"} & set(diff)
            else "use the settings the cache was built with (drop the "
            f"{door('--set/--row-unit', 'overrides')} that differ), or build a cache with yours: {BUILD}"
        )
        raise CacheMismatchError(cache.path, f"stale feature cache ({detail})", fix)
    return cache


def _describe(field: str, cached: Any, now: Any) -> str:
    """One mismatching field in words, whole values only (never cut mid-word)."""
    if field == "config":
        a, b = leaves(cached or {}), leaves(now)
        keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        return "settings differ: " + ", ".join(f"{k} cached {a.get(k)!r}, now {b.get(k)!r}" for k in keys)
    if field == "sources":
        return "built from other input files"
    if field == "schema_hash":
        # The package's every .py file is hashed: a file edited while a job or a seeds study runs
        # makes its later processes refuse the cache it built (it happened twice in measured studies).
        return (
            "schema_hash differs: built by other foxhunt code (a .py file of the package, a plug-in or "
            "the state layout changed since; editing the checkout while a job or study runs does this: "
            "run long studies from a checkout nobody edits, e.g. a git worktree)"
        )
    return f"{field} cached {cached!r}, now {now!r}"


def config_from_cache(path: str | Path, cfg: FoxhuntConfig, asked: Sequence[str] = ()) -> FoxhuntConfig:
    """``cfg`` with its value sections (row unit, data source, features, labels) taken from the cache.

    A command given ``--cache FILE`` reads what the cache holds from the cache, not from a profile
    the user has to repeat. ``asked`` are the ``section.key`` names the user set explicitly (``--set``,
    ``--row-unit``): one that contradicts the cache is refused, naming both values, rather than
    silently dropped.
    """
    from foxhunt.config.loader import validate_tree

    cache = open_cache(path, verify=False)  # the metadata only: the caller's load_cache verifies
    stored = cache.meta.get("config", {})
    dump = cfg.model_dump(mode="json")
    conflicts = []
    for key in asked:
        section = next((s for s in VALUE_SECTIONS if key.startswith(s + ".")), None)
        if section is None or section not in stored:
            continue
        rest = key.removeprefix(section + ".")
        cached, now = _subtree(stored[section], rest), _subtree(_subtree(dump, section), rest)
        if cached != now:
            conflicts.append(f"{key}={now!r} (the cache has {cached!r})")
    if conflicts:
        raise CacheMismatchError(
            cache.path,
            "the cache was built with other settings than asked: " + ", ".join(conflicts),
            "drop those settings to use this cache as it is, or build one with them "
            f"({door('foxhunt features build --data ... --set ...', 'api.build_features')})",
        )
    for section in (s for s in VALUE_SECTIONS if s in stored):
        _graft(dump, section, stored[section])
    merged = validate_tree(dump, f"the settings of cache {cache.path.name}")
    assert merged is not None  # cross checks on: an invalid tree raised
    return merged


def _loadable(meta: dict[str, Any], cfg: FoxhuntConfig) -> bool:
    """Whether the running code would accept a cache of ``meta`` under the settings it was built with."""
    from foxhunt.config.loader import validate_tree

    dump = cfg.model_dump(mode="json")
    for section in (s for s in VALUE_SECTIONS if s in meta.get("config", {})):
        _graft(dump, section, meta["config"][section])
    try:
        own = validate_tree(dump, "cache")
    except FoxhuntError:
        return False  # settings the running code no longer accepts
    return own is not None and meta.get("schema_hash") == schema_hash(own)
