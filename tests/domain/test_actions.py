"""The action branches and codec, by hand: one branch order, mixed-radix joint indices, round trips."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from foxhunt.domain.actions import BRANCHES, ActionCodec, BranchConfig, Direction, OrderType, Urgency

# Sizes D, M, O, U = 3, 2, 1, 2 (no Flat, two magnitudes, market orders only, two urgencies):
# joint = ((d * 2 + m) * 1 + o) * 2 + u, so 12 joint actions.
SMALL = BranchConfig(direction=3, magnitude=2, order_type=1, urgency=2, magnitude_fractions=(0.5, 1.0))
HAND = [  # (direction, magnitude, order, urgency) -> joint, worked out with the formula above
    ((0, 0, 0, 0), 0),
    ((0, 0, 0, 1), 1),
    ((0, 1, 0, 0), 2),
    ((1, 0, 0, 1), 5),
    ((2, 1, 0, 0), 10),
    ((2, 1, 0, 1), 11),
]


def test_branches_name_the_config_fields_in_codec_order() -> None:
    assert BRANCHES == ("direction", "magnitude", "order_type", "urgency")
    codec = ActionCodec(SMALL)
    assert tuple(getattr(SMALL, name) for name in BRANCHES) == codec.sizes == (3, 2, 1, 2)
    assert codec.branch_names == BRANCHES and codec.n_joint == 12


@pytest.mark.parametrize(("branches", "joint"), HAND)
def test_encode_and_decode_by_hand(branches: tuple[int, int, int, int], joint: int) -> None:
    codec = ActionCodec(SMALL)
    assert int(codec.encode(*(torch.tensor(b) for b in branches))) == joint
    assert tuple(int(x) for x in codec.decode(torch.tensor(joint))) == branches


def test_round_trip_of_every_joint_action_of_a_batch() -> None:
    codec = ActionCodec(SMALL)
    joint = torch.tensor([11, 0, 5, 2, 10, 1])
    assert torch.equal(codec.encode(*codec.decode(joint)), joint)
    assert codec.table()[5].tolist() == [1, 0, 0, 1]  # row j of the table is action j decoded


def test_labels_name_the_enum_values() -> None:
    codec = ActionCodec()
    j = codec.encode(
        torch.tensor(int(Direction.SHORT)),
        torch.tensor(2),
        torch.tensor(int(OrderType.LIMIT_INSIDE)),
        torch.tensor(int(Urgency.PATIENT)),
    )
    assert int(j) == ((0 * 3 + 2) * 3 + 2) * 3 + 1 == 25
    assert codec.label(25) == "SHORT x1 LIMIT_INSIDE PATIENT"
    assert codec.value_labels()["direction"] == ("Short", "Hold", "Long", "Flat")


def test_target_exposure_by_hand() -> None:
    """Short/Long set -/+ fraction, Hold keeps the position, Flat closes."""
    codec = ActionCodec(BranchConfig(magnitude=2, magnitude_fractions=(0.5, 1.0)))
    d = torch.tensor([int(Direction.SHORT), int(Direction.LONG), int(Direction.HOLD), int(Direction.FLAT)])
    m = torch.tensor([1, 0, 1, 1])
    pos = torch.tensor([0.25, 0.25, 0.25, 0.25], dtype=torch.float64)
    assert codec.target_exposure(d, m, pos).tolist() == [-1.0, 0.5, 0.25, 0.0]


def test_branch_config_needs_one_fraction_per_magnitude() -> None:
    with pytest.raises(ValidationError, match="magnitude_fractions needs 2"):
        BranchConfig(magnitude=2)
    with pytest.raises(ValidationError, match=r"\(0, 1\]"):
        BranchConfig(magnitude=1, magnitude_fractions=(1.5,))
