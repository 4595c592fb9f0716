"""Diagnostic: where the Python time of one call goes (cProfile over many calls, no sync).

    python3 benchmarks/host_profile.py
"""

import cProfile
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

import cupyconv  # noqa: E402

rng = cupy.random.default_rng(0)
x = rng.uniform(-1, 1, (32, 128, 28, 28), dtype=cupy.float32)
w = rng.uniform(-1, 1, (128, 128, 3, 3), dtype=cupy.float32)
dy = cupyconv.conv(x, w, padding=1)
calls = {"conv": lambda: cupyconv.conv(x, w, padding=1),
         "backward_data": lambda: cupyconv.conv_backward_data(dy, w, x.shape, padding=1),
         "backward_weight": lambda: cupyconv.conv_backward_weight(x, dy, w.shape, padding=1)}
for name, fn in calls.items():
    for _ in range(5):
        fn()
    cupy.cuda.Device().synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(200):
        fn()
    prof.disable()
    cupy.cuda.Device().synchronize()
    print(f"==== {name}")
    pstats.Stats(prof).sort_stats("tottime").print_stats(14)
