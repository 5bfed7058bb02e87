"""Per-fold robust normalisation: fitted on training rows only, applied by one function.

:func:`apply` is **the** normalisation every loader path uses (docs/design.md §4, §10 invariant 2);
its rule is named by :data:`NORMALISE_METHOD`, which the cache's schema hash and a stored scaler carry.

Rule (per column ``j``)
-----------------------
* **Fit** (:func:`fit_robust`) on the training rows only, over the column's *finite, non-zero*
  values: 0 is the "no signal" sentinel of every feature (docs/design.md §2), so padding and missing slots do
  not drag the statistics towards 0.

  - ``median`` = their median; ``scale`` = 1.4826 * MAD (median absolute deviation from the
    median; 1.4826 makes it the standard deviation for Gaussian data, and MAD survives up to 50%
    outliers, where the IQR survives 25%);
  - if MAD = 0 (more than half of the values equal the median, e.g. a spread of one tick most of
    the time): ``scale`` = 1.253314 * mean absolute deviation from the median (again the Gaussian
    standard deviation; the fallback of Iglewicz-Hoaglin's modified z-score);
  - if that is 0 too, every non-zero value equals one ``c``: ``median = 0, scale = |c|``, so ``c``
    maps to ``sign(c)`` and stays distinct from the sentinel (a flag column keeps its information);
  - a column without non-zero training values: ``median = 0, scale = 1`` (the identity, clipped).

  The MAD is scipy's ``median_abs_deviation`` (the same two medians as before, bit for bit).
  scikit-learn's ``RobustScaler`` is not used: it scales by the interquartile range over every
  value, zeros included, with no sentinel, fallback or clip, so it is another rule, not another
  implementation of this one. On the synthetic market's snapshot cache (3 folds x 113 columns) its
  scales differ from these by 8.6% at the median and by more than 10% in 167 of the 339, and 73%
  of the normalised values change (``bench/stats_agreement.py``;
  docs/results/2026-12-07-library-statistics.md); the scaler feeds training and the cache key, so
  its numbers stay as they are. The constant 1.4826 stays too
  (``scale="normal"`` would use 1 / Phi^-1(3/4) = 1.482602..., other float32 bits).
* **Apply**: ``clip((x - median) / scale, -clip, +clip)`` in float32, except that a raw **0 stays
  exactly 0** (the sentinel survives normalisation) and NaN becomes 0 (no signal); +-inf become
  +-clip. The output is always finite. A non-zero value equal to the median also maps to 0: centring
  makes "typical" and "absent" look alike, which is the usual price of a centred scaler.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

NORMALISE_METHOD = "robust-mad-nonzero-v1"  # changes whenever the rule above changes
_MAD_TO_SD = 1.4826  # 1 / Phi^-1(3/4)
_MEAN_AD_TO_SD = 1.253314  # sqrt(pi / 2)


@dataclass(frozen=True, eq=False)
class RobustScaler:
    """Per-column centre and scale fitted on one fold's training rows (arrays are read-only)."""

    median: np.ndarray  # [F] float32
    scale: np.ndarray  # [F] float32, > 0
    clip: float
    columns: tuple[str, ...]

    def __post_init__(self) -> None:
        cols = tuple(str(c) for c in self.columns)
        med = np.array(self.median, dtype=np.float32).reshape(-1)
        scale = np.array(self.scale, dtype=np.float32).reshape(-1)
        if not (len(med) == len(scale) == len(cols)):
            raise ValueError(
                f"RobustScaler: {len(med)} medians, {len(scale)} scales and {len(cols)} columns must match"
            )
        if not (np.isfinite(med).all() and np.isfinite(scale).all() and (scale > 0).all()):
            raise ValueError("RobustScaler: medians must be finite and scales finite and > 0")
        if not (math.isfinite(self.clip) and self.clip > 0):
            raise ValueError(f"RobustScaler: clip must be finite and > 0, got {self.clip}")
        med.setflags(write=False)
        scale.setflags(write=False)
        object.__setattr__(self, "median", med)
        object.__setattr__(self, "scale", scale)
        object.__setattr__(self, "clip", float(self.clip))
        object.__setattr__(self, "columns", cols)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (float32 values are exact as Python floats) to store with a fold."""
        return {
            "method": NORMALISE_METHOD,
            "columns": list(self.columns),
            "median": [float(v) for v in self.median],
            "scale": [float(v) for v in self.scale],
            "clip": self.clip,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RobustScaler:
        """Inverse of :meth:`to_dict`; refuses a scaler stored by another normalisation rule."""
        method = data.get("method")
        if method != NORMALISE_METHOD:
            raise ValueError(
                f"stored scaler uses normalisation {method!r}, this code applies {NORMALISE_METHOD!r}: "
                "refit the scaler on the fold's training rows"
            )
        return cls(
            median=np.asarray(data["median"], dtype=np.float32),
            scale=np.asarray(data["scale"], dtype=np.float32),
            clip=float(data["clip"]),
            columns=tuple(data["columns"]),
        )


def robust_stats(values: np.ndarray) -> tuple[float, float]:
    """``(median, scale)`` of one column's values by the rule of the module docstring."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v) & (v != 0)]
    if len(v) == 0:
        return 0.0, 1.0
    from scipy.stats import median_abs_deviation  # here: the CLI's start-up does not import scipy

    med = float(np.median(v))
    scale = _MAD_TO_SD * float(median_abs_deviation(v))  # median(|v - median(v)|)
    if scale == 0.0:
        scale = _MEAN_AD_TO_SD * float(np.abs(v - med).mean())
    if scale == 0.0:  # every non-zero value equals med: keep it distinct from the 0 sentinel
        return 0.0, abs(med)
    return med, scale


def fit_robust(
    x: np.ndarray, train_rows: np.ndarray, columns: Sequence[str], clip: float = 5.0
) -> RobustScaler:
    """Fit per-column median and scale on ``x[train_rows]`` only (``x``: ``[n, F]``).

    ``train_rows`` are row indices (a fold's ``train``) or a boolean mask over the ``n`` rows.
    """
    if x.ndim != 2:
        raise ValueError(f"fit_robust: x must be [n, F], got shape {x.shape}")
    if x.shape[1] != len(columns):
        raise ValueError(f"fit_robust: x has {x.shape[1]} columns but {len(columns)} names were given")
    rows = np.asarray(train_rows)
    if rows.dtype == bool:
        if rows.shape != (x.shape[0],):
            raise ValueError(
                f"fit_robust: a boolean train mask must have shape ({x.shape[0]},), got {rows.shape}"
            )
        rows = np.flatnonzero(rows)
    elif not np.issubdtype(rows.dtype, np.integer):
        raise ValueError(
            f"fit_robust: train_rows must be integer indices or a boolean mask, got {rows.dtype}"
        )
    if rows.ndim != 1 or len(rows) == 0:
        raise ValueError("fit_robust: train_rows must be a non-empty 1-D set of rows")
    if rows.min() < 0 or rows.max() >= x.shape[0]:
        raise ValueError(
            f"fit_robust: train_rows must lie in [0, {x.shape[0]}), got {rows.min()}..{rows.max()}"
        )
    picked = np.ascontiguousarray(x[rows])
    key = _fit_key(picked, tuple(str(c) for c in columns), clip)
    if (done := _FITTED.get(key)) is not None:
        _FITTED.move_to_end(key)
        return done
    stats = [robust_stats(picked[:, j]) for j in range(picked.shape[1])]
    scaler = RobustScaler(
        median=np.array([m for m, _ in stats], dtype=np.float32),
        scale=np.array([s for _, s in stats], dtype=np.float32),
        clip=clip,
        columns=tuple(columns),
    )
    _FITTED[key] = scaler
    while len(_FITTED) > _FITTED_KEPT:
        _FITTED.popitem(last=False)
    return scaler


# The scalers fitted last, by the bytes they were fitted on: one job fits the same fold on the same
# rows several times (the leak guard's folds and its scaler check, the alpha check, training), ~0.1 s
# a fit on a 2-core box (107 columns, a median and a MAD each). A scaler is immutable (read-only
# arrays, frozen), so the one fitted first is returned again: the same numbers by construction.
_FITTED: OrderedDict[bytes, RobustScaler] = OrderedDict()
_FITTED_KEPT = 16


def _fit_key(picked: np.ndarray, columns: tuple[str, ...], clip: float) -> bytes:
    h = hashlib.blake2b(repr((picked.dtype.str, picked.shape, columns, float(clip))).encode(), digest_size=20)
    h.update(memoryview(picked).cast("B"))
    return h.digest()


def apply(scaler: RobustScaler, x: np.ndarray) -> np.ndarray:
    """Normalise ``x`` (``[..., F]``) with a fitted scaler: float32, finite, 0 stays 0 (module docs)."""
    x = np.asarray(x)
    if x.shape[-1:] != scaler.median.shape:
        raise ValueError(
            f"apply: x has {x.shape[-1] if x.ndim else 0} columns, the scaler {len(scaler.columns)} "
            f"({', '.join(scaler.columns[:4])}{', ...' if len(scaler.columns) > 4 else ''})"
        )
    with np.errstate(over="ignore"):  # float64 beyond float32 becomes +-inf, then +-clip
        x32 = x.astype(np.float32, copy=False)
    with np.errstate(invalid="ignore"):
        out = np.subtract(x32, scaler.median, dtype=np.float32)  # (x - median) / scale, in float32
        out /= scaler.scale
    np.clip(out, -scaler.clip, scaler.clip, out=out)  # +-inf -> +-clip; NaN stays NaN here
    out[(x32 == 0) | np.isnan(x32)] = 0.0  # the sentinel survives; NaN = no signal
    return out
