"""The one layout: widths from the families, 8-aligned groups, and no literal widths anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from foxhunt.data.schemas import RowUnit
from foxhunt.features import market, mtf, ofi, snapshot, tlob
from foxhunt.features.layout import (
    ALIGN,
    AUX_SLOTS,
    PLAN_SLOTS,
    PORTFOLIO_SLOTS,
    STATE_FEATURE_GROUPS,
    STATE_LAYOUT,
    build_layout,
    stack_layout,
)
from foxhunt.features.registry import FAMILIES

SRC = Path(__file__).resolve().parents[2] / "src" / "foxhunt"


def _padded(width: int) -> int:
    return -(-width // ALIGN) * ALIGN


def test_state_layout_matches_spec_widths_and_alignment() -> None:
    """Each group is as wide as its family's (or the environment's) slot names, padded to ALIGN."""
    widths = {g.name: g.width for g in STATE_LAYOUT.groups}
    env_groups = {"portfolio": PORTFOLIO_SLOTS, "plan": PLAN_SLOTS, "aux": AUX_SLOTS}
    assert widths == {
        **{name: len(FAMILIES[name].SLOTS) for name in STATE_FEATURE_GROUPS},
        **{name: len(slots) for name, slots in env_groups.items()},
    }
    for g in STATE_LAYOUT.groups:
        assert g.offset % ALIGN == 0 and g.padded % ALIGN == 0 and g.padded >= g.width
        assert g.padded == _padded(g.width)
    assert STATE_LAYOUT.width == sum(_padded(w) for w in widths.values())
    assert len(STATE_LAYOUT.columns) == STATE_LAYOUT.width
    assert "ret" in STATE_LAYOUT.group("market").slots[0]  # slot 0: the last row's return
    # ADX and CUSUM in the last two market slots (docs/design.md §2).
    m = STATE_LAYOUT.group("market")
    assert "adx" in m.slots[-2] and "cusum" in m.slots[-1]
    assert STATE_LAYOUT.index("portfolio.position") == STATE_LAYOUT.group("portfolio").offset


def test_layout_is_composed_from_the_families() -> None:
    assert STATE_LAYOUT.group("market").slots == market.SLOTS
    assert STATE_LAYOUT.group("ofi").slots == ofi.SLOTS
    assert STATE_LAYOUT.group("tlob").slots == tlob.SLOTS
    assert STATE_LAYOUT.group("mtf").slots == mtf.SLOTS
    assert STATE_LAYOUT.group("portfolio").slots == PORTFOLIO_SLOTS
    assert STATE_LAYOUT.group("plan").slots == PLAN_SLOTS and STATE_LAYOUT.group("aux").slots == AUX_SLOTS
    bar, snap = stack_layout(RowUnit.BAR), stack_layout(RowUnit.SNAPSHOT)
    assert bar.width == sum(len(FAMILIES[name].SLOTS) for name in STATE_FEATURE_GROUPS)  # unpadded
    assert snap.width == bar.width + len(snapshot.SLOTS)


def test_changing_a_group_width_is_one_edit() -> None:
    """Growing a family's SLOTS moves every later offset; nothing else needs to change."""
    grown = build_layout("state", [("a", ("x",) * 1), ("b", ("y", "z"))], ALIGN)
    assert [g.offset for g in grown.groups] == [0, 8] and grown.width == 16
    wider = build_layout("state", [("a", tuple(f"x{i}" for i in range(9))), ("b", ("y", "z"))], ALIGN)
    assert [g.offset for g in wider.groups] == [0, 16] and wider.width == 24
    assert grown.fingerprint() != wider.fingerprint()


def _layout_numbers() -> set[int]:
    nums = {STATE_LAYOUT.width}
    for layout in (STATE_LAYOUT, stack_layout(RowUnit.BAR), stack_layout(RowUnit.SNAPSHOT)):
        nums.add(layout.width)
        for g in layout.groups:
            nums.update({g.width, g.padded})
            if g.offset:
                nums.add(g.offset)
    return {n for n in nums if n >= 6}


SHAPE_CALLS = {"zeros", "empty", "ones", "full", "reshape", "Linear", "view", "narrow", "split"}


def test_no_module_writes_a_layout_width_as_a_literal() -> None:
    """A literal width or offset in a shape or a column index (``x[:, 42]``, ``np.zeros((n, 32))``)
    goes stale silently when a group grows: the shapes still line up, the columns no longer mean
    what the code reads (a 12-wide action block read as 13, one of six copies of a stride missed)."""
    suspicious = _layout_numbers()
    offenders = []
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            spots: list[ast.AST] = []
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple):
                spots.append(node.slice)  # multi-axis indexing: x[:, 42], state[..., 48:80]
            elif isinstance(node, ast.Call):
                name = getattr(node.func, "attr", getattr(node.func, "id", ""))
                if name in SHAPE_CALLS:
                    spots.extend(node.args)
            offenders.extend(
                f"{path.relative_to(SRC)}:{sub.lineno}: {sub.value}"
                for spot in spots
                for sub in ast.walk(spot)
                if isinstance(sub, ast.Constant) and type(sub.value) is int and sub.value in suspicious
            )
    assert not offenders, "literal layout widths:\n" + "\n".join(offenders)


def test_fingerprint_is_stable() -> None:
    assert STATE_LAYOUT.fingerprint() == STATE_LAYOUT.fingerprint()
    assert len(set(STATE_LAYOUT.columns)) == STATE_LAYOUT.width
    assert np.all(np.diff([g.offset for g in STATE_LAYOUT.groups]) > 0)
