"""Work-split and register sweep of the depthwise plane kernel (diagnostic, issue 5): device ms of
the forward pass on MobileNetV2's depthwise 3x3 layers (batch 32) for the tile kernel
(depthwise.cu) and the plane kernel (depthwise_plane.cu) at several (warps per block, rounds per
block), rows per item (DP_ROWS) and register budgets (DP_MIN_BLOCKS).  Times the prepared launch
(no Python around it) and the `conv` call.

    python3 benchmarks/sweep_depthwise_plane.py [--problems "144 56^2" ...] [--ncu] [--wgrad]

--ncu: three `conv` calls of the first problem only (run under ncu -k regex:depthwise_plane).
--wgrad: the backward-weight kernels instead (tile kernel, plane kernel at several splits).
"""

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

import cupyconv  # noqa: E402
from cupyconv._depthwise import launch as _depthwise
from cupyconv._dispatch import callcache as _fastpath
from cupyconv._core import kernels as _kernels
from cupyconv._core.geometry import ConvGeometry  # noqa: E402
from cupyconv._core.launch import element_strides  # noqa: E402
from cupyconv._core.timing import time_gpu  # noqa: E402
from cupyconv._core.verify import rel_error  # noqa: E402

PROBLEMS = {"144 56^2": (32, 144, 56), "960 7^2": (32, 960, 7), "32 112^2": (32, 32, 112)}
# (float32 rows per item, float32 blocks per SM); None: the kernel's defaults
BUILDS = ((None, None), (8, 3), (8, 2), (2, 4))
SPLITS = ((8, None), (8, 1), (8, 2), (4, 1), (4, 2), (4, 4))
MODULES = dict(_kernels.DEPTHWISE_PLANE)
PLAN = _depthwise.plane_plan


def build(ry, mb):
    defines = []
    if ry is not None:
        defines.append(("DP_ROWS(T)", f"((sizeof(T) > 4) ? 2 : {ry})"))
    if mb is not None:
        defines.append(("DP_MIN_BLOCKS(T, KWB, S)", f"((sizeof(T) > 4) ? 2 : {mb})"))
    _depthwise.DEPTHWISE_PLANE = {d: dataclasses.replace(m, defines=tuple(defines))
                                  for d, m in MODULES.items()}


def reset():
    _depthwise._pass_launch.cache_clear()
    _fastpath.clear()


def sweep_wgrad(problems):
    import dataclasses

    rng = cupy.random.default_rng(1)
    for name in problems:
        n, c, hw = PROBLEMS[name]
        for dtype in ("float32", "float64", "float16"):
            x = rng.standard_normal((n, c, hw, hw)).astype(dtype)
            dy = rng.standard_normal((n, c, hw, hw)).astype(dtype)
            g = ConvGeometry.from_shapes(x.shape, (c, 1, 3, 3), padding=1, groups=c, dtype=dtype)
            gb = 2 * x.nbytes / 1e9
            call = lambda: cupyconv.conv_backward_weight(x, dy, (c, 1, 3, 3), padding=1, groups=c)  # noqa: E731
            ref = cupyconv.conv_backward_weight(x, dy, (c, 1, 3, 3), padding=1, groups=c,
                                                method="implicit_gemm")
            plan_fn = _depthwise.plane_wgrad_plan
            _depthwise.plane_wgrad_plan = lambda *a, **k: None  # the tile kernel
            _depthwise._wgrad_launches.cache_clear()
            _fastpath.clear()
            t = time_gpu(call, repeat=30)
            print(f"{name} {dtype} wgrad tile kernel: call {t:.4f} ms ({1e3 * gb / t:.0f} GB/s) "
                  f"err {rel_error(call(), ref):.1e}", flush=True)
            _depthwise.plane_wgrad_plan = plan_fn
            _depthwise._wgrad_launches.cache_clear()
            _fastpath.clear()
            vec = _depthwise.vector_rows(x, element_strides(x, False))
            for warps in (4, 8):
                for rounds in (1, 2, 4, 8):
                    plan, _ = plan_fn(g)
                    plan = dataclasses.replace(plan, warps=warps, rounds=rounds)
                    chunks = -(-n * plan.cpp // plan.ipb)
                    acc = "float64" if dtype == "float64" else "float32"
                    partial = cupy.empty((chunks, c, 9), acc)
                    launch = _depthwise.plane_wgrad_launch(g, plan, chunks, vec)
                    launch(x, dy, partial)
                    err = rel_error(partial.sum(axis=0).reshape(c, 1, 3, 3), ref)
                    t = time_gpu(lambda: launch(x, dy, partial), repeat=30)
                    print(f"{name} {dtype} wgrad plane warps={warps} rounds={rounds} "
                          f"blocks={c * chunks}: launch {t:.4f} ms ({1e3 * gb / t:.0f} GB/s) "
                          f"err {err:.1e}", flush=True)
            t = time_gpu(call, repeat=30)
            print(f"{name} {dtype} wgrad plane default: call {t:.4f} ms ({1e3 * gb / t:.0f} GB/s) "
                  f"err {rel_error(call(), ref):.1e}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", nargs="*", default=list(PROBLEMS))
    parser.add_argument("--ncu", action="store_true")
    parser.add_argument("--wgrad", action="store_true")
    args = parser.parse_args()
    if args.wgrad:
        return sweep_wgrad(args.problems)
    rng = cupy.random.default_rng(0)
    for name in args.problems:
        n, c, hw = PROBLEMS[name]
        for dtype in ("float32",) if args.ncu else ("float32", "float64", "float16"):
            x = rng.standard_normal((n, c, hw, hw)).astype(dtype)
            w = rng.standard_normal((c, 1, 3, 3)).astype(dtype)
            b = rng.standard_normal((c,)).astype(dtype)
            y = cupy.empty_like(x)
            call = lambda: cupyconv.conv(x, w, b, padding=1, groups=c, out=y)  # noqa: E731
            if args.ncu:
                for _ in range(3):
                    call()
                cupy.cuda.Device().synchronize()
                return
            g = ConvGeometry.from_shapes(x.shape, w.shape, padding=1, groups=c, dtype=dtype)
            gb = 2 * x.nbytes / 1e9
            ref = cupyconv.conv(x, w, b, padding=1, groups=c, method="direct")

            _depthwise.plane_plan = lambda *a, **k: None  # the tile kernel
            reset()
            t = time_gpu(call, repeat=30)
            print(f"{name} {dtype} tile kernel: conv {t:.4f} ms ({1e3 * gb / t:.0f} GB/s)", flush=True)
            _depthwise.plane_plan = PLAN
            for ry, mb in BUILDS if dtype == "float32" else BUILDS[:1]:
                build(ry, mb)
                for warps, rounds in SPLITS:
                    plan = _depthwise.plane_plan(g, True, warps=warps, rounds=rounds,
                                                 ry=ry if dtype == "float32" else None)
                    launch = _depthwise.plane_launch(
                        g, plan, True, _depthwise.vector_rows(x, element_strides(x, False)))
                    y.fill(cupy.nan)
                    launch(x, w, b, y)
                    err = rel_error(y, ref)
                    t = time_gpu(lambda: launch(x, w, b, y), repeat=30)
                    print(f"{name} {dtype} plane ry={plan.ry} mb={mb} warps={warps} "
                          f"rounds={plan.rounds} blocks={plan.blocks(n * c)}: launch {t:.4f} ms "
                          f"({1e3 * gb / t:.0f} GB/s) err {err:.1e}", flush=True)
            build(None, None)
            reset()
            t = time_gpu(call, repeat=30)
            print(f"{name} {dtype} plane default: conv {t:.4f} ms ({1e3 * gb / t:.0f} GB/s) "
                  f"err {rel_error(y, ref):.1e}", flush=True)


if __name__ == "__main__":
    main()
