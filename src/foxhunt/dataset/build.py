"""The one way to a feature cache: :func:`get_or_build` loads a valid one or builds it.

A miss and a rebuild run the same :func:`foxhunt.dataset.cache.build_cache` (or its per-session
form, :mod:`foxhunt.dataset.distributed`), and the caller always reads the file it wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from foxhunt.config.models import FoxhuntConfig
from foxhunt.console import SILENT, Reporter
from foxhunt.data.ingest import expand_paths, load_market
from foxhunt.dataset.cache import (
    _loadable,
    build_cache,
    cache_key,
    cache_path,
    differences,
    expected_meta,
    load_cache,
    schema_hash,
    value_config,
)
from foxhunt.dataset.distributed import build_by_session
from foxhunt.dataset.prepared import Prepared
from foxhunt.errors import door
from foxhunt.features.cache_file import BUILD, CacheMismatchError, FeatureCache, read_meta, stored_meta
from foxhunt.features.fingerprint import file_fingerprint
from foxhunt.parallel import open_executor


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
    (:mod:`foxhunt.dataset.distributed`), the same file bit for bit. ``prepared``: what the leak
    guard read and computed from these files under this ``cfg``
    (:func:`foxhunt.dataset.leaks.guard_prepared`); a build in this process starts from it instead
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
            meta = stored_meta(other)  # an older format's too: its schema hash never loads
        except (CacheMismatchError, pa.ArrowException, OSError):
            continue  # not ours to judge (a foreign or half-readable file): leave it
        same_sources = sorted(s.get("sha256", "") for s in meta.get("sources", [])) == wanted
        if same_sources and not _loadable(meta, cfg):
            other.unlink(missing_ok=True)


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
    raise CacheMismatchError(out_dir, "no feature cache here", f"build one with {BUILD}")
