"""Metrics and the block bootstrap: hand-worked numbers, sklearn agreement, known-answer bootstraps."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import rankdata
from sklearn.metrics import log_loss as sk_log_loss
from sklearn.metrics import roc_auc_score

from foxhunt.alpha import metrics
from foxhunt.alpha.metrics import (
    Interval,
    accuracy,
    auc,
    binned_auc,
    block_bootstrap,
    clopper_pearson,
    log_loss,
    score_bins,
)

# --- hand-worked point metrics ------------------------------------------------------------------


def test_accuracy_hand_worked():
    # calls 1[p > 0.5] = [0, 1, 0, 0] (0.5 counts as "down"); right on rows 0, 1, 3
    assert accuracy(np.array([0, 1, 1, 0]), np.array([0.2, 0.7, 0.4, 0.5])) == 0.75


def test_auc_hand_worked():
    # positives 0.35, 0.8; negatives 0.1, 0.4: pairs (0.35>0.1), (0.35<0.4), (0.8>0.1), (0.8>0.4) -> 3/4
    assert auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])) == 0.75


def test_auc_ties_count_one_half():
    # positives 0.3, 0.9; negatives 0.3, 0.2: (0.3=0.3) 1/2, (0.3>0.2) 1, (0.9>.) 1, 1 -> 3.5/4
    assert auc(np.array([0, 1, 0, 1]), np.array([0.3, 0.3, 0.2, 0.9])) == 0.875
    # every score equal: every pair is a tie
    assert auc(np.array([0, 1, 1, 0, 1]), np.full(5, 0.6)) == 0.5


def test_auc_nan_when_a_class_is_absent():
    assert math.isnan(auc(np.array([1, 1, 1]), np.array([0.2, 0.5, 0.9])))
    assert math.isnan(auc(np.array([0]), np.array([0.2])))


def test_log_loss_hand_worked():
    # -(ln 0.8 + ln(1 - 0.4)) / 2 = (0.2231436 + 0.5108256) / 2
    assert log_loss(np.array([1, 0]), np.array([0.8, 0.4])) == pytest.approx(0.3669846, abs=1e-7)
    # p = 0 for an up move is clipped to eps: -ln(1e-7) = 16.1181
    assert log_loss(np.array([1]), np.array([0.0])) == pytest.approx(16.118096, abs=1e-5)
    assert log_loss(np.array([1]), np.array([0.0]), eps=1e-3) == pytest.approx(-math.log(1e-3))


def test_auc_is_the_mann_whitney_u_of_the_mid_ranks():
    """scikit-learn's AUC (the estimate) is U / (P N) from tie-averaged ranks, the formula the
    module states, on random scores and on scores with many ties."""
    rng = np.random.default_rng(3)
    for n in (7, 200, 5000):
        y = rng.integers(0, 2, n)
        p = 1 / (1 + np.exp(-(0.7 * y + rng.normal(size=n))))
        for q in (p, np.round(p, 1)):
            n_pos = int(y.sum())
            u = rankdata(q)[y == 1].sum() - n_pos * (n_pos + 1) / 2
            assert auc(y, q) == pytest.approx(u / (n_pos * (n - n_pos)), abs=1e-12)


def test_the_batched_statistics_agree_with_sklearn():
    """The bootstrap's batched statistics (binned AUC from block counts, summed log-loss terms) are
    the statistics scikit-learn computes: the binned AUC equals roc_auc_score once every distinct
    score has its own bin, the terms' mean equals log_loss, and the bootstrap's estimates are
    scikit-learn's."""
    rng = np.random.default_rng(5)
    for n in (50, 20_000):
        y = rng.integers(0, 2, n)
        # 12 distinct scores, each held by more rows than a bin (n / 2000): none shares a bin
        p = (rng.integers(1, 11, n) + y * rng.integers(0, 2, n)) / 12
        assert binned_auc(y, p, bins=2000) == pytest.approx(roc_auc_score(y, p), abs=1e-12)
        q = np.clip(p, 1e-7, 1 - 1e-7)
        terms = metrics._loss_terms(y.astype(np.int8), p, 1e-7)
        assert float(terms.mean()) == pytest.approx(sk_log_loss(y, q, labels=[0, 1]), rel=1e-12)
        out = block_bootstrap(y, p, block=5, n_boot=50, seed=1)
        assert out["auc"].estimate == roc_auc_score(y, p)
        assert out["log_loss"].estimate == sk_log_loss(y, q, labels=[0, 1])


def test_input_errors_say_what_is_wrong():
    with pytest.raises(ValueError, match="only 0 and 1"):
        auc(np.array([0, 2]), np.array([0.1, 0.2]))
    with pytest.raises(ValueError, match="one length"):
        accuracy(np.array([0, 1]), np.array([0.1]))
    with pytest.raises(ValueError, match="probabilities"):
        log_loss(np.array([0, 1]), np.array([0.1, np.nan]))


# --- binned AUC ---------------------------------------------------------------------------------


def test_binned_auc_hand_worked():
    # bins=2: cut at the median 0.375 -> bin 0 holds {0.1 (neg), 0.35 (pos)}, bin 1 {0.4 (neg), 0.8 (pos)}
    # sum_k pos_k (negbelow_k + neg_k / 2) = 1 * (0 + 0.5) + 1 * (1 + 0.5) = 2 -> 2 / 4; bound 2 / 8
    y, p = np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])
    bin_n, m = score_bins(p, 2)
    assert m == 2 and bin_n.tolist() == [0, 1, 0, 1]
    assert binned_auc(y, p, bins=2) == 0.5
    assert abs(binned_auc(y, p, bins=2) - auc(y, p)) <= 0.25


def test_score_bins_keep_ties_together_and_order():
    p = np.array([0.5] * 50 + [0.1, 0.9, 0.2])
    bin_n, m = score_bins(p, 10)
    assert len(set(bin_n[:50].tolist())) == 1  # equal scores share one bin
    assert m < 10  # repeated cut points merged
    order = np.argsort(p, kind="stable")
    assert (np.diff(bin_n[order]) >= 0).all()  # bin order is score order


def test_binned_auc_close_to_exact_on_random_data():
    rng = np.random.default_rng(5)
    for scale in (0.0, 0.3, 2.0):
        y = rng.integers(0, 2, 50_000)
        p = 1 / (1 + np.exp(-(scale * (y - 0.5) + rng.normal(size=len(y)))))
        assert abs(binned_auc(y, p) - auc(y, p)) < 1e-3


# --- Interval -----------------------------------------------------------------------------------


def test_interval_contains_and_to_dict():
    iv = Interval(0.52, 0.50, 0.54)
    assert iv.contains(0.5) and iv.contains(0.54) and not iv.contains(0.49)
    assert iv.width == pytest.approx(0.04)
    assert iv.to_dict() == {"estimate": 0.52, "lo": 0.50, "hi": 0.54}
    assert not Interval(float("nan"), float("nan"), float("nan")).contains(0.5)


# --- block bootstrap ----------------------------------------------------------------------------


def _noise(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2, n), rng.random(n)


def test_bootstrap_hand_worked_two_blocks():
    # blocks A = rows 0-1 (calls right, AUC 1), B = rows 2-3 (calls wrong, AUC 0). A replicate is AA,
    # AB, BA or BB (1/4, 1/2, 1/4), so the 2.5% / 97.5% percentiles are the BB / AA values.
    y, p = np.array([1, 0, 1, 0]), np.array([0.9, 0.2, 0.3, 0.6])
    ci = block_bootstrap(y, p, block=2, n_boot=1000, seed=1)
    assert ci["auc"].estimate == 0.75  # pairs .9>.2, .9>.6, .3>.2, .3<.6
    assert (ci["auc"].lo, ci["auc"].hi) == (0.0, 1.0)
    assert ci["accuracy"].estimate == 0.5
    assert (ci["accuracy"].lo, ci["accuracy"].hi) == (0.0, 1.0)
    loss_a = -(math.log(0.9) + math.log(0.8)) / 2
    loss_b = -(math.log(0.3) + math.log(0.4)) / 2
    assert ci["log_loss"].lo == pytest.approx(loss_a)
    assert ci["log_loss"].hi == pytest.approx(loss_b)


def test_bonferroni_level_hand_worked():
    # 2 models x 5 horizons at a 5% family error: each interval at 1 - 0.05 / 10 = 99.5%
    assert metrics.bonferroni_level(0.05, 10) == pytest.approx(0.995)
    assert metrics.bonferroni_level(0.05, 1) == pytest.approx(0.95)
    with pytest.raises(ValueError, match="n_tests"):
        metrics.bonferroni_level(0.05, 0)


def test_percentile_interval_takes_the_level_tails():
    # replicates 0.000, 0.001, ..., 1.000: the 5% / 95% percentiles of a 90% interval are 0.05 / 0.95,
    # of a 99% interval 0.005 / 0.995
    reps = np.arange(1001) / 1000
    iv90 = metrics._percentile_interval(0.5, reps, level=0.90)
    iv99 = metrics._percentile_interval(0.5, reps, level=0.99)
    assert (iv90.lo, iv90.hi) == (pytest.approx(0.05), pytest.approx(0.95))
    assert (iv99.lo, iv99.hi) == (pytest.approx(0.005), pytest.approx(0.995))


def test_bootstrap_level_widens_the_same_replicates():
    y, p = _noise(5000, 4)
    wide = block_bootstrap(y, p, block=20, n_boot=500, seed=3, level=0.995)["auc"]
    narrow = block_bootstrap(y, p, block=20, n_boot=500, seed=3)["auc"]  # 95%, the default
    assert wide.estimate == narrow.estimate
    assert wide.lo < narrow.lo and wide.hi > narrow.hi
    with pytest.raises(ValueError, match="level"):
        block_bootstrap(y, p, block=20, n_boot=100, level=1.0)


def test_bootstrap_one_block_is_the_sample():
    y, p = _noise(1000, 0)
    ci = block_bootstrap(y, p, block=1000, n_boot=50)  # every replicate draws the one block
    for name, fn in (("auc", auc), ("accuracy", accuracy), ("log_loss", log_loss)):
        assert ci[name].estimate == fn(y, p)
        assert ci[name].lo == pytest.approx(ci[name].estimate, abs=1e-12)
        assert ci[name].hi == pytest.approx(ci[name].estimate, abs=1e-12)


def test_bootstrap_noise_covers_one_half():
    n = 20_000
    covered, widths = 0, []
    for seed in range(20):
        y, p = _noise(n, 100 + seed)
        ci = block_bootstrap(y, p, block=20, n_boot=300, seed=seed, bins=500)["auc"]
        covered += ci.contains(0.5)
        widths.append(ci.width)
    assert covered >= 18
    # null sd of the AUC = sqrt((n + 1) / (12 P N)) ~ 0.0041 -> 95% width ~ 3.92 * 0.0041 = 0.016
    assert 0.011 < float(np.median(widths)) < 0.022


def test_bootstrap_planted_signal_excludes_one_half():
    rng = np.random.default_rng(11)
    y = rng.integers(0, 2, 20_000)
    p = 1 / (1 + np.exp(-(0.2 * (y - 0.5) + rng.normal(size=len(y)))))  # AUC ~ 0.53
    ci = block_bootstrap(y, p, block=50, n_boot=300, seed=0)
    assert ci["auc"].lo > 0.5 and ci["auc"].contains(ci["auc"].estimate)
    assert ci["accuracy"].lo > 0.5


def test_blocks_widen_the_interval_under_autocorrelation():
    # runs of 200 rows share y and (up to tiny noise) p: 100 independent runs, not 20,000 rows
    rng = np.random.default_rng(2)
    runs, run_len = 100, 200
    y = np.repeat(rng.integers(0, 2, runs), run_len)
    p = np.repeat(rng.random(runs), run_len) + rng.normal(0, 1e-3, runs * run_len)
    p = np.clip(p, 0, 1)
    iid = block_bootstrap(y, p, block=1, n_boot=200, seed=0, bins=200)["auc"]
    blocked = block_bootstrap(y, p, block=run_len, n_boot=200, seed=0, bins=200)["auc"]
    assert blocked.estimate == iid.estimate
    assert blocked.width > 8 * iid.width  # ~ sqrt(200) = 14 times wider in theory


def test_bootstrap_is_deterministic_for_a_seed():
    y, p = _noise(5000, 4)
    a = block_bootstrap(y, p, block=25, n_boot=200, seed=7)
    b = block_bootstrap(y, p, block=25, n_boot=200, seed=7)
    c = block_bootstrap(y, p, block=25, n_boot=200, seed=8)
    assert a == b
    assert a["auc"].lo != c["auc"].lo


def test_bootstrap_chunking_and_float64_give_the_same_numbers(monkeypatch: pytest.MonkeyPatch):
    rng = np.random.default_rng(9)
    y = rng.integers(0, 2, 3000)
    p = 1 / (1 + np.exp(-(0.5 * y + rng.normal(size=len(y)))))
    ref = block_bootstrap(y, p, block=7, n_boot=100, seed=3, bins=64)
    # block statistics in chunks of 3 blocks, rebuilt for every replicate chunk
    monkeypatch.setattr(metrics, "_S_CHUNK_ENTRIES", 3 * 128)
    monkeypatch.setattr(metrics, "_S_CACHE_ENTRIES", 0)
    assert block_bootstrap(y, p, block=7, n_boot=100, seed=3, bins=64) == ref
    monkeypatch.setattr(metrics, "_F32_EXACT", 0)  # the float64 path
    assert block_bootstrap(y, p, block=7, n_boot=100, seed=3, bins=64) == ref


def test_bootstrap_auc_nan_when_a_class_is_absent():
    ci = block_bootstrap(np.ones(100, dtype=int), np.linspace(0, 1, 100), block=10, n_boot=50)
    assert math.isnan(ci["auc"].estimate) and math.isnan(ci["auc"].lo)
    assert ci["accuracy"].estimate == 0.5  # p = i / 99 > 0.5 on rows 50..99


def test_bootstrap_rejects_bad_arguments():
    y, p = _noise(100, 0)
    with pytest.raises(ValueError, match="block"):
        block_bootstrap(y, p, block=0)
    with pytest.raises(ValueError, match="bins"):
        block_bootstrap(y, p, block=5, bins=1)


def test_clopper_pearson_hand_worked():
    # k = 0: hi solves (1 - p)^n = 0.025; k = n: lo solves p^n = 0.025.
    assert clopper_pearson(0, 50) == (0.0, pytest.approx(1 - 0.025 ** (1 / 50)))
    assert clopper_pearson(10, 10) == (pytest.approx(0.025 ** (1 / 10)), 1.0)
    # k = 1, n = 2: P(X >= 1) = 1 - (1 - p)^2 = 0.025 and P(X <= 1) = 1 - p^2 = 0.025.
    assert clopper_pearson(1, 2) == (pytest.approx(1 - 0.975**0.5), pytest.approx(0.975**0.5))
    # level 0.5 narrows it: k = 1, n = 2 gives 1 - sqrt(0.75) and sqrt(0.75).
    assert clopper_pearson(1, 2, 0.5) == (pytest.approx(1 - 0.75**0.5), pytest.approx(0.75**0.5))
    with pytest.raises(ValueError, match="clopper_pearson"):
        clopper_pearson(3, 2)


# --- the verdict's forecast test ----------------------------------------------------------------


def test_mid_increments_stop_at_segments_and_gaps():
    close = np.array([1.0, 2.0, 4.0, 3.0, np.nan, 5.0])
    seg = np.array([True, False, False, True, False, False])
    assert metrics.mid_increments(close, seg).tolist() == [0.0, 1.0, 2.0, 0.0, 0.0, 0.0]


def test_forecast_test_is_the_forecasts_times_the_moves_they_forecast():
    # S = sum_j w_j dx_j = sum_t (p_t - c_t)(close[t + K] - close[t]), by hand on 8 rows, K = 2.
    close = np.array([10.0, 11.0, 11.0, 9.0, 10.0, 12.0, 12.0, 13.0])
    dx = metrics.mid_increments(close, np.zeros(8, bool))
    rows = np.array([1, 2, 4, 5])
    p = np.array([0.7, 0.4, 0.6, 0.5])
    c = np.full(4, 0.5)
    t = metrics.forecast_test(rows, p, c, dx, 2)
    by_rows = sum((pi - 0.5) * (close[r + 2] - close[r]) for r, pi in zip(rows, p, strict=True))
    assert t.statistic == pytest.approx(by_rows) == pytest.approx(-0.1)  # -0.4 + 0.1 + 0.2 + 0
    # weights w_j = a_{j-2} + a_{j-1}: move 3 (-2) gets 0.1, move 4 (+1) -0.1, move 5 (+2) 0.1,
    # move 7 (+1) 0: terms -0.2, -0.1, +0.2, so z = -0.1 / sqrt(0.09)
    assert t.z == pytest.approx(-1 / 3) and t.moves == 3
    assert t.p_value == pytest.approx(0.6305586)


def _random_walk_forecasts(rng, n, k, lean):
    """A martingale mid (moves of +-1 tick on half the rows), a mean-reverting forecast of it
    (``lean`` = 0), or one that sees a planted drift (``lean`` > 0: P(up) = 1/2 + lean * s)."""
    s = np.sign(rng.normal(size=n // 200 + 1)).repeat(200)[:n]  # a slow planted state
    up = rng.random(n) < 0.5 + lean * s
    x = np.cumsum(np.where(rng.random(n) < 0.5, 0, np.where(up, 1.0, -1.0)))
    trail = np.convolve(x, np.ones(100) / 100)[:n]
    f = s * 0.05 if lean > 0 else -0.02 * (x - trail)  # a model of the state, or of reversion
    p = 1 / (1 + np.exp(-f))
    rows = np.arange(100, n - k)
    return x, rows, p[rows]


def test_forecast_test_holds_its_level_where_the_auc_does_not():
    # On a martingale, a mean-reverting forecast's AUC against the overlapping direction labels
    # comes out above 0.5 on average (a later row's forecast has seen part of an earlier row's
    # label window); the forecast test's z stays centred, with its tail at the normal's.
    rng = np.random.default_rng(5)
    k, zs, aucs = 40, [], []
    for _ in range(300):
        x, rows, p = _random_walk_forecasts(rng, 3000, k, 0.0)
        move = x[rows + k] - x[rows]
        dx = metrics.mid_increments(x, np.zeros(len(x), bool))
        zs.append(metrics.forecast_test(rows, p, np.full(len(rows), 0.5), dx, k).z)
        aucs.append(auc((move[move != 0] > 0).astype(int), p[move != 0]))
    zs = np.array(zs)
    assert np.mean(aucs) > 0.503  # the AUC's bias: 0.508 +- 0.003 here
    assert abs(zs.mean()) < 0.2 and 0.85 < zs.std() < 1.15
    assert (zs > 1.645).mean() < 0.09  # one-sided 5%: ~0.05 (300 walks)


def test_forecast_test_finds_a_planted_drift():
    rng = np.random.default_rng(6)
    x, rows, p = _random_walk_forecasts(rng, 6000, 20, 0.05)
    dx = metrics.mid_increments(x, np.zeros(len(x), bool))
    t = metrics.forecast_test(rows, p, np.full(len(rows), 0.5), dx, 20)
    assert t.z > 4 and t.p_value < 1e-4
    flipped = metrics.forecast_test(rows, 1 - p, np.full(len(rows), 0.5), dx, 20)
    assert flipped.z == pytest.approx(-t.z) and flipped.p_value > 0.99  # one-sided: losing is not signal


def test_max_z_p_values_between_one_test_and_independent_ones():
    from scipy.stats import norm

    rng = np.random.default_rng(7)
    t = rng.normal(size=5000) + 0.04  # one test's terms, z about 2.8
    one = metrics.forecast_test_from_terms(t)
    # Three copies of one test: the max of three equal z's is that z, so the p-value stays.
    same = metrics.max_z_p_values([t, t, t], seed=1)
    assert same == pytest.approx([one.p_value] * 3, abs=0.002)
    # Three tests on disjoint moves: independent, so P(max >= z) = 1 - (1 - p)^3 (Sidak).
    n = len(t)
    parts = [np.concatenate([t, np.zeros(2 * n)]), np.zeros(3 * n), np.zeros(3 * n)]
    parts[1][n : 2 * n] = rng.normal(size=n)
    parts[2][2 * n :] = rng.normal(size=n)
    adj = metrics.max_z_p_values(parts, seed=1)
    assert adj[0] == pytest.approx(1 - (1 - one.p_value) ** 3, abs=0.002)
    assert adj[0] == pytest.approx(1 - norm.cdf(one.z) ** 3, abs=0.002)
    # A test with no weighted move is left out (NaN) and does not enlarge the family.
    assert np.isnan(metrics.max_z_p_values([t, np.zeros(n)], seed=1)[1])
    assert metrics.max_z_p_values([t, np.zeros(n)], seed=1)[0] == pytest.approx(one.p_value, abs=0.002)
