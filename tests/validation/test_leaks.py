"""The leak guard: clean on every family and both row units; a planted forward window is caught."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.config.loader import load_config
from foxhunt.config.synth import SynthConfig
from foxhunt.data.schemas import RowUnit
from foxhunt.data.synth import write_synthetic
from foxhunt.data.synth_market import synthetic_market
from foxhunt.features.cache import compute_features
from foxhunt.features.layout import STACK_FAMILIES
from foxhunt.features.pipeline import rows_from_market
from foxhunt.features.registry import FAMILIES
from foxhunt.validation.leaks import check_leaks, perturb_after


@pytest.fixture(scope="module")
def md():
    return synthetic_market(SynthConfig(seed=21, sessions=2, events_per_session=15_000, alpha=0.5))


@pytest.mark.parametrize("row_unit", list(RowUnit))
def test_every_family_is_clean(md, row_unit: RowUnit) -> None:
    cfg = load_config("smoke", overrides=[f"data.row_unit={row_unit.value}"])
    report = check_leaks(md, cfg)
    assert report.clean, report.leaking_columns
    families = {c.split(".")[0] for c in compute_features(rows_from_market(md, cfg.data), cfg).columns}
    assert families == set(STACK_FAMILIES[row_unit])
    assert all(c.rows_checked > 0 for c in report.cuts) and report.rows > max(
        c.rows_checked for c in report.cuts
    )


def test_the_perturbation_really_changes_the_future(md) -> None:
    book = md.books[next(iter(md.books))]
    t = int(book.ts_event[len(book) // 2])
    other = perturb_after(md, t).books[next(iter(md.books))]
    after = book.ts_event > t
    assert np.array_equal(other.bid_px[~after], book.bid_px[~after])
    assert (other.bid_sz[after] != book.bid_sz[after]).all()
    assert not other.crossed().any()


def _leaky_family(horizon: int) -> SimpleNamespace:
    def compute(inp, params):
        fwd = np.zeros((len(inp), 1), np.float32)
        c = np.nan_to_num(inp.close)
        fwd[:-horizon, 0] = np.sign(c[horizon:] - c[:-horizon])  # peeks `horizon` rows ahead
        return fwd

    return SimpleNamespace(SLOTS=("forward_move",), NEEDS_BOOK=False, compute=compute)


def test_a_forward_window_is_caught_and_named(md, monkeypatch) -> None:
    cfg = load_config("smoke")
    registry = {**FAMILIES, "leaky": _leaky_family(5)}
    monkeypatch.setitem(STACK_FAMILIES, RowUnit.BAR, (*STACK_FAMILIES[RowUnit.BAR], "leaky"))
    params = {name: getattr(cfg.features, name) for name in FAMILIES} | {"leaky": None}
    monkeypatch.setattr("foxhunt.features.cache._feature_params", lambda cfg: params)
    report = check_leaks(md, cfg, registry=registry)
    assert not report.clean
    assert report.leaking_columns == ["leaky.forward_move"]
    for cut in report.cuts:
        assert cut.first_leaking_row is not None and cut.first_leaking_row >= cut.rows_checked - 5


def test_cli_on_clean_data(tmp_path: Path) -> None:
    write_synthetic(SynthConfig(seed=4, sessions=1, events_per_session=12_000), tmp_path)
    result = CliRunner().invoke(app, ["check", "leaks", "--data", str(tmp_path), "--json", "-q"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["clean"] and body["leaking_columns"] == [] and len(body["cuts"]) == 4
