"""The leak guard: clean on every family and both row units; each planted leak is caught and named.

Planted leaks (issue 14 item 4): a forward window of prices, a feature reading the next row's event
count (future activity with prices untouched: only the timing perturbation sees it), a fold
normaliser fitted on every row, and folds with the purge switched off. Each is refused by the
``foxhunt check leaks`` command with exit 3, naming the column or the setting.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

import foxhunt.validation.folds
from foxhunt.cli import app
from foxhunt.config.loader import load_config
from foxhunt.data.config import SynthConfig
from foxhunt.data.schemas import RowUnit
from foxhunt.data.synth import write_synthetic
from foxhunt.data.synth_market import synthetic_market
from foxhunt.dataset import leaks
from foxhunt.dataset.cache import compute_features
from foxhunt.dataset.leaks import Timing, check_leaks, perturb_after, purge_problems
from foxhunt.dataset.reach import Tail, WrittenLabels, changed_tail
from foxhunt.features.layout import STACK_FAMILIES
from foxhunt.features.pipeline import rows_from_market
from foxhunt.features.registry import FAMILIES
from foxhunt.validation.config import FoldConfig
from foxhunt.validation.folds import purged_walk_forward
from foxhunt.validation.labels import direction_labels

runner = CliRunner()


@pytest.fixture(scope="module")
def md():
    return synthetic_market(SynthConfig(seed=21, sessions=2, events_per_session=15_000, alpha=0.5))


@pytest.fixture(scope="module")
def market_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("leak_market")
    write_synthetic(SynthConfig(seed=4, sessions=2, events_per_session=12_000), out)
    return out


@pytest.mark.parametrize("row_unit", list(RowUnit))
def test_every_family_is_clean(md, row_unit: RowUnit) -> None:
    cfg = load_config("smoke", overrides=[f"data.row_unit={row_unit.value}"])
    report = check_leaks(md, cfg)
    assert report.clean, report.problems()
    families = {c.split(".")[0] for c in compute_features(rows_from_market(md, cfg.data), cfg).columns}
    assert families == set(STACK_FAMILIES[row_unit])
    assert all(c.rows_checked > 0 for c in report.cuts) and report.rows > max(
        c.rows_checked for c in report.cuts
    )
    assert report.folds_checked == cfg.folds.n_folds  # the normaliser and purge checks ran
    assert report.verdict.startswith("Leak guard: clean") and "event times and counts" in report.verdict


def test_the_perturbation_changes_values_times_and_counts_after_the_cut_only(md) -> None:
    iid = next(iter(md.books))
    book, trades = md.books[iid], md.trades[iid]
    t = int(book.ts_event[len(book) // 2])
    before = int(np.searchsorted(book.ts_event, t, "right"))
    other = perturb_after(md, t, seed=3)  # Timing.INSERT
    ob, ot = other.books[iid], other.trades[iid]
    # Up to the cut: every field of every event as it was.
    for name in ("ts_event", "bid_px", "ask_sz", "bid_ct"):
        assert np.array_equal(getattr(ob, name)[:before], getattr(book, name)[:before])
    k_tr = int(np.searchsorted(trades.ts_event, t, "right"))
    assert np.array_equal(ot.ts_event[:k_tr], trades.ts_event[:k_tr])
    # After it: other events (some deleted, some inserted), at other times, still sorted and after t.
    fewer = perturb_after(md, t, seed=3, timing=Timing.DELETE)
    for orig, new, less in (
        (book.ts_event, ob.ts_event, fewer.books[iid].ts_event),
        (trades.ts_event, ot.ts_event, fewer.trades[iid].ts_event),
    ):
        k = int(np.searchsorted(orig, t, "right"))
        tail, new_tail = orig[k:], new[k:]
        assert len(tail) < len(new_tail) and len(less) - k < len(tail)
        assert (new_tail > t).all() and (np.diff(new) >= 0).all() and (np.diff(less) >= 0).all()
        assert len(np.setdiff1d(new_tail, tail)) > len(tail) // 4  # most times moved
    assert not other.crossed[iid].any()
    # Timing.NONE: every event keeps its place and only its values change.
    same = perturb_after(md, t, seed=3, timing=Timing.NONE).books[iid]
    assert np.array_equal(same.ts_event, book.ts_event)
    after = book.ts_event > t
    assert np.array_equal(same.bid_px[~after], book.bid_px[~after])
    assert (same.bid_sz[after] != book.bid_sz[after]).all()


def _family(name: str, compute) -> SimpleNamespace:
    return SimpleNamespace(SLOTS=(name,), NEEDS_BOOK=False, compute=compute)


def _with_family(monkeypatch, cfg, name: str, family) -> dict:
    monkeypatch.setitem(STACK_FAMILIES, RowUnit.BAR, (*STACK_FAMILIES[RowUnit.BAR], name))
    params = {n: getattr(cfg.features, n) for n in FAMILIES} | {name: None}
    monkeypatch.setattr("foxhunt.dataset.cache._feature_params", lambda cfg: params)
    return {**FAMILIES, name: family}


def test_a_forward_window_is_caught_and_named(md, monkeypatch) -> None:
    def compute(inp, params):
        fwd = np.zeros((len(inp), 1), np.float32)
        c = np.nan_to_num(inp.close)
        fwd[:-5, 0] = np.sign(c[5:] - c[:-5])  # peeks 5 rows ahead
        return fwd

    cfg = load_config("smoke")
    registry = _with_family(monkeypatch, cfg, "leaky", _family("forward_move", compute))
    report = check_leaks(md, cfg, registry=registry)
    assert not report.clean
    assert report.leaking_columns == ["leaky.forward_move"]
    for cut in report.cuts:
        assert cut.first_leaking_row is not None and cut.first_leaking_row >= cut.rows_checked - 5


def test_the_next_rows_event_count_is_caught_only_by_the_timing_perturbation(md, monkeypatch) -> None:
    """Future activity with prices untouched: escaped the value-only guard (issue 14 item 4)."""

    def compute(inp, params):
        out = np.zeros((len(inp), 1), np.float32)
        out[:-1, 0] = inp.event_count[1:]  # how busy the next bar will be
        return out

    cfg = load_config("smoke")
    registry = _with_family(monkeypatch, cfg, "busy", _family("next_events", compute))
    report = check_leaks(md, cfg, registry=registry)
    assert report.leaking_columns == ["busy.next_events"]
    assert all(c.leaking_columns == ["busy.next_events"] for c in report.cuts)  # every cut sees it
    def values_only(md, t, seed=0, tick=0.25, timing=None):
        return perturb_after(md, t, seed, tick=tick, timing=Timing.NONE)

    monkeypatch.setattr(leaks, "perturb_after", values_only)
    values_checked = check_leaks(md, cfg, registry=registry)
    assert all(not c.leaking_columns for c in values_checked.cuts)  # what the cuts saw before
    assert values_checked.leaking_columns == ["busy.next_events"]  # the coverage check's cut rows see it


# --- the fold checks ------------------------------------------------------------------------------


def _walk_labels(n: int, horizon: int) -> WrittenLabels:
    """A random walk of ``n`` rows in one segment, labelled by direction at ``horizon`` rows."""
    from tests.validation.test_labels import _rows

    close = 100.0 + np.cumsum(np.random.default_rng(3).normal(size=n))
    starts = np.zeros(n, bool)
    starts[0] = True
    rows = _rows(close, close, close, starts, RowUnit.BAR)

    def label(r):
        d, ok = direction_labels(r.close, r.segment_start, (horizon,))
        return {f"dir_h{horizon}": d[:, 0], f"dir_h{horizon}.valid": ok[:, 0]}

    return WrittenLabels.of(rows, label, f"horizon {horizon}")


def test_purge_problems_hand_worked() -> None:
    # n = 100, 3 folds, validation from row 40, label span 5: fold 0 trains on rows 0..34, a gap of 6.
    folds = purged_walk_forward(100, FoldConfig(n_folds=3, min_train_fraction=0.4), label_span=5)
    written = _walk_labels(100, 5)
    assert purge_problems(folds, 5, 0, "training", written) == []
    # The gap must exceed folds.embargo_rows: 6 rows do not cover an embargo of 6.
    (line,) = [p for p in purge_problems(folds, 5, 6, "training", written) if "fold 0" in p]
    assert "training row 34 is 6 rows before validation row 40, inside the embargo" in line
    assert "folds.embargo_rows 6" in line
    unpurged = purged_walk_forward(100, FoldConfig(n_folds=3, min_train_fraction=0.4), label_span=0)
    found = purge_problems(unpurged, 0, 0, "training", written)
    # Rows 35..39 read row 40 on: measured on the labels, whatever span the folds were built with.
    assert len(found) == 3 and "training row 35 is 5 rows before validation row 40" in found[0]
    assert "dir_h5, dir_h5.valid reads up to row 40" in found[0]
    assert "label window [35, 40] is not purged" in found[0]
    assert "5 training rows read the block" in found[0] and "label span 0 rows" in found[0]
    # After the block (no walk-forward fold trains there; the rule is general): validation row 59's
    # label reads rows 60..64, and the training rows resume at row 62.
    after = dataclasses.replace(unpurged[0], train=np.r_[np.arange(30), np.arange(62, 100)])
    (line,) = purge_problems([after], 0, 0, "training", written)
    assert "training row 62 is inside the embargo after validation row 59: validation row 59's" in line
    assert "reads up to row 64" in line


def test_the_measured_reach_is_the_last_row_read() -> None:
    written = _walk_labels(300, 7)
    assert written.last_row_read(100, 101) == 107
    assert written.last_row_read(290, 295) == 297  # the labels of rows near the end read no further
    assert list(written.reads_from(150, np.arange(150))) == list(range(143, 150))
    for tail in Tail:  # every change leaves the rows before the cut as they were
        other = changed_tail(written.rows, 150, tail)
        assert np.array_equal(other.close[:150], written.rows.close[:150])


def test_a_label_span_that_forgets_the_barrier_horizon_is_caught(md, monkeypatch) -> None:
    # The planted bug of issue 58: the span forgets env.plan.barrier.horizon (120) and is 60, the
    # longest direction horizon, so the folds purge 60 rows where the barrier outcomes read 120. A
    # check with the same function passed it; the measured one names the fold, row and setting.
    cfg = load_config("smoke", overrides=["env.plan.barrier.horizon=120"])

    def forgets_the_barrier(horizons, barrier_horizon):
        return max(int(k) for k in horizons)

    monkeypatch.setattr(leaks, "label_span", forgets_the_barrier)
    assert leaks.fold_spans(cfg)["training"] == 60
    report = check_leaks(md, cfg, workers=1)
    # The decision-path check sees the same bug from the other side (the outcome labels of rows
    # whose window the faulty span says ends by a cut move with the rows after it): only labels.
    assert report.scaler_columns == []
    assert all(c.startswith(("label.", "the aux target")) for c in report.leaking_columns)
    assert not report.clean and len(report.fold_problems) == cfg.folds.n_folds
    for fold, line in enumerate(report.fold_problems):
        assert line.startswith(f"training and alpha check fold {fold}: training row ")
        assert "label.outcome, label.outcome.exit" in line and "is not purged" in line
        assert "label span 60 rows" in line and "env.plan.barrier.horizon 120" in line
    monkeypatch.undo()
    assert check_leaks(md, cfg, workers=1).fold_problems == []  # the real span: 120 rows purged


def _check_cli(market_dir: Path, *sets: str):
    args = ["check", "leaks", "--data", str(market_dir), "-q"]
    for s in sets:
        args += ["--set", s]
    return runner.invoke(app, args)


def test_a_normaliser_fitted_on_every_row_is_refused(md, market_dir: Path, monkeypatch) -> None:
    real_fit = foxhunt.validation.folds.fit_robust

    def fit_on_all_rows(x, train_rows, columns, clip=5.0):
        return real_fit(x, np.arange(len(x)), columns, clip=clip)  # the planted leak

    monkeypatch.setattr(foxhunt.validation.folds, "fit_robust", fit_on_all_rows)
    report = check_leaks(md, load_config("smoke"))
    assert report.leaking_columns == [] and report.fold_problems == []
    assert report.scaler_folds == [0, 1, 2] and "market.ret_lag1" in report.scaler_columns
    result = _check_cli(market_dir)
    assert result.exit_code == 3, result.output
    assert "fold normaliser" in result.output and "market." in result.output


def test_folds_without_purge_are_refused(market_dir: Path, monkeypatch) -> None:
    def no_purge(train, validation_start, validation_end, label_span, embargo):
        t = np.asarray(train, np.int64)
        return t[(t < validation_start) | (t >= validation_end)], 0, 0  # the purge switched off

    monkeypatch.setattr(foxhunt.validation.folds, "purge_and_embargo", no_purge)
    result = _check_cli(market_dir)
    assert result.exit_code == 3, result.output
    assert "is not purged" in result.output and "folds.embargo_rows 0" in result.output
    assert "label span 60 rows" in result.output  # smoke: the 60-bar horizon of the labels


def test_cli_on_clean_data(market_dir: Path) -> None:
    result = runner.invoke(app, ["check", "leaks", "--data", str(market_dir), "--json", "-q"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["clean"] and body["leaking_columns"] == [] and len(body["cuts"]) == 4
    assert body["verdict"].startswith("Leak guard: clean") and body["scaler_columns"] == []


# --- the guard in front of the commands, and its verdict in their reports ------------------------


@pytest.mark.slow
def test_train_from_a_cache_and_run_carry_the_verdict(market_dir: Path, tmp_path: Path, one_thread) -> None:
    from tests.test_job import QUICK_ALPHA
    from tests.train.test_run import TINY

    sets = ["--profile", "smoke", *(a for s in (*TINY, *QUICK_ALPHA) for a in ("--set", s))]
    built = runner.invoke(
        app, ["features", "build", "--data", str(market_dir), "--out", str(tmp_path / "c"), "-q", *sets]
    )
    assert built.exit_code == 0, built.output
    (cache,) = (tmp_path / "c").glob("*.arrow")
    trained = runner.invoke(app, ["train", "--cache", str(cache), "--out", str(tmp_path / "t"), "-q", *sets])
    assert trained.exit_code == 0, trained.output
    verdict = next(line for line in trained.output.splitlines() if line.startswith("Leak guard: clean"))
    folds = json.loads((tmp_path / "t" / "folds.json").read_text())
    assert [f["leak_guard"]["verdict"] for f in folds] == [verdict] * len(folds)

    ran = runner.invoke(
        app, ["run", "--data", str(market_dir), "--out", str(tmp_path / "r"), "-q", *sets]
    )
    assert ran.exit_code == 0, ran.output
    body = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert body["leak_guard"]["clean"] and body["leak_guard"]["verdict"] == verdict
    assert all(f["leak_guard"]["verdict"] == verdict for f in body["folds"])
    assert verdict in (tmp_path / "r" / "alpha" / "alpha.md").read_text()
    alpha = json.loads((tmp_path / "r" / "alpha" / "alpha.json").read_text())
    assert alpha["leak_guard"]["verdict"] == verdict
