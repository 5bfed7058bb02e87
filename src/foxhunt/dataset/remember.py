"""What ``foxhunt features build --set ...`` set, remembered by a later command on the same files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from foxhunt.config.base import leaves
from foxhunt.config.models import FoxhuntConfig
from foxhunt.data.ingest import expand_paths
from foxhunt.dataset.cache import VALUE_SECTIONS, _loadable, config_from_cache, value_config
from foxhunt.features.cache_file import CacheMismatchError, stored_meta
from foxhunt.features.fingerprint import file_fingerprint


def remembered_config(
    paths: Sequence[str | Path], cfg: FoxhuntConfig, out_dir: str | Path, asked: Sequence[str] = ()
) -> tuple[FoxhuntConfig, list[str]]:
    """``cfg`` with the settings of the newest cache in ``out_dir`` built from the same files (their
    SHA-256), and those settings as ``key=value`` where they differ from ``cfg``'s: what ``foxhunt
    features build --data FILES --out DIR --set ...`` set is remembered by a later ``foxhunt run
    --data FILES`` into the run folder holding ``DIR`` (a short file's ``data.bar_seconds``), rather
    than repeated on it. ``asked`` (the ``--set`` keys of the later command): when one is a cached
    value's, the command means its own settings and nothing is taken. No such cache: ``cfg`` as it is.
    """
    folder = Path(out_dir)
    if not folder.is_dir() or any(k.startswith(s + ".") or k == s for k in asked for s in VALUE_SECTIONS):
        return cfg, []
    wanted = sorted(file_fingerprint(p)["sha256"] for p in expand_paths(paths))
    found = []
    for other in folder.glob("features-*.arrow"):
        try:
            meta = stored_meta(other)
        except (CacheMismatchError, pa.ArrowException, OSError):
            continue  # not a cache this code reads: not remembered
        same = sorted(s.get("sha256", "") for s in meta.get("sources", [])) == wanted
        if same and _loadable(meta, cfg):
            found.append((str(meta.get("created_at", "")), other))
    if not found:
        return cfg, []
    merged = config_from_cache(max(found)[1], cfg)
    before, after = leaves(value_config(cfg)), leaves(value_config(merged))
    changed = [f"{k}={after[k]!r}" for k in sorted(after) if before.get(k) != after[k]]
    return merged, changed
