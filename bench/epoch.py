"""Epoch benchmark: one training epoch of ``foxhunt train`` (collect, learn, validate), timed by part.

    .venv/bin/python bench/epoch.py [--device cpu|cuda] [--envs 16384] [--steps 100] [--updates 200]
                                    [--batch 16384] [--val-rows 100000] [--epochs 2] [--quick]
                                    [--graph-learn] [--probe] [--extra-val-windows 101]
                                    [--step-mode auto|eager|graph|compiled|compiled_graph]
                                    [--out bench/results/epoch_h200.json | $OUT]

The epoch is ``FoldTrainer.run_epoch`` without a fold (issue 7 §4): on the 200 k-row synthetic
market of ``bench/env.py`` (random features, a random-walk mid, random aux targets):

* **collect**: ``--envs`` episodes at random rows, ``--steps`` steps each with the exploring
  policy (a network forward per step) through ``TradingEnv`` (``episode_rows = steps + 1``),
  n-step transitions into the device replay (``Agent.collect``, then ``NStep.flush``);
* **learn**: ``--updates`` learner updates at ``--batch`` (``Agent.learn``);
* **validate**: ``foxhunt.backtest.evaluate.evaluate`` of the greedy policy over ``--val-rows``
  rows cut into windows of the environment's ``episode_rows`` (512 by default, as in ``run``:
  ``steps = episode_rows - 1`` sequential policy+step calls over ``val_rows / (episode_rows - 1)``
  episodes), then the metrics (``compute_metrics``, one host read).

Every part is timed on the host with the device synchronised at its ends. ``--graph-learn`` replays
the learner update as a CUDA graph (bench/learner.py's ``GraphedUpdate``, captured in the first
epoch); ``--probe`` times the greedy and exploring policy (and the greedy one as a CUDA graph) and
the environment's step alone at the validation's and the collection's batch sizes, and lists where
each part synchronises the host with the device; ``--extra-val-windows`` times the validation
alone with other window lengths. The agent is
``Agent(AgentConfig(), BranchConfig(), replay_capacity=2**21)`` (production sizes); the first
epoch also pays for first-touch allocations and kernel loading, so ``--epochs 2`` reports both.
Required (issue 7): <= 16 s per epoch on the H200; goal <= 4 s. ``--quick`` is a CPU smoke check at
tiny sizes (smoke-profile network) that only shows the script runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from foxhunt.agent.actor import Mode
from foxhunt.agent.agent import Agent, UpdateMode
from foxhunt.agent.collect import StepMode
from foxhunt.agent.config import AgentConfig
from foxhunt.backtest.evaluate import evaluate
from foxhunt.backtest.metrics import branch_sizes, compute_metrics
from foxhunt.config.loader import load_config
from foxhunt.domain.actions import BranchConfig
from foxhunt.env.config import EnvConfig
from foxhunt.env.core import TradingEnv
from foxhunt.env.market import AUX_TARGETS, MarketTensors

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from env import ROWS, make_stepper, synthetic_market  # noqa: E402
from learner import GraphedUpdate, bare_step, graphed, make_adam, timed  # noqa: E402

REQUIRED_S, GOAL_S = 16.0, 4.0


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def market_with_aux(device: str) -> MarketTensors:
    """bench/env.py's synthetic market plus random aux targets (NaN on a tenth of the rows)."""
    market = synthetic_market(device)
    gen = torch.Generator(device=device).manual_seed(2)
    ret = torch.randn(ROWS, generator=gen, device=device)
    up = (torch.rand(ROWS, generator=gen, device=device) > 0.5).float()
    outcome = torch.randint(0, 3, (ROWS,), generator=gen, device=device).float()
    aux = torch.stack([ret, up, outcome], dim=1)
    aux[torch.rand(ROWS, generator=gen, device=device) < 0.1] = float("nan")
    assert aux.shape[1] == len(AUX_TARGETS)
    return dataclasses.replace(market, aux_targets=aux)


def one_epoch(
    agent: Agent,
    market: MarketTensors,
    args: argparse.Namespace,
    train_cfg: EnvConfig,
    val_cfg: EnvConfig,
    gen: torch.Generator,
    graph: dict[str, GraphedUpdate],
) -> dict[str, float]:
    device = agent.device
    n, steps = args.envs, args.steps
    val_lo = market.rows - args.val_rows  # validation: the last rows; training episodes start before them
    sync(device)
    t0 = time.perf_counter()
    span = val_lo - steps - 2
    starts = (torch.rand(n, generator=gen, device=device) * span).to(torch.int64)
    stats_c = agent.collect(market, train_cfg, starts, steps)  # the step `train` runs (Agent.collect)
    sync(device)
    t1 = time.perf_counter()
    batch = min(args.batch, len(agent.replay))
    stats: list[dict[str, torch.Tensor]] = []
    if args.graph_learn:  # bench/learner.py's GraphedUpdate (its own capture), for comparison
        if "g" not in graph:
            graph["g"] = GraphedUpdate(agent, batch)
        graph["g"].learn(args.updates, batch)
        stats = [graph["g"].stats]
    else:  # Agent.learn as `train` runs it (UpdateMode.AUTO: a replayed CUDA graph on CUDA)
        agent.learn(args.updates, batch, sink=stats.append)
    sync(device)
    t2 = time.perf_counter()
    greedy = agent.policy.greedy()  # as `train` validates: the env step collection runs (--step-mode)
    rec = evaluate(market, val_cfg, val_lo, market.rows, greedy, mode=agent.step_mode)
    sync(device)
    t3 = time.perf_counter()
    metrics = compute_metrics(
        rec,
        bars_per_year=252 * 780,
        initial_capital=val_cfg.contract.initial_capital,
        **branch_sizes(val_cfg.branches),
    )
    loss = float(stats[-1]["loss/total"])  # run_epoch's one host read of the statistics
    del stats_c
    t4 = time.perf_counter()
    return {
        "collect_s": t1 - t0,
        "learn_s": t2 - t1,
        "validate_s": t3 - t2,
        "metrics_s": t4 - t3,
        "total_s": t4 - t0,
        "replay_size": len(agent.replay),
        "val_episodes": int(rec.written.shape[0]),
        "val_steps": int(rec.written.shape[1]),
        "loss": loss,
        "val_trades": float(metrics["trades"]),
    }


def probe(
    agent: Agent, market: MarketTensors, cfg: EnvConfig, n: int, args: argparse.Namespace
) -> dict[str, Any]:
    """ms per call at ``n`` envs: the greedy policy (eager; on CUDA also replayed as a graph), the
    exploring policy, and the environment's step (eager, greedy actions)."""
    device = agent.device
    gen = torch.Generator(device=device).manual_seed(4)
    env = TradingEnv(market, cfg)
    starts = (torch.rand(n, generator=gen, device=device) * (market.rows - cfg.episode_rows - 2)).long()
    obs = env.reset(starts)
    out: dict[str, Any] = {"envs": n}
    its, reps = (20, 3) if not args.quick else (2, 1)
    out["greedy_ms"] = timed(lambda: agent.policy(obs, Mode.GREEDY), device, its, reps)["ms"]
    out["explore_ms"] = timed(lambda: agent.policy(obs, Mode.EXPLORE), device, its, reps)["ms"]
    if device.type == "cuda":
        static = obs.clone()
        try:
            replay = graphed(lambda: agent.policy(static, Mode.GREEDY))
            out["greedy_graph_ms"] = timed(replay, device, its, reps)["ms"]
        except RuntimeError as err:  # e.g. a host copy inside the policy
            out["greedy_graph_error"] = str(err)[:300]
    actions = agent.policy(obs, Mode.GREEDY).actions
    out["env_step_ms"] = timed(lambda: env.step(actions), device, its, reps, warmup=1)["ms"]
    if device.type == "cuda":  # host-device synchronisations inside each part (where in the source)
        batch = min(args.batch, len(agent.replay))
        parts: dict[str, Callable[[], object]] = {
            "policy_greedy": lambda: agent.policy(obs, Mode.GREEDY),
            "policy_explore": lambda: agent.policy(obs, Mode.EXPLORE),
            "env_step": lambda: env.step(actions),
            "collect_4_steps": lambda: agent.collect(market, EnvConfig(episode_rows=5), starts, 4),
            "learn_1": lambda: agent.learn(1, batch),
        }
        out["syncs"] = {name: syncs(fn) for name, fn in parts.items()}
    return out


def references(agent: Agent, market: MarketTensors, cfg: EnvConfig, args: argparse.Namespace) -> dict:
    """The same run's references (CUDA): the env step alone (compiled + CUDA graph, bench/env.py's
    ``compiled`` mode) at the collection's batch, and a bare forward+backward+Adam of a copy of the
    network on one replay batch (plain and as a CUDA graph, bench/learner.py's ``bare_step``)."""
    import copy

    device = agent.device
    out: dict[str, float] = {}
    env = TradingEnv(market, cfg)
    gen = torch.Generator(device=device).manual_seed(5)
    span = market.rows - cfg.episode_rows - 2
    env.reset((torch.rand(args.envs, generator=gen, device=device) * span).long())
    sizes = torch.tensor(env.codec.sizes, device=device)
    a = (torch.rand(args.envs, len(env.codec.sizes), generator=gen, device=device) * sizes).long()
    step, out["env_alone_setup_s"] = make_stepper(env, "compiled", device.type)
    out["env_alone_ms"] = timed(lambda: step(a), device, 20, 3)["ms"]
    out["env_alone_steps_per_s"] = args.envs / (out["env_alone_ms"] / 1e3)
    net = copy.deepcopy(agent.policy.net)
    x = agent.replay.sample(min(args.batch, len(agent.replay)), agent.gen)[0]["state"]
    bare = bare_step(net, make_adam(net, agent.cfg.learn.lr, device), x)
    out["bare_update_ms"] = timed(bare, device, 10, 3)["ms"]
    if device.type == "cuda":
        out["bare_update_graph_ms"] = timed(graphed(bare), device, 10, 3)["ms"]
    return out


def syncs(fn: Callable[[], object]) -> list[str]:
    """Where ``fn`` synchronises the host with the device (``torch.cuda.set_sync_debug_mode``)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    where = [f"{Path(w.filename).name}:{w.lineno}" for w in caught if "synchroniz" in str(w.message)]
    return sorted(set(where))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--envs", type=int, default=16_384)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--updates", type=int, default=200)
    ap.add_argument("--batch", type=int, default=16_384)
    ap.add_argument("--val-rows", type=int, default=100_000)
    ap.add_argument(
        "--val-episode-rows", type=int, default=EnvConfig().episode_rows, help="validation window length"
    )
    ap.add_argument("--capacity", type=int, default=1 << 21, help="replay capacity")
    ap.add_argument(
        "--extra-val-windows",
        default="",
        help="comma-separated other validation window lengths to time (validation alone), e.g. 101",
    )
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument(
        "--graph-learn",
        action="store_true",
        help="replay Learner.update as a CUDA graph (bench/learner.py's GraphedUpdate) instead of eager",
    )
    ap.add_argument("--eager-learn", action="store_true", help="the eager learner update (not train's graph)")
    ap.add_argument(
        "--step-mode",
        type=StepMode,
        choices=list(StepMode),
        default=StepMode.AUTO,
        help="the collection step (default auto, as train runs it; compiled_graph also compiles the "
        "exploring forward)",
    )
    ap.add_argument("--probe", action="store_true", help="time the policy and env step alone per batch size")
    ap.add_argument("--quick", action="store_true", help="tiny sizes and the smoke network (CPU check)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    device = torch.device(args.device)
    cfg = AgentConfig()
    if args.quick:
        cfg = load_config(profile="smoke").agent
        args.envs, args.steps, args.updates, args.batch = 64, 8, 4, 256
        args.val_rows, args.capacity, args.epochs = 2_000, 4_096, 2
    if args.out is None:
        tag = "quick" if args.quick else "h200" if device.type == "cuda" else "cpu"
        args.out = REPO / "bench" / "results" / f"epoch_{tag}.json"
    elif args.out.suffix != ".json":  # a folder (the device tool's $OUT)
        args.out = args.out / f"epoch_{device.type}{'_quick' if args.quick else ''}.json"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    hw: dict[str, Any] = {
        "torch": torch.__version__,
        "device": str(device),
        "cpu_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        hw["gpu"] = torch.cuda.get_device_name(device)

    t0 = time.perf_counter()
    torch.manual_seed(0)
    market = market_with_aux(args.device)
    agent = Agent(cfg, BranchConfig(), device=device, seed=0, replay_capacity=args.capacity)
    agent.update_mode = UpdateMode.EAGER if args.eager_learn else UpdateMode.AUTO
    agent.step_mode = args.step_mode
    train_cfg = EnvConfig(episode_rows=args.steps + 1)
    val_cfg = EnvConfig(episode_rows=args.val_episode_rows)
    gen = torch.Generator(device=device).manual_seed(3)
    graph: dict[str, GraphedUpdate] = {}
    sync(device)
    setup_s = time.perf_counter() - t0
    params = {
        k: getattr(args, k)
        for k in (
            "envs",
            "steps",
            "updates",
            "batch",
            "val_rows",
            "val_episode_rows",
            "capacity",
            "graph_learn",
            "quick",
            "step_mode",
        )
    }
    params["network_params"] = agent.policy.net.param_count()
    doc: dict[str, Any] = {"hardware": hw, "params": params, "setup_s": setup_s, "epochs": []}
    print(
        f"envs {args.envs:,} x steps {args.steps}, {args.updates} updates at batch {args.batch:,}, "
        f"validation {args.val_rows:,} rows (windows of {args.val_episode_rows}), replay "
        f"{agent.replay.capacity:,}, network {params['network_params']:,} params; setup {setup_s:.1f} s",
        hw,
        flush=True,
    )
    head = (
        f"{'epoch':>5} {'collect s':>10} {'learn s':>9} {'validate s':>11} {'metrics s':>10} {'total s':>9}"
    )
    print(head, flush=True)
    for e in range(args.epochs):
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        r = one_epoch(agent, market, args, train_cfg, val_cfg, gen, graph)
        if device.type == "cuda":
            r["peak_mem_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        r["per_unit"] = {
            "collect_ms_per_step": 1e3 * r["collect_s"] / args.steps,
            "env_steps_per_s": args.envs * args.steps / r["collect_s"],
            "learn_ms_per_update": 1e3 * r["learn_s"] / args.updates,
            "validate_ms_per_step": 1e3 * r["validate_s"] / max(r["val_steps"], 1),
        }
        doc["epochs"].append(r)
        args.out.write_text(json.dumps(doc, indent=2))
        print(
            f"{e:>5} {r['collect_s']:>10.3f} {r['learn_s']:>9.3f} {r['validate_s']:>11.3f} "
            f"{r['metrics_s']:>10.3f} {r['total_s']:>9.3f}",
            flush=True,
        )
    last = doc["epochs"][-1]
    parts = {k: last[f"{k}_s"] for k in ("collect", "learn", "validate", "metrics")}
    top = max(parts, key=parts.__getitem__)
    doc["verdict"] = {
        "epoch_s": last["total_s"],
        "required_s": REQUIRED_S,
        "goal_s": GOAL_S,
        "meets_required": last["total_s"] <= REQUIRED_S,
        "meets_goal": last["total_s"] <= GOAL_S,
        "dominant": top,
    }
    args.out.write_text(json.dumps(doc, indent=2))
    doc["validation_windows"] = []
    for rows in (int(w) for w in args.extra_val_windows.split(",") if w):
        cfg_w = EnvConfig(episode_rows=rows)
        greedy = agent.policy.greedy()
        sync(device)
        t0 = time.perf_counter()
        rec = evaluate(market, cfg_w, market.rows - args.val_rows, market.rows, greedy, mode=agent.step_mode)
        sync(device)
        v = {"episode_rows": rows, "validate_s": time.perf_counter() - t0, "steps": int(rec.written.shape[1])}
        v["episodes"] = int(rec.written.shape[0])
        doc["validation_windows"].append(v)
        print(
            f"validation alone, windows of {rows}: {v['validate_s']:.3f} s "
            f"({v['steps']} steps x {v['episodes']} episodes)"
        )
    if args.probe:
        n_val = last["val_episodes"]
        doc["probe"] = [probe(agent, market, val_cfg, n, args) for n in (n_val, args.envs)]
        for p in doc["probe"]:
            print(
                f"per step at {p['envs']:,} envs: greedy policy {p['greedy_ms']:.2f} ms "
                f"(CUDA graph {p.get('greedy_graph_ms', float('nan')):.2f}), exploring policy "
                f"{p['explore_ms']:.2f} ms, env step {p['env_step_ms']:.2f} ms; syncs {p.get('syncs')}"
            )
    args.out.write_text(json.dumps(doc, indent=2))
    u = last["per_unit"]
    print(
        f"last epoch {last['total_s']:.2f} s (required <= {REQUIRED_S:g} s: "
        f"{'yes' if last['total_s'] <= REQUIRED_S else 'NO'}; goal <= {GOAL_S:g} s: "
        f"{'yes' if last['total_s'] <= GOAL_S else 'no'}); dominant: {top} "
        f"({100 * parts[top] / last['total_s']:.0f}%)"
    )
    print(
        f"collect {u['collect_ms_per_step']:.2f} ms/step ({u['env_steps_per_s']:,.0f} env-steps/s), "
        f"learn {u['learn_ms_per_update']:.2f} ms/update, validate {u['validate_ms_per_step']:.2f} ms/step "
        f"over {last['val_steps']} steps x {last['val_episodes']} episodes"
    )
    # The table for the path `train` runs, beside the references measured in this run.
    ref = references(agent, market, train_cfg, args)
    coll = agent._collection.collector  # the collection training ran (Agent.collect builds it once)
    assert coll is not None
    val_graphs = list(agent.policy.greedy().graphs.values())
    compile_s = {
        "collection_capture_s": coll.compile_seconds,
        "validation_capture_s": sum(g.compile_seconds for g in val_graphs),  # type: ignore[attr-defined]
    }
    if agent._graph is not None:  # the learner update's compile (batch >= COMPILE_MIN_BATCH) + capture
        compile_s["learner_compile_capture_s"] = agent._graph.capture_seconds
    learn_ms = u["learn_ms_per_update"]
    bare_ms = ref.get("bare_update_graph_ms", ref["bare_update_ms"])
    table = [
        ("env step alone, compiled + graph (env-steps/s)", ref["env_alone_steps_per_s"], 2e8),
        ("collection in training (env-steps/s)", u["env_steps_per_s"], 2e7),
        (f"validation of {args.val_rows:,} rows (s)", last["validate_s"], 0.5),
        ("learner update (ms)", learn_ms, None),
        ("learner update / bare, graph vs graph", learn_ms / bare_ms, 1.5),
        ("one epoch (s)", last["total_s"], GOAL_S),
    ]
    doc["references"], doc["compile"] = ref, compile_s
    doc["table"] = [{"what": w, "now": v, "goal": g} for w, v, g in table]
    args.out.write_text(json.dumps(doc, indent=2))
    print(f"\n{'what':<50} {'now':>12} {'goal':>10}")
    for w, v, g in table:
        print(f"{w:<50} {v:>12.4g} {'' if g is None else format(g, '.3g'):>10}")
    print(
        f"bare fwd+bwd+Adam {ref['bare_update_ms']:.2f} ms eager, "
        f"{ref.get('bare_update_graph_ms', float('nan')):.2f} ms graph; compile/capture (paid once): "
        + ", ".join(f"{k} {v:.1f}" for k, v in compile_s.items())
        + f", env alone {ref['env_alone_setup_s']:.1f} s"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
