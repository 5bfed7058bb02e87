"""A CUDA-graph-captured step: the whole transition replayed as one graph launch.

Eager PyTorch launches hundreds of small kernels per step, so at 16 k envs the step is launch-bound
(bench/env.py on an H200: 1.3e6 env-steps/s eager at 16 k envs against 4.2e7 at 1 M). A CUDA graph
records the launches once and replays them with one call. The environment's transition is pure
(:meth:`TradingEnv._transition`) and has no host round trip, so it can be captured as is: the
portfolio lives in static buffers, the graph computes the next portfolio from them and copies it
back in place, and each step only writes the actions into their static buffer and replays.
"""

from __future__ import annotations

from dataclasses import fields

import torch
from torch import Tensor

from foxhunt.env.core import Portfolio, StepResult, TradingEnv


def _pairs(a: object, b: object) -> list[tuple[Tensor, Tensor]]:
    out = []
    for f in fields(a):  # type: ignore[arg-type]
        x, y = getattr(a, f.name), getattr(b, f.name)
        out.extend(zip(x, y, strict=True) if isinstance(x, tuple) else [(x, y)])
    return out


class GraphedStep:
    """``step(actions) -> StepResult`` replaying a captured transition of ``env`` (CUDA only).

    The env must have been reset; episodes keep their fixed windows (no autoreset inside the graph).
    Convictions are neutral (scripted and evaluation policies); the result tensors are static
    buffers overwritten by the next replay (copy them out if you keep them).
    """

    def __init__(self, env: TradingEnv, warmup: int = 3) -> None:
        if env.device.type != "cuda":
            raise ValueError("CUDA graphs need the environment on a CUDA device")
        state = env._state()
        n = state.row.shape[0]
        self.env = env
        self.actions = torch.zeros(n, 4, dtype=torch.int64, device=env.device)
        self.actions[:, 0] = 1  # Hold while warming up
        snapshot = Portfolio(**{f.name: _clone(getattr(state, f.name)) for f in fields(Portfolio)})
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up off the capture (allocator, lazy init)
            for _ in range(warmup):
                env._transition(state, self.actions, None, None, None)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            new, self.result = env._transition(state, self.actions, None, None, None)
            for dst, src in _pairs(state, new):
                dst.copy_(src)
        for dst, src in _pairs(state, snapshot):  # capture ran the step once: undo it
            dst.copy_(src)

    def step(self, actions: Tensor) -> StepResult:
        self.actions.copy_(actions)
        self.graph.replay()
        return self.result


def _clone(x: object) -> object:
    if isinstance(x, tuple):
        return type(x)(*(t.clone() for t in x))
    return x.clone()  # type: ignore[union-attr]
