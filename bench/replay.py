"""Replay benchmark: foxhunt's device prioritised replay beside TorchRL's ``PrioritizedReplayBuffer``.

    .venv/bin/python bench/replay.py [--capacity 1048576] [--batch 16384] [--width 136]
                                     [--device cpu|cuda] [--repeats 20] [--threads N] [--compile]
                                     [--no-torchrl] [--out bench/results/replay.json]

foxhunt runs twice, with each priority index (``PriorityIndex.FLAT``: ``searchsorted(cumsum(leaves))``,
and ``TREE``: the sum tree). Both buffers hold the transition record (state and next_state ``[W]``
float32, action ``[4]`` int64, reward, discount, aux ``[3]``) with storage on ``--device``; TorchRL's
uses ``LazyTensorStorage`` and its sum/min segment trees on the same device (its CUDA tree on a GPU).
Timed, in ms per call, after
the buffer is full (so adds overwrite): ``add`` of one batch of transitions, ``sample`` of one batch
(indices, importance weights and the gathered rows), ``update`` of the batch's priorities, and
``sample+update`` back to back (a learner step's replay work), on CUDA also captured as one CUDA
graph (as ``Agent.learn`` replays it inside the learner step). A second table times each priority
index's draw alone.

TorchRL is not a foxhunt dependency: when it is not installed the benchmark says so and times
foxhunt alone. The PyPI TorchRL wheel ships its C++ extension built for one torch version and
without the CUDA tree; when the installed extension does not load or lacks the CUDA tree, this
script compiles the extension from the C++/CUDA sources inside the TorchRL wheel (``torchrl/csrc``)
against the installed torch (``--torchrl-build-only`` does only that, e.g. in the background).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from foxhunt.agent.replay import PrioritizedReplay, PriorityIndex, transition_fields
from foxhunt.domain.actions import BRANCHES
from foxhunt.env.market import AUX_TARGETS
from foxhunt.features.layout import STATE_LAYOUT

REPO = Path(__file__).resolve().parents[1]

_TREE_NAMES = ("SumSegmentTreeFp32", "MinSegmentTreeFp32", "SumSegmentTreeFp64", "MinSegmentTreeFp64")
_CUDA_TREE_NAMES = tuple(f"Cuda{n}" for n in _TREE_NAMES)


# --- TorchRL's extension ----------------------------------------------------------------------------


def build_torchrl_extension(cuda: bool, verbose: bool = False) -> Any:
    """Compile ``torchrl._torchrl`` from the sources inside the installed TorchRL against this torch."""
    from torch.utils.cpp_extension import load

    spec = importlib.util.find_spec("torchrl")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("torchrl is not installed")
    csrc = Path(spec.submodule_search_locations[0]) / "csrc"
    sources = [csrc / "pybind.cpp", csrc / "utils.cpp"] + ([csrc / "cuda_segment_tree.cu"] if cuda else [])
    missing = [s for s in sources if not s.is_file()]
    if missing:
        raise FileNotFoundError(f"TorchRL's wheel has no {missing[0].name} under {csrc}")
    tag = f"torch{torch.__version__}-{'cuda' if cuda else 'cpu'}".replace("+", "_")
    build = Path(os.environ.get("FOXHUNT_TORCHRL_BUILD", "/tmp/foxhunt-torchrl-ext")) / tag
    build.mkdir(parents=True, exist_ok=True)
    if cuda and "TORCH_CUDA_ARCH_LIST" not in os.environ:
        major, minor = torch.cuda.get_device_capability()
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    flags = ["-O3"] + (["-DWITH_CUDA"] if cuda else [])
    return load(
        name="_torchrl",
        sources=[str(s) for s in sources],
        extra_cflags=flags,
        extra_cuda_cflags=["-O3"],
        build_directory=str(build),
        with_cuda=cuda,
        verbose=verbose,
    )


def torchrl_backend(device: torch.device) -> tuple[str | None, str]:
    """Make TorchRL's prioritised sampler usable; (device of its trees or None if unusable, how).

    On a GPU the trees go on the GPU when TorchRL's CUDA tree loads or compiles; otherwise its CPU
    tree serves the GPU storage (said in the result).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import tensordict  # noqa: F401
            import torchrl
            from torchrl.data.replay_buffers.samplers import prioritized as trl_prio
    except ImportError as err:
        return None, f"TorchRL is not installed ({err}); install torchrl and tensordict to compare"
    version = f"torchrl {torchrl.__version__}"

    def have(names: tuple[str, ...]) -> bool:
        return all(getattr(trl_prio, n, None) is not None for n in names)

    cuda = device.type == "cuda"
    if have(_TREE_NAMES + (_CUDA_TREE_NAMES if cuda else ())):
        return device.type, f"{version}, prebuilt extension"
    errors = []
    for build_cuda in (True, False) if cuda else (False,):
        t0 = time.perf_counter()
        try:
            ext = build_torchrl_extension(build_cuda)
        except Exception as err:  # a compiler or toolkit problem: say so, try the next
            errors.append(f"{'CUDA' if build_cuda else 'CPU'} build: {type(err).__name__}: {err}"[:600])
            continue
        for n in _TREE_NAMES + _CUDA_TREE_NAMES:
            setattr(trl_prio, n, getattr(ext, n, None))
        how = (
            f"{version}, extension compiled (or loaded from the build cache) from its csrc in "
            f"{time.perf_counter() - t0:.0f} s "
            "(the PyPI wheel's is built for another torch and has no CUDA tree)"
        )
        if cuda and not build_cuda:
            return "cpu", how + "; CUDA build failed, so its CPU tree serves the GPU storage: " + errors[0]
        return device.type, how
    return None, f"{version}: its extension neither loads nor compiles here: " + " | ".join(errors)


# --- the two buffers behind one interface ---------------------------------------------------------


class FoxhuntBuffer:
    def __init__(
        self, args: argparse.Namespace, device: torch.device, compiled: bool, index: PriorityIndex
    ) -> None:
        self.name = f"foxhunt {index.value}" + (" (compiled)" if compiled else "")
        fields = transition_fields(args.width, len(BRANCHES))
        self.rb = PrioritizedReplay(
            args.capacity, fields, alpha=args.alpha, beta=args.beta, eps=args.eps, device=device, index=index
        )
        if compiled:
            pri = self.rb.priorities
            pri.sample = torch.compile(pri.sample, dynamic=False)  # type: ignore[method-assign]
            pri.update = torch.compile(pri.update, dynamic=False)  # type: ignore[method-assign]
        self.batch = args.batch
        self.gen = torch.Generator(device=device).manual_seed(0)

    def wrap(self, data: dict[str, torch.Tensor]) -> Any:
        return data

    def add(self, data: Any) -> None:
        self.rb.add(data)

    def sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        _, idx, w = self.rb.sample(self.batch, self.gen)
        return idx, w

    def update(self, idx: torch.Tensor, td: torch.Tensor) -> None:
        self.rb.update_priorities(idx, td)


class TorchRLBuffer:
    def __init__(self, args: argparse.Namespace, device: torch.device, tree_device: str) -> None:
        from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer

        self.name = "torchrl" + (" (cpu tree)" if tree_device != device.type else "")
        self.device = device
        self.rb = PrioritizedReplayBuffer(
            alpha=args.alpha,
            beta=args.beta,
            eps=args.eps,
            storage=LazyTensorStorage(args.capacity, device=device),
            batch_size=args.batch,
            sampler_device=tree_device,
        )

    def wrap(self, data: dict[str, torch.Tensor]) -> Any:
        from tensordict import TensorDict

        return TensorDict(data, batch_size=[next(iter(data.values())).shape[0]], device=self.device)

    def add(self, data: Any) -> None:
        self.rb.extend(data)

    def sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        _, info = self.rb.sample(return_info=True)
        return info["index"], info["priority_weight"]

    def update(self, idx: torch.Tensor, td: torch.Tensor) -> None:
        self.rb.update_priority(idx, td)

    def tree_kind(self) -> str:
        return type(self.rb._sampler._sum_tree).__name__


# --- timing ---------------------------------------------------------------------------------------


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], repeats: int, device: torch.device, rounds: int = 3) -> float:
    """ms per call: the best of ``rounds`` means over ``repeats`` calls, after two warm-up calls."""
    fn()
    fn()
    best = float("inf")
    for _ in range(rounds):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        sync(device)
        best = min(best, (time.perf_counter() - t0) / repeats * 1e3)
    return best


def transitions(n: int, width: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(1)
    return {
        "state": torch.randn(n, width, device=device, generator=g),
        "action": torch.randint(0, 3, (n, len(BRANCHES)), device=device, generator=g),
        "reward": torch.randn(n, device=device, generator=g),
        "discount": torch.full((n,), 0.99**3, device=device),
        "next_state": torch.randn(n, width, device=device, generator=g),
        "aux": torch.randn(n, len(AUX_TARGETS), device=device, generator=g),
    }


def run(buf: Any, args: argparse.Namespace, device: torch.device, base_mem: int) -> dict[str, Any]:
    data = buf.wrap(transitions(args.batch, args.width, device))
    td = torch.rand(args.batch, device=device) * 2
    t0 = time.perf_counter()
    for _ in range(-(-args.capacity // args.batch)):  # fill once (includes any compilation)
        buf.add(data)
    idx, w = buf.sample()
    buf.update(idx, td)
    sync(device)
    row: dict[str, Any] = {"buffer": buf.name, "fill_s": time.perf_counter() - t0}
    row["add_ms"] = timed(lambda: buf.add(data), args.repeats, device)
    row["sample_ms"] = timed(buf.sample, args.repeats, device)
    row["update_ms"] = timed(lambda: buf.update(idx, td), args.repeats, device)
    row["step_ms"] = timed(lambda: buf.update(buf.sample()[0], td), args.repeats, device)
    if device.type == "cuda" and isinstance(buf, FoxhuntBuffer):  # as Agent.learn runs it: in a graph
        try:
            replay = captured(lambda: buf.update(buf.sample()[0], td), buf.gen)
            row["step_graph_ms"] = timed(replay, args.repeats, device)
        except Exception as err:  # report, keep the eager numbers
            row["step_graph_error"] = f"{type(err).__name__}: {err}"[:400]
    if device.type == "cuda":
        row["peak_mem_gib"] = (torch.cuda.max_memory_allocated(device) - base_mem) / 2**30  # storage too
    if isinstance(buf, TorchRLBuffer):
        row["tree"] = buf.tree_kind()
    return row


def captured(step: Callable[[], object], gen: torch.Generator) -> Callable[[], None]:
    """``step`` captured as one CUDA graph (its draws from the registered ``gen``); returns the replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    graph.register_generator_state(gen)
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def search_only(fox: FoxhuntBuffer, args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    """The priority index's draw alone (no gather of the rows, no weights)."""
    pri = fox.rb.priorities
    fractions = (torch.arange(args.batch, device=device) + torch.rand(args.batch, device=device)).double()
    fractions = fractions / args.batch
    ms = timed(lambda: pri.sample(fractions), args.repeats, device)
    return [{"search": f"{fox.name} sample", "ms": ms}]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--capacity", type=int, default=1 << 20)
    ap.add_argument("--batch", type=int, default=16_384)
    ap.add_argument(
        "--width", type=int, default=STATE_LAYOUT.width, help="state width W (default STATE_LAYOUT.width)"
    )
    ap.add_argument("--alpha", type=float, default=0.6)
    ap.add_argument("--beta", type=float, default=0.4)
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    ap.add_argument("--compile", action="store_true", help="also time foxhunt with torch.compile'd tree ops")
    ap.add_argument("--no-torchrl", action="store_true", help="time foxhunt alone")
    ap.add_argument("--torchrl-build-only", action="store_true", help="compile TorchRL's extension, exit")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "replay.json")
    args = ap.parse_args()
    device = torch.device(args.device)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.capacity & (args.capacity - 1):
        ap.error(f"--capacity {args.capacity} is not a power of 2 (foxhunt would round it up)")
    if args.torchrl_build_only:
        tree_device, how = torchrl_backend(device)
        print(how)
        return 0 if tree_device is not None else 1
    if args.out.suffix != ".json":  # a folder (e.g. the device tool's $OUT)
        args.out = args.out / "replay.json"
    torch.manual_seed(0)
    hw: dict[str, Any] = {
        "torch": torch.__version__,
        "device": str(device),
        "cpu_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        hw["gpu"] = torch.cuda.get_device_name(device)
    params = {k: getattr(args, k) for k in ("capacity", "batch", "width", "alpha", "beta", "eps", "repeats")}
    doc: dict[str, Any] = {"hardware": hw, "params": params, "rows": [], "search_only": []}

    makers: list[Callable[[], Any]] = [
        lambda: FoxhuntBuffer(args, device, compiled=False, index=PriorityIndex.FLAT),
        lambda: FoxhuntBuffer(args, device, compiled=False, index=PriorityIndex.TREE),
    ]
    doc["torchrl"] = "skipped (--no-torchrl)"
    if not args.no_torchrl:
        tree_device, doc["torchrl"] = torchrl_backend(device)
        if tree_device is not None:
            makers.append(lambda: TorchRLBuffer(args, device, tree_device))
    if args.compile:
        makers.append(lambda: FoxhuntBuffer(args, device, compiled=True, index=PriorityIndex.TREE))

    print(f"capacity {args.capacity:,}  batch {args.batch:,}  W {args.width}  device {device}  {hw}")
    print(f"torchrl: {doc['torchrl']}")
    print(
        f"{'buffer':<20} {'add ms':>9} {'sample ms':>10} {'update ms':>10} {'sample+update':>14}"
        f" {'fill s':>7}",
        flush=True,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for make in makers:
        buf = None
        base_mem = 0
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            base_mem = torch.cuda.memory_allocated(device)
        try:
            buf = make()
            r = run(buf, args, device, base_mem)
            print(
                f"{r['buffer']:<20} {r['add_ms']:>9.3f} {r['sample_ms']:>10.3f} {r['update_ms']:>10.3f} "
                f"{r['step_ms']:>14.3f} {r['fill_s']:>7.2f}"
                + (f"   tree {r['tree']}" if "tree" in r else "")
                + (f"   in a CUDA graph {r['step_graph_ms']:.3f} ms" if "step_graph_ms" in r else ""),
                flush=True,
            )
            if isinstance(buf, FoxhuntBuffer):
                doc["search_only"] += search_only(buf, args, device)
        except Exception as err:  # report, keep the other buffers' numbers
            r = {"buffer": getattr(buf, "name", "?"), "error": f"{type(err).__name__}: {err}"[:2000]}
            print(f"{r['buffer']:<20} error: {r['error']}", flush=True)
        doc["rows"].append(r)
        del buf  # free the device memory before the next buffer
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        args.out.write_text(json.dumps(doc, indent=2))

    ok = {r["buffer"]: r for r in doc["rows"] if "error" not in r}
    fox = ok.get("foxhunt flat")
    trl = next((r for name, r in ok.items() if name.startswith("torchrl")), None)
    if fox and trl:
        doc["ratios_torchrl_over_foxhunt"] = {
            k: trl[k] / fox[k] for k in ("add_ms", "sample_ms", "update_ms", "step_ms")
        }
        ratios = "  ".join(f"{k[:-3]} {v:.2f}x" for k, v in doc["ratios_torchrl_over_foxhunt"].items())
        print(f"{trl['buffer']} time / foxhunt time: {ratios}")
    print(f"{'search only':<32} {'ms':>8}")
    for s in doc["search_only"]:
        print(f"{s['search']:<32} {s['ms']:>8.3f}")
    args.out.write_text(json.dumps(doc, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
