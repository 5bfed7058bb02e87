"""The alpha check's three models on planted-signal and pure-noise data, plus the inner split and a
logistic fit by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from foxhunt.alpha.models import (
    FittedModel,
    GbmConfig,
    LinearConfig,
    MlpConfig,
    ModelKind,
    fit,
    fit_gbm,
    fit_linear,
    fit_mlp,
    inner_split,
)

# Small batches so a few thousand rows still give the MLP enough steps per epoch.
MLP = MlpConfig(batch_size=256, max_epochs=20, patience=2)
GBM = GbmConfig(n_estimators=300, min_data_in_leaf=50)
LINEAR = LinearConfig()
PARAMS: dict[ModelKind, MlpConfig | GbmConfig | LinearConfig] = {
    ModelKind.MLP: MLP,
    ModelKind.GBM: GBM,
    ModelKind.LINEAR: LINEAR,
}
ITERATIVE = [ModelKind.MLP, ModelKind.GBM]  # early-stopped on the inner split, seeded
N_FEATURES = 8


def _auc(y: np.ndarray, p: np.ndarray) -> float:
    """Mann-Whitney AUC with average ranks for ties."""
    _, inverse, counts = np.unique(p, return_inverse=True, return_counts=True)
    upper = np.cumsum(counts)
    ranks = (upper - (counts - 1) / 2.0)[inverse]  # 1-based average rank of each value
    n1 = int(y.sum())
    n0 = len(y) - n1
    return float((ranks[y == 1].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def _data(n: int, signal: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """x ~ N(0, 1) clipped to [-5, 5]; y = 1[x0 + 0.5 noise > 0] (signal) or a fair coin (noise)."""
    rng = np.random.default_rng(seed)
    x = np.clip(rng.standard_normal((n, N_FEATURES)), -5, 5).astype(np.float32)
    if signal:
        y = (x[:, 0] + 0.5 * rng.standard_normal(n) > 0).astype(np.int64)
    else:
        y = rng.integers(0, 2, n).astype(np.int64)
    return x, y


@pytest.fixture(scope="module")
def planted() -> dict[ModelKind, tuple[FittedModel, np.ndarray, np.ndarray]]:
    x, y = _data(8_000, signal=True, seed=1)
    x_test, y_test = _data(4_000, signal=True, seed=2)
    return {k: (fit(k, x, y, p, gap=5, seed=0), x_test, y_test) for k, p in PARAMS.items()}


@pytest.fixture(scope="module")
def noise() -> dict[ModelKind, tuple[FittedModel, np.ndarray, np.ndarray]]:
    x, y = _data(20_000, signal=False, seed=3)
    x_test, y_test = _data(20_000, signal=False, seed=4)
    return {k: (fit(k, x, y, p, gap=5, seed=0), x_test, y_test) for k, p in PARAMS.items()}


# --- inner split, by hand -----------------------------------------------------------------------


def test_inner_split_hand_worked():
    # n = 10, fraction 0.2 -> 2 validation rows [8, 9]; gap 2 drops rows 6, 7.
    tr, va = inner_split(10, 0.2, 2)
    assert tr.tolist() == [0, 1, 2, 3, 4, 5]
    assert va.tolist() == [8, 9]
    assert tr.dtype == np.int64 and va.dtype == np.int64
    tr, va = inner_split(10, 0.2, 0)
    assert tr.tolist() == list(range(8)) and va.tolist() == [8, 9]
    # n = 7, fraction 0.3 -> round(2.1) = 2 validation rows [5, 6]; gap 1 drops row 4.
    tr, va = inner_split(7, 0.3, 1)
    assert tr.tolist() == [0, 1, 2, 3] and va.tolist() == [5, 6]
    # n = 100, fraction 0.25 -> [75, 100); gap 5 drops [70, 75).
    tr, va = inner_split(100, 0.25, 5)
    assert (tr[0], tr[-1], len(tr)) == (0, 69, 70)
    assert (va[0], va[-1], len(va)) == (75, 99, 25)


@pytest.mark.parametrize(
    ("n", "fraction", "gap"),
    [(10, 0.2, 8), (10, 0.2, 9), (3, 0.1, 0), (10, 0.0, 0), (10, 1.0, 0), (10, 0.2, -1), (0, 0.2, 0)],
)
def test_inner_split_too_small_or_bad(n: int, fraction: float, gap: int):
    with pytest.raises(ValueError, match="inner_split"):
        inner_split(n, fraction, gap)


# --- known answers ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(ModelKind))
def test_planted_signal_is_found(planted, kind: ModelKind):
    model, x_test, y_test = planted[kind]
    assert model.kind is kind
    assert _auc(y_test, model.predict(x_test)) > 0.8
    if kind in ITERATIVE:
        assert model.inner_val_logloss < 0.5  # well below ln 2 = 0.693, the constant predictor's
    else:
        assert np.isnan(model.inner_val_logloss) and model.n_inner_val == 0  # no inner split


@pytest.mark.parametrize("kind", list(ModelKind))
def test_noise_gives_chance(noise, kind: ModelKind):
    model, x_test, y_test = noise[kind]
    assert abs(_auc(y_test, model.predict(x_test)) - 0.5) < 0.05
    assert abs(model.base_rate - 0.5) < 0.02


def test_early_stopping_stops_on_noise(noise):
    assert 1 <= noise[ModelKind.MLP][0].n_iterations < MLP.max_epochs
    assert 1 <= noise[ModelKind.GBM][0].n_iterations < GBM.n_estimators


@pytest.mark.parametrize("kind", ITERATIVE)
def test_kept_model_is_the_best_iteration(kind: ModelKind):
    """inner_val_logloss (the best iteration's) equals the returned model's log-loss on those rows."""
    x, y = _data(6_000, signal=True, seed=5)
    model = fit(kind, x, y, PARAMS[kind], gap=3, seed=0)
    _, va = inner_split(len(x), 0.2, 3)
    p = model.predict(x[va])
    loss = -np.mean(np.where(y[va] == 1, np.log(p), np.log1p(-p)))
    assert loss == pytest.approx(model.inner_val_logloss, rel=1e-5)
    assert (model.n_inner_train, model.n_inner_val) == (6_000 - 1_200 - 3, 1_200)


def test_gbm_gain_concentrates_on_the_informative_column(planted):
    gain = planted[ModelKind.GBM][0].feature_gain
    assert gain is not None and gain.shape == (N_FEATURES,) and gain.dtype == np.float64
    assert int(np.argmax(gain)) == 0
    assert gain[0] / gain.sum() > 0.8
    assert planted[ModelKind.MLP][0].feature_gain is None


# --- determinism, shapes, contracts -------------------------------------------------------------


@pytest.mark.parametrize("kind", ITERATIVE)
def test_same_seed_same_predictions(kind: ModelKind):
    x, y = _data(3_000, signal=True, seed=6)
    x_test, _ = _data(500, signal=True, seed=7)
    a = fit(kind, x, y, PARAMS[kind], gap=2, seed=11).predict(x_test)
    b = fit(kind, x, y, PARAMS[kind], gap=2, seed=11).predict(x_test)
    c = fit(kind, x, y, PARAMS[kind], gap=2, seed=12).predict(x_test)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)  # the seed reaches the model (init / shuffling, bagging)


def test_linear_fit_is_seed_free():
    x, y = _data(3_000, signal=True, seed=6)
    a = fit(ModelKind.LINEAR, x, y, LINEAR, gap=2, seed=11).predict(x[:500])
    b = fit(ModelKind.LINEAR, x, y, LINEAR, gap=5, seed=12).predict(x[:500])
    np.testing.assert_array_equal(a, b)  # no random numbers, no inner split: gap and seed unused


# --- the linear model by hand -------------------------------------------------------------------


def test_linear_fit_hand_worked():
    # One feature x in {-1, +1}: at x = +1 three rows up and one down, at x = -1 one up and three
    # down. With (almost) no penalty the logistic MLE matches each group's share of up rows:
    # sigmoid(b + w) = 3/4 and sigmoid(b - w) = 1/4, so b = 0 and w = ln 3 (= 1.0986).
    x = np.array([[1], [1], [1], [1], [-1], [-1], [-1], [-1]], np.float32)
    y = np.array([1, 1, 1, 0, 1, 0, 0, 0])
    model = fit_linear(x, y, LinearConfig(c=1e6))
    np.testing.assert_allclose(
        model.predict(np.array([[1], [-1], [0]], np.float32)), [0.75, 0.25, 0.5], atol=1e-4
    )
    assert model.base_rate == 0.5 and model.n_inner_train == 8 and model.feature_gain is None
    # The penalty |w|^2 / (2 c) pulls w towards 0: with c = 0.01 the forecasts stay near 1/2.
    shrunk = fit_linear(x, y, LinearConfig(c=0.01)).predict(np.array([[1]], np.float32))[0]
    assert 0.5 < shrunk < 0.55


def test_linear_reads_only_its_columns():
    x, y = _data(8_000, signal=True, seed=1)  # the signal is column 0
    x_test, y_test = _data(4_000, signal=True, seed=2)
    model = fit_linear(x, y, LINEAR, columns=np.array([0, 2]))
    shuffled = x_test.copy()
    shuffled[:, [1, 3, 4]] = np.random.default_rng(0).permutation(shuffled[:, [1, 3, 4]])
    np.testing.assert_array_equal(model.predict(shuffled), model.predict(x_test))
    assert _auc(y_test, model.predict(x_test)) > 0.8
    blind = fit_linear(x, y, LINEAR, columns=np.array([1, 2]))  # without the signal's column
    assert abs(_auc(y_test, blind.predict(x_test)) - 0.5) < 0.05
    with pytest.raises(ValueError, match="columns"):
        fit_linear(x, y, LINEAR, columns=np.array([0, N_FEATURES]))
    with pytest.raises(ValueError, match="one class"):
        fit_linear(x, np.ones_like(y), LINEAR)


def test_mlp_leaves_torch_state_as_it_was():
    x, y = _data(2_000, signal=True, seed=8)
    threads = torch.get_num_threads()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    fit_mlp(x, y, MlpConfig(batch_size=256, max_epochs=2, threads=1), gap=0, seed=0)
    assert torch.equal(torch.rand(3), expected)
    assert torch.get_num_threads() == threads


@pytest.mark.parametrize("kind", list(ModelKind))
def test_predict_shape_range_and_batching(planted, kind: ModelKind):
    model, _, _ = planted[kind]
    x, _ = _data(70_000, signal=True, seed=9)  # > one prediction batch of 65 536 rows
    p = model.predict(x)
    assert p.shape == (70_000,) and p.dtype == np.float64
    assert np.all((p > 0.0) & (p < 1.0))
    np.testing.assert_allclose(p[-100:], model.predict(x[-100:]), rtol=1e-6)
    assert model.predict(x[:0]).shape == (0,)
    with pytest.raises(ValueError, match="columns"):
        model.predict(x[:, :3])


def test_fit_dispatch_and_bad_input():
    x, y = _data(1_000, signal=True, seed=10)
    with pytest.raises(TypeError, match="GbmConfig"):
        fit(ModelKind.GBM, x, y, MLP, gap=0, seed=0)
    with pytest.raises(TypeError, match="MlpConfig"):
        fit("mlp", x, y, GBM, gap=0, seed=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="LinearConfig"):
        fit(ModelKind.LINEAR, x, y, GBM, gap=0, seed=0)
    with pytest.raises(ValueError, match="0 \\(down\\) and 1"):
        fit_gbm(x, y + 1, GBM, gap=0, seed=0)
    bad = x.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        fit_mlp(bad, y, MLP, gap=0, seed=0)
    with pytest.raises(ValueError, match="rows"):
        fit_gbm(x, y[:-1], GBM, gap=0, seed=0)


def test_params_are_bounded_and_frozen():
    with pytest.raises(ValidationError):
        MlpConfig(hidden=())
    with pytest.raises(ValidationError):
        MlpConfig(inner_validation_fraction=1.0)
    with pytest.raises(ValidationError):
        GbmConfig(learning_rate=0.0)
    with pytest.raises(ValidationError):
        GbmConfig(n_trees=10)  # unknown key
    with pytest.raises(ValidationError):
        GbmConfig().num_leaves = 7  # type: ignore[misc]
