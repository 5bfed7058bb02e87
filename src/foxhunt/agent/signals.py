"""The adaptive signals that steer the learner, in one named registry on the device (docs/design.md §6).

Each signal is an exponential moving average held as a 0-dim (or small) tensor on the agent's
device, with a cold-start value it returns to at every fold boundary (:meth:`Signals.reset`).
Updating a signal is a tensor operation (``lerp_``), so the learner's ``update`` never reads one
back to the host; the diagnostics read them all at once per epoch.

============================  =========  ==========================================================
signal                        cold start what it steers
============================  =========  ==========================================================
``q_abs``                     1.0        \\|Q\\| reference: Boltzmann temperature and conviction scale
``q_gap``                     1.0        mean best-minus-second E[Q] gap of the direction branch
``sharpe``                    0.0        EMA of the per-step Sharpe of collected experience
``bonus_share``               0.0        share of the reward coming from shaping terms
``gate_entropy``              ln K       gate-entropy EMA H_ema of the MoE balance lambda
``balance_lambda``            0.01       the MoE load-balance lambda (docs/design.md §6)
``atom_utilisation``          1.0        share of C51 atoms in use (entropy bonus below 50%)
``expert_utilisation``        1/K each   mean gate weight per expert ``[K]``
============================  =========  ==========================================================
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

_RATE = 0.05  # the gate-entropy EMA's rate alpha (docs/design.md §6); used for every signal


class Signals:
    """Named EMAs on one device; ``experts`` sizes the per-expert signal."""

    def __init__(self, experts: int, device: torch.device | str = "cpu", rate: float = _RATE) -> None:
        self.experts = experts
        self.device = torch.device(device)
        self.rate = rate
        self.cold: dict[str, Tensor] = {
            "q_abs": torch.tensor(1.0),
            "q_gap": torch.tensor(1.0),
            "sharpe": torch.tensor(0.0),
            "bonus_share": torch.tensor(0.0),
            "gate_entropy": torch.tensor(math.log(experts)),
            "balance_lambda": torch.tensor(0.01),
            "atom_utilisation": torch.tensor(1.0),
            "expert_utilisation": torch.full((experts,), 1.0 / experts),
        }
        self.values: dict[str, Tensor] = {}
        self.reset()

    def reset(self) -> None:
        """Back to the cold-start values (a fold boundary). Tensors keep their identity (graphs)."""
        for name, cold in self.cold.items():
            v = cold.to(self.device, torch.float32)
            if name in self.values:
                self.values[name].copy_(v)
            else:
                self.values[name] = v.clone()

    def __getitem__(self, name: str) -> Tensor:
        return self.values[name]

    def ema(self, name: str, value: Tensor) -> Tensor:
        """``s <- s + rate * (value - s)`` in place; returns the signal."""
        s = self.values[name]
        s.lerp_(value.detach().to(s.dtype), self.rate)
        return s

    def set(self, name: str, value: Tensor) -> None:
        self.values[name].copy_(value.detach())

    def state_dict(self) -> dict[str, Tensor]:
        return {k: v.detach().clone() for k, v in self.values.items()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        missing = set(self.values) - set(state)
        if missing:
            raise KeyError(f"signal state lacks {sorted(missing)}")
        for k, v in state.items():
            self.values[k].copy_(v.to(self.device))
