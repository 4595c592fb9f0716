"""Sweep of the fused separable kernel's shape (diagnostic, issue 5): device time of
``separable_conv(method="fused")`` on the benchmark layer (144 -> 24, 56^2, batch 32, relu6)
for several pixel budgets per block, register budgets (SEP_MIN_BLOCKS) and depthwise rows per
thread (SEP_VR), float32 and float16, with cuDNN's calls (depthwise, relu6, pointwise) for scale.

    python3 benchmarks/sweep_separable.py
"""

import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy  # noqa: E402

import cupyconv  # noqa: E402
import measure  # noqa: E402
from cupyconv._core import kernels as _kernels
from cupyconv._depthwise import separable as _separable
from cupyconv._core.geometry import ConvGeometry  # noqa: E402
from cupyconv._core.timing import time_gpu  # noqa: E402

N, C, HW, KP = 32, 144, 56, 24


def cudnn_calls(dtype):
    import torch

    torch.backends.cudnn.allow_tf32 = False
    t = {"float32": torch.float32, "float16": torch.float16}[dtype]
    x = torch.randn(N, C, HW, HW, device="cuda", dtype=t)
    wd, wp = torch.randn(C, 1, 3, 3, device="cuda", dtype=t), torch.randn(KP, C, 1, 1, device="cuda", dtype=t)
    F = torch.nn.functional
    return time_gpu(lambda: F.conv2d(F.relu6(F.conv2d(x, wd, padding=1, groups=C)), wp), repeat=30)


def use(pixels, min_blocks, vr):
    _separable.MAX_PIXELS = pixels
    defines = (("SEP_MIN_BLOCKS(T)", min_blocks), ("SEP_VR", vr))
    _separable.separable_module = lambda dtype, kt: _kernels.KernelModule(
        "separable.cu", ("separable_fused",), (dtype,), defines=defines,
        variants=((kt, 0), (kt, 3)))
    _separable.fused_plan.cache_clear()
    _separable._fused_launch.cache_clear()


def main():
    measure.require_torch("sweep_separable")
    rng = cupy.random.default_rng(0)
    for dtype in ("float32", "float16"):
        x = rng.standard_normal((N, C, HW, HW), dtype=cupy.float32).astype(dtype)
        wd = rng.standard_normal((C, 1, 3, 3), dtype=cupy.float32).astype(dtype)
        wp = rng.standard_normal((KP, C, 1, 1), dtype=cupy.float32).astype(dtype)
        ref = cupyconv.separable_conv(x, wd, wp, padding=1, activation="relu6", method="unfused")
        print(f"{dtype}: cuDNN dw + relu6 + pw {cudnn_calls(dtype):.4f} ms", flush=True)
        geom = ConvGeometry.from_shapes(x.shape, wd.shape, padding=1, groups=C, dtype=dtype)
        for pixels, mb, vr in itertools.product((224, 280), (2, 3), (2, 4)):
            use(pixels, mb, vr)
            plan = _separable.fused_plan(geom, KP, _separable.smem_limit(0))
            f = lambda: cupyconv.separable_conv(x, wd, wp, padding=1, activation="relu6",  # noqa: E731
                                                method="fused")
            y = f()
            err = float(cupy.abs(y.astype(cupy.float32) - ref.astype(cupy.float32)).max())
            print(f"  pixels {pixels:3d} min_blocks {mb} vr {vr}: {plan.th} x {plan.tw}, kt {plan.kt} "
                  f"kg {plan.kg}, cc {plan.cc_chunk}, smem {plan.smem}, blocks "
                  f"{N * plan.tiles_h * plan.tiles_w}: {time_gpu(f, repeat=30):.4f} ms  "
                  f"(max |diff| vs unfused {err:.2e})", flush=True)


if __name__ == "__main__":
    main()
