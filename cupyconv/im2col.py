"""Explicit im2col: the input view of a convolution written out as a matrix."""

from __future__ import annotations

from cupyconv import jit
from cupyconv._core.arrays import prepare_out, require_array, require_float_dtype
from cupyconv._core.launch import element_strides, int64s, ints, launch_grid, spatial_args
from cupyconv._core.geometry import ConvGeometry, check_tensor_size, normalize_layout, per_dim
from cupyconv._core.kernels import COL2IM, IM2COL

__all__ = ["im2col", "col2im"]


def im2col(x, kernel_size, *, stride=1, padding=0, dilation=1, layout="NCHW", out=None):
    """Unfold every receptive field of ``x`` into a column (zeros where the padding is).

    Parameters
    ----------
    x : cupy.ndarray
        ``(N, C, *spatial)`` (``layout="NCHW"``) or ``(N, *spatial, C)`` (``"NHWC"``), 1-3 spatial
        dims, float16/float32/float64.
    kernel_size : int or tuple of int
        Kernel extent per spatial dim.
    stride, padding, dilation :
        As in :func:`cupyconv.conv` (every padding form, including ``"same"``).
    out : cupy.ndarray, optional
        C-contiguous array of the result's shape and dtype.

    Returns
    -------
    cupy.ndarray
        NCHW: ``(N, C * prod(kernel), prod(out_spatial))`` with rows ordered ``(c, *kernel)``, so
        ``y[n] = w.reshape(K, -1) @ col[n]``.  NHWC: ``(N, prod(out_spatial), prod(kernel) * C)``
        with columns ordered ``(*kernel, c)``, so ``y[n] = col[n] @ w.reshape(K, -1).T``.
    """
    x = require_array(x, "x")
    dtype = require_float_dtype(x, "x")
    geom = _im2col_geometry(x.shape, kernel_size, stride, padding, dilation, layout, dtype)
    check_tensor_size("the im2col matrix", geom.col_shape, dtype)
    with x.device:
        col = prepare_out(out, geom.col_shape, dtype, {"x": x}, what="the column matrix (output)")
        run_im2col(geom, x, col)
    return col


def run_im2col(geom: ConvGeometry, x, col, groups: int = 1) -> None:
    """Write the im2col matrix of ``x`` into ``col`` (shape ``geom.col_shape``).

    With ``groups > 1`` (channels-last only) the columns are ordered ``(g, *kernel, c)``, so each
    group's block of columns is one contiguous GEMM operand.
    """
    fn = jit.get_function(IM2COL, "im2col", geom.dtype)
    cl = geom.channels_last
    args = [x, col, *ints((geom.batch, geom.in_channels, groups)), *spatial_args(geom),
            *int64s(element_strides(x, cl)), *ints((cl,))]
    grid, block = launch_grid(col.size)
    with x.device:
        fn(grid, block, tuple(args))


def _im2col_geometry(input_shape, kernel_size, stride, padding, dilation, layout, dtype):
    """The geometry im2col/col2im describe: a 1-output-channel conv with groups = 1."""
    layout = normalize_layout(layout)
    input_shape = tuple(input_shape)
    if not 3 <= len(input_shape) <= 5:
        raise ValueError(f"input must have 3, 4 or 5 dims (N, C and 1-3 spatial dims), got shape "
                         f"{input_shape}")
    kernel = per_dim(kernel_size, len(input_shape) - 2, "kernel_size", 1)
    channels = input_shape[-1] if layout == "NHWC" else input_shape[1]
    wshape = (1, *kernel, channels) if layout == "NHWC" else (1, channels, *kernel)
    return ConvGeometry.from_shapes(input_shape, wshape, stride=stride, padding=padding,
                                    dilation=dilation, layout=layout, dtype=dtype)


def col2im(col, input_shape, kernel_size, *, stride=1, padding=0, dilation=1, layout="NCHW",
           out=None):
    """The adjoint of :func:`im2col`: sum every column back onto the input element it came from.

    ``col`` has the shape :func:`im2col` returns for an input of ``input_shape``; overlapping
    windows add up and padding positions are dropped.  Each output element is gathered by one
    thread in a fixed order (no atomics): deterministic.  Returns an array of ``input_shape``.
    """
    col = require_array(col, "col")
    dtype = require_float_dtype(col, "col")
    geom = _im2col_geometry(input_shape, kernel_size, stride, padding, dilation, layout, dtype)
    if tuple(col.shape) != geom.col_shape:
        raise ValueError(f"col must have shape {geom.col_shape} (im2col of {geom.input_shape}), "
                         f"got {tuple(col.shape)}")
    import cupy

    with col.device:
        x = prepare_out(out, geom.input_shape, dtype, {"col": col})
        col = cupy.ascontiguousarray(col)
        fn = jit.get_function(COL2IM, "col2im", dtype)
        args = [col, x, *ints((geom.batch, geom.in_channels)), *spatial_args(geom),
                *ints((geom.channels_last,))]
        grid, block = launch_grid(x.size)
        fn(grid, block, tuple(args))
    return x
