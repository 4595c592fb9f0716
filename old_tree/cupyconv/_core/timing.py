"""GPU timing with CUDA/HIP events: warm-up first, then the median of many samples."""

from __future__ import annotations

import math
import statistics
import time


def time_gpu(fn, *, warmup: int = 3, repeat: int = 20, sample_ms: float = 1.0,
             on_sample=None) -> float:
    """Median device milliseconds per call of ``fn()`` on the current stream.

    Each sample times enough back-to-back calls (at least ``sample_ms`` of device work) between
    two events that the launch queue stays full: the result is the device time per call, not the
    Python time between launches (see :func:`host_overhead_us` for that).  ``on_sample(i, repeat,
    ms)``, when given, is called after each sample (the profiler's progress display).
    """
    import cupy

    for _ in range(warmup):
        fn()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    inner = max(1, min(100, math.ceil(sample_ms / max(cupy.cuda.get_elapsed_time(start, stop), 1e-3))))
    times = []
    for _ in range(repeat):
        start.record()
        for _ in range(inner):
            fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / inner)
        if on_sample is not None:
            on_sample(len(times), repeat, times[-1])
    return statistics.median(times)


def host_overhead_us(fn, *, repeat: int = 50) -> float:
    """Microseconds of host (Python) time per call of ``fn()``, measured without synchronizing."""
    import cupy

    fn()
    cupy.cuda.Device().synchronize()
    t = time.perf_counter()
    for _ in range(repeat):
        fn()
    host = (time.perf_counter() - t) / repeat * 1e6
    cupy.cuda.Device().synchronize()
    return host


def gpu_available() -> bool:
    """True when CuPy imports and sees a device (never raises)."""
    try:
        import cupy

        return bool(cupy.is_available())
    except Exception:
        return False
