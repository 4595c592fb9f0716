"""Diagnostic: where the Python time of one call goes (cProfile over many calls, no sync).

    python3 benchmarks/experiments/host_profile.py

``profile_calls`` is also what ``profile_depthwise.py --host`` runs on its own calls.
"""

import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def profile_calls(calls: dict, *, top: int = 14, repeat: int = 200) -> None:
    """For each named call: the host µs per call without synchronizing, then the cProfile table
    of ``repeat`` more calls (warm-up first, so compilation stays out)."""
    import cupy

    for name, fn in calls.items():
        for _ in range(5):
            fn()
        cupy.cuda.Device().synchronize()
        t = time.perf_counter()
        for _ in range(repeat):
            fn()
        dt = (time.perf_counter() - t) / repeat * 1e6
        cupy.cuda.Device().synchronize()
        print(f"==== {name}: host {dt:.1f} us/call")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(repeat):
            fn()
        prof.disable()
        cupy.cuda.Device().synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    import cupy

    import cupyconv

    rng = cupy.random.default_rng(0)
    x = rng.uniform(-1, 1, (32, 128, 28, 28), dtype=cupy.float32)
    w = rng.uniform(-1, 1, (128, 128, 3, 3), dtype=cupy.float32)
    dy = cupyconv.conv(x, w, padding=1)
    profile_calls({"conv": lambda: cupyconv.conv(x, w, padding=1),
                   "backward_data": lambda: cupyconv.conv_backward_data(dy, w, x.shape, padding=1),
                   "backward_weight": lambda: cupyconv.conv_backward_weight(x, dy, w.shape,
                                                                            padding=1)})
