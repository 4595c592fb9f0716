"""Register-budget sweep of the depthwise tile kernel (diagnostic, issue 5): device time of the
3x3 forward and backward-data passes on (144 ch, 56², batch 32) for several DW_TILE_MIN_BLOCKS values
of the 3x3 variant, float32 and float16.

    python3 benchmarks/sweep_depthwise.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

import cupyconv  # noqa: E402
from cupyconv._depthwise import launch as _depthwise
from cupyconv._dispatch import callcache as _fastpath
from cupyconv._core import kernels as _kernels
from cupyconv._core.timing import time_gpu  # noqa: E402

N, C, HW = 32, 144, 56


def use(min_blocks):
    defines = (("DW_TILE_MIN_BLOCKS(KF, T)", f"((KF) == 3 ? {min_blocks} : 2)"),)
    _depthwise.depthwise_tile_module = lambda dtype, transposed: _kernels.KernelModule(
        "depthwise.cu", ("depthwise_tile",), (dtype,), defines=defines,
        variants=tuple((transposed, kf) for kf in _kernels.DEPTHWISE_KF))
    _depthwise._pass_launch.cache_clear()
    _fastpath.clear()


def main():
    rng = cupy.random.default_rng(0)
    for dtype in ("float32", "float16"):
        x = rng.standard_normal((N, C, HW, HW), dtype=cupy.float32).astype(dtype)
        w = rng.standard_normal((C, 1, 3, 3), dtype=cupy.float32).astype(dtype)
        for mb in (2, 3, 4, 5, 6):
            use(mb)
            fwd = lambda: cupyconv.conv(x, w, padding=1, groups=C)  # noqa: E731
            bwd = lambda: cupyconv.conv_backward_data(x, w, x.shape, padding=1, groups=C)  # noqa: E731
            print(f"{dtype} min_blocks {mb}: forward {time_gpu(fwd, repeat=30):.4f} ms, "
                  f"backward-data {time_gpu(bwd, repeat=30):.4f} ms", flush=True)


if __name__ == "__main__":
    main()
