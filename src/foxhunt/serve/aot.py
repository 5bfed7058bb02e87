"""The decision side ahead of time: the served env step and greedy forward exported with
``torch.export`` and compiled by AOTInductor into a shared library, called without Python's
``torch.compile`` machinery (no Dynamo frame, no guards).

The step is :meth:`TradingEnv.transition` followed by :meth:`TradingEnv.observe` of the next state,
traced from the env's own code on a :class:`TradingEnv` whose tensors are the exported function's
inputs (:func:`_env_view`): the market tables the step reads, the env's per-row tables (``quotes``,
``vol``, ``regime``), the state's tensors, the aux predictions, the actions and the three sizing
inputs, in one flat list (:func:`step_inputs`). Every market table has the market's row count, one
shared dynamic dimension (``rows >= 2``), so a market growing a row a close runs the same library.
It returns the step's result, the next state's tensors and the observation, flat
(:meth:`AotStep.__call__` rebuilds them).

The forward is the greedy policy (one agent's ``policy(obs, GREEDY)`` or the committee's
``committee_decision``) at batch 1, the network's weights and the acting statistics baked into the
library as constants.

Each library is kept on disk under a key hashing everything its graph depends on (the code that
traced it: :func:`foxhunt.jit.package_digest` of the whole package, as the feature cache's key and
numba's kernels are stamped, so a library compiled by other code is never loaded; the env config,
which optional market tables exist, the instrument, the feature and state widths, the torch version;
for the forward, every weight and statistic and the network config), written to a temporary name and
renamed, so a second ``foxhunt serve`` of the same checkpoint loads it in well under a second.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from foxhunt.agent.actor import Mode, PolicyOut
from foxhunt.agent.agent import Agent
from foxhunt.agent.build import AnyAgent
from foxhunt.agent.committee import committee_decision
from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.costs import Quote
from foxhunt.env.state import Portfolio
from foxhunt.env.trades import ClosedTrades
from foxhunt.jit import PACKAGE, package_digest

_REQUIRED = ("features", "mid", "high", "low")  # the market tables the step and observe read
_OPTIONAL = ("volume", "bid_size", "ask_size")  # read where the market has them (None: a graph without)
_INDUCTOR: dict[str, object] = {
    # A 0-d weight (PopArt's mean, a signal) stays a tensor rather than becoming a literal: Inductor's
    # pow of a literal fails to lower (torch 2.13).
    "always_keep_tensor_constants": True,
    # Every buffer of a call, outputs included, cut from one allocation: ~100 one-element buffers a
    # step were ~100 allocations (the step's call 164 -> 116 us, the forward's 109 -> 83 us).
    "memory_planning": True,
    "memory_pool": "combined",
}
"""Inductor options of both libraries."""

POLICY_INDUCTOR: dict[str, object] = {
    **_INDUCTOR,
    # The network's ~25 matrix products at batch 1 as Inductor's C++ GEMM templates where they time
    # faster than ATen's addmm (whose dispatch dominates at this size): the forward's call 85 -> 45 us,
    # for a cold compile of ~100 s instead of ~13 s (once per checkpoint: the library is cached).
    "max_autotune": True,
    "max_autotune_gemm_backends": "CPP,ATEN",
}
"""Inductor options of the forward's library."""

_RESULT_FIELDS = [f.name for f in dataclasses.fields(StepResult)]
_POLICY_FIELDS = [f.name for f in dataclasses.fields(PolicyOut)]


def cache_dir() -> Path:
    """Where compiled libraries are kept (``FOXHUNT_AOT_CACHE``, else ``~/.cache/foxhunt/aot``)."""
    root = os.environ.get("FOXHUNT_AOT_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "foxhunt" / "aot"


class _MarketView:
    """What the step and ``observe`` read of a :class:`~foxhunt.env.market.MarketTensors`: its row
    tables (the exported function's inputs) and instrument. ``rows`` stays the row axis' symbol rather
    than a Python int, so the exported graph keeps the row count dynamic; any other attribute is absent
    (a step that read one would fail to export rather than read something stale)."""

    def __init__(self, tables: dict[str, Tensor | None], instrument: object) -> None:
        for k, v in tables.items():
            setattr(self, k, v)
        self.instrument = instrument

    @property
    def rows(self):  # noqa: ANN201 (a SymInt while exported)
        return self.mid.shape[0]

    @property
    def device(self) -> torch.device:
        return self.mid.device


def _env_view(
    env: TradingEnv,
    tables: dict[str, Tensor | None],
    quotes: Quote,
    vol: Tensor,
    regime: Tensor,
    state: Portfolio,
    aux: Tensor,
) -> TradingEnv:
    """A :class:`TradingEnv` with ``env``'s config, codec, units and bounds and the given tensors (its
    ``__init__`` and market setter skipped: the per-row tables are inputs, computed by the real env)."""
    view = TradingEnv.__new__(TradingEnv)
    view.cfg, view.codec, view.units, view.bounds = env.cfg, env.codec, env.units, env.bounds
    view.device, view.dtype = env.device, env.dtype
    view._market = _MarketView(tables, env.market.instrument)  # type: ignore[assignment]
    view.quotes, view.vol, view.regime = quotes, vol, regime
    view.state, view.aux = state, aux
    return view


def _tables(env: TradingEnv) -> dict[str, Tensor | None]:
    m = env.market
    return {k: getattr(m, k) for k in (*_REQUIRED, *_OPTIONAL)}


def step_inputs(
    env: TradingEnv,
    actions: Tensor,
    d_conv: Tensor,
    m_conv: Tensor,
    q_var: Tensor,
    tables: Sequence[Tensor] | None = None,
    state: Sequence[Tensor] | None = None,
) -> list[Tensor]:
    """The exported step's flat inputs: the present market tables, quotes, vol, regime, the state's
    tensors, aux, actions and the sizing inputs (``tables`` and ``state``: where the caller has them)."""
    if tables is None:
        tables = [t for t in _tables(env).values() if t is not None]
    q = env.quotes
    return [
        *tables,
        q.bid,
        q.ask,
        q.known,
        env.vol,
        env.regime,
        *(env._state().tensors() if state is None else state),
        env.aux,
        actions,
        d_conv,
        m_conv,
        q_var,
    ]


def _shape_of(x: object) -> object:
    """The nesting of a state's parts (a class and its children's shapes; None for a tensor), for
    :func:`_build`: the state rebuilt from the library's flat outputs without ``dataclasses.fields``."""
    if isinstance(x, Tensor):
        return None
    if isinstance(x, tuple):
        return (type(x), [_shape_of(v) for v in x])
    return (type(x), [_shape_of(getattr(x, f.name)) for f in dataclasses.fields(x)])  # type: ignore[arg-type]


def _build(shape: object, it) -> object:  # noqa: ANN001
    if shape is None:
        return next(it)
    cls, parts = shape  # type: ignore[misc]
    return cls(*[_build(p, it) for p in parts])


class _Step(torch.nn.Module):
    """The step as a function of flat tensors (what ``torch.export`` traces)."""

    def __init__(self, env: TradingEnv) -> None:
        super().__init__()
        self.env = env  # its config, codec, units and bounds: constants of the graph
        self.present = [k for k, v in _tables(env).items() if v is not None]
        self.optional = {k: None for k, v in _tables(env).items() if v is None}
        self.n_state = len(env._state().tensors())

    def forward(self, *flat: Tensor) -> list[Tensor]:
        it = iter(flat)
        tables: dict[str, Tensor | None] = {k: next(it) for k in self.present}
        tables.update(self.optional)
        quotes = Quote(next(it), next(it), next(it))
        vol, regime = next(it), next(it)
        state = self.env._state().map(lambda _t: next(it))
        aux, actions, d_conv, m_conv, q_var = (next(it) for _ in range(5))
        view = _env_view(self.env, tables, quotes, vol, regime, state, aux)
        new, result = view.transition(state, actions, d_conv, m_conv, q_var, True)
        view.state = new
        obs = view.observe()
        return [*_result_leaves(result), *new.tensors(), obs]


def _result_leaves(r: StepResult) -> list[Tensor]:
    out: list[Tensor] = []
    for name in _RESULT_FIELDS:
        v = getattr(r, name)
        out.extend(v if isinstance(v, tuple) else [v])
    return out


def _result_of(leaves: Sequence[Tensor]) -> tuple[StepResult, int]:
    it = iter(leaves)
    kw = {}
    for name in _RESULT_FIELDS:
        kw[name] = ClosedTrades(*(next(it) for _ in ClosedTrades._fields)) if name == "trades" else next(it)
    return StepResult(**kw), len(_RESULT_FIELDS) - 1 + len(ClosedTrades._fields)


def _digest(*parts: object) -> str:
    """A library's cache key: the package's code fingerprint, then ``parts`` (tensors by their bytes)."""
    h = hashlib.sha256()
    h.update(package_digest(str(PACKAGE)) + b"\0")
    for p in parts:
        if isinstance(p, Tensor):
            t = p.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            h.update(repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def _signature(t: Tensor) -> tuple:
    return (str(t.dtype), tuple(t.shape[1:]), t.device.type)


def _compile(
    module: torch.nn.Module,
    args: tuple,
    path: Path,
    options: dict[str, object],
    dynamic_shapes: object = None,
) -> float:
    """Export ``module`` at ``args`` and compile it into ``path`` (atomically); the seconds it took."""
    from torch._inductor import aoti_compile_and_package
    from torch._inductor import config as inductor_config

    t0 = time.perf_counter()
    with torch.no_grad():
        ep = torch.export.export(module, args, dynamic_shapes=dynamic_shapes, strict=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".pt2", dir=path.parent)
        os.close(fd)
        try:
            # Inductor's autotune tables (a block per matrix product timed, 21 for a forward) are not
            # the user's business: kept off the terminal (an output setting, not part of the key).
            # A copy: torch adds ``aot_inductor.package`` to the dict it is given, and the options are
            # part of every later key (mutated, a process's second Decider missed the cache).
            with inductor_config.patch(autotune_num_choices_displayed=0):
                aoti_compile_and_package(ep, package_path=tmp, inductor_configs=dict(options))
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return time.perf_counter() - t0


def _load(path: Path):  # noqa: ANN202
    from torch._inductor import aoti_load_package

    return aoti_load_package(str(path))


class AotStep:
    """The served env step from a compiled library (module docstring); built for the env's config and
    market layout at the first call, loaded from the cache where it was built before."""

    def __init__(self, env: TradingEnv, inputs: list[Tensor], cache: Path | None = None) -> None:
        m = env.market
        self.present = [k for k, v in _tables(env).items() if v is not None]
        key = _digest(
            "step",
            torch.__version__,
            _INDUCTOR,
            env.cfg.model_dump_json(),
            m.instrument,
            env.dtype,
            self.present,
            [_signature(t) for t in inputs],
        )
        self.path = (cache or cache_dir()) / f"step-{key}.pt2"
        self.compile_seconds = 0.0
        if not self.path.exists():
            rows = torch.export.Dim("rows", min=2)  # every market table's row count: one symbol
            n_rows = len(self.present) + 5  # the tables, the quote's three, vol and regime
            shapes = [{0: rows} if i < n_rows else None for i in range(len(inputs))]
            self.compile_seconds = _compile(_Step(env), tuple(inputs), self.path, _INDUCTOR, (tuple(shapes),))
        t0 = time.perf_counter()
        self.model = _load(self.path)
        self.load_seconds = time.perf_counter() - t0
        self.run = self.model.loader.run
        self.shape = _shape_of(env._state())
        self.last: tuple[Portfolio, list[Tensor]] | None = None  # the state it returned, flat

    def inputs(
        self, env: TradingEnv, actions: Tensor, d_conv: Tensor, m_conv: Tensor, q_var: Tensor
    ) -> list[Tensor]:
        """:func:`step_inputs`, the state's tensors taken from the last call's outputs where the env's
        state is the one that call returned."""
        state, last = env._state(), self.last
        flat = last[1] if last is not None and last[0] is state else state.tensors()
        tables = [getattr(env.market, k) for k in self.present]
        return step_inputs(env, actions, d_conv, m_conv, q_var, tables=tables, state=flat)

    def __call__(self, inputs: list[Tensor]) -> tuple[StepResult, Portfolio, Tensor]:
        """``(result, next state, observation)`` of the step of ``inputs`` (:meth:`inputs`)."""
        out = self.run(inputs)
        result, n = _result_of(out)
        flat = out[n:-1]
        state: Portfolio = _build(self.shape, iter(flat))  # type: ignore[assignment]
        self.last = (state, flat)
        return result, state, out[-1]


class _Greedy(torch.nn.Module):
    def __init__(self, members: Sequence[AnyAgent]) -> None:
        super().__init__()
        self.members = list(members)
        # the weights; the rest lifted as constants (a PPO member has no PopArt: agent.ppo)
        self.nets = torch.nn.ModuleList(m.policy.net for m in members)
        self.popart = torch.nn.ModuleList(m.policy.popart for m in members if isinstance(m, Agent))

    def forward(self, obs: Tensor) -> tuple[Tensor, ...]:
        if len(self.members) == 1:
            out = self.members[0].policy(obs, Mode.GREEDY)
        else:
            out = committee_decision([m.policy for m in self.members], obs)
        return tuple(getattr(out, f) for f in _POLICY_FIELDS)


def policy_key(members: Sequence[AnyAgent], obs: Tensor) -> str:
    """:class:`AotPolicy`'s library key: everything the export bakes in. The weights and running
    signals (the state dicts), the configs, branch sizes, the entry penalty, and the curriculum's
    held branches with the choice they are held at (``agent.curriculum``: a checkpoint loaded at an
    early epoch holds branches that a later one does not, with the same weights and config)."""
    buf = io.BytesIO()
    torch.save([m.policy.state_dict() for m in members], buf)
    return _digest(
        "policy",
        torch.__version__,
        POLICY_INDUCTOR,
        [m.cfg.model_dump_json() for m in members],
        [repr(m.policy.sizes) for m in members],
        buf.getvalue(),
        _signature(obs),
        tuple(obs.shape),
        [m.policy.entry_penalty if isinstance(m, Agent) else None for m in members],
        [(m.policy.held.tolist(), m.policy.held_at.tolist()) for m in members],
    )


class AotPolicy:
    """The greedy forward at batch 1 from a compiled library, the weights baked in (module docstring)."""

    def __init__(self, members: Sequence[AnyAgent], obs: Tensor, cache: Path | None = None) -> None:
        self.path = (cache or cache_dir()) / f"policy-{policy_key(members, obs)}.pt2"
        self.compile_seconds = 0.0
        if not self.path.exists():
            self.compile_seconds = _compile(_Greedy(members), (obs,), self.path, POLICY_INDUCTOR)
        t0 = time.perf_counter()
        self.model = _load(self.path)
        self.load_seconds = time.perf_counter() - t0
        self.run = self.model.loader.run

    def __call__(self, obs: Tensor) -> PolicyOut:
        return PolicyOut(*self.run([obs]))
