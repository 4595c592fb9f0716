"""Launchers of the tiled GEMM kernels (``gemm.cu``, ``conv_fprop.cu``) and their tile choice.

A :class:`MatrixView` describes one dense operand for the kernel's dense loader: element strides
along its rows and along k, and the two-level batch strides (outer, inner) of blockIdx.z split as
(z / G2, z % G2).  The B operand is described by its transpose (rows = the N columns).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from . import jit
from ._geometry import ConvGeometry
from ._kernels import GEMM_TILES, conv_fprop_module, gemm_module
from ._launch import element_strides, int64s, ints, spatial_args

# Relative speed of a full tile of each shape (bigger tiles reuse more per load); only the
# comparison between tiles matters.  Measured order on H200: 128x128 > 128x64 > 64x64.
_TILE_SPEED = {(128, 128): 1.0, (128, 64): 0.85, (64, 64): 0.65}


@dataclass(frozen=True)
class MatrixView:
    """Element (row, k) of batch (zo, zi) at ``array[zo*so + zi*si + row*rs + k*ks]``."""

    array: object
    rs: int
    ks: int
    so: int = 0
    si: int = 0

    @property
    def kcontig(self) -> bool:
        return self.ks == 1

    def vectorizable(self, rows: int, k: int) -> bool:
        """Can the loader move 4-vectors: unit stride along the walked dim, every other stride,
        the base address and that dim's extent multiples of 4 elements."""
        other, extent = (self.rs, k) if self.kcontig else (self.ks, rows)
        if not (self.kcontig or self.rs == 1):
            return False
        aligned = self.array.data.ptr % (4 * self.array.itemsize) == 0
        return aligned and extent % 4 == 0 and all(s % 4 == 0 for s in (other, self.so, self.si))


@dataclass(frozen=True)
class OutMap:
    """Row m of the result at (m // L) * outer + (m % L) * inner, column n at n * col."""

    L: int
    outer: int
    inner: int
    col: int


def out_vectorizable(c, out: OutMap, batch_strides=()) -> bool:
    """Can the epilogue store 4-vectors: 4 adjacent columns (col == 1) or rows (inner == 1,
    L % 4 == 0) with every other stride, the batch strides and the base 4-element aligned."""
    if out.col == 1:
        others = (out.outer, out.inner)
    elif out.inner == 1:
        others = (out.L, out.outer, out.col)
    else:
        return False
    aligned = c.data.ptr % (4 * c.itemsize) == 0
    return aligned and all(s % 4 == 0 for s in others + tuple(batch_strides))


@lru_cache(maxsize=None)
def _sm_count(device_id: int) -> int:
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(device_id)["multiProcessorCount"]


def _tile_score(tile, m: int, n: int, batch: int, slots: int) -> float:
    """Estimated fraction of peak for one tile: waste x wave fill x tile speed.

    Waste: the share of each tile that falls inside the matrix.  Wave fill: how full the waves of
    blocks are, with ``slots`` blocks resident at once (two 256-thread blocks per multiprocessor).
    """
    bm, bn = tile[:2]
    tm, tn = math.ceil(m / bm), math.ceil(n / bn)
    blocks = tm * tn * batch
    waste = (m * n) / (tm * bm * tn * bn)
    fill = blocks / (math.ceil(blocks / slots) * slots)
    return waste * fill * _TILE_SPEED.get((bm, bn), 0.5)


def choose_tile(dtype: str, m: int, n: int, batch: int, device_id: int = 0) -> tuple[int, ...]:
    """The tile of ``dtype`` with the best :func:`_tile_score` for an m x n x batch GEMM."""
    slots = 2 * _sm_count(device_id)
    return max(GEMM_TILES[dtype], key=lambda t: _tile_score(t, m, n, batch, slots))


def tile_efficiency(dtype: str, m: int, n: int, batch: int, device_id: int = 0) -> float:
    """Score in (0, 1] of the tile :func:`choose_tile` picks: GEMM cost hints divide by it."""
    slots = 2 * _sm_count(device_id)
    return _tile_score(choose_tile(dtype, m, n, batch, device_id), m, n, batch, slots)


def _grid(tile, m, n, batch):
    return (math.ceil(m / tile[0]), math.ceil(n / tile[1]), batch), (tile[0] // tile[3] * (tile[1] // tile[4]),)


def run_gemm(dtype: str, a: MatrixView, b: MatrixView, c, m: int, n: int, k: int, *, batch: int = 1,
             g2: int = 1, c_so: int = 0, c_si: int = 0, out: OutMap, bias=None, bias_si: int = 0,
             tile=None) -> None:
    """C[z] (m x n, placed by ``out``) = A[z] (m x k) @ B[z] (k x n) (+ bias[n]) for z < batch."""
    if not (a.kcontig or a.rs == 1) or not (b.kcontig or b.rs == 1):
        raise ValueError("GEMM operands need a unit stride along rows or k")
    variant = (int(a.kcontig), int(b.kcontig))
    dev = c.data.device_id
    tile = tile or choose_tile(dtype, m, n, batch, dev)
    fn = jit.get_function(gemm_module(dtype, tile, variant), "gemm", dtype, variant)
    grid, block = _grid(tile, m, n, batch)
    args = (a.array, b.array, c, bias if bias is not None else c,
            *ints((bias is not None, m, n, k, out_vectorizable(c, out, (c_so, c_si)))),
            *int64s((a.rs, a.ks, b.rs, b.ks)),
            *ints((a.vectorizable(m, k), b.vectorizable(n, k), g2)),
            *int64s((a.so, a.si, b.so, b.si, c_so, c_si, bias_si, out.L, out.outer, out.inner,
                     out.col)))
    with c.device:
        fn(grid, block, args)


def fprop_weight(geom: ConvGeometry, w):
    """Weights as the implicit kernel reads them: (K, taps, Cg), channels fastest, C-contiguous."""
    import cupy

    if geom.channels_last:
        return cupy.ascontiguousarray(w)
    k, cg = w.shape[:2]
    return cupy.ascontiguousarray(w.reshape(k, cg, -1).transpose(0, 2, 1))


def _x_vectorizable(geom: ConvGeometry, x, strides) -> bool:
    """4 consecutive channels of x are one aligned vector (channels-last, unit channel stride)."""
    cg = geom.in_channels // geom.groups
    return (geom.channels_last and strides[1] == 1 and cg % 4 == 0
            and x.data.ptr % (4 * x.itemsize) == 0
            and all(s % 4 == 0 for i, s in enumerate(strides) if i != 1))


def run_conv_fprop(geom: ConvGeometry, x, w, bias, y, tile=None) -> None:
    """Implicit-GEMM forward convolution (no im2col buffer)."""
    g = geom.gemm_forward
    dev = y.data.device_id
    tile = tile or choose_tile(geom.dtype, g.m, g.n, g.batch, dev)
    variant = (int(geom.channels_last),)
    fn = jit.get_function(conv_fprop_module(geom.dtype, tile, variant), "conv_fprop", geom.dtype,
                          variant)
    wt = fprop_weight(geom, w)
    xs = element_strides(x, geom.channels_last)
    grid, block = _grid(tile, g.m, g.n, g.batch)
    # the kernel's output map and per-group offset, for the vector-store check
    pixels, k = math.prod(geom.out_spatial), geom.out_channels
    out, group_stride = ((OutMap(g.m, 0, k, 1), g.n) if geom.channels_last
                         else (OutMap(pixels, k * pixels, 1, pixels), g.n * pixels))
    args = (x, wt, y, bias if bias is not None else y,
            *ints((bias is not None, geom.batch, geom.out_channels,
                   MatrixView(wt, rs=g.k, ks=1).vectorizable(g.n, g.k),
                   _x_vectorizable(geom, x, xs), out_vectorizable(y, out, (group_stride,)),
                   geom.in_channels // geom.groups)),
            *spatial_args(geom), *int64s(xs))
    with y.device:
        fn(grid, block, args)
