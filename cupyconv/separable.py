"""Depthwise-separable convolution: ``separable_conv``."""

from __future__ import annotations

from cupyconv._core.arrays import (check_out_disjoint, is_unbatched, prepare_out, require_array,
                                   require_float_dtype, same_device, with_batch_axis,
                                   without_batch_axis)
from cupyconv._core.geometry import ConvGeometry, normalize_layout
from cupyconv._depthwise.separable import ACTIVATIONS, fused_plan, smem_limit
from cupyconv._dispatch.callcache import call_key, lookup, remember
from cupyconv._dispatch.separable import METHODS, prepare_separable

__all__ = ["separable_conv"]


def separable_conv(x, w_dw, w_pw, bias_dw=None, bias_pw=None, *, stride=1, padding=0, dilation=1,
                   activation=None, layout="NCHW", method="auto", out=None):
    """Depthwise convolution followed by a pointwise (1x1) convolution, as one layer.

    ``y = conv(act(conv(x, w_dw, bias_dw, groups=C) ), w_pw, bias_pw)`` with the depthwise
    options ``stride``, ``padding`` (every form of :func:`cupyconv.conv`) and ``dilation``.

    Parameters
    ----------
    x : cupy.ndarray
        ``(N, C, *spatial)`` (NCHW) or ``(N, *spatial, C)`` (NHWC), 1-3 spatial dims;
        float16, bfloat16 (accumulated in float32), float32 or float64.  Unbatched ``x``
        (``(C, *spatial)``, one dim fewer than ``w_dw``) gives an unbatched result.
    w_dw : cupy.ndarray
        Depthwise weights ``(M*C, 1, *kernel)`` (NCHW) or ``(M*C, *kernel, 1)`` (NHWC), channel
        multiplier ``M >= 1``.
    w_pw : cupy.ndarray
        Pointwise weights ``(K, M*C, 1, ...)`` (NCHW) or ``(K, 1, ..., M*C)`` (NHWC).
    bias_dw, bias_pw : cupy.ndarray, optional
        ``(M*C,)`` and ``(K,)``.
    activation : None, "relu" or "relu6"
        Applied to the depthwise result (after ``bias_dw``), before the pointwise conv.
    method : "auto", "fused" or "unfused"
        ``"fused"``: one kernel; the depthwise result stays in shared memory (1-d and 2-d).
        ``"unfused"``: the depthwise kernel into a buffer, then the pointwise GEMM.  ``"auto"``
        fuses while the pointwise outputs are few enough (the fused kernel recomputes the
        depthwise tile per block of pointwise outputs).
    out : cupy.ndarray, optional
        C-contiguous output to write into.

    Returns ``(N, K, *out_spatial)`` or ``(N, *out_spatial, K)`` in x's dtype.  Arguments are
    checked before any kernel is compiled or launched.
    """
    key, ops = call_key("separable_conv", (x, w_dw, w_pw, bias_dw, bias_pw, out),
                        (stride, padding, dilation, activation, layout, method))
    call = lookup(key)
    if call is not None:
        return call(ops[:-1], ops[-1])
    x, w_dw, w_pw = require_array(x, "x"), require_array(w_dw, "w_dw"), require_array(w_pw, "w_pw")
    if is_unbatched(x, w_dw):
        y = separable_conv(x[None], w_dw, w_pw, bias_dw, bias_pw, stride=stride, padding=padding,
                           dilation=dilation, activation=activation, layout=layout,
                           method=method, out=with_batch_axis(out, "out"))
        return without_batch_axis(y, out)
    dtype = require_float_dtype(x, "x")
    require_float_dtype(w_dw, "w_dw", dtype)
    require_float_dtype(w_pw, "w_pw", dtype)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    layout = normalize_layout(layout)
    dw, kp = separable_geometry(x.shape, w_dw.shape, w_pw.shape, stride=stride, padding=padding,
                                dilation=dilation, layout=layout, dtype=dtype)
    b_dw = _bias(bias_dw, "bias_dw", dw.out_channels, dtype)
    b_pw = _bias(bias_pw, "bias_pw", kp, dtype)
    budget = smem_limit(x.data.device_id)
    if method == "fused" and fused_plan(dw, kp, budget) is None:
        raise ValueError("method 'fused' runs 1-d and 2-d problems whose input window fits in "
                         "shared memory; use method='auto' or 'unfused'")
    if out is not None:
        out = require_array(out, "out")
    same_device({"x": x, "w_dw": w_dw, "w_pw": w_pw, "bias_dw": b_dw, "bias_pw": b_pw,
                 "out": out})
    inputs = ("x", "w_dw", "w_pw", "bias_dw", "bias_pw")
    check_out_disjoint(out, dict(zip(inputs, (x, w_dw, w_pw, b_dw, b_pw))))
    out_shape = dw.layout_shape(dw.batch, kp, dw.out_spatial)
    with x.device:
        y = prepare_out(out, out_shape, dtype)
        remember(key, prepare_separable(dw, method, budget, activation,
                                        (x, w_dw, w_pw, b_dw, b_pw), y))
    return y


def separable_geometry(x_shape, w_dw_shape, w_pw_shape, *, stride=1, padding=0, dilation=1,
                       layout="NCHW", dtype=None):
    """(the depthwise :class:`ConvGeometry`, pointwise output channels) of a batched separable
    layer, from shapes alone; ValueError naming the argument for a shape that does not fit."""
    layout = normalize_layout(layout)
    x_shape, w_pw_shape = tuple(x_shape), tuple(w_pw_shape)
    if not 3 <= len(x_shape) <= 5:
        raise ValueError(f"x must have 3, 4 or 5 dims (N, C and 1-3 spatial dims), got shape "
                         f"{x_shape}")
    channels = x_shape[-1] if layout == "NHWC" else x_shape[1]
    dw = ConvGeometry.from_shapes(x_shape, tuple(w_dw_shape), stride=stride, padding=padding,
                                  dilation=dilation, groups=channels, layout=layout, dtype=dtype)
    if len(w_pw_shape) != len(x_shape):
        raise ValueError(f"w_pw must have as many dims as x ({len(x_shape)}), got shape "
                         f"{w_pw_shape}")
    pw_kernel = w_pw_shape[1:-1] if layout == "NHWC" else w_pw_shape[2:]
    pw_in = w_pw_shape[-1] if layout == "NHWC" else w_pw_shape[1]
    if any(k != 1 for k in pw_kernel) or pw_in != dw.out_channels:
        want = ((("K",) + (1,) * (len(x_shape) - 2) + (dw.out_channels,)) if layout == "NHWC"
                else ("K", dw.out_channels) + (1,) * (len(x_shape) - 2))
        raise ValueError(f"w_pw must be a pointwise weight of shape {want} for {layout} "
                         f"(the depthwise conv has {dw.out_channels} output channels), "
                         f"got {w_pw_shape}")
    if w_pw_shape[0] < 1:
        raise ValueError("w_pw must have at least one output channel")
    return dw, w_pw_shape[0]


def _bias(b, name: str, channels: int, dtype: str):
    if b is None:
        return None
    b = require_array(b, name)
    require_float_dtype(b, name, dtype)
    if b.shape != (channels,):
        raise ValueError(f"{name} must have shape ({channels},), got {b.shape}")
    return b
