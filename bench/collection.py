"""Collection in training, step mode by step mode, for DQN and PPO side by side (issue 57 item 3).

    python3 bench/collection.py [--device cuda] [--algos dqn,ppo] [--modes auto,fused] [--envs 16384]
                                [--steps 100] [--epochs 3] [--profile] [--breakdown] [--quick]
                                [--out $OUT]

Each (algo, mode) row builds a fresh default agent (``AgentConfig()`` with ``algo``, the default
network; DQN with a replay of ``--capacity``), sets its ``step_mode`` (a
:class:`foxhunt.agent.collect.StepMode` value; ``fused`` also compiles the whole exploring decision,
``foxhunt.agent.actor.CompiledExploring``; ``fused_forward`` is ``fused`` with the forward compiled
alone as ``auto`` compiles it and the exploration eager: the fused env step's share) and runs
``--epochs`` collections of ``--envs`` episodes x ``--steps`` steps as ``foxhunt train`` does
(``agent.collect``: the exploring policy and the env step captured as one CUDA graph on CUDA, the
staged sequence written into the replay or the rollout store) on bench/env.py's synthetic market
with aux targets (bench/epoch.py's). The first
collection includes the collector's construction (compiles, warm-up, capture: ``first_s``);
``steady`` is the median of the others. ``same`` compares the first collection's actions and rewards
with the first mode's (the same seed: the share of rows whose four branch actions are equal, the
largest reward difference); a float64 env step that rounds differently moves a reward and, later in
the episode, a choice.

``--profile``: ``torch.profiler`` over one more collection (bench/floors.py): the top kernels,
the kernels a step, and the floors of a step: launch (kernels x one graph node, measured), memory
(the bytes an env-step must move: bench/env.py's env step bytes, the policy's input read, the
staging writes and the weights read once a step, over the copy bandwidth) and compute (the forward's
matmul FLOPs over the TF32 rate measured here). Issue 57's target on one H100 or H200: >= 3e7
env-steps/s at 16 k envs with the default network, for DQN and for PPO (on a CPU ``--profile``
lists operators, a check that the code runs). Prints a table, writes JSON
(``--out``: a file or a folder) after every row. ``--breakdown``: the exploring decision and
the env step alone at the collection's batch, each replayed as its own CUDA graph. ``--quick``: a
CPU check at tiny sizes (smoke network), ``eager`` mode, that the script runs.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from foxhunt.agent.actor import CompileScope
from foxhunt.agent.build import build_agent
from foxhunt.agent.collect import StepMode
from foxhunt.agent.config import AgentConfig, Algo
from foxhunt.config.loader import load_config
from foxhunt.domain.actions import BranchConfig
from foxhunt.env.config import EnvConfig
from foxhunt.env.core import TradingEnv
from foxhunt.env.graph import capture

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import floors  # noqa: E402
from env import step_bytes  # noqa: E402
from epoch import market_with_aux  # noqa: E402
from run import hardware  # noqa: E402

TARGET = 3e7  # env-steps/s at 16 k envs, DQN and PPO (issue 57)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def collection_bytes(agent: Any, market: Any, cfg: EnvConfig, starts: torch.Tensor) -> float:
    """Fewest bytes one env-step of collection moves: the env step's (bench/env.py's ``step_bytes``,
    lean result), the policy's input row read, the staged transition written (next state, action,
    reward, done, aux, valid) and the network's weights read once a step (shared by the batch)."""
    coll = agent._collection.collector
    env = TradingEnv(market, cfg)
    env.reset(starts)
    actions = torch.zeros(len(starts), 4, dtype=torch.int64, device=starts.device)
    obs, result = env.step(actions, ledger=False)
    n = len(starts)
    total = float(step_bytes(env, obs, result))
    total += coll.obs.element_size() * coll.obs.shape[1]  # the policy reads its input
    for buf in (coll.actions, coll.rewards, coll.dones, coll.aux, coll.valid):
        total += buf.element_size() * buf.numel() / (buf.shape[0] * n)
    total += coll.states.element_size() * coll.states.shape[2]  # the next state staged
    weights = sum(p.numel() * p.element_size() for p in agent.policy.net.parameters())
    return total + weights / n


def forward_flops(agent: Any, obs: torch.Tensor) -> float:
    """Matmul FLOPs of one row of the network's forward (torch.utils.flop_counter, on 256 rows)."""
    from torch.utils.flop_counter import FlopCounterMode

    rows = obs[:256]
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        agent.policy.net(rows)
    return counter.get_total_flops() / rows.shape[0]


class ForwardOnly:
    """A collecting policy whose ``compile(CompileScope.DECISION)`` compiles the forward alone, as
    the other modes do (the ``fused_forward`` row: the fused env step with today's compiled forward and eager
    exploration, to tell the fused step's share of ``fused`` from the compiled decision's)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.generator = inner, inner.generator

    def __call__(self, obs: torch.Tensor) -> Any:
        return self.inner(obs)

    def mutable(self) -> list[torch.Tensor]:
        return self.inner.mutable()

    def capture_key(self) -> Any:
        return self.inner.capture_key()

    def compile(self, scope: CompileScope = CompileScope.FORWARD) -> None:
        del scope
        self.inner.compile()


def one_row(
    algo: Algo, label: str, args: argparse.Namespace, market: Any, base: AgentConfig
) -> tuple[dict[str, Any], dict[str, torch.Tensor], Any]:
    device = torch.device(args.device)
    cfg = base.model_copy(update={"algo": algo})
    agent = build_agent(cfg, BranchConfig(), device=device, seed=0, replay_capacity=args.capacity)
    mode = StepMode.FUSED if label == "fused_forward" else StepMode(label)
    agent.step_mode = mode
    if label == "fused_forward":
        make = agent._collection.explore
        agent._collection.explore = lambda: ForwardOnly(make())
    env_cfg = EnvConfig(episode_rows=args.steps + 1)
    gen = torch.Generator(device=device).manual_seed(3)
    span = market.rows - env_cfg.episode_rows - 2
    times, first = [], {}
    for e in range(args.epochs):
        starts = (torch.rand(args.envs, generator=gen, device=device) * span).long()
        sync(device)
        t0 = time.perf_counter()
        agent.collect(market, env_cfg, starts, args.steps)
        sync(device)
        times.append(time.perf_counter() - t0)
        if e == 0:
            coll = agent._collection.collector
            first = {"actions": coll.actions.clone(), "rewards": coll.rewards.clone()}
    coll = agent._collection.collector
    steady = statistics.median(times[1:]) if len(times) > 1 else times[0]
    row: dict[str, Any] = {
        "algo": algo.value,
        "mode": label,
        "envs": args.envs,
        "steps": args.steps,
        "first_s": times[0],
        "steady_s": steady,
        "ms_per_step": 1e3 * steady / args.steps,
        "env_steps_per_s": args.envs * args.steps / steady,
        "capture_s": coll.compile_seconds,
        "compiled": coll.compile,
        "graphed": coll.graphed,
        "compiled_decision": getattr(coll.policy, "lean", None) is not None,
        "network_params": sum(p.numel() for p in agent.policy.net.parameters()),
    }
    return row, first, (agent, env_cfg, starts)


def _graph_ms(fn: Any, generator: torch.Generator, reps: int) -> float:
    """``fn`` captured as one CUDA graph (two warm-up calls on a side stream first; the draws' generator
    registered, as the collector does); milliseconds a replay. On a CPU ``fn`` called eagerly (a check
    that the code runs)."""
    if generator.device.type != "cuda":
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return 1e3 * (time.perf_counter() - t0) / reps
    graph, _ = capture(fn, warmup=2, generators=(generator,))
    graph.replay()
    return floors.replay_ms(graph, reps)


def breakdown(held: Any) -> dict[str, float]:
    """The step's two parts alone at the collection's batch, each its own CUDA graph (CUDA, after the
    row's timing): the exploring decision (what the collector's policy runs, under TF32) and the env
    step (the row's ``advance``, without the ledger, on fresh episodes); the rest of a step is the
    staging and the aux copy."""
    from foxhunt.agent.collect import tf32_matmuls
    from foxhunt.env.graph import reset_in_place

    agent, _, starts = held
    coll = agent._collection.collector
    policy, env = coll.policy, coll.env
    gen = policy.generator

    def decide() -> Any:
        with tf32_matmuls() if coll.tf32 else nullcontext():
            return policy(coll.obs)

    reps = 30 if gen.device.type == "cuda" else 2
    out = {"decision_ms": _graph_ms(decide, gen, reps)}
    pol = decide()
    reset_in_place(env, starts)
    args = (pol.actions, True, pol.direction_conviction, pol.magnitude_conviction, pol.q_variance)
    out["env_step_ms"] = _graph_ms(lambda: coll.advance(env, env._state(), *args, ledger=False), gen, reps)
    return out


def profile_row(row: dict[str, Any], held: Any, market: Any, card: dict[str, float]) -> dict[str, Any]:
    """bench/floors.py's profile of one more collection of the row's agent, and its floors."""
    agent, env_cfg, starts = held
    steps = row["steps"]
    device = agent.device.type
    prof = floors.kernel_profile(lambda: agent.collect(market, env_cfg, starts, steps), steps, device)
    nbytes = collection_bytes(agent, market, env_cfg, starts)
    flops = forward_flops(agent, agent._collection.collector.obs)
    floor = floors.floors(
        prof,
        row["envs"],
        row["ms_per_step"] * 1e3,
        launch_s=card["launch_s"],
        bytes_per_env_step=nbytes,
        bandwidth=card["bandwidth"],
        flops_per_env_step=flops,
        flops=card["tf32_flops"],
    )
    floors.print_profile(f"collection {row['algo']} {row['mode']} at {row['envs']:,} envs", prof, floor)
    prof["kernels"] = prof["kernels"][:40]  # type: ignore[index]
    return {"profile": prof, "floors": floor, "bytes_per_env_step": nbytes, "flops_per_env_step": flops}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--algos", default="dqn,ppo", help="comma-separated: dqn, ppo")
    ap.add_argument(
        "--modes",
        default="auto,fused",
        help="comma-separated StepMode values, or fused_forward (the fused step, the forward compiled alone)",
    )
    ap.add_argument("--envs", type=int, default=16_384)
    ap.add_argument("--steps", type=int, default=100, help="steps a collection (train.steps_per_epoch)")
    ap.add_argument("--epochs", type=int, default=3, help="collections a row (the first builds the step)")
    ap.add_argument("--capacity", type=int, default=1 << 21, help="the DQN replay's capacity")
    ap.add_argument("--profile", action="store_true", help="profile one more collection a row")
    ap.add_argument(
        "--breakdown", action="store_true", help="the decision and the env step alone, each a CUDA graph"
    )
    ap.add_argument("--quick", action="store_true", help="tiny sizes and the smoke network (CPU check)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "collection.json")
    args = ap.parse_args()
    base = AgentConfig()
    if args.quick:
        base = load_config(profile="smoke").agent
        args.envs, args.steps, args.epochs, args.capacity = 32, 6, 2, 4096
    if args.out.suffix != ".json":  # a folder (the device tool's $OUT)
        args.out = args.out / f"collection_{args.algos.replace(',', '_')}.json"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    torch.manual_seed(0)
    market = market_with_aux(args.device)
    doc: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "rows": []}
    card_name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    doc["hardware"] = hardware() | {"device": card_name}
    card: dict[str, float] = {}
    if args.profile:
        card = floors.card(device.type)
        doc["card"] = card
        print(
            f"card: one graph node {card['launch_s'] * 1e6:.2f} us, copy bandwidth "
            f"{card['bandwidth'] / 1e12:.2f} TB/s, TF32 matmul {card['tf32_flops'] / 1e12:.0f} TFLOP/s",
            flush=True,
        )
    for name in args.algos.split(","):
        algo = Algo(name)
        ref: dict[str, torch.Tensor] | None = None
        for m in args.modes.split(","):
            try:
                row, first, held = one_row(algo, m, args, market, base)
            except Exception as e:  # a mode this host cannot run: said, not fatal
                row = {"algo": algo.value, "mode": m, "error": f"{type(e).__name__}: {e}"[:400]}
                doc["rows"].append(row)
                args.out.write_text(json.dumps(doc, indent=2))
                print(f"{algo.value:>4} {m:>15} failed: {row['error']}", flush=True)
                continue
            ref = first if ref is None else ref
            same_rows = (first["actions"] == ref["actions"]).all(-1)
            row["same"] = {
                "actions_equal_share": float(same_rows.float().mean()),
                "reward_max_abs_diff": float((first["rewards"] - ref["rewards"]).abs().max()),
            }
            print(
                f"{algo.value:>4} {m:>15} {row['env_steps_per_s']:>11.3e} env-steps/s "
                f"{row['ms_per_step']:>7.3f} ms/step, first {row['first_s']:.1f} s "
                f"(capture {row['capture_s']:.1f} s)",
                flush=True,
            )
            if card:
                try:
                    row.update(profile_row(row, held, market, card))
                except Exception as e:
                    row["profile_error"] = f"{type(e).__name__}: {e}"[:400]
                    print(f"profile failed: {row['profile_error']}", flush=True)
            if args.breakdown:
                try:
                    row["breakdown"] = breakdown(held)
                    b = row["breakdown"]
                    print(
                        f"{algo.value:>4} {m:>15} alone: decision {b['decision_ms']:.3f} ms, env step "
                        f"{b['env_step_ms']:.3f} ms (a whole step {row['ms_per_step']:.3f} ms)",
                        flush=True,
                    )
                except Exception as e:
                    row["breakdown_error"] = f"{type(e).__name__}: {e}"[:400]
                    print(f"breakdown failed: {row['breakdown_error']}", flush=True)
            doc["rows"].append(row)
            args.out.write_text(json.dumps(doc, indent=2))  # partial results survive a timeout
            del held
            gc.collect()  # the agent sits in reference cycles (its collector's closures): free it now
            if device.type == "cuda":
                torch.cuda.empty_cache()
    print(
        f"\n{'algo':>4} {'mode':>15} {'env-steps/s':>12} {'ms/step':>8} {'first s':>8} {'capture s':>9} "
        f"{'same acts':>9} {'reward diff':>11} {'kernels':>8} {'floor us':>9} {'of floor':>8}"
    )
    for r in doc["rows"]:
        if "error" in r:
            print(f"{r['algo']:>4} {r['mode']:>15}  failed: {r['error']}")
            continue
        f = r.get("floors", {})
        kernels = r["profile"]["kernels_per_step"] if "profile" in r else float("nan")
        print(
            f"{r['algo']:>4} {r['mode']:>15} {r['env_steps_per_s']:>12.3e} {r['ms_per_step']:>8.3f} "
            f"{r['first_s']:>8.1f} {r['capture_s']:>9.1f} {r['same']['actions_equal_share']:>9.3f} "
            f"{r['same']['reward_max_abs_diff']:>11.2e} {kernels:>8.1f} "
            f"{f.get('floor_us', float('nan')):>9.1f} {f.get('of_floor', float('nan')):>8.2f}"
        )
    print(f"target (issue 57): >= {TARGET:.0e} env-steps/s at 16,384 envs, DQN and PPO; {doc['hardware']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
