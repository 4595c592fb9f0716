"""Launchers of the im2col and col2im kernels (``kernel_src/gemm/im2col.cu``, ``col2im.cu``).

im2col writes the explicit GEMM operand of the ``im2col_gemm`` forward algorithm (and of the
public :func:`cupyconv.im2col`); col2im is its adjoint.
"""

from __future__ import annotations

from cupyconv._core import jit
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import COL2IM, IM2COL
from cupyconv._core.launch import element_strides, int64s, ints, launch_grid, spatial_args


def run_im2col(geom: ConvGeometry, x, col, groups: int = 1) -> None:
    """Write the im2col matrix of ``x`` into ``col`` (shape ``geom.col_shape``, C-contiguous).

    With ``groups > 1`` (channels-last only) the columns are ordered ``(g, *kernel, c)``, so each
    group's block of columns is one contiguous GEMM operand.
    """
    fn = jit.get_function(IM2COL, "im2col", geom.dtype)
    cl = geom.channels_last
    args = [x, col, *ints((geom.batch, geom.in_channels, groups)), *spatial_args(geom),
            *int64s(element_strides(x, cl)), *ints((cl,))]
    grid, block = launch_grid(col.size)
    fn(grid, block, tuple(args))


def run_col2im(geom: ConvGeometry, col, x) -> None:
    """x = the sum of every column of ``col`` (C-contiguous, ``geom.col_shape``) onto the input
    element it came from; ``x`` C-contiguous of ``geom.input_shape``.  One thread gathers each
    element of x in a fixed order (no atomics)."""
    fn = jit.get_function(COL2IM, "col2im", geom.dtype)
    args = [col, x, *ints((geom.batch, geom.in_channels)), *spatial_args(geom),
            *ints((geom.channels_last,))]
    grid, block = launch_grid(x.size)
    fn(grid, block, tuple(args))
