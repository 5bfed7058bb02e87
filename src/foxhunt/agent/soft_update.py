"""The soft (Polyak) target-network update, ``θ' <- θ' + τ (θ - θ')`` (Lillicrap et al. 2016, §3).

TorchRL's ``SoftUpdate`` and LeanRL's ``lerp_`` loop do the same: the target network trails the online
one with time constant ``1 / τ`` updates (``LearnConfig.polyak``). Only the parameters move: the
buffers a network reads in its forward (the C51 ``v_max``) are copied by their own owner
(:class:`~foxhunt.agent.support.SupportGrowth`). One multi-tensor ``lerp_`` for every parameter, on the
device, so it sits inside a graph-captured update. Stateless: ``τ`` comes from the config and the
networks are saved by their owner.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["SoftUpdate"]


class SoftUpdate:
    """``target``'s parameters move a share ``tau`` of the way to ``online``'s at each :meth:`step`."""

    def __init__(self, online: nn.Module, target: nn.Module, tau: float) -> None:
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"the soft-update rate tau must be in (0, 1], got {tau} (LearnConfig.polyak)")
        online_params, target_params = list(online.parameters()), list(target.parameters())
        shapes = [p.shape for p in online_params], [p.shape for p in target_params]
        if shapes[0] != shapes[1]:
            raise ValueError("the soft update needs a target network shaped like the online one (a copy)")
        self.online, self.target, self.tau = online, target, tau

    @torch.no_grad()
    def step(self) -> None:
        """``θ' <- θ' + τ (θ - θ')`` for every parameter pair, in place (one multi-tensor kernel)."""
        torch._foreach_lerp_(list(self.target.parameters()), list(self.online.parameters()), self.tau)
