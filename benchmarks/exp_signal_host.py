"""Host cost of the signal FFT path on a small 3-d problem (bench_signal's held-out 96^3 with a
15^3 kernel, where auto runs our FFT path and both it and cupyx's fftconvolve are host-bound):
host µs per call without synchronizing, and cProfile's table for each; then each call's device
time (back-to-back, as bench_signal) and the kernels it launches with their device µs (PyTorch's
profiler, which records every CUDA kernel of the process, CuPy's and cuFFT's included).

    python3 benchmarks/exp_signal_host.py [--shape 96,96,96] [--kernel 15,15,15] [--no-kernels]
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy  # noqa: E402

import cupyconv.signal as cs  # noqa: E402
from host_profile import profile_calls  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="96,96,96")
    ap.add_argument("--kernel", default="15,15,15")
    ap.add_argument("--no-kernels", action="store_true", help="skip the kernel listing")
    args = ap.parse_args(argv)
    from cupyx.scipy import signal as xs

    rng = cupy.random.default_rng(0)
    a = rng.uniform(-1, 1, tuple(map(int, args.shape.split(","))), dtype=cupy.float32)
    k = rng.uniform(-1, 1, tuple(map(int, args.kernel.split(","))), dtype=cupy.float32)
    flipped = cupy.ascontiguousarray(cupy.flip(k))
    calls = {"ours fft": lambda: cs.correlate(a, k, mode="same", method="fft"),
             "ours auto": lambda: cs.correlate(a, k, mode="same"),
             "cupyx fftconvolve": lambda: xs.fftconvolve(a, flipped, mode="same")}
    profile_calls(calls, top=22, repeat=100)
    if not args.no_kernels:
        list_kernels(calls)
    return 0


def list_kernels(calls: dict, repeat: int = 20) -> None:
    """Per call: device ms back-to-back (time_gpu) and its kernels' device µs per call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from cupyconv._core.timing import time_gpu

    for name, fn in calls.items():
        ms = time_gpu(fn, repeat=20)
        cupy.cuda.Device().synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(repeat):
                fn()
            cupy.cuda.Device().synchronize()
        events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
        total = sum(e.device_time_total for e in events) / repeat
        print(f"==== {name}: {ms * 1e3:.1f} us/call back-to-back; kernels {total:.1f} us/call")
        for e in sorted(events, key=lambda e: -e.device_time_total):
            print(f"  {e.device_time_total / repeat:8.1f} us  x{e.count / repeat:g}  {e.key[:110]}")


if __name__ == "__main__":
    sys.exit(main())
