"""Folds with normalisers fitted on training rows only, stored with the fold."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from foxhunt.validation.config import FoldConfig
from foxhunt.validation.folds import load_scalers, make_folds, save_folds


def test_scalers_see_training_rows_only_and_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1200, 3)).astype(np.float32)
    cols = ("a", "b", "c")
    params = FoldConfig(n_folds=3)
    folds = make_folds(x, cols, params, label_span=20)
    assert len(folds) == 3
    for k, fd in enumerate(folds):
        poisoned = np.full_like(x, 1e6)  # every row outside this fold's training set changes
        poisoned[fd.fold.train] = x[fd.fold.train]
        again = make_folds(poisoned, cols, params, label_span=20)[k]
        np.testing.assert_array_equal(fd.scaler.median, again.scaler.median)
        np.testing.assert_array_equal(fd.scaler.scale, again.scaler.scale)
        assert fd.fold.train.max() + 20 < fd.fold.validation.min()
    z = folds[0].normalise(x)
    assert z.dtype == np.float32 and np.abs(z).max() <= 5.0
    path = save_folds(folds, tmp_path / "folds.json", {"cache": "x.arrow"})
    for fd, scaler in zip(folds, load_scalers(path), strict=True):
        np.testing.assert_array_equal(fd.normalise(x), fd.normalise(x))
        np.testing.assert_array_equal(scaler.median, fd.scaler.median)


def test_the_clip_setting_reaches_every_fold_scaler_and_its_file(tmp_path: Path) -> None:
    # one column, training rows 0..99 of a ramp: median 49.5, so a validation value of 1e3 is far
    # beyond either clip; the default clips it at 5, normalise_clip = 2 at 2, and the stored scaler
    # (what exports and serve apply) keeps the setting's value
    x = np.arange(400, dtype=np.float32).reshape(-1, 1)
    x[-1, 0] = 1e3
    for clip in (5.0, 2.0):
        params = FoldConfig(n_folds=2, min_train_fraction=0.25, normalise_clip=clip)
        folds = make_folds(x, ("a",), params, label_span=1)
        for fd in folds:
            assert fd.scaler.clip == clip
            assert fd.normalise(x)[-1, 0] == np.float32(clip)
            assert fd.normalise(-x)[-1, 0] == np.float32(-clip)
        path = save_folds(folds, tmp_path / f"folds-{clip}.json")
        assert [s.clip for s in load_scalers(path)] == [clip, clip]
