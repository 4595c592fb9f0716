"""Host cost of the signal FFT path on a small 3-d problem (bench_signal's held-out 96^3 with a
15^3 kernel, where auto runs our FFT path and both it and cupyx's fftconvolve are host-bound):
host µs per call without synchronizing, and cProfile's table for each.

    python3 benchmarks/exp_signal_host.py [--shape 96,96,96] [--kernel 15,15,15]
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
    args = ap.parse_args(argv)
    from cupyx.scipy import signal as xs

    rng = cupy.random.default_rng(0)
    a = rng.uniform(-1, 1, tuple(map(int, args.shape.split(","))), dtype=cupy.float32)
    k = rng.uniform(-1, 1, tuple(map(int, args.kernel.split(","))), dtype=cupy.float32)
    flipped = cupy.ascontiguousarray(cupy.flip(k))
    profile_calls({"ours fft": lambda: cs.correlate(a, k, mode="same", method="fft"),
                   "ours auto": lambda: cs.correlate(a, k, mode="same"),
                   "cupyx fftconvolve": lambda: xs.fftconvolve(a, flipped, mode="same")},
                  top=22, repeat=100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
