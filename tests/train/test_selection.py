"""Honest model selection (docs/design.md §7): the selection period is the tail of each fold's
training rows, training episodes end the fold's embargo before it, and nothing of an epoch reads the
validation period, so perturbing it changes no per-epoch number and not which epoch is reported.

The runs are the tiny trainings of ``tests/train/test_run.py`` (a few seconds each on one thread).
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

import foxhunt.train.run as run_mod
from foxhunt.backtest.reference import REFERENCE_COLUMN
from foxhunt.config.loader import load_config
from foxhunt.data.config import PlantedSignal
from foxhunt.errors import FoxhuntError
from foxhunt.features.cache_file import FeatureCache
from foxhunt.policy.checkpoint import read_checkpoint_meta
from foxhunt.policy.store import CheckpointStore
from foxhunt.report.schema import BEST_RULE, LAST_RULE
from foxhunt.train.config import TrainConfig
from foxhunt.train.run import Interrupted, train
from foxhunt.train.selection import diagnostic_rows, episode_starts, selection_rule, selection_summary
from foxhunt.validation.config import FoldConfig, FoldScheme, Selection
from foxhunt.validation.folds import FoldPeriods, fold_periods, purged_walk_forward
from tests.conftest import first_that_trades
from tests.train.test_run import canon, quiet, tiny_cfg

pytestmark = pytest.mark.usefixtures("one_thread")

ONE_FOLD = FoldConfig(n_folds=1, min_train_fraction=0.53, embargo_rows=60)
# The largest float32 below 1: torch.rand's largest draw.
U_MAX = float(torch.nextafter(torch.tensor(1.0), torch.tensor(0.0)))


@pytest.fixture(scope="module")
def cache(tiny_cache: FeatureCache) -> FeatureCache:
    return tiny_cache


# --- (1) where the selection period and the episodes lie ------------------------------------------


def test_selection_period_by_hand() -> None:
    """1,000 usable rows, embargo 60: the last 20% (200 rows) select, episodes end 60 rows before."""
    [fold] = purged_walk_forward(2_000, ONE_FOLD, 30)
    assert (fold.train_start, fold.train_end, fold.embargo) == (0, 1_000, 60)  # 1,060 - embargo
    p = fold_periods(fold, TrainConfig(steps_per_epoch=16))
    assert (p.collect_lo, p.collect_hi, p.select_lo, p.select_hi) == (0, 740, 800, 1_000)
    assert selection_rule(p) == BEST_RULE and selection_summary(p)["rows"] == 200
    capped = fold_periods(fold, TrainConfig(steps_per_epoch=16, selection_rows=150))  # the last 150 rows
    assert (capped.collect_hi, capped.select_lo, capped.select_hi) == (790, 850, 1_000)
    last = fold_periods(fold, TrainConfig(steps_per_epoch=16, selection=Selection.LAST))
    # every row trains
    assert (last.collect_hi, last.select_rows, selection_rule(last)) == (1_000, 0, LAST_RULE)


@pytest.mark.parametrize("scheme", list(FoldScheme))
@pytest.mark.parametrize(("fraction", "cap"), [(0.2, 0), (0.5, 0), (0.05, 0), (0.3, 700)])
def test_selection_rows_lie_in_the_training_block_after_the_episodes_before_the_purge(
    scheme: FoldScheme, fraction: float, cap: int
) -> None:
    params = FoldConfig(n_folds=3, scheme=scheme, min_train_fraction=0.4, embargo_rows=100)
    t = TrainConfig(steps_per_epoch=64, selection_fraction=fraction, selection_rows=cap)
    steps = t.steps_per_epoch
    for fold in purged_walk_forward(20_000, params, label_span=40):
        p = fold_periods(fold, t)
        train_rows = set(fold.train.tolist())
        # inside the training block (every selection row a usable training row) ...
        assert set(range(p.select_lo, p.select_hi)) <= train_rows and p.select_hi == fold.train_end
        want = round(fraction * len(fold.train))
        assert p.select_rows == (min(want, cap) if cap else want)
        # ... ending before the validation purge, as training rows do: label span + embargo clear
        assert p.select_hi - 1 + 40 < fold.validation_start
        assert fold.validation_start - (p.select_hi - 1) > 100
        # episodes: the extreme and random draws of torch.rand; a window is rows [start, start + steps]
        draws = torch.rand(10_000, generator=torch.Generator().manual_seed(0))
        u = torch.cat([torch.tensor([0.0, U_MAX]), draws])
        starts = episode_starts(u, p, steps)
        last_rows = starts + steps
        assert int(starts.min()) == p.collect_lo == fold.train_start
        assert int(last_rows.max()) <= p.select_lo - fold.embargo - 1  # >= embargo rows before selection
        assert int(last_rows.max()) >= p.select_lo - fold.embargo - 3  # ... and the block is used to its end


def test_too_small_a_selection_or_collection_is_one_line_naming_the_key() -> None:
    [fold] = purged_walk_forward(2_000, ONE_FOLD, 30)
    too_few = r"fold 0: .*selection period of 1 rows.*train\.selection_fraction"
    with pytest.raises(FoxhuntError, match=too_few):
        fold_periods(fold, TrainConfig(steps_per_epoch=16, selection_fraction=0.001))
    with pytest.raises(FoxhuntError, match=r"fold 0: 440 training rows are left for collection.*\(500\)"):
        fold_periods(fold, TrainConfig(steps_per_epoch=498, selection_fraction=0.5))


def test_diagnostic_rows_by_hand() -> None:
    """Where the direction-gap correlation reads: train_tail's selection period; under last the
    collection period's tail of the same size (so the very rows train_tail would select)."""
    [fold] = purged_walk_forward(2_000, ONE_FOLD, 30)  # 1,000 usable rows, embargo 60
    tail = TrainConfig(steps_per_epoch=16)
    assert diagnostic_rows(fold_periods(fold, tail), tail) == (800, 1_000)  # the selection period
    last = TrainConfig(steps_per_epoch=16, selection=Selection.LAST)
    assert diagnostic_rows(fold_periods(fold, last), last) == (800, 1_000)  # round(0.2 x 1,000) = 200
    capped = TrainConfig(steps_per_epoch=16, selection=Selection.LAST, selection_rows=150)
    assert diagnostic_rows(fold_periods(fold, capped), capped) == (850, 1_000)  # at most 150
    tiny = TrainConfig(steps_per_epoch=16, selection=Selection.LAST, selection_fraction=0.001)
    assert diagnostic_rows(fold_periods(fold, tiny), tiny) == (998, 1_000)  # round(1.0) = 1 -> at least 2
    # a collection period that starts later: 0.25 x (600 - 100) = 125 rows before row 600
    periods = FoldPeriods(Selection.LAST, 100, 600, select_lo=600, select_hi=600, embargo=30)
    quarter = TrainConfig(selection=Selection.LAST, selection_fraction=0.25)
    assert diagnostic_rows(periods, quarter) == (475, 600)


# --- (2) the validation period is never read before the end ---------------------------------------


def _perturbed_validation(real):
    """``market_tensors`` whose fold's validation rows are another market: prices mirrored about the
    first validation price (returns reversed, spreads kept) and the feature rows in reverse order."""

    def market_tensors(cache, fd, **kw):
        m = real(cache, fd, **kw)
        lo, hi = fd.fold.validation_start, fd.fold.validation_end
        pivot = float(m.mid[lo])

        def mirrored(x: torch.Tensor, partner: torch.Tensor) -> torch.Tensor:
            """``x`` outside the block; inside it, ``partner`` mirrored (a high is a mirrored low)."""
            out = x.clone()
            out[lo:hi] = 2 * pivot - partner[lo:hi]
            return out

        features = m.features.clone()
        features[lo:hi] = m.features[lo:hi].flip(0)
        return dataclasses.replace(
            m,
            features=features,
            mid=mirrored(m.mid, m.mid),
            high=mirrored(m.high, m.low),
            low=mirrored(m.low, m.high),
            bid=mirrored(m.bid, m.ask),
            ask=mirrored(m.ask, m.bid),
        )

    return market_tensors


def test_perturbing_the_validation_period_changes_no_epoch_and_not_the_pick(
    cache: FeatureCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs, one on a market whose validation rows are replaced: every per-epoch number (the
    history, the diagnostics lines), the best epoch and its weights are the same; only the numbers
    evaluated at the end over the validation period differ. Before the selection period each epoch's
    Sharpe came from the validation rows, so the histories differed and the pick could."""
    seen: list[torch.Tensor] = []  # the rows the trainer's episodes really start at
    real_starts = run_mod.episode_starts

    def recording(u: torch.Tensor, periods: Any, steps: int) -> torch.Tensor:
        seen.append(real_starts(u, periods, steps))
        return seen[-1]

    # The first seed whose 3 tiny epochs trade (the comparison's teeth, below); at e1a5f00 seeds 1-8
    # made 38, 182, 182, 0, 0, 13, 0 and 0 round trips (the profile's seed 7 none)
    def attempt(seed: int) -> tuple[tuple[Any, list[dict[str, Any]]], int]:
        seen.clear()
        shutil.rmtree(tmp_path / "plain", ignore_errors=True)  # a flat seed's run before it
        cfg = tiny_cfg("folds.n_folds=1", "train.epochs=3", "train.selection=train_tail", f"run.seed={seed}")
        with monkeypatch.context() as mp:
            mp.setattr(run_mod, "episode_starts", recording)
            plain = train(cache, cfg, tmp_path / "plain", log=quiet)
        return (cfg, plain), sum(f["trades"] + f["last_epoch"]["trades"] for f in plain)

    cfg, plain = first_that_trades(attempt)
    monkeypatch.setattr(run_mod, "market_tensors", _perturbed_validation(run_mod.market_tensors))
    other = train(cache, cfg, tmp_path / "other", log=quiet)
    # (1) in the trainer: the selection period is the training block's tail, the episodes end the
    # fold's embargo (here the label span, 60 rows) before it
    sel = plain[0]["selection"]
    assert sel["rows"] == round(0.2 * plain[0]["train_rows"]) and sel["end"] == plain[0]["train_rows"]
    embargo = sel["start"] - sel["collect_end"]
    assert embargo == int(cache.meta["label_span"]) == 60
    last_row = max(int(x.max()) for x in seen) + cfg.train.steps_per_epoch  # of any episode's window
    assert len(seen) == 3 and last_row < sel["start"] - embargo
    assert plain[0]["best_rule"] == BEST_RULE == sel["rule"]
    # (2) nothing of an epoch changed
    for a, b in zip(plain, other, strict=True):
        assert canon(a["history"]) == canon(b["history"])
        assert a["diagnostics"]["best_epoch"] == b["diagnostics"]["best_epoch"] and a["epoch"] == b["epoch"]
        assert a["selection"] == b["selection"]
    lines = [
        [json.loads(line) for line in (tmp_path / d / "diagnostics.jsonl").read_text().splitlines()]
        for d in ("plain", "other")
    ]
    for rs in lines:  # wall-clock fields aside
        for r in rs:
            r.pop("time", None)
            r["stats"] = {k: v for k, v in r.get("stats", {}).items() if not k.startswith("time/")}
    assert canon(lines[0]) == canon(lines[1]) and len(lines[0]) == 3  # 3 epochs
    store_a, store_b = (CheckpointStore(tmp_path / d, ring=1) for d in ("plain", "other"))
    a, b = (load_file(str(s.paths.best(0))) for s in (store_a, store_b))
    assert all(torch.equal(a[n], b[n]) for n in a if n.startswith("policy/"))
    assert store_a.best.metric(0) == store_b.best.metric(0)
    # The comparison has teeth: the per-epoch Sharpe varies, and the validation numbers, read once at
    # the end by a policy that trades there, are another market's.
    sharpes = [h["select_sharpe"] for f in plain for h in f["history"]]
    assert all(math.isfinite(s) for s in sharpes) and len(set(sharpes)) > 1
    traded = [k for k, f in enumerate(plain) if f["trades"] > 0 or f["last_epoch"]["trades"] > 0]
    assert traded
    for k in traded:
        assert (plain[k]["net_pnl"], plain[k]["last_epoch"]["net_pnl"]) != (
            other[k]["net_pnl"],
            other[k]["last_epoch"]["net_pnl"],
        )
    longs = [[f["baselines"]["long"]["net_pnl"] for f in run] for run in (plain, other)]
    assert longs[0] != longs[1]


# --- (3) train.selection = last -------------------------------------------------------------------


def test_selection_last_reports_the_last_epoch(cache: FeatureCache, tmp_path: Path) -> None:
    cfg = tiny_cfg("folds.n_folds=1", "train.epochs=2", "train.selection=last")
    [fold] = train(cache, cfg, tmp_path, log=quiet)
    store = CheckpointStore(tmp_path, ring=1)
    assert fold["checkpoint"] == "last" and fold["checkpoint_file"] == "checkpoints/fold0/last.safetensors"
    assert fold["epoch"] == fold["last_epoch"]["epoch"] == 1
    assert read_checkpoint_meta(store.paths.last(0))["epoch"] == 1
    for key in ("net_pnl", "trades", "sharpe_annual", "costs"):
        assert fold[key] == fold["last_epoch"][key], key
    assert not store.paths.best(0).exists() and fold["diagnostics"]["best_epoch"] == -1
    # no selection period: every usable training row trains, nothing is judged per epoch
    sel = fold["selection"]
    assert sel["rows"] == 0 and sel["collect_end"] == sel["end"] == fold["train_rows"]
    assert fold["best_rule"] == LAST_RULE
    assert all(math.isnan(h["select_sharpe"]) for h in fold["history"]) and len(fold["history"]) == 2


@pytest.mark.parametrize(
    ("profile", "selection"),
    [
        ("smoke", Selection.LAST),
        ("gpu", Selection.LAST),
        ("full", Selection.LAST),
        ("production", Selection.LAST),
        ("localdev", Selection.TRAIN_TAIL),
    ],
)
def test_profiles_report_their_last_epoch_localdev_selects(profile: str, selection: Selection) -> None:
    assert load_config(profile=profile).train.selection is selection
    assert TrainConfig().selection is Selection.TRAIN_TAIL  # the default


def test_selection_last_records_the_direction_gap_on_the_collection_tail(
    cache: FeatureCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under last (the smoke profile's) a planted market's epochs still record the direction gap's
    correlation with the carrier, finite, over the last 20% of the training rows (in sample), which
    the guard and the history carry like any q/ statistic."""
    cfg = tiny_cfg("folds.n_folds=1", "train.epochs=2")
    assert cfg.train.selection is Selection.LAST
    spans: list[tuple[int, int]] = []
    real_rows = run_mod.gap_rows

    def recording(lo: int, hi: int) -> torch.Tensor:
        spans.append((lo, hi))
        return real_rows(lo, hi)

    monkeypatch.setattr(run_mod, "gap_rows", recording)
    planted = REFERENCE_COLUMN[PlantedSignal.IMBALANCE]
    [fold] = train(cache, cfg, tmp_path, log=quiet, planted=planted)
    rows = fold["train_rows"]  # one fold from row 0: its usable rows are [0, rows)
    assert fold["selection"]["collect_end"] == fold["selection"]["end"] == rows  # every usable row trains
    assert spans == [(rows - round(0.2 * rows), rows)] * 2  # ... and its tail is read, once an epoch
    corr = [h["qgap_corr"] for h in fold["history"]]
    assert len(corr) == 2 and all(math.isfinite(c) and -1 <= c <= 1 for c in corr)
    lines = [json.loads(line) for line in (tmp_path / "diagnostics.jsonl").read_text().splitlines()]
    assert [r["stats"]["q/direction_gap_corr"] for r in lines if "stats" in r] == corr


# --- (4) resume -----------------------------------------------------------------------------------


def test_a_resumed_run_keeps_its_selection(cache: FeatureCache, tmp_path: Path) -> None:
    """Interrupted after its first epoch and resumed: the same selection period, per-epoch history, best
    epoch and best Sharpe as the uninterrupted run (the stored best is judged against, not restarted)."""
    cfg = tiny_cfg("folds.n_folds=1", "train.epochs=2", "train.selection=train_tail")
    whole = train(cache, cfg, tmp_path / "whole", log=quiet)
    with pytest.raises(Interrupted):
        train(cache, cfg, tmp_path / "resumed", log=quiet, stop_after=(0, 0))
    resumed = train(cache, cfg, tmp_path / "resumed", resume=True, log=quiet)
    assert canon(resumed) == canon(whole)
    [fold] = whole
    best = fold["diagnostics"]["best_epoch"]
    stored = CheckpointStore(tmp_path / "resumed", ring=1).best.metric(0)
    sharpes = [h["select_sharpe"] for h in fold["history"]]
    assert stored == max(sharpes) == sharpes[best]
    # another selection is another run: a resume with it is refused, naming the key
    other = tiny_cfg(
        "folds.n_folds=1", "train.epochs=2", "train.selection=train_tail", "train.selection_fraction=0.3"
    )
    with pytest.raises(FoxhuntError, match=r"train\.selection_fraction: 0\.2 -> 0\.3"):
        train(cache, other, tmp_path / "resumed", resume=True, log=quiet)
