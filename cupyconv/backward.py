"""Gradients of convolution and transposed convolution: ``conv_backward_data``,
``conv_backward_weight``, ``conv_transpose``."""

from __future__ import annotations

from dataclasses import replace

from cupyconv._core.arrays import (batched_shape, check_bias, check_out_disjoint, is_unbatched,
                                   prepare_out, require_array, require_float_dtype, same_device,
                                   with_batch_axis, without_batch_axis)
from cupyconv._core.complex import (COMPLEX_DTYPES, bias_parts, gauss_product, is_complex,
                                    real_dtype, require_complex_dtype)
from cupyconv._core.copy import contiguous_vector
from cupyconv._core.geometry import (ConvGeometry, as_int, check_tensor_size, normalize_layout,
                                     normalize_output_padding, normalize_padding, per_dim,
                                     transpose_output_spatial)
from cupyconv._core.names import arg
from cupyconv._core.precision import resolve_precision
from cupyconv._core.program import not_preparable
from cupyconv._dispatch.backward import backward_method
from cupyconv._dispatch.callcache import call_key, lookup, prepare, remember

__all__ = ["conv_backward_data", "conv_backward_weight", "conv_transpose"]


def _check_dy(dy, geom: ConvGeometry, name: str = "dy") -> None:
    if tuple(dy.shape) != geom.output_shape:
        raise ValueError(f"{arg(name)} must have the convolution's output shape "
                         f"{geom.output_shape} ({geom.layout}, {arg('input')} {geom.input_shape}, "
                         f"{arg('weight')} {geom.weight_shape}), got {tuple(dy.shape)}")


def _gradient_operands(first, second, input_shape, weight_shape, dy, out, stride, padding,
                       dilation, groups, layout, precision):
    """Validate the (CuPy) operands of a backward pass; return its geometry and the checked
    ``out``.  ``first`` and ``second`` are (name, array) pairs; the first one sets the dtype."""
    if is_complex(first[1]) or is_complex(second[1]):
        dtype = require_complex_dtype(dict((first, second)))
    else:
        dtype = require_float_dtype(first[1], first[0])
        require_float_dtype(second[1], second[0], dtype, first=first[0])
    geom = ConvGeometry.from_shapes(input_shape, weight_shape, stride=stride, padding=padding,
                                    dilation=dilation, groups=groups, layout=layout, dtype=dtype)
    geom = replace(geom, precision=resolve_precision(precision, dtype))
    _check_dy(dy, geom)
    if out is not None:
        out = require_array(out, "out")
    same_device({first[0]: first[1], second[0]: second[1], "out": out})
    check_out_disjoint(out, dict((first, second)))
    return geom, out


def _real(geom: ConvGeometry) -> ConvGeometry:
    """The geometry of the real passes that run a complex one (itself for real dtypes): the
    algorithm choice and its checks concern the real kernels."""
    return replace(geom, dtype=real_dtype(geom.dtype)) if geom.dtype in COMPLEX_DTYPES else geom


def conv_backward_data(dy, w, input_shape, *, stride=1, padding=0, dilation=1, groups=1,
                       layout="NCHW", method="auto", precision=None, out=None):
    """Gradient of :func:`cupyconv.conv` with respect to its input ``x``.

    ``dy`` has the forward output's shape, ``w`` the forward weight's, ``input_shape`` is the shape
    of ``x``; the options are those of the forward call (every padding form, groups, dilation,
    both layouts, 1-3 spatial dims; float16, bfloat16 (accumulated in float32), float32 or
    float64; ``precision`` as in :func:`cupyconv.conv`).  Computed per stride phase on the
    implicit GEMM: each element of the result is written once, with no atomics, so repeated calls
    give bitwise-equal results.  Unbatched ``dy`` (one dim fewer than ``w``, with an unbatched
    ``input_shape``) gives an unbatched ``dx``.  Complex (complex64/complex128): the gradient in
    PyTorch's convention, ``conv_transpose(dy, conj(w))``, from three real passes.  Depthwise problems (groups == channels) run on the depthwise kernels
    (``method``: "auto", "implicit_gemm" or "depthwise").  ``out``: C-contiguous array of
    ``input_shape`` to write into.
    """
    key, ops = call_key("conv_backward_data", (dy, w, out),
                        (input_shape, stride, padding, dilation, groups, layout, method,
                         resolve_precision(precision, "float32")))
    call = lookup(key)
    if call is not None:
        return call(ops[:-1], ops[-1])
    dy, w = require_array(dy, "dy"), require_array(w, "w")
    options = dict(stride=stride, padding=padding, dilation=dilation, groups=groups,
                   layout=layout, method=method, precision=precision)
    if is_unbatched(dy, w):
        dx = conv_backward_data(dy[None], w, batched_shape(input_shape),
                                out=with_batch_axis(out, "out"), **options)
        return without_batch_axis(dx, out)
    geom, out = _gradient_operands(("dy", dy), ("w", w), input_shape, w.shape, dy, out, stride,
                                   padding, dilation, groups, layout, precision)
    algo = backward_method(_real(geom), method)
    with dy.device:
        dx = prepare_out(out, geom.input_shape, geom.dtype, what="dx (of input_shape)")
        if is_complex(dx):  # dx = bwd_data(dy, conj(w)): PyTorch's gradient convention
            return gauss_product(lambda p, q, _: conv_backward_data(p, q, geom.input_shape,
                                                                    **options), dy, w, dx,
                                 conj_b=True)
        remember(key, algo.prepare_data(geom, dy, w, dx))
    return dx


def conv_backward_weight(x, dy, weight_shape, *, stride=1, padding=0, dilation=1, groups=1,
                         layout="NCHW", method="auto", precision=None, out=None):
    """Gradient of :func:`cupyconv.conv` with respect to its weight ``w``.

    ``x`` is the forward input, ``dy`` has the forward output's shape, ``weight_shape`` is the
    shape of ``w``; options, dtypes and ``precision`` as in the forward call.  A GEMM over
    k = N * output pixels, split into parts when the weight alone cannot fill the GPU; parts are summed in a fixed order by a second
    kernel, so results are bitwise reproducible.  Depthwise problems run on the depthwise kernels
    (per-chunk partial sums, reduced in a fixed order; ``method``: "auto", "implicit_gemm" or
    "depthwise").  ``out``: C-contiguous array of ``weight_shape``.  Unbatched ``x`` and ``dy``
    (one dim fewer than ``weight_shape``) are accepted.  Complex: the gradient in PyTorch's
    convention, computed from ``conj(x)`` and ``dy``, from three real passes.
    """
    key, ops = call_key("conv_backward_weight", (x, dy, out),
                        (weight_shape, stride, padding, dilation, groups, layout, method,
                         resolve_precision(precision, "float32")))
    call = lookup(key)
    if call is not None:
        return call(ops[:-1], ops[-1])
    x, dy = require_array(x, "x"), require_array(dy, "dy")
    options = dict(stride=stride, padding=padding, dilation=dilation, groups=groups,
                   layout=layout, method=method, precision=precision)
    if isinstance(weight_shape, (tuple, list)) and x.ndim == len(weight_shape) - 1:
        # unbatched: x (C, *spatial) and dy (K, *out_spatial) for a weight of one dim more
        return conv_backward_weight(x[None], with_batch_axis(dy, "dy"), weight_shape, out=out,
                                    **options)
    geom, out = _gradient_operands(("x", x), ("dy", dy), x.shape, weight_shape, dy, out, stride,
                                   padding, dilation, groups, layout, precision)
    algo = backward_method(_real(geom), method)
    with x.device:
        dw = prepare_out(out, geom.weight_shape, geom.dtype, what="dw (of weight_shape)")
        if is_complex(dw):  # dw = bwd_weight(conj(x), dy): PyTorch's gradient convention
            return gauss_product(lambda p, q, _: conv_backward_weight(p, q, geom.weight_shape,
                                                                      **options), x, dy, dw,
                                 conj_a=True)
        remember(key, algo.prepare_weight(geom, x, dy, dw))
    return dw


def _transpose_geometry(x_shape, w_shape, dtype, stride, padding, output_padding, dilation,
                        groups, layout, precision):
    """Validate a transposed convolution given by the shapes of ``x`` and ``w``; return the
    geometry of the forward convolution it transposes (its input is our output) and x's spatial
    size."""
    layout = normalize_layout(layout)
    if not 3 <= len(x_shape) <= 5:
        raise ValueError(f"x must have 3, 4 or 5 dims (N, C and 1-3 spatial dims), or one dim "
                         f"fewer than w (unbatched), got shape {x_shape}")
    if len(w_shape) != len(x_shape):
        raise ValueError(f"w must have as many dims as x ({len(x_shape)}), got shape {w_shape}")
    nsp = len(x_shape) - 2
    cl = layout == "NHWC"
    c_in, spatial = (x_shape[-1], x_shape[1:-1]) if cl else (x_shape[1], x_shape[2:])
    kernel = w_shape[1:-1] if cl else w_shape[2:]
    if w_shape[0] != c_in:
        raise ValueError(f"w.shape[0] must be the input channels ({c_in}) for a transposed "
                         f"convolution (weights are (C_in, C_out/groups, *kernel)), got {w_shape}")
    if isinstance(padding, str):
        raise ValueError("padding of conv_transpose must be an int, per-dim ints or per-dim "
                         f"(lo, hi) pairs, got {padding!r}")
    stride = per_dim(stride, nsp, "stride", 1)
    dilation = per_dim(dilation, nsp, "dilation", 1)
    lo, hi = normalize_padding(padding, spatial, kernel, stride, dilation)
    op = normalize_output_padding(output_padding, stride, dilation)
    out_spatial = transpose_output_spatial(spatial, kernel, stride, dilation, lo, hi, op)
    if min(out_spatial) < 1:
        raise ValueError(f"padding {tuple(zip(lo, hi))} leaves an empty output: output size "
                         f"would be {out_spatial}")
    groups = as_int(groups, "groups")
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    c_out = (w_shape[-1] if cl else w_shape[1]) * groups
    full_shape = (x_shape[0], *out_spatial, c_out) if cl else (x_shape[0], c_out, *out_spatial)
    check_tensor_size("the output of conv_transpose", full_shape, dtype)
    geom = ConvGeometry.from_shapes(full_shape, w_shape, stride=stride, padding=list(zip(lo, hi)),
                                    dilation=dilation, groups=groups, layout=layout, dtype=dtype)
    return replace(geom, precision=resolve_precision(precision, dtype)), spatial


def _complex_transpose(x, w, bias, out, options):
    """The complex transposed convolution: three real ones of the parts (plain bilinear product,
    no conjugate), the bias fused into two of them; every argument checked before the first."""
    bias = None if bias is None else require_array(bias, "bias")
    dtype = require_complex_dtype({"x": x, "w": w, "bias": bias})
    geom, _ = _transpose_geometry(x.shape, w.shape, dtype, options["stride"], options["padding"],
                                  options["output_padding"], options["dilation"],
                                  options["groups"], options["layout"], options["precision"])
    backward_method(_real(geom), options["method"])
    bias = check_bias(bias, geom.in_channels, dtype)
    if out is not None:
        out = require_array(out, "out")
    same_device({"x": x, "w": w, "bias": bias, "out": out})
    check_out_disjoint(out, {"x": x, "w": w, "bias": bias})
    biases = bias_parts(bias)
    with x.device:
        y = prepare_out(out, geom.input_shape, dtype)
        return gauss_product(lambda p, q, part: conv_transpose(p, q, biases[part], **options),
                             x, w, y)


def conv_transpose(x, w, bias=None, *, stride=1, padding=0, output_padding=0, dilation=1, groups=1,
                   layout="NCHW", method="auto", precision=None, out=None):
    """Transposed convolution (PyTorch's ``conv_transpose{1,2,3}d`` semantics), N-d.

    ``x``: ``(N, C_in, *spatial)`` (NCHW) or ``(N, *spatial, C_in)`` (NHWC).  ``w``:
    ``(C_in, C_out / groups, *kernel)`` (NCHW) or ``(C_in, *kernel, C_out / groups)`` (NHWC).
    ``padding``: int, per-dim ints or per-dim ``(lo, hi)`` pairs (removed from each side of the
    full output).  ``output_padding``: extra size at the end of each dim, smaller than the stride
    or the dilation.  Output size per dim: ``(in - 1) * stride - lo - hi + dilation * (k - 1) +
    output_padding + 1``.  Runs as the backward-data pass of the matching forward convolution
    (``method`` and dtypes as in :func:`conv_backward_data`, ``precision`` as in
    :func:`cupyconv.conv`).  Unbatched ``x`` (one dim fewer than ``w``) gives an unbatched
    result; complex inputs give the plain bilinear product (no conjugate), from three real passes.
    """
    key, ops = call_key("conv_transpose", (x, w, bias, out),
                        (stride, padding, output_padding, dilation, groups, layout, method,
                         resolve_precision(precision, "float32")))
    call = lookup(key)
    if call is not None:
        return call(ops[:-1], ops[-1])
    x = require_array(x, "x")
    w = require_array(w, "w")
    options = dict(stride=stride, padding=padding, output_padding=output_padding,
                   dilation=dilation, groups=groups, layout=layout, method=method,
                   precision=precision)
    if is_unbatched(x, w):
        y = conv_transpose(x[None], w, bias, out=with_batch_axis(out, "out"), **options)
        return without_batch_axis(y, out)
    if is_complex(x) or is_complex(w):
        return _complex_transpose(x, w, bias, out, options)
    dtype = require_float_dtype(x, "x")
    require_float_dtype(w, "w", dtype)
    geom, spatial = _transpose_geometry(x.shape, w.shape, dtype, stride, padding, output_padding,
                                        dilation, groups, layout, precision)
    cl, nsp = geom.channels_last, geom.ndim
    bias = check_bias(bias, geom.in_channels, dtype)
    if out is not None:
        out = require_array(out, "out")
    same_device({"x": x, "w": w, "bias": bias, "out": out})
    check_out_disjoint(out, {"x": x, "w": w, "bias": bias})
    algo = backward_method(geom, method)
    grow = [(0, o - s) for o, s in zip(geom.out_spatial, spatial)]

    def run(inputs, y):
        import cupy

        x, w, bias = inputs
        dy = x
        if any(g for _, g in grow):
            # output_padding >= stride (allowed when dilation is larger): the forward view has
            # more outputs than x; the missing ones are zeros.
            not_preparable("the padded input is made with cupy.pad")
            dy = cupy.pad(x, [(0, 0)] + grow + [(0, 0)] if cl else [(0, 0), (0, 0)] + grow)
        bias = contiguous_vector(bias)
        if not algo.data(geom, dy, w, y, bias) and bias is not None:
            not_preparable("the bias is added with CuPy")
            y += bias if cl else bias.reshape((-1,) + (1,) * nsp)

    with x.device:
        y = prepare_out(out, geom.input_shape, dtype)
        remember(key, prepare(run, ("x", "w", "bias"), (x, w, bias), y))
    return y
