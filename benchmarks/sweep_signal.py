"""Direct image-filter kernels of the signal API side by side (diagnostic, issue 6): device time of
``correlate2d(mode="same")`` on the suite's 4096² filters and its batched 64 x 512² stack, with
filter_plane at several register budgets (FP_MIN_BLOCKS) and with the general filter_direct
kernel, against cupyx.scipy.signal.correlate2d measured in the same run.

    python3 benchmarks/sweep_signal.py
"""

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

from cupyconv import signal  # noqa: E402
from cupyconv._dispatch import callcache as _fastpath
from cupyconv._core import kernels as _kernels
from cupyconv._signal import direct as _signal_direct
from cupyconv._core.timing import time_gpu  # noqa: E402

PROBLEMS = [((4096, 4096), (3, 3)), ((4096, 4096), (7, 7)), ((4096, 4096), (15, 15)),
            ((64, 512, 512), (1, 5, 5))]
PLANE_CONFIG = _signal_direct.plane_config


# (label, filter_plane module defines); None: the general filter_direct kernel
CONFIGS = [("direct", None), ("plane default", ())] + [
    (f"plane mb{mb}", (("FP_MIN_BLOCKS(T, KWB)", mb),)) for mb in (3, 4)]


def use(defines):
    """Route to filter_plane built with ``defines``, or (None) to filter_direct."""
    if defines is None:
        _signal_direct.plane_config = lambda *a: None
    else:
        _signal_direct.plane_config = PLANE_CONFIG
        _signal_direct.FILTER_PLANE = {d: dataclasses.replace(m, defines=defines)
                                       for d, m in _kernels.FILTER_PLANE.items()}
    _signal_direct._launch.cache_clear()
    _fastpath.clear()


def main():
    from cupyx.scipy import signal as xs

    rng = cupy.random.default_rng(0)
    for s1, s2 in PROBLEMS:
        a = rng.standard_normal(s1, dtype=cupy.float32)
        k = rng.standard_normal(s2, dtype=cupy.float32)
        axes = (1, 2) if len(s1) == 3 else None
        ref = None
        line = [f"{s1} {s2}:"]
        if axes is None:
            peer = time_gpu(lambda: xs.correlate2d(a, k, mode="same"), repeat=15)
            line.append(f"cupyx {peer:.4f} ms")
        for tag, defines in CONFIGS:
            use(defines)
            fn = lambda: signal.correlate(a, k, mode="same", method="direct", axes=axes)  # noqa: E731
            got = fn()
            ref = got if ref is None else ref
            err = float(cupy.abs(got - ref).max())
            ms = time_gpu(fn, repeat=15)
            gbs = 2 * a.nbytes / ms / 1e6
            ratio = f" ({peer / ms:.2f}x)" if axes is None else ""
            line.append(f"{tag} {ms:.4f} ms {gbs:.0f} GB/s{ratio} err {err:.1e}")
        print("\n   ".join(line), flush=True)


if __name__ == "__main__":
    main()
