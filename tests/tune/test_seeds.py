"""A profile over several seeds (``foxhunt seeds``): the per-seed numbers, the capture's interval, the
command end to end (issue 22)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.config.loader import load_config
from foxhunt.tune.seeds import (
    SeedFold,
    SeedResult,
    capture_lines,
    capture_text,
    interval,
    median_interval,
    prune_checkpoints,
    summarise_seeds,
    with_seed,
)
from tests.factories import execution_block
from tests.train.test_run import TINY

runner = CliRunner()


def _result(seed: int, agent: list[float], rule: list[float | None], flat: float = 0.0) -> SeedResult:
    pairs = enumerate(zip(agent, rule, strict=True))
    folds = [SeedFold(k, a, 10, 1.0, flat, -50.0, r) for k, (a, r) in pairs]
    return SeedResult(seed, folds, seconds=1.0)


def test_interval_hand_worked() -> None:
    # mean 0.4, sd 0.2 (n - 1), se 0.2 / sqrt 3 = 0.11547, t(0.975, 2) = 4.3027 -> half width 0.49683
    got = interval([0.2, 0.4, 0.6])
    assert got["n"] == 3 and got["mean"] == pytest.approx(0.4)
    assert got["se"] == pytest.approx(0.2 / math.sqrt(3))
    assert got["lo"] == pytest.approx(0.4 - 0.49683, abs=1e-4)
    assert got["hi"] == pytest.approx(0.89683, abs=1e-4)
    one = interval([0.7])
    assert one["mean"] == 0.7 and one["se"] is None and one["lo"] is None
    assert interval([])["mean"] is None


def test_seed_capture_beats_flat_and_summary() -> None:
    a = _result(7, [1_000.0, -200.0], [4_000.0, 1_000.0])  # capture 800 / 5000 = 0.16
    b = _result(8, [3_000.0, 500.0], [4_000.0, 1_000.0])  # 3500 / 5000 = 0.7
    c = _result(9, [-100.0, -100.0], [-300.0, -100.0])  # the rule lost in every fold: capture undefined
    stopped = SeedResult(10, seconds=2.0, stopped="exploding loss")
    assert a.capture == pytest.approx(0.16) and b.capture == pytest.approx(0.7) and c.capture is None
    assert (a.beats_flat, c.beats_flat, stopped.beats_flat) == (True, False, None)
    body = summarise_seeds([a, b, c, stopped], reference=None)
    assert body["capture"]["n"] == 2 and body["capture"]["mean"] == pytest.approx(0.43)
    assert body["capture"]["undefined_seeds"] == [9]
    assert body["beats_flat"] == 2 and body["finished"] == 3 and body["stopped"] == [10]
    assert body["seeds"][0]["folds"][1]["net_pnl"] == -200.0
    assert body["seeds"][3]["stopped"] == "exploding loss"
    assert body["devices"] == {} and body["seeds"][0]["device"] is None  # none recorded here
    json.dumps(body)  # seeds.json is plain JSON


def test_median_interval_hand_worked() -> None:
    # n = 10: P(B(10, 1/2) <= 1) = 11/1024 <= 2.5% < P(B <= 2) = 56/1024, so j = 2: [x_(2), x_(9)],
    # coverage 1 - 2 * 11/1024.
    got = median_interval([float(v) for v in (7, 1, 9, 3, 10, 2, 5, 8, 4, 6)])
    assert got["n"] == 10 and got["median"] == 5.5 and (got["lo"], got["hi"]) == (2.0, 9.0)
    assert got["coverage"] == pytest.approx(1 - 22 / 1024)
    # n = 6: P(B <= 0) = 1/64 <= 2.5%: the extremes, coverage 62/64; n = 5: 1/32 > 2.5%, no interval.
    six = median_interval([0.1, 0.6, 0.2, 0.5, 0.3, 0.4])
    assert (six["lo"], six["hi"], six["median"]) == (0.1, 0.6, pytest.approx(0.35))
    assert six["coverage"] == pytest.approx(62 / 64)
    five = median_interval([0.1, 0.2, 0.3, 0.4, 0.5])
    assert five["median"] == 0.3 and five["lo"] is None and five["hi"] is None
    assert median_interval([])["median"] is None


def test_seed_capture_per_fold_median_and_exclusions() -> None:
    # Two seeds on three folds; the rule lost fold 2 (-400): kept out of every ratio, shown with its PnL.
    rule = [1_000.0, 2_000.0, -400.0]
    a = _result(7, [1_520.0, 1_000.0, -50.0], rule)  # 152%, 50%, excluded -> ratio 2520 / 3000 = 84%
    b = _result(8, [160.0, 200.0, 30.0], rule)  # 16%, 10%, excluded -> 360 / 3000 = 12%
    assert a.capture == pytest.approx(0.84) and b.capture == pytest.approx(0.12)
    # Before issue 58 fold 2 entered the sums: (2470) / 2600 and 390 / 2600.
    assert a.capture_all_folds == pytest.approx(2_470.0 / 2_600.0)
    assert b.capture_all_folds == pytest.approx(390.0 / 2_600.0)
    body = summarise_seeds([a, b], reference=None)
    assert body["capture"]["mean"] == pytest.approx(0.48)
    assert body["capture_all_folds"]["mean"] == pytest.approx((2_470.0 + 390.0) / 2 / 2_600.0)
    pooled = body["capture_per_fold"]
    assert pooled["n"] == 4 and pooled["median"] == pytest.approx((0.16 + 0.5) / 2)
    assert pooled["lo"] is None  # 4 seed-folds: too few for a 95% distribution-free interval
    assert [(f["fold"], f["n"]) for f in pooled["by_fold"]] == [(0, 2), (1, 2), (2, 0)]
    assert pooled["by_fold"][0]["median"] == pytest.approx((1.52 + 0.16) / 2)
    assert pooled["by_fold"][2]["median"] is None
    (gone,) = pooled["excluded"]
    assert (gone["fold"], gone["excluded"], gone["seeds"]) == (2, "rule_lost", [7, 8])
    assert gone["rule_net_pnl"] == [-400.0] and gone["agent_net_pnl"] == [-50.0, 30.0]
    seed = body["seeds"][0]
    assert seed["captures"]["folds"][2]["excluded"] == "rule_lost"
    assert seed["captures"]["median"] == pytest.approx(1.01) and seed["capture_all_folds"] is not None
    json.dumps(body)
    # The printed table: each fold, the exclusion with both PnLs, the old sum labelled.
    text = capture_text(a.captures)
    assert text.startswith("capture 84% (per fold 152% / 50% / excluded (rule_lost: agent -50, rule -400)")
    assert "all folds 95%" in text
    lines = capture_lines(body)
    assert lines[0].startswith("capture (agent / rule over the folds where the rule made money): mean 48%")
    assert "median 33%" in lines[1] and "fold 2 n/a (n=0)" in lines[1]
    assert lines[2].startswith("excluded: fold 2 of seeds 7,8: the reference rule lost")
    assert "rule -400; agent -50 / +30" in lines[2]
    assert lines[3].startswith("capture over every fold (as reported before issue 58")
    assert capture_text(SeedResult(9, stopped="x").captures) == "capture n/a"


def test_seeds_tally_the_gpus_they_ran_on_and_read_back() -> None:
    gpu = "cuda:0 (NVIDIA H200, GPU-b, CUDA_VISIBLE_DEVICES=1)"
    places = {1: "cpu", 2: gpu, 3: gpu}
    results = [SeedResult(s, _result(s, [1.0], [2.0]).folds, 1.0, device=d) for s, d in places.items()]
    body = summarise_seeds(results, reference=None)
    assert body["devices"] == {"cpu": 1, gpu: 2}
    assert [SeedResult.from_dict(s) for s in body["seeds"]] == results
    older = body["seeds"][0] | {}
    del older["device"]  # a seeds.json written before seeds recorded their device
    assert SeedResult.from_dict(older).device is None


def _checkpoint(path: Path, size: int = 10) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_name(path.name + ".safetensors").write_bytes(b"x" * size)
    path.with_name(path.name + ".json").write_text("{}")


def test_prune_keeps_exactly_the_checkpoints_that_voted(tmp_path: Path) -> None:
    run = tmp_path / "seed3"
    ck, m1 = run / "checkpoints", run / "members" / "m1" / "checkpoints"
    for path in (ck / "fold0" / "last", ck / "fold0" / "best", ck / "fold1" / "last"):
        _checkpoint(path)
    for path in (ck / "fold0" / "ring" / "epoch0004", ck / "fold0" / "ring" / "epoch0005"):
        _checkpoint(path, size=100)
    for path in (m1 / "fold0" / "last", m1 / "fold0" / "ring" / "epoch0005", m1 / "fold1" / "last"):
        _checkpoint(path)
    # fold 0 reported best (a single agent), fold 1 a committee of two members (member 0 and m1)
    folds = [
        {"fold": 0, "checkpoint_file": "checkpoints/fold0/best.safetensors"},
        {
            "fold": 1,
            "checkpoint_file": "checkpoints/fold1/last.safetensors",
            "committee": {
                "files": [
                    "checkpoints/fold1/last.safetensors",
                    "members/m1/checkpoints/fold1/last.safetensors",
                ]
            },
        },
    ]
    (run / "folds.json").write_text(json.dumps(folds))
    files, size = prune_checkpoints(run)
    left = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())
    assert left == [
        "checkpoints/fold0/best.json",
        "checkpoints/fold0/best.safetensors",
        "checkpoints/fold1/last.json",
        "checkpoints/fold1/last.safetensors",
        "folds.json",
        "members/m1/checkpoints/fold1/last.json",
        "members/m1/checkpoints/fold1/last.safetensors",
    ]
    # fold 0's last, its two ring entries, m1's fold-0 last and ring entry: 5 checkpoints of 2 files each
    assert files == 10 and size == 10 + 2 * 100 + 10 + 10 + 5 * 2
    assert prune_checkpoints(run) == (0, 0)  # nothing left to prune
    stopped = tmp_path / "seed4"  # stopped by the guard: no folds.json, nothing says what it reported
    _checkpoint(stopped / "checkpoints" / "fold0" / "last")
    assert prune_checkpoints(stopped) == (0, 0) and (stopped / "checkpoints" / "fold0" / "last.json").exists()


def test_with_seed_changes_only_the_seed() -> None:
    cfg = load_config(profile="smoke")
    other = with_seed(cfg, 11)
    assert other.run.seed == 11 and other.model_dump(exclude={"run"}) == cfg.model_dump(exclude={"run"})


@pytest.mark.slow  # two tiny trainings in spawned processes: a minute on a loaded 2-core host
def test_seeds_command_trains_every_seed_and_writes_the_study(tmp_path: Path) -> None:
    out = tmp_path / "seeds"
    sets = [a for s in (*TINY, "run.threads=1") for a in ("--set", s)]
    args = ["seeds", "--profile", "smoke", "--seeds", "3,4", "--workers", "2", "--out", str(out), "-q", *sets]
    result = runner.invoke(app, [*args, "--keep", "reported"])
    assert result.exit_code == 0, result.output
    body = json.loads((out / "seeds.json").read_text())
    assert [s["seed"] for s in body["seeds"]] == [3, 4] and body["finished"] == 2
    assert [s["device"] for s in body["seeds"]] == ["cpu", "cpu"] and body["devices"] == {"cpu": 2}
    for s in body["seeds"]:
        assert [f["fold"] for f in s["folds"]] == [0, 1]
        for f, ref in zip(s["folds"], body["reference"]["folds"], strict=True):
            # the rule and flat the seed's training reported are the study's reference, fold for fold
            assert f["rule"] == pytest.approx(ref["rule"]["net_pnl"]) and f["flat"] == 0.0
        # each seed's own run folder, trained with its seed
        recorded = json.loads((out / f"seed{s['seed']}" / "train.config.json").read_text())
        assert recorded["config"]["run"]["seed"] == s["seed"]
    # the synthetic market's planted carrier is known: every epoch records the direction gap's correlation
    history = json.loads((out / "seed3" / "folds.json").read_text())[0]["history"]
    assert len(history) == 2 and all(math.isfinite(r["qgap_corr"]) for r in history)
    nets = [[f["net_pnl"] for f in s["folds"]] for s in body["seeds"]]
    assert nets[0] != nets[1]  # different seeds, different agents
    assert (out / "seeds.png").read_bytes()[:4] == b"\x89PNG"
    assert "seed 3: net" in result.output and "beat flat" in result.output
    # each seed's capture per fold, the study's pooled median, the old all-fold number labelled
    assert all(len(s["captures"]["folds"]) == 2 for s in body["seeds"])
    assert [f["fold"] for f in body["capture_per_fold"]["by_fold"]] == [0, 1]
    assert "(per fold " in result.output and "capture per seed-fold: median" in result.output
    assert "capture over every fold (as reported before issue 58" in result.output
    # the two seeds' committee, fold by fold, with the folds' own baselines
    com = body["committee"]
    assert com["seed"] == -1 and [f["fold"] for f in com["folds"]] == [0, 1]
    assert [f["rule"] for f in com["folds"]] == [f["rule"] for f in body["seeds"][0]["folds"]]
    assert "committee of 2: net" in result.output
    # execution: per seed and fold (agent and rule), per seed pooled, the study's and the committee's
    for s in body["seeds"]:
        assert all(f["execution"]["entries"] == f["trades"] for f in s["folds"])
        assert s["execution"]["agent"]["entries"] == sum(f["trades"] for f in s["folds"])
        assert s["execution"]["rule"] == body["execution"]["rule"]  # the same rule in every seed
    every = [f for s in body["seeds"] for f in s["folds"]]
    assert body["execution"]["agent"]["entries"] == sum(f["trades"] for f in every)
    assert body["execution"]["committee"]["entries"] == sum(f["trades"] for f in com["folds"])
    assert "agent execution:" in result.output and "committee execution:" in result.output
    # --keep reported: each seed keeps only the checkpoints its folds report, the committee read first
    for seed in (3, 4):
        run = out / f"seed{seed}"
        reported = {run / f["checkpoint_file"] for f in json.loads((run / "folds.json").read_text())}
        assert reported and all(p.is_file() for p in reported)
        assert set(run.rglob("*.safetensors")) == reported  # the rings (ring = 2 a fold) are gone
    assert "--keep reported: deleted" in result.output


def test_seeds_json_has_each_seeds_execution_and_the_study_pools_them() -> None:
    def seed(s: int, agent: list[dict]) -> SeedResult:
        folds = [
            SeedFold(k, a["net_pnl"], a["entries"], 1.0, 0.0, -50.0, 100.0, a, execution_block(5, 0, 100.0))
            for k, a in enumerate(agent)
        ]
        return SeedResult(s, folds, seconds=1.0)

    a = seed(1, [execution_block(3, 1, 40.0), execution_block(1, 3, -20.0)])
    b = seed(2, [execution_block(0, 2, 10.0), execution_block(2, 2, 30.0)])
    x = a.to_dict()["execution"]
    assert x["agent"]["entries"] == 8 and x["agent"]["net_pnl"] == pytest.approx(20.0)
    assert x["agent"]["limit_orders"]["fill_rate"] == 0.5
    assert x["agent"]["by_order_type"]["Market"]["share"] == 0.5
    assert x["rule"]["entries"] == 10 and x["rule"]["by_order_type"]["Market"]["share"] == 1.0
    body = summarise_seeds([a, b, SeedResult(3, seconds=1.0, stopped="x")], reference=None)
    study = body["execution"]
    assert study["agent"]["entries"] == 14 and study["agent"]["net_pnl"] == pytest.approx(60.0)
    assert study["agent"]["by_order_type"]["Limit_At_Touch"]["entries"] == 8
    assert study["rule"] == x["rule"] and study["committee"] is None  # the rule once: the same in every seed
    assert body["seeds"][0]["folds"][0]["execution"]["entries"] == 4
    assert [SeedResult.from_dict(s) for s in body["seeds"][:2]] == [a, b]
    older = json.loads(json.dumps(body["seeds"][0]))
    for f in older["folds"]:  # a seeds.json written before the execution block
        del f["execution"], f["rule_execution"]
    assert SeedResult.from_dict(older).to_dict()["execution"] == {"agent": None, "rule": None}
    json.dumps(body)
