"""What the tiled GEMM kernels are given: views of their operands, the map of their result's
rows, and the implicit kernel's problem and scalar arguments.

A :class:`MatrixView` describes one dense operand for the kernel's dense loader: element strides
along its rows and along k, and the two-level batch strides (outer, inner) of blockIdx.z split as
(z / G2, z % G2).  The B operand is described by its transpose (rows = the N columns).  An
:class:`OutMap` places the result's rows and columns (out_map.cuh).  An :class:`ImplicitConv` is
a forward convolution as the implicit kernel sees it; :func:`fprop_scalar_args` packs its
scalars for ``conv_fprop``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cupyconv._core.caches import memoized
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.launch import int64s, ints


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

    def vectorizable(self, rows: int, k: int, width: int = 4) -> bool:
        """Can the loader move ``width``-element vectors: unit stride along the walked dim, every
        other stride, the base address and that dim's extent multiples of ``width`` elements."""
        other, extent = (self.rs, k) if self.kcontig else (self.ks, rows)
        if not (self.kcontig or self.rs == 1):
            return False
        aligned = self.array.data.ptr % (width * self.array.itemsize) == 0
        return aligned and extent % width == 0 and all(s % width == 0
                                                       for s in (other, self.so, self.si))

    def vec_level(self, rows: int, k: int) -> int:
        """The loader's ``vec``: 2 where the contiguous dim also splits into aligned 16-byte
        chunks (the tensor-core loops' multistage copies: k-contiguous rows for mma.sync, either
        orientation for wgmma), 1 for 4-element vectors, 0 for elements."""
        if not self.vectorizable(rows, k):
            return 0
        chunk = max(4, 16 // self.array.itemsize)
        return 2 if self.vectorizable(rows, k, chunk) else 1


@dataclass(frozen=True)
class OutMap:
    """Row m of the result at (m // L) * outer + (m % L // R) * row + (m % L % R) * inner, column
    n at n * col (out_map.cuh): L rows per image in runs of R (R = 0: one run of L, as for every
    C-contiguous result; a run is an output row of a stride phase of backward-data, whose rows
    lie ``row`` apart in dx)."""

    L: int
    outer: int
    inner: int
    col: int
    R: int = 0
    row: int = 0

    @property
    def run(self) -> int:
        """Rows per run (the kernel's R)."""
        return self.R or self.L

    def kernel_args(self) -> tuple[int, ...]:
        return (self.L, self.outer, self.inner, self.col, self.run, self.row)


def out_vectorizable(c, out: OutMap, batch_strides=()) -> bool:
    """Can the epilogue store 4-vectors: 4 adjacent columns (col == 1) or rows (inner == 1,
    L % 4 == R % 4 == 0) with every other stride, the batch strides and the base 4-element
    aligned."""
    if out.col == 1:
        others = (out.outer, out.inner, out.row)
    elif out.inner == 1:
        others = (out.L, out.run, out.outer, out.row, out.col)
    else:
        return False
    aligned = c.data.ptr % (4 * c.itemsize) == 0
    return aligned and all(s % 4 == 0 for s in others + tuple(batch_strides))


@dataclass(frozen=True)
class ImplicitConv:
    """A forward convolution as the implicit kernel sees it: spatial dims padded in front to 3.

    Built from a :class:`ConvGeometry`, or directly by the backward-data pass, whose stride phases
    are forward convolutions of dy with unit stride and paddings no geometry would accept (the
    kernel predicates every tap, so any pad_lo works and pad_hi is implied by out_spatial).
    """

    dtype: str
    channels_last: bool
    batch: int
    in_channels: int
    out_channels: int
    groups: int
    spatial: tuple[int, int, int]
    out_spatial: tuple[int, int, int]
    kernel: tuple[int, int, int]
    stride: tuple[int, int, int]
    dilation: tuple[int, int, int]
    pad_lo: tuple[int, int, int]
    precision: str = "exact"
    # y's layout where it differs from x's (channels-first y from a channels-last staged x)
    out_channels_last: bool | None = None

    @property
    def y_channels_last(self) -> bool:
        return self.channels_last if self.out_channels_last is None else self.out_channels_last

    @classmethod
    def from_geometry(cls, geom: ConvGeometry) -> "ImplicitConv":
        g3 = geom.as_3d()
        return cls(geom.dtype, geom.channels_last, geom.batch, geom.in_channels, geom.out_channels,
                   geom.groups, g3["spatial"], g3["out_spatial"], g3["kernel"], g3["stride"],
                   g3["dilation"], g3["pad_lo"], geom.precision)

    @property
    def gemm(self) -> tuple[int, int, int, int]:
        """(M, N, K, batch) of the GEMM: pixels x out-channels-per-group x (taps, channels)."""
        return (self.batch * math.prod(self.out_spatial), self.out_channels // self.groups,
                self.in_channels // self.groups * math.prod(self.kernel), self.groups)


def x_vec_level(prob: ImplicitConv, x, strides) -> int:
    """The implicit loaders' ``vec`` for x: 1 where 4 consecutive channels are one aligned vector
    (channels-last, unit channel stride), 2 where 16-byte chunks of channels are too."""
    cg = prob.in_channels // prob.groups

    def fits(width):
        return (prob.channels_last and strides[1] == 1 and cg % width == 0
                and x.data.ptr % (width * x.itemsize) == 0
                and all(s % width == 0 for i, s in enumerate(strides) if i != 1))

    if not fits(4):
        return 0
    return 2 if fits(max(4, 16 // x.itemsize)) else 1


def fprop_out_map(prob: ImplicitConv, ys: tuple) -> OutMap | None:
    """The implicit kernel's output row map for an output ``y`` of element strides ``ys``
    (``element_strides``, in y's layout), or None where its rows cannot be mapped: runs of OW
    pixels whose (d, h) rows must lie a fixed stride apart.  C-contiguous outputs and the stride
    phases of 1-d and 2-d backward-data (every s-th row and column of dx) always can be; a 3-d
    phase strided in both d and h cannot.  Levels that are contiguous are folded away, so that
    C-contiguous outputs cost the epilogue no more divisions than they need."""
    m = prob.gemm[0]
    ysn, ysc, ysd, ysh, ysw = ys
    od, oh, ow = (1,) * (3 - len(prob.out_spatial)) + tuple(prob.out_spatial)
    pixels = od * oh * ow
    if oh == 1:
        run_stride = ysd
    elif od == 1 or ysd == oh * ysh:
        run_stride = ysh
    else:
        return None
    if od * oh == 1 or run_stride == ow * ysw:  # the runs are contiguous: one run per image
        if ysn == pixels * ysw:  # and so are the images: one run in all
            return OutMap(m, 0, ysw, ysc)
        return OutMap(pixels, ysn, ysw, ysc)
    return OutMap(pixels, ysn, ysw, ysc, ow, run_stride)


@memoized(4096)
def fprop_scalar_args(prob: ImplicitConv, xs: tuple, out: OutMap, splits: int,
                       flags: tuple) -> tuple:
    """conv_fprop's scalar arguments, built once per (problem, strides, splits, flags): repeated
    calls skip converting some 40 Python ints.  flags = (has_bias, has_z, act, w_vec, w_cf, x_vec,
    c_vec)."""
    has_bias, has_z, act, w_vec, w_cf, x_vec, c_vec = flags
    return (*ints((has_bias, has_z, act, prob.batch, prob.out_channels, w_vec, w_cf, x_vec,
                   prob.y_channels_last, c_vec, prob.in_channels // prob.groups)),
            *ints(prob.spatial + prob.out_spatial + prob.kernel + prob.stride + prob.dilation
                  + prob.pad_lo),
            *int64s(xs + out.kernel_args()), *ints((prob.groups, splits)))
