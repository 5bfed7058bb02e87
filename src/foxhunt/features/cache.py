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
**content hash** of every column (``content_hash``: column -> SHA-256 of its dtype, length and
values) and ``meta_hash`` (of the rest of the metadata). Every open verifies the metadata's keys
and hash, the row count and each column's hash, so a flipped byte, an edited close price, label
span or row count, or a cut row is one line naming the file, never other numbers.

The **schema hash** covers every code path and setting that changes a value: the families, the
frame/pipeline/bars code that turns events into rows, the stack's post-processing, the labels,
the normaliser, the layout, and the data/features/labels config. A cache whose stored hash
differs from the running code's is refused (docs/design.md §3). :func:`get_or_build` is the only way in:
a miss and a rebuild run the same :func:`build_cache`, and the caller always reads the file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from foxhunt.config.base import leaves
from foxhunt.config.models import FoxhuntConfig
from foxhunt.console import SILENT, Reporter
from foxhunt.data.arrow_io import read_ipc, write_ipc
from foxhunt.data.ingest import MarketData, expand_paths, load_market
from foxhunt.data.instrument import instrument_of_files
from foxhunt.domain.instrument import Instrument
from foxhunt.errors import FoxhuntError, door
from foxhunt.features.fingerprint import combine, digest, file_fingerprint, module_fingerprint
from foxhunt.features.frame import RowInput
from foxhunt.features.layout import STATE_LAYOUT
from foxhunt.features.pipeline import rows_from_market
from foxhunt.features.plugins import load_plugins, stack_families, with_plugins
from foxhunt.features.registry import FAMILIES
from foxhunt.features.stack import FeatureMatrix, compute_stack
from foxhunt.validation.folds import purged_walk_forward
from foxhunt.validation.labels import compute_labels, label_span

if TYPE_CHECKING:
    from foxhunt.validation.leaks import Prepared

# 2: per-column content hashes in the metadata (a version 1 cache has none and is rebuilt).
FORMAT_VERSION = 2
META_KEY = b"foxhunt"
REQUIRED_META = (
    "format_version",
    "schema_hash",
    "cache_key",
    "layout",
    "columns",
    "data_source",
    "row_unit",
    "sources",
    "rows",
    "config",
    "instrument",
    "label_span",
    "content_hash",
    "meta_hash",
)
"""The metadata keys a reader relies on; a cache lacking one is refused on open."""
_BUILD = door("foxhunt features build --data ...", "api.build_features(files, cfg, out_dir)")
REBUILD = f"delete it and rebuild it: {_BUILD} (a cache is derived data)"

# Every module whose code changes a cached value. The families are added from the registry.
HASHED_MODULES = (
    "foxhunt.data.dbn_read",
    "foxhunt.data.ingest",
    "foxhunt.data.book",
    "foxhunt.data.bars",
    "foxhunt.data.continuous",
    "foxhunt.data.sessions",
    "foxhunt.features.frame",
    "foxhunt.features.pipeline",
    "foxhunt.features.stack",
    "foxhunt.features.layout",
    "foxhunt.features._kernels",
    "foxhunt.features.cache",
    "foxhunt.validation.labels",
    "foxhunt.domain.barrier",
    "foxhunt.domain.exits",
    "foxhunt.validation.normalise",
)


class CacheMismatchError(FoxhuntError):
    """A cache file does not match the running code, config or sources."""


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
    """Hash of the running code and settings that produce the cache's values."""
    modules = [importlib.import_module(m) for m in HASHED_MODULES if _importable(m)]
    plugins = load_plugins(cfg.features)
    modules += [FAMILIES[name] for name in _families(cfg) if name not in plugins]
    parts = [f"format={FORMAT_VERSION}"]
    parts += [f"{m.__name__}={module_fingerprint(m)}" for m in modules]
    parts += [f"plugin {name}={p.fingerprint()}" for name, p in plugins.items()]  # the plug-in's code
    parts.append("state_layout=" + digest(STATE_LAYOUT.describe()))
    parts.append("config=" + digest(value_config(cfg)))
    return combine(parts)[:32]


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        return False
    return True


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
    (a per-session part of :mod:`foxhunt.features.distributed` is these columns of its rows)."""
    cols: dict[str, pa.Array] = {name: pa.array(v) for name, v in row_columns(inp).items()}
    for j, name in enumerate(fm.columns):
        cols[name] = pa.array(np.ascontiguousarray(fm.values[:, j]))
    for name, mask in fm.masks.items():
        cols[f"mask.{name}"] = pa.array(mask)
    for name, values in labels.items():
        cols[name] = pa.array(values)
    return cols


def seal_table(cols: dict[str, pa.Array], meta: dict[str, Any]) -> pa.Table:
    """The cache table: ``cols`` with ``meta`` plus every column's content hash and the meta hash."""
    meta = {**meta, "content_hash": {name: column_hash(array) for name, array in cols.items()}}
    meta["meta_hash"] = meta_hash(json.loads(json.dumps(meta)))  # as a reader will parse it
    schema = pa.schema([pa.field(k, v.type) for k, v in cols.items()], metadata={META_KEY: json.dumps(meta)})
    return pa.Table.from_arrays(list(cols.values()), schema=schema)


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


# --- integrity ---------------------------------------------------------------------------------


def column_hash(column: pa.Array | pa.ChunkedArray) -> str:
    """SHA-256 of a column's Arrow type, length and values (the same bytes at build and on load).

    SHA-256 rather than BLAKE2b or xxhash: hashlib's SHA-256 uses the CPU's SHA instructions and
    hashed a 150,000-row, 141-column cache (82 MB) in 0.06 s against 0.18 s for BLAKE2b, about a
    tenth of what turning the columns into numpy costs; xxhash would be a new dependency.
    """
    values = np.ascontiguousarray(column.to_numpy(zero_copy_only=False))
    h = hashlib.sha256(f"{column.type}|{len(column)}|".encode())
    h.update(values.view(np.uint8) if values.dtype == np.bool_ else values.data)
    return h.hexdigest()


def meta_hash(meta: dict[str, Any]) -> str:
    """SHA-256 of the metadata without its ``meta_hash`` (canonical JSON): an edited label span,
    row count or source list is refused like an edited column."""
    body = {k: v for k, v in meta.items() if k != "meta_hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def verify_content(path: Path, table: pa.Table, meta: dict[str, Any]) -> None:
    """Refuse a cache whose rows or column values are not the ones its metadata recorded."""
    if table.num_rows != meta["rows"]:
        raise CacheMismatchError(
            path, f"corrupt cache: {table.num_rows} rows, its metadata records {meta['rows']}", REBUILD
        )
    recorded: dict[str, str] = meta["content_hash"]
    if sorted(recorded) != sorted(table.column_names):
        raise CacheMismatchError(path, "corrupt cache: its columns are not the ones it recorded", REBUILD)
    bad = [name for name in table.column_names if column_hash(table.column(name)) != recorded[name]]
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise CacheMismatchError(
            path, f"corrupt cache: the content hash of column(s) {shown} does not match", REBUILD
        )


# --- reading -------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FeatureCache:
    """A loaded cache file: the Arrow table (memory-mapped) and its metadata."""

    path: Path
    table: pa.Table
    meta: dict[str, Any]

    @property
    def columns(self) -> list[str]:
        return list(self.meta["columns"])

    def features(self) -> np.ndarray:
        """[n, W] float32 feature matrix in layout order."""
        if not self.columns:
            return np.zeros((self.table.num_rows, 0), np.float32)
        return np.column_stack([self.column(c) for c in self.columns]).astype(np.float32, copy=False)

    def column(self, name: str) -> np.ndarray:
        return self.table.column(name).to_numpy(zero_copy_only=False)


def _stored_meta(path: Path) -> dict[str, Any]:
    """The metadata document as stored, of any format version (refused when it is not a JSON object)."""
    with pa.memory_map(str(path), "r") as source:
        schema = pa.ipc.open_file(source).schema
    raw = (schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise CacheMismatchError(path, "not a foxhunt feature cache (no metadata)", REBUILD)
    try:
        meta = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and bytes that are not UTF-8
        problem = f"corrupt cache: its metadata is not valid JSON ({exc})"
        raise CacheMismatchError(path, problem, REBUILD) from exc
    if not isinstance(meta, dict):
        raise CacheMismatchError(path, "corrupt cache: its metadata is not a JSON object", REBUILD)
    return meta


def read_meta(path: Path) -> dict[str, Any]:
    """The cache's metadata document, refused (one line) when it is not JSON, of another format
    version or lacks a key a reader needs."""
    meta = _stored_meta(path)
    if meta.get("format_version") != FORMAT_VERSION:
        raise CacheMismatchError(
            path,
            f"cache format {meta.get('format_version')!r}, this foxhunt reads format {FORMAT_VERSION} "
            "(with per-column content hashes)",
            REBUILD,
        )
    lacking = [key for key in REQUIRED_META if key not in meta]
    if lacking:
        raise CacheMismatchError(path, f"corrupt cache: its metadata lacks {', '.join(lacking)}", REBUILD)
    if meta["meta_hash"] != meta_hash(meta):
        raise CacheMismatchError(
            path, "corrupt cache: its metadata does not match its hash (edited or damaged)", REBUILD
        )
    return meta


def open_cache(path: str | Path, *, verify: bool = True) -> FeatureCache:
    """Read a cache file without checking it against the running code (``features info``).

    The metadata is always checked; ``verify`` also checks the row count and every column's content
    hash (off only where the caller reads the metadata alone and opens the cache again to use it).
    """
    path = Path(path)
    if not path.is_file():
        raise CacheMismatchError(path, "no such cache file", f"build it with {_BUILD}")
    try:
        meta = read_meta(path)
        table = read_ipc(path)
        if verify:
            verify_content(path, table, meta)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # a damaged schema: names not UTF-8
        raise CacheMismatchError(path, f"unreadable cache file ({exc})", REBUILD) from exc
    return FeatureCache(path=path, table=table, meta=meta)


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
            f"rebuild it: {_BUILD} (or delete the file)"
            if {"format_version", "schema_hash", "sources"} & set(diff)
            else "use the settings the cache was built with (drop the "
            f"{door('--set/--row-unit', 'overrides')} that differ), or build a cache with yours: {_BUILD}"
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
        return "schema_hash differs: built by other feature code"
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


def get_or_build(
    paths: Sequence[str | Path],
    cfg: FoxhuntConfig,
    out_dir: str | Path,
    *,
    regenerate: bool = True,
    progress: Reporter = SILENT,
    workers: int = 1,
    address: str | None = None,
    prepared: Prepared | None = None,
) -> FeatureCache:
    """The cache for ``paths`` under ``cfg``: loaded if a valid one exists, else built (same code).

    ``workers`` > 1 or a Ray ``address``: built one session group per task
    (:mod:`foxhunt.features.distributed`), the same file bit for bit. ``prepared``: what the leak
    guard read and computed from these files under this ``cfg``
    (:func:`foxhunt.validation.leaks.guard_prepared`); a build in this process starts from it instead
    of reading the files and computing the rows and features again (the same arrays)."""
    files = expand_paths(paths)
    sources = []
    with progress.task(f"hashing {len(files)} input file(s)", total=len(files), announce=False) as task:
        for p in files:
            sources.append(file_fingerprint(p))
            task.advance()
    schema = schema_hash(cfg)
    path = cache_path(Path(out_dir), cfg, cache_key(sources, cfg, schema))
    if path.is_file():
        try:
            cache = load_cache(path, cfg, sources)
            progress.say(f"features: reusing {path}")
            return cache
        except CacheMismatchError as exc:
            if not regenerate:
                raise
            # A cache is derived data: a damaged or stale one is rebuilt from the inputs, said aloud.
            progress.say(f"features: rebuilding {path.name} ({exc.problem})")
    elif not regenerate:
        _explain_missing(Path(out_dir), cfg, sources)
    if workers > 1 or address is not None:
        from foxhunt.features.distributed import build_by_session
        from foxhunt.parallel import open_executor

        with open_executor(workers, address=address, say=progress.say) as executor:
            with progress.task(f"features: {len(files)} DBN file(s), a task per session, {workers} at once"):
                build_by_session(files, cfg, path, sources, executor, progress)
        _remove_orphans(path, sources, cfg)
        return load_cache(path, cfg, sources)
    if prepared is not None and (prepared.files, prepared.settings) != (tuple(files), value_config(cfg)):
        prepared = None  # the guard read other files, or under other settings: none of it is this cache's
    if prepared is not None:
        with progress.task("features: labels, from the leak guard's rows and features"):
            build_cache(prepared.market, cfg, path, sources, prepared)
    else:
        with progress.task(f"features: reading {len(files)} DBN file(s)", total=2) as task:
            md = load_market(files, cfg.data, progress)
            task.update(description="features: computing rows, features and labels")
            task.advance()
            build_cache(md, cfg, path, sources)
            task.advance()
    _remove_orphans(path, sources, cfg)
    return load_cache(path, cfg, sources)


def _remove_orphans(kept: Path, sources: list[dict[str, Any]], cfg: FoxhuntConfig) -> None:
    """Delete the caches of the same sources and row unit that the running code can never load.

    A cache whose schema hash is not the running code's is refused by :func:`load_cache` forever
    after a code change, so without this every change of code would leave one more dead file
    beside the new one. Caches of other sources, row units or settings are kept: they are valid.
    """
    wanted = sorted(s["sha256"] for s in sources)
    for other in kept.parent.glob(f"features-{cfg.data.row_unit.value}-*.arrow"):
        if other == kept:
            continue
        try:
            meta = _stored_meta(other)  # an older format's too: its schema hash never loads
        except (CacheMismatchError, pa.ArrowException, OSError):
            continue  # not ours to judge (a foreign or half-readable file): leave it
        same_sources = sorted(s.get("sha256", "") for s in meta.get("sources", [])) == wanted
        if same_sources and not _loadable(meta, cfg):
            other.unlink(missing_ok=True)


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


def _explain_missing(out_dir: Path, cfg: FoxhuntConfig, sources: list[dict[str, Any]]) -> None:
    expected = expected_meta(cfg, sources)
    for other in sorted(out_dir.glob(f"features-{cfg.data.row_unit.value}-*.arrow")):
        diff = differences(read_meta(other), expected)
        raise CacheMismatchError(
            other,
            f"cache differs from what is asked in: {', '.join(diff)}",
            door(
                "rebuild with `foxhunt features build` (regeneration is disabled)",
                "rebuild it with api.build_features(..., regenerate=True)",
            ),
        )
    raise CacheMismatchError(out_dir, "no feature cache here", f"build one with {_BUILD}")
