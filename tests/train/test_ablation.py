"""The ablation runner (``bench/ablation.py``, issue 22): rows of ``foxhunt seeds`` studies, parts
merged and reused, and a table whose numbers are the studies' own."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from foxhunt.config.loader import load_config
from foxhunt.errors import FoxhuntError
from foxhunt.tune.seeds import SeedFold, SeedResult, merge_studies, summarise_seeds
from tests.conftest import REPO
from tests.train.test_run import TINY


def _load_ablation() -> Any:
    spec = importlib.util.spec_from_file_location("ablation", REPO / "bench" / "ablation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ablation"] = module  # dataclasses resolve the module's annotations through it
    spec.loader.exec_module(module)
    return module


ablation = _load_ablation()

REFERENCE = {"folds": [{"fold": 0, "rule": {"net_pnl": 4_000.0}}, {"fold": 1, "rule": {"net_pnl": 1_000.0}}]}


def _seed(seed: int, agent: tuple[float, float], trades: tuple[int, int] = (10, 20)) -> SeedResult:
    folds = [
        SeedFold(k, a, t, 1.0, 0.0, -50.0, r)
        for k, (a, t, r) in enumerate(zip(agent, trades, (4_000.0, 1_000.0), strict=True))
    ]
    return SeedResult(seed, folds, seconds=12.3)


def _study(results: list[SeedResult], sets: list[str], profile: str = "smoke") -> dict[str, Any]:
    """A seeds.json body as ``foxhunt seeds`` writes it, read back through JSON."""
    body = summarise_seeds(results, REFERENCE) | {"profile": profile, "sets": sets}
    return json.loads(json.dumps(body))


def test_every_row_names_real_config_keys_and_changes_the_profile() -> None:
    # a misspelt key would fail the row's study only when it runs (minutes into a GPU session); a row
    # that sets what became a profile's default retrains the baseline under another name, and two
    # rows of one config are one row twice
    # the rows are the DQN family's mechanisms, measured under the DQN learner whichever the smoke
    # profile ships (--set agent.algo=dqn)
    for profile, common in (("smoke", ["agent.algo=dqn"]), ("gpu", [])):
        base = load_config(profile=profile, overrides=common).model_dump()
        configs = [
            load_config(profile=profile, overrides=[*common, *r.sets]).model_dump() for r in ablation.ROWS
        ]
        for row, cfg in zip(ablation.ROWS[1:], configs[1:], strict=True):
            assert cfg != base, f"{row.name} is the {profile} profile itself"
        assert all(a != b for i, a in enumerate(configs) for b in configs[i + 1 :]), profile
    assert len(ablation.ROW_NAMES) == len(ablation.ROWS) and ablation.ROWS[0] is ablation.BASELINE


def test_rows_are_chosen_baseline_first_and_unknown_names_refused() -> None:
    got = ablation.choose_rows("per,baseline,mirror_off")
    assert [r.name for r in got] == ["baseline", "per", "mirror_off"]
    with pytest.raises(FoxhuntError, match="nosuchrow"):
        ablation.choose_rows("per,nosuchrow")
    alone = ablation.choose_rows("ppo,ppo_counterfactual,ppo_curriculum", baseline=False)  # --no-baseline
    assert [r.name for r in alone] == ["ppo", "ppo_counterfactual", "ppo_curriculum"]


def test_merge_is_one_study_over_all_seeds() -> None:
    a = [_seed(1, (1_000.0, -200.0)), _seed(2, (3_000.0, 500.0))]  # captures 0.16, 0.70
    b = [_seed(3, (500.0, 500.0))]  # 0.20
    sets = ["agent.replay.alpha=0.6"]
    merged = merge_studies([(Path("p1"), _study(a, sets)), (Path("p2"), _study(b, sets))])
    whole = json.loads(json.dumps(summarise_seeds(a + b, REFERENCE)))
    assert {k: merged[k] for k in whole} == whole
    assert merged["capture"]["mean"] == pytest.approx((0.16 + 0.70 + 0.20) / 3)
    assert [s["seed"] for s in merged["seeds"]] == [1, 2, 3] and merged["sets"] == sets
    # the reference rule recomputed in another process may differ in its last bits, not more
    nudged = _study(b, sets)
    nudged["reference"]["folds"][0]["rule"]["net_pnl"] *= 1 + 1e-12
    assert merge_studies([(Path("p1"), _study(a, sets)), (Path("p2"), nudged)])["capture"]["n"] == 3
    nudged["reference"]["folds"][0]["rule"]["net_pnl"] += 1.0
    with pytest.raises(FoxhuntError, match="reference differs"):
        merge_studies([(Path("p1"), _study(a, sets)), (Path("p2"), nudged)])
    with pytest.raises(FoxhuntError, match="sets differs"):
        merge_studies([(Path("p1"), _study(a, sets)), (Path("p2"), _study(b, []))])
    with pytest.raises(FoxhuntError, match=r"seeds \[1\] are in two parts"):
        merge_studies([(Path("p1"), _study(a, sets)), (Path("p2"), _study([_seed(1, (0.0, 0.0))], sets))])


def test_table_row_numbers_are_the_study_numbers() -> None:
    stopped = SeedResult(9, seconds=1.0, stopped="exploding loss")
    study = _study([_seed(1, (1_000.0, -200.0), (10, 20)), _seed(2, (3_000.0, 500.0), (5, 6)), stopped], [])
    row = ablation.table_row(ablation.BASELINE, study, [])
    assert row["capture"] == study["capture"] and row["capture"]["mean"] == pytest.approx(0.43)
    assert row["net_pnl_total"]["mean"] == pytest.approx((800.0 + 3_500.0) / 2)
    assert row["trades_mean"] == pytest.approx((30 + 11) / 2)  # the stopped seed enters no mean
    assert (row["beats_flat"], row["finished"], row["stopped"]) == (2, 2, [9])
    line = ablation.markdown([row], "h").splitlines()[-1]
    assert "| 43% |" in line and "| 2/2 (1 stopped) |" in line and "| +2,150 |" in line and "| 20.5 |" in line


def test_each_parts_committee_is_a_unit_of_the_table(tmp_path: Path) -> None:
    """Parts of several seeds each carry their own committee (foxhunt seeds writes it): the table gives
    their captures, mean and interval and how many beat flat, read from the parts' bodies."""
    parts = []
    for i, (a, b) in enumerate(((2_500.0, 0.0), (-500.0, -100.0))):  # captures 50% and -12%
        committee = SeedResult(-1, _seed(0, (a, b)).folds)
        body = summarise_seeds(
            [_seed(10 * i + 1, (1.0, 1.0)), _seed(10 * i + 2, (1.0, 1.0))], REFERENCE, committee
        )
        parts.append(
            (
                tmp_path / f"p{i}" / "seeds.json",
                json.loads(json.dumps(body | {"profile": "smoke", "sets": []})),
            )
        )
    units = ablation.part_committees(parts)
    assert units["members"] == [2, 2] and units["n"] == 2 and units["beats_flat"] == 1
    assert units["captures"] == pytest.approx([0.5, -0.12])
    assert units["capture"]["mean"] == pytest.approx(0.19)
    row = ablation.table_row(ablation.BASELINE, merge_studies(parts) | {"part_committees": units}, [])
    line = ablation.markdown([row], "h").splitlines()[-1]
    assert "per part: 50%, -12% (mean 19% [" in line and "1/2 beat flat)" in line
    assert line.split(" | ")[4] == "4/4"  # the seeds' own column, not the parts' committees'
    single = [(path, {**body, "committee": None}) for path, body in parts]
    assert ablation.part_committees(single) is None  # parts of one seed have no committee


class FakeSeeds:
    """Stands in for the ``foxhunt seeds`` subprocess: writes a study of the command's seeds."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def __call__(self, cmd: list[str], check: bool, **output: Any) -> subprocess.CompletedProcess:
        def arg(name: str) -> str:
            return cmd[cmd.index(name) + 1]

        seeds = [int(s) for s in arg("--seeds").split(",")]
        sets = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--set"]
        self.calls.append(seeds)
        out = Path(arg("--out"))
        out.mkdir(parents=True, exist_ok=True)
        body = _study([_seed(s, (100.0 * s, 50.0)) for s in seeds], sets, profile=arg("--profile"))
        (out / "seeds.json").write_text(json.dumps(body))
        return subprocess.CompletedProcess(cmd, 0)


def test_parts_are_merged_and_reused_on_a_rerun(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = FakeSeeds()
    monkeypatch.setattr(ablation.subprocess, "run", fake)
    argv = ["--seeds", "3,4,5", "--chunk", "2", "--out", str(tmp_path), "--rows", "per"]
    argv += ["--set", "train.epochs=2"]
    assert ablation.main(argv) == 0
    assert fake.calls == [[3, 4], [5], [3, 4], [5]]  # two rows of two parts
    merged = json.loads((tmp_path / "per" / "seeds.json").read_text())
    assert [s["seed"] for s in merged["seeds"]] == [3, 4, 5]
    assert merged["sets"] == ["train.epochs=2", "agent.replay.alpha=0.6"]  # the row's value after the common
    table = json.loads((tmp_path / "ablation.json").read_text())["rows"]
    assert [r["row"] for r in table] == ["baseline", "per"] and table[1]["capture"] == merged["capture"]
    # a rerun (after a time limit) trains only what holds no result: here the part whose result is
    # gone, whatever the chunk size now; then only the seed added to the list, in every row
    (tmp_path / "per" / "seeds-5" / "seeds.json").unlink()
    assert ablation.main([*argv, "--chunk", "1"]) == 0
    assert fake.calls[4:] == [[5]]
    assert ablation.main([*argv[:1], "6,3,4,5", *argv[2:]]) == 0
    assert fake.calls[5:] == [[6], [6]]
    merged = json.loads((tmp_path / "per" / "seeds.json").read_text())
    assert [s["seed"] for s in merged["seeds"]] == [6, 3, 4, 5]  # the order asked for
    # other common overrides in the same folder would mix two ablations: refused
    assert ablation.main([*argv[:-1], "train.epochs=3"]) == 2
    calls = len(fake.calls)
    assert ablation.main([*argv[:-1], "train.epochs=3", "--overwrite"]) == 0  # retrains every part
    assert sorted(fake.calls[calls:]) == [[3, 4], [3, 4], [5], [5]]
    merged = json.loads((tmp_path / "per" / "seeds.json").read_text())
    assert [s["seed"] for s in merged["seeds"]] == [3, 4, 5] and merged["sets"][0] == "train.epochs=3"


def test_a_failed_study_is_a_table_line_and_exit_1(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def fail(cmd: list[str], check: bool, **output: Any) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess(cmd, 2)

    monkeypatch.setattr(ablation.subprocess, "run", fail)
    assert ablation.main(["--seeds", "1", "--out", str(tmp_path), "--rows", "baseline"]) == 1
    assert "failed: foxhunt seeds exited 2 on seeds [1]" in (tmp_path / "ablation.md").read_text()


@pytest.mark.slow  # two tiny two-seed studies in subprocesses: about a minute on a loaded 2-core host
def test_ablation_of_two_rows_over_two_seeds_end_to_end(tmp_path: Path) -> None:
    sets = [a for s in (*TINY, "run.threads=1") for a in ("--set", s)]
    argv = ["--profile", "smoke", "--seeds", "3,4", "--rows", "popart_off", "--out", str(tmp_path), *sets]
    assert ablation.main(argv) == 0
    table = json.loads((tmp_path / "ablation.json").read_text())["rows"]
    assert [r["row"] for r in table] == ["baseline", "popart_off"]
    for row in table:
        study = json.loads((tmp_path / row["row"] / "seeds-3-4" / "seeds.json").read_text())
        assert study["sets"] == row["all_sets"] == [*TINY, "run.threads=1", *row["sets"]]
        assert [s["seed"] for s in study["seeds"]] == [3, 4] and study["finished"] == 2
        # the table's numbers are the study's
        assert row["capture"] == study["capture"] and row["net_pnl_total"] == study["net_pnl_total"]
        assert row["beats_flat"] == study["beats_flat"]
        trades = [sum(f["trades"] for f in s["folds"]) for s in study["seeds"]]
        assert row["trades_mean"] == pytest.approx(sum(trades) / 2)
        totals = [sum(f["net_pnl"] for f in s["folds"]) for s in study["seeds"]]
        assert row["net_pnl_total"]["mean"] == pytest.approx(sum(totals) / 2)
        text = (tmp_path / "ablation.md").read_text()
        assert f"{row['net_pnl_total']['mean']:+,.0f}" in text
        # the part's committee, written by the seeds subprocess from its runs, is the row's, judged
        # again here from the checkpoints that process left on disk
        assert [f["trades"] for f in row["committee"]["folds"]] == [
            f["trades"] for f in study["committee"]["folds"]
        ]
        for mine, theirs in zip(row["committee"]["folds"], study["committee"]["folds"], strict=True):
            assert mine["net_pnl"] == pytest.approx(theirs["net_pnl"], rel=1e-9, abs=1e-9)
        cap = study["committee"]["capture"]  # None where the tiny market's rule made <= 0
        assert row["part_committees"]["captures"] == ([] if cap is None else [cap])


def test_parts_at_once_give_the_same_table(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ablation.subprocess, "run", FakeSeeds())
    tables = []
    for jobs in ("1", "4"):
        out = tmp_path / jobs
        argv = ["--seeds", "3,4,5", "--chunk", "1", "--out", str(out), "--rows", "per,cql_on", "--jobs", jobs]
        assert ablation.main(argv) == 0
        tables.append((out / "ablation.md").read_text())
    assert tables[0] == tables[1] and "| cql_on |" in tables[1]
