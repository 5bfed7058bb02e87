"""The action branches, their sizes and the codec: four branches <-> one joint action index
(docs/design.md §5 and the codec invariants of §10).

Branches, most significant first (:data:`BRANCHES`), with their sizes from :class:`BranchConfig`:

* ``direction`` -- :class:`Direction` Short, Hold, Long, Flat (size 4, or 3 = without Flat);
* ``magnitude`` -- an index into ``magnitude_fractions`` (size 3 by default: 0.25, 0.5, 1.0);
* ``order_type`` -- :class:`OrderType` Market, LimitAtTouch, LimitInside (a prefix of the enum);
* ``urgency`` -- :class:`Urgency` Normal, Patient, Immediate (a prefix of the enum).

Joint index (mixed radix, sizes ``D, M, O, U``)::

    joint = ((direction * M + magnitude) * O + order) * U + urgency        # 0 <= joint < D*M*O*U

and :meth:`ActionCodec.decode` inverts it with ``%`` and floor division. The default config gives
4 x 3 x 3 x 3 = 108 joint actions. **Nothing outside this module may assume 108 or 4 x 3 x 3 x 3**:
every width (network heads, replay columns, epsilon-greedy ranges, reports) comes from
:attr:`ActionCodec.sizes` / :attr:`ActionCodec.n_joint`, and the tests run over several size sets.

Target exposure (:meth:`ActionCodec.target_exposure`), in units of the *effective* max position
(contracts = exposure x effective max position, docs/design.md §5 sizing)::

    Short: -fractions[magnitude]     Long: +fractions[magnitude]
    Hold:  the current position (keeps it, trades nothing, costs nothing)
    Flat:  0 (closes)

Every method is pure tensor arithmetic on the inputs' device: no host copy, no ``.item()``, no
check of the values (out-of-range branch values or joint indices give meaningless results rather
than a device sync; validate at the edges, e.g. with :meth:`ActionCodec.table`).
"""

from __future__ import annotations

import math
from enum import IntEnum

import torch
from pydantic import Field, model_validator
from torch import Tensor

from foxhunt.config.base import Frozen

BRANCHES: tuple[str, str, str, str] = ("direction", "magnitude", "order_type", "urgency")
"""Names of the action branches, most significant first: the columns of an action ``[N, 4]``, the
fields of :class:`BranchConfig` and the advantage streams of the network, in this order."""


class BranchConfig(Frozen):
    """How many values each action branch has (default 4 x 3 x 3 x 3 = 108 joint actions)."""

    direction: int = Field(
        4, ge=3, le=4, description="Short, Hold, Long, Flat (3: without Flat; test variant)."
    )
    magnitude: int = Field(3, ge=1, le=16, description="Fractions of the effective max position.")
    order_type: int = Field(3, ge=1, le=3, description="Market, LimitAtTouch, LimitInside (a prefix).")
    urgency: int = Field(3, ge=1, le=3, description="Normal, Patient, Immediate (a prefix).")
    magnitude_fractions: tuple[float, ...] = Field(
        (0.25, 0.5, 1.0), description="Target exposure per magnitude value, as a fraction of max position."
    )

    @model_validator(mode="after")
    def _fractions(self) -> BranchConfig:
        if len(self.magnitude_fractions) != self.magnitude:
            raise ValueError(
                f"magnitude_fractions needs {self.magnitude} values, got {len(self.magnitude_fractions)}"
            )
        if any(not 0.0 < f <= 1.0 for f in self.magnitude_fractions):
            raise ValueError("magnitude_fractions must lie in (0, 1]")
        return self


class Direction(IntEnum):
    """Direction branch. With ``BranchConfig.direction == 3`` the branch has no FLAT."""

    SHORT = 0
    HOLD = 1
    LONG = 2
    FLAT = 3


class OrderType(IntEnum):
    """Order-type branch; a config with ``order_type = k`` uses the first ``k`` values."""

    MARKET = 0
    LIMIT_AT_TOUCH = 1
    LIMIT_INSIDE = 2


class Urgency(IntEnum):
    """Urgency branch; a config with ``urgency = k`` uses the first ``k`` values."""

    NORMAL = 0
    PATIENT = 1
    IMMEDIATE = 2


# Plain ints for tensor comparisons: torch.compile (dynamo) mis-traces `tensor == IntEnum member`.
_SHORT, _HOLD, _LONG = int(Direction.SHORT), int(Direction.HOLD), int(Direction.LONG)


class ActionCodec:
    """Encode/decode joint actions for the branch sizes of one :class:`BranchConfig`.

    ``sizes`` is ``(direction, magnitude, order_type, urgency)``; ``n_joint`` their product.
    """

    def __init__(self, branches: BranchConfig | None = None) -> None:
        self.branches = branches if branches is not None else BranchConfig()
        b = self.branches
        self.sizes: tuple[int, int, int, int] = (b.direction, b.magnitude, b.order_type, b.urgency)
        self.n_joint: int = math.prod(self.sizes)
        self.branch_names: tuple[str, str, str, str] = BRANCHES
        self.magnitude_fractions: tuple[float, ...] = tuple(float(f) for f in b.magnitude_fractions)
        self._fractions: dict[tuple[torch.device, torch.dtype], Tensor] = {}

    def __repr__(self) -> str:
        return f"ActionCodec(sizes={self.sizes}, n_joint={self.n_joint})"

    # --- codec --------------------------------------------------------------------------------

    def encode(self, direction: Tensor, magnitude: Tensor, order: Tensor, urgency: Tensor) -> Tensor:
        """Branch values (int tensors of one broadcastable shape) -> joint index (int64, that shape)."""
        _, n_m, n_o, n_u = self.sizes
        d, m, o, u = (x.long() for x in (direction, magnitude, order, urgency))
        return ((d * n_m + m) * n_o + o) * n_u + u

    def decode(self, joint: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Joint index (int tensor, any shape) -> ``(direction, magnitude, order, urgency)`` (int64)."""
        _, n_m, n_o, n_u = self.sizes
        rest = joint.long()
        urgency = rest % n_u
        rest = rest // n_u
        order = rest % n_o
        rest = rest // n_o
        magnitude = rest % n_m
        direction = rest // n_m
        return direction, magnitude, order, urgency

    def table(self, device: torch.device | str | None = None) -> Tensor:
        """Every joint action decoded: ``[n_joint, 4]`` int64, row ``j`` = branches of action ``j``."""
        return torch.stack(self.decode(torch.arange(self.n_joint, device=device)), dim=-1)

    def value_labels(self) -> dict[str, tuple[str, ...]]:
        """Readable name of every value of every branch (keys :data:`BRANCHES`), for reports."""
        d, m, o, u = self.sizes
        return dict(
            zip(
                BRANCHES,
                (
                    tuple(Direction(i).name.title() for i in range(d)),
                    tuple(f"{f:g}x" for f in self.magnitude_fractions[:m]),
                    tuple(OrderType(i).name.title() for i in range(o)),
                    tuple(Urgency(i).name.title() for i in range(u)),
                ),
                strict=True,
            )
        )

    def label(self, joint: int) -> str:
        """Readable name of one joint action for logs and reports, e.g. ``LONG x0.5 MARKET NORMAL``."""
        if not 0 <= joint < self.n_joint:
            raise ValueError(f"ActionCodec.label: joint action {joint} outside [0, {self.n_joint})")
        d, m, o, u = (int(x) for x in self.decode(torch.tensor(joint)))
        return f"{Direction(d).name} x{self.magnitude_fractions[m]:g} {OrderType(o).name} {Urgency(u).name}"

    # --- exposure -----------------------------------------------------------------------------

    def fractions(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> Tensor:
        """``magnitude_fractions`` as a ``[M]`` tensor, built once per (device, dtype) and cached."""
        dev = torch.device(device) if device is not None else torch.device("cpu")
        dt = dtype if dtype is not None else torch.get_default_dtype()
        key = (dev, dt)
        cached = self._fractions.get(key)
        if cached is None:
            cached = torch.tensor(self.magnitude_fractions, dtype=dt, device=dev)
            self._fractions[key] = cached
        return cached

    def target_exposure(self, direction: Tensor, magnitude: Tensor, position_frac: Tensor) -> Tensor:
        """Target position in units of the effective max position (float, broadcast shape).

        ``position_frac`` is the current position in the same units (Hold returns it unchanged).
        Short/Long give ``-/+ fractions[magnitude]``, Flat gives 0.
        """
        dt = position_frac.dtype if position_frac.is_floating_point() else torch.get_default_dtype()
        pos = position_frac.to(dt)
        frac = self.fractions(direction.device, dt)[magnitude.long()]
        d = direction.long()
        sign = (d == _LONG).to(dt) - (d == _SHORT).to(dt)  # -1 / 0 / +1
        # Hold keeps the position; Short/Long set sign x fraction; Flat (sign 0) gives 0.
        return torch.where(d == _HOLD, pos, sign * frac)
