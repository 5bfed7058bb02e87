"""Direction-forecast metrics and a fast block bootstrap of their intervals.

The point estimates come from scikit-learn (``roc_auc_score``, ``log_loss``); the bootstrap's
replicate statistics are written here, batched: every replicate at once as BLAS products of block
counts (below), where calling scikit-learn per replicate would resort ``n`` rows ``B`` times. A
test checks that the batched statistics agree with scikit-learn's (tests/alpha/test_metrics.py).

Binary problem throughout: ``y`` in {0, 1} (1 = the mid went up over the horizon), ``p`` the
forecast probability of 1; ``P`` positives, ``N`` negatives, ``n = P + N`` rows.

Metrics
-------
* ``accuracy = (1/n) sum_i 1[yhat_i = y_i]`` with ``yhat_i = 1[p_i > 0.5]`` (a forecast of exactly
  0.5 counts as "down").
* ``AUC = (1/(P N)) sum_{i: y_i=1} sum_{j: y_j=0} (1[p_i > p_j] + 1/2 1[p_i = p_j])``, the
  Mann-Whitney U over ``P N`` (``sklearn.metrics.roc_auc_score``: the exact area under the ROC
  curve, ties as a diagonal step, i.e. counted 1/2). NaN when a class is absent.
* ``log_loss = -(1/n) sum_i [y_i ln q_i + (1 - y_i) ln(1 - q_i)]``, ``q = clip(p, eps, 1 - eps)``
  (``sklearn.metrics.log_loss`` of the clipped ``q``).

Block bootstrap (:func:`block_bootstrap`)
-----------------------------------------
Labels at horizon K overlap for K rows, and forecasts are autocorrelated, so rows are resampled in
blocks. No maintained bootstrap fits: ``scipy.stats.bootstrap`` resamples rows independently (no
blocks), and the block bootstraps of the ``arch`` package call the statistic once per replicate on
resampled rows (1000 scikit-learn AUCs of 600k rows: about 1 s each on the 2-core dev box, a
quarter of an hour, where this takes seconds), so the resampling is written here. The series is
cut into ``J = ceil(n / L)`` consecutive, non-overlapping blocks of ``L`` rows (the last may be
shorter); a replicate draws ``J`` blocks with replacement (Carlstein's non-overlapping block
bootstrap), i.e. a vector of block multiplicities ``w`` [J] ~
Multinomial(J, 1/J), so every replicate statistic is linear in ``w``:

* per block ``j``: ``S_pos[j, k]`` / ``S_neg[j, k]`` = positives / negatives whose score falls in
  bin ``k`` (``k = 0..M-1``, ``M`` <= ``bins`` bins cut at the quantiles of ``p`` over the whole
  sample, so bin order is score order and equal scores share a bin), the number of correct
  calls, the sum of log-loss terms and the row count;
* for all ``B`` replicates at once: ``pos[B, M] = W[B, J] @ S_pos[J, M]`` (likewise ``neg``), one
  float32 BLAS product (exact: every entry is an integer <= ``n + L``; float64 past ``2**24``);
* replicate AUC from the binned counts with cumulative sums (pairs in one bin count 1/2)::

      AUC_b = sum_k pos[b, k] (negbelow[b, k] + 1/2 neg[b, k]) / (P_b N_b),
      negbelow[b, k] = sum_{k' < k} neg[b, k'];

  accuracy and log-loss are ratios of ``W @ [correct, loss_sum, rows]``.

Binning error: the binned AUC differs from the exact one only through pairs inside one bin, so
``|AUC_binned - AUC| <= sum_k pos_k neg_k / (2 P N)``, about ``1 / (2 M)`` for balanced classes and
quantile bins (2.5e-4 with 2000 bins) and far less in practice (within a narrow bin the
concordance is close to 1/2). The replicate AUCs are shifted by the full-sample difference
``AUC - AUC_binned`` so that the interval and the exact estimate refer to the same statistic.
Intervals are percentile intervals of the ``B`` replicates at a chosen two-sided ``level`` (the
``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles; 95% unless told; NaN replicates, where a class
is absent, are left out). The alpha check asks for the Bonferroni level :func:`bonferroni_level`,
so that its intervals over all models x horizons hold together (see :mod:`foxhunt.alpha.check`).
Cost: ``O(n log n)`` to set up, ``B J 2M`` multiply-adds in BLAS; memory is bounded
by chunking over replicates and over blocks (about 300 MiB peak at n = 600k, L = 20).
Measured on 2 cores, B = 1000, M = 2000: n = 200k, L = 50 in 0.3-0.6 s; n = 600k, L = 20 in ~2 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from foxhunt import seeding

_F32_EXACT = 2**24  # float32 holds every integer below this exactly
_S_CHUNK_ENTRIES = 2**24  # block-statistics chunk S[Jc, 2M] float32: <= 64 MiB
_S_CACHE_ENTRIES = 2**26  # keep all chunks (<= 256 MiB) across replicate chunks, else rebuild them
_W_CHUNK_ENTRIES = 2**24  # replicate chunk W[Bc, J]: <= 64 MiB of float32
_COUNT_SUB_ENTRIES = 2**18  # bincount sub-chunk for the multiplicities (stays in cache)


@dataclass(frozen=True)
class Interval:
    """A point estimate with an interval ``[lo, hi]``; NaN fields mean "not computable"."""

    estimate: float
    lo: float
    hi: float

    def contains(self, x: float) -> bool:
        """``lo <= x <= hi`` (False when any of them is NaN)."""
        return bool(self.lo <= x <= self.hi)

    @property
    def width(self) -> float:
        """``hi - lo``."""
        return self.hi - self.lo

    def to_dict(self) -> dict[str, float]:
        """``{"estimate", "lo", "hi"}`` as floats (NaN stays NaN; the report writer maps it to null)."""
        return {"estimate": float(self.estimate), "lo": float(self.lo), "hi": float(self.hi)}


# --- point metrics ------------------------------------------------------------------------------


def _check(y: np.ndarray, p: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y)
    p = np.asarray(p, dtype=np.float64)
    if y.ndim != 1 or p.ndim != 1 or len(y) != len(p):
        raise ValueError(f"{where}: y and p must be 1-D of one length, got shapes {y.shape} and {p.shape}")
    if len(y) == 0:
        raise ValueError(f"{where}: no rows (y and p are empty)")
    yb = y.astype(np.int8)
    if not np.array_equal(yb, y) or ((yb != 0) & (yb != 1)).any():
        raise ValueError(f"{where}: y must hold only 0 and 1 (rows with no move are excluded upstream)")
    if not np.isfinite(p).all() or (p < 0).any() or (p > 1).any():
        raise ValueError(f"{where}: p must be finite probabilities in [0, 1]")
    return yb, p


def accuracy(y: np.ndarray, p: np.ndarray) -> float:
    """``mean(1[p > 0.5] == y)``."""
    y, p = _check(y, p, "accuracy")
    return float(np.mean((p > 0.5) == (y == 1)))


def auc(y: np.ndarray, p: np.ndarray) -> float:
    """Exact ROC AUC = Mann-Whitney ``U / (P N)``, ties counted 1/2 (scikit-learn's
    ``roc_auc_score``); NaN if a class is absent (scikit-learn would raise)."""
    from sklearn.metrics import roc_auc_score  # here: `import foxhunt.alpha` stays light for the CLI

    y, p = _check(y, p, "auc")
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == len(y):
        return float("nan")
    return float(roc_auc_score(y, p))


def log_loss(y: np.ndarray, p: np.ndarray, eps: float = 1e-7) -> float:
    """``-mean(y ln q + (1 - y) ln(1 - q))`` with ``q = clip(p, eps, 1 - eps)`` (natural log):
    scikit-learn's ``log_loss`` of the clipped ``q`` (its own clip, at float64's epsilon, then
    changes nothing; clipping at ``eps`` first keeps this rule, the one the bootstrap resamples)."""
    from sklearn.metrics import log_loss as sk_log_loss

    y, p = _check(y, p, "log_loss")
    return float(sk_log_loss(y, np.clip(p, eps, 1.0 - eps), labels=[0, 1]))


def _loss_terms(y: np.ndarray, p: np.ndarray, eps: float) -> np.ndarray:
    """Per-row log-loss terms: the bootstrap sums them per block (batched; :func:`log_loss` is
    scikit-learn's mean of the same terms)."""
    q = np.clip(p, eps, 1.0 - eps)
    return -np.where(y == 1, np.log(q), np.log1p(-q))  # [n]


# --- binned AUC ---------------------------------------------------------------------------------


def score_bins(p: np.ndarray, bins: int) -> tuple[np.ndarray, int]:
    """(bin index [n] int64 in ``0..M-1``, ``M``): cuts at the ``k / bins`` quantiles of ``p``.

    Duplicate cut points are merged (``M <= bins``); a score equal to a cut goes to the upper bin,
    so equal scores always share a bin and bin order is score order.
    """
    if bins < 2:
        raise ValueError(f"score_bins: bins must be >= 2, got {bins}")
    cuts = np.unique(np.quantile(p, np.arange(1, bins) / bins))  # [M - 1]
    return np.searchsorted(cuts, p, side="right").astype(np.int64), len(cuts) + 1


def _auc_from_counts(pos_BM: np.ndarray, neg_BM: np.ndarray) -> np.ndarray:
    """Binned AUC per row: ``sum_k pos_k (negbelow_k + neg_k / 2) / (P N)``, NaN if P N = 0."""
    pos_BM = pos_BM.astype(np.float64, copy=False)
    neg_BM = neg_BM.astype(np.float64, copy=False)
    neg_below_BM = np.cumsum(neg_BM, axis=1) - neg_BM  # negatives in lower bins
    num_B = np.einsum("bk,bk->b", pos_BM, neg_below_BM + 0.5 * neg_BM)
    pn_B = pos_BM.sum(axis=1) * neg_BM.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pn_B > 0, num_B / pn_B, np.nan)


def binned_auc(y: np.ndarray, p: np.ndarray, bins: int = 2000) -> float:
    """The AUC that :func:`block_bootstrap` resamples: pairs inside one score bin count 1/2.

    ``|binned_auc - auc| <= sum_k pos_k neg_k / (2 P N)`` (about ``1 / (2 bins)`` at worst).
    """
    y, p = _check(y, p, "binned_auc")
    bin_n, m = score_bins(p, bins)
    pos_M = np.bincount(bin_n[y == 1], minlength=m)
    neg_M = np.bincount(bin_n[y == 0], minlength=m)
    return float(_auc_from_counts(pos_M[None, :], neg_M[None, :])[0])


# --- block bootstrap ----------------------------------------------------------------------------


def _block_multiplicities(rng: np.random.Generator, n_rep: int, n_blocks: int) -> np.ndarray:
    """``W[n_rep, J]`` float32: how often each block is drawn when ``J`` blocks are drawn uniformly
    with replacement (each row of W is Multinomial(J, 1/J), summing to J)."""
    w = np.empty((n_rep, n_blocks), dtype=np.float32)
    step = max(1, _COUNT_SUB_ENTRIES // n_blocks)  # rows per sub-chunk: its bincount stays in cache
    for r0 in range(0, n_rep, step):
        r1 = min(n_rep, r0 + step)
        idx = rng.integers(0, n_blocks, size=(r1 - r0, n_blocks))  # drawn block ids
        idx += (np.arange(r1 - r0) * n_blocks)[:, None]  # offset per row: one bincount for all rows
        w[r0:r1] = np.bincount(idx.ravel(), minlength=(r1 - r0) * n_blocks).reshape(r1 - r0, n_blocks)
    return w


def bonferroni_level(family_error: float, n_tests: int) -> float:
    """Two-sided level ``1 - family_error / n_tests`` of each of ``n_tests`` intervals, so that all of
    them cover their true values together with probability at least ``1 - family_error``.

    Bonferroni: ``P(some interval misses) <= sum_i P(interval i misses) = n_tests * family_error /
    n_tests``, whatever the dependence between the tests (horizons share rows, models share labels).
    """
    if not 0.0 < family_error < 1.0 or n_tests < 1:
        raise ValueError(
            f"bonferroni_level: need 0 < family_error < 1 and n_tests >= 1, got {family_error}, {n_tests}"
        )
    return 1.0 - family_error / n_tests


def _percentile_interval(estimate: float, reps: np.ndarray, level: float = 0.95) -> Interval:
    finite = reps[np.isfinite(reps)]
    if not math.isfinite(estimate) or len(finite) == 0:
        return Interval(float(estimate), float("nan"), float("nan"))
    tail = 100.0 * (1.0 - level) / 2.0  # percent of the replicates below lo, and above hi
    lo, hi = np.percentile(finite, [tail, 100.0 - tail])
    return Interval(float(estimate), float(lo), float(hi))


def block_bootstrap(
    y: np.ndarray,
    p: np.ndarray,
    block: int,
    n_boot: int = 1000,
    seed: int = 0,
    bins: int = 2000,
    level: float = 0.95,
) -> dict[str, Interval]:
    """Block-bootstrap intervals of AUC, accuracy and log-loss (method in the module docstring).

    Args:
        y: [n] labels in {0, 1}, in time order.
        p: [n] forecast probabilities of 1.
        block: block length ``L`` in rows (at least the label horizon).
        n_boot: replicates ``B``.
        seed: seeds the block draws (same seed, same intervals).
        bins: score bins ``M`` for the replicate AUCs (the estimate itself is exact).
        level: two-sided coverage of each interval (0.95: the 2.5% and 97.5% percentiles).

    Returns:
        ``{"auc", "accuracy", "log_loss"}`` -> :class:`Interval` (estimate on the full sample,
        exact; ``lo``/``hi`` the ``(1 - level) / 2`` and ``(1 + level) / 2`` percentiles of the
        replicates).
    """
    y, p = _check(y, p, "block_bootstrap")
    if block < 1 or n_boot < 1:
        raise ValueError(
            f"block_bootstrap: block and n_boot must be >= 1, got block={block}, n_boot={n_boot}"
        )
    if not 0.0 < level < 1.0:
        raise ValueError(f"block_bootstrap: level must lie in (0, 1), got {level}")
    n = len(y)
    estimates = {"auc": auc(y, p), "accuracy": accuracy(y, p), "log_loss": log_loss(y, p)}

    bin_n, m = score_bins(p, bins)
    key_n = bin_n + m * (1 - y.astype(np.int64))  # column of S: [0, M) positives, [M, 2M) negatives
    n_cols = 2 * m
    n_blocks = -(-n // block)  # J
    block_n = np.arange(n) // block
    # scalar statistics per block: [J, 3] = (correct calls, sum of log-loss terms, rows)
    scal_J3 = np.stack(
        [
            np.bincount(block_n, weights=((p > 0.5) == (y == 1)).astype(np.float64), minlength=n_blocks),
            np.bincount(block_n, weights=_loss_terms(y, p, 1e-7), minlength=n_blocks),
            np.bincount(block_n, minlength=n_blocks).astype(np.float64),
        ],
        axis=1,
    )
    # binned AUC offset: replicate AUCs are shifted by (exact - binned) on the full sample
    full_pos = np.bincount(bin_n[y == 1], minlength=m)
    full_neg = np.bincount(bin_n[y == 0], minlength=m)
    auc_shift = estimates["auc"] - float(_auc_from_counts(full_pos[None, :], full_neg[None, :])[0])

    dtype = np.float32 if n + block < _F32_EXACT else np.float64  # counts stay exact integers
    blocks_per_chunk = max(1, _S_CHUNK_ENTRIES // n_cols)
    chunk_bounds = [(j0, min(n_blocks, j0 + blocks_per_chunk)) for j0 in range(0, n_blocks, blocks_per_chunk)]

    # S chunks in compact form (occupied cells, counts), expanded to dense [Jc, 2M] when multiplied
    compact: list[tuple[np.ndarray, np.ndarray]] = []
    for j0, j1 in chunk_bounds:
        r0, r1 = j0 * block, min(n, j1 * block)  # blocks are consecutive row ranges
        compact.append(np.unique((block_n[r0:r1] - j0) * n_cols + key_n[r0:r1], return_counts=True))

    def block_counts(ci: int) -> np.ndarray:
        """``S[Jc, 2M]``: rows per (block, class, score bin) for the blocks of chunk ``ci``."""
        j0, j1 = chunk_bounds[ci]
        s = np.zeros((j1 - j0) * n_cols, dtype=dtype)
        s[compact[ci][0]] = compact[ci][1]
        return s.reshape(j1 - j0, n_cols)

    cached = n_blocks * n_cols <= _S_CACHE_ENTRIES
    cache = [block_counts(ci) for ci in range(len(chunk_bounds))] if cached else []
    rng = seeding.rng(seed)
    reps_per_chunk = max(1, _W_CHUNK_ENTRIES // n_blocks)
    reps: dict[str, list[np.ndarray]] = {"auc": [], "accuracy": [], "log_loss": []}
    for b0 in range(0, n_boot, reps_per_chunk):
        n_rep = min(n_boot, b0 + reps_per_chunk) - b0
        w_BJ = _block_multiplicities(rng, n_rep, n_blocks)
        counts_BK = np.zeros((n_rep, n_cols), dtype=dtype)  # [Bc, 2M] replicate counts per class/bin
        for ci, (j0, j1) in enumerate(chunk_bounds):
            s_JK = cache[ci] if cached else block_counts(ci)
            counts_BK += w_BJ[:, j0:j1].astype(dtype, copy=False) @ s_JK
        scal_B3 = w_BJ.astype(np.float64) @ scal_J3  # [Bc, 3]
        reps["auc"].append(_auc_from_counts(counts_BK[:, :m], counts_BK[:, m:]) + auc_shift)
        reps["accuracy"].append(scal_B3[:, 0] / scal_B3[:, 2])
        reps["log_loss"].append(scal_B3[:, 1] / scal_B3[:, 2])
    return {name: _percentile_interval(estimates[name], np.concatenate(reps[name]), level) for name in reps}


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact two-sided binomial interval of a rate ``k / n`` (Clopper-Pearson): ``lo`` solves
    ``P(X >= k) = (1 - level) / 2`` and ``hi`` solves ``P(X <= k) = (1 - level) / 2`` for ``X ~
    Binomial(n, p)``, as beta quantiles ``lo = Beta^-1((1 - level) / 2; k, n - k + 1)`` and ``hi =
    Beta^-1((1 + level) / 2; k + 1, n - k)`` (``lo = 0`` at ``k = 0``, ``hi = 1`` at ``k = n``). Covers
    the true rate with probability at least ``level``; the verdict's measured false-call and
    detection rates are stated with it."""
    from scipy.stats import beta

    if n < 1 or not 0 <= k <= n or not 0.0 < level < 1.0:
        raise ValueError(f"clopper_pearson: need n >= 1, 0 <= k <= n, 0 < level < 1; got {k}, {n}, {level}")
    tail = (1.0 - level) / 2.0
    lo = 0.0 if k == 0 else float(beta.ppf(tail, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1.0 - tail, k + 1, n - k))
    return lo, hi


# --- the verdict's test: the forecasts against the mid's moves that follow them ----------------


@dataclass(frozen=True)
class ForecastTest:
    """One-sided test that the mid moves the way the forecasts lean more than chance allows.

    ``statistic`` = ``S = sum_j w_j dx_j``; ``z = S / sqrt(sum_j w_j^2 dx_j^2)``; ``p_value`` =
    ``P(N(0, 1) >= z)``; ``moves`` = rows whose mid changed and whose weight is nonzero.
    """

    statistic: float
    z: float
    p_value: float
    moves: int

    def to_dict(self) -> dict[str, float]:
        """The fields as floats (``moves`` as an int)."""
        return {"statistic": self.statistic, "z": self.z, "p_value": self.p_value, "moves": self.moves}


def mid_increments(close: np.ndarray, segment_start: np.ndarray) -> np.ndarray:
    """``dx[j] = close[j] - close[j - 1]`` inside a segment; 0 at a segment's first row, at row 0
    and where either price is not finite."""
    c = np.asarray(close, np.float64)
    dx = np.zeros(len(c), np.float64)
    if len(c) > 1:
        d = c[1:] - c[:-1]
        dx[1:] = np.where(np.isfinite(d) & ~np.asarray(segment_start[1:], bool), d, 0.0)
    return dx


def forecast_test(
    rows: np.ndarray, p: np.ndarray, center: np.ndarray, dx: np.ndarray, horizon: int
) -> ForecastTest:
    """Do forecasts of "up over the next ``horizon`` rows" predict the mid's moves? (martingale test)

    ``rows`` [n] int64: the cache rows (time order) where a forecast ``p`` [n] was made, every
    validation row whose horizon window lies inside its segment, moved or not; ``center`` [n]: a
    number known before the row (the check passes the share of up labels in the row's fold's
    training rows, the fitted models' average forecast); ``dx`` [rows of the cache]: the mid's
    increments (:func:`mid_increments`). Each forecast ``a_t = p_t - center_t`` leans on the
    ``horizon`` moves after it, so move ``j`` gets the weight ``w_j = sum of a_t over forecasts at
    t in [j - horizon, j - 1]``, known before move ``j``, and ``S = sum_j w_j dx_j`` equals
    ``sum_t a_t (close[t + horizon] - close[t])``: the forecasts times the moves they forecast.

    Null: the mid is a martingale given what was known (``E[dx_j | past] = 0``; the alpha-0
    synthetic market is one by construction). Then ``S`` is a martingale transform: its terms are
    uncorrelated and its variance is ``E sum_j w_j^2 dx_j^2``, so ``z = S / sqrt(sum_j w_j^2
    dx_j^2)`` is asymptotically N(0, 1) with no block length to choose, however slowly the
    forecasts vary; where moves are conditionally symmetric (as there),
    ``P(z >= x) <= exp(-x^2 / 2)`` at any sample size (the self-normalised bound for conditionally
    symmetric martingale differences). One-sided: forecasts that lose are not signal.

    Why not the AUC: it compares the forecast at row ``s`` with the label at row ``t`` for every
    pair, and when ``s`` lies inside ``t``'s label window the forecast has seen part of that label's
    move: on a martingale a mean-reverting forecast then scores an AUC above 0.5 (about 0.52 at 60
    bars on the no-signal synthetic market, the same in every fold), and an interval that is right
    about the AUC's spread is still wrong about "no signal" (docs/results/2026-12-07-alpha-verdict.md).
    """
    return forecast_test_from_terms(forecast_terms(rows, p, center, dx, horizon))


def forecast_terms(
    rows: np.ndarray, p: np.ndarray, center: np.ndarray, dx: np.ndarray, horizon: int
) -> np.ndarray:
    """The terms ``w_j dx_j`` [rows of the cache] of :func:`forecast_test` (0 where no move)."""
    rows = np.asarray(rows, np.int64)
    n = len(dx)
    a = np.zeros(n + 1, np.float64)
    np.add.at(a, rows, np.asarray(p, np.float64) - np.asarray(center, np.float64))
    csum = np.concatenate([[0.0], np.cumsum(a[:n])])  # csum[i] = sum of a over rows < i
    j = np.arange(n)
    w = csum[j] - csum[np.maximum(j - int(horizon), 0)]  # forecasts at rows j - horizon .. j - 1
    return w * dx


def forecast_test_from_terms(terms: np.ndarray) -> ForecastTest:
    """:class:`ForecastTest` of the martingale-difference terms ``terms``."""
    from scipy.stats import norm

    var = float(terms @ terms)
    stat = float(terms.sum())
    moves = int(np.count_nonzero(terms))
    if var <= 0.0:
        return ForecastTest(stat, float("nan"), float("nan"), moves)
    z = stat / np.sqrt(var)
    return ForecastTest(stat, float(z), float(norm.sf(z)), moves)


def max_z_p_values(terms: list[np.ndarray], seed: int, draws: int = 200_000) -> list[float]:
    """Family-adjusted one-sided p-values of several forecast tests on the same moves (single-step
    max-z, the multivariate-normal form of Westfall and Young's maxT).

    The tests' terms are martingale differences of the same moves, so their z are jointly normal
    under the null with correlation ``R_ab = sum_j T_a[j] T_b[j] / sqrt(V_a V_b)`` (``V_a = sum_j
    T_a[j]^2``). Test ``a``'s adjusted p-value is ``P(max_b Z_b >= z_a)`` for ``Z ~ N(0, R)``,
    estimated from ``draws`` seeded draws (Monte Carlo error about 0.0005 at 0.05). Calling signal
    where it is at most ``alpha`` holds the family-wise error at ``alpha``, as Bonferroni does,
    and fires more often where the tests are correlated (horizons of one model share most moves):
    the 5% critical z is about 2.3 for the check's 6 tests, where Bonferroni's is 2.39. A test
    with no weighted move (NaN z) gets NaN and is left out of the family.
    """
    t = [np.asarray(x, np.float64) for x in terms]
    var = np.array([float(x @ x) for x in t])
    ok = np.flatnonzero(var > 0)
    out = [float("nan")] * len(t)
    if len(ok) == 0:
        return out
    mat = np.stack([t[i] for i in ok])  # [k, n]
    scale = np.sqrt(var[ok])
    corr = (mat @ mat.T) / np.outer(scale, scale)
    z = mat.sum(axis=1) / scale
    # N(0, R) draws through an eigen square root (R is PSD; a Cholesky can fail on rank deficit).
    vals, vecs = np.linalg.eigh(corr)
    root = vecs * np.sqrt(np.clip(vals, 0.0, None))
    rng = seeding.rng(seed)
    best = (rng.standard_normal((draws, len(ok))) @ root.T).max(axis=1)
    best.sort()
    for i, zi in zip(ok, z, strict=True):
        out[i] = float((draws - np.searchsorted(best, zi, side="left")) / draws)
    return out
