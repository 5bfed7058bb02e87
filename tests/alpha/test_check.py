"""Known answers of the alpha check on the synthetic market: no signal, planted signal, leak."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from foxhunt.alpha.check import AlphaResult, HorizonResult, run_alpha, targets
from foxhunt.alpha.report import measured_rates
from foxhunt.cli import app
from foxhunt.config.loader import load_config
from foxhunt.data.config import SynthConfig
from foxhunt.data.synth import write_synthetic
from foxhunt.dataset.build import get_or_build

runner = CliRunner()
FAST = [
    "data.row_unit=snapshot",
    "alpha.n_boot=300",
    "alpha.permutation_repeats=1",
    "alpha.mlp.max_epochs=4",
    "alpha.gbm.n_estimators=120",
]


def _market(tmp: Path, alpha: float, seed: int, events: int = 30_000, sessions: int = 2) -> Path:
    write_synthetic(SynthConfig(seed=seed, sessions=sessions, events_per_session=events, alpha=alpha), tmp)
    return tmp


def test_targets_leave_out_rows_without_a_move() -> None:
    close = np.array([1.0, 1.0, 2.0, 1.5, 1.5, 3.0])
    seg = np.array([True, False, False, True, False, False])
    y, usable = targets(close, seg, 1)
    # t=0: flat (left out); t=1: up; t=2: crosses the segment start (invalid); t=3: flat; t=4: up.
    assert usable.tolist() == [False, True, False, False, True, False]
    assert y[usable].tolist() == [1, 1]


def _result(p_values: dict[str, float], family_size: int = 2) -> AlphaResult:
    """One horizon (20) with the given family-adjusted forecast-test p-values per model (AUC 0.6)."""
    h = HorizonResult(horizon=20)
    for m, pv in p_values.items():
        ci = {"estimate": 0.6, "lo": 0.55, "hi": 0.9}
        h.pooled[m] = {"auc": ci, "accuracy": ci, "log_loss": ci}
        h.tests[m] = {"statistic": 1.0, "z": 2.0, "p_value": pv / 2, "moves": 100, "p_family": pv}
    return AlphaResult(
        row_unit="bar",
        data_source="ohlcv",
        rows=1000,
        columns=3,
        horizons=[h],
        fold_summaries=[],
        family_error=0.05,
        family_size=family_size,
        interval_level=0.975,
    )


def test_verdict_is_the_family_adjusted_forecast_test() -> None:
    # Signal at a family-adjusted one-sided p-value <= family_error (0.05).
    found = _result({"mlp": 0.4, "gbm": 0.04})
    assert found.verdict == "signal" and found.signal_tests() == [(20, "gbm")]
    assert _result({"mlp": 0.4, "gbm": 0.06}).verdict == "no signal"
    # A NaN p-value (no fold scored) is never signal; nor is a forecast that loses (p near 1).
    assert _result({"mlp": float("nan"), "gbm": 0.999}).verdict == "no signal"
    body = found.to_dict()
    assert body["test"]["p_family_cut"] == 0.05 and body["test"]["family_size"] == 2
    assert "martingale" in body["test"]["method"]
    assert body["signal_at"] == [{"horizon": 20, "model": "gbm"}]
    assert body["horizons"][0]["forecast_test"]["gbm"]["p_value"] == 0.02


def test_no_signal_market_every_interval_contains_half(tmp_path: Path) -> None:
    cfg = load_config("smoke", overrides=FAST)
    # Big enough that the validation blocks hold many decorrelation lengths of the predictions
    # (on 2 x 30k rows, a slow-feature model's AUC wanders to 0.44 by chance alone).
    market = _market(tmp_path / "m", alpha=0.0, seed=31, events=50_000, sessions=3)
    cache = get_or_build([market], cfg, tmp_path / "c")
    result = run_alpha(cache, cfg.alpha, cfg.folds, (5, 50, 200), cfg.run.seed)
    for h in result.horizons:
        for model in ("mlp", "gbm"):
            auc = h.pooled[model]["auc"]
            assert auc["lo"] <= 0.5 <= auc["hi"], (h.horizon, model, auc)
    # The verdict's tests at a family-wise 1% (a no-signal market fails this 1 time in 100 or less).
    # At the verdict's 5% this market is one of the 1 in 20 it may call: LightGBM at 50 rows, z 2.70,
    # adjusted p 0.019 (the other five z between -0.46 and 1.04). Calibration is the bench's and the
    # slow tests' to measure, over many markets (MEASURED_RATES).
    p_family = [t["p_family"] for h in result.horizons for t in h.tests.values()]
    assert len(p_family) == 9 and min(p_family) > 0.01, p_family


def test_planted_signal_is_found_and_decays(tmp_path: Path) -> None:
    cfg = load_config("smoke", overrides=FAST)
    cache = get_or_build([_market(tmp_path / "m", alpha=1.0, seed=32)], cfg, tmp_path / "c")
    result = run_alpha(cache, cfg.alpha, cfg.folds, (50, 500), cfg.run.seed)
    # 3 models x 2 horizons: every interval at 1 - 0.05 / 6, the family at 95%
    assert result.family_size == 6 and result.interval_level == pytest.approx(1 - 0.05 / 6)
    by_h = {h.horizon: h for h in result.horizons}
    gbm_50 = by_h[50].pooled["gbm"]["auc"]
    assert gbm_50["estimate"] >= 0.60 and gbm_50["lo"] > 0.5
    assert by_h[500].pooled["gbm"]["auc"]["estimate"] < gbm_50["estimate"]  # the signal decays
    assert result.verdict == "signal"
    # The planted carrier (level-1 imbalance, an ofi slot) dominates the importance.
    assert max(by_h[50].gbm_gain, key=by_h[50].gbm_gain.get) == "ofi"


def test_cli_writes_the_report(tmp_path: Path) -> None:
    market = _market(tmp_path / "m", alpha=1.0, seed=33, events=15_000)
    out = tmp_path / "alpha"
    args = ["alpha", "--data", str(market), "--out", str(out), "--horizons", "20,200", "-q"]
    for s in FAST:
        args += ["--set", s]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Verdict:" in result.output
    body = json.loads((out / "alpha.json").read_text())
    assert body["models"] == ["mlp", "gbm", "linear"] and [h["horizon"] for h in body["horizons"]] == [
        20,
        200,
    ]
    h = body["horizons"][0]
    assert set(h["auc"]) == {"mlp", "gbm", "linear"} and len(h["auc_ci"]["gbm"]) == 2 and h["n_val"] > 0
    # The linear model's screened columns, per fold (alpha.linear.columns of them, strongest first).
    assert all(len(row["linear"]["columns"]) == 16 for row in h["folds"])
    assert body["verdict"] in ("signal", "no signal") and body["leak_guard"]["clean"]
    assert body["intervals"]["family_size"] == 6 and body["intervals"]["level"] == pytest.approx(1 - 0.05 / 6)
    md = (out / "alpha.md").read_text()
    assert "Verdict" in md and "Bonferroni" in md and "99.17%" in md
    # The verdict's measured false-call and detection rates, with the bench command behind them.
    assert measured_rates() in md and "bench/alpha_power.py" in md and "no-signal markets called" in md
    for png in ("alpha_decay.png", "alpha_importance.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"


def test_cli_from_a_cache_runs_the_leak_guard_on_its_sources(tmp_path: Path) -> None:
    market = _market(tmp_path / "m", alpha=1.0, seed=35, events=15_000)
    cfg_args = [arg for s in FAST for arg in ("--set", s)]
    built = runner.invoke(
        app, ["features", "build", "--data", str(market), "--out", str(tmp_path / "c"), "-q", *cfg_args]
    )
    assert built.exit_code == 0, built.output
    (cache,) = (tmp_path / "c").glob("*.arrow")
    out = tmp_path / "alpha"
    result = runner.invoke(
        app, ["alpha", "--cache", str(cache), "--out", str(out), "--horizons", "20", "-q", *cfg_args]
    )
    assert result.exit_code == 0, result.output
    body = json.loads((out / "alpha.json").read_text())
    assert body["leak_guard"]["clean"] and body["rows"] == 30_000
    for f in market.glob("*.dbn.zst"):  # sources gone: the leak guard cannot run, so no result
        f.unlink()
    again = runner.invoke(
        app, ["alpha", "--cache", str(cache), "--out", str(tmp_path / "a2"), "-q", *cfg_args]
    )
    assert again.exit_code == 2 and "leak guard" in again.output
    assert not (tmp_path / "a2" / "alpha.json").exists()


def test_a_leaky_feature_stops_the_check(tmp_path: Path, monkeypatch) -> None:
    from foxhunt.data.schemas import RowUnit
    from foxhunt.dataset import cache as cache_mod
    from foxhunt.features.layout import STACK_FAMILIES
    from foxhunt.features.registry import FAMILIES

    def compute(inp, params):
        out = np.zeros((len(inp), 1), np.float32)
        c = np.nan_to_num(inp.close)
        out[:-20, 0] = np.sign(c[20:] - c[:-20])  # the future move: a perfect, leaking feature
        return out

    leaky = SimpleNamespace(SLOTS=("peek",), NEEDS_BOOK=False, compute=compute)
    monkeypatch.setitem(FAMILIES, "leaky", leaky)
    monkeypatch.setitem(STACK_FAMILIES, RowUnit.SNAPSHOT, (*STACK_FAMILIES[RowUnit.SNAPSHOT], "leaky"))
    real_params = cache_mod._feature_params
    monkeypatch.setattr(cache_mod, "_feature_params", lambda cfg: real_params(cfg) | {"leaky": None})
    market = _market(tmp_path / "m", alpha=0.0, seed=34, events=10_000)
    out = tmp_path / "alpha"
    args = ["alpha", "--data", str(market), "--out", str(out), "-q"]
    for s in FAST:
        args += ["--set", s]
    result = runner.invoke(app, args)
    assert result.exit_code == 3, result.output
    assert "leaky.peek" in result.output and "leak guard" in result.output
    assert not (out / "alpha.json").exists()  # nothing claims signal


NULL_MARKETS = 24  # no-signal markets; at most 5% of them (1) may be called "signal"


@pytest.mark.slow
def test_verdict_says_signal_on_at_most_5_percent_of_no_signal_markets(tmp_path: Path) -> None:
    # Cheap markets (2 sessions x 20k book events, 4 snapshot horizons: m = 12 tests) at fixed seeds.
    # Each uncorrected 95% interval alone called 5 of 32 such markets "signal".
    cfg = load_config("smoke", overrides=[*FAST, "alpha.n_boot=1000"])  # tails of 0.05 / 16 need reps
    called = []
    for seed in range(1000, 1000 + NULL_MARKETS):
        market = _market(tmp_path / f"m{seed}", alpha=0.0, seed=seed, events=20_000, sessions=2)
        cache = get_or_build([market], cfg, tmp_path / "c")
        result = run_alpha(cache, cfg.alpha, cfg.folds, (5, 20, 50, 200), cfg.run.seed)
        assert result.family_size == 12 and result.interval_level == pytest.approx(1 - 0.05 / 12)
        if result.verdict == "signal":
            called.append((seed, result.signal_tests()))
    print(f"no-signal markets called signal: {len(called)} of {NULL_MARKETS}: {called}")
    assert len(called) <= 0.05 * NULL_MARKETS, called


@pytest.mark.slow
def test_larger_no_signal_and_signal_markets(tmp_path: Path) -> None:
    cfg = load_config("smoke", overrides=["data.row_unit=snapshot"])
    for alpha, expect in ((0.0, "no signal"), (0.5, "signal")):
        cache = get_or_build(
            [_market(tmp_path / f"m{alpha}", alpha, seed=40, events=150_000)], cfg, tmp_path / "c"
        )
        assert run_alpha(cache, cfg.alpha, cfg.folds, (5, 20, 50, 200, 500), cfg.run.seed).verdict == expect


def test_bootstrap_block_follows_the_slowest_dependence() -> None:
    from foxhunt.alpha.check import bootstrap_block, decorrelation_lag

    rng = np.random.default_rng(0)
    assert decorrelation_lag(rng.normal(size=10_000)) == 1  # white noise decorrelates at once
    ar = np.zeros(20_000)
    for t in range(1, len(ar)):  # AR(1), phi = 0.95: acf(L) = 0.95^L <= 0.1 at L ~ 45
        ar[t] = 0.95 * ar[t - 1] + rng.normal()
    assert 30 < decorrelation_lag(ar) < 70
    assert bootstrap_block(20_000, 5, 20, 200, p=rng.normal(size=20_000)) == 100  # 20,000 / 200 blocks
    assert bootstrap_block(20_000, 500, 20, 200) == 500  # the horizon
    assert bootstrap_block(20_000, 5, 20, 20, p=ar) == 1000  # 20 blocks at most
    assert bootstrap_block(20_000, 5, 20, 1000, p=ar) == decorrelation_lag(ar)  # the lag of p
    assert bootstrap_block(1_000, 5, 20, 200, p=np.repeat([0.0, 1.0], 500)) == 100  # capped at n / 10


def _smoke_market_verdict(tmp: Path, alpha: float, seed: int) -> str:
    """The check on one bench/alpha_power.py market: smoke profile, 3 sessions x 30k events, 30 s bars."""
    cfg = load_config(
        "smoke", overrides=[f"synth.alpha={alpha}", f"synth.seed={seed}", "synth.events_per_session=30000"]
    )
    write_synthetic(cfg.synth, tmp / "m")
    cache = get_or_build([tmp / "m"], cfg, tmp / "c")
    return run_alpha(cache, cfg.alpha, cfg.folds, cfg.alpha.horizons, cfg.run.seed).verdict


@pytest.mark.slow
def test_verdict_rates_hold_on_bench_markets(tmp_path: Path) -> None:
    # 6 no-signal, 6 smoke-strength and 6 alpha-2 markets of bench/alpha_power.py's selection seeds
    # (the markets that chose the linear model; on these 18 the verdict calls 0, 6 and 5). Calibration:
    # no false call (were the false-call rate 30%, 0 of 6 would happen 12% of the time). Power: at
    # least 5 of 6 smoke-strength markets (were it 50%, 11% of the time) and 4 of 6 alpha-2 markets
    # found. ~20 min on 2 busy cores.
    from foxhunt.alpha.check import MEASURED_RATES

    assert MEASURED_RATES.false_calls[0] / MEASURED_RATES.false_calls[1] <= 0.05
    assert MEASURED_RATES.smoke[0] / MEASURED_RATES.smoke[1] >= 0.9
    assert MEASURED_RATES.alpha2[0] / MEASURED_RATES.alpha2[1] >= 0.7
    smoke_alpha = load_config("smoke").synth.alpha
    verdicts = {
        (alpha, seed): _smoke_market_verdict(tmp_path / f"m{seed}", alpha, seed)
        for alpha, seeds in (
            (0.0, range(9100, 9106)),
            (smoke_alpha, range(11100, 11106)),
            (2.0, range(10100, 10106)),
        )
        for seed in seeds
    }
    false_calls = [seed for (alpha, seed), v in verdicts.items() if alpha == 0 and v == "signal"]
    smoke = [seed for (alpha, seed), v in verdicts.items() if alpha == smoke_alpha and v == "signal"]
    alpha2 = [seed for (alpha, seed), v in verdicts.items() if alpha == 2.0 and v == "signal"]
    print(f"no-signal markets called signal: {false_calls}; found: smoke {smoke}, alpha 2 {alpha2}")
    assert not false_calls
    assert len(smoke) >= 5, smoke
    assert len(alpha2) >= 4, alpha2


def test_measured_rates_name_their_source() -> None:
    from foxhunt.alpha.check import MEASURED_RATES as r

    repo = Path(__file__).resolve().parents[2]
    assert "bench/alpha_power.py" in r.command and (repo / r.page).is_file()
    assert (repo / r.command.split("python ")[1].split()[0]).is_file()  # the bench script exists
    for calls, markets in (r.false_calls, r.smoke, r.alpha2):
        assert 0 <= calls <= markets
    assert r.smoke_alpha == load_config("smoke").synth.alpha  # "smoke strength" is the profile's alpha
    assert r.false_calls[0] / r.false_calls[1] <= 0.05  # the rule's calibration target, as measured
