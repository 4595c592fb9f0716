"""Strided copies through the package's own kernel (``kernel_src/common/copy.cu``).

The launch paths move data between layouts (weights to the implicit kernel's (K, taps, C) order,
channels-first tensors through channels-last views, a stride phase into its rows of dx).  Done
with CuPy's elementwise copies these cost ~10 us of host time each and are invisible to a
prepared call's recording; this kernel is one recorded launch.
"""

from __future__ import annotations

import math

import numpy as np

from cupyconv._core import jit
from cupyconv._core.kernels import KERNEL_CONSTANTS, STRIDED_COPY
from cupyconv._core.launch import int64s, ints, launch_grid
from cupyconv._core.program import scratch

COPY_DIMS = KERNEL_CONSTANTS["CC_COPY_DIMS"]


def _merged(shape, src_strides, dst_strides):
    """The copy's dims with extent-1 dims dropped and neighbours that are one run in both arrays
    merged (so most copies fit COPY_DIMS dims)."""
    dims = [(n, s, d) for n, s, d in zip(shape, src_strides, dst_strides) if n != 1]
    out: list = []
    for n, s, d in dims:
        if out and out[-1][1] == n * s and out[-1][2] == n * d:
            pn, _, _ = out.pop()
            out.append((pn * n, s, d))
        else:
            out.append((n, s, d))
    return out


def copy_into(src, dst) -> None:
    """``dst[...] = src`` for arrays of one shape and dtype on the current device (any strides;
    ``dst`` must not overlap ``src``)."""
    if src.shape != dst.shape or src.dtype != dst.dtype:
        raise ValueError(f"copy_into needs equal shapes and dtypes, got {src.shape} {src.dtype} "
                         f"and {dst.shape} {dst.dtype}")
    total = math.prod(src.shape)
    if total == 0:
        return
    item = src.itemsize
    dims = _merged(src.shape, [s // item for s in src.strides], [s // item for s in dst.strides])
    if len(dims) > COPY_DIMS:
        raise ValueError(f"copy_into handles at most {COPY_DIMS} non-mergeable dims, got "
                         f"{len(dims)}")
    pair = _transposed_pair(dims)
    if pair is not None:
        _transpose_copy(src, dst, dims, *pair)
        return
    dims = [(1, 0, 0)] * (COPY_DIMS - len(dims)) + dims
    ext, ss, ds = zip(*dims)
    # (the kernel divides by multiplication only where every index fits 31 bits)
    muls, shifts = zip(*(magic_divisor(e) if total < 2 ** 31 else (0, 0) for e in ext))
    fn = jit.get_function(STRIDED_COPY, "strided_copy", src.dtype.name)
    grid, block = launch_grid(total)
    fn(grid, block, (src, dst, *int64s((total,) + ext + ss + ds),
                     *(np.uint32(m) for m in muls), *ints(shifts)))


def magic_divisor(d: int) -> tuple[int, int]:
    """``(mul, shr)`` with ``n // d == (n * mul >> 32) >> shr`` for every 0 <= n < 2^31 (the
    strided copy's division by an extent; ``mul`` 0 stands for d == 1).  With 2^(l-1) < d <= 2^l,
    mul = ceil(2^(31+l) / d) < 2^32 and n * mul / 2^(31+l) exceeds n / d by less than
    n / 2^(31+l) < 1 / d, too little to reach the next integer."""
    if not 1 <= d < 2 ** 31:
        raise ValueError(f"magic_divisor needs 1 <= d < 2^31, got {d}")
    if d == 1:
        return 0, 0
    ceil_log2 = (d - 1).bit_length()
    return -(-(1 << (31 + ceil_log2)) // d), ceil_log2 - 1


# Extent both transposed dims need for the tiled kernel: below it a 32 x 32 tile is mostly idle
# and the element-wise kernel does as well (a channels-first copy of 3-channel images).
_TRANSPOSE_MIN_EXTENT = 16
_TRANSPOSE_TILE = 32  # transpose_copy's CC_TT


def _transposed_pair(dims):
    """``(a, b)``: the indices of the dims along which src (a) and dst (b) are contiguous when they
    differ and both are long enough for :func:`_transpose_copy` (a layout change such as
    channels-first <-> channels-last), else None.  (copy_into allows COPY_DIMS = 6 dims, so
    at most four others index the tiles.)"""
    a = next((i for i, (_, s, _) in enumerate(dims) if s == 1), None)
    b = next((i for i, (_, _, d) in enumerate(dims) if d == 1), None)
    if a is None or b is None or a == b:
        return None
    if min(dims[a][0], dims[b][0]) < _TRANSPOSE_MIN_EXTENT:
        return None
    return a, b


def _transpose_copy(src, dst, dims, a: int, b: int) -> None:
    """The copy ``dims`` (merged: extent, src stride, dst stride) through 32 x 32 shared-memory
    tiles of dims a (src-contiguous) and b (dst-contiguous); the other dims index the tiles."""
    outer = [d for i, d in enumerate(dims) if i not in (a, b)]
    outer = [(1, 0, 0)] * (4 - len(outer)) + outer
    ext, ss, ds = zip(*outer)
    tiles = (-(-dims[a][0] // _TRANSPOSE_TILE) * -(-dims[b][0] // _TRANSPOSE_TILE)
             * math.prod(ext))
    fn = jit.get_function(STRIDED_COPY, "transpose_copy", src.dtype.name)
    fn((max(1, min(tiles, 1 << 20)),), (_TRANSPOSE_TILE, 8),
       (src, dst, *int64s((dims[a][0], dims[b][0], dims[b][1], dims[a][2]) + ext + ss + ds)))


# Widest unfolded row (taps x channels, padded) unfold_width takes: its per-column table lives in
# 8 bytes of shared memory per column.
UNFOLD_MAX_WIDTH = 4096


def unfold_width(x, strides, spatial, out_width: int, kernel_width: int, stride: int,
                 dilation: int, pad: int, width: int):
    """The width-unfolded copy of activation ``x`` (``kernel_src/common/copy.cu``
    ``unfold_width``): C-contiguous (N, *spatial[:-1], out_width, width) whose element
    [..., o, j * C + c] is x at column o * stride + j * dilation - pad, channel c (zero outside x
    and for j >= kernel_width).  ``strides``: x's (n, c, d, h, w) element strides
    (``launch.element_strides``), ``spatial`` its (D, H, W) padded in front to three dims."""
    batch, (d, h, w) = x.shape[0], spatial
    out = scratch((batch,) + (d, h)[3 - (x.ndim - 2):] + (out_width, width), x.dtype)
    rows, cols = batch * d * h, out_width * width
    if out.size == 0 or x.size == 0:
        return out
    channels = x.size // (batch * d * h * w)
    if cols >= 2 ** 30:  # (with a thread's step added, still below 2^31)
        raise ValueError(f"unfold_width: a row of {cols} elements does not fit 30 bits")
    if width > UNFOLD_MAX_WIDTH:
        raise ValueError(f"unfold_width: width {width} exceeds {UNFOLD_MAX_WIDTH}")
    # about 8 columns per thread: the row's decode and the thread's start amortize over them
    grid_y = min(65535, -(-cols // (256 * 8)))
    fn = jit.get_function(STRIDED_COPY, "unfold_width", x.dtype.name)
    fn((min(rows, 1 << 20), grid_y), (256,),
       (x, out, np.int64(rows), *ints((d, h, w, channels, out_width, kernel_width, stride,
                                       dilation, pad, width)),
        *int64s((strides[0], strides[2], strides[3], strides[4], strides[1]))),
       shared_mem=2 * width * 4)
    return out


def contiguous(a):
    """``a`` itself when C-contiguous, else a C-contiguous copy in a :func:`scratch` array."""
    if a.flags.c_contiguous:
        return a
    out = scratch(a.shape, a.dtype)
    copy_into(a, out)
    return out


def contiguous_vector(v):
    """``v`` (a bias, or None) as the kernels read it: one value per channel, unit stride from its
    base pointer.  Strided and reversed views (``b[::2]``, ``b[::-1]``) are copied, K elements."""
    return v if v is None else contiguous(v)
