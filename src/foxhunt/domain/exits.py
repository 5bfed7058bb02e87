"""Why a position exits: one :class:`ExitReason` for the labels, the environment, the agent and the
report.

The triple barrier (:mod:`foxhunt.domain.barrier`) ends an entry by PROFIT, STOP or TIMEOUT; the
environment adds the exits a plan can meet besides its barriers (the capital floor, the episode
window's end) and the policy's own closes. The environment's step reports ``ExitReason`` values
(``StepResult.exit_reason``, ``ClosedTrades.reason``), 0 meaning no exit.

The labels store a barrier outcome as a **class index** 0, 1, 2 (the column of the network's outcome
logits and the value cached in ``label.outcome``), one below its reason::

    class = reason - ExitReason.PROFIT        PROFIT 1 -> 0, STOP 2 -> 1, TIMEOUT 3 -> 2, NONE 0 -> -1

so :data:`NO_OUTCOME` (the filler of rows without a label) is the class of ``ExitReason.NONE``.
:func:`outcome_class` and :func:`outcome_reason` are the one place this offset is written.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TypeVar


class ExitReason(IntEnum):
    """Why a trade closed; ``StepResult.exit_reason`` holds the forced ones (1-5) of a step's exit."""

    NONE = 0
    PROFIT = 1  # the barrier's profit level
    STOP = 2  # the barrier's (trailing) stop
    TIMEOUT = 3  # the barrier's horizon ran out
    CAPITAL_FLOOR = 4  # equity below the floor: flattened, the episode ends
    WINDOW_END = 5  # the episode's last row closes whatever is open
    AGENT_CLOSE = 6  # the policy's own order brought the position to 0
    FLIP = 7  # the policy's own order reversed the position (the new side opens a trade)


BARRIER_EXITS: tuple[ExitReason, ExitReason, ExitReason] = (
    ExitReason.PROFIT,
    ExitReason.STOP,
    ExitReason.TIMEOUT,
)
"""The triple barrier's outcomes, in class order (class ``k`` is ``BARRIER_EXITS[k]``)."""

_CLASS_OFFSET = int(ExitReason.PROFIT)

Codes = TypeVar("Codes")  # an int, a numpy array or a torch tensor of integer codes


def outcome_class(reason: Codes) -> Codes:
    """Label class of a barrier exit (int, or an array/tensor of reasons elementwise): reason - 1."""
    return reason - _CLASS_OFFSET  # type: ignore[operator]


def outcome_reason(outcome: int) -> ExitReason:
    """The :class:`ExitReason` of a label class (:data:`NO_OUTCOME` gives ``ExitReason.NONE``)."""
    return ExitReason(int(outcome) + _CLASS_OFFSET)


NO_OUTCOME: int = outcome_class(int(ExitReason.NONE))
"""Filler of the label arrays where a row has no valid outcome (-1: never a class)."""

N_OUTCOMES = len(BARRIER_EXITS)
"""Number of outcome classes (the width of the network's outcome logits)."""
