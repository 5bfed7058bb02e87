"""Which feature groups carry the signal: permutation importance (any model) and gain per group.

Columns are named ``group.slot`` (``ofi.imb_l1``, ``market.vol_rv_w20_bps``); the group is the text
before the first dot (a name without a dot is its own group).

* :func:`permutation_importance`: for group ``G`` and a row permutation ``pi``,
  ``drop_G = AUC(y, f(x)) - AUC(y, f(x^pi_G))`` with ``x^pi_G[i, c] = x[pi(i), c]`` for every column
  ``c`` of ``G`` (the SAME ``pi`` for all of them, so the group's joint structure survives and only
  its link to ``y`` and to the other groups is broken) and ``x^pi_G[i, c] = x[i, c]`` elsewhere;
  averaged over ``n_repeats`` permutations. About 0 for a group the model ignores.
* :func:`gain_by_group`: ``gain_G = sum_{c in G} gain_c`` and ``share_G = gain_G / sum_G' gain_G'``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from foxhunt import seeding
from foxhunt.alpha.metrics import auc


def group_of(column: str) -> str:
    """The group of ``group.slot`` (the text before the first dot; the whole name if none)."""
    return column.split(".", 1)[0]


def group_slices(columns: Sequence[str]) -> dict[str, np.ndarray]:
    """group -> int64 column indices, groups in order of first appearance, indices ascending."""
    out: dict[str, list[int]] = {}
    for j, c in enumerate(columns):
        out.setdefault(group_of(c), []).append(j)
    return {g: np.asarray(idx, dtype=np.int64) for g, idx in out.items()}


def permutation_importance(
    predict: Callable[[np.ndarray], np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    groups: dict[str, np.ndarray],
    n_repeats: int = 3,
    seed: int = 0,
) -> dict[str, float]:
    """group -> mean AUC drop when the group's columns are permuted together (formula above).

    ``predict`` maps ``x[n, F]`` to ``p[n]``. Group ``g`` (the ``k``-th) draws its permutations from
    ``SeedSequence(seed).spawn`` child ``k``, so a group's value does not depend on the others.
    NaN for every group when ``y`` lacks a class (the AUC is undefined).
    """
    if n_repeats < 1:
        raise ValueError(f"permutation_importance: n_repeats must be >= 1, got {n_repeats}")
    x = np.asarray(x)
    y = np.asarray(y)
    if x.ndim != 2 or len(x) != len(y):
        raise ValueError(f"permutation_importance: x must be [n, F] with n = len(y), got {x.shape}, {len(y)}")
    base = auc(y, np.asarray(predict(x)))
    work = x.copy()  # permuted columns are written here and restored after each group
    children = seeding.children(seed, len(groups))
    out: dict[str, float] = {}
    for (g, cols), child in zip(groups.items(), children, strict=True):
        cols = np.asarray(cols, dtype=np.int64)
        rng = seeding.rng(child)
        drops = []
        for _ in range(n_repeats):
            perm = rng.permutation(len(x))
            work[:, cols] = x[np.ix_(perm, cols)]  # one row permutation for all the group's columns
            drops.append(base - auc(y, np.asarray(predict(work))))
        work[:, cols] = x[:, cols]
        out[g] = float(np.mean(drops))
    return out


def gain_by_group(gain: np.ndarray, columns: Sequence[str]) -> dict[str, dict[str, float]]:
    """``{"gain": group -> sum of its columns' gains, "share": group -> gain / total gain}``.

    Shares sum to 1; they are all 0 when the total gain is 0 (a model without splits).
    """
    gain = np.asarray(gain, dtype=np.float64).reshape(-1)
    if len(gain) != len(columns):
        raise ValueError(f"gain_by_group: {len(gain)} gains for {len(columns)} columns")
    per_group = {g: float(gain[idx].sum()) for g, idx in group_slices(columns).items()}
    total = sum(per_group.values())
    share = {g: (v / total if total > 0 else 0.0) for g, v in per_group.items()}
    return {"gain": per_group, "share": share}
