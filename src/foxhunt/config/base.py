"""The base of every config model: frozen, unknown keys rejected.

Kept apart from :mod:`foxhunt.config.models` so that stage packages can define their own config
sections (``foxhunt.features.market.Params`` ...) without importing the root model.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Base of every config section: immutable, unknown keys rejected, defaults validated."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)
