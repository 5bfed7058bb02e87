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
fingerprints, row count, creation time, the config sections that shape values, and coverage.

The **schema hash** covers every code path and setting that changes a value: the families, the
frame/pipeline/bars code that turns events into rows, the stack's post-processing, the labels,
the normaliser, the layout, and the data/features/labels config. A cache whose stored hash
differs from the running code's is refused (SPEC §4). :func:`get_or_build` is the only way in:
a miss and a rebuild run the same :func:`build_cache`, and the caller always reads the file.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from foxhunt.config.models import FoxhuntConfig
from foxhunt.data.arrow_io import read_ipc, write_ipc
from foxhunt.data.ingest import MarketData, expand_paths, load_market
from foxhunt.data.schemas import RowUnit
from foxhunt.errors import FoxhuntError
from foxhunt.features.fingerprint import combine, digest, file_fingerprint, module_fingerprint
from foxhunt.features.frame import RowInput
from foxhunt.features.layout import STACK_FAMILIES, STATE_LAYOUT
from foxhunt.features.pipeline import rows_from_market
from foxhunt.features.registry import FAMILIES
from foxhunt.features.stack import FeatureMatrix, compute_stack
from foxhunt.validation.labels import compute_labels, label_span

FORMAT_VERSION = 1
META_KEY = b"foxhunt"

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
    "foxhunt.validation.normalise",
)


class CacheMismatchError(FoxhuntError):
    """A cache file does not match the running code, config or sources."""


def _families(row_unit: RowUnit) -> tuple[str, ...]:
    return STACK_FAMILIES[row_unit]


def _feature_params(cfg: FoxhuntConfig) -> dict[str, Any]:
    return {name: getattr(cfg.features, name) for name in type(cfg.features).model_fields}


def horizons(cfg: FoxhuntConfig) -> tuple[int, ...]:
    return tuple(cfg.labels.horizons(cfg.data.row_unit))


def barrier_horizon(cfg: FoxhuntConfig) -> int:
    return int(cfg.labels.barrier_horizon(cfg.data.row_unit))


def value_config(cfg: FoxhuntConfig) -> dict[str, Any]:
    """The config sections that change cached values (not seeds, devices or training)."""
    dump = cfg.model_dump(mode="json")
    return {"data": dump["data"], "features": dump["features"], "labels": dump["labels"]}


def schema_hash(cfg: FoxhuntConfig) -> str:
    """Hash of the running code and settings that produce the cache's values."""
    modules = [importlib.import_module(m) for m in HASHED_MODULES if _importable(m)]
    modules += [FAMILIES[name] for name in _families(cfg.data.row_unit)]
    parts = [f"format={FORMAT_VERSION}"]
    parts += [f"{m.__name__}={module_fingerprint(m)}" for m in modules]
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


def compute_features(inp: RowInput, cfg: FoxhuntConfig, registry=None) -> FeatureMatrix:
    """The configured stack on ``inp`` (the leak guard and the cache both call this)."""
    return compute_stack(inp, _families(cfg.data.row_unit), _feature_params(cfg), registry)


def label_columns(inp: RowInput, cfg: FoxhuntConfig) -> dict[str, np.ndarray]:
    labels = compute_labels(inp, cfg.labels)
    out: dict[str, np.ndarray] = {}
    for j, k in enumerate(labels.horizons):
        out[f"label.dir_h{k}"] = labels.direction[:, j]
        out[f"label.dir_h{k}.valid"] = labels.direction_valid[:, j]
    out["label.outcome"] = labels.outcome
    out["label.outcome.valid"] = labels.outcome_valid
    out["label.outcome.exit"] = labels.exit_offset.astype(np.int32)
    return out


def _table(inp: RowInput, fm: FeatureMatrix, labels: dict[str, np.ndarray], meta: dict[str, Any]) -> pa.Table:
    cols: dict[str, pa.Array] = {
        "ts": pa.array(inp.ts.astype(np.int64)),
        "trade_date": pa.array(inp.trade_date.astype(np.int64)),
        "segment_start": pa.array(inp.segment_start),
        "close": pa.array(inp.close.astype(np.float64)),
        "high": pa.array(inp.high.astype(np.float64)),
        "low": pa.array(inp.low.astype(np.float64)),
        # The touch and the flow, for execution in the environment and the backtester (raw, not
        # features: NaN/0 where unknown, e.g. ohlcv data).
        "bid": pa.array(inp.bid_px[:, 0].astype(np.float64)),
        "ask": pa.array(inp.ask_px[:, 0].astype(np.float64)),
        "bid_size": pa.array(inp.bid_sz[:, 0].astype(np.float64)),
        "ask_size": pa.array(inp.ask_sz[:, 0].astype(np.float64)),
        "volume": pa.array(inp.volume.astype(np.float64)),
    }
    for j, name in enumerate(fm.columns):
        cols[name] = pa.array(np.ascontiguousarray(fm.values[:, j]))
    for name, mask in fm.masks.items():
        cols[f"mask.{name}"] = pa.array(mask)
    for name, values in labels.items():
        cols[name] = pa.array(values)
    schema = pa.schema([pa.field(k, v.type) for k, v in cols.items()], metadata={META_KEY: json.dumps(meta)})
    return pa.Table.from_arrays(list(cols.values()), schema=schema)


def build_cache(md: MarketData, cfg: FoxhuntConfig, path: Path, sources: list[dict[str, Any]]) -> Path:
    """Compute rows, features and labels from ``md`` and write the cache file atomically."""
    inp = rows_from_market(md, cfg.data)
    fm = compute_features(inp, cfg)
    labels = label_columns(inp, cfg)
    schema = schema_hash(cfg)
    coverage = fm.coverage()
    meta = {
        "format_version": FORMAT_VERSION,
        "schema_hash": schema,
        "cache_key": cache_key(sources, cfg, schema),
        "layout": fm.layout.describe(),
        "state_layout": STATE_LAYOUT.describe(),
        "columns": list(fm.columns),
        "data_source": cfg.data.data_source.value,
        "row_unit": cfg.data.row_unit.value,
        "sources": sources,
        "rows": len(inp),
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "config": value_config(cfg),
        "coverage": {c: round(float(v), 6) for c, v in zip(fm.columns, coverage, strict=True)},
        "label_span": label_span(horizons(cfg), barrier_horizon(cfg)),
        "horizons": list(horizons(cfg)),
    }
    return write_ipc(_table(inp, fm, labels, meta), path)


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


def read_meta(path: Path) -> dict[str, Any]:
    schema = pa.ipc.open_file(pa.memory_map(str(path), "r")).schema
    raw = (schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise CacheMismatchError(path, "not a foxhunt feature cache (no metadata)", "rebuild it")
    return json.loads(raw)


def open_cache(path: str | Path) -> FeatureCache:
    """Read a cache file without checking it against the running code (``features info``)."""
    path = Path(path)
    if not path.is_file():
        raise CacheMismatchError(path, "no such cache file", "build it with `foxhunt features build`")
    try:
        meta = read_meta(path)
        table = read_ipc(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise CacheMismatchError(path, f"unreadable cache file ({exc})", "delete it and rebuild") from exc
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
        detail = "; ".join(
            f"{f}: cached {str(cache.meta.get(f))[:60]!s} != now {str(expected[f])[:60]!s}" for f in diff
        )
        raise CacheMismatchError(
            cache.path,
            f"stale feature cache ({detail})",
            "rebuild it: foxhunt features build --data ... (or delete the file)",
        )
    return cache


def get_or_build(
    paths: Sequence[str | Path], cfg: FoxhuntConfig, out_dir: str | Path, *, regenerate: bool = True
) -> FeatureCache:
    """The cache for ``paths`` under ``cfg``: loaded if a valid one exists, else built (same code)."""
    files = expand_paths(paths)
    sources = [file_fingerprint(p) for p in files]
    schema = schema_hash(cfg)
    path = cache_path(Path(out_dir), cfg, cache_key(sources, cfg, schema))
    if path.is_file():
        try:
            return load_cache(path, cfg, sources)
        except CacheMismatchError:
            if not regenerate:
                raise
    elif not regenerate:
        _explain_missing(Path(out_dir), cfg, sources)
    md = load_market(files, cfg.data)
    build_cache(md, cfg, path, sources)
    return load_cache(path, cfg, sources)


def _explain_missing(out_dir: Path, cfg: FoxhuntConfig, sources: list[dict[str, Any]]) -> None:
    expected = expected_meta(cfg, sources)
    for other in sorted(out_dir.glob(f"features-{cfg.data.row_unit.value}-*.arrow")):
        diff = differences(read_meta(other), expected)
        raise CacheMismatchError(
            other,
            f"cache differs from what is asked in: {', '.join(diff)}",
            "rebuild with `foxhunt features build` (regeneration is disabled)",
        )
    raise CacheMismatchError(out_dir, "no feature cache here", "build one with `foxhunt features build`")
