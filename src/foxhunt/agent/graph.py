"""The learner step replayed as one CUDA graph (measured at batch 16,384 on an H200, bench/learner.py,
replay sampling and the priority write inside the graph: the graph of the eager kernels 17.1 ms;
compiled first, 797 kernels, 12.1 ms = 1.40x the bare captured fwd+bwd+Adam step of 8.68 ms. With
the sampling and priorities eager around the graph it was 13.6 ms = 1.56x).

:class:`GraphedLearn` is what ``Agent.learn`` replays on CUDA: the whole learner step, replay sampling
(drawn from the agent's registered generator), the update, the priority write and the ``q_abs`` EMA,
captured once per batch size, so an update is one graph launch with nothing on the host between
updates. :class:`GraphedUpdate` captures the update alone on a static batch that each call copies
in (the equivalence tests and bench/learner.py compare it with the eager update batch for batch).

Both are captured after a few eager warm-up steps on a side stream (they change the agent like any
update). The outputs (priorities, statistics) are the graph's static tensors, which the next replay
overwrites: read (or accumulate) them before the next update. Adam's learning rate is a device
tensor (``capturable`` Adam), so ``Learner.set_epoch`` changes it without a recapture. The graph
replays the same kernels as the eager update, so on the same batches the two give bit-identical
parameters (tested on CUDA); compiled, they agree to float32 rounding (bench/learner.py: parameters
1.4e-5 relative after 3 updates).

From :data:`COMPILE_MIN_BATCH` rows the update's two pure stretches are ``torch.compile``-d first
(:meth:`Learner.compile`: Inductor fuses the forwards' and the losses' elementwise chains and their
backward), so the graph replays far fewer kernels; the warm-up updates compile, the capture replays
what they compiled.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from foxhunt.agent.learner import Batch, Learner
from foxhunt.env.graph import capture

COMPILE_MIN_BATCH = 4096
"""Smallest learner batch whose captured update is compiled first. The compile (forward with and
without grad, loss and backward; tens of seconds on the H200 box, reported by bench/learner.py) pays
only where the update is long and many: the localdev and production profiles' batches of
4,096-16,384, not the smoke profile's 256 (its CUDA graph of the eager update is short already)."""


def _compile_first(learner: Learner, batch_size: int, compile: bool | None) -> bool:
    compiled = batch_size >= COMPILE_MIN_BATCH if compile is None else compile
    if compiled and not learner.compiled:
        learner.compile()
    return compiled


class GraphedUpdate:
    """``learner.update`` captured for batches shaped like ``first``; ``compile`` (default: from
    :data:`COMPILE_MIN_BATCH` rows) compiles the learner's pure stretches before the capture."""

    def __init__(self, learner: Learner, first: Batch, warmup: int = 3, compile: bool | None = None) -> None:
        t0 = time.perf_counter()
        self.learner = learner
        self.compiled = _compile_first(learner, int(first.weight.shape[0]), compile)
        kind = type(first)  # Batch, or CounterfactualBatch with its column
        self.static = kind(**{f: getattr(first, f).clone() for f in kind.__dataclass_fields__})
        self.graph, (self.priority, self.stats) = capture(lambda: learner.update(self.static), warmup)
        self.capture_seconds = time.perf_counter() - t0  # compile (when compiled) + warm-up + capture

    @property
    def batch_size(self) -> int:
        return int(self.static.weight.shape[0])

    def update(self, batch: Batch) -> tuple[Tensor, dict[str, Tensor]]:
        """Copy ``batch`` in, replay; the outputs are the graph's static tensors (see above)."""
        for f in type(self.static).__dataclass_fields__:
            getattr(self.static, f).copy_(getattr(batch, f))
        self.graph.replay()
        return self.priority, self.stats


class GraphedLearn:
    """A whole learner step ``step() -> statistics`` (sample, update, priorities: ``Agent._learn_step``)
    captured for ``batch_size`` rows; ``generators`` are the custom generators it draws from."""

    def __init__(
        self,
        step: Callable[[], dict[str, Tensor]],
        learner: Learner,
        batch_size: int,
        generators: Sequence[torch.Generator] = (),
        warmup: int = 3,
        compile: bool | None = None,
    ) -> None:
        t0 = time.perf_counter()
        self.batch_size = batch_size
        self.compiled = _compile_first(learner, batch_size, compile)
        self.graph, self.stats = capture(step, warmup, generators)
        self.capture_seconds = time.perf_counter() - t0  # compile (when compiled) + warm-up + capture

    def update(self) -> dict[str, Tensor]:
        """One replay: one learner step; its statistics are the graph's static tensors (see above)."""
        self.graph.replay()
        return self.stats
