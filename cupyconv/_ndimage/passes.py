"""Launches of the ndimage kernels: one 1-d pass along an axis, or one dense N-d correlation.

Each ``*_launcher`` works out one launch (kernel, grid, shared memory, device copies of the
weights and packed sizes) once, from the array's shape and dtypes and host weights already in
the compute dtype with cval and the divisor appended, and returns ``launch(src, dst)`` for
C-contiguous CuPy arrays of that shape that do not overlap (the public layer guarantees it): a
prepared call of :mod:`cupyconv.ndimage` keeps its launchers and only launches.  Small device
copies of weights and sizes are cached per content and device, so building a launcher again
uploads nothing.
"""

from __future__ import annotations

import math

import numpy as np

from cupyconv._core import jit
from cupyconv._core.caches import memoized
from cupyconv._core.kernels import (KERNEL_CONSTANTS, PLANE_SQUARES, plane_rows_per_thread,
                                    plane_width)
from cupyconv._core.launch import GRID_YZ_MAX
from cupyconv._ndimage.boundary import CONSTANT, MIRROR, NEAREST, REFLECT, WRAP
from cupyconv._ndimage.kernels import ND_CONSTANTS, ND_PLANE, nd_module

THREADS = ND_CONSTANTS["ND_THREADS"]
TILE_X = 32 * ND_CONSTANTS["ND_TILE_RX"]   # nd_dense_tile: columns, rows, planes of a tile
TILE_Y = ND_CONSTANTS["ND_TILE_ROWS"]
TILE_Z = ND_CONSTANTS["ND_TILE_Z"]
SMEM_LIMIT = 48 * 1024  # static limit of every supported GPU: no opt-in needed


def col_rows(compute_itemsize: int) -> int:
    """TN of nd_line_col: 8 thread rows times ``nd::col_ry``."""
    return 8 * ND_CONSTANTS["ND_RY" if compute_itemsize <= 8 else "ND_RY_WIDE"]


def row_threads(n: int) -> int:
    """Threads of an nd_line_row block for rows of ``n``: ND_THREADS, or fewer warps where one
    run of ``ND_RX`` outputs per thread covers the row (a 256-long row would leave 4/5 of a full
    block idle)."""
    rx = ND_CONSTANTS["ND_RX"]
    return min(THREADS, 32 * math.ceil(n / (32 * rx)))


def line_plan(shape: tuple[int, ...], axis: int, K: int, compute_itemsize: int):
    """(kernel name, (outer, n, inner), shared bytes) of a 1-d pass of ``K`` taps along ``axis``.

    The staged kernels hold K + 2 weight slots and the tile with its halo plus one slot; filters
    whose tile would pass the static shared-memory limit run the direct kernel.  nd_line_row's
    tile is ``row_threads(n) * ND_RX`` outputs long."""
    n = shape[axis]
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1:])
    geom = (outer, n, inner)
    if inner == 1:
        smem = (K + 2 + row_threads(n) * ND_CONSTANTS["ND_RX"] + K) * compute_itemsize
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


def _no_launch(src, dst) -> None:
    """The launcher of an empty array: nothing to compute."""


def line_launcher(shape: tuple[int, ...], axis: int, in_dtype: str, out_dtype: str,
                  weights: np.ndarray, left: int, mode: int):
    """``launch(src, dst)``: dst = the 1-d correlation of src (``shape``, ``in_dtype``) along
    ``axis`` with ``weights`` (compute dtype: K taps, cval, divisor) into ``out_dtype``, the window
    starting ``left`` elements before each output."""
    K = weights.size - 2
    compute = weights.dtype.name
    kernel, (outer, n, inner), smem = line_plan(shape, axis, K, weights.dtype.itemsize)
    fn = jit.get_function(nd_module(in_dtype, out_dtype, compute), kernel,
                          f"{in_dtype}:{out_dtype}:{compute}")
    size = math.prod(shape)
    if size == 0:
        return _no_launch
    if kernel == "nd_line_row":
        prm = (outer, n, K, left, mode)
        threads = row_threads(n)
        run = threads * ND_CONSTANTS["ND_RX"]
        grid, block = (math.ceil(n / run), min(outer, GRID_YZ_MAX)), (threads,)
    elif kernel == "nd_line_col":
        tiles_n = math.ceil(n / col_rows(weights.dtype.itemsize))
        prm = (outer, n, inner, K, left, mode, tiles_n)
        grid, block = (tiles_n * math.ceil(inner / 32), min(outer, GRID_YZ_MAX)), (32, 8)
    else:
        prm = (outer, n, inner, K, left, mode)
        grid, block = (_grid_1d(size),), (THREADS,)
    w_dev, prm_dev = device_copy(weights), device_copy(np.array(prm, np.int64))

    def launch(src, dst) -> None:
        fn(grid, block, (src, w_dev, dst, prm_dev), shared_mem=smem)

    return launch


def dense_tile_plan(shape: tuple[int, ...], offsets: np.ndarray, mode: int,
                    compute_itemsize: int):
    """(packed sizes, grid, shared bytes) of ``nd_dense_tile`` for the taps ``offsets`` (ntaps x
    ndim, in the order nd_dense sums them: C order of the filter) on an array of ``shape``, or
    None where the array has more than 3 dims or the staged plane with the taps passes the
    static shared-memory limit (then nd_dense runs).

    The array is seen as (planes, rows, columns), leading dims of 1 added; the taps are grouped
    by plane offset (contiguous in C order) and coded by their place in the staged plane, with
    a flag on each tap that is the right neighbour of the one before (the window slides)."""
    ntaps, ndim = offsets.shape
    if ndim > 3:
        return None
    shape3 = (1,) * (3 - ndim) + tuple(shape)
    off = np.zeros((ntaps, 3), np.int64)
    off[:, 3 - ndim:] = offsets
    lo = off.min(axis=0, initial=0)
    span = off.max(axis=0, initial=0) - lo + 1
    PY, PX = TILE_Y + int(span[1]) - 1, TILE_X + int(span[2]) - 1
    smem = PY * PX * compute_itemsize + ntaps * (compute_itemsize + 4) + (PY + PX) * 4
    if smem > SMEM_LIMIT:
        return None
    rel = off - lo
    if ntaps > 1 and np.any(np.diff(rel[:, 0]) < 0):
        raise ValueError("dense taps must be listed in C order (by plane first)")
    starts = np.searchsorted(rel[:, 0], np.arange(int(span[0]) + 1), side="left")
    run = np.zeros(ntaps, np.int64)
    if ntaps > 1:
        run[1:] = ((rel[1:, 0] == rel[:-1, 0]) & (rel[1:, 1] == rel[:-1, 1])
                   & (rel[1:, 2] == rel[:-1, 2] + 1))
    codes = (rel[:, 1] * PX + rel[:, 2]) * 2 + run
    tiles_x = math.ceil(shape3[2] / TILE_X)
    tiles = tiles_x * math.ceil(shape3[1] / TILE_Y)
    prm = np.concatenate([[*shape3, mode, ntaps, PY, PX, *lo, int(span[0]), tiles_x], starts,
                          codes]).astype(np.int64)
    planes = planes_per_block(shape3[0])
    grid = (tiles, min(math.ceil(shape3[0] / planes), GRID_YZ_MAX))
    return prm, grid, smem


def planes_per_block(planes: int) -> int:
    """Output planes an ``nd_dense_tile`` block owns (its TZ): one where the array has one."""
    return 1 if planes == 1 else TILE_Z


def dense_tile_launcher(in_dtype: str, out_dtype: str, compute: str, shape: tuple[int, ...],
                        offsets: np.ndarray, mode: int):
    """``launch(src, weights, dst)`` of ``nd_dense_tile`` for this problem (``weights``: a device
    buffer of the taps in the compute dtype, then cval and the divisor), or None where
    :func:`dense_tile_plan` has no plan.  The launch geometry and packed sizes are worked out
    here once; the caller may keep the launcher for repeated calls of one problem."""
    tiled = dense_tile_plan(shape, offsets, mode, np.dtype(compute).itemsize)
    if tiled is None:
        return None
    prm, grid, smem = tiled
    module = nd_module(in_dtype, out_dtype, compute)
    variant = (planes_per_block(int(prm[0])),)
    name = f"{in_dtype}:{out_dtype}:{compute}"

    def launch(src, weights, dst):
        fn = jit.get_function(module, "nd_dense_tile", name, variant)
        fn(grid, (32, TILE_Y), (src, weights, dst, device_copy(prm)), shared_mem=smem)

    return launch


def dense_launcher(shape: tuple[int, ...], in_dtype: str, out_dtype: str, weights: np.ndarray,
                   offsets: np.ndarray, mode: int):
    """``launch(src, dst)``: dst = the N-d correlation of src (``shape``, ``in_dtype``) with the
    taps ``offsets`` (ntaps x ndim coordinate offsets from the output, in the C order of the
    filter) weighted by ``weights`` (compute dtype: ntaps, cval, divisor) into ``out_dtype``: the
    shared-memory tiled kernel where :func:`dense_tile_plan` has a plan, else the direct one."""
    ntaps, ndim = offsets.shape
    if ndim > ND_CONSTANTS["ND_MAX_DIMS"]:
        raise ValueError(f"cupyconv.ndimage correlates at most {ND_CONSTANTS['ND_MAX_DIMS']} "
                         f"filtered dims, got {ndim}")
    compute = weights.dtype.name
    tiled = dense_tile_launcher(in_dtype, out_dtype, compute, shape, offsets, mode)
    size = math.prod(shape)
    if size == 0:
        return _no_launch
    w_dev = device_copy(weights)
    if tiled is not None:
        return lambda src, dst: tiled(src, w_dev, dst)
    fn = jit.get_function(nd_module(in_dtype, out_dtype, compute), "nd_dense",
                          f"{in_dtype}:{out_dtype}:{compute}")
    strides = np.array([math.prod(shape[d + 1:]) for d in range(ndim)], np.int64)
    lo = np.maximum(-offsets.min(axis=0, initial=0), 0) if ntaps else np.zeros(ndim, np.int64)
    hi = np.maximum(offsets.max(axis=0, initial=0), 0) if ntaps else np.zeros(ndim, np.int64)
    linear = offsets @ strides
    taps = np.concatenate([linear[:, None], offsets], axis=1).ravel()
    prm = np.concatenate([[ndim, size, mode, ntaps], np.array(shape, np.int64), lo, hi,
                          taps]).astype(np.int64)
    prm_dev, grid = device_copy(prm), (_grid_1d(size),)

    def launch(src, dst) -> None:
        fn(grid, (THREADS,), (src, w_dev, dst, prm_dev))

    return launch


SEP_TX = 32                          # nd_sep2d: output columns and rows of a tile
SEP_TY = 8 * ND_CONSTANTS["ND_SEP_RY"]
# nd_sep2d: longest filter along either axis; past it the 1-d passes run.  Measured on an H100
# (bench_ndimage.py, 4096^2 float32): fused faster up to 15 taps (uniform 5 0.165 -> 0.139 ms,
# 15 0.186 -> 0.180), slower past it (gaussian sigma 2, 17 taps, 0.227 -> 0.259; sigma 5, 41
# taps, 0.274 -> 0.427): a 32-column tile stages 32 + K - 1 columns.
SEP_MAX_TAPS = 15


def sep2d_plan(shape: tuple[int, ...], kx: int, ky: int, compute_itemsize: int):
    """(packed sizes without the per-call fields, grid, shared bytes) of ``nd_sep2d`` for ``kx``
    taps along the last axis and ``ky`` along the second-last of an array of ``shape``, or None
    where it does not apply: fewer than 2 dims, a plane of 2^31 elements or more (the kernel's
    index math inside a plane is 32-bit), or a tile that passes the static shared-memory limit
    or a filter longer than ``SEP_MAX_TAPS`` (then the 1-d passes run).

    The packed sizes returned are (planes, H, W, kx, ky, tiles_x); :func:`sep2d_launcher` completes
    them with the origins, modes and pass order."""
    if len(shape) < 2:
        return None
    H, W = shape[-2], shape[-1]
    if H * W >= 2 ** 31 or max(kx, ky) > SEP_MAX_TAPS:
        return None
    py, px = SEP_TY + ky - 1, SEP_TX + kx - 1
    mid = max((py + 1) * SEP_TX, SEP_TY * px)  # the larger of the two pass orders' buffers
    smem = (kx + ky + 3 + (py + 1) * px + mid) * compute_itemsize
    if smem > SMEM_LIMIT:
        return None
    planes = math.prod(shape[:-2])
    tiles_x = math.ceil(W / SEP_TX)
    grid = (tiles_x * math.ceil(H / SEP_TY), max(1, min(planes, GRID_YZ_MAX)))
    return (planes, H, W, kx, ky, tiles_x), grid, smem


def sep2d_launcher(shape: tuple[int, ...], in_dtype: str, out_dtype: str, weights: np.ndarray,
                   kx: int, ky: int, lx: int, ly: int, mode_x: int, mode_y: int, x_first: bool):
    """``launch(src, dst)``: dst = two 1-d correlations of src (``shape``, ``in_dtype``) fused in
    one pass: along the last axis with the first ``kx`` of ``weights`` (window starting ``lx``
    before each output, boundary ``mode_x``) and along the second-last with the next ``ky``
    (``ly``, ``mode_y``), the last-axis pass first where ``x_first``.  ``weights`` (compute
    dtype): the kx + ky taps, cval, then the divisors of the last-axis and of the
    second-last-axis pass.  The caller checked :func:`sep2d_plan`."""
    compute = weights.dtype.name
    plan = sep2d_plan(shape, kx, ky, weights.dtype.itemsize)
    if plan is None or weights.size != kx + ky + 3:
        raise ValueError("nd_sep2d has no plan for this array and these filters")
    (planes, H, W, _, _, tiles_x), grid, smem = plan
    fn = jit.get_function(nd_module(in_dtype, out_dtype, compute), "nd_sep2d",
                          f"{in_dtype}:{out_dtype}:{compute}")
    if math.prod(shape) == 0:
        return _no_launch
    prm = np.array([planes, H, W, kx, ky, lx, ly, mode_x, mode_y, int(bool(x_first)), tiles_x],
                   np.int64)
    w_dev, prm_dev = device_copy(weights), device_copy(prm)

    def launch(src, dst) -> None:
        fn(grid, (32, 8), (src, w_dev, dst, prm_dev), shared_mem=smem)

    return launch


# --------------------------------------------------------------------------- the row walk
# nd_plane (nd_plane.cu) on the row walk of plane_walk.cuh, whose boundary codes (boundary.cuh)
# are the signal API's plus nearest and mirror.  Measured on an H100
# (benchmarks/notes/ndimage.md, "Session 14"): the staged kernels above reach about a third of the
# copy rate on a 4096^2 float32 image (nd_dense_tile k=3 0.136 ms, nd_sep2d uniform 5 0.139 ms);
# the walk, as the signal API's filter_plane, 0.067 ms for a 3x3.
WALK_BOUNDARY = {CONSTANT: 0, WRAP: 1, REFLECT: 2, NEAREST: 3, MIRROR: 4}
# Where the walk loses (same H100 run, bench_ndimage.py, ms): filters with a depth extent (3-d
# correlate 3^3 0.400 against nd_dense_tile's 0.324, 7^3 2.89 against 1.50, with a first version
# that walked the KD planes of each output chunk again: those stay on nd_dense_tile), and
# separable pairs with more than 3 taps down the columns (a chunk of
# RY = 4 output rows walks RY + KH - 1 input rows: gaussian sigma 1, 9 taps, 0.284 against
# nd_sep2d's 0.25; uniform 5 0.167 against 0.139; uniform 15 0.575 against 0.180), while sobel
# (3 x 3) takes 0.094 ms.
WALK_SEP_MAX_ROWS = 3
PLANE_WARPS = KERNEL_CONSTANTS["FP_WARPS"]
PLANE_TW = KERNEL_CONSTANTS["FP_TW"]
PLANE_ROWS = PLANE_WARPS * KERNEL_CONSTANTS["FP_CHUNKS"]  # times RY: output rows per block


def address(a) -> int:
    """Device address of ``a``'s first element (a NumPy array's host address on the CPU model of
    the tests)."""
    data = getattr(a, "data", None)
    ptr = getattr(data, "ptr", None)
    return int(ptr) if ptr is not None else int(a.__array_interface__["data"][0])


def plane_plan(stack: tuple[int, int, int], kernel2: tuple[int, int], separable: bool,
               dtype: str):
    """(KWB, shared bytes without the store buffer, store-buffer bytes) of ``nd_plane`` for a
    ``stack`` = (B, H, W) of planes of ``dtype`` filtered by ``kernel2`` = (KH, KW) taps (separable:
    KW taps along the last axis, KH along the second-last), or None where it does not apply: a
    dtype other than float32/float64, a filter wider than the largest width bucket or, separable,
    more than ``WALK_SEP_MAX_ROWS`` taps down the columns (slower than nd_sep2d), single-row
    planes (the staged kernels keep their full-width rows there), 2^31 elements or more per
    plane or planes past the grid, or taps past the static shared-memory limit."""
    if dtype not in ND_PLANE:
        return None
    itemsize = np.dtype(dtype).itemsize
    B, H, W = stack
    kh, kw = kernel2
    kwb = plane_width(kw)
    if (kwb is None or H < 2 or H * W >= 2 ** 31 or B >= 2 ** 31
            or (separable and kh > WALK_SEP_MAX_ROWS)):
        return None
    staged = kwb + kh if separable else kh * kwb
    taps = 4 * math.ceil(staged / 4) * itemsize
    buffer = PLANE_WARPS * plane_rows_per_thread(itemsize) * PLANE_TW * itemsize
    if taps + buffer > SMEM_LIMIT:
        return None
    return kwb, taps, buffer


def plane_launcher(dtype: str, weights: np.ndarray, stack: tuple[int, int, int],
                   kernel2: tuple[int, int], left2: tuple[int, int], mode: int, separable: bool):
    """``launch(src, dst)``: dst = src filtered on the row walk, both C-contiguous (B, H, W)
    stacks of planes (``stack``) of the float ``dtype``, ``weights`` in that dtype.  Dense: the
    KH x KW taps, cval, the divisor; separable: KW taps along the last axis, KH along the
    second-last, cval, their two divisors (the last-axis pass first).  The window of each output
    starts ``left2`` before it along (H, W).  The caller checked :func:`plane_plan`.

    Whether the walk reads and writes 16-byte vectors depends on the arrays' addresses, so each
    launch looks at them; the packed sizes of each of the (at most four) cases are made once."""
    item = weights.dtype.itemsize
    plan = plane_plan(stack, kernel2, separable, dtype)
    if plan is None or dtype != weights.dtype.name:
        raise ValueError("nd_plane has no plan for this array and filter")
    kwb, taps, buffer = plan
    B, H, W = stack
    ph, pw = left2
    d = -pw % 4  # strips start 4-aligned in the input
    tiles_w = math.ceil((W + d) / PLANE_TW)
    bands = math.ceil(H / (PLANE_ROWS * plane_rows_per_thread(item)))
    kh, kw = kernel2
    kf = kh if not separable and kh == kw and kh in PLANE_SQUARES else 0
    fn = jit.get_function(ND_PLANE[dtype], "nd_plane", dtype, (kwb, kf, int(separable)))
    if B * H * W == 0:
        return _no_launch
    w_dev = device_copy(weights)
    grid, block = (tiles_w * bands, min(B, GRID_YZ_MAX)), (32 * PLANE_WARPS,)
    by_vectors: dict = {}  # (vec_in, vec_out) -> (device packed sizes, shared bytes)

    def launch(src, dst) -> None:
        vec_in = W % 4 == 0 and address(src) % 16 == 0
        vec_out = d == 0 and W % 4 == 0 and address(dst) % 16 == 0
        args = by_vectors.get((vec_in, vec_out))
        if args is None:
            prm = np.array([B, H, W, kh, kw, ph, pw, WALK_BOUNDARY[mode], tiles_w, d,
                            int(vec_in), int(vec_out)], np.int64)
            args = by_vectors[vec_in, vec_out] = (device_copy(prm),
                                                  taps + (0 if vec_out else buffer))
        fn(grid, block, (src, w_dev, dst, args[0]), shared_mem=args[1])

    return launch
