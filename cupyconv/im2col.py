"""Explicit im2col: the input view of a convolution written out as a matrix."""

from __future__ import annotations

from cupyconv._core.arrays import prepare_out, require_array, require_float_dtype
from cupyconv._core.copy import contiguous
from cupyconv._core.geometry import ConvGeometry, check_tensor_size, normalize_layout, per_dim
from cupyconv._dispatch.callcache import call_key, lookup, prepare, remember
from cupyconv._gemm.im2col import run_col2im, run_im2col

__all__ = ["im2col", "col2im"]


def im2col(x, kernel_size, *, stride=1, padding=0, dilation=1, layout="NCHW", out=None):
    """Unfold every receptive field of ``x`` into a column (zeros where the padding is).

    Parameters
    ----------
    x : cupy.ndarray
        ``(N, C, *spatial)`` (``layout="NCHW"``) or ``(N, *spatial, C)`` (``"NHWC"``), 1-3 spatial
        dims; float16, bfloat16, float32 or float64 (the values are copied, not rounded).
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
    key, ops = call_key("im2col", (x, out), (kernel_size, stride, padding, dilation, layout))
    call = lookup(key)
    if call is not None:
        return call(ops[:-1], ops[-1])
    x = require_array(x, "x")
    dtype = require_float_dtype(x, "x")
    geom = _im2col_geometry(x.shape, kernel_size, stride, padding, dilation, layout, dtype)
    check_tensor_size("the im2col matrix", geom.col_shape, dtype)
    with x.device:
        col = prepare_out(out, geom.col_shape, dtype, {"x": x}, what="the column matrix (output)")
        remember(key, prepare(lambda ops, col: run_im2col(geom, ops[0], col), ("x",), (x,), col))
    return col


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
    thread in a fixed order (no atomics): deterministic; 2-byte types (float16, bfloat16) sum in
    float32.  Returns an array of ``input_shape``.
    """
    key, ops = call_key("col2im", (col, out),
                        (input_shape, kernel_size, stride, padding, dilation, layout))
    call = lookup(key)
    if call is not None:
        return call(ops[:-1], ops[-1])
    col = require_array(col, "col")
    dtype = require_float_dtype(col, "col")
    geom = _im2col_geometry(input_shape, kernel_size, stride, padding, dilation, layout, dtype)
    if tuple(col.shape) != geom.col_shape:
        raise ValueError(f"col must have shape {geom.col_shape} (im2col of {geom.input_shape}), "
                         f"got {tuple(col.shape)}")
    with col.device:
        x = prepare_out(out, geom.input_shape, dtype, {"col": col})
        remember(key, prepare(lambda ops, x: run_col2im(geom, contiguous(ops[0]), x), ("col",),
                              (col,), x))
    return x
