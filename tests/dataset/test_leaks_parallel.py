"""The leak guard's cuts in forked processes: the same report as in one process, a planted leak still
caught and named, a cut's error raised as itself, and as many workers as cores and memory allow."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from foxhunt.config.loader import load_config
from foxhunt.data.config import SynthConfig
from foxhunt.data.schemas import RowUnit
from foxhunt.data.synth_market import synthetic_market
from foxhunt.dataset import leaks
from foxhunt.dataset.leaks import check_leaks, cut_workers
from foxhunt.errors import FoxhuntError
from foxhunt.features.layout import STACK_FAMILIES
from foxhunt.features.registry import FAMILIES


@pytest.fixture(scope="module")
def md():
    return synthetic_market(SynthConfig(seed=21, sessions=2, events_per_session=15_000, alpha=0.5))


def _with_family(monkeypatch, cfg, name: str, slot: str, compute) -> dict:
    monkeypatch.setitem(STACK_FAMILIES, RowUnit.BAR, (*STACK_FAMILIES[RowUnit.BAR], name))
    params = {n: getattr(cfg.features, n) for n in FAMILIES} | {name: None}
    monkeypatch.setattr("foxhunt.dataset.cache._feature_params", lambda cfg: params)
    return {**FAMILIES, name: SimpleNamespace(SLOTS=(slot,), NEEDS_BOOK=False, compute=compute)}


def test_forked_cuts_give_the_report_of_one_process(md) -> None:
    cfg = load_config("smoke")
    one = check_leaks(md, cfg, workers=1)
    forked = check_leaks(md, cfg, workers=2)
    assert forked.clean and forked.to_dict() == one.to_dict()
    assert [c.t for c in forked.cuts] == sorted(c.t for c in forked.cuts)  # in cut order


def test_a_forward_window_is_caught_by_forked_cuts(md, monkeypatch) -> None:
    def compute(inp, params):
        fwd = np.zeros((len(inp), 1), np.float32)
        c = np.nan_to_num(inp.close)
        fwd[:-5, 0] = np.sign(c[5:] - c[:-5])  # peeks 5 rows ahead
        return fwd

    cfg = load_config("smoke")
    registry = _with_family(monkeypatch, cfg, "leaky", "forward_move", compute)
    forked = check_leaks(md, cfg, registry=registry, workers=4)
    assert forked.leaking_columns == ["leaky.forward_move"]
    assert all(c.leaking_columns == ["leaky.forward_move"] for c in forked.cuts)
    assert forked.to_dict() == check_leaks(md, cfg, registry=registry, workers=1).to_dict()


def test_an_error_in_a_forked_cut_reaches_the_caller_as_itself(md, monkeypatch) -> None:
    cfg = load_config("smoke")
    base_rows = len(leaks.rows_from_market(md, cfg.data))

    def compute(inp, params):  # fails on the perturbed markets only (their row counts differ)
        if len(inp) != base_rows:
            raise FoxhuntError("features.odd", "cannot take this market", "fix the family")
        return np.zeros((len(inp), 1), np.float32)

    registry = _with_family(monkeypatch, cfg, "odd", "x", compute)
    with pytest.raises(FoxhuntError, match="features.odd: cannot take this market"):
        check_leaks(md, cfg, registry=registry, workers=2)


def test_cut_workers_follow_cores_and_memory(md, monkeypatch) -> None:
    market = leaks._market_bytes(md)
    assert market > 1_000_000  # the book's columns are counted
    monkeypatch.setattr(leaks, "idle_cores", lambda: 2.4)  # e.g. 3 cores, load 0.6 (this process)
    monkeypatch.setattr(leaks, "_available_bytes", lambda: 100 * market)
    assert cut_workers(md, 4) == 3  # one per idle core, this one's included
    assert cut_workers(md, 2) == 2  # one per cut
    monkeypatch.setattr(leaks, "idle_cores", lambda: -1.5)  # 2 cores, load 3.5: none idle
    assert cut_workers(md, 4) == 1
    monkeypatch.setattr(leaks, "idle_cores", lambda: 15.0)
    monkeypatch.setattr(leaks, "_available_bytes", lambda: 5 * market)
    assert cut_workers(md, 4) == 2  # two copies of the market each
    monkeypatch.setattr(leaks, "_available_bytes", lambda: market)
    assert cut_workers(md, 4) == 1  # in this process


def test_meanwhile_runs_while_the_forked_cuts_do_and_its_errors_stop_them(md, monkeypatch) -> None:
    """``meanwhile`` (the main job builds the cache and compiles training there) runs in this process
    while the cut workers are alive, once, and the report is the one without it; an error in it is
    raised and the workers are stopped (none left behind)."""
    import multiprocessing

    cfg = load_config("smoke")
    seen: list[int] = []

    def count_workers() -> None:
        seen.append(len(multiprocessing.active_children()))

    report = check_leaks(md, cfg, workers=2, meanwhile=count_workers)
    assert seen == [2]  # both cut workers alive during it
    assert report.to_dict() == check_leaks(md, cfg, workers=1).to_dict()

    seen.clear()
    check_leaks(md, cfg, workers=1, meanwhile=count_workers)
    assert seen == [0]  # no workers: after the cuts, in this process

    def fails() -> None:
        raise RuntimeError("the compile failed")

    with pytest.raises(RuntimeError, match="the compile failed"):
        check_leaks(md, cfg, workers=2, meanwhile=fails)
    assert multiprocessing.active_children() == []


def test_guard_while_returns_meanwhiles_value_when_clean_and_raises_on_a_leak(monkeypatch, tmp_path) -> None:
    """:func:`guard_while` on DBN files: ``meanwhile`` gets the guard's reading (the cache is built
    from it) and its value comes back with a clean report; a leak is still refused after it ran."""
    from foxhunt.data.synth import write_synthetic
    from foxhunt.dataset.leaks import LeakFoundError, guard_while
    from foxhunt.dataset.prepared import Prepared
    from tests.train.test_run import tiny_cfg

    cfg = tiny_cfg()
    files = write_synthetic(cfg.synth, tmp_path / "market")
    got: list[Prepared] = []

    def keep(prepared: Prepared) -> int:
        got.append(prepared)
        return len(prepared.rows)

    report, rows = guard_while(files, cfg, "test", "nothing runs", keep)
    assert report.clean and rows == len(got[0].rows) == report.rows > 0

    def compute(inp, params):
        fwd = np.zeros((len(inp), 1), np.float32)
        c = np.nan_to_num(inp.close)
        fwd[:-5, 0] = np.sign(c[5:] - c[:-5])  # peeks 5 rows ahead
        return fwd

    from foxhunt.dataset import cache as cache_mod

    registry = _with_family(monkeypatch, cfg, "leaky", "forward_move", compute)
    plugins = cache_mod.with_plugins
    monkeypatch.setattr(cache_mod, "with_plugins", lambda found: plugins(found) | registry)
    monkeypatch.setattr(leaks, "cut_workers", lambda md, n: 2)  # forked, whatever the box's load
    with pytest.raises(LeakFoundError, match="nothing runs"):
        guard_while(files, cfg, "test", "nothing runs", keep)
    assert len(got) == 2  # it ran beside the cuts; the verdict refuses what it made
    monkeypatch.setattr(leaks, "cut_workers", lambda md, n: 1)
    with pytest.raises(LeakFoundError, match="nothing runs"):
        guard_while(files, cfg, "test", "nothing runs", keep)
    assert len(got) == 2  # the cuts in this process found the leak first: it did not run
