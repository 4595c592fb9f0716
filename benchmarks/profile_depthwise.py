"""Diagnostic for the depthwise/separable paths: host time per call (cProfile, no sync) and, run
under ncu, each kernel's device time.

    python3 benchmarks/profile_depthwise.py [--host]
    ncu --clock-control none --metrics gpu__time_duration.sum python3 benchmarks/profile_depthwise.py
"""

import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

import cupyconv  # noqa: E402

rng = cupy.random.default_rng(0)
u = lambda *s: rng.uniform(-1, 1, s, dtype=cupy.float32)  # noqa: E731
CALLS = {}
for c, hw in ((144, 56), (960, 7)):
    x, w, dy = u(32, c, hw, hw), u(c, 1, 3, 3), u(32, c, hw, hw)
    CALLS[f"fwd {c}"] = lambda x=x, w=w, c=c: cupyconv.conv(x, w, padding=1, groups=c)
    CALLS[f"dgrad {c}"] = lambda dy=dy, w=w, c=c, s=x.shape: cupyconv.conv_backward_data(
        dy, w, s, padding=1, groups=c)
    CALLS[f"wgrad {c}"] = lambda x=x, dy=dy, c=c, s=w.shape: cupyconv.conv_backward_weight(
        x, dy, s, padding=1, groups=c)
xs, wd, wp = u(32, 144, 56, 56), u(144, 1, 3, 3), u(24, 144, 1, 1)
CALLS["sep fused"] = lambda: cupyconv.separable_conv(xs, wd, wp, padding=1, method="fused")
CALLS["sep unfused"] = lambda: cupyconv.separable_conv(xs, wd, wp, padding=1, method="unfused")

if __name__ == "__main__":
    host = "--host" in sys.argv
    for name, fn in CALLS.items():
        for _ in range(3):
            fn()
        cupy.cuda.Device().synchronize()
        if not host:
            continue
        t = time.perf_counter()
        for _ in range(200):
            fn()
        dt = (time.perf_counter() - t) / 200 * 1e6
        cupy.cuda.Device().synchronize()
        print(f"==== {name}: host {dt:.1f} us/call")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            fn()
        prof.disable()
        cupy.cuda.Device().synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(8)


def event_times(repeat: int = 20) -> None:
    """Device time of single calls (events around each call, synchronized): host time excluded
    only where the host is ahead of the device."""
    for name, fn in CALLS.items():
        for _ in range(3):
            fn()
        s, e = cupy.cuda.Event(), cupy.cuda.Event()
        ts = []
        for _ in range(repeat):
            cupy.cuda.Device().synchronize()
            s.record()
            fn()
            e.record()
            e.synchronize()
            ts.append(cupy.cuda.get_elapsed_time(s, e))
        ts.sort()
        print(f"{name:12s} single call {ts[len(ts) // 2] * 1e3:8.1f} us (median)")


if __name__ == "__main__" and "--events" in sys.argv:
    event_times()
