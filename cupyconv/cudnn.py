"""The convolutions of CuPy's removed ``cupy.cudnn`` module, on cupyconv's kernels.

CuPy 14 removed ``cupy.cudnn`` (and ``cupy.cuda.cudnn``).  Code written against it -- sigpy's GPU
convolutions, Chainer-era layers -- works again by importing this module in its place::

    try:
        from cupy import cudnn            # CuPy <= 13 with cuDNN
    except ImportError:
        from cupyconv import cudnn        # CuPy 14: the same calls, no cuDNN

The three functions keep CuPy 13's signatures and contract: they write into the output array
they are given (``y``, ``gW``) and return None; ``b`` (or None) is added per channel to the
result of the forward and backward-data passes; ``pad``, ``stride`` and ``dilation`` are
per-spatial-dim tuples (ints are accepted too; ``dilation=None`` means 1); 1-3 spatial dims.
On top of that contract (supersets, never a different result):

- dtypes: float16, float32, float64 as in cuDNN, plus bfloat16 and complex64/complex128
  (complex gradients conjugate as :func:`cupyconv.conv_backward_data` does, see below);
- inputs of any strides (CuPy made them contiguous itself); outputs of any strides too (CuPy
  required C-contiguous 4-d outputs): a non-contiguous output receives a copy of the result;
- ``d_layout`` ``CUDNN_TENSOR_NHWC`` for any number of spatial dims, and a ``w_layout`` other
  than ``d_layout`` (the weight is read, or ``gW`` written, through a transposed view).

Arguments without a cupyconv counterpart:

- ``tensor_core``: "auto", "always" or "never" as in CuPy (anything else: ValueError).  It sets
  the float32 precision: "always" allows TF32 tensor cores (``precision="tf32"``), "never"
  keeps exact float32 products, "auto" takes cupyconv's process default (exact unless
  ``CUPYCONV_ALLOW_TF32=1``).  float16 and bfloat16 use tensor cores where the GPU has them,
  with float32 accumulation, whatever the mode; float64 is always exact.
- ``auto_tune``: accepted; cupyconv's ``method="auto"`` choice runs.  Measured choices are
  process-wide in cupyconv: ``CUPYCONV_AUTOTUNE=1`` (see :func:`cupyconv.tune`).
- ``deterministic``: accepted; cupyconv's backward passes are always deterministic (no
  atomics: repeated calls give bitwise-equal results).

Errors: every bad argument raises ValueError or TypeError before any kernel is compiled or
launched, leaving ``y`` / ``gW`` untouched, and the message names the argument as CuPy 13's
signatures do (``x``, ``W``, ``b``, ``y``, ``gy``, ``gW``, ``pad``, ``d_layout`` ...): the
functions run cupyconv's passes inside :func:`cupyconv._core.names.spoken_as`, which gives
cupyconv's checks this module's names.  In ``convolution_backward_data`` that makes ``x`` the gradient of the
output and ``y`` the gradient of the input (its shape sets the problem); in
``convolution_backward_filter``, ``gy`` the gradient of the output and ``gW`` the result.  As in
CuPy 13 (cuDNN's descriptors), arrays are batched: ``x`` and ``y`` (and ``gy``) have as many
dims as the filter.

Complex data: the backward functions are gradients in PyTorch's convention, so
``convolution_backward_data(W, gy, ...)`` computes the transposed convolution with ``conj(W)``
and ``convolution_backward_filter(x, gy, ...)`` correlates ``conj(x)``: the adjoints of the
forward map, which sigpy built from four real calls and explicit conjugates.
"""

from __future__ import annotations

from cupyconv._core.arrays import check_out_disjoint, described_array, require_array, same_device
from cupyconv._core.foreign import is_c_contiguous
from cupyconv._core.geometry import as_int
from cupyconv._core.names import spoken_as
from cupyconv.backward import conv_backward_data, conv_backward_weight
from cupyconv.conv import conv

__all__ = ["CUDNN_TENSOR_NCHW", "CUDNN_TENSOR_NHWC", "convolution_forward",
           "convolution_backward_data", "convolution_backward_filter", "get_max_workspace_size",
           "set_max_workspace_size", "is_tensor_core_available"]

# The values of cuDNN's cudnnTensorFormat_t, which CuPy exposed as cupy.cuda.cudnn.CUDNN_TENSOR_*.
CUDNN_TENSOR_NCHW = 0
CUDNN_TENSOR_NHWC = 1
_LAYOUTS = {CUDNN_TENSOR_NCHW: "NCHW", CUDNN_TENSOR_NHWC: "NHWC"}
_TENSOR_CORE_MODES = {"auto": None, "always": "tf32", "never": "exact"}

# How each function's arguments are named by cupyconv's checks (the parameters of conv,
# conv_backward_data and conv_backward_weight, and the roles of the shapes in the convolution:
# input, weight, output) and by CuPy 13.  The functions below hand their arrays to cupyconv's
# checks under cupyconv's names (require_array(y, "out")); the maps spell them CuPy 13's way.
_NAMES_ALL = {"padding": "pad", "layout": "d_layout", "bias": "b"}
_NAMES = {
    "convolution_forward": {
        "x": "x", "w": "W", "out": "y", "input": "x", "input_shape": "x.shape", "weight": "W",
        "weight_shape": "W.shape", "output": "y"},
    # x: the gradient of the forward output; y: of its input, whose shape sets the problem
    "convolution_backward_data": {
        "dy": "x", "w": "W", "out": "y", "input": "y", "input_shape": "y.shape", "weight": "W",
        "weight_shape": "W.shape", "output": "x"},
    "convolution_backward_filter": {
        "x": "x", "dy": "gy", "out": "gW", "input": "x", "input_shape": "x.shape",
        "weight": "gW", "weight_shape": "gW.shape", "output": "gy"},
}


def _spoken_as(function: str, w_layout: str, d_layout: str):
    """The names of ``function``'s arguments in error messages.  With ``w_layout != d_layout``
    the checks see the filter through a view in the data layout: messages that print its shape
    say so."""
    names = {**_NAMES_ALL, **_NAMES[function]}
    if w_layout != d_layout:
        for role in ("weight", "weight_shape"):
            names[role] += f" (w_layout {w_layout}, viewed as {d_layout})"
    return spoken_as(names)

_max_workspace_size = 8 * 1024 * 1024  # CuPy's default; cupyconv sizes its own buffers


def get_max_workspace_size() -> int:
    """The workspace limit last set with :func:`set_max_workspace_size` (8 MiB by default), kept
    for code that reads it: cupyconv's kernels size their own scratch buffers."""
    return _max_workspace_size


def set_max_workspace_size(size) -> None:
    """Record a workspace limit, as CuPy's function did; it does not change what runs."""
    global _max_workspace_size
    size = as_int(size, "size")
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    _max_workspace_size = size


def is_tensor_core_available(dtype) -> bool:
    """Whether a ``dtype`` convolution may use tensor cores on the current GPU: float16 and
    bfloat16 on NVIDIA compute capability 8.0+ (or AMD CDNA), float32 there with
    ``tensor_core="always"`` (TF32)."""
    import cupy

    from cupyconv._core.dtypes import dtype_name
    from cupyconv._core.precision import _matrix_dtypes

    name = dtype_name(dtype)
    have = _matrix_dtypes(cupy.cuda.Device().id)
    return name in have or (name == "float32" and "tf32" in have)


def _layout(value, name: str) -> str:
    if isinstance(value, bool) or value not in _LAYOUTS:
        raise ValueError(f"{name} must be CUDNN_TENSOR_NCHW ({CUDNN_TENSOR_NCHW}) or "
                         f"CUDNN_TENSOR_NHWC ({CUDNN_TENSOR_NHWC}), got {value!r}")
    return _LAYOUTS[value]


def _precision(tensor_core):
    if not isinstance(tensor_core, str) or tensor_core not in _TENSOR_CORE_MODES:
        raise ValueError(f"tensor_core must be one of 'always', 'auto' or 'never', got "
                         f"{tensor_core!r}")
    return _TENSOR_CORE_MODES[tensor_core]


def _same_ndim(w_name: str, w, arrays: dict) -> None:
    """CuPy 13's arrays are batched, ``(N, C, *spatial)`` with as many dims as the filter
    (cupyconv's unbatched form is no part of this API), and the filter has 1-3 spatial dims."""
    if not 3 <= w.ndim <= 5:
        raise ValueError(f"{w_name} must have 3, 4 or 5 dims (K, C/groups and 1-3 spatial dims), "
                         f"got shape {tuple(w.shape)}")
    for name, a in arrays.items():
        if a.ndim != w.ndim:
            raise ValueError(f"{name} must have as many dims as {w_name} ({w.ndim}: N, C and "
                             f"{w.ndim - 2} spatial dims), got shape {tuple(a.shape)}")


def _weight_view(w, w_layout: str, d_layout: str):
    """``w`` (an array in ``w_layout``) as a view in the data layout, which cupyconv's weights
    follow: channels moved between dim 1 and the last dim."""
    if w_layout == d_layout:
        return w
    import cupy

    w = require_array(w, "w")  # (a CuPy view of another library's array)
    return cupy.moveaxis(w, 1, -1) if d_layout == "NHWC" else cupy.moveaxis(w, -1, 1)


def _options(pad, stride, dilation, groups, d_layout, w_layout, tensor_core):
    d = _layout(d_layout, "d_layout")
    return d, _layout(w_layout, "w_layout"), dict(
        stride=stride, padding=pad, dilation=1 if dilation is None else dilation,
        groups=groups, layout=d, precision=_precision(tensor_core))


def _write(run, target) -> None:
    """``run(out)``, the pass writing its result into ``out``: ``target`` itself where it is
    C-contiguous, else a new C-contiguous array of its shape and dtype (on its device) that is
    then copied into ``target``.  Either way the pass checks ``out`` against the result's shape
    and dtype before any work, so a wrong ``target`` of any strides is refused and left as it
    was."""
    if is_c_contiguous(target):
        run(target)
        return
    import cupy

    target = require_array(target, "out")  # (a CuPy view of another library's array)

    with target.device:
        out = cupy.empty(target.shape, target.dtype)
    run(out)
    target[...] = out


def _channel_bias(b, y, layout: str):
    """``b`` (None, or one value per channel of ``y``, a CuPy array) as a view that broadcasts
    over ``y``; checked before any work, as every argument is: ``y += b`` runs after the pass
    has written ``y``, so ``b`` must not overlap it."""
    if b is None:
        return None
    b = require_array(b, "bias")  # (a view of another library's b; y is a CuPy array here)
    same_device({"bias": b, "out": y})
    check_out_disjoint(y, {"bias": b})
    if b.ndim != 1 or b.shape[0] != (y.shape[-1] if layout == "NHWC" else y.shape[1]):
        raise ValueError(f"b must have one value per channel of y ({y.shape}, {layout}), got "
                         f"shape {b.shape}")
    if b.dtype != y.dtype:
        raise TypeError(f"b has dtype {b.dtype.name} but y has dtype {y.dtype.name}: all "
                        f"operands of one convolution must share a dtype")
    return b if layout == "NHWC" else b.reshape((-1,) + (1,) * (y.ndim - 2))


def convolution_forward(x, W, b, y, pad, stride, dilation, groups, *, auto_tune, tensor_core,
                        d_layout=CUDNN_TENSOR_NCHW, w_layout=CUDNN_TENSOR_NCHW):
    """``y[...] = conv(x, W) + b``: cross-correlation, as ``cudnnConvolutionForward`` with
    ``CUDNN_CROSS_CORRELATION`` (flip ``W`` for a true convolution, as sigpy does).

    ``x``: ``(N, C, *spatial)`` (``d_layout`` NCHW) or ``(N, *spatial, C)`` (NHWC); ``W``:
    ``(K, C/groups, *kernel)`` or ``(K, *kernel, C/groups)`` by ``w_layout``; ``b``: ``(K,)`` or
    None; ``y``: the output, written in place.  Returns None.
    """
    del auto_tune  # see the module docstring
    d, wl, options = _options(pad, stride, dilation, groups, d_layout, w_layout, tensor_core)
    with _spoken_as("convolution_forward", wl, d):  # arguments go in under cupyconv's names
        y = described_array(y, "out")
        W = described_array(W, "w")
        b = None if b is None else described_array(b, "bias")
        x = described_array(x, "x")
        _same_ndim("W", W, {"x": x, "y": y})
        w = _weight_view(W, wl, d)
        _write(lambda out: conv(x, w, b, out=out, **options), y)


def convolution_backward_data(W, x, b, y, pad, stride, dilation, groups, *, deterministic,
                              auto_tune, tensor_core, d_layout=CUDNN_TENSOR_NCHW,
                              w_layout=CUDNN_TENSOR_NCHW):
    """``y[...] = conv_backward_data(x, W) + b``: the gradient of :func:`convolution_forward`
    with respect to its input (``x`` here is that convolution's output or its gradient, ``y``
    has the shape of its input), which is also the transposed convolution of ``x`` (Chainer's
    deconvolution calls it so, with a bias).  Returns None."""
    del deterministic, auto_tune  # see the module docstring
    d, wl, options = _options(pad, stride, dilation, groups, d_layout, w_layout, tensor_core)
    with _spoken_as("convolution_backward_data", wl, d):  # (cupyconv's names, see above)
        y = described_array(y, "out")
        W = described_array(W, "w")
        b = None if b is None else described_array(b, "bias")
        x = described_array(x, "dy")
        _same_ndim("W", W, {"x": x, "y": y})
        w = _weight_view(W, wl, d)
        if b is not None:
            y = require_array(y, "out")  # (y += b below: a CuPy view of another library's y)
        b = _channel_bias(b, y, d)
        _write(lambda out: conv_backward_data(x, w, y.shape, out=out, **options), y)
        if b is not None:
            y += b


def convolution_backward_filter(x, gy, gW, pad, stride, dilation, groups, *, deterministic,
                                auto_tune, tensor_core, d_layout=CUDNN_TENSOR_NCHW,
                                w_layout=CUDNN_TENSOR_NCHW):
    """``gW[...] = conv_backward_weight(x, gy)``: the gradient of :func:`convolution_forward`
    with respect to ``W``, written into ``gW`` (in ``w_layout``).  Returns None."""
    del deterministic, auto_tune  # see the module docstring
    d, wl, options = _options(pad, stride, dilation, groups, d_layout, w_layout, tensor_core)
    with _spoken_as("convolution_backward_filter", wl, d):  # (cupyconv's names, see above)
        gW = described_array(gW, "out")
        x = described_array(x, "x")
        gy = described_array(gy, "dy")
        _same_ndim("gW", gW, {"x": x, "gy": gy})
        gw = _weight_view(gW, wl, d)
        _write(lambda out: conv_backward_weight(x, gy, gw.shape, out=out, **options), gw)

