"""What a captured step can cost at best on this card, and where its time goes (issue 57's closing
note: each unmet goal's distance from its launch or memory floor, shown by a profile).

bench/fused_step.py and bench/collection.py import it (``--profile``); run alone it prints this card's
floors: ``python3 bench/floors.py [--device cuda|cpu]``.

* :func:`launch_seconds`: one kernel node of a replayed CUDA graph, measured here (a graph of 256
  one-element adds, replayed): the launch floor of a step is its kernels times this.
* :func:`matmul_flops`: the card's float32 matmul rate with TF32 tensor cores on (as collection's
  forward runs, ``foxhunt.agent.collect.tf32_matmuls``), measured on 8192^3 products: the compute
  floor of a forward is its FLOPs over this.
* the memory floor is bytes an env-step must move over bench/env.py's ``copy_bandwidth``;
* :func:`kernel_profile`: ``torch.profiler`` (CUDA activity only: CUPTI reports a replayed graph's
  kernels one by one) over ``run()``, which performs ``steps`` steps; kernels launched at least once a
  step are the step's, the rest (``per_epoch``) run once a call (a collection's reset and replay
  write). :func:`print_profile` prints the top kernels and the floors beside the measured time.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import torch


def launch_seconds(kernels: int = 256, reps: int = 20) -> float:
    """Seconds one kernel node of a replayed CUDA graph takes when the kernel itself does nothing
    (one-element adds in a row, the graph replayed ``reps`` times)."""
    x = torch.zeros(1, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x.add_(1.0)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(kernels):
            x.add_(1.0)
    graph.replay()
    torch.cuda.synchronize()
    return replay_ms(graph, reps) / 1e3 / kernels


def replay_ms(graph: torch.cuda.CUDAGraph, reps: int) -> float:
    """Milliseconds one replay of ``graph`` takes, ``reps`` replays timed by CUDA events."""
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / reps


def matmul_flops(size: int = 8192, reps: int = 10) -> float:
    """float32 matmul FLOP/s with TF32 tensor cores (``float32_matmul_precision("high")``)."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        a = torch.randn(size, size, device="cuda")
        b = torch.randn(size, size, device="cuda")
        a @ b
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(reps):
            a @ b
        end.record()
        end.synchronize()
        return 2 * size**3 * reps / (begin.elapsed_time(end) / 1e3)
    finally:
        torch.set_float32_matmul_precision(previous)


def card(device: str) -> dict[str, float]:
    """This device's ``launch_s``, ``bandwidth`` (bytes read + written a second) and ``tf32_flops``;
    on a CPU (a check that the profiling code runs) one operator call, a copy and a float32 matmul."""
    if device == "cuda":
        from env import copy_bandwidth

        return {"launch_s": launch_seconds(), "bandwidth": copy_bandwidth(), "tf32_flops": matmul_flops()}
    x, big = torch.zeros(1), torch.randn(2**22)
    t0 = time.perf_counter()
    for _ in range(1000):
        x.add_(1.0)
    launch = (time.perf_counter() - t0) / 1000
    t0 = time.perf_counter()
    big.clone()
    bandwidth = 2 * big.numel() * 4 / (time.perf_counter() - t0)
    a = torch.randn(512, 512)
    t0 = time.perf_counter()
    a @ a
    return {"launch_s": launch, "bandwidth": bandwidth, "tf32_flops": 2 * 512**3 / (time.perf_counter() - t0)}


def kernel_profile(run: Callable[[], object], steps: int, device: str = "cuda") -> dict[str, object]:
    """The kernels ``run()`` launches (it performs ``steps`` steps), by device time: ``kernels`` (name,
    calls, us a step), ``kernels_per_step`` and ``kernel_us_per_step`` over the kernels launched at
    least once a step, ``per_epoch_us`` the device time of the others (once a call). On a CPU the
    operators and their own CPU time instead (a check that the code runs)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        run()
        if cuda:
            torch.cuda.synchronize()

    def spent(e: object) -> float:
        return float(e.device_time_total if cuda else e.self_cpu_time_total)  # type: ignore[attr-defined]

    rows = [
        {"kernel": e.key[:100], "calls": int(e.count), "us_per_step": spent(e) / steps}
        for e in prof.key_averages()
        if spent(e) > 0
    ]
    rows.sort(key=lambda r: -float(r["us_per_step"]))  # type: ignore[arg-type]
    per_step = [r for r in rows if int(r["calls"]) >= steps]  # type: ignore[call-overload]
    return {
        "kernels": rows,
        "kernels_per_step": sum(int(r["calls"]) for r in per_step) / steps,  # type: ignore[call-overload]
        "kernel_us_per_step": sum(float(r["us_per_step"]) for r in per_step),  # type: ignore[arg-type]
        "per_epoch_us": sum(float(r["us_per_step"]) for r in rows if r not in per_step) * steps,  # type: ignore[arg-type]
    }


def floors(
    prof: dict[str, object],
    envs: int,
    measured_us: float,
    *,
    launch_s: float,
    bytes_per_env_step: float,
    bandwidth: float,
    flops_per_env_step: float = 0.0,
    flops: float = 0.0,
) -> dict[str, float]:
    """The step's floors in microseconds: ``launch_us`` (its kernels a step times one graph node),
    ``memory_us`` (its bytes over the copy bandwidth), ``compute_us`` (its matmul FLOPs over the TF32
    rate, 0 without); ``floor_us`` the largest and ``of_floor`` the measured time's multiple of it."""
    out = {
        "launch_us": float(prof["kernels_per_step"]) * launch_s * 1e6,  # type: ignore[arg-type]
        "memory_us": envs * bytes_per_env_step / bandwidth * 1e6,
        "compute_us": envs * flops_per_env_step / flops * 1e6 if flops else 0.0,
    }
    out["floor_us"] = max(out.values())
    out["measured_us"] = measured_us
    out["of_floor"] = measured_us / out["floor_us"] if out["floor_us"] else float("nan")
    return out


def print_profile(label: str, prof: dict[str, object], floor: dict[str, float], top: int = 8) -> None:
    """The top kernels and the floors, one block."""
    print(
        f"\nprofile {label}: {prof['kernels_per_step']:.1f} kernels a step, "
        f"{prof['kernel_us_per_step']:.1f} us of kernels a step "
        f"(once a call: {prof['per_epoch_us']:.0f} us); "
        f"measured {floor['measured_us']:.1f} us a step; floors: launch {floor['launch_us']:.1f}, "
        f"memory {floor['memory_us']:.1f}, compute {floor['compute_us']:.1f} us -> "
        f"{floor['of_floor']:.2f}x the largest",
        flush=True,
    )
    for r in prof["kernels"][:top]:  # type: ignore[index]
        print(f"  {r['us_per_step']:>9.2f} us  x{r['calls']:<6} {r['kernel']}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    print(json.dumps({"device": args.device, **card(args.device)}, indent=1))


if __name__ == "__main__":
    main()
