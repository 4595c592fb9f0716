"""Experiment: register cap (blocks per SM) of the GEMM kernels, 1 vs 2, on square GEMMs and on
the conv layers' GEMM shapes.  python3 benchmarks/exp_min_blocks.py"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

import cupyconv  # noqa: E402
import cupyconv._gemm.launch as gl  # noqa: E402
from bench import SUITE  # noqa: E402
from cupyconv._core.geometry import ConvGeometry  # noqa: E402
from cupyconv._core.kernels import KernelModule  # noqa: E402
from cupyconv._core.timing import time_gpu  # noqa: E402

base_gemm, base_conv = gl.gemm_module, gl.conv_fprop_module
rng = cupy.random.default_rng(0)
cases = []
for size in (4096, 8192):
    a = rng.uniform(-1, 1, (size, size), dtype=cupy.float32)
    b = rng.uniform(-1, 1, (size, size), dtype=cupy.float32)
    cases.append((f"gemm {size}", 2 * size ** 3, lambda a=a, b=b: cupyconv.gemm(a, b)))
for name, (n, c, h, w, k, r, s, p, d, g) in SUITE.items():
    if g != 1:
        continue
    geom = ConvGeometry.from_shapes((n, c, h, w), (k, c, r, r), stride=s, padding=p, dilation=d)
    x = rng.uniform(-1, 1, (n, c, h, w), dtype=cupy.float32)
    wt = rng.uniform(-1, 1, (k, c, r, r), dtype=cupy.float32)
    cases.append((name, geom.flops, lambda x=x, wt=wt, s=s, p=p, d=d: cupyconv.conv(
        x, wt, stride=s, padding=p, dilation=d, method="implicit_gemm")))
results = {}
for mb in (1, 2):
    gl.gemm_module = lambda *a, mb=mb: KernelModule(**{**base_gemm(*a).__dict__, "defines": (("CC_MIN_BLOCKS", mb),)})
    gl.conv_fprop_module = lambda *a, mb=mb: KernelModule(**{**base_conv(*a).__dict__, "defines": (("CC_MIN_BLOCKS", mb),)})
    for label, flops, fn in cases:
        results[(label, mb)] = time_gpu(fn, repeat=20)
for label, flops, _ in cases:
    t1, t2 = results[(label, 1)], results[(label, 2)]
    print(f"{label:22s} minblocks=1 {t1:7.3f} ms ({flops / t1 / 1e9:5.1f} TF)  "
          f"minblocks=2 {t2:7.3f} ms ({flops / t2 / 1e9:5.1f} TF)", flush=True)
