"""Float64 NumPy reference implementations of every convolution pass (the CPU oracle for GPU tests).

All four functions share one scheme: move channels-last data to channels-first, split channels into
``(groups, channels / groups)``, and loop in Python over the kernel taps only; each tap is one strided
slice of the (padded) activation and one grouped contraction.  Every shape rule comes from
:class:`cupyconv._core.geometry.ConvGeometry`; nothing here recomputes an output size.

Inputs may be NumPy arrays, anything :func:`numpy.asarray` takes, or CuPy arrays (converted with
``.get()``).  Every real input type is widened to float64 first (bfloat16 and float16 exactly), and
results are float64 NumPy arrays in the caller's layout: a test rounds them to the output type
itself where it needs to (``verify.tolerance`` does, for the 2-byte types).  Complex inputs are
widened to complex128 and give complex128 results, with the conjugation rules of
:mod:`cupyconv._core.complex`: ``conv`` and ``conv_transpose`` are plain bilinear products, the
gradients conjugate the other operand (``conv_backward_data`` takes ``conj(w)``,
``conv_backward_weight`` takes ``conj(x)``), as PyTorch's autograd does.
"""

from __future__ import annotations

import itertools

import numpy as np

from cupyconv._core.dtypes import is_real_float
from cupyconv._core.activation import activate_reference, activation_code
from cupyconv._core.geometry import (ConvGeometry, normalize_layout, normalize_output_padding,
                                     normalize_padding, per_dim, transpose_output_spatial)

__all__ = ["conv", "conv_backward_data", "conv_backward_weight", "conv_transpose",
           "separable_conv", "im2col", "col2im"]


# ---------------------------------------------------------------------------------------- helpers
def _as_float64(a, name: str) -> np.ndarray:
    """``a`` as a float64 NumPy array (CuPy arrays via ``.get()``), or complex128 where it is
    complex; non-numeric types rejected.  bfloat16 (ml_dtypes' type, which NumPy files under
    kind "V") is real and accepted."""
    if hasattr(a, "get") and not isinstance(a, (np.ndarray, dict)):
        a = a.get()
    a = np.asarray(a)
    if a.dtype.kind == "c":
        return a.astype(np.complex128, copy=False)
    if a.dtype.kind not in "biu" and not is_real_float(a.dtype):
        raise TypeError(f"{name} must be a numeric array, got dtype {a.dtype}")
    return a.astype(np.float64, copy=False)


def _to_channels_first(a: np.ndarray, layout: str) -> np.ndarray:
    """(lead, *spatial, C) -> (lead, C, *spatial) for NHWC; unchanged for NCHW (activations and weights)."""
    return np.moveaxis(a, -1, 1) if layout == "NHWC" else a


def _from_channels_first(a: np.ndarray, layout: str) -> np.ndarray:
    """Inverse of :func:`_to_channels_first`; returns a contiguous array."""
    return np.ascontiguousarray(np.moveaxis(a, 1, -1) if layout == "NHWC" else a)


def _grouped(a: np.ndarray, groups: int) -> np.ndarray:
    """Channels-first ``(lead, C, *rest)`` viewed as ``(lead, groups, C / groups, *rest)``."""
    return a.reshape(a.shape[0], groups, a.shape[1] // groups, *a.shape[2:])


def _grouped_weight(w: np.ndarray, groups: int) -> np.ndarray:
    """Channels-first weight ``(K, C/groups, *kernel)`` as ``(groups, K/groups, C/groups, *kernel)``.

    The transposed-conv weight ``(C_in, C_out/groups, *kernel)`` splits the same way (its lead dim)."""
    return w.reshape(groups, w.shape[0] // groups, *w.shape[1:])


def _taps(kernel, stride, dilation, out_spatial):
    """For every kernel tap: ``(tap, window)``.

    ``tap`` indexes the kernel's spatial dims; ``window`` is the tuple of strided slices that picks,
    from a padded spatial array, the element each of the ``out_spatial`` output positions reads at
    that tap (``padded[o * stride + tap * dilation]``).  The same slices scatter in the adjoint passes.
    """
    for tap in itertools.product(*(range(k) for k in kernel)):
        window = tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                       for t, d, o, s in zip(tap, dilation, out_spatial, stride))
        yield tap, window


def _spatial(index) -> tuple:
    """Index over the leading (batch, group, channel) dims, then ``index`` on the spatial dims."""
    return (slice(None),) * 3 + tuple(index)


def _crop(a: np.ndarray, pad_lo, size) -> np.ndarray:
    """The ``size`` spatial elements of padded channels-first ``a`` after ``pad_lo`` in every dim."""
    return a[(slice(None),) * 2 + tuple(slice(lo, lo + n) for lo, n in zip(pad_lo, size))]


def _add_bias(y: np.ndarray, bias, channels: int) -> np.ndarray:
    """``y`` (channels-first) plus ``bias`` of shape ``(channels,)`` per channel; bias None: ``y``."""
    if bias is None:
        return y
    b = _as_float64(bias, "bias")
    if b.shape != (channels,):
        raise ValueError(f"bias must have shape ({channels},) (one value per output channel), "
                         f"got {b.shape}")
    return y + b.reshape((1, channels) + (1,) * (y.ndim - 2))


def _check_shape(a: np.ndarray, expected, name: str, geom: ConvGeometry) -> None:
    if tuple(a.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)} for this convolution "
                         f"({geom.layout}, input {geom.input_shape}, weight {geom.weight_shape}), "
                         f"got {tuple(a.shape)}")


def _pad(x: np.ndarray, geom: ConvGeometry) -> np.ndarray:
    """Channels-first ``x`` zero-padded by ``geom.pad_lo`` / ``geom.pad_hi``."""
    return np.pad(x, [(0, 0), (0, 0)] + list(zip(geom.pad_lo, geom.pad_hi)))


# ---------------------------------------------------------------------------------------- passes
def conv(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1, layout="NCHW",
         activation=None, z=None):
    """Forward N-d convolution (cross-correlation, PyTorch semantics) in float64, with the fused
    epilogue of :func:`cupyconv.conv`: ``activation(conv + bias + z)``.

    ``x``: ``(N, C, *spatial)`` (NCHW) or ``(N, *spatial, C)`` (NHWC); ``w``: ``(K, C/groups, *kernel)``
    or ``(K, *kernel, C/groups)``; ``bias``: ``(K,)`` or None.  ``stride``/``dilation``: int or per-dim;
    ``padding``: int, per-dim, per-dim ``(lo, hi)`` pairs, ``"valid"``, ``"same"`` or ``"same_lower"``.
    ``z``: None or a residual of the output's shape (in ``layout``); ``activation``: None or a name
    of :data:`cupyconv._core.activation.ACTIVATIONS` (``"gelu"`` exact, through ``math.erf``).
    Returns ``y`` of shape ``geometry.output_shape`` in ``layout``.
    """
    activation_code(activation)  # a bad name fails before the work
    x = _as_float64(x, "x")
    w = _as_float64(w, "w")
    geom = ConvGeometry.from_shapes(x.shape, w.shape, stride=stride, padding=padding,
                                    dilation=dilation, groups=groups, layout=layout)
    g = geom.groups
    xp = _grouped(_pad(_to_channels_first(x, geom.layout), geom), g)      # (N, G, Cg, *padded)
    wg = _grouped_weight(_to_channels_first(w, geom.layout), g)           # (G, Kg, Cg, *kernel)
    y = np.zeros((geom.batch, g, geom.out_channels // g) + geom.out_spatial,
                 np.result_type(x, w))
    for tap, window in _taps(geom.kernel, geom.stride, geom.dilation, geom.out_spatial):
        y += np.einsum("ngc...,gkc->ngk...", xp[_spatial(window)], wg[_spatial(tap)])
    y = _add_bias(y.reshape((geom.batch, geom.out_channels) + geom.out_spatial), bias,
                  geom.out_channels)
    y = _from_channels_first(y, geom.layout)
    if z is not None:
        z = _as_float64(z, "z")
        _check_shape(z, geom.output_shape, "z", geom)
        y = y + z
    if np.iscomplexobj(y):
        if activation is not None:
            raise ValueError(f"activation {activation!r} is not defined for complex data")
        return y
    return activate_reference(y, activation)


def separable_conv(x, w_dw, w_pw, bias_dw=None, bias_pw=None, *, stride=1, padding=0, dilation=1,
                   activation=None, layout="NCHW"):
    """:func:`cupyconv.separable_conv` in float64: the depthwise :func:`conv` (``groups`` = x's
    channels, ``activation`` applied to it) followed by the pointwise one."""
    x = _as_float64(x, "x")
    channels = x.shape[-1 if normalize_layout(layout) == "NHWC" else 1]
    t = conv(x, w_dw, bias_dw, stride=stride, padding=padding, dilation=dilation,
             groups=channels, layout=layout, activation=activation)
    return conv(t, w_pw, bias_pw, layout=layout)


def conv_backward_data(dy, w, input_shape, *, stride=1, padding=0, dilation=1, groups=1,
                       layout="NCHW"):
    """Gradient of :func:`conv` with respect to ``x``, in float64.

    ``input_shape`` is the shape of ``x`` (it resolves string paddings and the output size; with
    ``stride`` > 1 input elements that no output reads get zero).  ``dy`` must have the forward output
    shape.  Returns ``dx`` of shape ``input_shape`` in ``layout``.
    """
    dy = _as_float64(dy, "dy")
    w = np.conj(_as_float64(w, "w"))  # complex: the gradient takes conj(w) (PyTorch's rule)
    geom = ConvGeometry.from_shapes(tuple(input_shape), w.shape, stride=stride, padding=padding,
                                    dilation=dilation, groups=groups, layout=layout)
    _check_shape(dy, geom.output_shape, "dy", geom)
    g = geom.groups
    dyg = _grouped(_to_channels_first(dy, geom.layout), g)               # (N, G, Kg, *out)
    wg = _grouped_weight(_to_channels_first(w, geom.layout), g)           # (G, Kg, Cg, *kernel)
    dxp = np.zeros((geom.batch, g, geom.in_channels // g) + geom.padded_spatial,
                   np.result_type(dy, w))
    for tap, window in _taps(geom.kernel, geom.stride, geom.dilation, geom.out_spatial):
        dxp[_spatial(window)] += np.einsum("ngk...,gkc->ngc...", dyg, wg[_spatial(tap)])
    dxp = dxp.reshape((geom.batch, geom.in_channels) + geom.padded_spatial)
    return _from_channels_first(_crop(dxp, geom.pad_lo, geom.spatial), geom.layout)


def conv_backward_weight(x, dy, weight_shape, *, stride=1, padding=0, dilation=1, groups=1,
                         layout="NCHW"):
    """Gradient of :func:`conv` with respect to ``w``, in float64.

    ``weight_shape`` is the shape of ``w`` in ``layout``; ``dy`` must have the forward output shape.
    Returns ``dw`` of shape ``weight_shape``.
    """
    x = np.conj(_as_float64(x, "x"))  # complex: the gradient takes conj(x) (PyTorch's rule)
    dy = _as_float64(dy, "dy")
    geom = ConvGeometry.from_shapes(x.shape, tuple(weight_shape), stride=stride, padding=padding,
                                    dilation=dilation, groups=groups, layout=layout)
    _check_shape(dy, geom.output_shape, "dy", geom)
    g = geom.groups
    xp = _grouped(_pad(_to_channels_first(x, geom.layout), geom), g)      # (N, G, Cg, *padded)
    dyg = _grouped(_to_channels_first(dy, geom.layout), g)               # (N, G, Kg, *out)
    dyg = dyg.reshape(dyg.shape[:3] + (-1,))                              # (N, G, Kg, out)
    dw = np.zeros((g, geom.out_channels // g, geom.in_channels // g) + geom.kernel,
                  np.result_type(x, dy))
    for tap, window in _taps(geom.kernel, geom.stride, geom.dilation, geom.out_spatial):
        xs = xp[_spatial(window)]
        dw[_spatial(tap)] = np.einsum("ngkp,ngcp->gkc", dyg, xs.reshape(xs.shape[:3] + (-1,)))
    dw = dw.reshape((geom.out_channels, geom.in_channels // g) + geom.kernel)
    return _from_channels_first(dw, geom.layout)


def conv_transpose(x, w, bias=None, *, stride=1, padding=0, output_padding=0, dilation=1, groups=1,
                   layout="NCHW"):
    """Transposed N-d convolution (PyTorch ``ConvTransposeNd`` semantics) in float64, as a scatter.

    ``x``: ``(N, C_in, *spatial)`` (NCHW) or ``(N, *spatial, C_in)`` (NHWC); ``w``:
    ``(C_in, C_out/groups, *kernel)`` or ``(C_in, *kernel, C_out/groups)``; ``bias``: ``(C_out,)``.
    ``padding``: int, per-dim ints or per-dim ``(lo, hi)`` pairs (no string modes); it crops the
    full scatter result.  ``output_padding`` (< max(stride, dilation) per dim) adds elements at the
    end.  Output spatial size: :func:`cupyconv._core.geometry.transpose_output_spatial`.
    """
    if isinstance(padding, str):
        raise ValueError(f"conv_transpose padding must be an int, a per-dim tuple or per-dim (lo, hi) "
                         f"pairs; string modes such as 'same' are not supported, got {padding!r}")
    x = _as_float64(x, "x")
    w = _as_float64(w, "w")
    layout = normalize_layout(layout)
    if x.ndim != w.ndim or not 3 <= x.ndim <= 5:
        raise ValueError(f"x and w must both have 3, 4 or 5 dims (N, C and 1-3 spatial dims), got "
                         f"x shape {x.shape} and w shape {w.shape}")
    xc = _to_channels_first(x, layout)                                     # (N, C_in, *in)
    wc = _to_channels_first(w, layout)                                     # (C_in, Cog, *kernel)
    n, in_spatial, kernel = xc.shape[0], xc.shape[2:], wc.shape[2:]
    nsp = len(in_spatial)
    stride_t = per_dim(stride, nsp, "stride", 1)
    dilation_t = per_dim(dilation, nsp, "dilation", 1)
    pad_lo, pad_hi = normalize_padding(padding, in_spatial, kernel, stride_t, dilation_t)
    op = normalize_output_padding(output_padding, stride_t, dilation_t)
    out_spatial = transpose_output_spatial(in_spatial, kernel, stride_t, dilation_t, pad_lo, pad_hi,
                                           op)
    # The forward convolution this transposes (without output_padding): its input is our output,
    # its weight is w (K = C_in), its output must be x.  That validates every shape.
    c_out = wc.shape[1] * per_dim(groups, 1, "groups", 1)[0]
    fwd_spatial = transpose_output_spatial(in_spatial, kernel, stride_t, dilation_t, pad_lo, pad_hi,
                                           (0,) * nsp)
    if min(fwd_spatial) < 1:
        raise ValueError(f"conv_transpose padding lo={pad_lo} hi={pad_hi} is too large for input "
                         f"spatial {in_spatial}, kernel {kernel}, stride {stride_t}, dilation "
                         f"{dilation_t}: the output would be empty")
    fwd_in = (n, *fwd_spatial, c_out) if layout == "NHWC" else (n, c_out, *fwd_spatial)
    geom = ConvGeometry.from_shapes(fwd_in, w.shape, stride=stride_t,
                                    padding=tuple(zip(pad_lo, pad_hi)), dilation=dilation_t,
                                    groups=groups, layout=layout)
    _check_shape(x, geom.output_shape, "x", geom)
    g = geom.groups
    xg = _grouped(xc, g)                                                   # (N, G, Cig, *in)
    wg = _grouped_weight(wc, g)                                            # (G, Cig, Cog, *kernel)
    # Full scatter extent: every position any tap reaches, plus output_padding at the end.
    full = tuple(o + lo + hi for o, lo, hi in zip(out_spatial, pad_lo, pad_hi))
    buf = np.zeros((n, g, c_out // g) + full, np.result_type(x, w))
    for tap, window in _taps(kernel, stride_t, dilation_t, in_spatial):
        buf[_spatial(window)] += np.einsum("ngc...,gco->ngo...", xg, wg[_spatial(tap)])
    y = _crop(buf.reshape((n, c_out) + full), pad_lo, out_spatial)
    return _from_channels_first(_add_bias(y, bias, c_out), layout)


def im2col(x, kernel_size, *, stride=1, padding=0, dilation=1, layout="NCHW"):
    """Explicit im2col in float64, with the shapes and orderings of :func:`cupyconv.im2col`.

    NCHW: ``(N, C * prod(kernel), prod(out_spatial))``, rows ordered ``(c, *kernel)``;
    NHWC: ``(N, prod(out_spatial), prod(kernel) * C)``, columns ordered ``(*kernel, c)``.
    """
    x = _as_float64(x, "x")
    layout = normalize_layout(layout)
    kernel = per_dim(kernel_size, x.ndim - 2, "kernel_size", 1)
    channels = x.shape[-1] if layout == "NHWC" else x.shape[1]
    wshape = (1, *kernel, channels) if layout == "NHWC" else (1, channels, *kernel)
    geom = ConvGeometry.from_shapes(x.shape, wshape, stride=stride, padding=padding,
                                    dilation=dilation, layout=layout)
    xp = _pad(_to_channels_first(x, layout), geom)                        # (N, C, *padded)
    windows = [xp[(slice(None),) * 2 + window]
               for _, window in _taps(geom.kernel, geom.stride, geom.dilation, geom.out_spatial)]
    col = np.stack(windows, axis=2)                                       # (N, C, taps, *out)
    n, c, taps = col.shape[:3]
    if layout == "NHWC":
        col = np.moveaxis(col.reshape(n, c, taps, -1), 3, 1)     # (N, out, C, taps)
        return np.ascontiguousarray(np.swapaxes(col, 2, 3)).reshape(geom.col_shape)
    return col.reshape(geom.col_shape)


def col2im(col, input_shape, kernel_size, *, stride=1, padding=0, dilation=1, layout="NCHW"):
    """Float64 adjoint of :func:`im2col`: windows summed back onto an array of ``input_shape``."""
    col = _as_float64(col, "col")
    layout = normalize_layout(layout)
    input_shape = tuple(input_shape)
    kernel = per_dim(kernel_size, len(input_shape) - 2, "kernel_size", 1)
    channels = input_shape[-1] if layout == "NHWC" else input_shape[1]
    wshape = (1, *kernel, channels) if layout == "NHWC" else (1, channels, *kernel)
    geom = ConvGeometry.from_shapes(input_shape, wshape, stride=stride, padding=padding,
                                    dilation=dilation, layout=layout)
    _check_shape(col, geom.col_shape, "col", geom)
    n, c, taps = geom.batch, geom.in_channels, int(np.prod(geom.kernel))
    if layout == "NHWC":   # (N, out, taps * C) -> (N, C, taps, *out)
        col = np.moveaxis(col.reshape(n, -1, taps, c), (3, 2), (1, 2))
    cols = col.reshape((n, c, taps) + geom.out_spatial)
    padded = np.zeros((n, c) + geom.padded_spatial)
    for i, (_, window) in enumerate(_taps(geom.kernel, geom.stride, geom.dilation, geom.out_spatial)):
        padded[(slice(None),) * 2 + window] += cols[:, :, i]
    return _from_channels_first(_crop(padded, geom.pad_lo, geom.spatial), layout)
