"""GPU timing with CUDA/HIP events: warm-up first, then the median of many runs."""

from __future__ import annotations

import statistics


def time_gpu(fn, *, warmup: int = 3, repeat: int = 20) -> float:
    """Median milliseconds of ``fn()`` on the current stream, measured with events."""
    import cupy

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def gpu_available() -> bool:
    """True when CuPy imports and sees a device (never raises)."""
    try:
        import cupy

        return bool(cupy.is_available())
    except Exception:
        return False
