"""The domain's config section: ``[instrument]``, overrides of the traded contract's specification.

It lives here, beside nothing but the shared base, so that the root config
(:mod:`foxhunt.config.models`) composes it the way it composes every stage's ``<stage>/config.py``;
:mod:`foxhunt.domain.instrument` applies it.
"""

from __future__ import annotations

from pydantic import Field

from foxhunt.config.base import Frozen


class InstrumentConfig(Frozen):
    """The ``[instrument]`` config section: overrides of the contract specification, field by field;
    every field None (the default) takes the value from the data."""

    root: str | None = Field(
        None,
        pattern=r"^[A-Z0-9]{1,6}$",
        description="Product root to take from the built-in table (ES, MES, NQ, 6E, ...) whatever the "
        "data's symbols say; None: from the data.",
    )
    tick_size: float | None = Field(
        None, gt=0, le=1e6, description="Minimum price increment in price units; None: from the data."
    )
    point_value: float | None = Field(
        None,
        gt=0,
        le=1e9,
        description="Currency per price unit per contract (the multiplier: ES $50); None: from the data.",
    )
    currency: str | None = Field(
        None, pattern=r"^[A-Z]{3}$", description="Currency of the PnL (ISO 4217, USD); None: from the data."
    )
    session_hours: float | None = Field(
        None,
        gt=0,
        le=24,
        description="Trading hours per session day (CME Globex equity index: 23); None: from the table.",
    )
    trading_days: int | None = Field(
        None, ge=1, le=366, description="Trading days per year for annualisation; None: 252."
    )
