"""The three models of the alpha check (docs/design.md §4): a PyTorch MLP, LightGBM and an L2 logistic
regression on screened columns, binary direction.

Inputs: ``x`` float32 ``[n, F]`` (robust-normalised, finite) and ``y`` int ``{0, 1}`` (1 = up), rows
in **time order**. Both fits early-stop on the same inner validation split of the training rows
(:func:`inner_split`): the last ``inner_validation_fraction`` of them in time, with ``gap`` rows
(the label horizon) removed before it so that no inner-training label window reaches it::

    rows  0 ................ a ........ b ............ n
          [ inner train    ][ gap rows ][ inner val  ]      a = b - gap, b = n - round(f * n)

* MLP: ``F -> hidden[0] -> ... -> 1`` (ReLU, dropout), binary cross-entropy on the logit, Adam with
  decoupled weight decay (AdamW), shuffled mini-batches; after each epoch the inner-validation
  log-loss is measured, the best epoch's weights are kept and training stops after ``patience``
  epochs without improvement.
* GBM: LightGBM ``binary`` objective, early stopping on the inner-validation ``binary_logloss``;
  :attr:`FittedModel.feature_gain` is its gain importance per column.
* Linear: scikit-learn's L2-penalised logistic regression (L-BFGS, fixed penalty ``1 / c``, no
  early stopping: every training row fits) on the columns the caller screened (the check passes
  the fold's largest |rank IC| with the forward move, :mod:`foxhunt.validation.screen`). A planted
  signal that is close to linear in a few features (the synthetic market's imbalance EMA) is found
  with far less variance by a linear model than by trees or a network on ~5,000 rows
  (docs/results/2026-12-07-alpha-verdict.md).

No class reweighting: direction labels are about balanced; :attr:`FittedModel.base_rate` records
the share of 1s in the inner-training rows (a constant predictor's log-loss is the entropy of the
base rate, about ln 2 = 0.693, the bar that ``inner_val_logloss`` is judged against).

Deterministic for a seed on the CPU: the MLP seeds a forked torch RNG (the global stream is left as
it was) and runs under ``torch.set_num_threads(threads)``; LightGBM runs with ``seed``,
``deterministic`` and ``force_row_wise``; the linear fit draws no random numbers (same rows, same
model, whatever the seed).
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum

import lightgbm as lgb
import numpy as np
import torch
from torch import nn

from foxhunt import seeding
from foxhunt.alpha.config import GbmConfig, LinearConfig, MlpConfig
from foxhunt.seeding import generator

_P_EPS = 1e-12  # probabilities are clipped to [eps, 1 - eps] (finite log-loss; logits up to ~27.6)
_PREDICT_ROWS = 65_536  # rows per prediction batch (bounded memory for any n)


class ModelKind(StrEnum):
    MLP = "mlp"  # PyTorch multilayer perceptron
    GBM = "gbm"  # LightGBM gradient-boosted trees
    LINEAR = "linear"  # L2 logistic regression on screened columns


@dataclass(frozen=True, eq=False)
class FittedModel:
    """A fitted model: :meth:`predict` gives P(y = 1) per row; the rest describes the fit."""

    kind: ModelKind
    n_features: int
    n_iterations: int  # epochs (MLP) or trees (GBM) kept, the best inner-validation one; L-BFGS steps
    inner_val_logloss: float  # log-loss of the kept model on the inner validation rows (NaN: linear, none)
    base_rate: float  # share of y = 1 in the inner-training rows
    n_inner_train: int
    n_inner_val: int
    feature_gain: np.ndarray | None  # [F] float64, LightGBM gain importance; None for the MLP
    _predict_batch: Callable[[np.ndarray], np.ndarray] = field(repr=False)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """P(y = 1) for each row of ``x`` ``[n, F]``: float64 ``[n]`` in ``[1e-12, 1 - 1e-12]``.

        Runs over batches of 65 536 rows, so memory stays bounded for any ``n``.
        """
        x = _as_features(x, "FittedModel.predict")
        if x.shape[1] != self.n_features:
            raise ValueError(
                f"FittedModel.predict ({self.kind}): x has {x.shape[1]} columns but the model was fitted "
                f"on {self.n_features}; pass the same feature layout as the fit"
            )
        out = np.empty(len(x), dtype=np.float64)
        for start in range(0, len(x), _PREDICT_ROWS):
            stop = min(start + _PREDICT_ROWS, len(x))
            out[start:stop] = self._predict_batch(x[start:stop])
        return np.clip(out, _P_EPS, 1.0 - _P_EPS, out=out)


def inner_split(n_train: int, fraction: float, gap: int) -> tuple[np.ndarray, np.ndarray]:
    """Time-ordered inner split of ``n_train`` rows: ``(inner_train_idx, inner_val_idx)``, int64.

    ``n_val = round(fraction * n_train)`` last rows validate; the ``gap`` rows before them are
    dropped (purge: pass the label horizon); every earlier row trains. E.g. ``n_train = 10,
    fraction = 0.2, gap = 2``: train ``[0..5]``, rows 6 and 7 dropped, validation ``[8, 9]``.
    Raises ValueError when either part would be empty.
    """
    n, gap = int(n_train), int(gap)
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"inner_split: fraction must be in (0, 1), got {fraction}")
    if gap < 0:
        raise ValueError(f"inner_split: gap must be >= 0 rows (the label horizon), got {gap}")
    n_val = int(round(fraction * n))
    val_start = n - n_val
    train_end = val_start - gap
    if n_val < 1 or train_end < 1:
        raise ValueError(
            f"inner_split: {n} training rows are too few for an inner validation of fraction {fraction} "
            f"({n_val} rows) after a gap of {gap} rows ({max(train_end, 0)} inner-training rows left); "
            "supply more training rows, or lower the label horizon"
        )
    return np.arange(train_end, dtype=np.int64), np.arange(val_start, n, dtype=np.int64)


def fit(
    kind: ModelKind,
    x: np.ndarray,
    y: np.ndarray,
    params: MlpConfig | GbmConfig | LinearConfig,
    *,
    gap: int,
    seed: int,
    columns: np.ndarray | None = None,
) -> FittedModel:
    """Fit the model ``kind`` with its params (:class:`MlpConfig`, :class:`GbmConfig` or
    :class:`LinearConfig`); ``columns`` (the linear model's screened columns; None = all) is read by
    the linear model only."""
    kind = ModelKind(kind)
    if kind is ModelKind.LINEAR:
        if not isinstance(params, LinearConfig):
            raise TypeError(f"fit: model {kind} needs LinearConfig, got {type(params).__name__}")
        return fit_linear(x, y, params, columns=columns)
    if kind is ModelKind.MLP:
        if not isinstance(params, MlpConfig):
            raise TypeError(f"fit: model {kind} needs MlpConfig, got {type(params).__name__}")
        return fit_mlp(x, y, params, gap=gap, seed=seed)
    if not isinstance(params, GbmConfig):
        raise TypeError(f"fit: model {kind} needs GbmConfig, got {type(params).__name__}")
    return fit_gbm(x, y, params, gap=gap, seed=seed)


# --- MLP ----------------------------------------------------------------------------------------


def _mlp(n_features: int, params: MlpConfig) -> nn.Sequential:
    """``F -> hidden... -> 1`` logit, ReLU and dropout after each hidden layer."""
    layers: list[nn.Module] = []
    width = n_features
    for h in params.hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        if params.dropout > 0:
            layers.append(nn.Dropout(params.dropout))
        width = h
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@torch.no_grad()
def _mlp_logits(net: nn.Module, x_NF: torch.Tensor, batch: int) -> torch.Tensor:
    """Logits ``[n]`` in eval mode, ``batch`` rows at a time."""
    net.eval()
    return torch.cat([net(x_NF[i : i + batch]).squeeze(-1) for i in range(0, len(x_NF), batch)])


def _logloss_from_logits(logit_N: torch.Tensor, y_N: torch.Tensor) -> float:
    """Mean binary cross-entropy; equals the log-loss of sigmoid(logit) clipped to [eps, 1 - eps]."""
    bound = math.log((1.0 - _P_EPS) / _P_EPS)
    z = logit_N.double().clamp(-bound, bound)
    return float(nn.functional.binary_cross_entropy_with_logits(z, y_N.double()))


def fit_mlp(
    x: np.ndarray,
    y: np.ndarray,
    params: MlpConfig,
    *,
    gap: int,
    seed: int,
    device: str | torch.device = "cpu",
) -> FittedModel:
    """Fit the MLP on time-ordered rows, early-stopped on the inner split; keeps the best epoch."""
    x, y = _check_xy(x, y, "fit_mlp")
    tr, va = inner_split(len(x), params.inner_validation_fraction, gap)
    dev = torch.device(device)
    rng_devices = (
        [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
    )
    n_features = x.shape[1]
    # The inner parts are contiguous ranges, so slices (views), not copies.
    x_tr = torch.from_numpy(x[: len(tr)]).to(dev)
    y_tr = torch.from_numpy(y[: len(tr)].astype(np.float32)).to(dev)
    x_va = torch.from_numpy(x[va[0] :]).to(dev)
    y_va = torch.from_numpy(y[va[0] :].astype(np.float32)).to(dev)
    eval_rows = max(params.batch_size, _PREDICT_ROWS)
    with _torch_threads(params.threads), seeding.seeded_torch(seed, rng_devices):
        shuffle = generator(seed)
        net = _mlp(n_features, params).to(dev)
        opt = torch.optim.AdamW(net.parameters(), lr=params.lr, weight_decay=params.weight_decay)
        loss_fn = nn.BCEWithLogitsLoss()
        best_loss, best_epoch, best_state = math.inf, 0, copy.deepcopy(net.state_dict())
        for epoch in range(1, params.max_epochs + 1):
            net.train()
            order = torch.randperm(len(x_tr), generator=shuffle).to(dev)
            for i in range(0, len(order), params.batch_size):
                rows = order[i : i + params.batch_size]
                loss = loss_fn(net(x_tr[rows]).squeeze(-1), y_tr[rows])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            val_loss = _logloss_from_logits(_mlp_logits(net, x_va, eval_rows), y_va)
            if val_loss < best_loss:
                best_loss, best_epoch, best_state = val_loss, epoch, copy.deepcopy(net.state_dict())
            elif epoch - best_epoch >= params.patience:
                break
        net.load_state_dict(best_state)
        net.eval()

    def predict_batch(xb: np.ndarray) -> np.ndarray:
        with _torch_threads(params.threads):
            logits = _mlp_logits(net, torch.from_numpy(xb).to(dev), len(xb))
        return torch.sigmoid(logits.double()).cpu().numpy()  # float64: no rounding to 1 below ~36

    return FittedModel(
        kind=ModelKind.MLP,
        n_features=n_features,
        n_iterations=best_epoch,
        inner_val_logloss=best_loss,
        base_rate=float(y[: len(tr)].mean()),
        n_inner_train=len(tr),
        n_inner_val=len(va),
        feature_gain=None,
        _predict_batch=predict_batch,
    )


# --- GBM ----------------------------------------------------------------------------------------


def fit_gbm(x: np.ndarray, y: np.ndarray, params: GbmConfig, *, gap: int, seed: int) -> FittedModel:
    """Fit LightGBM on time-ordered rows, early-stopped on the inner split; keeps the best tree count."""
    x, y = _check_xy(x, y, "fit_gbm")
    tr, va = inner_split(len(x), params.inner_validation_fraction, gap)
    n_features = x.shape[1]
    booster_params = {
        "objective": "binary",
        "metric": "binary_logloss",
        "learning_rate": params.learning_rate,
        "num_leaves": params.num_leaves,
        "min_data_in_leaf": params.min_data_in_leaf,
        "feature_fraction": params.feature_fraction,
        "bagging_fraction": params.bagging_fraction,
        "bagging_freq": params.bagging_freq,
        "lambda_l2": params.lambda_l2,
        "num_threads": params.num_threads,
        "max_bin": params.max_bin,
        "bin_construct_sample_cnt": params.bin_sample_rows,
        "seed": seed,
        "deterministic": True,
        "force_row_wise": True,
        "verbosity": -1,
    }
    y_f = y.astype(np.float32)
    train_set = lgb.Dataset(x[: len(tr)], label=y_f[: len(tr)], params=booster_params, free_raw_data=True)
    val_set = lgb.Dataset(x[va[0] :], label=y_f[va[0] :], reference=train_set, free_raw_data=True)
    booster = lgb.train(
        booster_params,
        train_set,
        num_boost_round=params.n_estimators,
        valid_sets=[val_set],
        valid_names=["inner_val"],
        callbacks=[lgb.early_stopping(params.early_stopping_rounds, first_metric_only=True, verbose=False)],
    )
    n_trees = int(booster.best_iteration) if booster.best_iteration > 0 else booster.current_iteration()

    def predict_batch(xb: np.ndarray) -> np.ndarray:
        p = booster.predict(xb, num_iteration=n_trees, num_threads=params.num_threads)
        return np.asarray(p, dtype=np.float64)

    p_va = np.clip(predict_batch(x[va[0] :]), _P_EPS, 1.0 - _P_EPS)
    y_va = y[va[0] :]
    val_loss = float(-np.mean(np.where(y_va == 1, np.log(p_va), np.log1p(-p_va))))
    gain = np.asarray(booster.feature_importance(importance_type="gain", iteration=n_trees), dtype=np.float64)
    return FittedModel(
        kind=ModelKind.GBM,
        n_features=n_features,
        n_iterations=n_trees,
        inner_val_logloss=val_loss,
        base_rate=float(y[: len(tr)].mean()),
        n_inner_train=len(tr),
        n_inner_val=len(va),
        feature_gain=gain,
        _predict_batch=predict_batch,
    )


# --- linear -------------------------------------------------------------------------------------


def fit_linear(
    x: np.ndarray, y: np.ndarray, params: LinearConfig, *, columns: np.ndarray | None = None
) -> FittedModel:
    """L2 logistic regression ``P(up) = sigmoid(b + x[:, columns] @ w)`` on every row (time order does
    not matter: no early stopping), minimising ``sum_i logloss_i + |w|^2 / (2 c)``. ``columns``
    (indices into ``x``'s columns; None = all) are the only columns it reads, in fit and predict;
    ``x`` keeps its full width, so the caller predicts on the same layout as the other models."""
    from sklearn.linear_model import LogisticRegression  # here: the CLI's import of alpha stays light

    x, y = _check_xy(x, y, "fit_linear")
    n_features = x.shape[1]
    cols = np.arange(n_features) if columns is None else np.asarray(columns, np.int64)
    if cols.ndim != 1 or len(cols) == 0 or cols.min() < 0 or cols.max() >= n_features:
        raise ValueError(
            f"fit_linear: columns must be 1-D indices into the {n_features} columns of x, got {cols[:10]}"
        )
    if len(np.unique(y)) < 2:
        raise ValueError("fit_linear: y holds one class only; a direction model needs up and down rows")
    model = LogisticRegression(C=params.c, max_iter=params.max_iter)
    model.fit(x[:, cols].astype(np.float64), y)

    def predict_batch(xb: np.ndarray) -> np.ndarray:
        return model.predict_proba(xb[:, cols].astype(np.float64))[:, 1]

    return FittedModel(
        kind=ModelKind.LINEAR,
        n_features=n_features,
        n_iterations=int(np.max(model.n_iter_)),
        inner_val_logloss=float("nan"),
        base_rate=float(y.mean()),
        n_inner_train=len(x),
        n_inner_val=0,
        feature_gain=None,
        _predict_batch=predict_batch,
    )


# --- input checks -------------------------------------------------------------------------------


def _as_features(x: np.ndarray, where: str) -> np.ndarray:
    """``x`` as a C-contiguous float32 ``[n, F]`` array (no copy when it already is one)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] < 1:
        raise ValueError(f"{where}: x must be a 2-D [rows, features] array, got shape {x.shape}")
    return x


def _check_xy(x: np.ndarray, y: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    x = _as_features(x, where)
    y = np.asarray(y).reshape(-1)
    if len(y) != len(x):
        raise ValueError(f"{where}: x has {len(x)} rows but y has {len(y)}; pass one label per row")
    if not np.isfinite(x).all():
        raise ValueError(f"{where}: x holds NaN or inf; normalise the features first (normalise.apply)")
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"{where}: y must hold only 0 (down) and 1 (up), got values {np.unique(y)[:10]}")
    return x, y.astype(np.int64, copy=False)
