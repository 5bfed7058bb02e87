"""`foxhunt run` on a machine with idle cores compiles the feature and label kernels in forked
processes while it writes the synthetic market, waits for them, then runs the guard; on a busy one it
starts none. The job is stopped at the alpha check, after the guard and the feature cache built beside
its cuts (the stages after it are the job tests')."""

from __future__ import annotations

from pathlib import Path

import pytest

import foxhunt.parallel.idle
import foxhunt.pipeline
from foxhunt.config.loader import load_config
from foxhunt.dataset import warmup
from foxhunt.errors import FoxhuntError
from foxhunt.pipeline import run_job

SMALL = ("synth.sessions=2", "synth.events_per_session=10000", "folds.n_folds=2")


def _run_to_the_alpha_check(monkeypatch, tmp_path: Path, idle: float) -> tuple[dict, list[str]]:
    seen: dict = {"finished": []}
    real_wait = warmup.Warmup.wait

    def wait(self, timeout: float = warmup.WAIT_S) -> int:
        seen.setdefault("children", len(self.children))
        done = real_wait(self, timeout)
        seen["finished"].append(done)
        return done

    def stop(*a, **kw):
        raise FoxhuntError("test", "stopped at the alpha check", "nothing")

    monkeypatch.setattr(foxhunt.parallel.idle, "idle_cores", lambda: idle)
    monkeypatch.setattr(warmup.Warmup, "wait", wait)
    monkeypatch.setattr(foxhunt.pipeline, "alpha_check", stop)
    lines: list[str] = []
    cfg = load_config("smoke", overrides=SMALL)
    with pytest.raises(FoxhuntError, match="stopped at the alpha check"):
        run_job(cfg, tmp_path / "run", log=lines.append, tracking_uri="none")
    return seen, lines


def test_idle_cores_compile_ahead_and_the_guard_runs_after(monkeypatch, tmp_path: Path) -> None:
    seen, lines = _run_to_the_alpha_check(monkeypatch, tmp_path, idle=64.0)
    assert seen["children"] == 5 and seen["finished"] == [5]  # 4 families + labels, all exited 0
    assert any(line.startswith("Leak guard: clean") for line in lines)


def test_busy_cores_start_no_children(monkeypatch, tmp_path: Path) -> None:
    seen, lines = _run_to_the_alpha_check(monkeypatch, tmp_path, idle=0.5)
    assert seen["children"] == 0 and seen["finished"] == [0]
    assert any(line.startswith("Leak guard: clean") for line in lines)
