"""foxhunt: deep-RL research for index futures from limit-order-book data.

The package is organised by stage of the data flow (see docs/design.md):
``data`` (DBN ingest, book rebuild, synthetic market, bars), then later stages.

The public Python API is :mod:`foxhunt.api` (``from foxhunt import api``). Its functions are not
copied to the package root: ``backtest``, ``train`` and ``config`` there are the stages' packages.
``foxhunt.api`` is imported on first use, so ``import foxhunt`` stays light (no torch).
"""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "api":
        import importlib

        return importlib.import_module("foxhunt.api")
    raise AttributeError(f"module 'foxhunt' has no attribute {name!r}")
