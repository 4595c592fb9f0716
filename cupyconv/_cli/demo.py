"""``python -m cupyconv demo``: convolve random data with every method (and the two gradients),
check each result against the float64 reference and SciPy, time it.

Without a GPU the demo says so and compiles a representative sample of the kernels instead (the
GPU-free compile check on one instantiation per kernel source, kernel, dtype class and GEMM main
loop: :func:`cupyconv._cli.compile_sample.sample`), so the command is useful (and honest) on any
machine in a minute or two; ``python -m cupyconv compile-check`` compiles everything.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from cupyconv import reference
from cupyconv._cli.profile import evaluate, verdict
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.timing import gpu_available
from cupyconv._core.verify import random_array, scipy_conv
from cupyconv._dispatch.forward import FORWARD

# (label, input shape, weight shape, options, dtype): small enough for the SciPy oracle.
PROBLEMS = (
    ("2-d 3x3 pad 1", (4, 16, 64, 64), (32, 16, 3, 3), dict(padding=1), "float32"),
    ("2-d NHWC 5x5 s2 same", (4, 63, 61, 16), (24, 5, 5, 16), dict(stride=2, padding="same",
                                                                    layout="NHWC"), "float32"),
    ("2-d 3x3 fp16 groups 4", (4, 32, 40, 40), (32, 8, 3, 3), dict(padding=1, groups=4), "float16"),
    ("2-d NHWC 3x3 bf16", (4, 40, 40, 32), (32, 3, 3, 32), dict(padding=1, layout="NHWC"),
     "bfloat16"),
    ("2-d depthwise 3x3 d2", (2, 24, 50, 50), (24, 1, 3, 3), dict(padding=2, dilation=2,
                                                                   groups=24), "float32"),
    ("1-d k7 s3 asym pad", (8, 12, 1000), (16, 12, 7), dict(stride=3, padding=[(4, 1)]), "float64"),
    ("3-d 3x3x3 same_lower", (2, 8, 17, 18, 19), (8, 8, 3, 3, 3), dict(padding="same_lower"),
     "float32"),
)


def _im2col_matmul(x, w, geom):
    """Our im2col kernel followed by cupy.matmul, per group: a cross-check of the im2col view."""
    import cupy

    from cupyconv.im2col import im2col

    opts = dict(stride=geom.stride, padding=tuple(zip(geom.pad_lo, geom.pad_hi)),
                dilation=geom.dilation, layout=geom.layout)
    col = im2col(x, geom.kernel, **opts)
    if col.dtype.name == "bfloat16":  # CuPy's matmul has no bfloat16: multiply in float32
        col, w = col.astype(cupy.float32), w.astype(cupy.float32)
    g, kpg = geom.groups, geom.out_channels // geom.groups
    if geom.channels_last:  # col (N, L, taps*C): columns are (taps, c); split c into groups
        col = col.reshape(geom.batch, col.shape[1], -1, g, geom.in_channels // g)
        wg = w.reshape(g, kpg, -1, geom.in_channels // g)
        y = cupy.einsum("nltgc,gktc->nlgk", col, wg)
        return y.reshape(geom.output_shape).astype(x.dtype)
    col = col.reshape(geom.batch, g, -1, col.shape[-1])
    y = cupy.matmul(w.reshape(g, kpg, -1), col)
    return y.reshape(geom.output_shape).astype(x.dtype)


def _tiles(launches) -> str:
    """The GEMM tiles a call launched, e.g. "128x64/1" (tile BMxBN / split-K); "-" for none."""
    seen = dict.fromkeys(f"{la['tile'][0]}x{la['tile'][1]}/{la['splits']}" for la in launches)
    return ",".join(seen) or "-"


def run_demo(out=sys.stdout, repeat: int = 20) -> int:
    if not gpu_available():
        print("No GPU: CuPy sees no CUDA/ROCm device on this machine (cupy.is_available() is "
              "False), so nothing can be convolved here.\nShowing instead that the kernels "
              "compile, without a GPU: a sample of them, with NVRTC for NVIDIA and HIPRTC or "
              "clang for AMD.\n", file=out, flush=True)
        from cupyconv._cli.compile_check import sample_main

        return sample_main(out=out)

    import cupy

    dev = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = dev["name"].decode() if isinstance(dev["name"], bytes) else dev["name"]
    print(f"cupyconv demo on {name}: every method vs the float64 reference and SciPy "
          f"(SciPy has no convolution gradients: '-' there)", file=out)
    header = f"{'problem':24s} {'dtype':8s} {'method':16s} {'ms':>8s} {'GFLOP/s':>9s} " \
             f"{'err(ref)':>9s} {'err(scipy)':>10s} {'tol':>8s} {'GEMM tile/split':>16s}  verdict"
    print(header + "\n" + "-" * len(header), file=out, flush=True)
    from cupyconv.backward import conv_backward_data, conv_backward_weight
    from cupyconv.conv import conv

    rng = np.random.default_rng(0)
    failures = 0
    for label, xs, ws, opts, dtype in PROBLEMS:
        geom = ConvGeometry.from_shapes(xs, ws, dtype=dtype, **opts)
        xh, wh = random_array(rng, xs, dtype), random_array(rng, ws, dtype)
        dyh = random_array(rng, geom.output_shape, dtype)
        t0 = time.perf_counter()
        ref = reference.conv(xh, wh, **opts)
        oracle = scipy_conv(xh, wh, geom)
        ref_dx = reference.conv_backward_data(dyh, wh, xs, **opts)
        ref_dw = reference.conv_backward_weight(xh, dyh, ws, **opts)
        ref_s = time.perf_counter() - t0
        x, w, dy = cupy.asarray(xh), cupy.asarray(wh), cupy.asarray(dyh)
        # (method, call, float64 reference, SciPy oracle or None)
        checks = [(f"conv:{m}", lambda m=m: conv(x, w, method=m, **opts), ref, oracle)
                  for m, algo in FORWARD.items() if algo.applicable(geom)]
        checks += [("im2col+matmul", lambda: _im2col_matmul(x, w, geom), ref, oracle),
                   ("backward_data", lambda: conv_backward_data(dy, w, xs, **opts), ref_dx, None),
                   ("backward_weight", lambda: conv_backward_weight(x, dy, ws, **opts), ref_dw, None)]
        for method, fn, expect, scipy_expect in checks:
            run = evaluate(fn, repeat=repeat)  # the profiler's machinery: launches recorded, timed
            ms, y = run["ms"], run["result"]
            v = verdict(y, expect, dtype)
            v_sp = verdict(y, scipy_expect, dtype) if scipy_expect is not None else None
            ok = v["passed"] and (v_sp is None or v_sp["passed"])
            failures += not ok
            sp = f"{v_sp['error']:10.2e}" if v_sp is not None else f"{'-':>10s}"
            print(f"{label:24s} {dtype:8s} {method:16s} {ms:8.3f} {geom.flops / ms / 1e6:9.1f} "
                  f"{v['error']:9.2e} {sp} {v['tolerance']:8.1e} {_tiles(run['launches']):>16s}  "
                  f"{'ok' if ok else 'FAILED'}", file=out, flush=True)
        print(f"{'':24s} (references on the CPU: {ref_s:.2f} s)", file=out)
    print(f"\n{'all results match' if not failures else f'{failures} results FAILED'} "
          f"(error = ||out - ref|| / ||ref||)\nOne problem of your own, with the tile that ran "
          f"and the fraction of the device ceilings: python -m cupyconv profile fwd -N 8 -C 64 "
          f"-K 64 --input 56 --kernel 3 --pad 1 --verify 1", file=out)
    return 1 if failures else 0
