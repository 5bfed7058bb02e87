"""``Learner.update`` replayed as one CUDA graph (measured at batch 16,384 on an H200, bench/learner.py:
eager 36 ms, bound by launching ~2,900 small kernels; the graph of those kernels 21.2 ms; compiled
first, 983 kernels, 13.6 ms with replay sampling and priorities = 1.56x the bare captured step).

The graph is captured on a static batch after a few eager warm-up updates on a side stream (they
change the agent like any update). Each replay copies a freshly sampled batch into the static
tensors, replays, and leaves the priorities and statistics in the graph's static outputs, which the
next replay overwrites: read (or accumulate) them before the next update. Adam's learning rate is a
device tensor (``capturable`` Adam), so ``Learner.set_epoch`` changes it without a recapture. Replay
sampling and the priority update stay eager around the replay. The graph replays the same kernels
as the eager update, so on the same batches the two give bit-identical parameters (tested on CUDA);
compiled, they agree to float32 rounding (bench/learner.py: parameters 1.4e-5 relative after 3 updates).

From :data:`COMPILE_MIN_BATCH` rows the update's two pure stretches are ``torch.compile``-d first
(:meth:`Learner.compile`: Inductor fuses the forwards' and the losses' elementwise chains and their
backward), so the graph replays far fewer kernels; the warm-up updates compile, the capture replays
what they compiled.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor

from foxhunt.agent.learner import Batch, Learner

COMPILE_MIN_BATCH = 4096
"""Smallest learner batch whose captured update is compiled first. The compile (forward with and
without grad, loss and backward; tens of seconds on the H200 box, reported by bench/learner.py) pays
only where the update is long and many: the gpu, localdev and production profiles' batches of
4,096-16,384, not the smoke profile's 256 (its CUDA graph of the eager update is short already)."""


class GraphedUpdate:
    """``learner.update`` captured for batches shaped like ``first``; ``compile`` (default: from
    :data:`COMPILE_MIN_BATCH` rows) compiles the learner's pure stretches before the capture."""

    def __init__(self, learner: Learner, first: Batch, warmup: int = 3, compile: bool | None = None) -> None:
        t0 = time.perf_counter()
        self.learner = learner
        self.compiled = first.weight.shape[0] >= COMPILE_MIN_BATCH if compile is None else compile
        if self.compiled and not learner.compiled:
            learner.compile()
        self.static = Batch(**{f: getattr(first, f).clone() for f in Batch.__dataclass_fields__})
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                learner.update(self.static)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.priority, self.stats = learner.update(self.static)
        torch.cuda.synchronize()
        self.capture_seconds = time.perf_counter() - t0  # compile (when compiled) + warm-up + capture

    @property
    def batch_size(self) -> int:
        return int(self.static.weight.shape[0])

    def update(self, batch: Batch) -> tuple[Tensor, dict[str, Tensor]]:
        """Copy ``batch`` in, replay; the outputs are the graph's static tensors (see above)."""
        for f in Batch.__dataclass_fields__:
            getattr(self.static, f).copy_(getattr(batch, f))
        self.graph.replay()
        return self.priority, self.stats
