"""Kill -9 trials (issue 15): ``features build`` and ``train`` processes killed at random moments.

After every kill each artefact either loads or is absent (a feature cache opens, a checkpoint's
header and tensors read, folds.json and the recorded config parse; no 0-byte file but the temp
files a killed write leaves, which the next start removes), and ``train --resume`` reaches
checkpoints bit-identical, tensor for tensor, to an uninterrupted run. Slow: a few minutes on two
cores (each trial starts a Python process that imports torch).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file

from foxhunt.atomic import TEMP_SUFFIX
from foxhunt.data.synth import write_synthetic
from foxhunt.features.cache_file import open_cache
from foxhunt.policy.checkpoint import read_checkpoint_meta
from tests.train.test_run import TINY, same, tiny_cfg

pytestmark = pytest.mark.slow

# train_tail: both files a run reports, best and last, are compared after a kill and a resume.
SETS = [a for s in (*TINY, "run.threads=1", "train.selection=train_tail") for a in ("--set", s)]
BUILD_KILLS = 4
TRAIN_KILLS = 8
KILL_BEFORE = 0.85  # kill moments up to this share of an uninterrupted run (the load varies)
RNG = random.Random(15)  # the kill moments: random, and the same ones on every run of the test


def foxhunt(*args: object) -> list[str]:
    return [sys.executable, "-m", "foxhunt.cli", *map(str, args), "-q", "--profile", "smoke", *SETS]


def killed(cmd: list[str], after_s: float) -> bool:
    """Run ``cmd``, SIGKILL it ``after_s`` seconds in; whether it was still running then."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=after_s)
        return False
    except subprocess.TimeoutExpired:
        proc.kill()  # SIGKILL: no handler, no cleanup
        proc.wait()
        return True


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return time.perf_counter() - t0


def temps(folder: Path) -> list[Path]:
    return [p for p in folder.rglob(f"*{TEMP_SUFFIX}") if p.name.startswith(".")]


def assert_loads_or_absent(folder: Path) -> None:
    """Every artefact under ``folder`` loads; only temp files of killed writes may be empty."""
    if not folder.exists():
        return
    leftovers = set(temps(folder))
    for p in folder.rglob("*"):
        if not p.is_file() or p in leftovers:
            continue
        assert p.stat().st_size > 0, f"0-byte artefact {p}"
        if p.suffix == ".arrow":
            assert open_cache(p).meta["rows"] > 0
        elif p.name.endswith(".safetensors"):
            read_checkpoint_meta(p)
            assert load_file(str(p))
        elif p.suffix == ".json":
            json.loads(p.read_text())


def test_kill_9_leaves_loadable_artefacts_and_resume_reaches_bit_identical_checkpoints(
    tmp_path: Path,
) -> None:
    files = write_synthetic(tiny_cfg().synth, tmp_path / "market")
    build = ["features", "build", "--data", *files, "--out"]

    # --- features build --------------------------------------------------------------------
    build_s = timed(foxhunt(*build, tmp_path / "cache"))
    (cache,) = (tmp_path / "cache").glob("*.arrow")
    reference = open_cache(cache)
    build_kills = 0
    for i in range(BUILD_KILLS):
        out = tmp_path / f"cache-{i}"
        build_kills += killed(foxhunt(*build, out), RNG.uniform(0.5, KILL_BEFORE * build_s))
        assert_loads_or_absent(out)
        timed(foxhunt(*build, out))  # the next start: stale temps removed, the cache built
        assert temps(out) == []
        (again,) = out.glob("*.arrow")  # the same inputs and config: the same key and features
        rebuilt = open_cache(again)
        assert again.name == cache.name and rebuilt.columns == reference.columns
        assert np.array_equal(rebuilt.features(), reference.features(), equal_nan=True)

    # --- train ---------------------------------------------------------------------------------
    train = ["train", "--cache", cache]
    train_s = timed(foxhunt(*train, "--out", tmp_path / "whole"))
    whole = tmp_path / "whole" / "checkpoints"
    train_kills = resumed = identical = compared = 0
    for i in range(TRAIN_KILLS):
        run = tmp_path / f"run-{i}"
        train_kills += killed(foxhunt(*train, "--out", run), RNG.uniform(0.5, KILL_BEFORE * train_s))
        assert_loads_or_absent(run)
        # A kill before the run folder existed leaves nothing to resume: the run is started anew.
        resumed += run.is_dir()
        timed(foxhunt(*train, "--resume", run) if run.is_dir() else foxhunt(*train, "--out", run))
        assert temps(run) == []
        assert json.loads((run / "folds.json").read_text())  # every fold finished
        for ref in sorted(whole.rglob("*.safetensors")):
            mine = run / "checkpoints" / ref.relative_to(whole)
            if not mine.exists():  # a ring slot the resumed run rotated differently
                continue
            a, b = load_file(str(ref)), load_file(str(mine))
            compared += 1
            identical += a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        for name in ("last", "best"):  # the files a run reports and resumes from: always equal
            for fold in (0, 1):
                a = load_file(str(whole / f"fold{fold}" / f"{name}.safetensors"))
                b = load_file(str(run / "checkpoints" / f"fold{fold}" / f"{name}.safetensors"))
                assert a.keys() == b.keys() and all(same(a[k], b[k]) for k in a), (i, fold, name)
    print(
        f"\nkill -9 trials: {build_kills}/{BUILD_KILLS} features build and {train_kills}/{TRAIN_KILLS} "
        f"train processes killed mid-run (build {build_s:.1f} s, train {train_s:.1f} s uninterrupted), "
        f"{resumed} runs resumed (the others were killed before their folder existed); "
        f"checkpoint files bit-identical after resume: {identical}/{compared}"
    )
    assert build_kills + train_kills >= 10  # the delays fall inside the runs, not after them
    assert identical == compared
