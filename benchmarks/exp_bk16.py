"""Experiment: k-slice depth of the 128x128 tile, BK = 8 vs 16, on square GEMMs and on the conv
layers in NHWC (implicit kernel) with the planner's split-K.  python3 benchmarks/exp_bk16.py"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

import cupyconv  # noqa: E402
import cupyconv._gemm.launch as gl  # noqa: E402
from bench import SUITE  # noqa: E402
from cupyconv._core.geometry import ConvGeometry  # noqa: E402
from cupyconv._core.timing import time_gpu  # noqa: E402

base_plan = gl.plan_gemm
rng = cupy.random.default_rng(0)
cases = []
for size in (4096, 8192):
    a = rng.uniform(-1, 1, (size, size), dtype=cupy.float32)
    b = rng.uniform(-1, 1, (size, size), dtype=cupy.float32)
    cases.append((f"gemm {size}", 2 * size ** 3, lambda a=a, b=b: cupyconv.gemm(a, b)))
for name, (n, c, h, w, k, r, s, p, d, g) in SUITE.items():
    if g != 1 or c % 16:
        continue
    geom = ConvGeometry.from_shapes((n, h, w, c), (k, r, r, c), stride=s, padding=p, dilation=d,
                                    layout="NHWC")
    x = rng.uniform(-1, 1, geom.input_shape, dtype=cupy.float32)
    wt = rng.uniform(-1, 1, geom.weight_shape, dtype=cupy.float32)
    cases.append((name + " NHWC", geom.flops, lambda x=x, wt=wt, s=s, p=p, d=d: cupyconv.conv(
        x, wt, stride=s, padding=p, dilation=d, layout="NHWC", method="implicit_gemm")))
results = {}
for bk in (8, 16):
    def plan(dtype, m, n, k, batch, dev=0, bk=bk):
        p = base_plan(dtype, m, n, k, batch, dev)
        return gl.GemmPlan((128, 128, bk, 8, 8), p.splits, p.seconds) if p.tile[:2] == (128, 128) else p
    gl.plan_gemm = plan
    for label, flops, fn in cases:
        results[(label, bk)] = time_gpu(fn, repeat=20)
for label, flops, _ in cases:
    t1, t2 = results[(label, 8)], results[(label, 16)]
    print(f"{label:26s} BK=8 {t1:7.3f} ms ({flops / t1 / 1e9:5.1f} TF)  BK=16 {t2:7.3f} ms "
          f"({flops / t2 / 1e9:5.1f} TF)", flush=True)
