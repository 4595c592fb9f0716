"""Arithmetic precision and the GEMM main loop that delivers it.

float16 and bfloat16 always run on tensor cores where the device has them (products exact in
float32, float32 accumulation: what cuDNN and cuBLAS do).  float32 is exact by default (CuPy's
own default); TF32 -- inputs rounded to 10 mantissa bits, float32 accumulation, PyTorch's default
for convolutions -- is an opt-in, per call (``precision="tf32"``) or process-wide
(``CUPYCONV_ALLOW_TF32=1``).  float64 is always exact.
"""

from __future__ import annotations

import os

from cupyconv._core.caches import memoized
from cupyconv._core.kernels import (MATH_MMA, MATH_SIMT, MATH_TF32, MATH_WGMMA, MATH_WGMMA_TF32,
                                    MMA_DTYPES)

PRECISIONS = ("exact", "tf32")
ALLOW_TF32_ENV = "CUPYCONV_ALLOW_TF32"
_TRUE = ("1", "true", "yes", "on")


def resolve_precision(precision, dtype: str) -> str:
    """The precision a call runs at: ``precision`` ("exact", "tf32", or None for the process
    default from ``CUPYCONV_ALLOW_TF32``), "exact" for every dtype but float32 (TF32 concerns
    float32 inputs only).  Raises ValueError naming the argument."""
    if precision is None:
        precision = "tf32" if os.environ.get(ALLOW_TF32_ENV, "").strip().lower() in _TRUE else "exact"
    elif not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS} or None, got {precision!r}")
    return precision if dtype == "float32" else "exact"


@memoized(None)
def _matrix_dtypes(device_id: int) -> frozenset:
    """Storage dtypes whose tensor-core instruction the device has: NVIDIA compute capability 8.0+
    (mma.sync for float16, bfloat16 and TF32), plus "wgmma" on 9.0 (Hopper's warpgroup MMA, which
    the kernels get by compiling for sm_90a); AMD CDNA2/3 (gfx90a, gfx94x: MFMA for float16 and
    bfloat16), CDNA1 (gfx908: float16).  Anything else runs the SIMT loop."""
    import cupy

    try:
        return _query_matrix_dtypes(cupy, device_id)
    except cupy.cuda.runtime.CUDARuntimeError:  # no usable device (planning on a CPU machine)
        return frozenset()


def _query_matrix_dtypes(cupy, device_id: int) -> frozenset:
    if cupy.cuda.runtime.is_hip:
        arch = cupy.cuda.runtime.getDeviceProperties(device_id).get("gcnArchName", b"")
        arch = (arch.decode() if isinstance(arch, bytes) else str(arch)).split(":")[0]
        if arch in ("gfx90a", "gfx940", "gfx941", "gfx942"):
            return frozenset({"float16", "bfloat16"})
        return frozenset({"float16"}) if arch == "gfx908" else frozenset()
    cc = cupy.cuda.Device(device_id).compute_capability
    if int(cc[:-1]) < 8:
        return frozenset()
    return frozenset({"float16", "bfloat16", "tf32"} | ({"wgmma"} if cc == "90" else set()))


def gemm_math(dtype: str, precision: str, device_id: int) -> int:
    """The GEMM main loop (``kernels.MATH_*``) for ``dtype`` at ``precision`` on the device."""
    have = _matrix_dtypes(device_id)
    if dtype in MMA_DTYPES[MATH_MMA] and dtype in have:
        return MATH_WGMMA if "wgmma" in have else MATH_MMA
    if dtype == "float32" and precision == "tf32" and "tf32" in have:
        return MATH_WGMMA_TF32 if "wgmma" in have else MATH_TF32
    return MATH_SIMT


# Main loops that a device whose default for a launch is the key also runs, for an explicit plan
# (tests and benchmarks compare them): Hopper still has mma.sync.
_ALSO_RUNS = {MATH_WGMMA: (MATH_MMA,), MATH_WGMMA_TF32: (MATH_TF32,)}


def runs_instead(math: int, default: int) -> bool:
    """Whether an explicit plan's main loop ``math`` may replace the launch's ``default``."""
    return math in _ALSO_RUNS.get(default, ())
