"""Diagnostic for the depthwise/separable paths: host time per call (cProfile, no sync) and, run
under ncu, each kernel's device time.

    python3 benchmarks/experiments/profile_depthwise.py [--host | --events]
    ncu --clock-control none --metrics gpu__time_duration.sum python3 benchmarks/experiments/profile_depthwise.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy  # noqa: E402

import cupyconv  # noqa: E402

from host_profile import profile_calls  # noqa: E402

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


if __name__ == "__main__":
    if "--host" in sys.argv:
        profile_calls(CALLS, top=8)
    elif "--events" in sys.argv:
        event_times()
    else:  # under ncu: three launches of each kernel
        for fn in CALLS.values():
            for _ in range(3):
                fn()
        cupy.cuda.Device().synchronize()
