"""Why did method='auto' time 1.58x method='direct' on bench_signal's batched problem (64 x 512^2,
5x5, axes (1, 2)) at 6dec455 when both run the same prepared call?  Times both interleaved, several
rounds, device (events over back-to-back calls) and host (no sync) per call.  Prints only."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cupy  # noqa: E402

from cupyconv import signal as cs  # noqa: E402
from cupyconv._core.timing import host_overhead_us, time_gpu  # noqa: E402

PROBLEMS = {"batched 64x512^2 5x5": ((64, 512, 512), (1, 5, 5), (1, 2)),
            "4096^2 3x3": ((4096, 4096), (3, 3), None),
            "3-d 160x120x80 7^3": ((160, 120, 80), (7, 7, 7), None)}
for name, (s1, s2, axes) in PROBLEMS.items():
    rng = cupy.random.default_rng(1)
    a = rng.uniform(-1, 1, s1, dtype=cupy.float32)
    k = rng.uniform(-1, 1, s2, dtype=cupy.float32)
    fns = {m: (lambda m=m: cs.correlate(a, k, mode="same", method=m, axes=axes))
           for m in ("direct", "auto")}
    for rnd in range(3):
        line = [f"{name} round {rnd}:"]
        for m, fn in fns.items():
            line.append(f"{m} {time_gpu(fn, repeat=20):.4f} ms dev, "
                        f"{host_overhead_us(fn):.1f} us host")
        print(" | ".join(line), flush=True)
