"""Forward convolution: ``conv``, ``conv1d``, ``conv2d``, ``conv3d``."""

from __future__ import annotations

from dataclasses import replace

from cupyconv._core.activation import activation_code
from cupyconv._core.arrays import (check_bias, check_residual, conv_operands, is_unbatched,
                                   prepare_out, require_array, same_device, with_batch_axis,
                                   without_batch_axis)
from cupyconv._core.complex import (bias_parts, gauss_product, is_complex, refuse_activation,
                                    require_complex_dtype)
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.precision import resolve_precision
from cupyconv._dispatch.callcache import call_key, lookup, remember
from cupyconv._dispatch.choose import autotune_enabled, choose
from cupyconv._dispatch.forward import check_method

__all__ = ["conv", "conv1d", "conv2d", "conv3d"]

def _forward(ndim, x, w, bias, stride, padding, dilation, groups, layout, method, precision, out,
             activation, z):
    """The pipeline: a prepared call for a known key; else validate, build the geometry, choose
    the algorithm, run it while recording, and remember the prepared call.  The key holds the
    activation's name and z's array properties; z itself is an operand of the prepared call."""
    key, ops = call_key("conv", (x, w, bias, z, out),
                        (ndim, stride, padding, dilation, groups, layout, method, activation,
                         "tuned" if autotune_enabled() else "",
                         resolve_precision(precision, "float32")))
    call = lookup(key)
    if call is not None:
        return call(ops[:-1], ops[-1])
    method = check_method(method)
    act = activation_code(activation)
    x, w = require_array(x, "x"), require_array(w, "w")
    if is_unbatched(x, w):
        y = _forward(ndim, x[None], w, bias, stride, padding, dilation, groups, layout, method,
                     precision, with_batch_axis(out, "out"), activation, with_batch_axis(z, "z"))
        return without_batch_axis(y, out)
    if is_complex(x) or is_complex(w):
        return _complex_forward(ndim, x, w, bias, dict(stride=stride, padding=padding,
                                dilation=dilation, groups=groups, layout=layout), method,
                                precision, out, activation, z)
    geom, x, w, bias, z, y = conv_operands(
        x, w, bias, out, dict(stride=stride, padding=padding, dilation=dilation, groups=groups,
                              layout=layout), ndim=ndim, z=z)
    geom = replace(geom, precision=resolve_precision(precision, geom.dtype))
    with x.device:
        remember(key, choose(geom, method).prepare(geom, x, w, bias, y, z, act))
    return y


def _complex_forward(ndim, x, w, bias, options, method, precision, out, activation, z):
    """The complex forward pass: three real convolutions of the parts (:mod:`._core.complex`),
    the bias fused into two of them; every argument checked before the first one runs."""
    refuse_activation(activation)
    bias = None if bias is None else require_array(bias, "bias")
    z = None if z is None else require_array(z, "z")
    dtype = require_complex_dtype({"x": x, "w": w, "bias": bias, "z": z})
    resolve_precision(precision, dtype)
    geom = ConvGeometry.from_shapes(x.shape, w.shape, dtype=dtype, ndim=ndim, **options)
    bias = check_bias(bias, geom.out_channels, dtype)
    z = check_residual(z, geom.output_shape, dtype, geom.layout)
    if out is not None:
        out = require_array(out, "out")
    same_device({"x": x, "w": w, "bias": bias, "z": z, "out": out})
    biases = bias_parts(bias)
    with x.device:
        y = prepare_out(out, geom.output_shape, dtype, {"x": x, "w": w, "bias": bias, "z": z})

        def part(p, q, which):
            return _forward(ndim, p, q, biases[which], options["stride"], options["padding"],
                            options["dilation"], options["groups"], options["layout"], method,
                            precision, None, None, None)

        gauss_product(part, x, w, y)
        if z is not None:
            y += z
    return y


def conv(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1, layout="NCHW",
         method="auto", precision=None, out=None, activation=None, z=None):
    """N-d convolution (cross-correlation, as in deep-learning frameworks) of CuPy arrays, with an
    optional fused inference epilogue: ``y = activation(conv(x, w) + bias + z)``.

    Parameters
    ----------
    x : cupy.ndarray
        Input, ``(N, C, *spatial)`` for ``layout="NCHW"`` or ``(N, *spatial, C)`` for ``"NHWC"``,
        with 1, 2 or 3 spatial dims; float16 or bfloat16 (accumulated in float32), float32,
        float64, complex64 or complex128.  Channels-last (NHWC) is the fast layout for the 16-bit
        types and TF32.  Unbatched: ``(C, *spatial)`` or ``(*spatial, C)``, one dim fewer than
        ``w``, gives an unbatched result (and takes unbatched ``out`` and ``z``), as in PyTorch.
        Every array argument may also be a GPU array of another library (PyTorch, JAX, Numba:
        ``__cuda_array_interface__`` or ``__dlpack__``), taken without a copy; results are CuPy
        arrays.
    w : cupy.ndarray
        Weights, ``(K, C/groups, *kernel)`` (NCHW) or ``(K, *kernel, C/groups)`` (NHWC), same dtype.
    bias : cupy.ndarray, optional
        ``(K,)``, added to every output of its channel.
    stride, dilation : int or tuple of int
        Per spatial dim, each >= 1.
    padding : int, tuple, tuple of (lo, hi) pairs, "valid", "same" or "same_lower"
        Zero padding.  ``"same"`` gives ``ceil(in / stride)`` outputs with the odd extra padding
        element at the end; ``"same_lower"`` puts it at the start.
    groups : int
        Input and output channels are split into ``groups`` independent convolutions.
    layout : "NCHW" or "NHWC"
        Channels-first or channels-last, for any number of spatial dims.
    method : str
        ``"auto"`` (the cheapest applicable algorithm) or one of the registered algorithms:
        ``"implicit_gemm"``, ``"im2col_gemm"``, ``"depthwise"`` (groups == channels),
        ``"grouped_direct"`` (1 < groups < channels) and ``"direct"``; a method that cannot run
        the problem raises ValueError.  Every method gives the same result within float
        tolerance.
    precision : "exact", "tf32" or None
        float32 only: "tf32" lets the GEMM paths run on tensor cores with inputs rounded to TF32
        (10 mantissa bits, float32 accumulation; PyTorch's default for convolutions), "exact"
        keeps IEEE float32 products.  None: "tf32" when ``CUPYCONV_ALLOW_TF32=1``, else "exact".
        float16 and bfloat16 always use tensor cores where the GPU has them.
    out : cupy.ndarray, optional
        C-contiguous array of the output's shape and dtype to write into; it must not overlap
        any input (``z`` included).
    activation : None, "relu", "relu6", "silu" (alias "swish"), "gelu" or "gelu_tanh"
        Applied last, to ``conv + bias + z``.  ``"gelu"`` is the exact erf form (PyTorch's default,
        ``approximate="none"``), ``"gelu_tanh"`` the tanh approximation; relu and relu6 pass NaN
        through, as PyTorch does.
    z : cupy.ndarray, optional
        A residual of the output's shape and dtype (any strides), added after the bias and before
        the activation: the order of PyTorch's ``act(conv(x) + z)`` blocks and of cuDNN's fused
        ConvBiasActivation (``act(conv + z + bias)``).

    Returns
    -------
    cupy.ndarray
        ``(N, K, *out_spatial)`` or ``(N, *out_spatial, K)``, the input's dtype.

    Complex inputs run as three real convolutions of their parts (Gauss's trick,
    :mod:`cupyconv._core.complex`): the plain bilinear product, no conjugate, as
    ``scipy.signal`` and PyTorch define it; ``activation`` must then be None.

    The epilogue is computed in the accumulator type (float32 for float16) before the one store of
    each output: the GEMM algorithms and the direct kernel apply it in their own stores, with no
    extra pass (a non-contiguous ``z`` is copied once); the depthwise kernels add the bias and
    finish with one elementwise pass.  Without ``activation`` and ``z`` the result is bit for bit
    that of the plain convolution.

    All arguments are validated before any kernel is compiled or launched; ``out`` is left
    untouched when validation fails.
    """
    return _forward(None, x, w, bias, stride, padding, dilation, groups, layout, method, precision,
                    out, activation, z)


def _fixed_ndim(ndim: int):
    def f(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1, layout="NCHW",
          method="auto", precision=None, out=None, activation=None, z=None):
        return _forward(ndim, x, w, bias, stride, padding, dilation, groups, layout, method,
                        precision, out, activation, z)

    f.__name__ = f.__qualname__ = f"conv{ndim}d"
    f.__doc__ = (f"{ndim}-d convolution: :func:`conv` with the input required to have {ndim} "
                 f"spatial dims ({ndim + 2}-d arrays).")
    return f


conv1d = _fixed_ndim(1)
conv2d = _fixed_ndim(2)
conv3d = _fixed_ndim(3)
