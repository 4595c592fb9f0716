"""The direct path of the signal API: a :class:`FilterPlan` executed by ``filter_direct.cu``.

The convolved axes (at most three) move to the end and are padded in front to (D, H, W); every
other axis is flattened into one batch dimension, so a stack of images or signals is one launch.
The filter is shared across the batch (batch stride 0) unless it has batch extent of its own.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from . import jit
from ._kernels import FILTER_DIRECT, FILTER_WIDTHS
from ._launch import int64s, ints
from ._signal_plan import BOUNDARY_CODE, MAX_DIRECT_AXES, FilterPlan, finish, kernel_operand

SMEM_LIMIT = 48 * 1024  # the static per-block limit on every supported GPU: no opt-in needed
GRID_Y_MAX = 65535
THREADS = 256


def outputs_per_thread(itemsize: int) -> int:
    """RX of the kernel (``filter_rx``): keep in step with filter_direct.cu."""
    return 9 if itemsize <= 4 else (5 if itemsize <= 8 else 3)


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


@lru_cache(maxsize=1024)
def _launch(plan: FilterPlan, compute: str, fv, nbatch: int, spatial3, kernel3, out3, shared: bool):
    """(width bucket, grid, block, scalar arguments, shared bytes) of one launch: everything that
    does not depend on the operands' data or the device, worked out once per problem (tens of
    microseconds of Python otherwise)."""
    real = np.dtype(compute).type(0).real.dtype  # the kernel's real_of<T>
    fv = np.asarray(fv).astype(compute)[()]
    fill = (np.asarray(fv.real, real)[()], np.asarray(fv.imag, real)[()])
    item = np.dtype(compute).itemsize
    (tx, ty), kwc, khc, smem = launch_config(item, out3, kernel3)
    rx = outputs_per_thread(item)
    tiles_w = math.ceil(out3[2] / (tx * rx))
    tiles = tiles_w * math.ceil(out3[1] / ty)
    planes = nbatch * out3[0]
    pad3 = (0,) * (3 - len(plan.axes)) + plan.pad_lo
    xs = int64s([math.prod(spatial3), spatial3[1] * spatial3[2], spatial3[2], 1])
    gsb = 0 if shared else math.prod(kernel3)
    scalars = (*fill, *ints((planes,) + out3 + spatial3 + kernel3 + pad3
                            + (BOUNDARY_CODE[plan.boundary],)),
               *xs, np.int64(gsb), *ints((khc, tiles_w)))
    return kwc, (tiles, min(planes, GRID_Y_MAX)), (tx, ty), scalars, smem


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
    fv = np.asarray(fillvalue).astype(plan.result_dtype).astype(compute)[()]
    kwc, grid, block, scalars, smem = _launch(plan, compute, fv.item(), nbatch, spatial3, kernel3,
                                              out3, shared)
    fn = jit.get_function(FILTER_DIRECT[compute], "filter_direct", compute, (kwc,))
    y = cupy.empty((nbatch,) + out3, dtype=compute)
    # (the caller holds the device context of the operands)
    fn(grid, block, (a, g, scalars[0], scalars[1], y) + scalars[2:], shared_mem=smem)
    z = cupy.moveaxis(y.reshape(batch + out3[3 - k:]), dest, plan.axes)
    return finish(plan, z, cupy)
