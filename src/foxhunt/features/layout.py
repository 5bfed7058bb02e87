"""The one layout of the RL state and of the supervised feature stacks (docs/design.md §2).

Every width, offset and slot name comes from here; the families declare their slot names
(``SLOTS``) and this module composes them, so changing a group's width is one edit (the family's
``SLOTS`` and its ``compute``). Groups start at multiples of :data:`ALIGN` (the padding slots are
named ``<group>._pad<k>`` and always 0).

RL state groups, in order: market, ofi, tlob, mtf (from the feature families), portfolio, plan
(written by the environment, each slot's scale and clamp declared in :data:`STATE_SPEC`), aux
(predictions of the auxiliary heads, fed back with a one-step lag; written by the agent).

Supervised stacks (what the cache stores and the alpha check reads):

* bar rows: market, ofi, tlob, mtf;
* snapshot rows: market, ofi, tlob, mtf, snapshot (time since last trade, ... microprice drift);

then, in both, the configured plug-in families (:func:`foxhunt.features.plugins.stack_families`,
docs/feature-plugins.md).
The RL state keeps the built-in groups only: its width is fixed when the network is built.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import cached_property

from foxhunt.data.schemas import RowUnit
from foxhunt.features.registry import FAMILIES

ALIGN = 8


class Unit(Enum):
    """The config quantity a portfolio or plan slot is measured in (resolved by the environment from
    its config: :func:`foxhunt.env.observe.unit_values`)."""

    ONE = "one"
    CAPITAL = "capital"  # contract.initial_capital ($)
    MAX_POSITION = "max_position"  # contract.max_position (contracts)
    HORIZON = "horizon"  # plan.barrier.horizon (rows a plan may last)


@dataclass(frozen=True)
class Scale:
    """``raw * times / (per * unit)``: e.g. a PnL in % of capital is ``Scale(0.01, Unit.CAPITAL)``.
    A factor of 1 is skipped, so the division by a Python float is the one the state always took."""

    per: float = 1.0
    unit: Unit = Unit.ONE
    times: float = 1.0


@dataclass(frozen=True)
class SlotSpec:
    """One environment-written state slot: its name in the layout, its scale and its clamp."""

    name: str
    scale: Scale
    clamp: float  # the scaled value is clamped to [-clamp, clamp]


@dataclass(frozen=True)
class GroupSpec:
    """An environment-written state group: its slots in layout order. ``nan_to_zero``: a NaN slot
    (a plan distance on a row without a price) is written as 0, "no signal", before the clamp."""

    name: str
    slots: tuple[SlotSpec, ...]
    nan_to_zero: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.slots)


_PCT_CAPITAL = Scale(0.01, Unit.CAPITAL)

PORTFOLIO_SPEC = GroupSpec(
    "portfolio",
    (
        SlotSpec("position", Scale(unit=Unit.MAX_POSITION), 10.0),  # signed contracts / max position
        SlotSpec("unrealised_pnl", _PCT_CAPITAL, 10.0),  # the open trade's gross - costs, % of capital
        SlotSpec("hold_time", Scale(unit=Unit.HORIZON), 10.0),  # rows held / the plan horizon
        SlotSpec("max_pnl", _PCT_CAPITAL, 10.0),  # intra-trade maximum
        SlotSpec("min_pnl", _PCT_CAPITAL, 10.0),  # intra-trade minimum
        SlotSpec("drawdown", Scale(), 10.0),  # (peak - equity) / peak equity
        SlotSpec("cost_paid", Scale(0.001, Unit.CAPITAL), 10.0),  # cumulative costs, per mille of capital
        SlotSpec("time_since_trade", Scale(), 10.0),  # log(1 + rows since the last fill)
    ),
)
PLAN_SPEC = GroupSpec(
    "plan",
    (
        SlotSpec("active", Scale(), 20.0),  # 1 while a plan is active; the others are 0 without one
        SlotSpec("direction", Scale(), 20.0),  # +1 long, -1 short
        SlotSpec("target_bars", Scale(100.0), 20.0),  # the plan's horizon in hundreds of rows
        SlotSpec("remaining_fraction", Scale(), 20.0),  # clamp((target - held) / target, 0, 1)
        SlotSpec("distance_to_profit", Scale(), 20.0),  # in entry vols of the price, + toward the level
        SlotSpec("distance_to_stop", Scale(), 20.0),
        SlotSpec("entry_regime", Scale(times=1e3), 20.0),  # per-row vol at entry, in thousandths
    ),
    nan_to_zero=True,
)
PORTFOLIO_SLOTS = PORTFOLIO_SPEC.names
PLAN_SLOTS = PLAN_SPEC.names
AUX_SLOTS = (  # the agent's auxiliary heads' predictions, one step lagged (docs/design.md §6)
    "next_return",  # predicted next-row log return, in trailing per-row vols
    "p_up",  # 2 * p_up - 1 of the direction head
    "p_profit",
    "p_stop",
    "p_timeout",
)
# The env-written groups under the long/short mirror (see :class:`Mirror`): a mirrored position is
# the opposite one with the same PnL, so only the signed slots change; the aux heads' outcome
# probabilities are those of a long, whose profit barrier is the mirrored short's stop.
PORTFOLIO_MIRROR_ODD = frozenset({"position"})
PLAN_MIRROR_ODD = frozenset({"direction"})  # distances to the barriers are already plan-relative
AUX_MIRROR_ODD = frozenset({"next_return", "p_up"})
AUX_MIRROR_SWAPS = (("p_profit", "p_stop"),)


@dataclass(frozen=True)
class ColumnGroup:
    """One named block of consecutive columns: ``width`` real slots, then padding."""

    name: str
    slots: tuple[str, ...]
    offset: int
    padded: int  # width including the padding up to the next multiple of ALIGN (state only)

    @property
    def width(self) -> int:
        return len(self.slots)

    @property
    def slice(self) -> slice:
        """Columns of the real slots."""
        return slice(self.offset, self.offset + self.width)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f"{self.name}.{s}" for s in self.slots)


@dataclass(frozen=True)
class Layout:
    """Groups laid end to end; ``align`` pads each group to a multiple of it (1 = no padding)."""

    kind: str
    groups: tuple[ColumnGroup, ...]
    align: int

    @property
    def width(self) -> int:
        last = self.groups[-1]
        return last.offset + last.padded

    @cached_property
    def columns(self) -> tuple[str, ...]:
        """Every column's name, padding included (``group.slot`` / ``group._pad<k>``)."""
        out: list[str] = []
        for g in self.groups:
            out.extend(g.names)
            out.extend(f"{g.name}._pad{k}" for k in range(g.padded - g.width))
        return tuple(out)

    def group(self, name: str) -> ColumnGroup:
        for g in self.groups:
            if g.name == name:
                return g
        raise KeyError(f"no group {name!r} in the {self.kind} layout ({[g.name for g in self.groups]})")

    def index(self, column: str) -> int:
        """Column number of ``group.slot``."""
        return self.columns.index(column)

    def describe(self) -> list[dict[str, object]]:
        """JSON-ready names, offsets and widths (stored in cache metadata and checkpoints)."""
        return [
            {"name": g.name, "offset": g.offset, "width": g.width, "padded": g.padded, "slots": list(g.slots)}
            for g in self.groups
        ]

    def fingerprint(self) -> str:
        payload = json.dumps({"kind": self.kind, "align": self.align, "groups": self.describe()})
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Mirror:
    """The long/short mirror image of a layout's rows: ``M(s)[:, i] = sign[i] * s[:, source[i]]``.

    The mirror maps a market to the one whose prices move the other way (``p -> K / p``: every log
    return negated, bid and ask sides and buyer and seller swapped). A state slot is *even* (a
    volatility, a spread, a PnL: unchanged), *odd* (a return, an imbalance, a position: negated) or
    one of a swapped pair (bid share <-> ask share; ``dist_high <-> -dist_low``). Applying it twice
    is the identity. The Q network can be made equivariant under it (``agent.network.symmetry``), so
    a training window's drift cannot be learned as a preference for one side; the features'
    declarations are checked against a mirrored market by ``tests/features/test_mirror.py``.
    """

    source: tuple[int, ...]
    sign: tuple[float, ...]


def build_mirror(layout: Layout, odd: Iterable[str], swaps: Iterable[tuple[str, str]]) -> Mirror:
    """The :class:`Mirror` of ``layout`` from full column names (``group.slot``); others are even."""
    odd = set(odd)
    source = list(range(layout.width))
    for a, b in swaps:
        i, j = layout.index(a), layout.index(b)
        if source[i] != i or source[j] != j:
            raise ValueError(f"mirror swaps {a!r} <-> {b!r}, but one of them is already swapped")
        if (a in odd) != (b in odd):
            raise ValueError(f"mirror pair {a!r} <-> {b!r} must be both odd or both even (an involution)")
        source[i], source[j] = j, i
    unknown = odd - set(layout.columns)
    if unknown:
        raise ValueError(f"mirror names odd columns not in the {layout.kind} layout: {sorted(unknown)}")
    sign = tuple(-1.0 if c in odd else 1.0 for c in layout.columns)
    return Mirror(source=tuple(source), sign=sign)


def build_layout(kind: str, groups: Sequence[tuple[str, tuple[str, ...]]], align: int) -> Layout:
    out: list[ColumnGroup] = []
    offset = 0
    for name, slots in groups:
        if not slots:
            raise ValueError(f"group {name!r} has no slots")
        if len(set(slots)) != len(slots):
            raise ValueError(f"group {name!r} repeats a slot name")
        padded = -(-len(slots) // align) * align
        out.append(ColumnGroup(name=name, slots=tuple(slots), offset=offset, padded=padded))
        offset += padded
    return Layout(kind=kind, groups=tuple(out), align=align)


STATE_FEATURE_GROUPS = ("market", "ofi", "tlob", "mtf")

STATE_LAYOUT = build_layout(
    "state",
    [(name, FAMILIES[name].SLOTS) for name in STATE_FEATURE_GROUPS]
    + [("portfolio", PORTFOLIO_SLOTS), ("plan", PLAN_SLOTS), ("aux", AUX_SLOTS)],
    ALIGN,
)


@dataclass(frozen=True)
class StateSpec:
    """The RL state: its layout and the slots the environment writes, with their scales and clamps.

    The environment's ``observe`` walks :attr:`env_groups` once, writing each slot's scaled value at
    the layout's column for its name; construction fails unless every group's slots are the layout
    group's slots in the same order (a spec and a layout that disagree would write a slot under
    another slot's name).
    """

    layout: Layout
    env_groups: tuple[GroupSpec, ...]

    def __post_init__(self) -> None:
        for g in self.env_groups:
            if g.names != self.layout.group(g.name).slots:
                raise ValueError(
                    f"state spec group {g.name!r} has slots {g.names}, the {self.layout.kind} layout "
                    f"{self.layout.group(g.name).slots}: list the slots in the layout's order"
                )

    def group(self, name: str) -> GroupSpec:
        for g in self.env_groups:
            if g.name == name:
                return g
        raise KeyError(f"no environment-written group {name!r} ({[g.name for g in self.env_groups]})")


STATE_SPEC = StateSpec(STATE_LAYOUT, (PORTFOLIO_SPEC, PLAN_SPEC))
"""The RL state's layout with the portfolio and plan slots' scales and clamps (:class:`StateSpec`)."""


# Per state group: the slots the mirror negates and the pairs it swaps (feature families declare
# their own; the env-written groups are declared above).
_MIRROR_DECLARED: dict[str, tuple[frozenset[str], tuple[tuple[str, str], ...]]] = {
    **{g: (FAMILIES[g].MIRROR_ODD, FAMILIES[g].MIRROR_SWAPS) for g in STATE_FEATURE_GROUPS},
    "portfolio": (PORTFOLIO_MIRROR_ODD, ()),
    "plan": (PLAN_MIRROR_ODD, ()),
    "aux": (AUX_MIRROR_ODD, AUX_MIRROR_SWAPS),
}
STATE_MIRROR = build_mirror(
    STATE_LAYOUT,
    odd=[f"{g}.{s}" for g, (odd, _) in _MIRROR_DECLARED.items() for s in odd],
    swaps=[(f"{g}.{a}", f"{g}.{b}") for g, (_, pairs) in _MIRROR_DECLARED.items() for a, b in pairs],
)
"""The long/short mirror of the RL state (:class:`Mirror`)."""

STACK_FAMILIES: dict[RowUnit, tuple[str, ...]] = {
    RowUnit.BAR: ("market", "ofi", "tlob", "mtf"),
    RowUnit.SNAPSHOT: ("market", "ofi", "tlob", "mtf", "snapshot"),
}


def stack_layout(row_unit: RowUnit, families: Sequence[str] | None = None) -> Layout:
    """The built-in supervised feature stack of a row unit (no padding: the cache stores real
    columns); a configured stack with plug-ins is laid out by :func:`foxhunt.features.stack.compute_stack`."""
    names = tuple(families) if families is not None else STACK_FAMILIES[row_unit]
    return build_layout(f"stack-{row_unit.value}", [(n, FAMILIES[n].SLOTS) for n in names], 1)
