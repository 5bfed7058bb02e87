"""The decision side of a served row close (foxhunt.serve.decide.Decider): the backtest's greedy policy
and env step at one episode, eager and Inductor-compiled, on a hand-made market that grows a row a
close as a served one does."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import Tensor

from foxhunt import api
from foxhunt.agent.actor import Mode, PolicyOut
from foxhunt.agent.agent import Agent
from foxhunt.domain.actions import Direction, OrderType, Urgency
from foxhunt.env.config import EnvConfig
from foxhunt.env.core import StepResult, TradingEnv
from foxhunt.env.market import MarketTensors
from foxhunt.serve.config import DecidePath
from foxhunt.serve.decide import Decider, served_guards
from tests.env.test_core import config
from tests.env.test_core import market as hand_market
from tests.serve import test_serve as serving
from tests.serve.test_serve import _same as _same_line
from tests.serve.test_serve import backtested, cfg, export, market, replay  # noqa: F401 (fixtures)

ROWS, START, CLOSES, NEW_EPISODE = 120, 10, 60, 30
FLAT = torch.tensor([[int(Direction.FLAT), 0, int(OrderType.MARKET), int(Urgency.NORMAL)]])
RESULT = (
    *("gross", "costs", "net", "reward", "picked", "realised_magnitude"),
    *("fills", "fill_price", "fill_costs"),
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _market() -> MarketTensors:
    """A zig-zag market with touch sizes and volume (the queue-aware fills run) and random normalised
    features (the greedy actions vary from row to row)."""
    mid = [100.0 + 0.25 * ((i * 7) % 11) for i in range(ROWS)]
    low = [m - 0.25 * (i % 3 == 0) for i, m in enumerate(mid)]
    sizes = [float(1 + (i * 5) % 9) for i in range(ROWS)]
    mk = hand_market(mid, low=low, bid_size=sizes, volume=[float((i * 3) % 7) for i in range(ROWS)])
    features = torch.randn(mk.features.shape, generator=torch.Generator().manual_seed(0))
    return dataclasses.replace(mk, features=features)


def _rows(mk: MarketTensors, n: int) -> MarketTensors:
    """The first ``n`` rows: the market a served close has (views; a new object each close)."""
    views = {f.name: getattr(mk, f.name) for f in dataclasses.fields(mk)}
    return dataclasses.replace(mk, **{k: v[:n] for k, v in views.items() if isinstance(v, Tensor)})


_CFG = config(horizon=5)
# Room for the sizing to trade a contract or more at the smallest conviction a fresh network has.
_CONTRACT = _CFG.contract.model_copy(update={"max_position": 40})
ENV = _CFG.model_copy(update={"episode_rows": 40, "contract": _CONTRACT})


@pytest.fixture(autouse=True, scope="module")
def _aot_cache(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN202
    """The ahead-of-time libraries these tests build go to a folder of their own, not the user's cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("FOXHUNT_AOT_CACHE", str(tmp_path_factory.mktemp("aot")))
    yield
    mp.undo()


def _agent() -> Agent:
    return Agent(api.config("smoke").agent, ENV.branches, seed=3, replay_capacity=16)  # acting only


def _episode(env: TradingEnv, start: int) -> None:
    """A served episode from ``start``: its rows are still to come (RowCloser._new_episode)."""
    env.reset(torch.tensor([start]))
    env.state = dataclasses.replace(env.state, end=torch.tensor([10**6]), done=torch.tensor([False]))


def _loop(step, decide, env_cfg: EnvConfig = ENV) -> tuple[list[StepResult], TradingEnv]:
    """The service's close, CLOSES times: the market grows a row, the pending decision is stepped, the
    new row decided; a fail-safe Flat at every 9th close and a new episode at close NEW_EPISODE."""
    mk = _market()
    env = TradingEnv(_rows(mk, START + 1), env_cfg)
    _episode(env, START)
    pending: PolicyOut | Tensor | None = None
    results = []
    for c in range(CLOSES):
        env.market = _rows(mk, START + 2 + c)
        if pending is not None:
            results.append(step(env, pending))
        if c == NEW_EPISODE:
            _episode(env, START + c)
        pending = FLAT.clone() if c % 9 == 8 else decide(env)
    return results, env


def _backtest_calls(agent: Agent) -> tuple[list[StepResult], TradingEnv]:
    """The loop through the calls the backtest makes: ``PolicyOut.step`` (or ``env.step(actions)``)
    and the greedy policy on ``env.observe()``."""

    def step(env: TradingEnv, d: PolicyOut | Tensor) -> StepResult:
        return (d.step(env) if isinstance(d, PolicyOut) else env.step(d))[1]

    return _loop(step, lambda env: agent.policy(env.observe(), Mode.GREEDY))


def _same(a: Tensor, b: Tensor) -> bool:
    """Equal bit for bit (NaN equal to NaN)."""
    if a.is_floating_point():
        return a.shape == b.shape and torch.allclose(a, b, rtol=0.0, atol=0.0, equal_nan=True)
    return torch.equal(a, b)


def _same_result(a: StepResult, b: StepResult) -> bool:
    return all(_same(getattr(a, f), getattr(b, f)) for f in RESULT)


def _same_state(a: TradingEnv, b: TradingEnv) -> bool:
    return all(_same(x, y) for x, y in zip(a.state.tensors(), b.state.tensors(), strict=True))


def test_a_served_decision_is_the_greedy_policy_and_switches_no_module_mode() -> None:
    """The network is put in eval mode once; after that a decision makes no pass over the modules
    (the greedy policy used to switch them to eval and back at every call: two passes over the whole
    network a close) and decides exactly as ``Agent.policy(obs, GREEDY)``."""
    agent = _agent()
    decider = Decider(agent)
    calls: list[bool] = []
    train = agent.policy.net.train
    agent.policy.net.train = lambda mode=True: calls.append(mode) or train(mode)  # type: ignore[method-assign]
    env = TradingEnv(_rows(_market(), 40), ENV)
    _episode(env, 30)
    got = [decider.decide(env) for _ in range(3)]
    assert calls == []
    want = agent.policy(env.observe(), Mode.GREEDY)
    fields = [f.name for f in dataclasses.fields(PolicyOut)]
    assert all(_same(getattr(d, f), getattr(want, f)) for d in got for f in fields)


def test_a_close_assembles_the_state_once_and_steps_and_decides_as_the_backtest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The decision reads the observation its close's step made (``env.step`` returns it) instead of
    assembling it again: one ``observe`` a close, plus one where the state was not stepped (the first
    decision, a new episode's). Every step's result and the final state equal those of the backtest's
    own calls bit for bit, fail-safe Flats (neutral sizing inputs) included."""
    observed: list[int] = []
    observe = TradingEnv.observe
    monkeypatch.setattr(TradingEnv, "observe", lambda env: observed.append(1) or observe(env))
    decider = Decider(_agent())
    got, env = _loop(decider.step, decider.decide)
    # One per step; the two decisions on an unstepped state and the two resets' own (env.reset returns
    # an observation) are the rest. Assembled again at each decision it was 2 a close.
    assert len(observed) == len(got) + 2 + 2
    monkeypatch.setattr(TradingEnv, "observe", observe)
    want, ref = _backtest_calls(_agent())  # the same weights (seed)
    assert len(got) == len(want) == CLOSES - 1
    assert [i for i, (a, b) in enumerate(zip(got, want, strict=True)) if not _same_result(a, b)] == []
    assert _same_state(env, ref)
    assert sum(int(r.fills.ne(0).any()) for r in got) > 3  # it trades (else the comparison is weak)


COMPILING = [DecidePath.COMPILED, DecidePath.AOT]


@pytest.mark.slow  # Inductor compiles the step and the forward: about a minute on a 2-core host
@pytest.mark.parametrize("path", COMPILING)
def test_compiled_the_step_is_bit_for_bit_the_eager_one_and_compiles_once(path: DecidePath) -> None:
    """Compiled (or ahead of time), every step's result and next state equal the eager step's bit for
    bit (both step the same decisions); the actions equal the eager forward's (its float32 outputs
    within rounding: the summation order may differ); and a market growing a row a close, a new
    episode and fail-safe decisions compile nothing more than one graph (or library) for the step
    and one for the forward."""
    from torch._dynamo.utils import counters

    mk = _market()
    deciders = (Decider(_agent()), Decider(_agent(), path))
    envs = (TradingEnv(_rows(mk, START + 1), ENV), TradingEnv(_rows(mk, START + 1), ENV))
    for env in envs:
        _episode(env, START)
    graphs = counters["stats"]["unique_graphs"]
    pending: PolicyOut | Tensor | None = None
    trades = 0
    libraries = set()
    for c in range(CLOSES):
        for env in envs:
            env.market = _rows(mk, START + 2 + c)
        if pending is not None:
            eager, compiled = (d.step(env, pending) for d, env in zip(deciders, envs, strict=True))
            assert _same_result(eager, compiled), c
            assert _same_state(*envs), c
            trades += int(eager.fills.ne(0).any())
            libraries.add(id(deciders[1]._aot_step))
        if c == NEW_EPISODE:
            for env in envs:
                _episode(env, START + c)
        eager, compiled = (d.decide(env) for d, env in zip(deciders, envs, strict=True))
        assert torch.equal(eager.actions, compiled.actions)
        for f in ("direction_conviction", "magnitude_conviction", "q_variance", "aux"):
            torch.testing.assert_close(getattr(compiled, f), getattr(eager, f), rtol=1e-5, atol=1e-6)
        pending = FLAT.clone() if c % 9 == 8 else eager  # both step the same decision
    assert trades > 3  # it trades (else the comparison is weak)
    if path is DecidePath.COMPILED:
        assert counters["stats"]["unique_graphs"] - graphs == 2
    else:
        assert len(libraries) == 1  # one library stepped every close (no rebuild as the market grew)
    assert set(deciders[1].compile_times) == {"step", "decide"}


_BUILD = """
import dataclasses, sys, torch
from tests.serve.test_decide import _agent, _loop
from foxhunt.serve.config import DecidePath
from foxhunt.serve.decide import Decider
decider = Decider(_agent(), DecidePath.AOT)
results = _loop(decider.step, decider.decide)[0]
assert decider._aot_step.compile_seconds > 0 and decider._aot_policy.compile_seconds > 0  # built here
# A library's outputs are views of one buffer: each saved as a tensor of its own.
own = lambda v: v.clone() if isinstance(v, torch.Tensor) else type(v)(*(x.clone() for x in v))
fields = [f.name for f in dataclasses.fields(results[0])]
torch.save([dataclasses.replace(r, **{k: own(getattr(r, k)) for k in fields}) for r in results], sys.argv[1])
"""


@pytest.mark.slow  # Inductor compiles the step and the forward in the first process: minutes on 2 cores
def test_an_aot_decider_loads_another_process_libraries_and_compiles_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second ``foxhunt serve`` start: one process builds the step's and the forward's libraries into
    the cache (``FOXHUNT_AOT_CACHE``); a Decider of the same weights and env config in this process
    loads them from there, compiling neither, and steps alike, result for result."""
    import subprocess
    import sys

    cache, out = tmp_path / "aot", tmp_path / "results.pt"
    monkeypatch.setenv("FOXHUNT_AOT_CACHE", str(cache))
    root = Path(__file__).resolve().parents[2]
    built = subprocess.run(
        [sys.executable, "-c", _BUILD, str(out)], cwd=root, capture_output=True, text=True, timeout=900
    )
    assert built.returncode == 0, built.stderr[-2000:]
    assert sorted(p.name.split("-")[0] for p in cache.iterdir()) == ["policy", "step"]
    decider = Decider(_agent(), DecidePath.AOT)
    got = _loop(decider.step, decider.decide)[0]
    assert decider._aot_step is not None and decider._aot_policy is not None
    assert decider._aot_step.compile_seconds == decider._aot_policy.compile_seconds == 0.0
    assert decider.compile_times["step"] < 10 and decider.compile_times["decide"] < 10  # loads
    want = torch.load(out, weights_only=False)
    assert len(got) == len(want) and all(_same_result(a, b) for a, b in zip(got, want, strict=True))


@pytest.mark.slow  # trains an epoch, backtests and compiles: a few minutes on a 2-core host
@pytest.mark.parametrize("path", COMPILING)
def test_compiled_serve_decides_row_for_row_as_the_backtest(
    export: Path,  # noqa: F811 (the fixture)
    replay: list[Path],  # noqa: F811
    backtested: Path,  # noqa: F811
    tmp_path: Path,
    path: DecidePath,
) -> None:
    """The replay-equals-backtest invariant (tests/serve/test_serve.py) with the decision side
    compiled: every row the backtest decided, serve decided alike, positions and fills bit for bit."""
    _serves_as_backtested(export, replay, backtested, tmp_path, path)


@pytest.mark.slow  # trains a PPO epoch, backtests and builds two AOT libraries: many minutes on 2 cores
def test_aot_serve_of_a_ppo_checkpoint_decides_row_for_row_as_the_backtest(
    market: list[Path],  # noqa: F811 (the fixture)
    replay: list[Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    """A PPO checkpoint (agent.algo = ppo: an actor-critic, no PopArt) served ahead of time: the
    forward's library is the PPO policy's, and every row the backtest of that checkpoint decided, serve
    decided alike, positions and fills bit for bit."""
    from foxhunt.agent.ppo import PPOAgent

    ppo = api.config("smoke", overrides=[*serving.MARKET, *serving.ONE_EPOCH, "agent.algo=ppo"])
    checkpoint = serving.exported(ppo, market, tmp_path / "train")
    decided = serving.backtest_of(checkpoint, replay, tmp_path / "backtest")
    svc = _serves_as_backtested(checkpoint, replay, decided, tmp_path / "served", DecidePath.AOT)
    assert [type(m) for m in svc.decider.members] == [PPOAgent]
    assert svc.decider._aot_policy is not None and svc.decider._aot_step is not None


def _serves_as_backtested(checkpoint: Path, files: list[Path], decided: Path, out: Path, path: DecidePath):  # noqa: ANN202
    """Serve ``checkpoint`` over the replay ``files`` into ``out`` on ``path`` from the first row its
    backtest (``decided``) decided: every row the backtest decided, serve decided alike (and the
    backtest trades: else the check is weak). The service, closed."""
    from foxhunt.backtest.decisions import DecisionRow, read_decisions_csv
    from foxhunt.serve.config import ServeConfig
    from foxhunt.serve.service import Service
    from foxhunt.serve.source import ReplaySource

    bt = read_decisions_csv(decided / "decisions.csv")
    scfg = ServeConfig(warmup_rows=bt[0].row)
    svc = Service(checkpoint, ReplaySource(files), out, scfg, log=lambda m: None, decide=path)
    svc.run()
    svc.close()
    assert set(svc.decider.compile_times) == {"step", "decide"}
    sv = {d.row: d for d in read_decisions_csv(out / "decisions.csv")}
    assert len(bt) > 40 and any(d.fill_contracts != 0 for d in bt)
    missing = DecisionRow(0, -1, 0, 0, 0, 0, 0, 0, 0)
    assert [d.row for d in bt if not _same_line(d, sv.get(d.row, missing))] == []
    return svc


def _entry(name: str, guard_type: str, nn_module: bool = False) -> SimpleNamespace:
    """A guard as ``guard_filter_fn`` sees it (torch._dynamo.types.GuardFilterEntry's fields read)."""
    source = SimpleNamespace(is_unspecialized_nn_module=lambda: nn_module)
    return SimpleNamespace(name=name, guard_type=guard_type, orig_guard=SimpleNamespace(source=source))


def test_a_served_call_keeps_the_tensor_guards_and_drops_the_config_constants() -> None:
    """What the compiled step and forward check before each call (their guards were ~1,700 checks on
    the step, ~0.3-1 ms a close): kept, every input tensor's dtype and static sizes, the ambient grad
    mode, and the market object's own attributes (a stream of another instrument compiles anew);
    dropped, the env's config constants, module globals, dynamic-dimension markers, shape lambdas,
    aliasing checks and the network's modules."""
    kept = [
        _entry("L['env']._market.features", "TENSOR_MATCH"),
        _entry("L['state'].account.position", "TENSOR_MATCH"),
        _entry("", "GLOBAL_STATE"),
        _entry("L['env']._market.instrument.tick_size", "EQUALS_MATCH"),
        _entry("L['env']._market.instrument", "TYPE_MATCH"),
    ]
    dropped = [
        _entry("L['env'].cfg.costs.commission_per_contract", "EQUALS_MATCH"),
        _entry("G['__import_foxhunt_dot_env_dot_core'].torch", "ID_MATCH"),
        _entry("L['env']._market.features", "DIMENSION_DYNAMIC_MARKING_GUARD"),
        _entry("L['env']._market.mid", "NO_TENSOR_ALIASING"),
        _entry("", "LAMBDA_GUARD"),
        _entry("L['agent'].net.body.weight", "TENSOR_MATCH", nn_module=True),
    ]
    assert served_guards(kept + dropped) == [True] * len(kept) + [False] * len(dropped)


@pytest.mark.slow  # Inductor compiles two steps: a minute or two on a 2-core host
@pytest.mark.parametrize("path", COMPILING)
def test_compiled_deciders_of_two_configs_in_one_process_each_step_their_own(path: DecidePath) -> None:
    """The served step checks no config constant before a call (``served_guards``); each Decider compiles
    a step of its own (its own code object), so a second Decider in the process whose env charges
    another commission steps with that commission, as its eager twin does, and does not reuse the
    first one's graph."""
    pricier = ENV.model_copy(update={"costs": ENV.costs.model_copy(update={"commission_per_contract": 3.0})})
    got = {}
    for name, env_cfg in (("cheap", ENV), ("pricier", pricier)):
        for compile in (False, True):
            decider = Decider(_agent(), path if compile else DecidePath.EAGER)
            got[name, compile] = _loop(decider.step, decider.decide, env_cfg)[0]
    for name in ("cheap", "pricier"):
        pairs = zip(got[name, False], got[name, True], strict=True)
        assert [i for i, (eager, compiled) in enumerate(pairs) if not _same_result(eager, compiled)] == []
    costs = [torch.cat([r.costs for r in got[name, True]]) for name in ("cheap", "pricier")]
    assert not torch.equal(*costs)  # the commission matters (else the comparison is weak)


class _FakeLibrary:
    """Stands for :class:`~foxhunt.serve.aot.AotStep` (no compile): records the envs it steps."""

    calls: list[TradingEnv] = []

    def __init__(self, env: TradingEnv, flat: list[Tensor]) -> None:
        self.cfg = env.cfg  # what a real library bakes in as constants

    def inputs(self, env: TradingEnv, *args: Tensor) -> TradingEnv:
        return env

    def __call__(self, env: TradingEnv) -> tuple[None, object, None]:
        self.calls.append(env)
        return None, env.state, None


@pytest.mark.parametrize("path", COMPILING)
def test_a_compiled_decider_refuses_an_env_of_another_config(
    path: DecidePath, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its step's guards (the ahead-of-time library: its constants) check no config constant
    (``served_guards``), so an env of another config is refused before the compiled step is called,
    instead of stepped with the first config's constants; an env of an equal config is stepped."""
    decider = Decider(_agent(), path)
    calls: list[TradingEnv] = []
    decider._advance = lambda env, *args: calls.append(env) or (None, None)  # the compiled call itself
    _FakeLibrary.calls = calls
    monkeypatch.setattr("foxhunt.serve.decide.AotStep", _FakeLibrary)
    envs = [TradingEnv(_rows(_market(), START + 2), c) for c in (ENV, ENV.model_copy(), _CFG)]
    for env in envs:
        _episode(env, START)
    decider.step(envs[0], FLAT.clone())
    decider.step(envs[1], FLAT.clone())
    with pytest.raises(ValueError, match="one config"):
        decider.step(envs[2], FLAT.clone())
    assert calls == envs[:2]


def test_an_aot_build_leaves_the_options_of_every_later_key_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's ``aoti_compile_and_package`` adds ``aot_inductor.package`` to the options dict it is given;
    the options are part of every library's key, so a build handed the module's own dict changed the key
    of every later Decider in the process (which then missed the library another process had built,
    and compiled it again). A build is handed a copy (torch's compile stood in for: no Inductor run)."""
    import torch._inductor

    from foxhunt.serve import aot

    seen: list[dict] = []

    def compile_and_package(ep, package_path: str, inductor_configs: dict) -> str:  # noqa: ANN001
        inductor_configs["aot_inductor.package"] = True  # as torch 2.13 does
        seen.append(inductor_configs)
        Path(package_path).write_bytes(b"library")
        return package_path

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", compile_and_package)
    before = dict(aot.POLICY_INDUCTOR)
    path = tmp_path / "policy-x.pt2"
    aot._compile(torch.nn.Linear(2, 1), (torch.zeros(1, 2),), path, aot.POLICY_INDUCTOR)
    assert path.read_bytes() == b"library" and seen and seen[0] is not aot.POLICY_INDUCTOR
    assert aot.POLICY_INDUCTOR == before


def test_an_aot_library_key_holds_the_code_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library compiled by other code (another foxhunt: the step is traced from the env's own code) is
    never loaded: every key holds :func:`foxhunt.jit.package_digest`, as the feature cache's does."""
    from foxhunt.serve import aot

    key = aot._digest("step", ENV.model_dump_json())
    assert aot._digest("step", ENV.model_dump_json()) == key  # a key, not a draw
    monkeypatch.setattr(aot, "package_digest", lambda root: b"other code")
    assert aot._digest("step", ENV.model_dump_json()) != key
