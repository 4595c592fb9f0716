"""Depthwise kernels against the implicit GEMM where the channel multiplier or the kernel is
large: the depthwise cost model counted bytes only, so a 1-channel input with 128 filters of 80
taps (a plain convolution that is "depthwise" because groups == channels == 1) went to the
depthwise kernels at 8 ms against 0.3 ms on the GEMM.  Prints each problem's times with its
FLOPs and bytes, and the arithmetic rate the depthwise kernel reached: the data for the compute
term of ``_dispatch.forward._depthwise_cost``.

    python3 benchmarks/exp_depthwise_rate.py [--repeat 10]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupy  # noqa: E402

import cupyconv  # noqa: E402
import measure  # noqa: E402
from cupyconv._core.geometry import ConvGeometry  # noqa: E402
from cupyconv._dispatch.forward import heuristic_choice  # noqa: E402
from measure import time_gpu  # noqa: E402

# (x shape channels-first, w shape, options)
PROBLEMS = [
    ((32, 1, 32000), (128, 1, 80), dict(stride=4)),
    ((32, 1, 16000), (64, 1, 11), dict(padding=5)),
    ((64, 1, 128, 128), (32, 1, 5, 5), dict(padding=2)),
    ((16, 1, 224, 224), (16, 1, 3, 3), dict(padding=1)),
    ((32, 32, 56, 56), (64, 1, 3, 3), dict(padding=1, groups=32)),
    ((32, 96, 28, 28), (384, 1, 3, 3), dict(padding=1, groups=96)),
    ((32, 144, 56, 56), (144, 1, 3, 3), dict(padding=1, groups=144)),
    ((32, 384, 28, 28), (384, 1, 7, 7), dict(padding=3, groups=384)),
    ((32, 192, 28, 28), (192, 1, 5, 5), dict(padding=2, stride=2, groups=192)),
    ((8, 768, 14, 14), (768, 1, 7, 7), dict(padding=3, groups=768)),
    ((32, 16, 112, 112), (64, 1, 3, 3), dict(padding=1, groups=16)),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--dtype", default="float32,float16", help="comma-separated dtypes")
    args = ap.parse_args(argv)
    l2 = measure.device_facts()["l2_bytes"]
    for dtype in args.dtype.split(","):
        for xs, ws, opts in PROBLEMS:
            for layout in ("NCHW", "NHWC"):
                x0 = cupy.random.default_rng(0).standard_normal(xs, dtype=cupy.float32).astype(dtype)
                w = cupy.random.default_rng(1).standard_normal(ws, dtype=cupy.float32).astype(dtype)
                if layout == "NHWC":
                    x0 = cupy.ascontiguousarray(cupy.moveaxis(x0, 1, -1))
                    w = cupy.ascontiguousarray(cupy.moveaxis(w, 1, -1))
                copies = [x0] + [x0.copy() for _ in range(
                    measure.rotation_copies(l2, x0.nbytes) - 1)]
                geom = ConvGeometry.from_shapes(x0.shape, w.shape, layout=layout, dtype=dtype,
                                                **opts)
                times = {}
                for method in ("depthwise", "implicit_gemm", "im2col_gemm", "direct", "auto"):
                    times[method] = time_gpu(measure.rotating(
                        lambda x: cupyconv.conv(x, w, layout=layout, method=method, **opts),
                        copies), repeat=args.repeat)
                pick = heuristic_choice(geom, "auto", x0.device.id).name
                rate = geom.flops / (times["depthwise"] * 1e-3) / 1e12
                print(f"{dtype:8s} {layout} x{xs} w{ws} {opts}: depthwise {times['depthwise']:.4f}"
                      f" implicit {times['implicit_gemm']:.4f} im2col {times['im2col_gemm']:.4f} direct {times['direct']:.4f} auto {times['auto']:.4f} ({pick})"
                      f" | {geom.flops / 1e9:.2f} GFLOP {geom.bytes_moved(x0.itemsize) / 1e6:.1f}"
                      f" MB -> depthwise {rate:.2f} TFLOP/s", flush=True)
                del copies
    return 0


if __name__ == "__main__":
    sys.exit(main())
