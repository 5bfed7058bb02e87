"""Purged walk-forward folds on hand-built timelines."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from pydantic import ValidationError

from foxhunt.errors import FrontDoor
from foxhunt.validation.config import FoldConfig, FoldScheme
from foxhunt.validation.folds import Fold, purge_and_embargo, purged_walk_forward


def _r(a: int, b: int) -> list[int]:
    return list(range(a, b))


def _bounds(folds: list[Fold]) -> list[tuple[int, int, int, int]]:
    return [(f.train_start, f.train_end, f.validation_start, f.validation_end) for f in folds]


# --- hand-worked: n = 100, 3 folds, first 40 rows before validation, label span 5 ---------------
# blocks v_i = 40 + floor(i * 60 / 3): [40, 60), [60, 80), [80, 100); embargo = max(0, 5) = 5


def test_expanding_hand_worked():
    folds = purged_walk_forward(100, FoldConfig(n_folds=3, min_train_fraction=0.4), label_span=5)
    assert _bounds(folds) == [(0, 35, 40, 60), (0, 55, 60, 80), (0, 75, 80, 100)]
    for f, (tr, va) in zip(folds, [(35, (40, 60)), (55, (60, 80)), (75, (80, 100))], strict=True):
        assert f.train.tolist() == _r(0, tr)
        assert f.validation.tolist() == _r(*va)
        assert (f.purged, f.embargoed, f.embargo) == (5, 0, 5)
        assert f.train.dtype == np.int64 and f.validation.dtype == np.int64
    assert [f.index for f in folds] == [0, 1, 2]


def test_rolling_hand_worked_default_width():
    params = FoldConfig(n_folds=3, min_train_fraction=0.4, scheme=FoldScheme.ROLLING)
    folds = purged_walk_forward(100, params, label_span=5)
    # width = fold 0's training size 35; window [v - 5 - 35, v), the last 5 rows purged
    assert _bounds(folds) == [(0, 35, 40, 60), (20, 55, 60, 80), (40, 75, 80, 100)]
    assert [f.train.tolist() for f in folds] == [_r(0, 35), _r(20, 55), _r(40, 75)]
    assert [f.purged for f in folds] == [5, 5, 5]


def test_rolling_hand_worked_explicit_width_and_extra_embargo():
    params = FoldConfig(
        n_folds=3, min_train_fraction=0.4, scheme=FoldScheme.ROLLING, rolling_train_rows=20, embargo_rows=8
    )
    folds = purged_walk_forward(100, params, label_span=5)
    # embargo 8: training ends 8 rows before each block; 5 rows purged (label window), 3 embargoed
    assert _bounds(folds) == [(12, 32, 40, 60), (32, 52, 60, 80), (52, 72, 80, 100)]
    assert [(f.purged, f.embargoed, f.embargo) for f in folds] == [(5, 3, 8)] * 3


def test_expanding_with_an_uneven_split():
    folds = purged_walk_forward(50, FoldConfig(n_folds=3, min_train_fraction=0.3), label_span=2)
    # v0 = 15; blocks 15 + floor(i * 35 / 3) = 15, 26, 38, 50
    assert _bounds(folds) == [(0, 13, 15, 26), (0, 24, 26, 38), (0, 36, 38, 50)]


# --- invariants over many timelines -------------------------------------------------------------

_GRID = list(
    itertools.product(
        [200, 7_919],  # rows
        [1, 3, 5],  # folds
        [0.3, 0.8],  # min_train_fraction
        [0, 17, 60],  # label span
        [0, 25],  # embargo_rows
        list(FoldScheme),
    )
)


@pytest.mark.parametrize(("n", "k", "frac", "span", "embargo_rows", "scheme"), _GRID)
def test_fold_invariants(n, k, frac, span, embargo_rows, scheme):
    params = FoldConfig(n_folds=k, min_train_fraction=frac, embargo_rows=embargo_rows, scheme=scheme)
    e = max(span, embargo_rows)
    if round(frac * n) - e < 1:  # the first training window would be empty
        with pytest.raises(ValueError, match="too few"):
            purged_walk_forward(n, params, span)
        return
    folds = purged_walk_forward(n, params, span)
    assert len(folds) == k
    v0 = int(round(frac * n))
    assert folds[0].validation_start == v0 and folds[-1].validation_end == n
    for a, b in itertools.pairwise(folds):  # blocks in time order, tiling [v0, n) without overlap
        assert a.validation_end == b.validation_start
    for f in folds:
        assert len(f.validation) >= 1
        assert f.validation.tolist() == _r(f.validation_start, f.validation_end)
        assert f.train.max() + span < f.validation.min()  # no label window reaches validation
        assert f.validation.min() - f.train.max() > e  # the embargo gap
        assert np.all(np.diff(f.train) == 1)  # contiguous, ascending
        assert f.embargo == e and f.purged == min(span, f.validation_start)
    sizes = [len(f.train) for f in folds]
    if scheme is FoldScheme.EXPANDING:
        assert all(f.train_start == 0 for f in folds)
        assert all(b > a for a, b in itertools.pairwise(sizes))  # windows grow
    else:
        assert len(set(sizes)) == 1 and sizes[0] == v0 - e  # windows keep their size
        assert all(b.train_start > a.train_start for a, b in itertools.pairwise(folds))
    again = purged_walk_forward(n, params, span)  # deterministic
    assert all(
        np.array_equal(a.train, b.train) and np.array_equal(a.validation, b.validation)
        for a, b in zip(folds, again, strict=True)
    )


# --- the general purge / embargo rule -----------------------------------------------------------


def test_purge_and_embargo_around_a_block_inside_the_training_rows():
    # training rows on both sides of validation [40, 60), label span 5, embargo 7
    kept, purged, embargoed = purge_and_embargo(np.arange(100), 40, 60, label_span=5, embargo=7)
    assert kept.tolist() == _r(0, 33) + _r(67, 100)
    # purged: 35..39 (label window reaches row 40) and the 20 rows of the block itself
    # embargoed: 33, 34 (the rest of the 7-row gap before) and 60..66 (7 rows after the block)
    assert (purged, embargoed) == (25, 9)


def test_purge_without_embargo_keeps_rows_right_after_the_block():
    kept, purged, embargoed = purge_and_embargo(np.arange(20), 8, 12, label_span=3, embargo=0)
    assert kept.tolist() == _r(0, 5) + _r(12, 20)
    assert (purged, embargoed) == (7, 0)


def test_fold_summary_is_json_safe():
    import json

    f = purged_walk_forward(100, FoldConfig(min_train_fraction=0.4), label_span=5)[1]
    d = json.loads(json.dumps(f.summary()))
    assert d == {
        "index": 1,
        "train_start": 0,
        "train_end": 55,
        "n_train": 55,
        "validation_start": 60,
        "validation_end": 80,
        "n_validation": 20,
        "purged": 5,
        "embargoed": 0,
        "embargo": 5,
    }


# --- errors -------------------------------------------------------------------------------------


def test_too_short_data_raises_a_clear_error():
    with pytest.raises(ValueError, match=r"100 rows are too few for 3 expanding folds.*keeps -20 rows"):
        purged_walk_forward(100, FoldConfig(min_train_fraction=0.4), label_span=60)
    with pytest.raises(ValueError, match="too few"):
        purged_walk_forward(4, FoldConfig(n_folds=5, min_train_fraction=0.5), label_span=0)
    with pytest.raises(ValueError, match="rolling_train_rows 50 exceeds the 35 rows"):
        purged_walk_forward(
            100,
            FoldConfig(min_train_fraction=0.4, scheme=FoldScheme.ROLLING, rolling_train_rows=50),
            label_span=5,
        )
    with pytest.raises(ValueError, match="label_span"):
        purged_walk_forward(100, FoldConfig(), label_span=-1)


@pytest.mark.parametrize(
    "bad",
    [
        {"n_folds": 0},
        {"min_train_fraction": 1.0},
        {"embargo_rows": -1},
        {"rolling_train_rows": 0},
        {"scheme": "random"},
        {"folds": 3},
        {"normalise_clip": 1.5},  # at the reference rule's threshold the rule could never enter
        {"normalise_clip": 0.0},
    ],
)
def test_fold_params_reject_bad_values(bad):
    with pytest.raises(ValidationError):
        FoldConfig(**bad)


def test_fold_params_fields_are_documented():
    assert all(f.description for f in FoldConfig.model_fields.values())


def test_too_few_rows_names_every_fix_with_numbers() -> None:
    from foxhunt.errors import FoxhuntError
    from foxhunt.validation.folds import TooFewRowsError

    # 120 rows, label span 60: v0 = 60 rows before the first block, minus the 60-row embargo = 0
    # training rows. 122 rows give v0 = 61 and one training row; no fold count below 3 helps.
    with pytest.raises(TooFewRowsError) as err:
        purged_walk_forward(120, FoldConfig(n_folds=3), 60)
    text = str(err.value)
    assert isinstance(err.value, FoxhuntError) and isinstance(err.value, ValueError)
    assert "need at least 122 rows" in text and "fewer folds cannot help" in text
    assert 'overrides=["data.row_unit=snapshot"]' in text and "data.bar_seconds" in text and "\n" not in text
    assert "--row-unit snapshot" in err.value.render(FrontDoor.CLI)
    assert len(purged_walk_forward(122, FoldConfig(n_folds=3), 60)) == 3
    # 2 rows after a 200-row first window hold 2 blocks but not 3: the message names n_folds=2, as
    # Python's config override (the default door) or the command line's option.
    fewer = re.escape('api.config(..., overrides=["folds.n_folds=2"]);')
    with pytest.raises(TooFewRowsError, match=fewer) as err:
        purged_walk_forward(202, FoldConfig(n_folds=3, min_train_fraction=0.99), 1)
    cli = err.value.render(FrontDoor.CLI)
    assert "--set folds.n_folds=2;" in cli and "--set data.bar_seconds=..." in cli and "api.config" not in cli


def test_fold_at_is_make_folds_at_that_index() -> None:
    from foxhunt.validation.folds import fold_at, make_folds

    rng = np.random.default_rng(5)
    x = rng.normal(size=(400, 6))
    cols = tuple("abcdef")
    params = FoldConfig(n_folds=3, min_train_fraction=0.4, normalise_clip=2.0)
    every = make_folds(x, cols, params, label_span=5)
    for k, whole in enumerate(every):
        one = fold_at(x, cols, params, 5, k)
        np.testing.assert_array_equal(one.fold.train, whole.fold.train)
        np.testing.assert_array_equal(one.fold.validation, whole.fold.validation)
        np.testing.assert_array_equal(one.scaler.median, whole.scaler.median)
        np.testing.assert_array_equal(one.scaler.scale, whole.scaler.scale)
        assert one.scaler.clip == 2.0
