"""Backtest metrics over per-step records of a batch of episodes (docs/design.md §8), in PyTorch.

Everything runs on the device the records live on (CPU or CUDA); :func:`per_episode_metrics`
never leaves it, :func:`compute_metrics` reads its results back in one host transfer at the end.

Notation
--------
``E`` episodes x ``T`` steps; ``w[e, t]`` = step ``t`` of episode ``e`` was written. A step that
was not written (the episode had already ended, e.g. at the capital floor) is skipped by every
reducer below, whatever its values are (a zero-filled buffer would decode as action 0, "Short",
and show a Short preference that is only a measurement artefact). Sums ``sum_w`` run over written
steps only; ``n`` is their count (per episode, or pooled over all episodes for the aggregate).
"Previous" means the last *written* step before ``t`` of the same episode; an episode starts flat
with equity ``C0`` (``initial_capital``).

Per step (written steps only)::

    net_t        = gross_t - costs_t                                  ($)
    eq_before_t  = equity at the previous step, C0 at the first step  ($)
    r_t          = net_t / eq_before_t                                (per-bar return)
    dpos_t       = |position_t - position_before_t|, position_before = 0 at the first step
    peak_t       = max(C0, max_{s <= t} equity_s)
    dd_t         = (peak_t - equity_t) / peak_t                       (fractional drawdown, >= 0)

Metrics (``mean = sum_w(.) / n``; ``B`` = ``bars_per_year``)::

    net_pnl, gross_pnl, costs = sum_w net_t, sum_w gross_t, sum_w costs_t
    trades            = #{(t, k) written: trade_closed_t,k}   (k: the step's trade slots; the env
                        closes at most one trade per fill and has three fills a step)
    win_rate          = #{closed: trade_pnl > 0} / trades            (a 0 PnL trade is no win)
    win_rate_by_magnitude[m] = the same over closed trades with closed_magnitude == m: a closing
                        trade is binned by the magnitude it closed, not by the action of the step
    avg_trade_pnl     = sum_{closed} trade_pnl / trades
    mean_return_per_bar = mu = mean(r)
    sharpe_per_bar    = sharpe_ratio(mu, sigma, n),  sigma = sqrt(mean((r - mu)^2))  (population std)
    sharpe_annual     = sharpe_per_bar * sqrt(B)
    sortino_annual    = sharpe_ratio(mu, delta, n) * sqrt(B),  delta = sqrt(mean(min(r, 0)^2))
                        (the downside deviation below a target of 0)
    annual_return     = mu * B                                        (arithmetic, not compounded)
    max_drawdown      = max_e max_t dd_t                              (positive fraction)
    calmar            = annual_return / max_drawdown
    active_frac       = #{position_t != 0} / n
    direction_entropy = -sum_k p_k ln p_k  (nats), p_k = share of steps whose picked direction is k
    picked[branch][k] = share of written steps whose picked value of the branch is k (every written
                        step counts in every branch, Hold and Flat included); realised likewise
    contracts_traded  = sum_w fills_t;  turnover = contracts_traded / n (contracts per step)
                        fills_t = the contracts of every fill of the step where recorded
                        (``contracts``: a round trip inside one step trades 2 x its size with
                        dpos_t = 0), else dpos_t
    exposure          = mean(|position_t|) (contracts)

Undefined win rates are the sentinel :data:`UNDEFINED` (-1; "n/a" in reports, never 0, which would
read as "always lost"): no closed trade (win_rate), no closed trade of a magnitude
(win_rate_by_magnitude). Other degenerate cases give 0, never NaN: no written steps, no trades
(average trade), fewer than two returns or zero variance
(:func:`~foxhunt.domain.sharpe.sharpe_ratio`, the one Sharpe rule; likewise ``delta`` for
Sortino, so a series without a losing bar has Sortino 0), zero drawdown (Calmar).
The aggregate pools every written step of every episode (its Sharpe is not the mean of the
episodes' Sharpes).

:func:`implausibility` lists the reasons a result is too good to be true (the oracle that peeks
at the future must be flagged); :func:`sharpe_ceiling_from_auc` derives a Sharpe
ceiling from the alpha check's AUC.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import torch

from foxhunt.domain.actions import BranchConfig
from foxhunt.domain.sharpe import sharpe_ratio
from foxhunt.env.trades import LIMIT_EVENTS

_F64 = torch.float64
MAX_PLAUSIBLE_SHARPE_ANNUAL = 10.0
"""Default Sharpe ceiling for :func:`implausibility`.

An annualised Sharpe above 10 after costs on one liquid index future is beyond what any known
directional strategy sustains (the best high-frequency market makers report single digits to low
tens on many instruments with rebates we do not get); a backtest there has a leak or a cost bug
far more likely than an edge. Prefer :func:`sharpe_ceiling_from_auc` when the alpha check ran.
"""

UNDEFINED = -1.0
"""A metric that is undefined for the run (a win rate without closed trades): -1, "n/a" in reports."""

_INT_FIELDS = (
    "picked_direction",
    "picked_magnitude",
    "picked_order",
    "picked_urgency",
    "realised_direction",
    "realised_magnitude",
)
_FLOAT_FIELDS = ("gross_pnl", "costs", "position", "equity")
_BOOL_FIELDS = ("written",)
_TRADE_FIELDS = {"trade_closed": torch.bool, "trade_pnl": _F64, "closed_magnitude": torch.int64}
"""The per-trade fields, ``[E, T, K]``: K trade slots per step (an ``[E, T]`` tensor is K = 1)."""


class TradeDetail(NamedTuple):
    """The rest of each closed trade (``trades.csv``), ``[E, T, K]`` like ``trade_closed``.

    Read only where ``trade_closed``; the env's :class:`~foxhunt.env.trades.ClosedTrades` fields.
    """

    gross: torch.Tensor  # float64 $ marks while held
    costs: torch.Tensor  # float64 $ fees and slippage of its fills
    side: torch.Tensor  # float64 +1 long, -1 short
    size: torch.Tensor  # float64 contracts
    entry_price: torch.Tensor  # float64
    exit_price: torch.Tensor  # float64
    entry_row: torch.Tensor  # int64 row of the market data
    exit_row: torch.Tensor  # int64
    reason: torch.Tensor  # int64 foxhunt.domain.exits.ExitReason
    order_type: torch.Tensor  # int64 OrderType of the order that opened it
    urgency: torch.Tensor  # int64 Urgency of the order that opened it
    entry_costs: torch.Tensor  # float64 $ the part of ``costs`` its opening fills paid

    @classmethod
    def blank(cls, shape: tuple[int, ...], device: torch.device | str | None) -> TradeDetail:
        def f() -> torch.Tensor:
            return torch.zeros(shape, dtype=_F64, device=device)

        def i() -> torch.Tensor:
            return torch.full(shape, -1, dtype=torch.int64, device=device)

        return cls(f(), f(), f(), f(), f(), f(), i(), i(), i(), i(), i(), f())


_DETAIL_INT = ("entry_row", "exit_row", "reason", "order_type", "urgency")


@dataclass(frozen=True)
class StepRecord:
    """Per-step records of ``E`` episodes x ``T`` steps, every field ``[E, T]`` on one device.

    Unwritten steps (``written`` False) may hold anything; actions there are -1 by convention
    (:meth:`blank` starts every step so) but no reducer reads them.
    """

    written: torch.Tensor
    """bool: step ``t`` of episode ``e`` happened."""
    gross_pnl: torch.Tensor
    """float64: PnL before costs of the step ($)."""
    costs: torch.Tensor
    """float64: costs paid at the step ($, >= 0); net = gross - costs."""
    position: torch.Tensor
    """float64: signed contracts held after the step."""
    equity: torch.Tensor
    """float64: account equity after the step ($)."""
    picked_direction: torch.Tensor
    """int64: direction the policy picked (-1 unwritten)."""
    picked_magnitude: torch.Tensor
    """int64: magnitude the policy picked (-1 unwritten)."""
    picked_order: torch.Tensor
    """int64: order type the policy picked (-1 unwritten)."""
    picked_urgency: torch.Tensor
    """int64: urgency the policy picked (-1 unwritten)."""
    realised_direction: torch.Tensor
    """int64: direction that happened after the hard constraints (plan lock ...; -1 unwritten)."""
    realised_magnitude: torch.Tensor
    """int64: magnitude that happened after the hard constraints (-1 unwritten)."""
    trade_closed: torch.Tensor
    """bool ``[E, T, K]``: slot k of step t holds a trade (a round trip) that closed at this step."""
    trade_pnl: torch.Tensor
    """float64 ``[E, T, K]``: net PnL of the trade that closed ($; read only where ``trade_closed``)."""
    closed_magnitude: torch.Tensor
    """int64 ``[E, T, K]``: magnitude index the closing trade was opened with (-1 when none closed)."""
    contracts: torch.Tensor | None = None
    """float64 ``[E, T]``: contracts of every fill of the step; None: ``|Δposition|`` stands for it."""
    trade_detail: TradeDetail | None = None
    """The closed trades' sides, sizes, prices, rows, entries and exit reasons (``trades.csv``); None:
    not kept."""
    limit_orders: torch.Tensor | None = None
    """int64 ``[E, T, len(LIMIT_EVENTS)]``: the step's limit-order events
    (:data:`foxhunt.env.trades.LIMIT_EVENTS`); None: not kept."""

    def __post_init__(self) -> None:
        shape, device = self.written.shape, self.written.device
        if self.written.dim() != 2:
            raise ValueError(f"StepRecord.written must be [E, T], got shape {tuple(shape)}")
        for name in _TRADE_FIELDS:  # [E, T] is one trade slot per step
            x = getattr(self, name)
            if isinstance(x, torch.Tensor) and x.dim() == 2:
                object.__setattr__(self, name, x.unsqueeze(-1))
        slots = tuple(self.trade_closed.shape[2:]) if isinstance(self.trade_closed, torch.Tensor) else ()
        trade_shape = (*shape, *slots)
        want = {**dict.fromkeys(_BOOL_FIELDS, torch.bool), **dict.fromkeys(_FLOAT_FIELDS, _F64)}
        want.update(dict.fromkeys(_INT_FIELDS, torch.int64))
        checks: list[tuple[str, object, tuple[int, ...], torch.dtype]] = [
            (name, getattr(self, name), tuple(shape), dtype) for name, dtype in want.items()
        ]
        checks += [(name, getattr(self, name), trade_shape, dtype) for name, dtype in _TRADE_FIELDS.items()]
        if self.contracts is not None:
            checks.append(("contracts", self.contracts, tuple(shape), _F64))
        if self.limit_orders is not None:
            checks.append(("limit_orders", self.limit_orders, (*shape, len(LIMIT_EVENTS)), torch.int64))
        if self.trade_detail is not None:
            checks += [
                (f"trade_detail.{name}", x, trade_shape, torch.int64 if name in _DETAIL_INT else _F64)
                for name, x in self.trade_detail._asdict().items()
            ]
        if len(slots) != 1:
            raise ValueError(f"StepRecord.trade_closed must be [E, T] or [E, T, K], got {trade_shape}")
        for name, x, want_shape, dtype in checks:
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"StepRecord.{name} must be a torch.Tensor, got {type(x).__name__}")
            if tuple(x.shape) != want_shape or x.device != device:
                raise ValueError(
                    f"StepRecord.{name} is {tuple(x.shape)} on {x.device}; it must be {want_shape} on "
                    f"{device} (written: {tuple(shape)})"
                )
            if x.dtype != dtype:
                raise TypeError(f"StepRecord.{name} is {x.dtype}, expected {dtype} (convert with .to())")

    @property
    def device(self) -> torch.device:
        return self.written.device

    @property
    def n_episodes(self) -> int:
        return int(self.written.shape[0])

    @property
    def n_steps(self) -> int:
        return int(self.written.shape[1])

    @property
    def trade_slots(self) -> int:
        return int(self.trade_closed.shape[2])

    @classmethod
    def blank(
        cls,
        n_episodes: int,
        n_steps: int,
        device: torch.device | str | None = None,
        *,
        trade_slots: int = 1,
        ledger: bool = False,
    ) -> StepRecord:
        """A record with nothing written yet (money 0, actions -1), for an evaluator to fill in place.

        ``ledger``: also the fills' ``contracts``, the :class:`TradeDetail` of the closed trades and the
        ``limit_orders`` events.
        """
        shape = (n_episodes, n_steps)
        trade_shape = (*shape, trade_slots)
        kw: dict[str, Any] = {}
        for name in _BOOL_FIELDS:
            kw[name] = torch.zeros(shape, dtype=torch.bool, device=device)
        for name in _FLOAT_FIELDS:
            kw[name] = torch.zeros(shape, dtype=_F64, device=device)
        for name in _INT_FIELDS:
            kw[name] = torch.full(shape, -1, dtype=torch.int64, device=device)
        kw["trade_closed"] = torch.zeros(trade_shape, dtype=torch.bool, device=device)
        kw["trade_pnl"] = torch.zeros(trade_shape, dtype=_F64, device=device)
        kw["closed_magnitude"] = torch.full(trade_shape, -1, dtype=torch.int64, device=device)
        if ledger:
            kw["contracts"] = torch.zeros(shape, dtype=_F64, device=device)
            kw["trade_detail"] = TradeDetail.blank(trade_shape, device)
            kw["limit_orders"] = torch.zeros((*shape, len(LIMIT_EVENTS)), dtype=torch.int64, device=device)
        return cls(**kw)

    @classmethod
    def concat(cls, records: Sequence[StepRecord]) -> StepRecord:
        """The episodes of ``records`` in one record, shorter ones padded with unwritten steps.

        The fills' ``contracts``, the trade detail and the limit-order events are kept when every record
        has them.
        """
        slots = {r.trade_slots for r in records}
        if len(slots) != 1:
            raise ValueError(f"cannot concatenate StepRecords with different trade slots {sorted(slots)}")
        steps = max(r.n_steps for r in records)
        ledger = all(r.contracts is not None and r.trade_detail is not None for r in records)
        parts: dict[str, list[Any]] = {}
        for r in records:
            pad_steps = steps - r.n_steps
            blank = cls.blank(r.n_episodes, pad_steps, r.device, trade_slots=r.trade_slots, ledger=ledger)
            for f in fields(cls):
                x, pad = getattr(r, f.name), getattr(blank, f.name)
                if pad is not None and x is not None:
                    parts.setdefault(f.name, []).append(_cat([x, pad], dim=1))
        return cls(**{k: _cat(v, dim=0) for k, v in parts.items() if len(v) == len(records)})

    def trades(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(closed, pnl, magnitude)`` of the closed trades on written steps, each ``[E, T * K]``."""
        e, tk = self.n_episodes, self.n_steps * self.trade_slots
        closed = (self.trade_closed & self.written[:, :, None]).reshape(e, tk)
        return closed, self.trade_pnl.reshape(e, tk), self.closed_magnitude.reshape(e, tk)


def _cat(xs: list[Any], dim: int) -> Any:
    """``torch.cat`` of tensors, or field by field of NamedTuples of tensors."""
    if isinstance(xs[0], tuple):
        return type(xs[0])(*(torch.cat(list(z), dim=dim) for z in zip(*xs, strict=True)))
    return torch.cat(xs, dim=dim)


def branch_sizes(branches: BranchConfig) -> dict[str, int]:
    """The branch-size keywords of :func:`compute_metrics` from the run's ``[env.branches]``."""
    return {
        "n_directions": branches.direction,
        "n_magnitudes": branches.magnitude,
        "n_order_types": branches.order_type,
        "n_urgencies": branches.urgency,
    }


# --- per-step series ---------------------------------------------------------------------------


class _EpisodeSeries(NamedTuple):
    w: torch.Tensor  # [E, T] bool, written
    net: torch.Tensor  # [E, T] net PnL, 0 where unwritten
    ret: torch.Tensor  # [E, T] r_t = net_t / eq_before_t, 0 where unwritten
    eq_before: torch.Tensor  # [E, T] equity before the step (C0 at the first written step)
    dpos: torch.Tensor  # [E, T] contracts traded (fills_t), 0 where unwritten
    max_dd: torch.Tensor  # [E] max_t dd_t, 0 for an episode without written steps
    final_equity: torch.Tensor  # [E] equity after the last written step, C0 if none
    n: torch.Tensor  # [E] written steps, float64


def _series(rec: StepRecord, initial_capital: float) -> _EpisodeSeries:
    w = rec.written
    E, T = w.shape
    dev = w.device
    zero = torch.zeros((), dtype=_F64, device=dev)
    # last written index <= t, shifted by one so that -1 (none yet) reads column 0 of the padded arrays
    t_ET = torch.arange(T, device=dev).expand(E, T)
    last1_ET = torch.cummax(torch.where(w, t_ET, -1), dim=1).values + 1  # [E, T] in 0..T
    prev1_ET = torch.cat([torch.zeros((E, 1), dtype=torch.int64, device=dev), last1_ET], dim=1)  # [E, T+1]
    # column 0 = the episode start: equity C0, flat; then the written values (garbage never read)
    eq_pad = torch.cat([torch.full((E, 1), initial_capital, dtype=_F64, device=dev), rec.equity], dim=1)
    pos_pad = torch.cat([torch.zeros((E, 1), dtype=_F64, device=dev), rec.position], dim=1)
    eq_before = eq_pad.gather(1, prev1_ET[:, :T])  # equity after the last written step < t
    pos_before = pos_pad.gather(1, prev1_ET[:, :T])
    final_equity = eq_pad.gather(1, prev1_ET[:, T:])[:, 0]
    net = torch.where(w, rec.gross_pnl - rec.costs, zero)
    ret = torch.where(w, net / eq_before, zero)
    fills = (rec.position - pos_before).abs() if rec.contracts is None else rec.contracts
    dpos = torch.where(w, fills, zero)
    # peak_t = max(C0, max_{s<=t, written} equity_s); unwritten steps never raise the peak
    peak = torch.cummax(torch.where(w, rec.equity, -math.inf), dim=1).values.clamp(min=initial_capital)
    dd = torch.where(w, (peak - rec.equity) / peak, zero)
    max_dd = torch.cat([torch.zeros((E, 1), dtype=_F64, device=dev), dd], dim=1).amax(dim=1)
    return _EpisodeSeries(w, net, ret, eq_before, dpos, max_dd, final_equity, w.sum(dim=1).to(_F64))


def _div0(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``num / den`` where ``den > 0``, else 0 (no NaN from 0/0)."""
    pos = den > 0
    return torch.where(pos, num / torch.where(pos, den, torch.ones_like(den)), torch.zeros_like(num))


def _rate(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``num / den`` where ``den > 0``, else :data:`UNDEFINED` (a win rate without trades)."""
    return torch.where(den > 0, _div0(num, den), torch.full_like(num, UNDEFINED))


def _risk(ret: torch.Tensor, w: torch.Tensor, n: torch.Tensor, dim: int | None) -> tuple[torch.Tensor, ...]:
    """``(mu, sharpe_per_bar, sortino_per_bar)`` of the written returns, reduced over ``dim`` (None: all)."""
    dims = tuple(range(ret.dim())) if dim is None else (dim,)
    mu = _div0(ret.sum(dim=dims), n)
    mu_b = mu.reshape(mu.shape + (1,) * len(dims)) if dim is not None else mu
    sq_dev = torch.where(w, (ret - mu_b) ** 2, torch.zeros_like(ret))
    sigma = _div0(sq_dev.sum(dim=dims), n).sqrt()
    delta = _div0((ret.clamp(max=0.0) ** 2).sum(dim=dims), n).sqrt()  # ret is 0 where unwritten
    return mu, sharpe_ratio(mu, sigma, n), sharpe_ratio(mu, delta, n)


def _counts(x: torch.Tensor, mask: torch.Tensor, k: int) -> torch.Tensor:
    """``[E, k]`` float64: per row, how many masked entries of ``x`` equal each of ``0..k-1``.

    Masked entries outside ``[0, k)`` land in a dropped overflow bin (compute_metrics reports them).
    """
    ok = mask & (x >= 0) & (x < k)
    idx = torch.where(ok, x, k)
    out = torch.zeros((x.shape[0], k + 1), dtype=_F64, device=x.device)
    return out.scatter_add_(1, idx, ok.to(_F64))[:, :k]


def _entropy(counts: torch.Tensor) -> torch.Tensor:
    """``-sum_k p_k ln p_k`` over the last dim, ``p = counts / sum(counts)``; 0 for no counts."""
    p = _div0(counts, counts.sum(dim=-1, keepdim=True))
    pos = p > 0
    return -torch.where(pos, p * torch.where(pos, p, torch.ones_like(p)).log(), torch.zeros_like(p)).sum(-1)


def _check_args(bars_per_year: float, initial_capital: float, **sizes: int) -> None:
    if not (math.isfinite(bars_per_year) and bars_per_year > 0):
        raise ValueError(f"bars_per_year must be a positive number, got {bars_per_year}")
    if not (math.isfinite(initial_capital) and initial_capital > 0):
        raise ValueError(f"initial_capital must be a positive number of $, got {initial_capital}")
    for name, k in sizes.items():
        if int(k) != k or k < 1:
            raise ValueError(f"{name} must be a positive branch size, got {k}")


# --- per episode -------------------------------------------------------------------------------


def per_episode_metrics(
    rec: StepRecord, *, bars_per_year: float, n_directions: int, initial_capital: float
) -> dict[str, torch.Tensor]:
    """The module docstring's metrics per episode: a dict of ``[E]`` float64 tensors on ``rec.device``.

    Keys: ``steps, net_pnl, gross_pnl, costs, trades, win_rate, avg_trade_pnl, mean_return_per_bar,
    sharpe_per_bar, sharpe_annual, sortino_annual, annual_return, max_drawdown, calmar,
    active_frac, direction_entropy, contracts_traded, turnover, exposure, final_equity`` (the
    equity after the last written step, ``initial_capital`` for an episode with none). No host
    round trip and no validation of action values (:func:`compute_metrics` validates).
    """
    _check_args(bars_per_year, initial_capital, n_directions=n_directions)
    s = _series(rec, initial_capital)
    w, n, zero = s.w, s.n, torch.zeros((), dtype=_F64, device=rec.device)
    closed, pnl, _ = rec.trades()
    trades = closed.sum(dim=1).to(_F64)
    wins = (closed & (pnl > 0)).sum(dim=1).to(_F64)
    mu, sharpe, sortino = _risk(s.ret, w, n, dim=1)
    root_b = math.sqrt(bars_per_year)
    annual_return = mu * bars_per_year
    contracts = s.dpos.sum(dim=1)
    return {
        "steps": n,
        "net_pnl": s.net.sum(dim=1),
        "gross_pnl": torch.where(w, rec.gross_pnl, zero).sum(dim=1),
        "costs": torch.where(w, rec.costs, zero).sum(dim=1),
        "trades": trades,
        "win_rate": _rate(wins, trades),
        "avg_trade_pnl": _div0(torch.where(closed, pnl, zero).sum(dim=1), trades),
        "mean_return_per_bar": mu,
        "sharpe_per_bar": sharpe,
        "sharpe_annual": sharpe * root_b,
        "sortino_annual": sortino * root_b,
        "annual_return": annual_return,
        "max_drawdown": s.max_dd,
        "calmar": _div0(annual_return, s.max_dd),
        "active_frac": _div0((w & (rec.position != 0)).sum(dim=1).to(_F64), n),
        "direction_entropy": _entropy(_counts(rec.picked_direction, w, n_directions)),
        "contracts_traded": contracts,
        "turnover": _div0(contracts, n),
        "exposure": _div0(torch.where(w, rec.position.abs(), zero).sum(dim=1), n),
        "final_equity": s.final_equity,
    }


# --- aggregate ---------------------------------------------------------------------------------

_DEFAULT_BRANCHES = BranchConfig()


def _trade_std(pnl: torch.Tensor, closed: torch.Tensor, trades: torch.Tensor) -> torch.Tensor:
    """Population std of the closed trades' net PnL (0 without trades)."""
    zero = torch.zeros((), dtype=_F64, device=pnl.device)
    x = torch.where(closed, pnl.to(_F64), zero)
    mean = _div0(x.sum(), trades)
    var = _div0(torch.where(closed, (pnl.to(_F64) - mean) ** 2, zero).sum(), trades)
    return var.clamp(min=0).sqrt()


def compute_metrics(
    rec: StepRecord,
    *,
    bars_per_year: float,
    n_magnitudes: int,
    n_directions: int,
    initial_capital: float,
    n_order_types: int = _DEFAULT_BRANCHES.order_type,
    n_urgencies: int = _DEFAULT_BRANCHES.urgency,
) -> dict[str, Any]:
    """The module docstring's metrics pooled over every written step of every episode.

    Computed on ``rec.device`` and read back in one host transfer. Branch sizes come from the
    run's config (``**branch_sizes(cfg.env.branches)``); order-type and urgency sizes default to
    :class:`~foxhunt.env.config.BranchConfig`'s defaults.

    Returns plain Python values: ``steps, episodes, trades`` (int); ``net_pnl, gross_pnl, costs,
    win_rate, avg_trade_pnl, mean_return_per_bar, sharpe_per_bar, sharpe_annual, sortino_annual,
    bars_per_year, annual_return, max_drawdown, calmar, active_frac, direction_entropy,
    contracts_traded, turnover, exposure`` (float); ``win_rate_by_magnitude`` (list of floats) and
    ``trades_by_magnitude`` (list of ints), indexed by the magnitude the closing trade closed;
    ``picked`` (dict ``direction, magnitude, order_type, urgency`` -> list of shares) and
    ``realised`` (dict ``direction, magnitude`` -> list of shares).

    Raises ValueError when a written step holds an action outside its branch, a closed trade has
    no valid ``closed_magnitude``, a written money field is not finite, or the equity before a
    written step is not positive (the capital floor should have ended the episode).
    """
    sizes = {
        "direction": n_directions,
        "magnitude": n_magnitudes,
        "order_type": n_order_types,
        "urgency": n_urgencies,
    }
    _check_args(bars_per_year, initial_capital, **{f"n_{k}s": v for k, v in sizes.items()})
    s = _series(rec, initial_capital)
    n = s.n.sum()
    picked_src, realised_src = _picked(rec), _realised(rec)
    picked = {k: _counts(x, s.w, sizes[k]).sum(dim=0) for k, x in picked_src.items()}  # [k] per branch
    realised = {k: _counts(x, s.w, sizes[k]).sum(dim=0) for k, x in realised_src.items()}
    out: dict[str, torch.Tensor] = {
        **_pooled(rec, s, n, bars_per_year, n_magnitudes, picked["direction"]),
        **{f"picked/{k}": _div0(v, n) for k, v in picked.items()},
        **{f"realised/{k}": _div0(v, n) for k, v in realised.items()},
        **{f"problem/{k}": v.to(_F64) for k, v in _problems(rec, s, sizes).items()},
    }
    host = _to_host(out)
    _raise_if_inconsistent(host, rec)
    return _plain(host, bars_per_year, tuple(picked), tuple(realised))


def _picked(rec: StepRecord) -> dict[str, torch.Tensor]:
    """The picked action of each branch, ``[E, T]``, keyed as in ``compute_metrics``'s ``picked``."""
    return {
        "direction": rec.picked_direction,
        "magnitude": rec.picked_magnitude,
        "order_type": rec.picked_order,
        "urgency": rec.picked_urgency,
    }


def _realised(rec: StepRecord) -> dict[str, torch.Tensor]:
    """The realised (after the hard constraints) direction and magnitude, ``[E, T]``."""
    return {"direction": rec.realised_direction, "magnitude": rec.realised_magnitude}


def _pooled(
    rec: StepRecord,
    s: _EpisodeSeries,
    n: torch.Tensor,
    bars_per_year: float,
    n_magnitudes: int,
    direction_counts: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """The money, trade and risk metrics over all written steps (``n`` of them), on the device.

    Scalars except ``win_rate_by_magnitude`` and ``trades_by_magnitude`` ``[M]``; the keys in the
    order ``compute_metrics`` returns them. ``direction_counts`` ``[D]``: picked directions.
    """
    w, zero = s.w, torch.zeros((), dtype=_F64, device=rec.device)
    closed, pnl, magnitude = rec.trades()  # [E, T * K]
    # closing trades binned by the magnitude they closed (not the action of the closing step), [M]
    trades_M = _counts(magnitude, closed, n_magnitudes).sum(dim=0)
    wins_M = _counts(magnitude, closed & (pnl > 0), n_magnitudes).sum(dim=0)
    trades = closed.sum().to(_F64)
    wins = (closed & (pnl > 0)).sum().to(_F64)
    mu, sharpe, sortino = _risk(s.ret, w, n, dim=None)
    max_dd = torch.cat([s.max_dd, zero.reshape(1)]).amax()
    annual_return = mu * bars_per_year
    contracts = s.dpos.sum()
    return {
        "steps": n,
        "episodes": torch.tensor(float(rec.n_episodes), dtype=_F64, device=rec.device),
        "net_pnl": s.net.sum(),
        "gross_pnl": torch.where(w, rec.gross_pnl, zero).sum(),
        "costs": torch.where(w, rec.costs, zero).sum(),
        "trades": trades,
        "win_rate": _rate(wins, trades),
        "win_rate_by_magnitude": _rate(wins_M, trades_M),
        "trades_by_magnitude": trades_M,
        "avg_trade_pnl": _div0(torch.where(closed, pnl, zero).sum(), trades),
        "trade_pnl_std": _trade_std(pnl, closed, trades),
        "mean_return_per_bar": mu,
        "sharpe_per_bar": sharpe,
        "sharpe_annual": sharpe * math.sqrt(bars_per_year),
        "sortino_annual": sortino * math.sqrt(bars_per_year),
        "annual_return": annual_return,
        "max_drawdown": max_dd,
        "calmar": _div0(annual_return, max_dd),
        "active_frac": _div0((w & (rec.position != 0)).sum().to(_F64), n),
        "direction_entropy": _entropy(direction_counts),
        "contracts_traded": contracts,
        "turnover": _div0(contracts, n),
        "exposure": _div0(torch.where(w, rec.position.abs(), zero).sum(), n),
    }


def _outside(x: torch.Tensor, k: int, mask: torch.Tensor) -> torch.Tensor:
    """How many masked entries of ``x`` lie outside ``[0, k)`` (a scalar count on the device)."""
    return (mask & ((x < 0) | (x >= k))).sum()


def _problems(rec: StepRecord, s: _EpisodeSeries, sizes: dict[str, int]) -> dict[str, torch.Tensor]:
    """Counts of inconsistent written steps, keyed by what is wrong; counted on the device and read
    back with the results (a nonzero count makes ``compute_metrics`` raise)."""
    w = s.w
    closed, pnl, magnitude = rec.trades()
    actions = [("picked", k, x) for k, x in _picked(rec).items()]
    actions += [("realised", k, x) for k, x in _realised(rec).items()]
    problems = {f"{what} {k} outside [0, {sizes[k]})": _outside(x, sizes[k], w) for what, k, x in actions}
    m = sizes["magnitude"]
    problems[f"closed trade with closed_magnitude outside [0, {m})"] = _outside(magnitude, m, closed)
    for name in _FLOAT_FIELDS:
        problems[f"non-finite {name}"] = (w & ~torch.isfinite(getattr(rec, name))).sum()
    problems["closed trade with non-finite trade_pnl"] = (closed & ~torch.isfinite(pnl)).sum()
    problems["equity before the step <= 0"] = (w & ~(s.eq_before > 0)).sum()
    return problems


def _to_host(out: dict[str, torch.Tensor]) -> dict[str, list[float]]:
    """Every tensor of ``out`` as a list of floats, in one host transfer: flattened into one float64
    vector, read back, split again."""
    flat = torch.cat([v.reshape(-1).to(_F64) for v in out.values()]).cpu().tolist()
    host: dict[str, list[float]] = {}
    i = 0
    for k, v in out.items():
        host[k] = flat[i : i + v.numel()]
        i += v.numel()
    return host


def _raise_if_inconsistent(host: dict[str, list[float]], rec: StepRecord) -> None:
    """ValueError naming every ``problem/`` count of ``host`` that is not zero."""
    bad = {
        k.removeprefix("problem/"): int(v[0]) for k, v in host.items() if k.startswith("problem/") and v[0]
    }
    if bad:
        where = ", ".join(f"{k}: {c} step(s)" for k, c in bad.items())
        raise ValueError(
            f"StepRecord of {rec.n_episodes} episode(s) x {rec.n_steps} step(s) is inconsistent on written "
            f"steps ({where}); check the evaluator that filled it and the branch sizes passed in"
        )


_INT_METRICS = ("steps", "episodes", "trades")


def _plain(
    host: dict[str, list[float]], bars_per_year: float, picked: tuple[str, ...], realised: tuple[str, ...]
) -> dict[str, Any]:
    """``compute_metrics``'s result from the host values: counts as ints, per-magnitude lists as
    lists, the rest as floats; ``bars_per_year`` and the ``picked`` / ``realised`` share dicts last."""
    result: dict[str, Any] = {}
    for k, v in host.items():
        if k.startswith(("picked/", "realised/", "problem/")):
            continue
        if k in _INT_METRICS:
            result[k] = int(v[0])
        elif k == "trades_by_magnitude":
            result[k] = [int(x) for x in v]
        elif k == "win_rate_by_magnitude":
            result[k] = list(v)
        else:
            result[k] = v[0]
    result["bars_per_year"] = float(bars_per_year)
    result["picked"] = {k: host[f"picked/{k}"] for k in picked}
    result["realised"] = {k: host[f"realised/{k}"] for k in realised}
    return result


# --- plausibility ------------------------------------------------------------------------------


def sharpe_ceiling_from_auc(
    auc: float,
    bars_per_year: float,
    *,
    horizon_bars: int = 1,
    n_bars: int | None = None,
    slack: float = 2.0,
    z: float = 3.0,
) -> float:
    """The highest annualised Sharpe a forecast of this AUC could plausibly support (before costs).

    Reasoning, for a Gaussian forecast ``f`` and ``horizon_bars``-bar return ``y`` with correlation
    (information coefficient) ``rho``:

    1. ``2 AUC - 1`` is Somers' D, the rank correlation of ``f`` with ``sign(y)``; reading it as
       Kendall's tau and inverting Greiner's relation ``tau = (2/pi) arcsin(rho)`` gives
       ``rho = sin(pi (AUC - 1/2))`` (symmetric: an AUC below 1/2 is as good, inverted).
    2. The best linear bet ``f y`` has Sharpe ``rho / sqrt(1 + rho^2) <= rho`` per horizon (sign
       bets reach ``sqrt(2/pi) rho``), and there are ``bars_per_year / horizon_bars`` independent
       horizons a year (fundamental law of active management, ``IR = IC sqrt(breadth)``), so the
       annual Sharpe is at most ``rho sqrt(bars_per_year / horizon_bars)``.
    3. ``slack`` (default 2) covers what step 2 leaves out: sizing, timing within the horizon and
       the AUC's own estimation error; costs only lower the real figure.
    4. With ``n_bars`` given, add ``z`` standard errors of a zero-edge Sharpe estimate over
       ``n_bars`` bars, ``z sqrt(bars_per_year / n_bars)`` (the per-bar Sharpe estimate has
       standard error about ``1 / sqrt(n)``): a short backtest is noisy, and luck is not a leak.

    ``ceiling = slack |sin(pi (AUC - 1/2))| sqrt(bars_per_year / horizon_bars)
    + z sqrt(bars_per_year / n_bars)``
    """
    if not (math.isfinite(auc) and 0.0 <= auc <= 1.0):
        raise ValueError(f"auc must lie in [0, 1], got {auc} (a NaN AUC means the alpha check had one class)")
    if not (math.isfinite(bars_per_year) and bars_per_year > 0):
        raise ValueError(f"bars_per_year must be a positive number, got {bars_per_year}")
    if horizon_bars < 1:
        raise ValueError(f"horizon_bars must be >= 1, got {horizon_bars}")
    if n_bars is not None and n_bars < 1:
        raise ValueError(f"n_bars must be >= 1 or None, got {n_bars}")
    rho = abs(math.sin(math.pi * (auc - 0.5)))
    ceiling = slack * rho * math.sqrt(bars_per_year / horizon_bars)
    if n_bars is not None:
        ceiling += z * math.sqrt(bars_per_year / n_bars)
    return ceiling


SHARPE_BOUND_Z = 3.0
"""Standard errors below the measured Sharpe at which :func:`implausibility` compares it to the ceiling."""


def sharpe_interval(metrics: dict[str, Any], z: float = SHARPE_BOUND_Z) -> tuple[float, float]:
    """``((SR - z SE) sqrt(B), (SR + z SE) sqrt(B))``: the annualised Sharpe's interval, SR the per-bar
    Sharpe, ``SE = sqrt((1 + SR^2/2) / n)`` (Lo 2002, n i.i.d. returns); the point estimate twice
    without ``steps`` or ``bars_per_year``."""
    sharpe = float(metrics["sharpe_annual"])
    n = metrics.get("steps")
    bpy = metrics.get("bars_per_year")
    if not n or not bpy:
        return sharpe, sharpe
    per_bar = sharpe / math.sqrt(float(bpy))
    se = math.sqrt((1.0 + 0.5 * per_bar * per_bar) / float(n))
    return (per_bar - z * se) * math.sqrt(float(bpy)), (per_bar + z * se) * math.sqrt(float(bpy))


def sharpe_lower_bound(metrics: dict[str, Any], z: float = SHARPE_BOUND_Z) -> float:
    """``(SR - z SE) sqrt(B)``: the lower end of :func:`sharpe_interval`."""
    return sharpe_interval(metrics, z)[0]


MIN_SHARPE_STEPS = 1_000
"""Fewer written steps than this and an annualised Sharpe is shown as n/a (with its 95% interval
where there is room): over 356 steps of minute bars one standard error of the annualised figure is
sqrt(bars_per_year / 356) ~ 17, so a printed -367 says little but its sign. ``metrics.json`` keeps
the number (``sharpe_annual``) beside ``steps``; only what a person reads says n/a."""

SHARPE_INTERVAL_Z = 1.96
"""The z of the shown Sharpe interval (95%, two-sided, normal)."""


MIN_TRADES_FOR_T_STAT = 10


def trade_t_stat(metrics: dict[str, Any], max_sharpe_annual: float, z: float) -> tuple[float, float]:
    """``(t, t_max)``: the closed trades' t-statistic ``avg / std * sqrt(trades)`` and the most a strategy
    of annualised Sharpe ``max_sharpe_annual`` shows over the period, ``Sharpe * sqrt(years) + z``
    (the t-statistic of a mean return grows with the square root of the time it is measured over;
    ``years = steps / bars_per_year``). ``(0, inf)`` without enough trades or the fields."""
    trades = int(metrics.get("trades", 0))
    std = float(metrics.get("trade_pnl_std", 0.0))
    n, bpy = metrics.get("steps"), metrics.get("bars_per_year")
    if trades < MIN_TRADES_FOR_T_STAT or not n or not bpy:
        return 0.0, math.inf
    avg = float(metrics["avg_trade_pnl"])
    t = math.inf if std == 0 and avg > 0 else (avg / std * math.sqrt(trades) if std > 0 else 0.0)
    return t, max_sharpe_annual * math.sqrt(float(n) / float(bpy)) + z


def implausibility(
    metrics: dict[str, Any],
    *,
    max_sharpe_annual: float = MAX_PLAUSIBLE_SHARPE_ANNUAL,
    min_trades_for_drawdown_check: int = 50,
    min_drawdown: float = 1e-3,
    min_win_rate_for_drawdown_check: float = 0.8,
    z: float = SHARPE_BOUND_Z,
    unjudged: bool = False,
) -> list[str]:
    """Reasons a :func:`compute_metrics` result is too good to be true; empty when none.

    * the Sharpe is above ``max_sharpe_annual`` (see :data:`MAX_PLAUSIBLE_SHARPE_ANNUAL` and
      :func:`sharpe_ceiling_from_auc`) **beyond its sampling error**: the lower bound
      ``(SR - z SE) sqrt(B)`` with ``SE = sqrt((1 + SR^2 / 2) / n)`` (Lo 2002, the standard error of
      a per-bar Sharpe SR estimated from n i.i.d. returns) exceeds the ceiling. A short validation
      window with a handful of trades can show an annualised Sharpe of 15 by luck; an oracle over
      thousands of bars clears the bound by far. Without ``steps`` the point estimate is used;
    * ``max_drawdown < min_drawdown`` with ``trades >= min_trades_for_drawdown_check`` and a win
      rate of at least ``min_win_rate_for_drawdown_check``: a strategy that trades this often, wins
      nearly every trade and never loses ``min_drawdown`` of its peak equity is peeking (a
      zero-variance return series has Sharpe 0 by convention, so this check is what catches it).
      The win-rate condition spares a small-size strategy whose losses are merely small;
    * a non-finite Sharpe or drawdown;
    * with ``unjudged`` (the ``backtest`` command's report), a Sharpe above the ceiling that neither
      check above could judge, over fewer than :data:`MIN_TRADES_FOR_T_STAT` closed trades: "too
      few trades to judge" rather than nothing (the look-ahead oracle on a short book file showed a
      Sharpe of 173 over 4 trades, within its sampling error of the ceiling, and went unflagged).
      Training's anomaly guard leaves it off: an epoch's lucky handful of trades is not a leak to
      stop a run for.

    The caller sets ``metrics["implausible"]`` from the result.
    """
    reasons: list[str] = []
    sharpe = float(metrics["sharpe_annual"])
    max_dd = float(metrics["max_drawdown"])
    trades = int(metrics["trades"])
    bpy = metrics.get("bars_per_year", "?")
    if not (math.isfinite(sharpe) and math.isfinite(max_dd)):
        reasons.append(f"non-finite metrics: sharpe_annual {sharpe}, max_drawdown {max_dd}")
        return reasons
    lower = sharpe_lower_bound(metrics, z)
    if lower > max_sharpe_annual:
        reasons.append(
            f"annualised Sharpe {sharpe:.3g} (lower bound {lower:.3g} at z = {z:g}, bars_per_year {bpy}) "
            f"exceeds the plausible ceiling {max_sharpe_annual:.3g}: look for future information in "
            "the features or a cost bug"
        )
    t_trade, t_max = trade_t_stat(metrics, max_sharpe_annual, z)
    if t_trade > t_max:
        reasons.append(
            f"closed trades' t-statistic {t_trade:.3g} over {trades} trades exceeds {t_max:.3g}, the most a "
            f"strategy with annualised Sharpe {max_sharpe_annual:.3g} reaches over this period plus {z:g} "
            "standard errors: look for future information in the features or a cost bug"
        )
    if unjudged and not reasons and sharpe > max_sharpe_annual and trades < MIN_TRADES_FOR_T_STAT:
        reasons.append(
            f"annualised Sharpe {sharpe:.3g} over {trades} closed trades is above the plausible ceiling "
            f"{max_sharpe_annual:.3g}, but too few trades to judge (its lower bound {lower:.3g} at z = {z:g} "
            f"is not, and the trade t-test needs {MIN_TRADES_FOR_T_STAT} trades): trust it only on more data"
        )
    win_rate = float(metrics.get("win_rate", 1.0))
    if (
        trades >= min_trades_for_drawdown_check
        and max_dd < min_drawdown
        and win_rate >= min_win_rate_for_drawdown_check
    ):
        reasons.append(
            f"max drawdown {max_dd:.3g} below {min_drawdown:g} over {trades} trades won at {win_rate:.0%}: "
            "a real strategy loses sometimes; look for future information in the features or a cost bug"
        )
    return reasons


def sharpe_text(metrics: Mapping[str, Any], *, interval: bool = True) -> str:
    """The annualised Sharpe of a metrics dict as a person reads it: ``n/a (356 steps < 1,000)`` below
    :data:`MIN_SHARPE_STEPS` written steps, else the value (with its 95% interval, ``interval``);
    the bare value for a summary written before ``steps`` was recorded."""
    sharpe, n = metrics.get("sharpe_annual"), metrics.get("steps")
    if sharpe is None:
        return "n/a"
    if n is None:
        return f"{float(sharpe):.2f}"
    if n < MIN_SHARPE_STEPS:
        return f"n/a ({int(n):,} steps < {MIN_SHARPE_STEPS:,})"
    if not interval:
        return f"{float(sharpe):.2f}"
    lo, hi = sharpe_interval(dict(metrics), SHARPE_INTERVAL_Z)
    return f"{float(sharpe):.2f} [95%: {lo:.2f}, {hi:.2f}]"
