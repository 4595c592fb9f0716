"""Launches of the ndimage kernels: one 1-d pass along an axis, or one dense N-d correlation.

Both take C-contiguous CuPy arrays that do not overlap (the public layer guarantees it) and
host weights already in the compute dtype with cval and the divisor appended.  Small device
copies of weights and sizes are cached per content and device, so a repeated call uploads
nothing.
"""

from __future__ import annotations

import math

import numpy as np

from cupyconv._core import jit
from cupyconv._core.caches import memoized
from cupyconv._core.launch import GRID_YZ_MAX
from cupyconv._ndimage.kernels import ND_CONSTANTS, nd_module

THREADS = ND_CONSTANTS["ND_THREADS"]
ROW_RUN = THREADS * ND_CONSTANTS["ND_RX"]  # outputs of one nd_line_row block
SMEM_LIMIT = 48 * 1024  # static limit of every supported GPU: no opt-in needed


def col_rows(compute_itemsize: int) -> int:
    """TN of nd_line_col: 8 thread rows times ``nd::col_ry``."""
    return 8 * ND_CONSTANTS["ND_RY" if compute_itemsize <= 8 else "ND_RY_WIDE"]


def line_plan(shape: tuple[int, ...], axis: int, K: int, compute_itemsize: int):
    """(kernel name, (outer, n, inner), shared bytes) of a 1-d pass of ``K`` taps along ``axis``.

    The staged kernels hold K + 2 weight slots and the tile with its halo plus one slot; filters
    whose tile would pass the static shared-memory limit run the direct kernel."""
    n = shape[axis]
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1:])
    geom = (outer, n, inner)
    if inner == 1:
        smem = (K + 2 + ROW_RUN + K) * compute_itemsize
        if smem <= SMEM_LIMIT:
            return "nd_line_row", geom, smem
    else:
        smem = (K + 2 + (col_rows(compute_itemsize) + K) * 32) * compute_itemsize
        if smem <= SMEM_LIMIT:
            return "nd_line_col", geom, smem
    return "nd_line_direct", geom, 0


@memoized(512)
def _device_copy(data: bytes, dtype: str, device: int):
    import cupy

    # Copied on a private stream and waited for: a later call may read it from any stream.
    with cupy.cuda.Device(device):
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            dev = cupy.asarray(np.frombuffer(data, dtype=dtype))
        stream.synchronize()
        return dev


def device_copy(host: np.ndarray):
    """A cached device copy of the small host array ``host`` (weights, packed sizes)."""
    import cupy

    host = np.ascontiguousarray(host)
    return _device_copy(host.tobytes(), host.dtype.str, cupy.cuda.Device().id)


def _grid_1d(total: int) -> int:
    return max(1, min(math.ceil(total / THREADS), 1 << 20))


def run_line(src, dst, axis: int, weights: np.ndarray, left: int, mode: int) -> None:
    """dst = the 1-d correlation of src along ``axis`` with ``weights`` (compute dtype: K taps,
    cval, divisor), the window starting ``left`` elements before each output."""
    K = weights.size - 2
    compute = weights.dtype.name
    kernel, (outer, n, inner), smem = line_plan(src.shape, axis, K, weights.dtype.itemsize)
    fn = jit.get_function(nd_module(src.dtype.name, dst.dtype.name, compute), kernel,
                          f"{src.dtype.name}:{dst.dtype.name}:{compute}")
    if src.size == 0:
        return
    if kernel == "nd_line_row":
        prm = (outer, n, K, left, mode)
        grid, block = (math.ceil(n / ROW_RUN), min(outer, GRID_YZ_MAX)), (THREADS,)
    elif kernel == "nd_line_col":
        tiles_n = math.ceil(n / col_rows(weights.dtype.itemsize))
        prm = (outer, n, inner, K, left, mode, tiles_n)
        grid, block = (tiles_n * math.ceil(inner / 32), min(outer, GRID_YZ_MAX)), (32, 8)
    else:
        prm = (outer, n, inner, K, left, mode)
        grid, block = (_grid_1d(src.size),), (THREADS,)
    fn(grid, block, (src, device_copy(weights), dst, device_copy(np.array(prm, np.int64))),
       shared_mem=smem)


def run_dense(src, dst, weights: np.ndarray, offsets: np.ndarray, mode: int) -> None:
    """dst = the N-d correlation of src with the taps ``offsets`` (ntaps x ndim coordinate
    offsets from the output) weighted by ``weights`` (compute dtype: ntaps, cval, divisor)."""
    ntaps, ndim = offsets.shape
    if ndim > ND_CONSTANTS["ND_MAX_DIMS"]:
        raise ValueError(f"cupyconv.ndimage correlates at most {ND_CONSTANTS['ND_MAX_DIMS']} "
                         f"filtered dims, got {ndim}")
    compute = weights.dtype.name
    fn = jit.get_function(nd_module(src.dtype.name, dst.dtype.name, compute), "nd_dense",
                          f"{src.dtype.name}:{dst.dtype.name}:{compute}")
    if src.size == 0:
        return
    shape = np.array(src.shape, np.int64)
    strides = np.array([math.prod(src.shape[d + 1:]) for d in range(ndim)], np.int64)
    lo = np.maximum(-offsets.min(axis=0, initial=0), 0) if ntaps else np.zeros(ndim, np.int64)
    hi = np.maximum(offsets.max(axis=0, initial=0), 0) if ntaps else np.zeros(ndim, np.int64)
    linear = offsets @ strides
    taps = np.concatenate([linear[:, None], offsets], axis=1).ravel()
    prm = np.concatenate([[ndim, src.size, mode, ntaps], shape, lo, hi, taps]).astype(np.int64)
    fn((_grid_1d(src.size),), (THREADS,), (src, device_copy(weights), dst, device_copy(prm)))
