"""The public Python API: every stage of the pipeline as a function, for notebooks and scripts.

The command line (``foxhunt ...``) and this module run the same code; this one returns Python
objects instead of writing files. A session goes::

    from foxhunt import api

    cfg = api.config("smoke", overrides=["folds.n_folds=2"])
    files = api.synthetic_market("market", cfg)          # or your own DBN files
    data = api.build_features(files, cfg, "cache")        # leak guard, then the cache (reused after)
    folds = api.make_folds(data, cfg)                      # purged walk-forward folds
    flat = api.backtest(data, "flat", cfg=cfg, fold=1)

    def imbalance_sign(states, rows):                      # any callable is a policy
        s = rows.feature("ofi.l1_imbalance_ema_slow")
        return torch.where(s > 0, api.Direction.LONG, api.Direction.SHORT)

    mine = api.backtest(data, imbalance_sign, cfg=cfg, fold=1)
    print(mine.metrics["net_pnl"], flat.metrics["net_pnl"])
    api.train(data, cfg, "run")                            # only data the leak guard passed trains

:func:`build_features` runs the leak guard on the files (as every command does) and returns a
:class:`Dataset`: the feature cache (``data.cache``) with the guard's verdict on it. :func:`train`
and :func:`backtest`, whose results are reported, take only such a dataset (as ``foxhunt train`` and
``foxhunt backtest`` run the guard first); the functions that only read features
(:func:`make_folds`, :func:`fold_market`) take it or a bare
:class:`~foxhunt.features.cache_file.FeatureCache` (:func:`open_features`).

A **policy** is a callable ``policy(states, rows) -> actions``: ``states`` is the ``[N, W]`` float32
batch of RL states (:data:`~foxhunt.features.layout.STATE_LAYOUT`, features normalised with the
fold's training-row scaler), ``rows`` a :class:`RowContext` describing the N rows acted on (row index,
position, the fold's market). It answers either ``[N]`` directions (:class:`Direction` values:
the order is then a full-size market order of normal urgency, as the scripted policies trade) or
``[N, 4]`` branch indices (direction, magnitude, order type, urgency; see
:mod:`foxhunt.domain.actions`), as integers (a tensor, numpy array or list). Every answer is checked
before the environment steps with it (:func:`check_actions`: integer dtype, shape, each branch in
range): booleans, floats, another shape or an out-of-range value are a :class:`~foxhunt.errors.PolicyError`
naming the policy, at the first step. Every policy is judged by the same environment, costs and
metrics as ``foxhunt backtest``: the validation rows of one fold, cut into windows stepped together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from foxhunt.backtest.evaluate import Policy, ScriptedPolicy, evaluate, scripted
from foxhunt.backtest.metrics import StepRecord
from foxhunt.backtest.run import METRIC_KEYS, bars_per_year, equity_curve, summarise
from foxhunt.config.loader import load_config
from foxhunt.config.models import FoxhuntConfig
from foxhunt.data.ingest import MarketData, load_market
from foxhunt.dataset.cache import load_cache
from foxhunt.domain.actions import BRANCHES, Direction, OrderType, Urgency
from foxhunt.env.core import TradingEnv
from foxhunt.env.market import MarketTensors, market_tensors
from foxhunt.errors import FoxhuntError, PolicyError
from foxhunt.features.cache_file import FeatureCache
from foxhunt.pipeline import Claim, Dataset, Use, admit, prepare, train_folds
from foxhunt.seeding import Stream, stream_seed
from foxhunt.validation.folds import FoldData, TooFewRowsError, with_bar_fix
from foxhunt.validation.folds import make_folds as _make_folds
from foxhunt.validation.normalise import RobustScaler

if TYPE_CHECKING:  # imported where used: the training code stays out of `import foxhunt.api`
    from foxhunt.policy.trained import CommitteePolicy

__all__ = [
    "BacktestResult",
    "Dataset",
    "Direction",
    "OrderType",
    "RowContext",
    "ScriptedPolicy",
    "TrainedAgent",
    "Urgency",
    "backtest",
    "build_features",
    "check_actions",
    "checkpoint_path",
    "config",
    "export_weights",
    "fold_market",
    "load_data",
    "load_policy",
    "make_folds",
    "open_features",
    "synthetic_market",
    "train",
]

UserPolicy = Callable[[Tensor, "RowContext"], Tensor]
"""``policy(states [N, W], rows) -> [N] directions or [N, 4] branch indices`` (module docs)."""


# --- configuration and data --------------------------------------------------------------------


def config(
    profile: str | None = None, *, file: str | Path | None = None, overrides: Sequence[str] = ()
) -> FoxhuntConfig:
    """The resolved configuration: a packaged profile (``smoke``, ``gpu``, ``full``, ``localdev``,
    ``production``) or a TOML ``file``, with ``section.key=value`` overrides (the command line's ``--set``).

    Example::

        cfg = api.config("smoke", overrides=["data.bar_seconds=60", "folds.n_folds=2"])
        cfg.data.bar_seconds  # 60
    """
    return load_config(profile=profile, config_file=file, overrides=overrides)


def synthetic_market(out_dir: str | Path, cfg: FoxhuntConfig) -> list[Path]:
    """Write the synthetic ES market of ``cfg.synth`` (seeded, planted alpha ``cfg.synth.alpha``) as
    DBN files (MBP-10 and trades per session) into ``out_dir``; return their paths.

    Example::

        files = api.synthetic_market("market", api.config("smoke", overrides=["synth.sessions=2"]))
    """
    from foxhunt.data.synth import write_synthetic

    return write_synthetic(cfg.synth, out_dir)


def load_data(paths: Sequence[str | Path], cfg: FoxhuntConfig) -> MarketData:
    """Read, validate and merge DBN files (or folders of them) for ``cfg.data.data_source``: the
    order books, trades or OHLCV bars per instrument, sorted by event time.

    Example::

        md = api.load_data(["data/es/"], cfg)
        {iid: len(book.ts_event) for iid, book in md.books.items()}
    """
    return load_market(paths, cfg.data)


# --- features and folds ------------------------------------------------------------------------


def build_features(
    paths: Sequence[str | Path],
    cfg: FoxhuntConfig,
    out_dir: str | Path,
    *,
    regenerate: bool = True,
    log: Callable[[str], None] = print,
) -> Dataset:
    """The leak guard on ``paths`` under ``cfg`` (its verdict line to ``log``; a leak raises
    :class:`~foxhunt.dataset.leaks.LeakFoundError`), while the feature cache is opened in
    ``out_dir`` when a current one is there, built otherwise (``regenerate=False``: refuse instead,
    saying what differs): the :class:`Dataset` that :func:`train` accepts. Rows too few for the folds
    are refused with the bar length that fits, as ``foxhunt features build`` does.

    Example::

        data = api.build_features(files, cfg, "cache")
        data.cache.meta["rows"], data.cache.columns[:3], data.leaks.clean
    """
    try:
        return prepare(
            cfg, out_dir, paths, claim=Claim(), where="api.build_features", cache_dir=Path(out_dir),
            regenerate=regenerate, say=log,
        )  # fmt: skip
    except TooFewRowsError as exc:
        raise with_bar_fix(exc, cfg.data, cfg.train) from None


def _cache(data: Dataset | FeatureCache) -> FeatureCache:
    """The feature cache of a prepared dataset, or the cache itself."""
    return data.cache if isinstance(data, Dataset) else data


def open_features(path: str | Path, cfg: FoxhuntConfig) -> FeatureCache:
    """Open the cache file ``path``, refusing it unless it was built by this code under ``cfg``.

    Example::

        cache = api.open_features("cache/features-bar-mbp10-0123abcd.arrow", cfg)
    """
    return load_cache(path, cfg)


def make_folds(cache: Dataset | FeatureCache, cfg: FoxhuntConfig) -> list[FoldData]:
    """The purged walk-forward folds of ``cache`` (a :class:`Dataset` or a feature cache;
    ``cfg.folds``), each with the robust scaler fitted on its own training rows.
    ``fold.fold.validation_start`` / ``validation_end`` bound the rows a backtest of that fold judges.

    Example::

        for fd in api.make_folds(cache, cfg):
            print(fd.fold.index, fd.fold.validation_start, fd.fold.validation_end)
    """
    cache = _cache(cache)
    return _make_folds(cache.features(), cache.columns, cfg.folds, int(cache.meta["label_span"]))


def fold_market(
    cache: Dataset | FeatureCache, fold: FoldData, cfg: FoxhuntConfig, device: torch.device | str = "cpu"
) -> MarketTensors:
    """Every row of ``cache`` as tensors on ``device``, features normalised with ``fold``'s scaler:
    what the environment steps over.

    Example::

        market = api.fold_market(cache, api.make_folds(cache, cfg)[0], cfg)
        market.features.shape  # [rows, state feature columns]
    """
    return market_tensors(
        _cache(cache),
        fold,
        vol_window=cfg.env.plan.barrier.vol_window,
        device=device,
        overrides=cfg.instrument,
    )


# --- policies -----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class RowContext:
    """What a policy knows of the N rows it acts on besides the states (tensors ``[N]``)."""

    index: Tensor
    """int64: the row of the cache each episode is at."""
    position: Tensor
    """float64: signed contracts held."""
    market: MarketTensors
    """The fold's market (normalised features, prices), for lookups by row."""

    def feature(self, column: str) -> Tensor:
        """The normalised value of state feature ``column`` (e.g. ``"ofi.l1_imbalance_ema_slow"``) at these
        rows: the same number the state's slot holds."""
        try:
            j = self.market.feature_columns.index(column)
        except ValueError:
            raise KeyError(f"{column!r} is not a state feature column (see STATE_LAYOUT.columns)") from None
        return self.market.features[self.index, j]

    @property
    def mid(self) -> Tensor:
        """The price (mid of the book, or the bar's close) at these rows."""
        return self.market.mid[self.index]


def _policy_name(fn: Callable[..., Any]) -> str:
    """How errors and results name a custom policy: its qualified name (a lambda's too), else its repr."""
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def check_actions(out: Any, n: int, sizes: Sequence[int], name: str) -> Tensor:
    """A custom policy's answer for ``n`` rows as ``[n, 4]`` int64 branch indices, or a
    :class:`PolicyError` naming policy ``name`` and what is wrong with it, before the env steps.

    Accepted: ``[n]`` directions or ``[n, 4]`` branch indices (``sizes`` per branch), of an integer
    dtype (a tensor, numpy array or list), each value in ``0 .. size - 1``. Refused: booleans (a
    mask read as 0/1 would trade Short/Hold, not what a mask means), floats (a score is not an
    action), any other shape, a value out of range (it would step the env with a meaningless
    action and fail, if at all, only when the run's metrics are computed).

    Example::

        api.check_actions(torch.tensor([2, 3]), 2, (4, 3, 3, 3), "mine")  # [[2], [3]]: Long, Flat
        api.check_actions(torch.tensor([True, False]), 2, (4, 3, 3, 3), "mine")  # PolicyError
    """
    where = f"policy {name}"
    try:
        out = torch.as_tensor(out)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise PolicyError(
            where, f"returned a {type(out).__name__}, not a tensor of actions ({exc})", _ACTIONS_FIX
        ) from None
    if out.dtype == torch.bool:
        raise PolicyError(
            where,
            f"returned booleans (shape {list(out.shape)}): a mask is not a direction (False, True would "
            "read as Short, Hold)",
            "map the mask to directions, e.g. torch.where(mask, api.Direction.LONG, api.Direction.FLAT)",
        )
    if out.dtype.is_floating_point or out.dtype.is_complex:
        raise PolicyError(
            where,
            f"returned {out.dtype} values: actions are integer indices",
            "return integer directions (api.Direction values) or branch indices, "
            "e.g. torch.where(score > 0, api.Direction.LONG, api.Direction.SHORT)",
        )
    width = len(sizes)
    if out.shape == (n,):
        limits, what = sizes[:1], "directions"
    elif out.shape == (n, width):
        limits, what = sizes, "branch indices"
    else:
        raise PolicyError(
            where,
            f"returned shape {list(out.shape)} for {n} rows",
            f"return [{n}] directions or [{n}, {width}] branch indices ({', '.join(BRANCHES)})",
        )
    cols = out.reshape(n, -1).to(torch.int64)
    for j, size in enumerate(limits):  # one host sync per branch and step: a custom policy's price
        lo, hi = int(cols[:, j].min()), int(cols[:, j].max())
        if lo < 0 or hi >= size:
            bad = int(cols[:, j][(cols[:, j] < 0) | (cols[:, j] >= size)][0])
            raise PolicyError(
                where,
                f"returned {BRANCHES[j]} {bad} in its {what}: the {BRANCHES[j]} branch takes 0..{size - 1}"
                + (f" ({', '.join(f'{d.value} {d.name}' for d in Direction if d < size)})" if j == 0 else ""),
                _ACTIONS_FIX,
            )
    return cols


_ACTIONS_FIX = "return [N] directions (api.Direction values) or [N, 4] branch indices (module docs)"


def _user_policy(fn: UserPolicy, cfg: FoxhuntConfig) -> Policy:
    """``fn(states, rows)`` as the backtester's ``(states, env) -> [N, 4]`` policy; every answer is
    checked (:func:`check_actions`) before the env steps with it."""
    full = cfg.env.branches.magnitude - 1
    order, urgency = int(OrderType.MARKET), int(Urgency.NORMAL)
    name = _policy_name(fn)

    def policy(obs: Tensor, env: TradingEnv) -> Tensor:
        s = env.state
        n = obs.shape[0]
        answer = fn(obs, RowContext(index=s.row, position=s.account.position, market=env.market))
        out = check_actions(answer, n, env.codec.sizes, name).to(obs.device)
        if out.shape[1] == 1:  # directions: a full-size market order of normal urgency
            a = torch.empty(n, len(BRANCHES), dtype=torch.int64, device=obs.device)
            for i, value in enumerate((out[:, 0], full, order, urgency)):  # BRANCHES order
                a[:, i] = value
            return a
        return out

    return policy


class TrainedAgent:
    """A trained checkpoint (or its weights-only export) as a greedy policy.

    ``cfg`` is the checkpoint's own resolved config, ``fold`` and ``epoch`` where it was saved,
    ``scaler`` the fold's normaliser when the export stored one (else None). It acts on states
    (:meth:`act`) and backtests like any policy (:func:`backtest` judges it on its own fold).
    """

    def __init__(
        self, path: str | Path, cfg: FoxhuntConfig | None = None, device: torch.device | str = "cpu"
    ) -> None:
        from foxhunt.policy.checkpoint import read_checkpoint_meta
        from foxhunt.policy.trained import CheckpointPolicy

        self.path = Path(path)
        self._checkpoint = CheckpointPolicy(self.path, cfg if cfg is not None else load_config())
        self.cfg: FoxhuntConfig = self._checkpoint.cfg
        self.fold: int = self._checkpoint.fold
        self.epoch: int = self._checkpoint.epoch
        self.value: str = self._checkpoint.value
        meta = read_checkpoint_meta(self.path)
        self.scaler = RobustScaler.from_dict(meta["normaliser"]) if "normaliser" in meta else None
        self.device = torch.device(device)
        self._greedy: Policy | None = None

    def policy(self, device: torch.device | str) -> Policy:
        """The backtester's policy on ``device`` (a fresh agent holding the checkpoint's weights)."""
        return self._checkpoint.policy(device)

    def act(self, states: Tensor) -> Tensor:
        """Greedy ``[N, 4]`` branch actions for ``[N, W]`` states (direction, magnitude, order type,
        urgency).

        Example::

            agent = api.load_policy(api.checkpoint_path("run", 0))
            agent.act(torch.zeros(5, STATE_LAYOUT.width))[:, 0]  # directions
        """
        if self._greedy is None:
            self._greedy = self.policy(self.device)
        return self._greedy(states.to(self.device), None).actions  # type: ignore[arg-type, union-attr]


def load_policy(
    path: str | Path, cfg: FoxhuntConfig | None = None, device: torch.device | str = "cpu"
) -> TrainedAgent:
    """Load a checkpoint (``api.checkpoint_path(RUN, k)``: the one the run reports) or a weights-only
    export as a :class:`TrainedAgent`. ``cfg`` only matters for an old checkpoint without a stored config.

    Example::

        agent = api.load_policy(api.checkpoint_path("run", 1))
        result = api.backtest(data, agent)  # on its own fold, with its own config
    """
    return TrainedAgent(path, cfg, device)


def load_committee(paths: Sequence[str | Path], cfg: FoxhuntConfig | None = None) -> CommitteePolicy:
    """Several checkpoints (or exports) of one fold as one greedy policy: each branch the argmax of
    their mean E[Q] (:mod:`foxhunt.agent.committee`; ``foxhunt backtest`` with ``--checkpoint``
    repeated). :func:`backtest` judges it on its fold with the first member's config.

    Example::

        runs = [f"runs/seeds/seed{s}" for s in (7, 8, 9)]
        committee = api.load_committee([api.checkpoint_path(r, 0, "last") for r in runs])
        api.backtest(data, committee).metrics["net_pnl"]
    """
    from foxhunt.policy.trained import CommitteePolicy

    return CommitteePolicy(paths, cfg if cfg is not None else load_config())


def checkpoint_path(run_dir: str | Path, fold: int, which: str | None = None) -> Path:
    """The checkpoint of ``fold`` in a training run folder (``foxhunt train --out``, or the ``foxhunt
    run`` folder holding it in ``train/``): by default the one the run reports (``folds.json``'s
    ``checkpoint_file``: ``best`` where an epoch was selected, ``last`` under ``train.selection =
    last``, the default profile's); ``which`` "best" or "last" names one.

    Example::

        api.checkpoint_path("runs/main", 0)  # .../train/checkpoints/fold0/last.safetensors (smoke)
    """
    from foxhunt.policy.checkpoint import reported_checkpoint
    from foxhunt.policy.store import CheckpointStore

    if which not in (None, "best", "last"):
        raise ValueError(f"which must be None (the reported one), 'best' or 'last', got {which!r}")
    run = Path(run_dir)
    if not (run / "checkpoints").is_dir() and (run / "train" / "checkpoints").is_dir():
        run = run / "train"  # a `foxhunt run` folder: its training run
    if which is None:
        return reported_checkpoint(run, fold)
    store = CheckpointStore(run, ring=1)
    return store.paths.best(fold) if which == "best" else store.paths.last(fold)


# --- backtest, train, export --------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class BacktestResult:
    """One policy judged on one fold's validation rows."""

    policy: str
    fold: int
    metrics: dict[str, Any]
    """The headline metrics (net/gross PnL, costs, Sharpe, drawdown, trades, ...: ``METRIC_KEYS``)."""
    implausible_reasons: list[str]
    """Why the result looks too good to be true (empty: plausible)."""
    all_metrics: dict[str, Any]
    """Every metric of :func:`foxhunt.backtest.metrics.compute_metrics`, and ``execution``: how the policy
    entered its trades and what its fills cost (:mod:`foxhunt.backtest.execution`, docs/execution.md)."""
    record: StepRecord
    """The per-step record ``[episodes, steps]``."""

    def equity(self) -> np.ndarray:
        """Cumulative net PnL per step, all validation windows summed."""
        return equity_curve(self.record)


def backtest(
    data: Dataset,
    policy: UserPolicy | ScriptedPolicy | str | TrainedAgent | CommitteePolicy,
    *,
    cfg: FoxhuntConfig | None = None,
    fold: int | FoldData | None = None,
    device: torch.device | str = "cpu",
) -> BacktestResult:
    """Judge ``policy`` on the validation rows of ``fold`` of ``data`` with the environment, costs and
    metrics of ``foxhunt backtest``. ``data`` is the :class:`Dataset` :func:`build_features` returned:
    anything else (a cache from :func:`open_features`, a dataset built or altered by hand, fold settings
    other than those the guard checked) is refused in one line, as :func:`train` refuses it, so no
    result is reported on features the leak guard has not passed.

    ``policy`` is a callable ``(states, rows) -> actions`` (module docs), a scripted policy
    (``"flat"``, ``"long"``, ``"short"``, ``"random"``, ``"oracle"``), a :class:`TrainedAgent` or a
    committee (:func:`load_committee`), which default ``cfg`` to their own config and ``fold`` to the
    fold they were trained on.

    Example::

        def momentum(states, rows):
            up = rows.feature("market.ret_lag1") > 0
            return torch.where(up, api.Direction.LONG, api.Direction.FLAT)

        r = api.backtest(data, momentum, cfg=cfg, fold=0)
        r.metrics["net_pnl"], r.metrics["trades"], r.implausible_reasons
    """
    from foxhunt.policy.trained import CommitteePolicy

    trained = isinstance(policy, TrainedAgent | CommitteePolicy)
    if trained:
        cfg = cfg if cfg is not None else policy.cfg
        fold = fold if fold is not None else policy.fold
    if cfg is None or fold is None:
        raise FoxhuntError(
            "backtest", "a policy other than a trained agent needs cfg and fold", "pass cfg=... and fold=k"
        )
    cache = admit(data, cfg, Use.BACKTEST).cache
    if isinstance(fold, FoldData):
        fd = fold
    else:
        folds = make_folds(cache, cfg)
        if not 0 <= fold < len(folds):
            raise FoxhuntError("fold", f"fold {fold} does not exist", f"use 0..{len(folds) - 1}")
        fd = folds[fold]
    k = fd.fold.index
    if isinstance(policy, str) and not isinstance(policy, ScriptedPolicy):
        try:
            policy = ScriptedPolicy(policy)
        except ValueError:
            raise FoxhuntError(
                "policy", f"unknown scripted policy {policy!r}", "use flat, long, short, random or oracle"
            ) from None
    if isinstance(policy, ScriptedPolicy):
        seed = stream_seed(cfg.run.seed, Stream.SCRIPTED_POLICY, k)  # as foxhunt backtest
        name, pol = policy.value, scripted(policy, cfg.env, seed=seed)
    elif trained:
        name, pol = policy.value, policy.policy(device)
    else:
        name, pol = getattr(policy, "__name__", "custom"), _user_policy(policy, cfg)
    market = fold_market(cache, fd, cfg, device)
    rec = evaluate(market, cfg.env, fd.fold.validation_start, fd.fold.validation_end, pol)
    metrics, reasons = summarise(rec, bars_per_year(cache, market.instrument), cfg.env)
    return BacktestResult(
        policy=name,
        fold=k,
        metrics={key: metrics[key] for key in METRIC_KEYS},
        implausible_reasons=reasons,
        all_metrics=metrics,
        record=rec,
    )


def train(
    data: Dataset,
    cfg: FoxhuntConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    log: Callable[[str], None] = print,
    on_epoch: Callable[[int, int, dict[str, float]], None] | None = None,
) -> list[dict[str, Any]]:
    """Walk-forward training of a fresh agent per fold (``foxhunt train``) on ``data``, the
    :class:`Dataset` :func:`build_features` returned: checkpoints under ``out_dir/checkpoints``,
    diagnostics, ``folds.json``; returns each fold's validation metrics. Anything else (a cache
    from :func:`open_features`, a dataset built or altered by hand, fold settings other than those
    the guard checked) is refused before anything is written: nothing trains on data the leak guard
    has not passed.
    A folder that already holds a run is refused unless ``overwrite`` (or ``resume``) is given.
    ``on_epoch(fold, epoch, row)`` is called after every epoch (e.g. a tracked run's hook:
    ``with foxhunt.tracking.tracked_run("nb", cfg) as t: api.train(..., on_epoch=t.epoch_hook())``).

    Example::

        folds = api.train(api.build_features(files, cfg, "cache"), cfg, "run")
        agent = api.load_policy(api.checkpoint_path("run", 0))
    """
    return train_folds(data, cfg, out_dir, resume=resume, overwrite=overwrite, log=log, on_epoch=on_epoch)


def export_weights(
    checkpoint: str | Path, out: str | Path, *, cache: Dataset | FeatureCache | str | Path | None = None
) -> Path:
    """Write the weights-only export of ``checkpoint`` as ``out`` (``out.safetensors`` + ``out.json``):
    network weights, signals and metadata, no replay or optimizer state. With ``cache`` (the one the
    run trained on) the checkpoint fold's normaliser and the data's instrument are stored too.
    Returns the safetensors path.

    Example::

        path = api.export_weights("run/checkpoints/fold0/best.safetensors", "fold0", cache=cache)
        path.stat().st_size  # a few hundred kB
    """
    from foxhunt.data.instrument import instrument_of_cache
    from foxhunt.policy.checkpoint import export_weights as export
    from foxhunt.policy.trained import CheckpointPolicy

    scaler = instrument = None
    if cache is not None:
        trained = CheckpointPolicy(checkpoint, load_config())
        opened = (
            _cache(cache) if isinstance(cache, Dataset | FeatureCache) else load_cache(cache, trained.cfg)
        )
        scaler = make_folds(opened, trained.cfg)[trained.fold].scaler
        instrument = instrument_of_cache(opened.meta, trained.cfg.instrument).to_dict()
    return export(checkpoint, out, scaler=scaler, instrument=instrument)
