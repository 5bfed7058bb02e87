"""The base of every config model: frozen, unknown keys rejected.

Kept apart from :mod:`foxhunt.config.models` so that each stage can define its config sections
beside its code (``foxhunt.data.config``, a feature family's ``<Family>Config`` ...; docs/design.md §9)
without importing the root model, which imports them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict


class Device(StrEnum):
    """The torch device a setting asks for (``run.device``, ``serve.device``)."""

    AUTO = "auto"  # CUDA when available, else CPU
    CPU = "cpu"
    CUDA = "cuda"


class Frozen(BaseModel):
    """Base of every config section: immutable, unknown keys rejected, defaults validated."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


def leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config dump flattened to ``{"section.key": value}``: the keys that two configs are
    compared by (a cache's recorded settings, a run's recorded config against a resume's)."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    return out
