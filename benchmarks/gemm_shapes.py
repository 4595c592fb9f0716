"""Diagnostic: the dense GEMM on each conv layer's GEMM shape vs the implicit conv (both layouts).

    python3 benchmarks/gemm_shapes.py

Shows how much of the implicit kernel's time is the main loop (dense GEMM of the same M, N, K)
and how much is its operand view.  Prints one line per layer.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

import cupyconv  # noqa: E402
from bench import SUITE  # noqa: E402
from cupyconv._gemm.launch import plan_gemm  # noqa: E402
from cupyconv._core.geometry import ConvGeometry  # noqa: E402
from cupyconv._core.timing import time_gpu  # noqa: E402

rng = cupy.random.default_rng(0)
for name, (n, c, h, w, k, r, s, p, d, g) in SUITE.items():
    if g != 1:
        continue
    geom = ConvGeometry.from_shapes((n, c, h, w), (k, c, r, r), stride=s, padding=p, dilation=d,
                                    dtype="float32")
    m, nn, kk, _ = geom.gemm_forward
    a = rng.uniform(-1, 1, (m, kk), dtype=cupy.float32)
    b = rng.uniform(-1, 1, (kk, nn), dtype=cupy.float32)
    t_gemm = time_gpu(lambda: cupyconv.gemm(a, b), repeat=20)
    x = rng.uniform(-1, 1, (n, c, h, w), dtype=cupy.float32)
    wt = rng.uniform(-1, 1, (k, c, r, r), dtype=cupy.float32)
    xl, wl = cupy.ascontiguousarray(x.transpose(0, 2, 3, 1)), cupy.ascontiguousarray(wt.transpose(0, 2, 3, 1))
    opts = dict(stride=s, padding=p, dilation=d, method="implicit_gemm")
    t_nchw = time_gpu(lambda: cupyconv.conv(x, wt, **opts), repeat=20)
    t_nhwc = time_gpu(lambda: cupyconv.conv(xl, wl, layout="NHWC", **opts), repeat=20)
    plan = plan_gemm("float32", m, nn, kk, 1)
    tf = geom.flops / 1e9
    print(f"{name:22s} M={m:6d} N={nn:4d} K={kk:5d} plan={plan.tile[:2]}x{plan.splits} "
          f"est {plan.seconds * 1e3:.3f} | gemm {t_gemm:.3f} ms ({tf / t_gemm:.1f} TF) "
          f"nchw {t_nchw:.3f} ({tf / t_nchw:.1f}) nhwc {t_nhwc:.3f} ({tf / t_nhwc:.1f})", flush=True)
