"""Run a few forward problems once each (for ncu): python3 benchmarks/experiments/profile_kernels.py [names]."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/

import cupy  # noqa: E402

import cupyconv  # noqa: E402
from bench import SUITE  # noqa: E402

names = sys.argv[1:] or ["res2 3x3 64", "res3 3x3 128"]
for name in names:
    n, c, h, w, k, r, s, p, d, g = SUITE[name]
    x = cupy.random.default_rng(0).uniform(-1, 1, (n, c, h, w), dtype=cupy.float32)
    wt = cupy.random.default_rng(1).uniform(-1, 1, (k, c // g, r, r), dtype=cupy.float32)
    for _ in range(2):
        cupyconv.conv(x, wt, stride=s, padding=p, dilation=d, groups=g, method="implicit_gemm")
cupy.cuda.Device().synchronize()
