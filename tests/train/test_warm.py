"""Training's compiles paid ahead of training (foxhunt.train.run.warm_compile): on CUDA a throwaway
trainer of the first fold compiles every step the run's first epoch runs, so the run compiles
nothing more; on the CPU (eager steps) nothing runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from foxhunt.features.cache_file import FeatureCache
from foxhunt.train.run import Interrupted, train, warm_compile
from tests.train.test_run import quiet, tiny_cfg


def test_nothing_is_compiled_ahead_on_the_cpu(tiny_cache: FeatureCache) -> None:
    assert warm_compile(tiny_cache, tiny_cfg("run.device=cpu")) == 0.0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_after_warm_compile_the_runs_first_epoch_compiles_nothing(
    tiny_cache: FeatureCache, tmp_path: Path
) -> None:
    from torch._dynamo.utils import counters

    # Sizes that compile: the env step and exploring forward from 1,024 episodes, the update from 4,096.
    cfg = tiny_cfg(
        "run.device=cuda",
        "train.envs=1024",
        "agent.learn.batch=4096",
        "agent.replay.capacity=65536",
        "train.sizing.mode=profile",
    )
    torch._dynamo.reset()
    before = counters["stats"]["unique_graphs"]
    assert warm_compile(tiny_cache, cfg) > 0
    compiled = counters["stats"]["unique_graphs"] - before
    assert compiled >= 4  # env step, exploring forward, the update's target and loss stretches
    with pytest.raises(Interrupted):
        train(tiny_cache, cfg, tmp_path / "run", log=quiet, stop_after=(0, 0))
    assert counters["stats"]["unique_graphs"] - before == compiled
