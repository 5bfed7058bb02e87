"""The action codec: round trips over every joint action, several branch-size sets, target exposure."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from foxhunt.domain.actions import ActionCodec, BranchConfig, Direction, OrderType, Urgency

VARIANT = BranchConfig(direction=3, magnitude=3, magnitude_fractions=(0.25, 0.5, 1.0))
CONFIGS = [
    pytest.param(BranchConfig(), id="4x3x3x3"),
    pytest.param(VARIANT, id="3x3x3x3"),
    pytest.param(
        BranchConfig(magnitude=2, order_type=1, urgency=2, magnitude_fractions=(0.5, 1.0)), id="4x2x1x2"
    ),
]


def test_default_sizes() -> None:
    codec = ActionCodec()
    assert codec.sizes == (4, 3, 3, 3)
    assert codec.n_joint == 108
    assert codec.branch_names == ("direction", "magnitude", "order_type", "urgency")
    assert ActionCodec(VARIANT).n_joint == 81


@pytest.mark.parametrize("cfg", CONFIGS)
def test_round_trip_over_every_joint_action(cfg: BranchConfig) -> None:
    codec = ActionCodec(cfg)
    joint = torch.arange(codec.n_joint)
    d, m, o, u = codec.decode(joint)
    for values, size in zip((d, m, o, u), codec.sizes, strict=True):
        assert values.dtype == torch.int64
        assert set(values.tolist()) == set(range(size))  # every value of every branch is reached
    assert torch.equal(codec.encode(d, m, o, u), joint)
    # the decoded tuples are all distinct: the map is a bijection onto the branch product
    table = codec.table()
    assert table.shape == (codec.n_joint, 4)
    assert len({tuple(r) for r in table.tolist()}) == codec.n_joint


def test_mixed_radix_direction_most_significant() -> None:
    codec = ActionCodec()
    # LONG(2), magnitude 1, LIMIT_AT_TOUCH(1), IMMEDIATE(2): ((2*3 + 1)*3 + 1)*3 + 2 = 68
    j = codec.encode(
        torch.tensor(Direction.LONG),
        torch.tensor(1),
        torch.tensor(OrderType.LIMIT_AT_TOUCH),
        torch.tensor(Urgency.IMMEDIATE),
    )
    assert int(j) == 68
    assert codec.label(68) == "LONG x0.5 LIMIT_AT_TOUCH IMMEDIATE"
    assert codec.label(0) == "SHORT x0.25 MARKET NORMAL"
    assert codec.label(107) == "FLAT x1 LIMIT_INSIDE IMMEDIATE"
    with pytest.raises(ValueError, match="outside"):
        codec.label(108)


@settings(max_examples=60, deadline=None)
@given(
    direction=st.integers(3, 4),
    magnitude=st.integers(1, 16),
    order_type=st.integers(1, 3),
    urgency=st.integers(1, 3),
    data=st.data(),
)
def test_round_trip_property(
    direction: int, magnitude: int, order_type: int, urgency: int, data: st.DataObject
) -> None:
    fracs = tuple((i + 1) / magnitude for i in range(magnitude))
    codec = ActionCodec(
        BranchConfig(
            direction=direction,
            magnitude=magnitude,
            order_type=order_type,
            urgency=urgency,
            magnitude_fractions=fracs,
        )
    )
    assert codec.n_joint == math.prod((direction, magnitude, order_type, urgency))
    joints = data.draw(st.lists(st.integers(0, codec.n_joint - 1), min_size=1, max_size=20))
    j = torch.tensor(joints, dtype=torch.int64)
    branches = codec.decode(j)
    for values, size in zip(branches, codec.sizes, strict=True):
        assert bool(((values >= 0) & (values < size)).all())
    assert torch.equal(codec.encode(*branches), j)


def test_batched_shapes_n_and_nk() -> None:
    codec = ActionCodec()
    g = torch.Generator().manual_seed(0)
    j_nk = torch.randint(0, codec.n_joint, (5, 7), generator=g)
    d, m, o, u = codec.decode(j_nk)
    assert d.shape == m.shape == o.shape == u.shape == (5, 7)
    assert torch.equal(codec.encode(d, m, o, u), j_nk)
    # decoding [N, K] equals decoding each row [K]
    for row in range(5):
        assert all(torch.equal(a[row], b) for a, b in zip((d, m, o, u), codec.decode(j_nk[row]), strict=True))


def test_target_exposure_hand_worked() -> None:
    codec = ActionCodec()
    direction = torch.tensor(
        [Direction.SHORT, Direction.LONG, Direction.HOLD, Direction.FLAT, Direction.LONG]
    )
    magnitude = torch.tensor([0, 1, 2, 2, 2])
    position = torch.tensor([0.5, -0.25, -0.75, 1.0, 0.0])
    # Short x0.25 -> -0.25; Long x0.5 -> 0.5; Hold keeps -0.75; Flat -> 0; Long x1.0 -> 1.0
    expected = torch.tensor([-0.25, 0.5, -0.75, 0.0, 1.0])
    out = codec.target_exposure(direction, magnitude, position)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_target_exposure_batched_nk_and_custom_fractions() -> None:
    codec = ActionCodec(BranchConfig(magnitude=2, magnitude_fractions=(0.3, 0.9)))
    direction = torch.tensor([[Direction.LONG, Direction.SHORT], [Direction.HOLD, Direction.FLAT]])
    magnitude = torch.tensor([[1, 0], [1, 1]])
    position = torch.tensor([[0.1], [0.4]], dtype=torch.float64)  # [N, 1] broadcasts over K
    out = codec.target_exposure(direction, magnitude, position)
    assert out.dtype == torch.float64 and out.shape == (2, 2)
    torch.testing.assert_close(out, torch.tensor([[0.9, -0.3], [0.4, 0.0]], dtype=torch.float64))


def test_three_way_direction_has_no_flat() -> None:
    codec = ActionCodec(VARIANT)
    d, _, _, _ = codec.decode(torch.arange(codec.n_joint))
    assert int(d.max()) == Direction.LONG
    # the last action is LONG x1.0 LIMIT_INSIDE IMMEDIATE
    assert codec.label(codec.n_joint - 1) == "LONG x1 LIMIT_INSIDE IMMEDIATE"


def test_fractions_cached_per_device_and_dtype() -> None:
    codec = ActionCodec()
    a = codec.fractions("cpu")
    assert a is codec.fractions(torch.device("cpu"))
    assert codec.fractions("cpu", torch.float64).dtype == torch.float64
    torch.testing.assert_close(a, torch.tensor([0.25, 0.5, 1.0]))


def test_traces_without_graph_break() -> None:
    # fullgraph=True fails on .item(), host copies or data-dependent Python control flow
    codec = ActionCodec()

    def fn(joint: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        d, m, o, u = codec.decode(joint)
        return codec.target_exposure(d, m, pos) + codec.encode(d, m, o, u)

    joint, pos = torch.arange(codec.n_joint), torch.linspace(-1, 1, codec.n_joint)
    compiled = torch.compile(fn, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(joint, pos), fn(joint, pos))


@pytest.mark.gpu
def test_cuda_round_trip_and_exposure() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    codec = ActionCodec()
    j = torch.arange(codec.n_joint, device="cuda")
    d, m, o, u = codec.decode(j)
    assert d.device.type == "cuda"
    assert torch.equal(codec.encode(d, m, o, u), j)
    pos = torch.zeros(codec.n_joint, device="cuda")
    exp = codec.target_exposure(d, m, pos)
    assert exp.device.type == "cuda"
    cpu = ActionCodec().target_exposure(d.cpu(), m.cpu(), pos.cpu())
    torch.testing.assert_close(exp.cpu(), cpu)
