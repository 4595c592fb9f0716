"""Device ceilings that the profiler and the benchmark report measure results against.

Two numbers per device: the copy bandwidth (a device-to-device ``memcpy``, bytes read + written
per second: what a bandwidth-bound kernel can hope for) and the GEMM rate of ``cupy.matmul``
(cuBLAS) per dtype (what a compute-bound kernel in that dtype can hope for; for float16 and
bfloat16 cuBLAS uses tensor cores, which cupyconv's kernels do not, so that percentage is honest
but low).  Both are
measured once per process and device; :data:`TABLE` holds the numbers measured on known devices
(``benchmarks`` anchors) for reports written where no GPU is present.
"""

from __future__ import annotations

from dataclasses import dataclass

from cupyconv._core.caches import memoized

# Measured on one NVIDIA H200 (2026-11-22, /work/shared/notes/anchors.md): memcpy 4.27 TB/s,
# cuBLAS 8192^3 fp32 TF32 off 51.3 TFLOP/s, fp16 657, bf16 733; fp64 from the data sheet (~60
# with DGEMM on the FP64 tensor cores; not measured there).
TABLE = {
    "NVIDIA H200": {"bandwidth": 4.27e12,
                    "flops": {"float32": 51.3e12, "float16": 657e12, "bfloat16": 733e12,
                              "float64": 60e12}},
}

_COPY_BYTES = 512 * 2 ** 20
_GEMM_SIZE = {"float16": 8192, "bfloat16": 8192, "float32": 8192, "float64": 4096}


@dataclass(frozen=True)
class Ceilings:
    """Peak rates for one device and dtype: bytes/s and FLOP/s, and where they came from."""

    device: str
    dtype: str
    bandwidth: float
    flops: float
    source: str  # "measured" or "table"

    def fractions(self, flop: float, nbytes: float, seconds: float) -> tuple[float, float]:
        """(achieved FLOP/s, achieved bytes/s) as fractions of the ceilings."""
        return flop / seconds / self.flops, nbytes / seconds / self.bandwidth


def device_name(device_id: int) -> str:
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(device_id)["name"]
    return name.decode() if isinstance(name, bytes) else name


def _median_ms(fn, repeat: int) -> float:
    from cupyconv._core.timing import time_gpu

    return time_gpu(fn, warmup=1, repeat=repeat, sample_ms=0.0)


@memoized(None)
def measured_bandwidth(device_id: int) -> float:
    """Bytes read + written per second by a 512 MiB device-to-device copy."""
    import cupy

    with cupy.cuda.Device(device_id):
        src = cupy.empty(_COPY_BYTES, dtype=cupy.uint8)
        dst = cupy.empty_like(src)
        kind = cupy.cuda.runtime.memcpyDeviceToDevice
        stream = cupy.cuda.get_current_stream().ptr
        ms = _median_ms(lambda: cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr,
                                                              _COPY_BYTES, kind, stream), 10)
    return 2 * _COPY_BYTES / (ms * 1e-3)


@memoized(None)
def measured_flops(device_id: int, dtype: str) -> float:
    """FLOP/s of ``cupy.matmul`` (cuBLAS) on square matrices of ``dtype``.  CuPy's matmul has no
    bfloat16: that ceiling is float16's (cuBLAS runs both at about the same rate on tensor
    cores, benchmarks/notes/gemm.md, "Issue 16: tensor cores")."""
    import cupy

    if dtype == "bfloat16":
        dtype = "float16"
    n = _GEMM_SIZE[dtype]
    with cupy.cuda.Device(device_id):
        a = cupy.random.default_rng(0).uniform(-1, 1, (n, n), dtype=cupy.float32).astype(dtype)
        b, c = a.copy(), cupy.empty_like(a)
        ms = _median_ms(lambda: cupy.matmul(a, b, out=c), 5)
    return 2 * n ** 3 / (ms * 1e-3)


def ceilings(dtype: str, device_id: int | None = None, *, measure: bool = True) -> Ceilings:
    """The ceilings of ``dtype`` on a device: measured (once per process), or with
    ``measure=False`` from :data:`TABLE` where the device is listed (else measured anyway).
    Complex dtypes use their real part's rates."""
    import cupy

    device_id = cupy.cuda.Device().id if device_id is None else device_id
    real = {"complex64": "float32", "complex128": "float64"}.get(dtype, dtype)
    name = device_name(device_id)
    if not measure and name in TABLE:
        row = TABLE[name]
        return Ceilings(name, dtype, row["bandwidth"], row["flops"][real], "table")
    return Ceilings(name, dtype, measured_bandwidth(device_id), measured_flops(device_id, real),
                    "measured")


def table_ceilings(device: str, dtype: str) -> Ceilings | None:
    """Ceilings from :data:`TABLE` by device name, without a GPU (None where not listed)."""
    row = TABLE.get(device)
    if row is None or dtype not in row["flops"]:
        return None
    return Ceilings(device, dtype, row["bandwidth"], row["flops"][dtype], "table")
