"""The leak guard over the whole path to the decision, and its coverage (issue 58 items 1 and 2).

Planted leaks that the guard of ed93ab5 called clean (each of these tests fails there): the
environment's observation showing row t+1's features (the features themselves unchanged), on every
row and on every tenth; the input screen ranking columns on every row of the market instead of the
fold's training rows; outcome labels reaching past the label span the folds are purged by; and a
one-row look-ahead in a feature on 10% and on 1% of the rows (rows closing a minute past a whole 5
or 50 minutes: the phase the 4 cuts of this market miss, as they miss 66% and 96% of such leaks).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from foxhunt.config.loader import load_config
from foxhunt.data.config import SynthConfig
from foxhunt.data.schemas import RowUnit
from foxhunt.data.synth_market import synthetic_market
from foxhunt.dataset import leaks
from foxhunt.dataset.leaks import check_leaks
from foxhunt.env.core import TradingEnv
from foxhunt.features.layout import STACK_FAMILIES, STATE_FEATURE_GROUPS, STATE_LAYOUT
from foxhunt.features.registry import FAMILIES
from foxhunt.validation import screen as screening

pytestmark = pytest.mark.usefixtures("one_thread")

NS = 1_000_000_000


@pytest.fixture(scope="module")
def md():
    return synthetic_market(SynthConfig(seed=21, sessions=2, events_per_session=15_000, alpha=0.5))


def _with_family(monkeypatch, cfg, name: str, family) -> dict:
    monkeypatch.setitem(STACK_FAMILIES, RowUnit.BAR, (*STACK_FAMILIES[RowUnit.BAR], name))
    params = {n: getattr(cfg.features, n) for n in FAMILIES} | {name: None}
    monkeypatch.setattr("foxhunt.dataset.cache._feature_params", lambda cfg: params)
    return {**FAMILIES, name: family}


def _next_close_on(period_s: int):
    """A feature: the row's close, but on rows closing 60 s past a whole ``period_s`` the next
    row's (``shift(-1)``, 0 past the end of the rows): a one-row look-ahead on 30 / period_s of the
    30-second bars."""

    def values(inp) -> np.ndarray:
        c = np.nan_to_num(inp.close).astype(np.float32)
        leak = inp.ts % (period_s * NS) == 60 * NS
        return np.where(leak, np.append(c[1:], np.float32(0)), c)[:, None]

    return values


def _cuts_alone_missed(report) -> bool:
    """What the guard of ed93ab5 looked at: the feature columns at its 4 cuts."""
    return all(not c.leaking_columns for c in report.cuts)


def test_a_look_ahead_on_10_percent_of_rows_is_caught(md, monkeypatch) -> None:
    """A family that runs in chunks (it takes the carried state): caught by the chunked pass."""
    values = _next_close_on(300)

    def compute(inp, params, carry=None):  # stateless: every chunk is its own rows
        return values(inp)

    cfg = load_config("smoke")
    registry = _with_family(
        monkeypatch, cfg, "sparse", SimpleNamespace(SLOTS=("next",), NEEDS_BOOK=False, compute=compute)
    )
    report = check_leaks(md, cfg, registry=registry, workers=1)
    assert _cuts_alone_missed(report)
    assert not report.clean and report.leaking_columns == ["sparse.next"]
    assert report.coverage.rows == 459 and report.verdict.startswith(
        "Leak guard: LEAK: look-ahead in sparse.next"
    )
    row = report.coverage.first_leaking_row
    assert json.loads(json.dumps(report.to_dict()))["coverage"]["first_leaking_row"] == row  # JSON as written
    assert inp_ts(md, cfg)[row] % (300 * NS) == 60 * NS  # named at a row where it leaks


def inp_ts(md, cfg) -> np.ndarray:
    from foxhunt.features.pipeline import rows_from_market

    return rows_from_market(md, cfg.data).ts


def test_a_look_ahead_on_1_percent_of_rows_is_caught(md, monkeypatch) -> None:
    """A family without carried state: caught by recomputing it on the rows up to each cut row."""
    values = _next_close_on(3000)

    def compute(inp, params):
        return values(inp)

    cfg = load_config("smoke")
    registry = _with_family(
        monkeypatch, cfg, "rare", SimpleNamespace(SLOTS=("next",), NEEDS_BOOK=False, compute=compute)
    )
    ts = inp_ts(md, cfg)
    assert 0.005 < np.mean(ts % (3000 * NS) == 60 * NS) < 0.015  # about 1% of the rows
    report = check_leaks(md, cfg, registry=registry, workers=1)
    assert _cuts_alone_missed(report)
    assert report.leaking_columns == ["rare.next"]


def _peeking_observe(every: int):
    """TradingEnv.observe, with row t+1's features in place of row t's on rows ``t % every == 3``."""
    observe = TradingEnv.observe

    def peeking(self):
        obs = observe(self)
        row = self.state.row
        nxt = torch.where(row % every == 3 % every, torch.clamp(row + 1, max=self.market.rows - 1), row)
        feats, col = self.market.features[nxt], 0
        for name in STATE_FEATURE_GROUPS:
            g = STATE_LAYOUT.group(name)
            obs[:, g.slice] = feats[:, col : col + g.width]
            col += g.width
        return obs

    return peeking


@pytest.mark.parametrize("every", [1, 10])
def test_an_observation_of_the_next_rows_features_is_caught(md, monkeypatch, every: int) -> None:
    """The features are unchanged (the feature check holds); what the agent sees is not."""
    cfg = load_config("smoke")
    monkeypatch.setattr(TradingEnv, "observe", _peeking_observe(every))
    report = check_leaks(md, cfg, workers=1)
    assert _cuts_alone_missed(report)
    assert not report.clean
    assert report.leaking_columns == ["the observation (TradingEnv.observe)"], report.leaking_columns
    assert "observation" in report.verdict


def test_a_screen_on_every_row_is_caught(md, monkeypatch) -> None:
    def every_row(market, lo, hi, horizon, keep):  # validation rows included
        return screening.screen_columns(
            market.features.numpy(),
            tuple(market.feature_columns),
            market.mid.numpy(),
            market.segment.numpy(),
            0,
            market.rows,
            horizon,
            keep,
        )

    cfg = load_config("smoke")
    assert cfg.agent.network.input_screen > 0
    monkeypatch.setattr(screening, "fold_screen", every_row, raising=False)
    report = check_leaks(md, cfg, workers=1)
    assert not report.clean
    assert report.leaking_columns == []  # nothing else moved
    assert len(report.problems()) == cfg.folds.n_folds
    assert all("input screen of fold" in p for p in report.problems())


def test_labels_past_the_purged_span_are_caught(md, monkeypatch) -> None:
    """A label span that forgets the barrier horizon (120 rows, the span says 60): the outcome labels
    of rows 60..120 before a cut move. The purge check, which measures what the written labels read
    rather than trusting the span, names it too."""
    cfg = load_config("smoke", overrides=["env.plan.barrier.horizon=120"])
    monkeypatch.setattr(leaks, "label_span", lambda horizons, barrier: max(horizons))
    report = check_leaks(md, cfg, workers=1)
    assert len(report.fold_problems) == cfg.folds.n_folds  # the measured purge, independently
    assert "label.outcome" in report.leaking_columns
    assert _cuts_alone_missed(report)


def test_the_clean_verdict_states_the_bound(md) -> None:
    cfg = load_config("smoke")
    report = check_leaks(md, cfg, workers=1)
    assert report.clean, report.problems()
    cov = report.coverage
    assert cov.rows == 459 and cov.of_rows == report.rows - 1
    assert (
        "459 cut rows" in report.verdict
        and "(1 - p)^459" in report.verdict
        and "p = 1%: 0.99%" in report.verdict
    )
    assert report.screen_folds == cfg.folds.n_folds
    assert all(not c.moved_inputs for c in report.cuts)
