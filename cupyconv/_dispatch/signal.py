"""``method="auto"`` of the signal API: a cost model of the direct kernel and the FFT path.

Both estimates are milliseconds from shapes alone (pure Python), so the choice costs no device
work and can be tested on the CPU.  The constants were first placeholders derived from the
anchors table (docs: benchmarks/notes/signal.md, "Issue 6"); ``benchmarks/calibrate_signal.py``
measures both paths on a grid of problems on the GPU and prints fitted values to paste here.  The
values below were fitted on an NVIDIA H100 (direct: session 2026-11-22, commit 4c917e6; FFT:
session 17, after the FFT path moved to our own cuFFT plans; uint64 is not fitted).

direct_ms = DIRECT_FIXED_MS + outputs * KD * KH * (KW + ROW_OVERHEAD) * DIRECT_MS_PER_GTAP[dt] / 1e9
            (times DIRECT_3D_FACTOR over three axes) + bytes moved / BANDWIDTH
dense_ms  = the same over nd_dense_tile's padded tiles, times DENSE_VOLUME_FACTOR, plus the
            transposes ('same' volumes; the direct path runs the cheaper of the two)
fft_ms    = max(FFT_HOST_MS, transforms * batch * P * log2(P) * FFT_MS_PER_GUNIT[dt] / 1e9)
            (P: padded points per transform; 3 transforms: two forward, one inverse; the host
            part and the device part overlap)

auto picks the FFT when fft_ms < direct_ms.
"""

from __future__ import annotations

import math

import numpy as np

from cupyconv._core.caches import memoized
from cupyconv._ndimage import passes as nd_passes
from cupyconv._ndimage.boundary import CONSTANT
from cupyconv._ndimage.passes import TILE_X, TILE_Y, TILE_Z
from cupyconv._signal.direct import launch_config, outputs_per_thread
from cupyconv._signal.fft import fft_points, fft_work_dtype
from cupyconv._signal.plan import FilterPlan, direct_fits, kernel_operand

# Direct kernel.  ROW_OVERHEAD counts, in taps, the per-filter-row work that does not shrink with
# the row (register-window loads, loop control).
DIRECT_FIXED_MS = 0.0748
ROW_OVERHEAD = 4
DIRECT_MS_PER_GTAP = {"float32": 0.0726, "float64": 0.0464, "complex64": 0.1977,
                      "complex128": 0.3772, "uint64": 0.50}
BANDWIDTH_BYTES_PER_MS = 3.5e9  # ~3.5 TB/s achieved copy rate
# filter_direct over three axes: costed over the outputs of its padded tiles (8 rows x 32 * RX
# columns), at this scale of the 2-d slope.  Without the padding the scale read 3.53 and missed
# by up to 2.8x on volumes with a short last axis.  'same' volumes may run on ndimage's
# nd_dense_tile instead (_signal.direct.dense_volume_layout), costed per tap over its padded
# tiles (160 x 8 x 4 outputs) at DENSE_VOLUME_FACTOR times the 2-d slope, plus the transposes
# where the layout moves the longest axis last; the direct path runs the cheaper estimate.
# Both fitted on 30 float32 volumes (64^3 .. 224x96x48, kernels 3^3 .. 11^3, 3x3x13, 13x5x1;
# none of bench_signal's held-out shapes) timed kernel by kernel (calibrate_signal.py --only-3d,
# H100, 5ab3b1f): the estimate's pick is at most 1.38x the faster kernel there, geomean 1.03x.
DIRECT_3D_FACTOR = 1.047
DENSE_VOLUME_FACTOR = 2.727
# FFT path (cupyconv._signal.spectral: our own cuFFT plans, one fused spectrum product).  Its
# time is the larger of the host's ~9 CuPy launches and the transforms' device time, not their
# sum: below ~0.2 ms of transforms the call is host-bound.  Through cupy.fft the host part was
# 0.4-0.9 ms on H100 hosts; with our plans it is ~0.2 (0.22 ms on the 96^3 / 15^3 volume, where
# cupyx's fftconvolve costs 0.41: exp_signal_host.py).  Fitted on calibrate_signal.py --quick's
# grid (H100, session 17, 64 problems, none of bench_signal's held-out ones): FFT_HOST_MS the
# median time of the problems with little transform work, the slopes through the origin over
# the problems above 1.5x that.  The pick is at most 1.17x the faster method on the grid apart
# from one host-noise outlier (64^3 with 11^3: fft read 0.39 ms, twice its neighbours).
FFT_HOST_MS = 0.2
FFT_MS_PER_GUNIT = {"float32": 0.9825, "float64": 2.0581, "complex64": 1.6677, "complex128": 3.4895}
FFT_TRANSFORMS = 3


# --------------------------------------------------------------------------- volumes on nd_dense_tile
@memoized(256)
def dense_volume_layout(plan: FilterPlan, compute: str):
    """``(perm, offsets)`` with which ndimage's ``nd_dense_tile`` computes ``plan``, or None
    where it cannot: real float, 'same' mode over all three axes of a 3-d operand (no swap, no
    batch axes, zero fill) and taps that fit the tile's shared memory.

    ``perm`` puts the longest axis last (the others keep their order): the tile is 160 columns
    wide, so a volume's short last axis would leave most of it idle; the operands are
    transposed into that order and the result back.  ``offsets`` (ntaps x 3, C order of the
    permuted filter): 'same' keeps in1's shape, the shape nd_dense_tile writes; output ``i``
    reads ``a[i + t - pad_lo]`` for tap ``t``, i.e. offsets ``t - pad_lo``, zeros outside (mode
    constant, cval 0).  Shapes only, so the cost model asks it too."""
    if (compute not in ("float32", "float64") or plan.mode != "same" or plan.swapped
            or plan.kernel_select or plan.reverse_out or plan.boundary != "fill"
            or len(plan.shape_a) != 3 or plan.axes != (0, 1, 2)):
        return None
    longest = max(range(3), key=lambda ax: (plan.shape_a[ax], ax))
    perm = tuple(ax for ax in range(3) if ax != longest) + (longest,)
    shape_g = tuple(plan.shape_g[ax] for ax in perm)
    pad_lo = np.asarray([plan.pad_lo[ax] for ax in perm], np.int64)
    offsets = np.indices(shape_g).reshape(3, -1).T - pad_lo
    shape_a = tuple(plan.shape_a[ax] for ax in perm)
    if nd_passes.dense_tile_plan(shape_a, offsets, CONSTANT, np.dtype(compute).itemsize) is None:
        return None
    return perm, offsets


def dense_volume_runner(plan: FilterPlan, compute: str):
    """A runner ``(in1, in2) -> result in compute`` for a plan :func:`dense_volume_layout`
    accepts: the volume in the layout's axis order (a copy unless it already is, contiguous and
    in the compute type), one copy of the (flipped for convolution) filter into a fresh weight
    buffer ending in cval 0 and divisor 1, one ``nd_dense_tile`` launch, and the result back in
    the caller's axis order (a copy where the layout permuted)."""
    import cupy

    perm, offsets = dense_volume_layout(plan, compute)
    shape_a = tuple(plan.shape_a[ax] for ax in perm)
    shape_g = tuple(plan.shape_g[ax] for ax in perm)
    launch = nd_passes.dense_tile_launcher(compute, compute, compute, shape_a, offsets, CONSTANT)
    ntaps = len(offsets)
    tail = np.array([0, 1], compute)  # cval, divisor
    back = tuple(int(i) for i in np.argsort(perm))

    def run(in1, in2):
        a = cupy.ascontiguousarray(in1.transpose(perm).astype(compute, copy=False))
        w = cupy.empty(ntaps + 2, compute)
        w[:ntaps].reshape(shape_g)[...] = kernel_operand(plan, in2, cupy).transpose(perm)
        w[ntaps:] = nd_passes.device_copy(tail)  # a cached copy safe on any stream
        y = cupy.empty(shape_a, compute)
        launch(a, w, y)
        return y if perm == (0, 1, 2) else cupy.ascontiguousarray(y.transpose(back))

    return run


# --------------------------------------------------------------------------- estimates
def _slope_units(plan: FilterPlan, outputs: int) -> float:
    """Tap units of ``outputs`` outputs of ``plan``: rows of the filter times (its width plus the
    per-row overhead)."""
    k = [plan.shape_g[a] for a in plan.axes]
    kw = k[-1] if k else 1
    rows = math.prod(k[:-1]) if k else 1
    return outputs * rows * (kw + ROW_OVERHEAD)


def _moved_ms(plan: FilterPlan, compute: str) -> float:
    item = np.dtype(compute).itemsize
    return (math.prod(plan.shape_a) + plan.outputs()) * item / BANDWIDTH_BYTES_PER_MS


def filter_direct_units(plan: FilterPlan, compute: str) -> float:
    """Tap units of filter_direct on ``plan``: over three axes, of the outputs of its padded
    tiles (8 rows x 32 * RX columns: a volume whose last axis fills them badly pays for the idle
    part, 4.5x at 64 columns of float32); else of the outputs themselves (the 2-d fit)."""
    if len(plan.axes) < 3:
        return _slope_units(plan, plan.outputs())
    out3 = tuple(plan.out_shape[ax] for ax in plan.axes)
    item = np.dtype(compute).itemsize
    (tx, ty), *_ = launch_config(item, out3, tuple(plan.shape_g[ax] for ax in plan.axes))
    cols = tx * outputs_per_thread(item)  # the kernel's own tile, not a copy of its numbers
    d, h, w = out3
    batch = plan.outputs() // (d * h * w)
    return _slope_units(plan, batch * d * math.ceil(h / ty) * ty * math.ceil(w / cols) * cols)


def filter_direct_ms(plan: FilterPlan, compute: str) -> float:
    """Estimate of filter_direct (or filter_plane, which the 2-d fit describes) on ``plan``."""
    factor = DIRECT_3D_FACTOR if len(plan.axes) == 3 else 1.0
    return (DIRECT_FIXED_MS + filter_direct_units(plan, compute) * DIRECT_MS_PER_GTAP[compute]
            * factor / 1e9 + _moved_ms(plan, compute))


def dense_volume_units(plan: FilterPlan, compute: str):
    """(taps times the outputs of nd_dense_tile's padded tiles, transposed bytes) of ``plan`` on
    the dense volume route, or None where it does not apply."""
    layout = dense_volume_layout(plan, compute)
    if layout is None:
        return None
    perm, _ = layout
    d, h, w = (plan.shape_a[ax] for ax in perm)
    tz, ty, tx = TILE_Z, TILE_Y, TILE_X
    padded = math.ceil(d / tz) * tz * math.ceil(h / ty) * ty * math.ceil(w / tx) * tx
    moved = 0 if perm == (0, 1, 2) else 4 * plan.outputs() * np.dtype(compute).itemsize
    # per tap, without filter_direct's per-row overhead: the tile kernel slides its window
    # along a row one load per tap (a per-row term fitted worse, calibrate_signal at 5ab3b1f)
    return padded * plan.taps(), moved


def dense_volume_ms(plan: FilterPlan, compute: str) -> float | None:
    """Estimate of the dense volume route (nd_dense_tile) on ``plan``, or None."""
    units = dense_volume_units(plan, compute)
    if units is None:
        return None
    taps, moved = units
    return (DIRECT_FIXED_MS + taps * DIRECT_MS_PER_GTAP[compute] * DENSE_VOLUME_FACTOR / 1e9
            + _moved_ms(plan, compute) + moved / BANDWIDTH_BYTES_PER_MS)


@memoized(1024)
def use_dense_volume(plan: FilterPlan, compute: str) -> bool:
    """Whether the direct path runs ``plan`` on nd_dense_tile (estimated faster than
    filter_direct) rather than filter_direct."""
    dense = dense_volume_ms(plan, compute)
    return dense is not None and dense < filter_direct_ms(plan, compute)


def direct_ms(plan: FilterPlan, compute: str) -> float:
    """Estimate of the direct path: the kernel :func:`use_dense_volume` picks."""
    if use_dense_volume(plan, compute):
        return dense_volume_ms(plan, compute)
    return filter_direct_ms(plan, compute)


def fft_ms(plan: FilterPlan) -> float:
    per, batch = fft_points(plan)
    units = FFT_TRANSFORMS * batch * per * math.log2(max(per, 2))
    return max(FFT_HOST_MS, units * FFT_MS_PER_GUNIT[fft_work_dtype(plan)] / 1e9)


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
    return "fft" if fft_ms(plan) < direct_ms(plan, compute) else "direct"
