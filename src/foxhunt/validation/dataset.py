"""Folds of a feature cache with their normalisers: the one way later stages read training and
validation rows (the alpha check, the environment, the backtester).

Each fold's :class:`~foxhunt.validation.normalise.RobustScaler` is fitted on that fold's
training rows only and stored with it (:func:`save_folds` writes both as JSON); every path that
normalises calls :func:`foxhunt.validation.normalise.apply` through :meth:`FoldData.normalise`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.atomic import write_json
from foxhunt.validation.config import FoldParams
from foxhunt.validation.folds import Fold, purged_walk_forward
from foxhunt.validation.normalise import RobustScaler, apply, fit_robust


@dataclass(frozen=True, eq=False)
class FoldData:
    fold: Fold
    scaler: RobustScaler

    def normalise(self, x: np.ndarray) -> np.ndarray:
        """``x`` [n, F] with this fold's training-row statistics (the one normalisation path)."""
        return apply(self.scaler, x)

    def to_dict(self) -> dict[str, Any]:
        return {"fold": self.fold.summary(), "scaler": self.scaler.to_dict()}


def make_folds(
    features: np.ndarray, columns: tuple[str, ...] | list[str], params: FoldParams, label_span: int
) -> list[FoldData]:
    """Purged walk-forward folds of ``features`` rows, each with a scaler fitted on its training rows
    (its z-scores clipped at +-``params.normalise_clip``)."""
    folds = purged_walk_forward(len(features), params, label_span)
    clip = params.normalise_clip
    return [FoldData(f, fit_robust(features, f.train, tuple(columns), clip=clip)) for f in folds]


def save_folds(folds: list[FoldData], path: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """Write the folds' boundaries and scalers as JSON (atomically)."""
    return write_json(path, {**(extra or {}), "folds": [f.to_dict() for f in folds]})


def load_scalers(path: str | Path) -> list[RobustScaler]:
    """The stored scalers of a folds file, in fold order."""
    body = json.loads(Path(path).read_text())
    return [RobustScaler.from_dict(f["scaler"]) for f in body["folds"]]
