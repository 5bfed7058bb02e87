"""Backtest metrics: NumPy reference, unwritten steps, magnitude binning, hand-worked maths, plausibility."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
import torch

from foxhunt.backtest.metrics import (
    MAX_PLAUSIBLE_SHARPE_ANNUAL,
    UNDEFINED,
    StepRecord,
    branch_sizes,
    compute_metrics,
    implausibility,
    per_episode_metrics,
    sharpe_ceiling_from_auc,
    sharpe_lower_bound,
    trade_t_stat,
)
from foxhunt.domain.actions import BranchConfig

C0 = 100_000.0
SHORT, HOLD, LONG, FLAT = 0, 1, 2, 3
QUARTER, HALF, FULL = 0, 1, 2


def _f64(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


# (directions, magnitudes, order types, urgencies): the default 4 x 3 x 3 x 3 and other sets
SIZE_SETS = [(4, 3, 3, 3), (3, 1, 1, 2), (4, 5, 2, 1)]


def _kw(sizes: tuple[int, int, int, int], bars_per_year: float = 252.0 * 390) -> dict[str, Any]:
    d, m, o, u = sizes
    return {
        "bars_per_year": bars_per_year,
        "initial_capital": C0,
        "n_directions": d,
        "n_magnitudes": m,
        "n_order_types": o,
        "n_urgencies": u,
    }


def _ep_kw(kw: dict[str, Any]) -> dict[str, Any]:
    return {k: kw[k] for k in ("bars_per_year", "initial_capital", "n_directions")}


# --- random records ----------------------------------------------------------------------------


def _random_arrays(
    rng: np.random.Generator,
    n_episodes: int,
    n_steps: int,
    sizes: tuple[int, ...],
    garbage: bool,
    full: bool = False,
) -> dict[str, np.ndarray]:
    """Random consistent records; episodes end early at random (one at step 3, one never writes).

    ``full``: every step of every episode written.
    """
    d, m, o, u = sizes
    E, T = n_episodes, n_steps
    lengths = rng.integers(0, T + 1, E)
    fixed = [T, min(3, T), 0][:E]
    lengths[: len(fixed)] = fixed
    if full:
        lengths[:] = T
    written = np.arange(T)[None, :] < lengths[:, None]
    gross = rng.normal(0.0, 300.0, (E, T)).round(2)
    costs = rng.choice([0.0, 2.25, 4.5, 11.0], (E, T))
    equity = C0 + np.cumsum(gross - costs, axis=1)
    position = rng.integers(-8, 9, (E, T)).astype(np.float64) * (rng.random((E, T)) < 0.7)
    closed = rng.random((E, T)) < 0.3
    trade_pnl = np.where(rng.random((E, T)) < 0.1, 0.0, rng.normal(20.0, 200.0, (E, T)))  # some ties at 0
    a = {
        "written": written,
        "gross_pnl": gross,
        "costs": costs,
        "position": position,
        "equity": equity,
        "picked_direction": rng.integers(0, d, (E, T)),
        "picked_magnitude": rng.integers(0, m, (E, T)),
        "picked_order": rng.integers(0, o, (E, T)),
        "picked_urgency": rng.integers(0, u, (E, T)),
        "realised_direction": rng.integers(0, d, (E, T)),
        "realised_magnitude": rng.integers(0, m, (E, T)),
        "trade_closed": closed,
        "trade_pnl": np.where(closed, trade_pnl, 0.0),
        "closed_magnitude": np.where(closed, rng.integers(0, m, (E, T)), -1),
    }
    off = ~written
    for k, v in a.items():
        if k == "written":
            continue
        if v.dtype == bool:  # garbage: everything "closed" after the end
            v[off] = garbage
        elif v.dtype.kind == "i":
            v[off] = 0 if garbage else -1  # 0 decodes as Short / Quarter / ...
        else:
            v[off] = rng.choice([1e300, -1e300, np.nan, np.inf], off.sum()) if garbage else 0.0
    return a


def _record(a: dict[str, np.ndarray], device: str = "cpu") -> StepRecord:
    return StepRecord(**{k: torch.as_tensor(v, device=device) for k, v in a.items()})


# --- the NumPy reference: loop over episodes, mask, compute ------------------------------------


def _ratio(mu: float, spread: float, n: int) -> float:
    """The Sharpe rule written out: 0 below two returns or at zero spread (up to 1e-4 |mu|)."""
    return mu / spread if n >= 2 and spread > 1e-4 * abs(mu) else 0.0


def _episode_ref(a: dict[str, np.ndarray], e: int, bpy: float, n_dir: int) -> dict[str, Any]:
    idx = np.flatnonzero(a["written"][e])
    n = len(idx)
    eq, pos = a["equity"][e, idx], a["position"][e, idx]
    net = a["gross_pnl"][e, idx] - a["costs"][e, idx]
    eq_before = np.concatenate([[C0], eq[:-1]])
    r = net / eq_before
    dpos = np.abs(pos - np.concatenate([[0.0], pos[:-1]]))
    peak = np.maximum.accumulate(np.concatenate([[C0], eq]))[1:]
    dd = (peak - eq) / peak
    closed = a["trade_closed"][e, idx]
    tp = a["trade_pnl"][e, idx][closed]
    cm = a["closed_magnitude"][e, idx][closed]
    mu = r.mean() if n else 0.0
    sigma = r.std() if n else 0.0
    delta = math.sqrt(np.mean(np.minimum(r, 0.0) ** 2)) if n else 0.0
    max_dd = dd.max() if n else 0.0
    counts = np.array([(a["picked_direction"][e, idx] == k).sum() for k in range(n_dir)], float)
    p = counts / n if n else counts
    return {
        "n": n,
        "r": r,
        "tp": tp,
        "cm": cm,
        "steps": n,
        "net_pnl": net.sum(),
        "gross_pnl": a["gross_pnl"][e, idx].sum(),
        "costs": a["costs"][e, idx].sum(),
        "trades": len(tp),
        "win_rate": (tp > 0).mean() if len(tp) else -1.0,  # undefined: the -1 sentinel
        "avg_trade_pnl": tp.mean() if len(tp) else 0.0,
        "mean_return_per_bar": mu,
        "sharpe_per_bar": _ratio(mu, sigma, n),
        "sharpe_annual": _ratio(mu, sigma, n) * math.sqrt(bpy),
        "sortino_annual": _ratio(mu, delta, n) * math.sqrt(bpy),
        "annual_return": mu * bpy,
        "max_drawdown": max_dd,
        "calmar": mu * bpy / max_dd if max_dd > 0 else 0.0,
        "active_frac": (pos != 0).mean() if n else 0.0,
        "direction_entropy": -sum(q * math.log(q) for q in p if q > 0),
        "contracts_traded": dpos.sum(),
        "turnover": dpos.mean() if n else 0.0,
        "exposure": np.abs(pos).mean() if n else 0.0,
        "final_equity": eq[-1] if n else C0,
    }


def _reference(a: dict[str, np.ndarray], kw: dict[str, Any]) -> dict[str, Any]:
    bpy, n_mag = kw["bars_per_year"], kw["n_magnitudes"]
    eps = [_episode_ref(a, e, bpy, kw["n_directions"]) for e in range(a["written"].shape[0])]
    r = np.concatenate([ep["r"] for ep in eps])
    tp = np.concatenate([ep["tp"] for ep in eps])
    cm = np.concatenate([ep["cm"] for ep in eps])
    n = len(r)
    mu = r.mean() if n else 0.0
    sigma = r.std() if n else 0.0
    delta = math.sqrt(np.mean(np.minimum(r, 0.0) ** 2)) if n else 0.0
    max_dd = max([ep["max_drawdown"] for ep in eps], default=0.0)
    w = a["written"]

    def shares(x: np.ndarray, k: int) -> list[float]:
        return [float((x[w] == v).sum() / n) if n else 0.0 for v in range(k)]

    picked = {
        "direction": shares(a["picked_direction"], kw["n_directions"]),
        "magnitude": shares(a["picked_magnitude"], n_mag),
        "order_type": shares(a["picked_order"], kw["n_order_types"]),
        "urgency": shares(a["picked_urgency"], kw["n_urgencies"]),
    }
    contracts = sum(ep["contracts_traded"] for ep in eps)
    return {
        "steps": n,
        "episodes": len(eps),
        "net_pnl": sum(ep["net_pnl"] for ep in eps),
        "gross_pnl": sum(ep["gross_pnl"] for ep in eps),
        "costs": sum(ep["costs"] for ep in eps),
        "trades": len(tp),
        "win_rate": (tp > 0).mean() if len(tp) else -1.0,  # undefined: the -1 sentinel
        "win_rate_by_magnitude": [
            (tp[cm == k] > 0).mean() if (cm == k).any() else -1.0 for k in range(n_mag)
        ],
        "trades_by_magnitude": [int((cm == k).sum()) for k in range(n_mag)],
        "avg_trade_pnl": tp.mean() if len(tp) else 0.0,
        "trade_pnl_std": tp.std() if len(tp) else 0.0,  # population std (ddof 0)
        "mean_return_per_bar": mu,
        "sharpe_per_bar": _ratio(mu, sigma, n),
        "sharpe_annual": _ratio(mu, sigma, n) * math.sqrt(bpy),
        "sortino_annual": _ratio(mu, delta, n) * math.sqrt(bpy),
        "bars_per_year": bpy,
        "annual_return": mu * bpy,
        "max_drawdown": max_dd,
        "calmar": mu * bpy / max_dd if max_dd > 0 else 0.0,
        "active_frac": sum((ep["active_frac"] * ep["n"]) for ep in eps) / n if n else 0.0,
        "direction_entropy": -sum(q * math.log(q) for q in picked["direction"] if q > 0),
        "contracts_traded": contracts,
        "turnover": contracts / n if n else 0.0,
        "exposure": sum(ep["exposure"] * ep["n"] for ep in eps) / n if n else 0.0,
        "picked": picked,
        "realised": {
            "direction": shares(a["realised_direction"], kw["n_directions"]),
            "magnitude": shares(a["realised_magnitude"], n_mag),
        },
        "_episodes": eps,
    }


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in d.items():
        if k.startswith("_"):
            continue
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}/"))
        elif isinstance(v, list):
            out.update({f"{prefix}{k}[{i}]": float(x) for i, x in enumerate(v)})
        else:
            out[f"{prefix}{k}"] = float(v)
    return out


def _assert_close(got: dict[str, Any], want: dict[str, Any], tol: float = 1e-9) -> None:
    g, w = _flat(got), _flat(want)
    assert g.keys() == w.keys()
    bad = {k: (g[k], w[k]) for k in g if not math.isclose(g[k], w[k], rel_tol=tol, abs_tol=tol)}
    assert not bad


@pytest.mark.parametrize("sizes", SIZE_SETS)
@pytest.mark.parametrize("seed", range(8))
def test_metrics_match_numpy_reference(seed: int, sizes: tuple[int, int, int, int]):
    rng = np.random.default_rng(seed)
    a = _random_arrays(rng, n_episodes=7, n_steps=60, sizes=sizes, garbage=bool(seed % 2))
    kw = _kw(sizes)
    want = _reference(a, kw)
    got = compute_metrics(_record(a), **kw)
    _assert_close(got, want)
    assert isinstance(got["trades"], int) and isinstance(got["steps"], int)
    assert got["trades"] > 0 and got["max_drawdown"] > 0  # the data exercise every formula

    per_ep = per_episode_metrics(_record(a), **_ep_kw(kw))
    for name, t in per_ep.items():
        assert t.shape == (7,) and t.dtype == torch.float64
        ref = [ep[name] for ep in want["_episodes"]]
        np.testing.assert_allclose(t.numpy(), ref, rtol=1e-9, atol=1e-9, err_msg=name)


# --- unwritten steps (skipped by every reducer) ------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_unwritten_steps_never_reach_a_metric(seed: int):
    # the same written steps; after each episode's end either clean (-1, 0) or garbage
    # (huge and non-finite PnL, action 0 = Short, every step a "closed trade" of magnitude 0)
    sizes = SIZE_SETS[0]
    clean = _random_arrays(np.random.default_rng(seed), 6, 40, sizes, garbage=False)
    dirty = _random_arrays(np.random.default_rng(seed), 6, 40, sizes, garbage=True)
    assert (clean["written"] == dirty["written"]).all() and not clean["written"].all()
    assert np.isnan(dirty["equity"][~dirty["written"]]).any()
    kw = _kw(sizes)
    assert compute_metrics(_record(dirty), **kw) == compute_metrics(_record(clean), **kw)
    ep_c = per_episode_metrics(_record(clean), **_ep_kw(kw))
    ep_d = per_episode_metrics(_record(dirty), **_ep_kw(kw))
    assert all(torch.equal(ep_c[k], ep_d[k]) for k in ep_c)


def test_episode_ending_at_step_3_counts_only_its_steps():
    # episode 0 ends at step 3 (capital floor); steps 3..9 are zero-filled as the old buffer was:
    # zeros decode as Short, and every later step would look like a Short with a trade closing
    a = _random_arrays(np.random.default_rng(7), 1, 10, SIZE_SETS[0], garbage=True)
    a["written"][0] = np.arange(10) < 3
    for k in ("picked_direction", "realised_direction"):
        a[k][0, :3] = LONG
    a["picked_direction"][0, 3:] = SHORT
    kw = _kw(SIZE_SETS[0])
    got = compute_metrics(_record(a), **kw)
    short = compute_metrics(_record({k: v[:, :3].copy() for k, v in a.items()}), **kw)
    _assert_close(got, short, tol=1e-12)
    assert got["steps"] == 3
    assert got["picked"]["direction"] == [0.0, 0.0, 1.0, 0.0]  # no phantom Short
    assert got["realised"]["direction"] == [0.0, 0.0, 1.0, 0.0]
    assert got["direction_entropy"] == 0.0
    assert got["trades"] == int(a["trade_closed"][0, :3].sum())


# --- magnitude binning (by the magnitude a trade closed) ----------------------------------------


def test_closing_trades_binned_by_the_magnitude_they_closed():
    # t0: open Long Full (8 contracts); t1: reduce to Quarter (2): closes 6 contracts of the Full
    # trade with +120; t2: Flat: closes the Quarter trade with -30; t3: Hold flat
    rec = StepRecord.blank(1, 4)
    rec.written[0] = True
    rec.position[0] = _f64([8.0, 2.0, 0.0, 0.0])
    rec.equity[0] = _f64([C0, C0 + 120, C0 + 90, C0 + 90])
    rec.gross_pnl[0] = _f64([0.0, 120.0, -30.0, 0.0])
    rec.picked_direction[0] = torch.tensor([LONG, LONG, FLAT, HOLD])
    rec.picked_magnitude[0] = torch.tensor([FULL, QUARTER, QUARTER, QUARTER])  # the step's own action
    rec.realised_direction[0] = rec.picked_direction[0]
    rec.realised_magnitude[0] = rec.picked_magnitude[0]
    rec.picked_order[0] = 0
    rec.picked_urgency[0] = 0
    rec.trade_closed[0, :, 0] = torch.tensor([False, True, True, False])  # one trade slot per step
    rec.trade_pnl[0, :, 0] = _f64([0.0, 120.0, -30.0, 0.0])
    rec.closed_magnitude[0, :, 0] = torch.tensor([-1, FULL, QUARTER, -1])
    got = compute_metrics(rec, **_kw(SIZE_SETS[0]))
    # the +120 close happened on a step whose action was Quarter, yet it is a Full trade's close;
    # no Half trade closed: its win rate is undefined (-1), not 0
    assert got["trades_by_magnitude"] == [1, 0, 1]
    assert got["win_rate_by_magnitude"] == [0.0, -1.0, 1.0]
    assert got["win_rate"] == 0.5 and got["avg_trade_pnl"] == 45.0
    assert got["picked"]["magnitude"] == [0.75, 0.0, 0.25]
    assert got["contracts_traded"] == 8.0 + 6.0 + 2.0 and got["turnover"] == 4.0
    assert got["exposure"] == 2.5 and got["active_frac"] == 0.5


# --- hand-worked numbers -----------------------------------------------------------------------


def test_sharpe_sortino_drawdown_calmar_hand_worked():
    # equity 100 -> 110 -> 99 -> 108.9: returns r = 0.1, -0.1, 0.1
    #   mu = 1/30; sigma^2 = (2 (2/30)^2 + (4/30)^2) / 3 = 8/900, sigma = sqrt(8)/30 -> Sharpe 1/sqrt(8)
    #   delta^2 = 0.01/3 -> Sortino = (1/30) / (0.1/sqrt(3)) = 1/sqrt(3)
    #   peak 110, trough 99 -> drawdown 11/110 = 0.1; B = 4 bars a year: annual return 4/30, Calmar 4/3
    rec = StepRecord.blank(2, 5)  # episode 1 never writes; episode 0 ends after step 3
    rec.written[0, :3] = True
    rec.gross_pnl[0, :3] = _f64([12.0, -10.0, 10.9])
    rec.costs[0, :3] = _f64([2.0, 1.0, 1.0])
    rec.equity[0, :3] = _f64([110.0, 99.0, 108.9])
    rec.position[0, :3] = _f64([1.0, -1.0, 0.0])
    for f in ("picked_direction", "picked_magnitude", "picked_order", "picked_urgency"):
        getattr(rec, f)[0, :3] = 0
    rec.realised_direction[0, :3] = torch.tensor([LONG, SHORT, FLAT])
    rec.realised_magnitude[0, :3] = 0
    kw = {**_kw(SIZE_SETS[0], bars_per_year=4.0), "initial_capital": 100.0}
    got = compute_metrics(rec, **kw)
    assert got["steps"] == 3 and got["episodes"] == 2 and got["trades"] == 0
    assert got["net_pnl"] == pytest.approx(8.9) and got["costs"] == 4.0
    assert got["gross_pnl"] == pytest.approx(12.9)
    assert got["mean_return_per_bar"] == pytest.approx(1 / 30, rel=1e-12)
    assert got["sharpe_per_bar"] == pytest.approx(1 / math.sqrt(8), rel=1e-12)
    assert got["sharpe_annual"] == pytest.approx(2 / math.sqrt(8), rel=1e-12)
    assert got["sortino_annual"] == pytest.approx(2 / math.sqrt(3), rel=1e-12)
    assert got["bars_per_year"] == 4.0
    assert got["max_drawdown"] == pytest.approx(0.1, rel=1e-12)
    assert got["annual_return"] == pytest.approx(4 / 30, rel=1e-12)
    assert got["calmar"] == pytest.approx(4 / 3, rel=1e-12)
    # positions 1, -1, 0: |Δ| = 1, 2, 1; |pos| = 1, 1, 0
    assert got["turnover"] == pytest.approx(4 / 3) and got["exposure"] == pytest.approx(2 / 3)
    assert got["active_frac"] == pytest.approx(2 / 3)
    assert got["picked"]["direction"] == [1.0, 0.0, 0.0, 0.0] and got["direction_entropy"] == 0.0
    assert got["realised"]["direction"] == pytest.approx([1 / 3, 0, 1 / 3, 1 / 3])
    ep = per_episode_metrics(rec, **_ep_kw(kw))
    assert ep["max_drawdown"].tolist() == pytest.approx([0.1, 0.0])
    assert ep["final_equity"].tolist() == [108.9, 100.0]
    assert ep["steps"].tolist() == [3.0, 0.0]


def test_drawdown_counts_losses_from_the_initial_capital():
    # never above C0: peak is C0 = 100, trough 90 -> 0.1; the later recovery does not undo it
    rec = StepRecord.blank(1, 3)
    rec.written[:] = True
    rec.equity[0] = _f64([95.0, 90.0, 120.0])
    rec.gross_pnl[0] = _f64([-5.0, -5.0, 30.0])
    for f in ("picked_direction", "picked_magnitude", "picked_order", "picked_urgency"):
        getattr(rec, f)[:] = 0
    rec.realised_direction[:] = 0
    rec.realised_magnitude[:] = 0
    got = compute_metrics(rec, **{**_kw(SIZE_SETS[0]), "initial_capital": 100.0})
    assert got["max_drawdown"] == pytest.approx(0.1)


def test_direction_entropy_hand_worked():
    # picked directions Short, Long, Long, Flat: p = 1/4, 0, 1/2, 1/4 -> H = 1.5 ln 2
    rec = StepRecord.blank(1, 4)
    rec.written[:] = True
    rec.equity[:] = C0
    rec.picked_direction[0] = torch.tensor([SHORT, LONG, LONG, FLAT])
    for f in (
        "picked_magnitude",
        "picked_order",
        "picked_urgency",
        "realised_direction",
        "realised_magnitude",
    ):
        getattr(rec, f)[:] = 0
    got = compute_metrics(rec, **_kw(SIZE_SETS[0]))
    assert got["direction_entropy"] == pytest.approx(1.5 * math.log(2), rel=1e-12)
    assert got["picked"]["direction"] == [0.25, 0.0, 0.5, 0.25]


# --- degenerate cases --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 5), (0, 5), (3, 0), (0, 0)])
def test_nothing_written_gives_zeros(shape: tuple[int, int]):
    rec = StepRecord.blank(*shape)
    got = _flat(compute_metrics(rec, **_kw(SIZE_SETS[0])))
    rates = {k for k in got if k.startswith("win_rate")}
    assert all(v == 0.0 for k, v in got.items() if k not in ("bars_per_year", "episodes", *rates))
    assert all(got[k] == UNDEFINED for k in rates)  # no trade: undefined, not 0
    ep = per_episode_metrics(rec, **_ep_kw(_kw(SIZE_SETS[0])))
    assert all(t.shape == (shape[0],) for t in ep.values())
    assert (ep["final_equity"] == C0).all() and (ep["sharpe_annual"] == 0).all()


def _flat_book(n: int, net: np.ndarray | None = None) -> dict[str, np.ndarray]:
    net = np.zeros(n) if net is None else net
    a = _random_arrays(np.random.default_rng(0), 1, n, SIZE_SETS[0], garbage=False, full=True)
    a["gross_pnl"][0], a["costs"][0] = net, 0.0
    a["equity"][0] = C0 + np.cumsum(net)
    a["trade_closed"][:] = False
    a["closed_magnitude"][:] = -1
    return a


def test_degenerate_cases_give_zero_or_the_sentinel_not_nan():
    kw = _kw(SIZE_SETS[0])
    # no PnL at all: zero variance, no drawdown, no trades; win rates undefined: -1, not 0
    got = compute_metrics(_record(_flat_book(20)), **kw)
    assert got["sharpe_annual"] == got["sortino_annual"] == got["calmar"] == 0.0
    assert got["avg_trade_pnl"] == got["max_drawdown"] == 0.0 and got["trades"] == 0
    assert got["win_rate"] == UNDEFINED == -1.0 and got["win_rate_by_magnitude"] == [-1.0, -1.0, -1.0]
    ep = per_episode_metrics(_record(_flat_book(20)), **_ep_kw(kw))
    assert ep["win_rate"].tolist() == [-1.0]
    # a constant 0.1% return per bar: zero variance up to rounding -> Sharpe 0 (the drawdown
    # check of implausibility is what flags it); no losing bar -> Sortino 0; no drawdown -> Calmar 0
    equity = C0 * 1.001 ** np.arange(1, 31)
    got = compute_metrics(_record(_flat_book(30, np.diff(equity, prepend=C0))), **kw)
    assert got["mean_return_per_bar"] == pytest.approx(1e-3, rel=1e-9)
    assert got["sharpe_annual"] == got["sortino_annual"] == got["calmar"] == 0.0
    assert got["max_drawdown"] == 0.0
    assert all(math.isfinite(v) for v in _flat(got).values())


def test_a_single_written_step_has_sharpe_and_sortino_zero() -> None:
    a = _flat_book(1, np.array([-50.0]))
    got = compute_metrics(_record(a), **_kw(SIZE_SETS[0]))
    assert got["steps"] == 1 and got["mean_return_per_bar"] == pytest.approx(-5e-4)
    assert got["sharpe_annual"] == got["sortino_annual"] == 0.0


def test_inconsistent_records_are_refused():
    a = _random_arrays(np.random.default_rng(1), 4, 20, SIZE_SETS[0], garbage=False)
    kw = _kw(SIZE_SETS[0])
    bad = {k: v.copy() for k, v in a.items()}
    bad["picked_direction"][0, 0] = -1  # a written step left at the "unwritten" marker
    with pytest.raises(ValueError, match=r"picked direction outside \[0, 4\): 1 step"):
        compute_metrics(_record(bad), **kw)
    bad = {k: v.copy() for k, v in a.items()}
    bad["trade_closed"][0, 0], bad["closed_magnitude"][0, 0] = True, -1
    with pytest.raises(ValueError, match="closed_magnitude outside"):
        compute_metrics(_record(bad), **kw)
    with pytest.raises(ValueError, match="n_magnitudes must be a positive branch size"):
        compute_metrics(_record(a), **{**kw, "n_magnitudes": 0})
    with pytest.raises(TypeError, match=r"StepRecord.equity is torch.float32, expected torch.float64"):
        dataclasses.replace(_record(a), equity=torch.zeros(4, 20))
    with pytest.raises(ValueError, match=r"it must be \(4, 20\) on cpu \(written: \(4, 20\)\)"):
        dataclasses.replace(_record(a), costs=torch.zeros(4, 21, dtype=torch.float64))


def test_sharpe_bound_and_trade_t_stat_by_hand():
    # per-bar SR 0.05 over 10,000 bars: SE = sqrt((1 + 0.00125) / 1e4) = 0.0100062; bound at z = 3
    m = {"sharpe_annual": 0.05 * math.sqrt(250_000), "steps": 10_000, "bars_per_year": 250_000}
    assert sharpe_lower_bound(m, 3.0) == pytest.approx((0.05 - 3 * 0.0100062) * 500.0, rel=1e-5)
    assert sharpe_lower_bound({"sharpe_annual": 12.0}) == 12.0  # no sample size: the point estimate
    # 25 trades of mean 100, std 200: t = 0.5 * 5 = 2.5; t_max = 10 * sqrt(10,000 / 250,000) + 3 = 5
    m.update(trades=25, avg_trade_pnl=100.0, trade_pnl_std=200.0)
    assert trade_t_stat(m, 10.0, 3.0) == pytest.approx((2.5, 5.0))
    assert trade_t_stat({**m, "trades": 9}, 10.0, 3.0) == (0.0, math.inf)  # too few trades to judge


def test_small_losses_are_not_a_near_zero_drawdown_leak():
    # 80 trades, 0.07% drawdown, but 55% won: a small-size strategy, not an oracle
    m = {"sharpe_annual": 2.0, "max_drawdown": 0.0007, "trades": 80, "win_rate": 0.55}
    assert implausibility(m) == []
    assert "drawdown" in implausibility({**m, "win_rate": 0.95})[0]


def test_short_lucky_window_is_not_implausible():
    # Sharpe 13.6 over 1,800 bars of 693,000 a year: well inside one standard error (16.6)
    m = {"sharpe_annual": 13.6, "steps": 1800, "bars_per_year": 693_000.0, "max_drawdown": 0.01, "trades": 5}
    assert implausibility(m) == []
    assert implausibility({**m, "steps": None}) != []  # the bare point estimate would have flagged it


def test_a_sharpe_above_the_ceiling_on_few_trades_is_too_few_to_judge():
    # The look-ahead oracle on a short book file: Sharpe 173 over 4 trades and 200 steps, its lower
    # bound below 0 and too few trades for the t-test: no reason at all, once.
    m = {"sharpe_annual": 173.0, "steps": 200, "bars_per_year": 693_000.0, "max_drawdown": 0.01, "trades": 4}
    m |= {"avg_trade_pnl": 50.0, "trade_pnl_std": 100.0}
    assert sharpe_lower_bound(m) < 0 and implausibility(m) == []  # training's anomaly guard: as it was
    (reason,) = implausibility(m, unjudged=True)  # the backtest command's report
    assert "Sharpe 173 over 4 closed trades is above the plausible ceiling 10" in reason
    assert "too few trades to judge" in reason
    assert implausibility({**m, "sharpe_annual": 8.0}, unjudged=True) == []  # below the ceiling
    assert implausibility({**m, "trades": 10}, unjudged=True) == []  # enough trades: judged, and passed


def test_branch_sizes_come_from_the_config():
    cfg = BranchConfig(direction=3, magnitude=2, magnitude_fractions=(0.5, 1.0), order_type=1, urgency=2)
    assert branch_sizes(cfg) == {"n_directions": 3, "n_magnitudes": 2, "n_order_types": 1, "n_urgencies": 2}


# --- plausibility ------------------------------------------------------------------------------


def _book(net: np.ndarray, trade_every: int, trade_pnl: np.ndarray) -> dict[str, np.ndarray]:
    E, T = net.shape
    a = _random_arrays(np.random.default_rng(0), E, T, SIZE_SETS[0], garbage=False, full=True)
    a["gross_pnl"], a["costs"] = net + 2.25, np.full((E, T), 2.25)
    a["equity"] = C0 + np.cumsum(net, axis=1)
    closed = np.zeros((E, T), bool)
    closed[:, trade_every - 1 :: trade_every] = True
    a["trade_closed"], a["trade_pnl"] = closed, np.where(closed, trade_pnl, 0.0)
    a["closed_magnitude"] = np.where(closed, FULL, -1)
    return a


def test_implausibility_flags_an_oracle_and_not_a_noisy_strategy():
    rng = np.random.default_rng(3)
    kw = _kw(SIZE_SETS[0])  # one-minute bars
    # oracle: gains every bar, never a loss, a trade closed every 5 bars
    oracle = _book(rng.uniform(20.0, 200.0, (8, 500)), 5, rng.uniform(100.0, 900.0, (8, 500)))
    m = compute_metrics(_record(oracle), **kw)
    reasons = implausibility(m)
    assert len(reasons) == 3 and "Sharpe" in reasons[0] and "t-statistic" in reasons[1]
    assert "drawdown" in reasons[2]
    # zero-edge noise: many trades, drawdowns, a Sharpe within the noise of 4000 bars
    noisy = _book(rng.normal(0.0, 300.0, (8, 500)), 5, rng.normal(0.0, 500.0, (8, 500)))
    m = compute_metrics(_record(noisy), **kw)
    ceiling = sharpe_ceiling_from_auc(0.5, kw["bars_per_year"], n_bars=m["steps"])
    assert m["trades"] == 800 and m["max_drawdown"] > 0.01
    assert implausibility(m, max_sharpe_annual=ceiling) == []


def test_implausibility_thresholds():
    base = {"sharpe_annual": 3.0, "max_drawdown": 0.05, "trades": 400, "bars_per_year": 98280.0}
    assert implausibility(base) == []
    assert implausibility({**base, "sharpe_annual": MAX_PLAUSIBLE_SHARPE_ANNUAL + 0.1})
    assert implausibility({**base, "sharpe_annual": 4.0}, max_sharpe_annual=3.5)
    assert implausibility({**base, "max_drawdown": 5e-4})
    # too few trades for the drawdown check to mean anything
    assert implausibility({**base, "max_drawdown": 0.0, "trades": 49}) == []
    assert implausibility({**base, "max_drawdown": 0.0, "trades": 50})
    assert implausibility({**base, "max_drawdown": 0.0, "trades": 10}, min_trades_for_drawdown_check=10)
    assert implausibility({**base, "sharpe_annual": math.nan})


def test_sharpe_ceiling_from_auc_hand_worked():
    # AUC 2/3: rho = sin(pi/6) = 1/2; slack 2 -> 2 * 1/2 * sqrt(B / K)
    assert sharpe_ceiling_from_auc(2 / 3, 10_000.0) == pytest.approx(100.0)
    assert sharpe_ceiling_from_auc(2 / 3, 10_000.0, horizon_bars=4) == pytest.approx(50.0)
    assert sharpe_ceiling_from_auc(1 / 3, 10_000.0) == pytest.approx(100.0)  # an inverted forecast
    # no edge: only the noise allowance z sqrt(B / n) = 3 sqrt(10000 / 400) = 15
    assert sharpe_ceiling_from_auc(0.5, 10_000.0) == 0.0
    assert sharpe_ceiling_from_auc(0.5, 10_000.0, n_bars=400) == pytest.approx(15.0)
    assert sharpe_ceiling_from_auc(0.52, 1e5) < sharpe_ceiling_from_auc(0.55, 1e5)
    with pytest.raises(ValueError, match="alpha check had one class"):
        sharpe_ceiling_from_auc(math.nan, 1e5)


# --- device ------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("sizes", SIZE_SETS[:2])
def test_metrics_on_cuda_match_the_reference(sizes: tuple[int, int, int, int]):
    a = _random_arrays(np.random.default_rng(11), 64, 300, sizes, garbage=True)
    kw = _kw(sizes)
    rec = _record(a, device="cuda")
    assert rec.device.type == "cuda"
    want = _reference(a, kw)
    _assert_close(compute_metrics(rec, **kw), want)
    per_ep = per_episode_metrics(rec, **_ep_kw(kw))
    assert all(t.device.type == "cuda" for t in per_ep.values())
    for name, t in per_ep.items():
        ref = [ep[name] for ep in want["_episodes"]]
        np.testing.assert_allclose(t.cpu().numpy(), ref, rtol=1e-9, atol=1e-9, err_msg=name)


def test_sharpe_text_is_na_below_the_stated_steps_and_carries_its_interval_above() -> None:
    from foxhunt.backtest.metrics import MIN_SHARPE_STEPS, sharpe_interval, sharpe_lower_bound, sharpe_text

    short = {"sharpe_annual": -367.0, "steps": 356, "bars_per_year": 98_000.0}
    assert sharpe_text(short) == f"n/a (356 steps < {MIN_SHARPE_STEPS:,})"
    # Per bar SR = 1 / sqrt(10_000) = 0.01; SE = sqrt((1 + 0.00005) / 10_000); 1.96 SE either side.
    long = {"sharpe_annual": 1.0, "steps": 10_000, "bars_per_year": 10_000.0}
    se = math.sqrt((1 + 0.5 * 0.01**2) / 10_000) * 100.0
    want = f"1.00 [95%: {1 - 1.96 * se:.2f}, {1 + 1.96 * se:.2f}]"
    assert sharpe_text(long) == want == "1.00 [95%: -0.96, 2.96]"
    assert sharpe_text(long, interval=False) == "1.00"
    assert sharpe_text({"sharpe_annual": 2.5}) == "2.50"  # a summary from before steps was recorded
    assert sharpe_interval(long, 3.0)[0] == sharpe_lower_bound(long, 3.0)
