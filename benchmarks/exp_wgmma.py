"""Experiment: the Hopper loop (wgmma, MATH_WGMMA) against the mma.sync loop (MATH_MMA) on the
same device, for the public gemm, with cuBLAS as the yardstick; correctness first (relative error
against float64).  Kernel constants and the register cap can be overridden for a sweep:
``EXP_CONST=WGMMA_STAGES=5,GEMM_RASTER_M=1 EXP_MIN_BLOCKS=2 python3 benchmarks/exp_wgmma.py``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupyconv  # noqa: E402
from cupyconv._core import jit, kernels  # noqa: E402
from cupyconv._core.kernels import MATH_MMA, MATH_SIMT, MMA_TILES  # noqa: E402
from cupyconv._gemm.launch import GemmPlan, forced_plan, record_plans  # noqa: E402
from measure import time_gpu  # noqa: E402


def _apply_overrides() -> str:
    for item in filter(None, os.environ.get("EXP_CONST", "").split(",")):
        name, value = item.split("=")
        kernels.KERNEL_CONSTANTS[name] = int(value)
    blocks = int(os.environ.get("EXP_MIN_BLOCKS", "1"))
    kernels._min_blocks = lambda math, simt: (("CC_MIN_BLOCKS", simt if math == MATH_SIMT else blocks),)
    return f"{os.environ.get('EXP_CONST', '')} min_blocks={blocks}"


def main() -> int:
    import cupy
    import torch

    label = _apply_overrides()
    sizes = [int(v) for v in os.environ.get("EXP_SIZES", "4096,8192").split(",")]
    loops = {"wgmma": None}
    if os.environ.get("EXP_MMA"):
        loops["mma"] = GemmPlan(MMA_TILES[MATH_MMA][0], 1, 0.0, MATH_MMA)
    for dtype, td in (("float16", torch.float16),):
        for size in sizes:
            gen = torch.Generator(device="cuda").manual_seed(size)
            at = torch.empty((size, size), device="cuda").uniform_(-1, 1, generator=gen).to(td)
            bt = torch.empty((size, size), device="cuda").uniform_(-1, 1, generator=gen).to(td)
            a, b = cupy.from_dlpack(at), cupy.from_dlpack(bt)
            bk = cupy.ascontiguousarray(b.T).T  # k-contiguous B: no transposed copy per call
            ref = at.double() @ bt.double()
            peer = time_gpu(lambda: torch.matmul(at, bt), repeat=5)
            tflop = 2 * size ** 3 / 1e9  # per ms
            line = f"[{label}] {dtype} {size}^3 cuBLAS {tflop / peer:.0f}"
            for name, plan in loops.items():
                with forced_plan(plan), record_plans() as log:
                    c = cupyconv.gemm(a, bk)
                err = float((torch.from_dlpack(c).double() - ref).norm() / ref.norm())
                with forced_plan(plan):
                    t = time_gpu(lambda: cupyconv.gemm(a, bk), repeat=5)
                used = log[-1][2]
                fn = jit.get_function(kernels.gemm_module(dtype, used.tile, (1, 1), used.math),
                                      "gemm", dtype, (1, 1, used.math))
                line += (f" | {name} {tflop / t:.0f} TFLOP/s ({peer / t:.2f}x) err {err:.1e} "
                         f"tile {used.tile} regs {fn.num_regs} local {fn.local_size_bytes}")
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
