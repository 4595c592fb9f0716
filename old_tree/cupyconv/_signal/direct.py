"""The direct path of the signal API: a :class:`FilterPlan` executed by ``filter_direct.cu``.

The convolved axes (at most three) move to the end and are padded in front to (D, H, W); every
other axis is flattened into one batch dimension, so a stack of images or signals is one launch.
The filter is shared across the batch (batch stride 0) unless it has batch extent of its own.
Real 2-d planes run on ``filter_plane.cu`` (:func:`lean_plane_runner`).  (Real 3-d volumes in
'same' mode may run on ndimage's ``nd_dense_tile`` instead: ``cupyconv._dispatch.signal``
decides and runs that, as it spans two kernel families.)
"""

from __future__ import annotations

import math

import numpy as np

from cupyconv._core import jit
from cupyconv._core.caches import memoized
from cupyconv._core.kernels import (FILTER_DIRECT, FILTER_PLANE, FILTER_WIDTHS, KERNEL_CONSTANTS,
                                    PLANE_SQUARES, plane_rows_per_thread, plane_width)
from cupyconv._core.launch import GRID_YZ_MAX, int64s, ints
from cupyconv._signal.plan import BOUNDARY_CODE, MAX_DIRECT_AXES, FilterPlan, finish, kernel_operand

SMEM_LIMIT = 48 * 1024  # the static per-block limit on every supported GPU: no opt-in needed
THREADS = KERNEL_CONSTANTS["FD_THREADS"]


def outputs_per_thread(itemsize: int) -> int:
    """RX of the kernel (``filter_rx`` in filter_direct.cu)."""
    return KERNEL_CONSTANTS["FD_RX_NARROW" if itemsize <= 4 else
                            "FD_RX_MEDIUM" if itemsize <= 8 else "FD_RX_WIDE"]


def width_bucket(kw: int) -> int:
    """Filter columns per pass: the smallest compiled bucket holding ``kw`` (wider: passes of 32)."""
    return next((w for w in FILTER_WIDTHS if w >= kw), FILTER_WIDTHS[-1])


def launch_config(itemsize: int, out3: tuple[int, int, int], kernel3: tuple[int, int, int]):
    """(block (TX, TY), KWC, KHC, shared bytes) for one launch.

    2-d and 3-d outputs use 32 x 8 threads (a 32 * RX by 8 tile); single-row outputs (1-d signals)
    put all 256 threads on the row, narrowed for short rows.  KHC, the filter rows per pass, is the
    most that keeps the tile, its halo and the taps under the shared-memory limit.
    """
    rx = outputs_per_thread(itemsize)
    _, oh, ow = out3
    _, kh, kw = kernel3
    if oh == 1:
        tx = min(THREADS, max(32, 32 * math.ceil(math.ceil(ow / rx) / 32)))
        ty = 1
    else:
        tx, ty = 32, 8
    kwc = width_bucket(kw)
    cols = tx * rx + kwc - 1
    khc = kh
    while khc > 1 and ((ty + khc - 1) * cols + khc * kwc) * itemsize > SMEM_LIMIT:
        khc -= 1
    smem = ((ty + khc - 1) * cols + khc * kwc) * itemsize
    return (tx, ty), kwc, khc, smem


# filter_plane.cu's work split: 8 warps a block, each a strip of 128 columns x PLANE_CHUNKS * RY
# rows (RY: plane_rows_per_thread).
PLANE_WARPS = KERNEL_CONSTANTS["FP_WARPS"]
PLANE_THREADS = 32 * PLANE_WARPS
PLANE_TW = KERNEL_CONSTANTS["FP_TW"]
PLANE_CHUNKS = KERNEL_CONSTANTS["FP_CHUNKS"]


def plane_config(compute: str, spatial3, kernel3, out3, vec_out: bool):
    """(width bucket KWB, shared bytes) of filter_plane for this problem, or None where the general
    kernel must run: complex or integer types, 3-d filters, single-row outputs (1-d signals keep
    their 256-wide rows there), filters wider than the largest bucket, or taps that do not fit
    shared memory.  Mirrors the kernel's layout: the taps, and without ``vec_out`` a buffer of
    one row chunk per warp."""
    if compute not in FILTER_PLANE or spatial3[0] != 1 or kernel3[0] != 1 or out3[1] < 2:
        return None
    kh, kw = kernel3[1], kernel3[2]
    kwb = plane_width(kw)
    if kwb is None:
        return None
    item = np.dtype(compute).itemsize
    chunk = PLANE_WARPS * plane_rows_per_thread(item) * PLANE_TW
    smem = (kh * kwb + (0 if vec_out else chunk)) * item
    return (kwb, smem) if smem <= SMEM_LIMIT else None


@memoized(1024)
def _launch(plan: FilterPlan, compute: str, fillvalue, nbatch: int, spatial3, kernel3, out3,
            shared: bool, vec_in: bool, out_aligned: bool, flip: bool = False):
    """(kernel, grid, block, fill arguments, scalar arguments, shared bytes) of one launch, the
    kernel as ``jit.get_function``'s arguments: everything that does not depend on the operands'
    data or the device, worked out once per problem (tens of microseconds of Python otherwise).
    ``fillvalue``: a NumPy scalar of the plan's result dtype (``check_fillvalue``).
    ``vec_in``/``out_aligned``: the input/output planes allow 16-byte vector access (rows of a
    multiple of 4 elements, aligned bases).  ``flip``: the plane kernel reads the filter reversed
    (convolution without a copy)."""
    real = np.dtype(compute).type(0).real.dtype  # the kernel's real_of<T>
    fv = np.asarray(fillvalue).astype(plan.result_dtype).astype(compute)[()]
    fill = (np.asarray(fv.real, real)[()], np.asarray(fv.imag, real)[()])
    planes = nbatch * out3[0]
    gsb = 0 if shared else math.prod(kernel3)
    pad3 = (0,) * (3 - len(plan.axes)) + plan.pad_lo
    # tiles start at column 128 t - d so that each window's first input column is 4-aligned
    d = -pad3[2] % 4
    vec_out = out_aligned and d == 0
    plane = plane_config(compute, spatial3, kernel3, out3, vec_out)
    if plane is not None:
        kwb, smem = plane
        rows = PLANE_WARPS * PLANE_CHUNKS * plane_rows_per_thread(np.dtype(compute).itemsize)
        tiles_w = math.ceil((out3[2] + d) / PLANE_TW)
        grid = (tiles_w * math.ceil(out3[1] / rows), min(planes, GRID_YZ_MAX))
        scalars = (*ints((planes,) + out3[1:] + spatial3[1:] + kernel3[1:] + pad3[1:]
                         + (BOUNDARY_CODE[plan.boundary],)),
                   np.int64(gsb), *ints((int(flip), tiles_w, d, int(vec_in), int(vec_out))))
        kh, kw = kernel3[1:]
        square = kh if kh == kw and kh in PLANE_SQUARES else 0
        kernel = (FILTER_PLANE[compute], "filter_plane", compute, (kwb, square))
        return kernel, grid, (PLANE_THREADS, 1), fill[:1], scalars, smem
    item = np.dtype(compute).itemsize
    (tx, ty), kwc, khc, smem = launch_config(item, out3, kernel3)
    rx = outputs_per_thread(item)
    tiles_w = math.ceil(out3[2] / (tx * rx))
    tiles = tiles_w * math.ceil(out3[1] / ty)
    xs = int64s([math.prod(spatial3), spatial3[1] * spatial3[2], spatial3[2], 1])
    scalars = (*ints((planes,) + out3 + spatial3 + kernel3 + pad3
                     + (BOUNDARY_CODE[plan.boundary],)),
               *xs, np.int64(gsb), *ints((khc, tiles_w)))
    kernel = (FILTER_DIRECT[compute], "filter_direct", compute, (kwc,))
    return kernel, (tiles, min(planes, GRID_YZ_MAX)), (tx, ty), fill, scalars, smem


def _address(arr) -> int:
    """Device address of ``arr``'s first element (0 for host arrays: the CPU model of the tests)."""
    data = getattr(arr, "data", None)
    return int(getattr(data, "ptr", 0))


def direct_runner(plan: FilterPlan, in1, in2, fillvalue, compute: str):
    """A runner ``(in1, in2) -> result in compute`` for calls whose operands match these (shape,
    strides, dtype, device, alignment: the fast-path key).

    Plain image filtering (contiguous real planes in the compute type, the filter axes last, no
    operand swap or centre selection) gets a lean runner: one allocation and one plane-kernel
    launch prepared here, the filter reversed by the kernel for convolution: ~27 us of Python per
    call instead of ~115 (on the 2026-11-23 H100 host), so a 4096^2 3x3 call costs its kernel time.
    Anything else runs :func:`run_direct`.
    """
    lean = lean_plane_runner(plan, in1, in2, fillvalue, compute)
    if lean is not None:
        return lean
    return lambda a, b: run_direct(plan, a, b, fillvalue, compute)


def lean_plane_runner(plan: FilterPlan, in1, in2, fillvalue, compute: str):
    """The lean runner ``run(a, b, y=None) -> y`` of :func:`direct_runner` (``y``: a fresh
    C-contiguous result in ``compute`` of ``plan.out_shape``), or None where it does not apply."""
    import cupy

    nd, k = in1.ndim, len(plan.axes)
    batch = tuple(plan.out_shape[:nd - k])
    if (k != 2 or plan.axes != (nd - 2, nd - 1) or plan.swapped or plan.kernel_select
            or plan.reverse_out or in1.dtype != compute or in2.dtype != compute
            or not (in1.flags.c_contiguous and in2.flags.c_contiguous)
            or in1.shape[:nd - k] != batch):
        return None
    shared = math.prod(in2.shape[:nd - k]) == 1
    if not shared and in2.shape[:nd - k] != batch:
        return None
    spatial3, kernel3 = (1,) + in1.shape[nd - 2:], (1,) + in2.shape[nd - 2:]
    out3 = (1,) + tuple(plan.out_shape[nd - 2:])
    if plane_config(compute, spatial3, kernel3, out3, out3[2] % 4 == 0) is None:
        return None
    # a fresh output is pool-allocated, so 256-byte aligned
    kernel, grid, block, fill, scalars, smem = _launch(
        plan, compute, fillvalue, math.prod(batch), spatial3, kernel3, out3, shared,
        spatial3[2] % 4 == 0 and _address(in1) % 16 == 0, out3[2] % 4 == 0, plan.flip_kernel)
    tail = fill + tuple(scalars)
    shape, functions = plan.out_shape, {}

    def run(a, b, y=None):
        if y is None:
            y = cupy.empty(shape, compute)
        dev = getattr(y.data, "device_id", None)  # (None: host arrays in the CPU model)
        fn = functions.get(dev)
        if fn is None:
            fn = functions[dev] = jit.get_function(*kernel)
        fn(grid, block, (a, b, tail[0], y) + tail[1:], shared_mem=smem)
        return y

    return run


def run_direct(plan: FilterPlan, in1, in2, fillvalue, compute: str):
    """The plan's result computed in ``compute`` (a kernel dtype), not yet cast to the result."""
    import cupy

    if len(plan.axes) > MAX_DIRECT_AXES:
        raise ValueError(f"method='direct' filters at most {MAX_DIRECT_AXES} axes, this problem "
                         f"convolves {len(plan.axes)}: use method='fft' or 'auto'")
    a, g = (in2, in1) if plan.swapped else (in1, in2)
    g = kernel_operand(plan, g, cupy)
    nd, k = a.ndim, len(plan.axes)
    dest = list(range(nd - k, nd))
    a = cupy.moveaxis(a, plan.axes, dest)
    g = cupy.moveaxis(g, plan.axes, dest)
    batch = tuple(plan.out_shape[i] for i in plan.batch_axes)
    nbatch = math.prod(batch)
    # Inputs are staged contiguous in the compute type (one copy at most); a batch-broadcast first
    # operand is materialized, a shared filter is not.
    a = cupy.ascontiguousarray(cupy.broadcast_to(a, batch + a.shape[nd - k:]).astype(compute, copy=False))
    shared = math.prod(g.shape[:nd - k]) == 1
    g = g.reshape(g.shape[nd - k:]) if shared else cupy.broadcast_to(g, batch + g.shape[nd - k:])
    g = cupy.ascontiguousarray(g.astype(compute, copy=False))
    spatial3 = (1,) * (3 - k) + a.shape[nd - k:]
    kernel3 = (1,) * (3 - k) + g.shape[g.ndim - k:]
    out3 = (1,) * (3 - k) + tuple(plan.out_shape[i] for i in plan.axes)
    y = cupy.empty((nbatch,) + out3, dtype=compute)
    vec_in = spatial3[2] % 4 == 0 and _address(a) % 16 == 0
    out_aligned = out3[2] % 4 == 0 and _address(y) % 16 == 0
    kernel, grid, block, fill, scalars, smem = _launch(
        plan, compute, fillvalue, nbatch, spatial3, kernel3, out3, shared, vec_in, out_aligned)
    fn = jit.get_function(*kernel)  # (the caller holds the device context of the operands)
    fn(grid, block, (a, g, *fill, y, *scalars), shared_mem=smem)
    z = cupy.moveaxis(y.reshape(batch + out3[3 - k:]), dest, plan.axes)
    return finish(plan, z, cupy)
