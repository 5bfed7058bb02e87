"""The profile `foxhunt run`, `seeds` and `tune` use when none is named: `gpu` on a CUDA machine
(announced), smoke on a CPU. The device is faked (torch.cuda.is_available); nothing is trained."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import foxhunt.cli.study
import foxhunt.job
from foxhunt.cli import app
from foxhunt.config.loader import DEFAULT_PROFILE, GPU_PROFILE, default_profile
from foxhunt.errors import FoxhuntError

runner = CliRunner()

# The sizes each profile gives (gpu.toml, smoke.toml): what a GPU user must get without a flag.
GPU_SIZES = {"envs": 256, "batch": 256, "replay": 65536, "updates": 256, "members": 8}
SMOKE_SIZES = {"envs": 256, "batch": 256, "replay": 65536, "updates": 256, "members": 2}


def _sizes(cfg) -> dict[str, int]:
    return {
        "envs": cfg.train.envs,
        "batch": cfg.agent.learn.batch,
        "replay": cfg.agent.replay.capacity,
        "updates": cfg.agent.learn.updates_per_epoch,
        "members": cfg.train.members,
    }


def _fake_device(monkeypatch: pytest.MonkeyPatch, cuda: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")


def _capture_run_job(monkeypatch: pytest.MonkeyPatch) -> dict:
    """`run` with run_job replaced by a recorder: the config and profile name it was given."""
    seen: dict = {}

    def fake_run_job(cfg, out_dir, files, **kw):
        seen.update(cfg=cfg, profile=kw["profile"])
        fold = {"net_pnl": 0.0, "trades": 0}
        return {"summary": {"mean_net_pnl": 0.0, "mean_sharpe_annual": 0.0, "beats_flat_folds": 0,
                            "beats_long_folds": 0, "beats_buy_hold_folds": 0}, "folds": [fold]}

    monkeypatch.setattr(foxhunt.job, "run_job", fake_run_job)
    return seen


def test_default_profile_names_gpu_only_with_cuda():
    assert default_profile(True) == GPU_PROFILE == "gpu"
    assert default_profile(False) == DEFAULT_PROFILE == "smoke"


@pytest.mark.parametrize(
    ("cuda", "args", "sizes", "profile", "announced"),
    [
        (True, [], GPU_SIZES, "gpu", True),
        (False, [], SMOKE_SIZES, "default", False),  # the CPU default as before
        (True, ["--set", "run.device=cpu"], SMOKE_SIZES, "default", False),  # told to use the CPU
        (True, ["--profile", "smoke"], SMOKE_SIZES, "smoke", False),  # a named profile wins
    ],
    ids=["cuda", "cpu", "cuda-but-device-cpu", "cuda-named-smoke"],
)
def test_run_picks_the_profile_by_device(monkeypatch, tmp_path: Path, cuda, args, sizes, profile, announced):
    _fake_device(monkeypatch, cuda)
    seen = _capture_run_job(monkeypatch)
    result = runner.invoke(app, ["run", "--out", str(tmp_path / "r"), *args])
    assert result.exit_code == 0, result.output
    assert _sizes(seen["cfg"]) == sizes
    assert seen["profile"] == profile
    line = "no --profile or --config: NVIDIA H200 found, so the gpu profile (8 members of 256 episodes"
    assert (line in result.output) is announced


@pytest.mark.parametrize("command", ["seeds", "tune"])
def test_seeds_and_tune_pick_gpu_with_cuda(monkeypatch, tmp_path: Path, command):
    """Both resolve their config the same way; stopped at the market (nothing is built)."""
    _fake_device(monkeypatch, True)
    seen: dict = {}

    def stop_at_market(ctx, data, cfg, out_dir):
        seen["cfg"] = cfg
        raise FoxhuntError("test", "stopped before the market", "nothing")

    monkeypatch.setattr(foxhunt.cli.study, "market_files", stop_at_market)
    extra = ["--seeds", "7,8"] if command == "seeds" else []
    result = runner.invoke(app, [command, "--out", str(tmp_path / command), *extra])
    assert result.exit_code == 2, result.output
    assert "stopped before the market" in result.output
    # a study's trials train one member each (foxhunt.tune.objective.trial_config)
    assert _sizes(seen["cfg"]) == (GPU_SIZES | {"members": 1} if command == "tune" else GPU_SIZES)
    assert "so the gpu profile" in result.output
    if command == "tune":  # the gpu profile carries a search space of its own
        assert "agent.learn.lr" in seen["cfg"].tune.params
