"""Work-split sweep of the depthwise plane kernel (diagnostic, issue 5): device ms of the forward
pass on MobileNetV2's depthwise 3x3 layers (batch 32) for the tile kernel (depthwise.cu) and the
plane kernel (depthwise_plane.cu) at several (warps per block, rounds per block) and register
budgets (DP_MIN_BLOCKS).  Times the prepared launch (no Python around it) and the `conv` call.

    python3 benchmarks/sweep_depthwise_plane.py
"""

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

import cupyconv  # noqa: E402
from cupyconv import _depthwise, _fastpath, _kernels  # noqa: E402
from cupyconv._geometry import ConvGeometry  # noqa: E402
from cupyconv._launch import element_strides  # noqa: E402
from cupyconv._timing import time_gpu  # noqa: E402
from cupyconv._verify import rel_error  # noqa: E402

PROBLEMS = {"144 56^2": (32, 144, 56), "960 7^2": (32, 960, 7), "32 112^2": (32, 32, 112)}
SPLITS = ((8, None), (8, 1), (8, 2), (8, 4), (4, 1), (4, 2), (6, 1))
MODULES = dict(_kernels.DEPTHWISE_PLANE)
PLAN = _depthwise.plane_plan


def use_min_blocks(mb):
    defines = () if mb is None else (("DP_MIN_BLOCKS(T, KWB)", f"((sizeof(T) > 4) ? 2 : {mb})"),)
    _depthwise.DEPTHWISE_PLANE = {d: dataclasses.replace(m, defines=defines) for d, m in MODULES.items()}


def main():
    rng = cupy.random.default_rng(0)
    for name, (n, c, hw) in PROBLEMS.items():
        for dtype in ("float32", "float64"):
            x = rng.standard_normal((n, c, hw, hw)).astype(dtype)
            w = rng.standard_normal((c, 1, 3, 3)).astype(dtype)
            b = rng.standard_normal((c,)).astype(dtype)
            y = cupy.empty_like(x)
            g = ConvGeometry.from_shapes(x.shape, w.shape, padding=1, groups=c, dtype=dtype)
            gb = 2 * x.nbytes / 1e9
            ref = cupyconv.conv(x, w, b, padding=1, groups=c, method="direct")

            _depthwise.plane_plan = lambda *a, **k: None  # the tile kernel
            _depthwise._pass_launch.cache_clear()
            _fastpath.clear()
            call = lambda: cupyconv.conv(x, w, b, padding=1, groups=c, out=y)  # noqa: E731
            t = time_gpu(call, repeat=30)
            print(f"{name} {dtype} tile kernel: conv {t:.4f} ms ({gb / t:.0f} GB/s)", flush=True)
            _depthwise.plane_plan = PLAN
            _depthwise._pass_launch.cache_clear()
            _fastpath.clear()

            for mb in ((None, 3, 5) if dtype == "float32" else (None,)):
                use_min_blocks(mb)
                for warps, rounds in SPLITS if mb is None else SPLITS[:2]:
                    plan = _depthwise.plane_plan(g, True, warps=warps, rounds=rounds)
                    launch = _depthwise.plane_launch(
                        g, plan, True, _depthwise.vector_rows(x, element_strides(x, False)))
                    y.fill(cupy.nan)
                    launch(x, w, b, y)
                    err = rel_error(y, ref)
                    t = time_gpu(lambda: launch(x, w, b, y), repeat=30)
                    print(f"{name} {dtype} plane mb={mb} warps={warps} rounds={plan.rounds} "
                          f"blocks={plan.blocks(n * c)}: launch {t:.4f} ms ({gb / t:.0f} GB/s) "
                          f"err {err:.1e}", flush=True)
            use_min_blocks(None)
            _depthwise._pass_launch.cache_clear()
            _fastpath.clear()
            t = time_gpu(call, repeat=30)
            print(f"{name} {dtype} plane default: conv {t:.4f} ms ({gb / t:.0f} GB/s) "
                  f"err {rel_error(y, ref):.1e}", flush=True)


if __name__ == "__main__":
    main()
