"""Prioritised replay on the device and n-step transitions (docs/design.md §6).

* :class:`SumTree` — a sum tree held in one flat tensor (node 1 is the root, node ``i`` has children
  ``2i`` and ``2i+1``, leaves are nodes ``C .. 2C-1``), with batched ``update`` (parents recomputed
  level by level: ``log2 C`` vectorised passes) and batched ``find`` (a vectorised descent).
* :class:`FlatPriorities` — the same leaves in one flat tensor, searched by
  ``searchsorted(cumsum(leaves))``: ``O(C)`` work per draw but a handful of kernels and a priority
  write that is one scatter, against ``log2 C`` dependent passes of the tree. Faster on a GPU at every
  capacity measured (bench/replay.py) and on the CPU up to :data:`FLAT_CPU_MAX_CAPACITY`;
  :class:`PriorityIndex` picks (AUTO).
* :class:`PrioritizedReplay` — ring-buffer storage of the transition record plus a priority index:
  proportional prioritisation (Schaul et al. 2016), ``P(i) = p_i^alpha / sum_j p_j^alpha`` with
  ``p_i = |delta_i| + eps``; stratified sampling (one uniform draw in each of ``B`` equal segments of
  the total); importance weights ``w_i = (N P(i))^-beta / max_j w_j`` (max over the batch); new items
  enter with the running maximum priority so each is likely to be replayed at least once.
* :class:`NStep` — turns per-step ``[N]`` env transitions into n-step transitions on the device:
  ``R_t = sum_{k<m} gamma^k r_{t+k}`` over the ``m <= n`` steps up to and including the first done,
  ``discount = gamma^m`` (0 if the episode ended inside the window), ``next_state`` the state after
  the ``m`` steps; with a ``stop`` predicate the window also ends at the first later state it holds
  for (the next decision state: a plan is one option). :func:`nstep_returns` is the plain maths over
  a whole ``[T, N]`` sequence.

Nothing here reads a device value back to the host in ``add``, ``sample``, ``update_priorities`` or
``push``: the buffer's cursor and size are Python ints that the host knows because it did the adding,
and the importance weights need no ``N`` (it cancels in ``w_i / max_j w_j``). So on CUDA ``sample``
and ``update_priorities`` are captured inside the learner's CUDA graph (``Agent.learn``), drawing from
a registered generator, and every replay of the graph draws afresh.
Rows flagged invalid (``valid`` False: steps after an episode had already ended) are stored with
priority 0, so they are never sampled, instead of being filtered out (which would need the count).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from foxhunt.env.market import AUX_TARGETS

if TYPE_CHECKING:
    from foxhunt.agent.config import ReplayConfig

FieldSpec = tuple[tuple[int, ...], torch.dtype]

VALID = "valid"  # optional [N] bool entry of an added batch; not stored, never sampled when False


def transition_fields(
    state_width: int, n_branches: int, aux_width: int = len(AUX_TARGETS)
) -> dict[str, FieldSpec]:
    """The transition record's per-item shapes and dtypes (:class:`foxhunt.agent.learner.Batch` reads it)."""
    return {
        "state": ((state_width,), torch.float32),
        "action": ((n_branches,), torch.int64),
        "reward": ((), torch.float32),
        "discount": ((), torch.float32),
        "next_state": ((state_width,), torch.float32),
        "aux": ((aux_width,), torch.float32),
    }


def next_power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


# --------------------------------------------------------------------------------------------------
# Sum tree


class SumTree:
    """Sum tree over ``capacity`` leaves (a power of 2) in one flat tensor of ``2 * capacity`` nodes.

    Node 0 is unused, node 1 is the root, node ``i`` has children ``2i`` and ``2i + 1``; leaf ``j`` is
    node ``capacity + j``. Viewing the tree as ``[capacity, 2]`` makes row ``i`` the pair of children
    of node ``i``, so one ``index_select`` reads both children. Internal nodes are always recomputed
    from their children (never updated by deltas), so they hold exact sums of the stored leaves
    with no drift. The default float64 keeps prefix sums over a million leaves well resolved.
    """

    def __init__(
        self, capacity: int, device: torch.device | str | None = None, dtype: torch.dtype = torch.float64
    ) -> None:
        if capacity < 1 or capacity & (capacity - 1):
            raise ValueError(f"SumTree capacity must be a power of 2, got {capacity}")
        self.capacity = capacity
        self.depth = capacity.bit_length() - 1  # levels above the leaves
        self.tree = torch.zeros(2 * capacity, dtype=dtype, device=device)
        self._pairs = self.tree.view(capacity, 2)  # row i = (node 2i, node 2i+1) = children of node i
        self._shifts = torch.arange(1, self.depth + 1, device=self.tree.device).unsqueeze(1)  # [depth, 1]

    @property
    def leaves(self) -> Tensor:
        """The ``capacity`` leaf priorities (a view)."""
        return self.tree[self.capacity :]

    def total(self) -> Tensor:
        """Sum of all leaves, a 0-dim tensor (a view of the root)."""
        return self.tree[1]

    def update(self, indices: Tensor, priorities: Tensor) -> None:
        """Set leaves ``indices`` [B] to ``priorities`` [B]; for a repeated index the last write wins.

        Duplicates are resolved before writing (:func:`_last_writes`). Then each of the
        ``depth`` levels above is recomputed from its children in one vectorised pass (repeated
        parents write identical values).
        """
        idx, p = _last_writes(indices, priorities, self.tree.dtype)
        nodes = idx + self.capacity
        self.tree.index_put_((nodes,), p)
        ancestors = nodes.unsqueeze(0) >> self._shifts  # [depth, B]: parents, grandparents, ... root
        for level in ancestors:
            self.tree.index_put_((level,), self._pairs.index_select(0, level).sum(1))

    def set_range(self, start: int, priorities: Tensor) -> None:
        """Set the contiguous leaves ``start .. start + n - 1`` (no wrap), then their ancestors.

        Each level's affected nodes are again contiguous, so this is ``depth`` slice sums.
        """
        n = priorities.shape[0] if priorities.ndim else 1
        if n == 0:
            return
        if start < 0 or start + n > self.capacity:
            raise ValueError(f"leaf range [{start}, {start + n}) is outside [0, {self.capacity})")
        lo, hi = start + self.capacity, start + self.capacity + n  # half-open node range
        self.tree[lo:hi] = priorities
        for _ in range(self.depth):
            lo, hi = lo >> 1, ((hi - 1) >> 1) + 1
            self.tree[lo:hi] = self._pairs[lo:hi].sum(1)

    def rebuild(self) -> None:
        """Recompute every internal node from the leaves."""
        self.set_range(0, self.leaves.clone())

    def clear(self) -> None:
        self.tree.zero_()

    def sample(self, fractions: Tensor) -> tuple[Tensor, Tensor]:
        """``(leaf indices, P(leaf))`` [B] for draws at ``fractions`` [B] of the total (in ``[0, 1)``)."""
        total = self.total()
        idx = self.find(fractions * total)
        return idx, self.leaves.index_select(0, idx) / total

    def find(self, prefix_sums: Tensor) -> Tensor:
        """Leaf indices [B] whose cumulative-sum interval holds each of ``prefix_sums`` [B].

        Leaf ``j`` is returned for ``x`` in ``[cumsum_{j-1}, cumsum_j)`` (NumPy's
        ``searchsorted(cumsum, x, side='right')``). The descent goes right when ``x >= left`` and the
        right subtree is non-empty, so a leaf of priority 0 is never returned while the total is
        positive, even when rounding leaves ``x`` at or just past the total.
        """
        x = prefix_sums.reshape(-1).to(self.tree.dtype)
        node = torch.ones_like(x, dtype=torch.int64)
        for _ in range(self.depth):
            left, right = self._pairs.index_select(0, node).unbind(1)
            go_right = (x >= left) & (right > 0)
            x = torch.where(go_right, x - left, x)
            node = torch.add(go_right, node, alpha=2)  # 2 node + go_right, one kernel
        return node - self.capacity


def _last_writes(indices: Tensor, priorities: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """``(indices, values)`` [B] for a scatter in which a repeated index takes its last occurrence's value.

    A stable sort groups equal indices in input order and every copy of an index gets the value of
    its last occurrence, so the scatter's result does not depend on the order in which the device
    applies colliding writes. A single priority is broadcast to every index.
    """
    idx = indices.reshape(-1).to(torch.int64)
    p = priorities.reshape(-1).to(dtype)
    if p.numel() == 1 and idx.numel() != 1:
        p = p.expand(idx.numel())
    sorted_idx, order = torch.sort(idx, stable=True)
    last = torch.searchsorted(sorted_idx, idx, right=True) - 1  # sorted position of the last copy
    return idx, p.index_select(0, order.index_select(0, last))


class FlatPriorities:
    """The ``capacity`` leaf priorities in one flat tensor, sampled through their cumulative sum.

    The interface of :class:`SumTree` (``leaves``, ``total``, ``update``, ``set_range``, ``sample``)
    without internal nodes: a write is one scatter and a draw is ``cumsum`` + ``searchsorted``, a
    fixed handful of kernels whatever the capacity, so it captures in a CUDA graph as a few nodes
    where the tree's descent and update are ``~10 log2 C`` small kernels (bench/replay.py). The draw
    reads every leaf (``O(C)``); the tree's ``O(log C)`` wins on a CPU at large capacities only.
    """

    def __init__(
        self, capacity: int, device: torch.device | str | None = None, dtype: torch.dtype = torch.float64
    ) -> None:
        if capacity < 1:
            raise ValueError(f"priority capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.leaves = torch.zeros(capacity, dtype=dtype, device=device)

    def total(self) -> Tensor:
        """Sum of all leaves, a 0-dim tensor."""
        return self.leaves.sum()

    def update(self, indices: Tensor, priorities: Tensor) -> None:
        """Set leaves ``indices`` [B] to ``priorities`` [B]; for a repeated index the last write wins."""
        idx, p = _last_writes(indices, priorities, self.leaves.dtype)
        self.leaves.index_put_((idx,), p)

    def set_range(self, start: int, priorities: Tensor) -> None:
        """Set the contiguous leaves ``start .. start + n - 1`` (no wrap)."""
        n = priorities.shape[0] if priorities.ndim else 1
        if start < 0 or start + n > self.capacity:
            raise ValueError(f"leaf range [{start}, {start + n}) is outside [0, {self.capacity})")
        self.leaves[start : start + n] = priorities

    def clear(self) -> None:
        self.leaves.zero_()

    def sample(self, fractions: Tensor) -> tuple[Tensor, Tensor]:
        """``(leaf indices, P(leaf))`` [B] for draws at ``fractions`` [B] of the total (in ``[0, 1)``).

        Leaf ``j`` is returned for ``x = fraction * total`` in ``[cumsum_{j-1}, cumsum_j)``, as
        :meth:`SumTree.find`. A leaf of priority 0 has an empty interval; ``x`` at or past the total
        (rounding) and, defensively, any draw landing on an empty leaf (a parallel scan is monotone
        only up to rounding) take the last non-empty leaf, the first whose cumsum reaches the total.
        """
        cum = torch.cumsum(self.leaves, 0)  # [C]
        total = cum[-1:]  # [1]
        idx = torch.searchsorted(cum, fractions.reshape(-1).to(cum.dtype) * total, right=True)
        last = torch.searchsorted(cum, total)  # [1] the last leaf of positive priority
        idx = torch.minimum(idx, last)
        idx = torch.where(self.leaves.index_select(0, idx) > 0, idx, last)
        return idx, self.leaves.index_select(0, idx) / total


FLAT_CPU_MAX_CAPACITY = 1 << 19
"""Largest capacity whose priorities :attr:`PriorityIndex.AUTO` keeps flat on a CPU. Sample plus
priority update of 256 items, one thread (bench/replay.py --device cpu --batch 256 --threads 1, on
the 2-core box): flat 0.71 ms against the tree's 1.88 ms at 16 k slots (the smoke profile), 1.26
against 4.06 ms at 262 k, 2.13 against 2.42 ms at 524 k; from 1 M the ``O(C)`` cumsum loses (2.08
against 1.80 ms at 1 M, 4.05 against 3.07 ms at 2 M)."""


class PriorityIndex(StrEnum):
    """How :class:`PrioritizedReplay` stores and searches its priorities."""

    AUTO = "auto"  # flat on CUDA; on a CPU flat up to FLAT_CPU_MAX_CAPACITY, a tree above
    TREE = "tree"  # SumTree: O(log C) draws and writes, ~10 log2 C small kernels
    FLAT = "flat"  # FlatPriorities: O(C) draws, a handful of kernels

    def build(
        self, capacity: int, device: torch.device, dtype: torch.dtype = torch.float64
    ) -> SumTree | FlatPriorities:
        flat = self is PriorityIndex.FLAT or (
            self is PriorityIndex.AUTO and (device.type == "cuda" or capacity <= FLAT_CPU_MAX_CAPACITY)
        )
        return FlatPriorities(capacity, device, dtype) if flat else SumTree(capacity, device, dtype)


# --------------------------------------------------------------------------------------------------
# Prioritised replay


class PrioritizedReplay:
    """Proportional prioritised replay of fixed-shape transitions, all on one device.

    ``fields`` maps a name to its per-item ``(shape, dtype)`` (:func:`transition_fields`). The
    capacity is rounded up to a power of 2. The priority index (``index``: :class:`PriorityIndex`)
    holds ``(|td| + eps)^alpha`` per slot (0 for empty or invalid slots); ``max_priority`` is the
    largest value written so far (1 at the start and after :meth:`clear`), given to new items.
    """

    def __init__(
        self,
        capacity: int,
        fields: Mapping[str, FieldSpec],
        *,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        device: torch.device | str | None = None,
        index: PriorityIndex = PriorityIndex.AUTO,
        priority_dtype: torch.dtype = torch.float64,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be positive, got {capacity}")
        if not fields:
            raise ValueError("replay needs at least one field")
        if VALID in fields:
            raise ValueError(f"'{VALID}' is reserved for the add() validity mask; rename that field")
        self.capacity = next_power_of_two(capacity)
        self.fields = {k: (tuple(shape), dtype) for k, (shape, dtype) in fields.items()}
        self.alpha, self.beta, self.eps = float(alpha), float(beta), float(eps)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.storage = {
            k: torch.zeros((self.capacity, *shape), dtype=dtype, device=self.device)
            for k, (shape, dtype) in self.fields.items()
        }
        self.priorities = index.build(self.capacity, self.device, priority_dtype)
        self.max_priority = torch.ones((), dtype=priority_dtype, device=self.device)
        self._cursor = 0  # next slot to write
        self._size = 0  # slots written since the last clear (<= capacity)

    @classmethod
    def from_config(
        cls, cfg: ReplayConfig, fields: Mapping[str, FieldSpec], device: torch.device | str | None = None
    ) -> PrioritizedReplay:
        return cls(cfg.capacity, fields, alpha=cfg.alpha, beta=cfg.beta, eps=cfg.eps, device=device)

    def __len__(self) -> int:
        """Slots holding a transition (invalid rows included: they occupy a slot but are never drawn)."""
        return self._size

    # --- writing ------------------------------------------------------------------------------------

    def _check(self, batch: Mapping[str, Tensor]) -> int:
        missing = set(self.fields) - set(batch)
        extra = set(batch) - set(self.fields) - {VALID}
        if missing or extra:
            raise KeyError(
                f"replay batch fields {sorted(batch)} do not match the buffer's {sorted(self.fields)}"
                f" (missing {sorted(missing)}, unexpected {sorted(extra)})"
            )
        n = batch[next(iter(self.fields))].shape[0]
        for k, (shape, _) in self.fields.items():
            got = tuple(batch[k].shape)
            if got != (n, *shape):
                raise ValueError(f"replay field '{k}' has shape {got}, expected {(n, *shape)}")
        if VALID in batch and tuple(batch[VALID].shape) != (n,):
            raise ValueError(f"replay '{VALID}' mask has shape {tuple(batch[VALID].shape)}, expected {(n,)}")
        return n

    def add(self, batch: Mapping[str, Tensor]) -> None:
        """Append ``N`` transitions (every field ``[N, *shape]``), overwriting the oldest when full.

        New items get the running maximum priority; rows whose optional ``batch['valid']`` is False
        get priority 0 (stored, never sampled). With ``N > capacity`` only the last ``capacity`` stay.
        """
        n = self._check(batch)
        if n == 0:
            return
        skip = max(n - self.capacity, 0)
        if skip:
            self._cursor = (self._cursor + skip) % self.capacity
            n -= skip
        prio = self.max_priority.expand(n)
        if VALID in batch:
            valid = batch[VALID][skip:].to(self.device)
            prio = torch.where(valid, prio, torch.zeros((), dtype=prio.dtype, device=self.device))
        start = self._cursor
        first = min(n, self.capacity - start)  # rows before the ring wraps
        for k, buf in self.storage.items():
            src = batch[k][skip:]
            buf[start : start + first].copy_(src[:first])
            if first < n:
                buf[: n - first].copy_(src[first:])
        self.priorities.set_range(start, prio[:first])
        if first < n:
            self.priorities.set_range(0, prio[first:])
        self._cursor = (start + n) % self.capacity
        self._size = min(self._size + n, self.capacity)

    # --- sampling -----------------------------------------------------------------------------------

    def sample(
        self, batch_size: int, generator: torch.Generator | None = None, beta: float | None = None
    ) -> tuple[dict[str, Tensor], Tensor, Tensor]:
        """``batch_size`` transitions drawn with probability ``P(i)``, stratified.

        Returns ``(batch, indices, is_weights)``: ``batch[k]`` is ``[B, *shape]``, ``indices`` [B]
        int64 slots (for :meth:`update_priorities`), ``is_weights`` [B] float32
        ``(N P(i))^-beta`` divided by the batch maximum, computed as ``P(i)^-beta / max_j P(j)^-beta``
        (``N`` cancels in the ratio, so the draw needs no buffer size and captures in a CUDA graph).
        Draw ``b`` is uniform in ``[b, b+1) * total / B``.
        """
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer: add transitions first")
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        beta = self.beta if beta is None else float(beta)
        dtype = self.priorities.leaves.dtype
        u = torch.rand(batch_size, generator=generator, device=self.device, dtype=dtype)
        strata = torch.arange(batch_size, device=self.device, dtype=dtype)
        idx, prob = self.priorities.sample((strata + u) / batch_size)  # prob = P(i)
        w = prob.pow(-beta)
        w = (w / w.max()).to(torch.float32)
        batch = {k: buf.index_select(0, idx) for k, buf in self.storage.items()}
        return batch, idx, w

    def update_priorities(self, indices: Tensor, td_abs: Tensor) -> None:
        """Set the priorities of slots ``indices`` [B] to ``(|td| + eps)^alpha``; last write wins.

        A non-finite ``td`` gets the running maximum priority instead of poisoning the tree.
        """
        p = (td_abs.detach().reshape(-1).to(self.max_priority.dtype).abs() + self.eps).pow(self.alpha)
        p = torch.where(torch.isfinite(p), p, self.max_priority)
        self.priorities.update(indices.to(self.device), p)
        torch.maximum(self.max_priority, p.max(), out=self.max_priority)

    # --- lifecycle ----------------------------------------------------------------------------------

    def clear(self) -> None:
        """Forget every transition (fold boundary); the running max priority returns to 1."""
        self.priorities.clear()
        self.max_priority.fill_(1.0)
        self._cursor = 0
        self._size = 0

    def state_dict(self) -> dict[str, Tensor]:
        """Flat ``{name: tensor}`` (safetensors-ready: contiguous copies of the filled slots only)."""
        n = self._size
        out = {f"storage.{k}": buf[:n].clone() for k, buf in self.storage.items()}
        out["leaves"] = self.priorities.leaves[:n].clone()
        out["max_priority"] = self.max_priority.clone()
        out["cursor"] = torch.tensor(self._cursor, dtype=torch.int64)
        out["size"] = torch.tensor(n, dtype=torch.int64)
        out["capacity"] = torch.tensor(self.capacity, dtype=torch.int64)
        return out

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        """Restore from :meth:`state_dict`, also into a buffer of another capacity.

        Into a buffer of the same capacity the slots, priorities and cursor come back exactly as they
        were, so a resumed run samples the same slots as an uninterrupted one. Into another capacity
        items are laid out oldest first from slot 0; a smaller buffer keeps the newest ``capacity``.
        """
        meta = {"leaves", "max_priority", "cursor", "size", "capacity"}
        want = {f"storage.{k}" for k in self.fields} | meta
        if set(state) != want:
            raise KeyError(
                f"replay state has keys {sorted(state)}, expected {sorted(want)} "
                "(was it saved by a buffer with other fields?)"
            )
        size, cursor, old_cap = int(state["size"]), int(state["cursor"]), int(state["capacity"])
        for k, (shape, _) in self.fields.items():
            got = tuple(state[f"storage.{k}"].shape)
            if got != (size, *shape):
                raise ValueError(f"replay state field '{k}' has shape {got}, expected {(size, *shape)}")
        if old_cap == self.capacity:  # the exact layout (resume)
            self.clear()
            for k, buf in self.storage.items():
                buf[:size].copy_(state[f"storage.{k}"].to(self.device))
            self.priorities.set_range(0, state["leaves"].to(self.device, self.max_priority.dtype))
            self.max_priority.copy_(state["max_priority"])
            self._size, self._cursor = size, cursor
            return
        # oldest first: a wrapped ring (size == old capacity) starts at the cursor
        shift = -cursor if size == old_cap else 0
        keep = min(size, self.capacity)

        def newest(t: Tensor) -> Tensor:
            t = t.to(self.device)
            return torch.roll(t, shift, 0)[size - keep :] if shift else t[size - keep :]

        self.clear()
        for k, buf in self.storage.items():
            buf[:keep].copy_(newest(state[f"storage.{k}"]))
        self.priorities.set_range(0, newest(state["leaves"]).to(self.max_priority.dtype))
        self.max_priority.copy_(state["max_priority"])
        self._size = keep
        self._cursor = keep % self.capacity


# --------------------------------------------------------------------------------------------------
# n-step returns


def nstep_returns(rewards_TN: Tensor, dones_TN: Tensor, gamma: float, n: int) -> tuple[Tensor, Tensor]:
    """n-step discounted returns and bootstrap discounts of a ``[T, N]`` sequence.

    For step ``t`` let ``m = min(n, T - t)`` (the window is truncated at the sequence end). Then
    ``R_t = sum_{k<m} gamma^k r_{t+k}`` counting only steps up to and including the first done at or
    after ``t``, and ``discount_t = gamma^m`` if no done falls in ``t .. t+m-1``, else 0.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    T = rewards_TN.shape[0]
    dones = dones_TN.to(torch.bool)
    returns = torch.zeros_like(rewards_TN)
    alive = torch.ones_like(dones)  # no done yet in t .. t+k-1
    for k in range(min(n, T)):
        r_k = torch.zeros_like(rewards_TN)
        r_k[: T - k] = rewards_TN[k:]  # r_{t+k}, 0 past the end
        d_k = torch.zeros_like(dones)
        d_k[: T - k] = dones[k:]
        returns = returns + gamma**k * torch.where(alive, r_k, torch.zeros_like(r_k))
        alive = alive & ~d_k
    t = torch.arange(T, device=rewards_TN.device)
    steps = (T - t).clamp(max=n).unsqueeze(1)  # [T, 1] m
    discounts = torch.pow(gamma, steps.to(rewards_TN.dtype)) * alive  # [T, N]
    return returns, discounts


class NStep:
    """Accumulates up to ``n`` env steps of ``N`` parallel episodes and emits n-step transitions.

    :meth:`push` takes one step's ``state [N, W]``, ``action [N, A]``, ``reward [N]``, ``done [N]``
    (the episode ended with this step), ``next_state [N, W]``, ``aux [N, X]`` and optionally
    ``valid [N]`` (False: the env did not really step this row). Once ``n`` steps are held it returns
    the transition whose window starts at the oldest of them (state, action, aux and validity of that
    step; the windowed reward and discount; the state the window bootstraps from); before that it
    returns None. :meth:`flush` returns the ``< n`` pending windows, truncated and bootstrapped with
    ``gamma^m`` (an epoch's episodes are cut, not ended), and empties the accumulator. A window that
    holds a done has discount 0, and its ``next_state`` (from a later episode) is never used. Every
    output also has ``valid`` [N] bool, which :meth:`PrioritizedReplay.add` turns into priority 0.

    ``stop`` (optional, a predicate on states ``[N, W] -> [N]`` bool) ends a window early at the first
    later state it holds for: the window of step ``t`` covers steps ``t .. t+m-1`` where ``s_{t+m}`` is
    the first stop state (``m <= n``), and bootstraps from ``s_{t+m}`` with ``gamma^m``. With
    ``stop = not plan-locked`` a position's whole plan is one window, an option in the semi-MDP sense
    (Sutton, Precup & Singh 1999): the entry decision's target is the plan's discounted PnL plus the
    discounted value of the next decision state, not a chain of bootstraps through locked states
    (:class:`~foxhunt.agent.config.Bootstrap`).
    """

    def __init__(
        self,
        n_envs: int,
        n: int,
        gamma: float,
        device: torch.device | str | None = None,
        stop: Callable[[Tensor], Tensor] | None = None,
    ) -> None:
        if n < 1:
            raise ValueError(f"n-step n must be >= 1, got {n}")
        self.n_envs, self.n, self.gamma = n_envs, n, float(gamma)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.stop = stop
        self._ring: dict[str, Tensor] | None = None  # [n, N, ...] per input
        self._next: Tensor | None = None  # latest next_state [N, W]
        self._next_stop: Tensor | None = None  # stop(latest next_state) [N]
        self._head = 0  # ring slot of the oldest held step
        self._count = 0  # steps held

    def reset(self) -> None:
        self._head = 0
        self._count = 0

    def _allocate(self, step: Mapping[str, Tensor]) -> None:
        self._ring = {
            k: torch.empty((self.n, *v.shape), dtype=v.dtype, device=self.device) for k, v in step.items()
        }
        nxt = step["state"]
        self._next = torch.empty(nxt.shape, dtype=nxt.dtype, device=self.device)
        self._next_stop = torch.zeros(self.n_envs, dtype=torch.bool, device=self.device)

    def _stops(self, states: Tensor) -> Tensor:
        if self.stop is None:
            return torch.zeros(states.shape[0], dtype=torch.bool, device=states.device)
        return self.stop(states).to(torch.bool)

    def push(
        self,
        state: Tensor,
        action: Tensor,
        reward: Tensor,
        done: Tensor,
        next_state: Tensor,
        aux: Tensor,
        valid: Tensor | None = None,
    ) -> dict[str, Tensor] | None:
        """Add one env step; the n-step transition of the oldest held step once ``n`` are held."""
        if state.shape[0] != self.n_envs:
            raise ValueError(f"NStep was built for {self.n_envs} envs, got a step of {state.shape[0]}")
        if valid is None:
            valid = torch.ones(self.n_envs, dtype=torch.bool, device=self.device)
        step = {
            "state": state,
            "stop": self._stops(state),  # does a window that reaches this state end at it?
            "action": action,
            "reward": reward,
            "done": done.to(torch.bool),
            "aux": aux,
            VALID: valid.to(torch.bool),
        }
        if self._ring is None:
            self._allocate(step)
        assert self._ring is not None and self._next is not None and self._next_stop is not None
        slot = (self._head + self._count) % self.n
        for k, v in step.items():
            self._ring[k][slot].copy_(v)
        self._next.copy_(next_state)
        self._next_stop.copy_(self._stops(next_state))
        self._count += 1
        if self._count < self.n:
            return None
        out = self._window(0, self.n)
        self._head = (self._head + 1) % self.n
        self._count -= 1
        return out

    def flush(self) -> dict[str, Tensor] | None:
        """The pending (``< n``-step) transitions, oldest window first, ``[pending * N]`` rows; then reset."""
        if self._count == 0:
            return None
        parts = [self._window(j, self._count - j) for j in range(self._count)]
        self.reset()
        return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}

    def _window(self, offset: int, length: int) -> dict[str, Tensor]:
        """The transition starting ``offset`` steps after the oldest held step, over at most ``length`` steps.

        Vectorised over the window (a fixed handful of kernels whatever ``n``): with ``L = length``
        and ``k = 0 .. L-1`` the window's steps, ``end_k`` says the window ends after step ``k`` (the
        episode ended with it, or ``s_{t+k+1}`` is a stop state); step ``k`` counts while no earlier
        step ended the window; ``m`` is one past the first ending step (``L`` if none); the discount
        is ``gamma^m``, or 0 when the first ending step was a done.
        """
        assert self._ring is not None and self._next is not None and self._next_stop is not None
        ring, g = self._ring, self.gamma
        order = (self._head + offset + torch.arange(length, device=self.device)) % self.n  # [L] slots
        reward = ring["reward"][order]  # [L, N]
        done = ring["done"][order]
        # stop flag of the state after each step: the next slot's state, the latest next_state last
        after = torch.cat([ring["stop"][order[1:]], self._next_stop.unsqueeze(0)])  # [L, N]
        end = done | after
        ended_before = torch.cumsum(end.to(torch.int32), 0) - end.to(torch.int32)  # [L, N] ends before k
        counts = ended_before == 0
        k = torch.arange(length, device=self.device, dtype=reward.dtype)
        powers = torch.pow(g, k).unsqueeze(1)  # [L, 1] gamma^k
        ret = (powers * torch.where(counts, reward, torch.zeros_like(reward))).sum(0)
        any_end = end.any(0)
        first = torch.argmax(end.to(torch.int32), 0)  # first ending step (0 if none: masked below)
        m = torch.where(any_end, first + 1, torch.full_like(first, length))  # [N] steps in the window
        envs = torch.arange(self.n_envs, device=self.device)
        terminal = any_end & done[first, envs]
        discount = torch.where(terminal, 0.0, torch.pow(g, m.to(ret.dtype)))  # gamma^m, 0 at a done
        # the bootstrap state s_{t+m}: held in the ring for m < L, the latest next_state for m = L
        slot = order[m.clamp(max=length - 1)]
        inside = ring["state"][slot, envs]  # [N, W]
        next_state = torch.where((m < length).unsqueeze(1), inside, self._next)
        origin = order[0]
        return {
            "state": ring["state"][origin].clone(),
            "action": ring["action"][origin].clone(),
            "reward": ret,
            "discount": discount.to(ret.dtype),
            "next_state": next_state,
            "aux": ring["aux"][origin].clone(),
            VALID: ring[VALID][origin].clone(),
        }


def nstep_windows(
    reward_TN: Tensor, done_TN: Tensor, stop_TN: Tensor, gamma: float, n: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Every n-step window of a whole ``[T, N]`` sequence at once: ``(return, discount, m)`` ``[T, N]``.

    The windows :class:`NStep` gives for the same steps pushed one by one and then flushed (the
    sequence's tail truncated and bootstrapped), computed in one vectorised pass: the window of step
    ``t`` covers ``t .. t+m-1`` with ``m <= min(n, T - t)``; it ends early after the first step ``k``
    where the episode ended (``done_TN``) or the state after it is a stop state (``stop_TN[t+k]``
    holds for ``s_{t+k+1}``). ``return = sum_{k<m} gamma^k r_{t+k}``; ``discount = gamma^m``, 0 when
    the window ended on a done; the window bootstraps from ``s_{t+m}``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    T, N = reward_TN.shape
    L = min(n, T)

    def windows_TNL(x: Tensor, fill: float | bool) -> Tensor:  # [T, N, L]: x[t + k] at [t, :, k]
        return torch.cat([x, x.new_full((L - 1, N), fill)]).unfold(0, L, 1)

    reward = windows_TNL(reward_TN, 0.0)
    done = windows_TNL(done_TN.to(torch.bool), False)
    end = done | windows_TNL(stop_TN.to(torch.bool), False)  # padding past T never ends a window
    ended_before = torch.cumsum(end.to(torch.int32), -1) - end.to(torch.int32)
    counts = ended_before == 0  # no earlier step ended the window (padded rewards are 0)
    k = torch.arange(L, device=reward_TN.device, dtype=reward_TN.dtype)
    ret = (torch.pow(gamma, k) * torch.where(counts, reward, torch.zeros_like(reward))).sum(-1)
    any_end = end.any(-1)
    first = torch.argmax(end.to(torch.int32), -1, keepdim=True)  # first ending step (0 if none)
    t = torch.arange(T, device=reward_TN.device)
    length = (T - t).clamp(max=n).unsqueeze(1).expand(T, N)  # steps before the sequence ends
    m = torch.where(any_end, first.squeeze(-1) + 1, length)
    terminal = any_end & done.gather(-1, first).squeeze(-1)
    discount = torch.where(terminal, 0.0, torch.pow(gamma, m.to(ret.dtype)))
    return ret, discount.to(ret.dtype), m
