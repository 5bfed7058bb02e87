"""The row close: one environment step and one decision per closed row (docs/serve.md, "What happens
at a row close").

At the close of row ``r`` (:mod:`foxhunt.serve.state`: the market now holds rows ``0 .. r``):

1. **Step** the decision taken on row ``r - 1`` through the environment (foxhunt.env.core, the
   backtest's step, costs and fill model): its market order fills at row ``r - 1``'s touch, a
   resting order and the plan's exits are checked against row ``r``. That is the paper execution.
2. **Decide** on row ``r``: the greedy policy of the checkpoint on the environment's state
   (normalised features, portfolio and plan slots, the aux predictions of the last decision).
3. **Commit** both in one ledger transaction (:mod:`foxhunt.serve.publish`).

Episodes follow the backtest's windows (foxhunt.backtest.evaluate.windows): the first starts at
row ``serve.warmup_rows``, each runs ``env.episode_rows`` rows, closes its position on its last
row and the next starts flat on that row. So a replay decides row for row as ``foxhunt backtest
--checkpoint`` does on the same file when the warm-up is the fold's validation start.

While the stream is faulted (:mod:`foxhunt.serve.monitor`) the decision is the fail-safe one
(``serve.on_fault``): flatten (a market order to flat that overrides the plan lock: the lock binds
the policy, not the risk control) or hold; an operator's POST /flatten (``flatten_now``) likewise.

:class:`RowCloser` holds everything a close changes (:data:`CLOSED`, the resume snapshot), so a
close made ahead (:mod:`foxhunt.serve.ahead`) runs on a shallow copy of it whose row state and env
are forks, and keeping it copies those fields back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from foxhunt.agent.actor import PolicyOut
from foxhunt.backtest.decisions import DecisionRow, step_rows
from foxhunt.domain.actions import Direction, OrderType, Urgency
from foxhunt.env.core import TradingEnv
from foxhunt.env.state import Portfolio
from foxhunt.policy.checkpoint import CheckpointError
from foxhunt.serve.bars import NoBarsYet
from foxhunt.serve.config import FaultAction
from foxhunt.serve.decide import Decider
from foxhunt.serve.monitor import Fault, FaultEvent
from foxhunt.serve.publish import Made, Publisher
from foxhunt.serve.state import RecordRows, RowState

if TYPE_CHECKING:
    from foxhunt.config.models import FoxhuntConfig

# What a close changes of the closer (kept from the fork that made it ahead: foxhunt.serve.ahead).
CLOSED = ("state", "env", "pending", "pending_forced", "episode_end", "rows_done", "last_forced")


class RowCloser:
    """The rows of one close stepped, decided and published in order; the decision state carried from
    one close to the next (the env, the pending decision, the episode, the rows done, the fault span)."""

    def __init__(
        self,
        state: RowState,
        decider: Decider,
        publisher: Publisher,
        cfg: FoxhuntConfig,
        device: torch.device,
    ) -> None:
        self.state, self.decider, self.publisher = state, decider, publisher
        self.cfg, self.scfg, self.device = cfg, cfg.serve, device
        self.env: TradingEnv | None = None
        self.pending: Any = None  # the decision taken on the last closed row (a PolicyOut or actions)
        self.pending_forced = ""
        self.episode_end = -1
        self.rows_done = 0  # rows closed and handled
        self.faulted_until = -1  # rows <= this decide the fail-safe way
        self.flatten_now = False  # POST /flatten (the HTTP endpoint)
        self.last_forced = ""
        self.restored: dict[str, Any] | None = None
        # On a fork that makes a close ahead: the rows it made, whose commits wait for it to be kept.
        self.deferred: list[Made] | None = None

    # --- resume -----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The ledger's resume state of the rows closed so far."""
        env = self.env
        return {
            "portfolio": None if env is None else env.state,
            "aux": None if env is None else env.aux,
            "pending": self.pending,
            "pending_forced": self.pending_forced,
            "episode_end": self.episode_end,
            "rows_done": self.rows_done,
            "faulted_until": self.faulted_until,
        }

    def restore(self, snap: dict[str, Any]) -> None:
        """Carry on from the ledger's last resume state (the env is made from it at the next row)."""
        self.restored = {k: _on(v, self.device) for k, v in snap.items()}  # the ledger's are host tensors
        self.pending, self.pending_forced = self.restored["pending"], snap["pending_forced"]
        self.episode_end, self.rows_done = snap["episode_end"], snap["rows_done"]
        self.faulted_until = snap["faulted_until"]

    def fault(self, event: FaultEvent) -> None:
        """A fault logged; the rows of the next ``serve.recover_rows`` decide the fail-safe way."""
        self.publisher.fault(event)
        if event.kind not in (Fault.CORRUPT, Fault.OUT_OF_ORDER):  # dropped: the book is as it was
            self.faulted_until = max(self.faulted_until, self.rows_done + self.scfg.recover_rows)

    # --- a row close --------------------------------------------------------------------------

    def close(
        self,
        closed_by: list[tuple[int, int, float]],
        consumed: int,
        t0: float,
        release: Callable[[int | None], None],
    ) -> RecordRows | None:
        """The rows the state has made since the last close, each stepped, decided and published (in
        one ledger transaction; on a fork made ahead, held back in ``deferred``). ``closed_by``: the
        bars closed in catch-up (foxhunt.serve.intake), ``consumed`` and ``t0``: the resume point
        and time of the record that closes the rest; ``release``: logs the held faults of the records
        before a row's. A pipeline error is one ``error`` fault and no rows."""
        try:
            rows = self.state.rows()
        except CheckpointError:
            raise  # the checkpoint does not fit the features: nothing can be served
        except NoBarsYet:  # the session has no bar yet (a snapshot, a pre-open): no row, no fault
            if self.deferred is not None:
                raise
            release(None)
            return None
        except Exception as exc:  # noqa: BLE001 (a stream the batch path refuses must not stop the service)
            if self.deferred is not None:
                raise  # a close made ahead: the close made when due reports it
            release(None)
            self.fault(FaultEvent(Fault.ERROR, f"{type(exc).__name__}: {exc}"))
            return None
        # The close's rows in one transaction (made ahead: committed when kept, in the keeper's).
        with self.publisher.ledger.rows() if self.deferred is None else contextlib.nullcontext():
            for r in range(self.rows_done, rows.count):
                # A row of a bar closed in catch-up: the resume point and time of the record that closed
                # it (its bar ends at or before that record's bucket: rows are stamped with their bar's
                # close).
                ts = int(rows.ts[r])
                _, records, t_in = next((c for c in closed_by if ts <= c[0]), (0, consumed, t0))
                release(records)  # the crossed books that came before the record that closed this row
                self._row(r, rows, t_in, records)
        return rows

    def _row(self, r: int, rows: RecordRows, t0: float, records: int) -> None:
        line, pnl, fills = None, None, []
        decided = r >= self.scfg.warmup_rows
        if self.env is None and (decided or self.pending is not None):
            self.env = TradingEnv(rows.market, self.cfg.env)
            restored = self.restored
            if restored is not None and restored["portfolio"] is not None:
                self.env.state, self.env.aux = restored["portfolio"], restored["aux"]
        if self.env is not None and self.env.market is not rows.market:
            # The env's per-row tables (its market setter) once a close: a close's rows share a market.
            self.env.market = rows.market
        self.last_forced = ""
        if self.pending is not None:
            line, pnl, fills = self._step(rows)
        if decided:
            assert self.env is not None
            if self.episode_end < 0 or r >= self.episode_end:
                self._new_episode(r)
            self.pending, self.pending_forced = self._decide(r)
        self.rows_done = r + 1
        made = Made(
            decided,
            {
                "line": line,
                "pnl": pnl,
                "fills": fills,
                "forced": self.last_forced,
                "row": r,
                "ts": int(rows.ts[r]),
                "features": rows.features[r],
                "records": records,
                "state": self.snapshot(),
            },
        )
        if self.deferred is not None:  # made ahead: published if the fork is kept
            self.deferred.append(made)
            return
        self.publisher.publish(made, (time.perf_counter() - t0) * 1e6)

    def _new_episode(self, r: int) -> None:
        assert self.env is not None
        on = self.device
        self.env.reset(torch.tensor([r], device=on))
        # reset() clamps the end to the rows that exist; a stream's rows are still to come.
        self.episode_end = r + self.cfg.env.episode_rows - 1
        s = self.env._state()
        end, done = torch.tensor([self.episode_end], device=on), torch.tensor([False], device=on)
        self.env.state = dataclasses.replace(s, end=end, done=done)

    def _decide(self, r: int) -> tuple[Any, str]:
        assert self.env is not None
        if self.flatten_now or r <= self.faulted_until:
            # POST /flatten is the operator's order: it flattens whatever a fault would do (serve.on_fault).
            action = FaultAction.FLATTEN if self.flatten_now else self.scfg.on_fault
            self.flatten_now = False
            return self._failsafe(action), action.value
        return self.decider.decide(self.env), ""

    def _failsafe(self, action: FaultAction) -> torch.Tensor:
        b = self.cfg.env.branches
        flat = int(Direction.FLAT) if b.direction > int(Direction.FLAT) else int(Direction.HOLD)
        direction = flat if action is FaultAction.FLATTEN else int(Direction.HOLD)
        return torch.tensor([[direction, 0, int(OrderType.MARKET), int(Urgency.NORMAL)]], device=self.device)

    def _step(self, rows: RecordRows) -> tuple[DecisionRow, tuple[float, float, float, float], list]:
        env = self.env
        assert env is not None
        before = env._state()
        stepped = before.row.clone()
        self.last_forced = self.pending_forced
        if isinstance(self.pending, torch.Tensor):
            if self.pending_forced == FaultAction.FLATTEN.value:
                # The fail-safe overrides the plan lock (it binds the policy, not the risk control) and
                # cancels a resting order, which could otherwise fill after the position is closed.
                plan = dataclasses.replace(before.plan, active=torch.zeros_like(before.plan.active))
                order = dataclasses.replace(before.order, side=torch.zeros_like(before.order.side))
                env.state = dataclasses.replace(before, plan=plan, order=order)
        res = self.decider.step(env, self.pending)
        after = env._state()
        line = step_rows(stepped, res, after.account.position, lambda i: int(rows.ts[i]))[0]
        # The ledger's numbers read from the tensors in one host copy (float64: exact as float()): the
        # money of the one episode, then its fill stages' contracts, prices and costs.
        money = [res.gross, res.costs, res.net, after.account.equity]
        values = torch.cat([*money, res.fills[0], res.fill_price[0], res.fill_costs[0]]).double().tolist()
        gross, costs, net, equity = values[:4]
        n = res.fills.shape[1]
        stages = (values[4 : 4 + n], values[4 + n : 4 + 2 * n], values[4 + 2 * n :])
        fills = [(k, c, p, f) for k, (c, p, f) in enumerate(zip(*stages, strict=True)) if c != 0]
        self.pending = None
        pnl = (gross, costs, net, equity)
        return line, pnl, fills


def _on(x: Any, device: torch.device) -> Any:
    """A snapshot's value (a tensor, a portfolio, a policy's decision, a number) on ``device``."""
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, Portfolio):
        return x.map(lambda t: t.to(device))
    if isinstance(x, PolicyOut):
        return PolicyOut(*(getattr(x, f.name).to(device) for f in dataclasses.fields(x)))
    return x
