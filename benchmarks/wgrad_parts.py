"""Diagnostic: where backward-weight time goes (im2col, GEMM, layout copies), per problem.

    python3 benchmarks/wgrad_parts.py
"""

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

import cupyconv  # noqa: E402
from bench import BACKWARD  # noqa: E402
from cupyconv._gemm.launch import MatrixView, OutMap, plan_gemm, run_gemm  # noqa: E402
from cupyconv._core.geometry import ConvGeometry  # noqa: E402
from cupyconv._core.timing import host_overhead_us, time_gpu  # noqa: E402
from cupyconv._gemm.im2col import run_im2col  # noqa: E402

rng = cupy.random.default_rng(0)
for name, (n, c, h, w, k, r, s, p) in BACKWARD.items():
    geom = ConvGeometry.from_shapes((n, h, w, c), (k, r, r, c), stride=s, padding=p, layout="NHWC",
                                    dtype="float32")
    x = rng.uniform(-1, 1, geom.input_shape, dtype=cupy.float32)
    dy = rng.uniform(-1, 1, geom.output_shape, dtype=cupy.float32)
    col = cupy.empty(geom.col_shape, dtype=cupy.float32)
    dw = cupy.empty(geom.weight_shape, dtype=cupy.float32)
    t_col = time_gpu(lambda: run_im2col(geom, x, col), repeat=10)
    tcg, npix = math.prod(geom.kernel) * c, n * math.prod(geom.out_spatial)
    a, b = MatrixView(dy, rs=1, ks=k, si=k), MatrixView(col, rs=1, ks=tcg, si=tcg)
    plan = plan_gemm("float32", k, tcg, npix, 1)
    t_gemm = time_gpu(lambda: run_gemm("float32", a, b, dw, k, tcg, npix, out=OutMap(k, 0, tcg, 1)), repeat=10)
    fn = lambda: cupyconv.conv_backward_weight(x, dy, dw.shape, stride=s, padding=p, layout="NHWC")  # noqa: E731
    t_all = time_gpu(fn, repeat=10)
    xn = cupy.ascontiguousarray(cupy.moveaxis(x, -1, 1))
    dyn = cupy.ascontiguousarray(cupy.moveaxis(dy, -1, 1))
    fn_n = lambda: cupyconv.conv_backward_weight(xn, dyn, (k, c, r, r), stride=s, padding=p)  # noqa: E731
    t_nchw = time_gpu(fn_n, repeat=10)
    print(f"{name:20s} im2col {t_col:.3f} ms ({geom.col_shape}), gemm {t_gemm:.3f} ms "
          f"(M={k} N={tcg} K={npix} plan {plan.tile[:2]}x{plan.splits}), total NHWC {t_all:.3f} "
          f"NCHW {t_nchw:.3f} ms, host {host_overhead_us(fn_n):.0f} us/call NCHW", flush=True)
