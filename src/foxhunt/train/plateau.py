"""Plateau handling (docs/design.md §7): detect a frozen learner and respond with an ordered ladder.

Detection (:class:`PlateauDetector`)
------------------------------------
A learner is frozen when it still receives gradient but its Q statistics no longer move for
``patience`` epochs: over a window ``W`` of the last ``patience + 1`` epochs' statistics (``patience``
epoch-to-epoch changes), with ``x_s`` each ``q/<branch>/<stat>`` statistic of branch ``b``::

    grad/total > 0 (and finite) in every epoch of W
    max_W x_s - min_W x_s <= tolerance * scale_b      for every statistic s of every branch b
    scale_b = max(max_{W, s of b} |x_s|, 1e-12)       (the branch's largest |mean| or spread)

Relative to the branch's scale, so a Q mean near zero with a real spread is judged by that spread.
The first verdict comes at the ``patience + 1``-th epoch. After firing the window restarts empty: the
next plateau needs ``patience + 1`` more epochs, so each response gets time to act before the next rung.

Response ladder (:class:`PlateauResponder`)
-------------------------------------------
Each successive plateau takes the next rung, in this order, skipping rungs configured as no-ops::

    1. momentum reset   Adam state of the branch heads zeroed (:func:`reset_momentum`)
    2. shrink-perturb   head weights theta <- shrink * theta + perturb_std * eps (:func:`shrink_perturb`)
    3. temperature      the caller multiplies its exploration temperature by ``temperature_boost``
                        (skipped when that temperature is 0: Boltzmann exploration is off, and
                        0 x boost would spend a plateau on a response that changes nothing)
    4. LR bump          every param group's lr (and a scheduler's base lr) x ``lr_bump`` (:func:`bump_lr`)
    5. rewind           the caller's callback restores a ring checkpoint

After the rewind the ladder is exhausted (responses are NONE) until :meth:`PlateauResponder.note_progress`
(the caller's signal of progress, e.g. a new best validation score) starts it again from rung 1.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch

from foxhunt.train.config import PlateauConfig
from foxhunt.train.diagnostics import GRAD_TOTAL, BoardSection

log = logging.getLogger(__name__)

_SCALE_FLOOR = 1e-12


class Response(StrEnum):
    MOMENTUM_RESET = "momentum_reset"
    SHRINK_PERTURB = "shrink_perturb"
    TEMPERATURE_BOOST = "temperature_boost"
    LR_BUMP = "lr_bump"
    REWIND = "rewind"
    NONE = "none"  # ladder exhausted


LADDER = (
    Response.MOMENTUM_RESET,
    Response.SHRINK_PERTURB,
    Response.TEMPERATURE_BOOST,
    Response.LR_BUMP,
    Response.REWIND,
)


# --- pure functions ------------------------------------------------------------------------------


@torch.no_grad()
def reset_momentum(optimizer: torch.optim.Optimizer, params: Iterable[torch.Tensor]) -> int:
    """Zero, in place, every tensor of the optimizer state of ``params`` (Adam: ``exp_avg``,
    ``exp_avg_sq``, ``max_exp_avg_sq`` and ``step``), as if they had just been added: the next Adam
    step is a bias-corrected fresh start. Other parameters' state is untouched; in-place zeroing keeps
    devices, dtypes and CUDA-graph addresses. Returns how many parameters had state."""
    n = 0
    for p in params:
        state = optimizer.state.get(p)
        if not state:
            continue
        n += 1
        for v in state.values():
            if isinstance(v, torch.Tensor):
                v.zero_()
    return n


@torch.no_grad()
def shrink_perturb(
    params: Iterable[torch.Tensor], shrink: float, noise_std: float, generator: torch.Generator
) -> None:
    """Shrink-and-perturb (Ash & Adams, 2020), in place: ``theta <- shrink * theta + noise_std * eps``,
    ``eps ~ N(0, 1)`` of ``theta``'s shape drawn from ``generator`` (on its device, then moved), one
    parameter after the other in the order given."""
    for p in params:
        eps = torch.randn(p.shape, generator=generator, device=generator.device, dtype=p.dtype)
        p.mul_(shrink).add_(eps.to(p.device), alpha=noise_std)


def bump_lr(optimizer: torch.optim.Optimizer, factor: float, scheduler: Any | None = None) -> None:
    """Multiply every param group's ``lr`` (and ``initial_lr``, the base of torch's schedulers) by
    ``factor``, and a scheduler's ``base_lrs`` when given, so the next schedule step keeps the bump."""
    for group in optimizer.param_groups:
        for key in ("lr", "initial_lr"):
            if key in group:
                if isinstance(group[key], torch.Tensor):
                    group[key].mul_(factor)
                else:
                    group[key] = group[key] * factor
    if scheduler is not None and hasattr(scheduler, "base_lrs"):
        scheduler.base_lrs = [lr * factor for lr in scheduler.base_lrs]


# --- detection -----------------------------------------------------------------------------------


class PlateauDetector:
    """Frozen-learner detection over the last ``patience + 1`` epochs (module docstring)."""

    def __init__(self, patience: int, tolerance: float) -> None:
        if patience < 0 or not (tolerance >= 0):
            raise ValueError(f"patience must be >= 0 and tolerance >= 0, got {patience}, {tolerance}")
        self.patience = patience
        self.tolerance = tolerance
        self._window: deque[dict[str, float]] = deque(maxlen=patience + 1)

    @classmethod
    def from_config(cls, cfg: PlateauConfig) -> PlateauDetector:
        return cls(cfg.patience, cfg.tolerance)

    def reset(self) -> None:
        self._window.clear()

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state (checkpoint metadata): the epochs in the current window."""
        return {"window": [dict(w) for w in self._window]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._window.clear()
        self._window.extend(dict(w) for w in state["window"])

    def update(self, stats: Mapping[str, float]) -> bool:
        """Add one epoch's statistics; True when the learner is frozen (the window then restarts)."""
        if self.patience == 0:
            return False
        q = {
            k: float(v) for k, v in stats.items() if k.startswith(f"{BoardSection.Q}/") and k.count("/") == 2
        }
        grad = stats.get(GRAD_TOTAL)
        if not q or grad is None or not (math.isfinite(grad) and grad > 0):
            self._window.clear()  # no gradient (or no Q statistics): not this kind of plateau
            return False
        if self._window and set(q) != set(self._window[-1]):
            self._window.clear()
        self._window.append(q)
        if len(self._window) <= self.patience or not self._frozen():
            return False
        self._window.clear()
        return True

    def _frozen(self) -> bool:
        keys = list(self._window[-1])
        scale: dict[str, float] = {}
        for k in keys:
            b = k.split("/")[1]
            m = max(abs(e[k]) for e in self._window)
            scale[b] = max(scale.get(b, _SCALE_FLOOR), m)
        for k in keys:
            vals = [e[k] for e in self._window]
            if not all(math.isfinite(v) for v in vals):
                return False
            if max(vals) - min(vals) > self.tolerance * scale[k.split("/")[1]]:
                return False
        return True


# --- responses -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlateauAction:
    response: Response
    detail: str
    temperature_multiplier: float = 1.0
    """The caller multiplies its exploration temperature by this (not 1 only for TEMPERATURE_BOOST)."""


class PlateauResponder:
    """The response ladder (module docstring). ``head_params`` are the branch heads' parameters
    (momentum reset and shrink-and-perturb act on them only); ``rewind`` restores a ring checkpoint
    and returns what it restored (None: that rung is skipped); ``scheduler`` (optional) keeps the LR
    bump through its next step; ``temperature`` is the exploration temperature the third rung
    multiplies (0, Boltzmann off: that rung is skipped)."""

    def __init__(
        self,
        cfg: PlateauConfig,
        optimizer: torch.optim.Optimizer,
        head_params: Iterable[torch.Tensor],
        *,
        generator: torch.Generator,
        rewind: Callable[[], str] | None = None,
        scheduler: Any | None = None,
        temperature: float = 1.0,
    ) -> None:
        self.cfg = cfg
        self.temperature = temperature
        self.optimizer = optimizer
        self.head_params = list(head_params)
        self.generator = generator
        self.rewind = rewind
        self.scheduler = scheduler
        self._rung = 0
        self.history: list[PlateauAction] = []

    @property
    def next_response(self) -> Response:
        rungs = self._available()
        return rungs[self._rung] if self._rung < len(rungs) else Response.NONE

    def _available(self) -> list[Response]:
        c = self.cfg
        skip = {
            Response.SHRINK_PERTURB: c.shrink == 1 and c.perturb_std == 0,
            Response.TEMPERATURE_BOOST: c.temperature_boost == 1 or self.temperature == 0,
            Response.LR_BUMP: c.lr_bump == 1,
            Response.REWIND: self.rewind is None,
        }
        return [r for r in LADDER if not skip.get(r, False)]

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state (checkpoint metadata): the next rung of the ladder."""
        return {"rung": self._rung}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._rung = int(state["rung"])

    def note_progress(self) -> None:
        """The learner made progress: the next plateau starts the ladder again from rung 1."""
        self._rung = 0

    def respond(self) -> PlateauAction:
        """Apply the next rung and advance; the action (also logged) names what was done."""
        response = self.next_response
        c = self.cfg
        mult = 1.0
        if response is Response.MOMENTUM_RESET:
            n = reset_momentum(self.optimizer, self.head_params)
            detail = f"zeroed the optimizer state of {n} head parameter(s)"
        elif response is Response.SHRINK_PERTURB:
            shrink_perturb(self.head_params, c.shrink, c.perturb_std, self.generator)
            detail = f"head weights <- {c.shrink:g} x weights + {c.perturb_std:g} x N(0, 1)"
        elif response is Response.TEMPERATURE_BOOST:
            mult = c.temperature_boost
            detail = f"exploration temperature x {mult:g}"
        elif response is Response.LR_BUMP:
            bump_lr(self.optimizer, c.lr_bump, self.scheduler)
            detail = f"learning rate x {c.lr_bump:g}"
        elif response is Response.REWIND:
            assert self.rewind is not None
            detail = f"rewound to {self.rewind()}"
        else:
            detail = "response ladder exhausted; training continues until progress resets it"
        if response is not Response.NONE:
            self._rung += 1
        action = PlateauAction(response, detail, mult)
        self.history.append(action)
        log.info("plateau response %s: %s", response.value, detail)
        return action

    def reset(self) -> None:
        """A fold boundary: ladder back to rung 1, history cleared."""
        self._rung = 0
        self.history.clear()
