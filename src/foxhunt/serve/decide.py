"""The decision side of a served row close: the greedy policy's forward and the environment's step of
the one served episode, the backtest's own code at a batch of one.

At a close the service steps the decision taken on the row before (:meth:`Decider.step`) and decides
on the new row (:meth:`Decider.decide`). Both run the code ``foxhunt backtest --checkpoint`` runs:
the agent's greedy ``policy`` (``Agent.policy(states, Mode.GREEDY)``) and the environment's pure
transition (:func:`foxhunt.env.graph.advance`: ``TradingEnv.transition`` written back into the
state's tensors, then ``observe``). Eagerly each is a few hundred single-element torch operations
(the step about a thousand), and at one episode their cost is the dispatch of those operations, not
arithmetic: on the shared 2-core CPU box the step took ~8 ms and the forward ~5 ms a close.

``compile=True`` compiles both with Inductor (C++ on the CPU) at their first calls (the first decided
row and the next: tens of seconds, docs/serve.md). What each option buys, measured there in a loop
of calls alone (one thread, the market of the ESH4 MBP-10 replay, p50 per call; inside a replay,
between the row side's work, each call costs 2-4x that):

- the step: :func:`~foxhunt.env.graph.advance` with :data:`~foxhunt.env.graph.COMPILE_OPTIONS`
  (~0.5 ms compiled against ~8 ms eager). ``cpp_wrapper``: the compiled graph's calls and its ~240
  one-element buffers (``realize_reads_threshold=1`` stores every shared intermediate) are made in
  C++ rather than by Python, 1.3-2 ms -> 0.5 ms a step. The market's row count is marked dynamic
  before the first call, so the market growing by a row each close compiles nothing more.
- the forward: ``cpp_wrapper`` likewise (0.9 -> 0.6 ms), and the guards on the network's modules
  dropped (``skip_guard_on_all_nn_modules_unsafe``): checking every parameter before every call cost
  ~0.3-0.5 ms; safe here because a served agent is never trained or reloaded, and each Decider's
  forward is compiled from a code object of its own (:func:`_own_code`). Freezing the weights
  (``freezing``) bought nothing more at this size and defeats Inductor's on-disk cache.
- both: only the guards :func:`served_guards` keeps. Dynamo checked ~1,700 guards before each step
  (every constant of the env's config, every module global the transition reads, five markers and
  an aliasing check per tensor, a Python lambda per market table) and ~250 before each forward; a
  Decider's config and globals cannot change under it (it refuses an env of another config), and
  its step, like its forward, is compiled from a code object of its own, so another Decider
  (another config) compiles its own. What is kept still catches what can change: each input
  tensor's dtype and static sizes (a new compile, never a wrong one) and the market object's
  instrument. In a loop of calls alone on the shared box (CPU time, p50, four runs under a load of
  2-5): the step 0.9-2.4 -> 0.5-1.5 ms, the forward 0.7-1.7 -> 0.5-1.5 ms (within the machine's
  noise; docs/serve.md).

``DecidePath.AOT`` (:mod:`foxhunt.serve.aot`) runs the same step and forward ahead of time: each
exported with ``torch.export`` (the step traced from ``TradingEnv.transition`` and ``observe`` on
the env's own code, the market's row count one dynamic dimension) and compiled by AOTInductor into
a shared library kept on disk (~20 s for the step, ~100 s for the forward on the 2-core box once;
a later start loads both in under a second). A call is one C++ call with no Dynamo frame, no guards
and one allocation for its buffers; what the library cannot check is checked here: the env's config
(refused if another) and the market's instrument and optional tables (another library built).

Exactness. The step is float64 elementwise arithmetic, which Inductor's C++ computes as the eager
kernels do (no fused multiply-add, no fast-math reassociation): its results and the next state are
bit for bit the eager step's (tests/serve/test_decide.py). The forward is float32 matrix products
and softmaxes, whose summation order Inductor may change: its convictions and aux predictions can
differ from the eager forward's in the last bits, as the eager forward at batch 1 already differs
from the backtest's at a batch of every window (in 929 of 1,500 outputs on 300 random states); the
actions (an argmax) and the positions and fills the decisions.csv invariant compares stay the
backtest's (the same tests, on the synthetic market).

A committee (several exports of one fold, ``foxhunt serve --checkpoint A --checkpoint B ...``)
decides with :func:`~foxhunt.agent.committee.committee_decision`, the backtest's
:class:`~foxhunt.policy.trained.CommitteePolicy`: the argmax of the members' mean E[Q], the sizing
inputs and aux predictions averaged over them; one member is that agent's greedy policy.

Compiled or not, the network is put in eval mode once (the greedy policy then skips its two passes
over the modules per call, ``agent.actor._eval_mode``) and the observation the step returns is the one the
decision reads, not assembled a second time (both exact; ~1 ms a close eagerly).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
import types
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from foxhunt.agent.actor import Mode, PolicyOut
from foxhunt.agent.build import AnyAgent
from foxhunt.agent.committee import committee_decision
from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.graph import COMPILE_OPTIONS, advance, own_storage
from foxhunt.errors import FoxhuntError, setting
from foxhunt.serve.aot import AotPolicy, AotStep, step_inputs
from foxhunt.serve.config import DecidePath

_KEPT_GUARDS = frozenset({"TENSOR_MATCH", "GLOBAL_STATE", "DEFAULT_DEVICE", "TORCH_FUNCTION_MODE_STACK"})
_MARKET = "L['env']._market"  # the guards on the market object and what hangs off it
_ON_MARKET = frozenset({"ID_MATCH", "EQUALS_MATCH", "TYPE_MATCH", "TENSOR_MATCH"})


def served_guards(entries: list) -> list[bool]:
    """The guards a served step or forward keeps (``guard_filter_fn``; the module docstring says why):
    every tensor's (dtype, device, static sizes and strides: a tensor that differs compiles anew),
    the ambient state (grad mode, default device, function modes) and whatever the step reads off
    the market object besides its tensors (its instrument: a new stream's market is checked). Dropped:
    the constants of the env's config, the modules' globals and the dataclasses' fields (fixed for
    the life of a Decider, whose functions have code objects of their own: :func:`_own_code`), the
    dynamic-dimension markers, the ``2 <= rows`` shape checks (a step reads rows r and r + 1) and the
    in-place aliasing checks (the stepped state's tensors have their own storage: ``own_storage``);
    and everything on the network's modules (``skip_guard_on_all_nn_modules_unsafe``)."""
    modules = torch.compiler.skip_guard_on_all_nn_modules_unsafe(entries)
    return [
        keep and (e.guard_type in _KEPT_GUARDS or (e.name.startswith(_MARKET) and e.guard_type in _ON_MARKET))
        for e, keep in zip(entries, modules, strict=True)
    ]


STEP_OPTIONS: dict[str, object] = {**COMPILE_OPTIONS, "cpp_wrapper": True, "guard_filter_fn": served_guards}
"""Inductor options of the served step (the module docstring says why)."""

POLICY_OPTIONS: dict[str, object] = {"cpp_wrapper": True, "guard_filter_fn": served_guards}
"""Inductor options of the served forward (the module docstring says why)."""


def check_compilable() -> None:
    """Refuse ``serve.decide = compiled`` (or ``aot``) in one line, before anything is read, where
    Inductor has no C++ compiler: it would otherwise fail with a traceback at the first decided row,
    minutes into a replay or a live session."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:  # another torch layout: Inductor reports for itself at the first call
        return
    try:
        get_cpp_compiler()
    except RuntimeError as exc:  # torch._inductor.exc.InvalidCxxCompiler
        raise FoxhuntError(
            "serve.decide",
            f"compiled and aot need a C++ compiler for Inductor and none works here ({exc})",
            f"install g++ (or set CXX), or run with {setting('serve.decide=eager')}",
        ) from None


class Decider:
    """The greedy policy and the environment step of one served episode (module docstring).

    ``path``: eager, compiled (``torch.compile``) or aot (:mod:`foxhunt.serve.aot`). ``compile_times``:
    the seconds the first compiled step and decision took (``"step"``, ``"decide"``: Inductor's
    compile, or the ahead-of-time library's build or load, paid at the first close that steps and
    decides). ``compiled_at``: when the last of them ended (``time.perf_counter()``: a decision whose
    record came before waited for it)."""

    def __init__(self, agent: AnyAgent | Sequence[AnyAgent], path: DecidePath = DecidePath.EAGER) -> None:
        path = path.resolve(False, "cpu")  # auto without a stream to judge by: a replay's, eager
        members = [agent] if not isinstance(agent, Sequence) else list(agent)
        if not members:
            raise ValueError("a Decider needs at least one agent")
        for member in members:
            member.policy.net.eval()  # a served network never trains: the greedy mode switch is a no-op
        self.path = path
        self.members = members
        self.compile = path is not DecidePath.EAGER
        compile = path is DecidePath.COMPILED
        self.compile_times: dict[str, float] = {}
        self.compiled_at = 0.0  # time.perf_counter() when the last compile ended
        greedy: Callable[[Tensor], PolicyOut]
        if len(members) == 1:
            greedy = lambda obs: members[0].policy(obs, Mode.GREEDY)  # noqa: E731
        else:  # a committee: the argmax of the members' mean E[Q], as the backtest's CommitteePolicy
            actors = [m.policy for m in members]
            greedy = lambda obs: committee_decision(actors, obs)  # noqa: E731
        # Its own code object: Dynamo keeps compiled graphs per code object, and with the module guards
        # dropped another Decider's agent (another network) must not find this one's graphs.
        self._greedy = torch.compile(_own_code(greedy), options=POLICY_OPTIONS) if compile else greedy
        step = _own_code(advance)
        self._advance = torch.compile(step, fullgraph=True, options=STEP_OPTIONS) if compile else None
        self._owned: object = None  # the state whose tensors the compiled step writes in place
        self._env_cfg: object = None  # the config the compiled step's constants are (served_guards)
        self._next: tuple[object, object, object, Tensor] | None = None  # (state, aux, market, obs)
        self._aot_step: AotStep | None = None  # built (or loaded) at the first step (DecidePath.AOT)
        self._aot_policy: AotPolicy | None = None  # at the first decision
        self._market_layout: tuple | None = None  # the instrument and optional tables it was built for

    def decide(self, env: TradingEnv) -> PolicyOut:
        """The greedy decision on the env's current row."""
        state = env._state()
        nxt = self._next
        if nxt is not None and nxt[0] is state and nxt[1] is env.aux and nxt[2] is env.market:
            obs = nxt[3]  # the observation the step made of this very state, aux and market
        else:  # a new episode, a restored or fail-safe state, another market: assemble it
            obs = env.observe()
        if self.path is DecidePath.AOT:
            if self._aot_policy is None:
                self._aot_policy = self._timed("decide", lambda: AotPolicy(self.members, obs))
            return self._aot_policy(obs)
        return self._timed("decide", lambda: self._greedy(obs))

    def step(self, env: TradingEnv, decision: PolicyOut | Tensor) -> StepResult:
        """Step the env's episode by ``decision`` (the policy's, or fail-safe ``[1, 4]`` actions with
        neutral sizing inputs, as ``env.step(actions)`` takes them)."""
        if isinstance(decision, PolicyOut):
            env.aux = decision.aux  # seen in the next state: the one-step lag (PolicyOut.step)
            inputs = (decision.actions, decision.direction_conviction, decision.magnitude_conviction)
            q_var = decision.q_variance
        else:
            # The transition's neutral inputs (conviction 1, variance 0) given as tensors of the
            # policy's dtype: the same values, and the compiled step's one signature for both kinds
            # (three distinct tensors, as the policy's are: aliased inputs would be another signature).
            one = torch.ones(decision.shape[0], dtype=torch.float32, device=decision.device)
            inputs, q_var = (decision, one, one.clone()), torch.zeros_like(one)
        if self.path is DecidePath.AOT:
            res, obs = self._aot(env, inputs, q_var)
        elif self._advance is None:
            obs, res = env.step(*inputs, q_var)
        else:
            res, obs = self._timed("step", lambda: self._compiled_step(env, inputs, q_var))
        self._next = (env.state, env.aux, env.market, obs)
        return res

    def _aot(self, env: TradingEnv, inputs: tuple[Tensor, Tensor, Tensor], q_var: Tensor):
        self._check_config(env)
        m = env.market
        layout = (m.instrument, m.volume is None, m.bid_size is None, m.ask_size is None)
        if self._aot_step is None or layout != self._market_layout:
            # The library's graph is of one instrument (tick size, point value) and one set of tables.
            flat = step_inputs(env, *inputs, q_var)
            step = self._timed("step", lambda: AotStep(env, flat))
            self._aot_step, self._market_layout = step, layout
        res, env.state, obs = self._aot_step(self._aot_step.inputs(env, *inputs, q_var))
        return res, obs

    def _check_config(self, env: TradingEnv) -> None:
        if self._env_cfg is None:
            self._env_cfg = env.cfg
        elif env.cfg is not self._env_cfg and env.cfg != self._env_cfg:
            # Its guards check no config constant: stepping another config would step with the first.
            raise ValueError("a compiled Decider steps envs of one config; make a Decider per config")

    def _compiled_step(self, env: TradingEnv, inputs: tuple[Tensor, Tensor, Tensor], q_var: Tensor):
        assert self._advance is not None
        self._check_config(env)
        if env.state is not self._owned:  # a new episode, restored or fail-safe state: fresh tensors
            self._owned = own_storage(env)
        if "step" not in self.compile_times:
            _mark_rows_dynamic(env)
        actions, d_conv, m_conv = inputs
        return self._advance(env, env.state, actions, True, d_conv, m_conv, q_var)

    def _timed(self, what: str, call: Callable):
        """``call()``; the first call of a compiled ``what`` is timed into ``compile_times``."""
        if not self.compile or what in self.compile_times:
            return call()
        t0 = time.perf_counter()
        out = call()
        self.compiled_at = time.perf_counter()
        self.compile_times[what] = self.compiled_at - t0
        return out


_CODES = itertools.count()


def _own_code(fn: Callable) -> Callable:
    """``fn`` with a code object of its own (the same bytecode, closure and globals)."""
    code = fn.__code__.replace(co_name=f"{fn.__code__.co_name}_{next(_CODES)}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


def _mark_rows_dynamic(env: TradingEnv) -> None:
    """Mark the row axis of the market and of the env's per-row tables dynamic before the first
    compiled step: a served market grows by a row each close, and a static first compile would be
    followed by a second one (dynamic) at the next close."""
    m = env.market
    tables = [getattr(m, f.name) for f in dataclasses.fields(m)]
    tables += [*env.quotes, env.vol, env.regime]
    for t in tables:
        if isinstance(t, Tensor):
            torch._dynamo.maybe_mark_dynamic(t, 0)


__all__ = ["POLICY_OPTIONS", "STEP_OPTIONS", "Decider", "check_compilable"]
