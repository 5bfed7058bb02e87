"""The alpha check's models give the same fit at any thread count, so a profile may choose its threads
for speed alone (smoke.toml and gpu.toml run one thread per model: no gain from a second on their
~5,000 rows, and spin-waiting threads on a busy machine made the check 5-8x slower)."""

from __future__ import annotations

import numpy as np
import pytest

from foxhunt.alpha.config import GbmConfig, MlpConfig
from foxhunt.alpha.models import fit_gbm, fit_mlp
from foxhunt.config.loader import load_config


def _rows(n: int = 3000, f: int = 24, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, f)).astype(np.float32)
    p_up = 1.0 / (1.0 + np.exp(-(1.5 * x[:, 0] - x[:, 3])))
    return x, (rng.random(n) < p_up).astype(np.int64)


def test_gbm_fit_is_the_same_at_1_and_2_threads():
    x, y = _rows()
    fits = [fit_gbm(x, y, GbmConfig(num_threads=t, n_estimators=60), gap=5, seed=11) for t in (1, 2)]
    assert fits[0].n_iterations == fits[1].n_iterations > 1  # more than a stump: real trees compared
    np.testing.assert_array_equal(fits[0].predict(x), fits[1].predict(x))
    np.testing.assert_array_equal(fits[0].feature_gain, fits[1].feature_gain)


def test_mlp_fit_is_the_same_at_1_and_2_threads():
    x, y = _rows()
    fits = [fit_mlp(x, y, MlpConfig(threads=t, max_epochs=2), gap=5, seed=11) for t in (1, 2)]
    assert fits[0].n_iterations == fits[1].n_iterations
    # Equal up to float32 summation order: on some CPUs (an AVX-512 Xeon) a second thread splits the
    # matmuls' reductions differently and the predicted probabilities move by ~1e-8, far below
    # anything the check's AUC and verdict could see; on others they are bit-identical.
    np.testing.assert_allclose(fits[0].predict(x), fits[1].predict(x), rtol=0, atol=1e-6)


@pytest.mark.parametrize("profile", ["smoke", "gpu"])
def test_small_market_profiles_fit_on_one_thread(profile):
    cfg = load_config(profile)
    assert (cfg.alpha.mlp.threads, cfg.alpha.gbm.num_threads) == (1, 1)
