"""Experiment: the Hopper loop (wgmma, MATH_WGMMA) against the mma.sync loop (MATH_MMA) on the
same device, for the public gemm, with cuBLAS as the yardstick; correctness first (relative error
against float64).  Kernel constants and the register cap can be overridden for a sweep:
``EXP_CONST=GEMM_RASTER_M=1 EXP_SHORT_K=0 python3 benchmarks/exp_wgmma.py`` (``EXP_SHORT_K``: the
most k elements per block of the two-block build; ``EXP_CONV=1``: the conv layers instead, of the
bench_precision labels in ``EXP_PREC``, default fp16,bf16; ``EXP_TF32=1``: the gemm in TF32 too,
with PyTorch's TF32 error beside ours; ``EXP_CONST=TF32_ROUND_STAGE=0``: TF32 slices unrounded)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupyconv  # noqa: E402
from cupyconv._core import jit, kernels  # noqa: E402
from cupyconv._core.kernels import MATH_MMA, MATH_TF32, MMA_TILES  # noqa: E402
from cupyconv._gemm import launch  # noqa: E402
from cupyconv._gemm.launch import GemmPlan, forced_plan, record_plans  # noqa: E402
from measure import time_gpu  # noqa: E402


def _apply_overrides() -> str:
    for item in filter(None, os.environ.get("EXP_CONST", "").split(",")):
        name, value = item.split("=")
        kernels.KERNEL_CONSTANTS[name] = int(value)
    if os.environ.get("EXP_SHORT_K"):
        launch.WGMMA_SHORT_K = int(os.environ["EXP_SHORT_K"])
    return f"{os.environ.get('EXP_CONST', '')} short_k={launch.WGMMA_SHORT_K}"


def conv_layers(label: str) -> None:
    """bench_precision's ResNet-50 layers at the precisions labelled in EXP_PREC."""
    import bench_precision
    import measure

    torch = measure.load_torch()
    labels = os.environ.get("EXP_PREC", "fp16,bf16").split(",")
    bench_precision.PRECISIONS = [p for p in bench_precision.PRECISIONS if p[0] in labels]
    rows = bench_precision.layer_rows(torch, measure.device_facts()["l2_bytes"], 10, "")
    for r in rows:
        print(f"[{label}] {r['layer']} {r['precision']} " + " ".join(
            f"{pas} {r['ms'][pas]:.4f}" for pas in bench_precision.PASSES), flush=True)
    for key, v in bench_precision.summary(rows).items():
        print(f"[{label}] {key}: geomean {v['geomean']:.2f}x min {v['min']:.2f}x", flush=True)


def main() -> int:
    import cupy
    import torch

    label = _apply_overrides()
    if os.environ.get("EXP_CONV"):
        conv_layers(label)
        return 0
    sizes = [int(v) for v in os.environ.get("EXP_SIZES", "4096,8192").split(",")]
    loops = {"wgmma": None}
    if os.environ.get("EXP_MMA"):
        loops["mma"] = GemmPlan(MMA_TILES[MATH_MMA][0], 1, 0.0, MATH_MMA)
    kinds = [("float16", torch.float16, "exact")]
    if os.environ.get("EXP_TF32"):
        kinds.append(("float32", torch.float32, "tf32"))
        torch.backends.cuda.matmul.allow_tf32 = True
    for dtype, td, precision in kinds:
        for size in sizes:
            gen = torch.Generator(device="cuda").manual_seed(size)
            at = torch.empty((size, size), device="cuda").uniform_(-1, 1, generator=gen).to(td)
            bt = torch.empty((size, size), device="cuda").uniform_(-1, 1, generator=gen).to(td)
            a, b = cupy.from_dlpack(at), cupy.from_dlpack(bt)
            bk = cupy.ascontiguousarray(b.T).T  # k-contiguous B: no transposed copy per call
            ref = at.double() @ bt.double()
            peer = time_gpu(lambda: torch.matmul(at, bt), repeat=5)
            tflop = 2 * size ** 3 / 1e9  # per ms
            peer_err = float((torch.matmul(at, bt).double() - ref).norm() / ref.norm())
            line = f"[{label}] {dtype} {precision} {size}^3 cuBLAS {tflop / peer:.0f} err {peer_err:.1e}"
            if precision == "tf32" and "mma" in loops:
                loops["mma"] = GemmPlan(MMA_TILES[MATH_TF32][0], 1, 0.0, MATH_TF32)
            for name, plan in loops.items():
                with forced_plan(plan), record_plans() as log:
                    c = cupyconv.gemm(a, bk, precision=precision)
                err = float((torch.from_dlpack(c).double() - ref).norm() / ref.norm())
                with forced_plan(plan):
                    t = time_gpu(lambda: cupyconv.gemm(a, bk, precision=precision), repeat=5)
                used = log[-1][2]
                fn = jit.get_function(kernels.gemm_module(dtype, used.tile, (1, 1), used.math, used.blocks),
                                      "gemm", dtype, (1, 1, used.math))
                line += (f" | {name} {tflop / t:.0f} TFLOP/s ({peer / t:.2f}x) err {err:.1e} "
                         f"tile {used.tile} regs {fn.num_regs} local {fn.local_size_bytes}")
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
