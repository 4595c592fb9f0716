"""``method="auto"`` of the signal API: a cost model of the direct kernel and the FFT path.

Both estimates are milliseconds from shapes alone (pure Python), so the choice costs no device
work and can be tested on the CPU.  The constants were first placeholders derived from the
anchors table (docs: benchmarks/NOTES.md, "issue 6"); ``benchmarks/calibrate_signal.py`` measures
both paths on a grid of problems on the GPU and prints fitted values to paste here.  The values
below were fitted on an NVIDIA H100 (session 2026-11-22, commit 4c917e6; uint64 is not fitted).

direct_ms = DIRECT_FIXED_MS + outputs * KD * KH * (KW + ROW_OVERHEAD) * DIRECT_MS_PER_GTAP[dt] / 1e9
            (times DIRECT_3D_FACTOR over three axes, DENSE_VOLUME_FACTOR for 'same' volumes
            on nd_dense_tile) + bytes moved / BANDWIDTH
fft_ms    = FFT_FIXED_MS + transforms * batch * P * log2(P) * FFT_MS_PER_GUNIT[dt] / 1e9
            (P: padded points per transform; 3 transforms: two forward, one inverse)

auto picks the FFT when fft_ms + FFT_HOST_MARGIN_MS < direct_ms (the FFT's fixed cost is host
time and varies between hosts).
"""

from __future__ import annotations

import math

import numpy as np

from cupyconv._core.caches import memoized
from cupyconv._signal.direct import dense_volume_offsets
from cupyconv._signal.fft import fft_points, fft_work_dtype
from cupyconv._signal.plan import FilterPlan, direct_fits

# Direct kernel.  ROW_OVERHEAD counts, in taps, the per-filter-row work that does not shrink with
# the row (register-window loads, loop control).
DIRECT_FIXED_MS = 0.0748
ROW_OVERHEAD = 4
DIRECT_MS_PER_GTAP = {"float32": 0.0726, "float64": 0.0464, "complex64": 0.1977,
                      "complex128": 0.3772, "uint64": 0.50}
BANDWIDTH_BYTES_PER_MS = 3.5e9  # ~3.5 TB/s achieved copy rate
# The direct kernel over three axes costs more per tap than the 2-d fit says (its tiles stage
# planes, and per-row work repeats per plane): the held-out 3-d problems ran up to 2.5x the
# estimate.  A scale on the slope, fitted on 18 float32 volumes 64^3-192x160x64 with kernels
# 3^3-11^3 alone (calibrate_signal.py --only-3d, H100, session 2026-11-24 11).
DIRECT_3D_FACTOR = 3.53
# 'same' volumes run on ndimage's nd_dense_tile instead (_signal.direct.dense_volume_offsets): the
# same slope scaled by this factor.  First value from bench_ndimage's 3-d correlate at 59241c7
# (256^3, k = 3 / 7 / 15: 2.8 / 2.1 / 2.5 x the 2-d slope); refitted by calibrate_signal.py.
DENSE_VOLUME_FACTOR = 2.4
# FFT path: FFT_FIXED_MS is dominated by the chain of ~10 CuPy launches (host-bound on small
# problems; the anchors show cupyx fftconvolve at 0.555 ms on 1024^2 but 1.08 ms on 4096^2).
FFT_FIXED_MS = 0.2713
# That fixed cost is host time, so it follows the host's CPU: fitted at 0.27 ms, it read ~0.6-0.9 ms
# on the 2026-11-23 H100 host (fft 0.95 ms on 1024^2 with a 63x63 filter, where the model said
# 0.34 and the direct kernel took 0.45), while the direct kernel's device time barely moves.
# auto therefore takes the FFT only when it wins by this margin as well.
FFT_HOST_MARGIN_MS = 0.2
FFT_MS_PER_GUNIT = {"float32": 0.8391, "float64": 1.4452, "complex64": 0.9923, "complex128": 2.8005}
FFT_TRANSFORMS = 3


def direct_factor(plan: FilterPlan, compute: str) -> float:
    """The scale of the 2-d slope for the kernel that runs ``plan``'s direct path."""
    if len(plan.axes) < 3:
        return 1.0
    return DENSE_VOLUME_FACTOR if dense_volume_offsets(plan, compute) is not None else \
        DIRECT_3D_FACTOR


def direct_ms(plan: FilterPlan, compute: str) -> float:
    k = [plan.shape_g[a] for a in plan.axes]
    kw = k[-1] if k else 1
    rows = math.prod(k[:-1]) if k else 1
    units = plan.outputs() * rows * (kw + ROW_OVERHEAD)
    item = np.dtype(compute).itemsize
    moved = (math.prod(plan.shape_a) + plan.outputs()) * item
    slope = DIRECT_MS_PER_GTAP[compute] * direct_factor(plan, compute)
    return DIRECT_FIXED_MS + units * slope / 1e9 + moved / BANDWIDTH_BYTES_PER_MS


def fft_ms(plan: FilterPlan) -> float:
    per, batch = fft_points(plan)
    units = FFT_TRANSFORMS * batch * per * math.log2(max(per, 2))
    return FFT_FIXED_MS + units * FFT_MS_PER_GUNIT[fft_work_dtype(plan)] / 1e9


@memoized(1024)
def choose(plan: FilterPlan, compute: str) -> str:
    """'direct' or 'fft' for ``plan`` computed in ``compute`` (a kernel dtype name).

    Integer and bool results always go direct: it is exact, while the FFT rounds (SciPy makes the
    same call whenever the integer products could exceed float64's mantissa).  More than three
    convolved axes go to the FFT: the direct kernel filters at most three.  Cached per plan: the
    FFT estimate searches fast lengths in Python, which cost ~0.1 ms per call on the GPU host
    (auto measured 1.9x the direct kernel it picked before the cache).
    """
    if compute == "uint64":
        return "direct"
    if len(plan.axes) > 3 or not direct_fits(plan):
        return "fft"
    if np.dtype(plan.result_dtype) == np.float16:
        return "fft"  # SciPy's direct loops refuse float16
    return "fft" if fft_ms(plan) + FFT_HOST_MARGIN_MS < direct_ms(plan, compute) else "direct"
