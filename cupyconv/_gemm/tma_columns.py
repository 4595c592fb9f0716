"""Few-channel channels-last convolutions through an explicit column matrix on the TMA GEMM.

A layer whose input channels per pixel are not whole 16-byte chunks (the 3-channel stems of
ImageNet networks, one-channel signals and images) wastes the implicit loops: they stage each
pixel's channels to a chunk (ResNet-50's 7x7 stem reads 392 columns for 147 real ones), and
backward-data's phases produce 3 output channels on 64-column tiles.  Here every pass goes
through the column matrix col[P, (taps, C)] of the output pixels P, written once by
``im2col_rows`` into rows padded to a multiple of 8 elements (16-byte rows that TMA reads), and
one product on the TMA-fed Hopper kernel:

- forward: y[P, K] = col @ wp^T, wp the weight as a zero-padded [K, width] matrix;
- backward-data: dcol[P, width] = dy @ wp in fp32 (the kernel's unrounded sums), then
  ``col2im_rows`` adds each input element's windows in tap order and rounds once;
- backward-weight: dwp[K, width] = dy^T @ col with split-K, its real columns copied to dw.

Forward and backward-data run in batch chunks whose column matrix stays under CHUNK_BYTES;
backward-weight sums over the whole batch, so its matrix must fit in WEIGHT_COLUMN_BYTES (else
the implicit loop).  NaN and inf behave as on the implicit loops: padding is read as zeros in
the forward and backward-weight (a zero times an infinite weight or gradient is NaN there too),
and backward-data reads only the columns of real taps at real pixels.
"""

from __future__ import annotations

import math

import numpy as np

from cupyconv._core import jit
from cupyconv._core.copy import copy_into
from cupyconv._core.dtypes import itemsize
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import COL2IM, IM2COL, MATH_WGMMA
from cupyconv._core.launch import (element_strides, int64s, ints, launch_grid, sm_count,
                                   spatial_args)
from cupyconv._core.program import scratch, zero_fill
from cupyconv._gemm.plans import LAUNCH_S, MATH_RATE
from cupyconv._gemm.tma import TMA_DTYPES, gemm_tile, prepare_gemm_tma, runs_here, tma_enabled
from cupyconv._gemm.tma_conv import prepare_weight_gemm

# Most elements per column-matrix row (im2col.cu's IM2COL_ROWS_MAX: its shared column table).
MAX_WIDTH = 1024
# Forward and backward-data: batch chunks whose column matrix (fp32 for backward-data) takes at
# most this many bytes; backward-weight: the one 16-bit matrix of the whole batch, at most this.
CHUNK_BYTES = 256 << 20
WEIGHT_COLUMN_BYTES = 1 << 30
# im2col_rows' grid: blocks per multiprocessor (8 of 256 threads fill an H200's 2048).
COLUMN_BLOCKS_PER_SM = 8
# Rates of the route's kernels (H200, bf16, batch 32, the three stems of ResNet-50,
# EfficientNet-B0 and ConvNeXt-T; benchmarks/notes/gemm.md, session 32): im2col_rows writes
# columns at about 0.9 TB/s (its 2-byte gathers from x bound it), the TMA GEMM moves its
# operands and result at about 1.6 TB/s (one to three k slices per tile: the epilogue's stores
# bound it); col2im_rows read the fp32 columns at about 1.9 TB/s.
COLUMN_WRITE_BANDWIDTH = 0.9e12
COLUMN_GEMM_BANDWIDTH = 1.6e12


def column_width(geom: ConvGeometry) -> int:
    """Elements per column-matrix row: the taps x C real columns, rounded up to 8 (16 bytes)."""
    return -(-math.prod(geom.kernel) * geom.in_channels // 8) * 8


def applies(geom: ConvGeometry, device_id: int) -> bool:
    """Whether the column route takes ``geom`` on ``device_id`` (the arrays are checked at the
    launch): Hopper with cuda-bindings and ``CUPYCONV_TMA`` not 0, float16 / bfloat16, one
    group, channels-last, input channels not a multiple of 8 (whole chunks: the implicit and
    im2col-mode loops read those without waste), rows of at most MAX_WIDTH elements."""
    return (geom.dtype in TMA_DTYPES and geom.groups == 1 and geom.channels_last
            and geom.in_channels % 8 != 0 and column_width(geom) <= MAX_WIDTH
            and geom.batch > 0 and math.prod(geom.out_spatial) > 0
            and tma_enabled() and runs_here(device_id))


def seconds(geom: ConvGeometry) -> float:
    """Estimated time of the forward on the column route: the column matrix written at
    COLUMN_WRITE_BANDWIDTH, then read with y written at COLUMN_GEMM_BANDWIDTH, or the products
    at the Hopper loop's rate where that is longer, and the launches (the weight's padded copy
    among them).  Measured against it on the three stems: 254, 87 and 50-66 us for 260, 77 and
    45 estimated."""
    item = itemsize(geom.dtype)
    pixels = geom.batch * math.prod(geom.out_spatial)
    col_bytes = pixels * column_width(geom) * item
    product = max((col_bytes + pixels * geom.out_channels * item) / COLUMN_GEMM_BANDWIDTH,
                  2 * pixels * column_width(geom) * geom.out_channels / MATH_RATE[MATH_WGMMA])
    return col_bytes / COLUMN_WRITE_BANDWIDTH + product + 2 * LAUNCH_S


def _chunk(geom: ConvGeometry, row_bytes: int) -> int:
    """Images per chunk: as many as keep the column matrix within CHUNK_BYTES (at least one)."""
    per_image = math.prod(geom.out_spatial) * row_bytes
    return max(1, min(geom.batch, CHUNK_BYTES // per_image))


def _pad_weight(w, wp) -> None:
    """w (K, *kernel, C) into ``wp``, the zero-padded [K, width] matrix of the column order (a
    copy per call: weights change in place between calls)."""
    zero_fill(wp)
    copy_into(w, _real_columns(wp, w.shape))


def _real_columns(matrix, weight_shape):
    """The [K, width] ``matrix``'s first taps x C columns as a (K, *kernel, C) view."""
    import cupy

    item = matrix.itemsize
    inner = [item]
    for extent in reversed(weight_shape[2:]):
        inner.insert(0, inner[0] * extent)
    strides = (matrix.strides[0], *inner)
    return cupy.ndarray(weight_shape, matrix.dtype, matrix.data, strides=strides)


def _write_columns(geom: ConvGeometry, x, col, batch: int) -> None:
    """im2col_rows: the column matrix of ``batch`` images of ``x`` (any strides) into ``col``
    (C-contiguous rows of column_width elements)."""

    fn = jit.get_function(IM2COL, "im2col_rows", geom.dtype)
    args = (x, col, *ints((batch, geom.in_channels)), *spatial_args(geom),
            *int64s(element_strides(x, True)), *ints((column_width(geom),)))
    # (at most COLUMN_BLOCKS_PER_SM blocks per multiprocessor, each looping over many 16-byte
    # pieces: every block first builds the shared column table, which one piece per thread
    # would pay again and again)
    (blocks,), block = launch_grid(col.size // (16 // col.itemsize))
    fn((min(blocks, COLUMN_BLOCKS_PER_SM * sm_count(col.data.device_id)),), block, args)


def _images(a, first: int, count: int, row: int):
    """Images first .. first + count of the C-contiguous channels-last ``a`` as a matrix of
    ``row`` elements per pixel (a view)."""
    return a[first:first + count].reshape(-1, row)


def forward(geom: ConvGeometry, x, w, y) -> bool:
    """y = conv(x, w) (no epilogue options: the caller checked) on the column route where it
    applies (:func:`applies`; y C-contiguous, the TMA GEMM's tiles and alignment); returns
    whether it ran."""
    if not applies(geom, y.data.device_id) or not y.flags.c_contiguous:
        return False
    width, k = column_width(geom), geom.out_channels
    chunk = _chunk(geom, width * itemsize(geom.dtype))
    pixels = chunk * math.prod(geom.out_spatial)
    col = scratch((pixels, width), geom.dtype)
    wp = scratch((k, width), geom.dtype)
    tile = gemm_tile(col, wp.T, _images(y, 0, chunk, k))
    if tile is None:
        return False
    _pad_weight(w, wp)
    for first in range(0, geom.batch, chunk):
        count = min(chunk, geom.batch - first)
        _write_columns(geom, x[first:first + count], col, count)
        rows = count * math.prod(geom.out_spatial)
        prepare_gemm_tma(col[:rows], wp.T, _images(y, first, count, k), tile=tile)[0]()
    return True


def backward_data(geom: ConvGeometry, dy, w, dx) -> bool:
    """dx = the gradient of conv(x, w) with respect to x (no bias: the caller checked) on the
    column route where it applies (dy and dx C-contiguous, dy's rows whole 16-byte chunks);
    returns whether it ran."""
    if (not applies(geom, dx.data.device_id) or not dx.flags.c_contiguous
            or not dy.flags.c_contiguous):
        return False
    width, k = column_width(geom), geom.out_channels
    chunk = _chunk(geom, width * 4)
    pixels = chunk * math.prod(geom.out_spatial)
    dcol = scratch((pixels, width), "float32")
    wp = scratch((k, width), geom.dtype)
    tile = gemm_tile(_images(dy, 0, chunk, k), wp, dcol)
    if tile is None:
        return False
    _pad_weight(w, wp)
    fn = jit.get_function(COL2IM, "col2im_rows", geom.dtype)
    g3 = geom.as_3d()
    periods = [s // math.gcd(s, d) for s, d in zip(g3["stride"], g3["dilation"])]
    for first in range(0, geom.batch, chunk):
        count = min(chunk, geom.batch - first)
        rows = count * math.prod(geom.out_spatial)
        prepare_gemm_tma(_images(dy, first, count, k), wp, dcol[:rows], tile=tile)[0]()
        out = dx[first:first + count]
        grid, block = launch_grid(out.size // geom.in_channels)  # (a thread per pixel)
        fn(grid, block, (dcol, out, *ints((count, geom.in_channels)), *spatial_args(geom),
                         *ints(periods), np.int64(width)))
    return True


def backward_weight(geom: ConvGeometry, x, dy, dw) -> bool:
    """dw = the gradient of conv(x, w) with respect to w on the column route where it applies
    (dy C-contiguous with rows of whole 16-byte chunks, dw C-contiguous, the batch's column
    matrix within WEIGHT_COLUMN_BYTES, enough split-K work for the TMA GEMM); returns whether
    it ran."""
    if (not applies(geom, dw.data.device_id) or not dy.flags.c_contiguous
            or not dw.flags.c_contiguous):
        return False
    width, k = column_width(geom), geom.out_channels
    pixels = geom.batch * math.prod(geom.out_spatial)
    if pixels * width * itemsize(geom.dtype) > WEIGHT_COLUMN_BYTES:
        return False
    col = scratch((pixels, width), geom.dtype)
    dwp = scratch((k, width), geom.dtype)
    launch = prepare_weight_gemm(dy.reshape(pixels, k).T, col, dwp)
    if launch is None:
        return False
    _write_columns(geom, x, col, geom.batch)
    launch()
    copy_into(_real_columns(dwp, dw.shape), dw)
    return True
