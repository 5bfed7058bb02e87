"""The fused env step's kernel (``foxhunt.env.fused_kernel.step_kernel``) compiled for an H100 (sm_90)
on any host, without a device: registers a thread, spilled bytes and SASS instructions per
configuration (issue 57; docs/results/2026-12-07-fused-registers.md).

    PYTHONPATH=$PWD/src python3 bench/fused_registers.py [--configs f64,f64-ledger,f32-ledger]
                             [--block 128] [--warps 4] [--out bench/results/fused_registers.json]

Triton (PyTorch's CUDA builds ship it; on a CPU host ``pip install triton`` into a side folder and put
it on ``PYTHONPATH``) compiles the kernel as a launch on the default ``[env]`` would (three magnitudes,
a 100-return CVaR ring, touch sizes and volume, the observation written, ``RECIP`` as on CUDA); its
ptxas is run again on the PTX with Triton's flags and ``-v`` for the register and spill figures (a
device reads the same from the loaded kernel: ``n_regs``, ``n_spills``). ``sass`` counts the
kernel's instructions (static), ``shfl`` and ``bar`` the warp shuffles and barriers among them.
About a minute a configuration on one core.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CONFIGS = {
    "f64": (torch.float64, False),
    "f64-ledger": (torch.float64, True),
    "f32": (torch.float32, False),
    "f32-ledger": (torch.float32, True),
}
_POINTER = {torch.float64: "*fp64", torch.float32: "*fp32", torch.int64: "*i64", torch.bool: "*i1"}


def compile_step(dtype: torch.dtype, ledger: bool, block: int, warps: int) -> object:
    """The step kernel compiled for sm_90 (Triton's ``CompiledKernel``)."""
    from triton import compile as triton_compile
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from foxhunt.env.config import EnvConfig
    from foxhunt.env.core import TradingEnv
    from foxhunt.env.fused import kernel_arguments
    from foxhunt.env.fused_kernel import step_kernel
    from foxhunt.env.graph import own_storage
    from tests.env.test_fused import random_market

    env = TradingEnv(random_market(64, 0, dtype, sizes=True, unknown=0.1), EnvConfig(episode_rows=32))
    env.reset(torch.arange(8))
    own_storage(env)
    actions = torch.zeros(8, 4, dtype=torch.int64)
    args, meta, _ = kernel_arguments(env, env.state, actions, True, None, None, None, ledger)
    meta |= {"RECIP": True, "BLOCK": block}  # as launched on CUDA
    positional = [a for a in step_kernel.arg_names if a not in meta]
    signature = {
        name: _POINTER.get(a.dtype, "*i32") if isinstance(a, torch.Tensor) else "i32"
        for name, a in zip(positional, args, strict=True)
    } | dict.fromkeys(meta, "constexpr")
    return triton_compile(
        ASTSource(step_kernel, signature, meta),
        target=GPUTarget("cuda", 90, 32),
        options={"enable_fp_fusion": False, "num_warps": warps},
    )


def figures(kernel: object) -> dict[str, int]:
    """Registers and spills from ptxas ``-v`` on the kernel's PTX (Triton's own flags), instruction
    counts from its SASS."""
    from triton import knobs

    with tempfile.TemporaryDirectory() as tmp:
        ptx = Path(tmp) / "step.ptx"
        ptx.write_text(kernel.asm["ptx"])  # type: ignore[attr-defined]
        log = subprocess.run(
            [knobs.nvidia.ptxas_blackwell.path, "-lineinfo", "--fmad=false", "-v", "--regAllocOptLevel=2",
             "--gpu-name=sm_90a", str(ptx), "-o", str(Path(tmp) / "step.o")],
            capture_output=True, text=True, check=True,
        ).stderr  # fmt: skip
        cubin = Path(tmp) / "step.cubin"
        cubin.write_bytes(kernel.asm["cubin"])  # type: ignore[attr-defined]
        sass = subprocess.run(
            [knobs.nvidia.cuobjdump.path, "-sass", str(cubin)], capture_output=True, text=True, check=True
        ).stdout
    ins = re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+(.*?);", sass, flags=re.M)

    def num(pattern: str) -> int:
        found = re.search(pattern, log)
        return int(found.group(1)) if found else 0

    return {
        "regs": num(r"Used (\d+) registers"),
        "spill_stores": num(r"(\d+) bytes spill stores"),
        "spill_loads": num(r"(\d+) bytes spill loads"),
        "stack": num(r"(\d+) bytes stack frame"),
        "sass": len(ins),
        "shfl": sum(bool(re.search(r"(^|\s)SHFL\.", i)) for i in ins),
        "bar": sum(bool(re.search(r"(^|\s)BAR(\.|\s)", i)) for i in ins),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="f64,f64-ledger,f32-ledger", help=f"of {','.join(CONFIGS)}")
    ap.add_argument("--block", type=int, default=128, help="episodes a program (foxhunt.env.fused.BLOCK)")
    ap.add_argument("--warps", type=int, default=4, help="warps a program (foxhunt.env.fused.NUM_WARPS)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "fused_registers.json")
    args = ap.parse_args()
    rows = []
    print(f"{'config':>11} {'regs':>5} {'spill st':>8} {'spill ld':>8} {'sass':>6} {'shfl':>5} {'bar':>4}")
    for name in args.configs.split(","):
        dtype, ledger = CONFIGS[name]
        t0 = time.perf_counter()
        row = {"config": name, **figures(compile_step(dtype, ledger, args.block, args.warps))}
        row["compile_s"] = time.perf_counter() - t0
        rows.append(row)
        print(
            f"{name:>11} {row['regs']:>5} {row['spill_stores']:>8} {row['spill_loads']:>8} {row['sass']:>6} "
            f"{row['shfl']:>5} {row['bar']:>4}  ({row['compile_s']:.0f} s)",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"block": args.block, "warps": args.warps, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
