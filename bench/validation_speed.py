"""Validation and the recorded-policy backtest, step mode by step mode, side by side (issue 57 item 2).

    PYTHONPATH=src python3 bench/validation_speed.py [--device cuda] [--rows 100000]
        [--episode-rows 512] [--policies 1000] [--backtest-episode-rows 4096]
        [--modes eager,graph,compiled_graph,fused] [--repeats 3] [--no-compiled-forward]
        [--out bench/results/validation_speed.json]

Two parts, each in every ``--modes`` (:class:`foxhunt.agent.collect.StepMode` values, the env step
:func:`foxhunt.backtest.evaluate.step_function` runs):

* **validation**: the greedy policy of a default agent (``Agent(AgentConfig(), BranchConfig())``)
  over ``--rows`` rows of bench/env.py's synthetic market cut into windows of ``--episode-rows``
  (196 windows of 511 steps at the defaults, as ``foxhunt train`` validates 100 k rows):
  :class:`~foxhunt.backtest.evaluate.GraphedEvaluation` (policy, env step and the record's writes,
  one CUDA graph per step where the mode captures), ``eager`` the plain loop of ``evaluate``. The
  scripted ``long`` policy beside it (no network: the env step and the record's writes alone), and
  with ``fused`` also ``fused+compiled_forward``: the greedy forward compiled by Inductor in the same
  graph (bench-only: what a lean greedy forward would give; its choices may differ on near-ties).
* **backtest**: ``--policies`` recorded random policies x ``--rows`` bars in windows of
  ``--backtest-episode-rows`` (1,000 x 25 windows = 25,000 episodes, 4,095 steps at the defaults):
  :class:`~foxhunt.backtest.evaluate.RecordedPolicies` (gather, env step without the ledger and the
  per-policy reductions, one CUDA graph per step), ``eager`` its plain ``env.step`` loop.

``first_s`` is the first run with its construction (warm-up, Inductor's compile, capture);
``steady_s`` the median of ``--repeats`` further runs (the same object, reset in place); the JSON is
written after every row. ``same``
compares each mode's result with the first mode's: the validation record's integer fields exactly
and its money fields' largest relative difference; the backtest's trade counts exactly and its net
PnL's largest relative difference. With ``--breakdown`` (CUDA) the greedy forward alone and the env
step alone (each its own CUDA graph, at the validation's batch) are timed per step too.

Issue 57's targets on one H100 or H200: validation of 100 k rows <= 0.3 s; 1,000 recorded policies x
100 k bars <= 1 s. A CPU smoke run (the fused step under Triton's interpreter, tiny sizes):
``TRITON_INTERPRET=1 PYTHONPATH=src:/tmp/triton_site python3 bench/validation_speed.py --device cpu
--rows 300 --episode-rows 40 --policies 2 --backtest-episode-rows 60 --modes eager,fused --repeats 1``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from foxhunt.agent.actor import Mode
from foxhunt.agent.agent import Agent
from foxhunt.agent.config import AgentConfig
from foxhunt.backtest.evaluate import (
    GraphedEvaluation,
    RecordedPolicies,
    ScriptedPolicy,
    capture_step,
    evaluate,
    scripted,
)
from foxhunt.backtest.metrics import StepRecord
from foxhunt.domain.actions import BranchConfig
from foxhunt.env.config import EnvConfig
from foxhunt.env.graph import CapturablePolicy

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import env as env_bench  # noqa: E402
from run import hardware  # noqa: E402

_INT_FIELDS = ("written", "picked_direction", "picked_magnitude", "realised_direction", "trade_closed")
_MONEY_FIELDS = ("gross_pnl", "costs", "equity", "position")


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _timed(device: str, fn: Callable[[], object]) -> tuple[float, object]:
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - t0, out


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    both = torch.isfinite(a) & torch.isfinite(b)
    if not bool(torch.equal(torch.isnan(a), torch.isnan(b))):
        return float("inf")
    d = (a - b).abs()[both]
    return float((d / b.abs()[both].clamp(min=1e-300)).max()) if d.numel() else 0.0


def _compare_records(got: StepRecord, ref: StepRecord) -> dict[str, object]:
    same_ints = all(torch.equal(getattr(got, k), getattr(ref, k)) for k in _INT_FIELDS)
    rel = max(_rel(getattr(got, k), getattr(ref, k)) for k in _MONEY_FIELDS)
    return {"ints_equal": same_ints, "money_max_rel": rel}


def _compare_sums(got: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> dict[str, object]:
    return {
        "ints_equal": bool(
            torch.equal(got["trades"], ref["trades"]) and torch.equal(got["wins"], ref["wins"])
        ),
        "money_max_rel": _rel(got["net_pnl"], ref["net_pnl"]),
    }


def _compiled_greedy(agent: Agent) -> CapturablePolicy:
    actor = agent.policy
    fn = torch.compile(lambda obs: actor(obs, Mode.GREEDY), fullgraph=True)
    return CapturablePolicy(lambda obs, env: fn(obs))


Rows = list[dict[str, object]]


def validation(
    args: argparse.Namespace, market: object, agent: Agent, rows: Rows, save: Callable[[], None]
) -> None:
    cfg = EnvConfig(episode_rows=args.episode_rows)
    lo, hi, dev = 0, args.rows, args.device
    policies: dict[str, CapturablePolicy] = {
        "agent": agent.policy.greedy(),
        "long": CapturablePolicy(scripted(ScriptedPolicy.LONG, cfg)),
    }
    refs: dict[str, StepRecord] = {}
    runs = [(name, mode) for name in policies for mode in args.modes]
    if "fused" in args.modes and args.compiled_forward:
        runs.append(("agent+compiled_forward", "fused"))
    for name, mode in runs:
        policy = _compiled_greedy(agent) if name == "agent+compiled_forward" else policies[name]
        row: dict[str, object] = {"part": "validation", "policy": name, "mode": mode}
        try:
            if mode == "eager":
                first, rec = _timed(dev, lambda p=policy: evaluate(market, cfg, lo, hi, p, mode="eager"))
                again = [_timed(dev, lambda p=policy: evaluate(market, cfg, lo, hi, p, mode="eager"))[0]]
            else:

                def build(
                    p: CapturablePolicy = policy, m: str = mode
                ) -> tuple[GraphedEvaluation, StepRecord]:
                    ev = GraphedEvaluation(market, cfg, lo, hi, p, mode=m)
                    return ev, ev.run()

                first, (ev, rec) = _timed(dev, build)
                again = [_timed(dev, ev.run)[0] for _ in range(args.repeats)]
        except Exception as e:  # a mode this host cannot run (no CUDA, no Triton): said, not fatal
            row["error"] = f"{type(e).__name__}: {e}"[:300]
            rows.append(row)
            save()
            continue
        steps, episodes = int(rec.written.shape[1]), int(rec.written.shape[0])
        steady = statistics.median(again)
        ref_key = "agent" if name.startswith("agent") else name
        refs.setdefault(ref_key, rec)
        row.update(
            first_s=first,
            steady_s=steady,
            steps=steps,
            episodes=episodes,
            ms_per_step=1e3 * steady / steps,
            env_steps_per_s=steps * episodes / steady,
            same=_compare_records(rec, refs[ref_key]),
        )
        rows.append(row)
        save()


def backtest(args: argparse.Namespace, market: object, rows: Rows, save: Callable[[], None]) -> None:
    cfg = EnvConfig(episode_rows=args.backtest_episode_rows)
    gen = torch.Generator(device=args.device).manual_seed(0)
    sizes = torch.tensor([cfg.branches.direction, cfg.branches.magnitude, cfg.branches.order_type,
                          cfg.branches.urgency], device=args.device)  # fmt: skip
    acts = (torch.rand(args.policies, args.rows, 4, generator=gen, device=args.device) * sizes).to(torch.int8)
    ref: dict[str, torch.Tensor] | None = None
    for mode in args.modes:
        row: dict[str, object] = {"part": "backtest", "policy": f"{args.policies} recorded", "mode": mode}

        def build(m: str = mode) -> tuple[RecordedPolicies, dict[str, torch.Tensor]]:
            ev = RecordedPolicies(market, cfg, 0, args.rows, acts, mode=m)
            return ev, ev.run()

        try:
            first, (ev, out) = _timed(args.device, build)
            reps = 1 if mode == "eager" else args.repeats  # nothing to warm up; seconds a run on a GPU
            again = [_timed(args.device, ev.run)[0] for _ in range(reps)]
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"[:300]
            rows.append(row)
            save()
            continue
        ref = out if ref is None else ref
        steady = statistics.median(again)
        episodes = int(ev.policy_of.shape[0])
        row.update(
            first_s=first,
            steady_s=steady,
            steps=ev.steps,
            episodes=episodes,
            ms_per_step=1e3 * steady / ev.steps,
            env_steps_per_s=ev.steps * episodes / steady,
            compile_s=ev.compile_seconds,
            same=_compare_sums(out, ref),
        )
        rows.append(row)
        save()


def _graph_ms(fn: Callable[[], object], reps: int = 200) -> float:
    """``fn`` captured as one CUDA graph; milliseconds a replay."""
    g, _ = capture_step(fn)
    g.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        g.replay()
    torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - t0) / reps


def breakdown(args: argparse.Namespace, market: object, agent: Agent) -> dict[str, float]:
    """The greedy forward alone and each env step alone at the validation's batch, ms a step."""
    from foxhunt.backtest.evaluate import step_function, windows
    from foxhunt.env.core import TradingEnv
    from foxhunt.env.graph import reset_in_place

    cfg = EnvConfig(episode_rows=args.episode_rows)
    starts, ends = windows(0, args.rows, cfg.episode_rows, args.device)
    env = TradingEnv(market, cfg)
    obs = reset_in_place(env, starts, ends).clone()
    greedy = agent.policy.greedy()
    out = {"episodes": float(len(starts)), "greedy_forward_ms": _graph_ms(lambda: greedy(obs, env))}
    if args.compiled_forward:
        compiled = _compiled_greedy(agent)
        out["compiled_greedy_forward_ms"] = _graph_ms(lambda: compiled(obs, env))
    actions = torch.zeros(len(starts), 4, dtype=torch.int64, device=args.device)
    for mode in args.modes:
        if mode == "eager":
            continue
        fn, _ = step_function(mode, torch.device(args.device), len(starts))
        reset_in_place(env, starts, ends)
        out[f"env_step_{mode}_ms"] = _graph_ms(lambda f=fn: f(env, env._state(), actions, True))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--episode-rows", type=int, default=512)
    ap.add_argument("--policies", type=int, default=1000)
    ap.add_argument("--backtest-episode-rows", type=int, default=4096)
    ap.add_argument("--modes", default="eager,graph,compiled_graph,fused")
    ap.add_argument("--parts", default="validation,backtest")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-compiled-forward", dest="compiled_forward", action="store_false")
    ap.add_argument("--breakdown", action="store_true")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "validation_speed.json")
    args = ap.parse_args()
    # Triton's interpreter (a CPU smoke run) divides by zero where the eager step does too
    warnings.filterwarnings("ignore", message=".*encountered in", category=RuntimeWarning)
    args.modes = [m for m in args.modes.split(",") if m]
    parts = set(args.parts.split(","))
    env_bench.ROWS = args.rows + 1
    market = env_bench.synthetic_market(args.device)
    agent = Agent(AgentConfig(), BranchConfig(), device=args.device, replay_capacity=64)
    rows: Rows = []
    hw = hardware() | {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu"}
    doc: dict[str, object] = {"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}
    doc["hardware"] = hw
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every row: partial results survive a timeout
        args.out.write_text(json.dumps(doc, indent=2))

    if "validation" in parts:
        validation(args, market, agent, rows, save)
    if "backtest" in parts:
        backtest(args, market, rows, save)
    if args.breakdown and args.device == "cuda":
        doc["breakdown"] = breakdown(args, market, agent)
    head = f"{'part':<11}{'policy':<24}{'mode':<16}{'first_s':>9}{'steady_s':>10}{'ms/step':>9}"
    print(head + f"{'env-steps/s':>13}  same as the first mode")
    for r in rows:
        lead = f"{r['part']:<11}{r['policy']:<24}{r['mode']:<16}"
        if "error" in r:
            print(lead + f"  failed: {r['error']}")
            continue
        same = r["same"]
        assert isinstance(same, dict)
        print(
            lead + f"{r['first_s']:>9.3f}{r['steady_s']:>10.3f}{r['ms_per_step']:>9.3f}"
            f"{r['env_steps_per_s']:>13.3g}  ints {same['ints_equal']}, money rel {same['money_max_rel']:.1e}"
        )
    if "breakdown" in doc:
        print("per step at the validation's batch (CUDA graph each):", json.dumps(doc["breakdown"]))
    print(f"targets (issue 57): validation of 100 k rows <= 0.3 s; 1,000 policies x 100 k bars <= 1 s. {hw}")
    save()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
