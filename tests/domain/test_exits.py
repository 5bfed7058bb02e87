"""One ExitReason for labels, env and report: its values, and the label class <-> reason mapping."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.domain.exits import (
    BARRIER_EXITS,
    N_OUTCOMES,
    NO_OUTCOME,
    ExitReason,
    outcome_class,
    outcome_reason,
)
from foxhunt.validation.labels import triple_barrier


def test_exit_reason_values_are_the_step_and_ledger_codes() -> None:
    """The env writes these ints into StepResult.exit_reason and ClosedTrades.reason (cached in
    decisions and trades files): changing one changes recorded results."""
    assert [(r.name, int(r)) for r in ExitReason] == [
        ("NONE", 0),
        ("PROFIT", 1),
        ("STOP", 2),
        ("TIMEOUT", 3),
        ("CAPITAL_FLOOR", 4),
        ("WINDOW_END", 5),
        ("AGENT_CLOSE", 6),
        ("FLIP", 7),
    ]


def test_label_classes_by_hand() -> None:
    """The cached label.outcome values: profit 0, stop 1, timeout 2, no label -1."""
    assert [outcome_class(int(r)) for r in BARRIER_EXITS] == [0, 1, 2]
    assert outcome_class(int(ExitReason.NONE)) == NO_OUTCOME == -1
    assert N_OUTCOMES == 3


@pytest.mark.parametrize("reason", [ExitReason.NONE, *BARRIER_EXITS])
def test_outcome_reason_inverts_outcome_class(reason: ExitReason) -> None:
    back = outcome_reason(outcome_class(int(reason)))
    assert back is reason


def test_outcome_reason_reads_numpy_and_tensor_scalars() -> None:
    assert outcome_reason(np.int8(1)) is ExitReason.STOP
    assert outcome_reason(torch.tensor(2)) is ExitReason.TIMEOUT


def test_outcome_class_maps_arrays_and_tensors_elementwise() -> None:
    reasons = [int(ExitReason.TIMEOUT), int(ExitReason.PROFIT), int(ExitReason.NONE), int(ExitReason.STOP)]
    assert outcome_class(np.array(reasons)).tolist() == [2, 0, -1, 1]
    assert outcome_class(torch.tensor(reasons)).tolist() == [2, 0, -1, 1]


def test_the_label_kernel_stores_the_class_of_each_exit() -> None:
    """Hand-made path (entry 100, vol 1/64, mults 1: profit 101.5625, stop 98.4375, horizon 2): row 0
    touches profit on row 1, row 2 its stop on row 3, row 4 nothing (timeout), rows 5-6 lack a horizon."""
    high = np.array([100.0, 101.6, 100.0, 100.0, 100.0, 100.0, 100.0])
    low = np.array([100.0, 100.0, 100.0, 98.0, 100.0, 100.0, 100.0])
    close, vol = np.full(7, 100.0), np.full(7, 1 / 64)
    starts = np.zeros(7, bool)
    starts[0] = True
    outcome, offset, valid = triple_barrier(close, high, low, starts, vol, 1.0, 1.0, 2)
    reasons = [outcome_reason(o) for o in outcome]
    assert reasons[0] is ExitReason.PROFIT and offset[0] == 1
    assert reasons[2] is ExitReason.STOP and offset[2] == 1
    assert reasons[4] is ExitReason.TIMEOUT and offset[4] == 2
    assert reasons[5:] == [ExitReason.NONE, ExitReason.NONE] and not valid[5:].any()
