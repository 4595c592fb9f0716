"""``scipy.ndimage``-compatible filtering of N-d CuPy arrays.

The same signatures, defaults, boundary modes, output dtypes and exceptions as ``scipy.ndimage``
(SciPy's docstrings describe each argument in full).  Separable filters run as one 1-d pass per
filtered axis (shared-memory tiles along the axis, the boundary applied while staging the halo),
the passes along the last two axes fused into one read of the array where the output is float32 or
float64 and that is also the compute dtype (see ``_ndimage/plans.py``);
``correlate``/``convolve`` run a shared-memory tiled N-d kernel (arrays of up to 3 dims whose
tile fits), a direct N-d kernel otherwise, or a 1-d pass where only one axis is filtered.  A call
equal to an earlier validated one (the input's shape, strides, dtype, device and alignment, every
option by value) skips validation and planning: it allocates and launches (``_prepared``).

Differences from SciPy, where matching it would be wrong or impossible on a GPU:

- inputs must be CuPy arrays (NumPy arrays get a TypeError that says how to move them), and
  ``bool`` and ``float16`` inputs are refused (cast them);
- float32 and complex64 data are summed in single precision (SciPy sums in float64): results
  agree to float32 rounding;
- ``correlate``/``convolve`` in mode ``reflect`` map halos longer than twice the axis periodically,
  as ``correlate1d`` and ``numpy.pad(mode="symmetric")`` do; SciPy's N-d routine reads ``cval``
  at a few of those far positions (a SciPy defect);
- ``correlate``/``convolve`` filter at most 8 dims.
"""

from __future__ import annotations

import operator

import numpy as np

from cupyconv._dispatch.callcache import call_key, lookup, remember
from cupyconv._ndimage.args import (_axes, _axis, _host_weights, _input, _kernel_checks,
                                    _nd_weights, _refuse_complex_cval, _resolve_output,
                                    gaussian_term_sigmas, uniform_axes)
from cupyconv._ndimage.boundary import mode_code
from cupyconv._ndimage.callkey import _frozen, _Uncacheable
from cupyconv._ndimage.gaussian import _gaussian_weights
# public: the taps SciPy's Gaussian filters use
from cupyconv._ndimage.gaussian import gaussian_kernel1d  # noqa: F401
from cupyconv._ndimage.plans import (_dense_launchers, _edge_chain, _gaussian_chain, _Pass,
                                     _uniform_pass)
from cupyconv._ndimage.runners import (_chain_runner, _correlate1d_runner, _runner,
                                       _sum_over_axes, _zeros_runner)

__all__ = ["correlate", "convolve", "correlate1d", "convolve1d", "gaussian_filter",
           "gaussian_filter1d", "uniform_filter", "uniform_filter1d", "sobel", "prewitt",
           "laplace", "gaussian_laplace", "gaussian_gradient_magnitude"]


# --------------------------------------------------------------------------- prepared calls
# A public filter validates its arguments and plans its launches in ``_prepare_<filter>(input,
# output, *options) -> (x, run)``; ``run(x)`` only allocates and launches.  A call whose input
# (shape, strides, dtype, device, alignment), current device and options by value equal those of
# an earlier call that passed validation reuses that call's ``run`` (kept in
# cupyconv._dispatch.callcache, which clear_caches() empties): everything that can reject a call
# depends on the key alone, so warm calls raise nothing the full path would.


def _device_id() -> int:
    import cupy

    return cupy.cuda.runtime.getDevice()


def _call_key(name: str, input, options: tuple):
    """The prepared-call key of ``name(input, *options)``, or None where ``input`` is not a CuPy
    ndarray (the runners take CuPy arrays) or an option cannot be keyed by value.  The current
    device is part of it: the full path allocates and launches there (device copies of weights,
    the loaded kernels)."""
    base, operands = call_key("ndimage." + name, (input,), ())
    if base is None or operands[0] is not input:
        return None
    try:
        return base, _device_id(), tuple(map(_frozen, options))
    except _Uncacheable:
        return None


def _prepared(name: str, prepare, input, output, *options):
    """Every public filter: the prepared call of an equal earlier call, else ``prepare(input,
    output, *options)`` validates and plans, its runner computes the result and is remembered.

    Not remembered: calls with ``output`` an array (the key holds no array; its checks depend on
    addresses) and calls whose result dtype is not the requested ``output`` dtype, which SciPy's
    rules reach only with a warning (a real dtype promoted to complex) that every call must give.
    """
    # (output as _resolve_output reads it: None or a dtype is keyed, anything else is an array)
    to_array = output is not None and not isinstance(output, (type, np.dtype, str))
    key = None if to_array else _call_key(name, input, (output,) + options)
    run = lookup(key)
    if run is not None:
        return run(input)
    x, run = prepare(input, output, *options)
    result = run(x)
    if key is not None and (output is None or result.dtype == np.dtype(output)):
        remember(key, run)
    return result


# --------------------------------------------------------------------------- 1-d filters
def _prepare_correlate1d(input, output, weights, axis, mode, cval, origin):
    x = _input(input)
    w = _host_weights(weights)
    if w.dtype.kind == "c":
        w = w.conj()
    out_arr, out_dtype = _resolve_output(output, x, x.dtype.kind == "c" or w.dtype.kind == "c")
    return x, _correlate1d_runner(x, w, axis, out_arr, out_dtype, mode, cval, origin)


def correlate1d(input, weights, axis=-1, output=None, mode="reflect", cval=0.0, origin=0):
    """Correlate ``input`` along ``axis`` with the 1-d ``weights`` (as ``scipy.ndimage.correlate1d``;
    complex weights are conjugated).

    ``mode``: 'reflect', 'constant' (with ``cval``), 'nearest', 'mirror', 'wrap', or SciPy's
    aliases 'grid-mirror', 'grid-constant', 'grid-wrap'.  ``origin`` shifts the window:
    ``-(len(weights) // 2) <= origin <= (len(weights) - 1) // 2``.  ``output``: an array of the
    input's shape or a dtype; by default the input's dtype (complex if the weights are).
    """
    return _prepared("correlate1d", _prepare_correlate1d, input, output, weights, axis, mode, cval,
                     origin)


def _prepare_convolve1d(input, output, weights, axis, mode, cval, origin):
    x = _input(input)
    w = _host_weights(weights)
    if w.ndim == 0:  # SciPy reverses the first axis before any check (IndexError)
        raise IndexError("weights: convolve1d reverses the weights' first axis, and 0-d weights "
                         "have none; weights must be 1-d")
    # correlation with the reversed weights (not conjugated: correlate1d's conjugation is undone)
    # and the mirrored origin (an even length shifts it by one)
    origin = -origin - (1 - w.shape[0] % 2)
    out_arr, out_dtype = _resolve_output(output, x, x.dtype.kind == "c" or w.dtype.kind == "c")
    return x, _correlate1d_runner(x, w[::-1], axis, out_arr, out_dtype, mode, cval, origin)


def convolve1d(input, weights, axis=-1, output=None, mode="reflect", cval=0.0, origin=0):
    """Convolve ``input`` along ``axis`` with the 1-d ``weights`` (as ``scipy.ndimage.convolve1d``):
    correlation with the reversed weights, the origin mirrored (an even length shifts it by one)."""
    return _prepared("convolve1d", _prepare_convolve1d, input, output, weights, axis, mode, cval,
                     origin)


# --------------------------------------------------------------------------- N-d correlation
def _prepare_correlate_nd(input, output, weights, mode, cval, origin, axes, convolution):
    """SciPy's correlate/convolve, checked in its order.  Complex data (input or weights) is
    filtered as real and imaginary parts by SciPy: its output is resolved (complex) and a complex
    cval of real data refused first.  Then the axes, weights and origins (:func:`_nd_weights`),
    the output of real data, the mode, and what the C routine refuses."""
    x = _input(input)
    w = _host_weights(weights)
    complex_weights = w.dtype.kind == "c"
    if complex_weights and not convolution:
        w = w.conj()  # as np.correlate: the weights, not the input
    complex_data = x.dtype.kind == "c" or complex_weights
    if complex_data:
        out_arr, out_dtype = _resolve_output(output, x, True)
        if complex_weights:
            _refuse_complex_cval(cval, x)
    w, origins = _nd_weights(x.ndim, w, origin, axes, convolution)
    if not complex_data:
        out_arr, out_dtype = _resolve_output(output, x, False)
    if not isinstance(mode, str) and np.iterable(mode):
        raise RuntimeError("A sequence of modes is not supported")
    code = mode_code(mode)
    origins = [operator.index(o) for o in origins]  # (SciPy's C routine takes integers)
    cval = _kernel_checks(x, out_dtype, complex_weights, cval)
    if w.size == 0:
        return x, _zeros_runner(out_arr, out_dtype)
    taps = w.astype(np.complex128 if complex_data else np.float64)
    left = [s // 2 + o for s, o in zip(w.shape, origins)]

    filtered = [d for d, s in enumerate(w.shape) if s > 1]
    if len(filtered) <= 1:  # one filtered axis (or a single tap): a 1-d pass
        d = filtered[0] if filtered else x.ndim - 1
        return x, _chain_runner(x, [_Pass(d, taps.ravel(), left[d], code, cval)], out_arr,
                                out_dtype)

    return x, _runner(x, lambda: _dense_launchers(x, out_dtype, taps, left, code, cval,
                                                 complex_data), out_arr, out_dtype)


def correlate(input, weights, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
    """N-d correlation of ``input`` with ``weights`` (as ``scipy.ndimage.correlate``).

    ``weights`` has one dim per axis of ``axes`` (default: all); ``origin`` is a scalar or one per
    axis; complex weights are conjugated.  Boundary modes and ``output`` as in :func:`correlate1d`.
    """
    return _prepared("correlate", _prepare_correlate_nd, input, output, weights, mode, cval, origin,
                     axes, False)


def convolve(input, weights, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
    """N-d convolution of ``input`` with ``weights`` (as ``scipy.ndimage.convolve``): correlation
    with the weights reversed along every axis and each origin mirrored (even sizes shift by
    one)."""
    return _prepared("convolve", _prepare_correlate_nd, input, output, weights, mode, cval, origin,
                     axes, True)


# --------------------------------------------------------------------------- Gaussian filters
def _prepare_gaussian_filter1d(input, output, sigma, axis, order, mode, cval, truncate, radius):
    x = _input(input)
    taps, _ = _gaussian_weights(sigma, order, truncate, radius)
    # SciPy's gaussian_filter1d is correlate1d with these taps, the caller's output included
    out_arr, out_dtype = _resolve_output(output, x, x.dtype.kind == "c")
    return x, _correlate1d_runner(x, taps, axis, out_arr, out_dtype, mode, cval, 0)


def gaussian_filter1d(input, sigma, axis=-1, order=0, output=None, mode="reflect", cval=0.0,
                      truncate=4.0, *, radius=None):
    """1-d Gaussian filter (or its ``order``-th derivative, 0-3 and beyond) along ``axis``, as
    ``scipy.ndimage.gaussian_filter1d``: radius ``int(truncate * sigma + 0.5)`` unless ``radius``
    is given."""
    return _prepared("gaussian_filter1d", _prepare_gaussian_filter1d, input, output, sigma, axis,
                     order, mode, cval, truncate, radius)


def _prepare_gaussian_filter(input, output, sigma, order, mode, cval, truncate, radius, axes):
    x = _input(input)
    # (not promoted to complex: SciPy hands a real output to passes that then refuse complex data)
    out_arr, out_dtype = _resolve_output(output, x, False)
    chain = _gaussian_chain(x, out_dtype, sigma, order, mode, cval, truncate, radius, axes)
    return x, _chain_runner(x, chain, out_arr, out_dtype)


def gaussian_filter(input, sigma, order=0, output=None, mode="reflect", cval=0.0, truncate=4.0,
                    *, radius=None, axes=None):
    """N-d Gaussian filter as ``scipy.ndimage.gaussian_filter``: one 1-d pass per axis of ``axes``
    whose sigma exceeds 1e-15; ``sigma``, ``order``, ``mode`` and ``radius`` are scalars or one
    per entry of ``axes``.  Each pass writes the output dtype, as SciPy's do."""
    return _prepared("gaussian_filter", _prepare_gaussian_filter, input, output, sigma, order, mode,
                     cval, truncate, radius, axes)


# --------------------------------------------------------------------------- uniform filters
def _prepare_uniform_filter1d(input, output, size, axis, mode, cval, origin):
    x = _input(input)
    axis = _axis(axis, x.ndim)
    out_arr, out_dtype = _resolve_output(output, x, x.dtype.kind == "c")
    p = _uniform_pass(x, out_dtype, axis, size, origin, mode, cval)
    return x, _chain_runner(x, [p], out_arr, out_dtype)


def uniform_filter1d(input, size, axis=-1, output=None, mode="reflect", cval=0.0, origin=0):
    """1-d moving average of ``size`` values along ``axis``, as ``scipy.ndimage.uniform_filter1d``."""
    return _prepared("uniform_filter1d", _prepare_uniform_filter1d, input, output, size, axis, mode,
                     cval, origin)


def _prepare_uniform_filter(input, output, size, mode, cval, origin, axes):
    x = _input(input)
    out_arr, out_dtype = _resolve_output(output, x, x.dtype.kind == "c")
    chain = [_uniform_pass(x, out_dtype, ax, s, o, m, cval)
             for ax, s, o, m in uniform_axes(size, origin, mode, axes, x.ndim)]
    return x, _chain_runner(x, chain, out_arr, out_dtype)


def uniform_filter(input, size=3, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
    """N-d moving average, one 1-d pass per axis of ``axes`` whose size exceeds 1, as
    ``scipy.ndimage.uniform_filter``; ``size``, ``origin`` and ``mode`` scalar or per entry of
    ``axes``.  A float size is truncated to an integer, as SciPy does (3.0 filters with 3, 2.5
    with 2; sizes of at most 1 leave their axis alone); ``uniform_filter1d`` takes integers only,
    as SciPy's."""
    return _prepared("uniform_filter", _prepare_uniform_filter, input, output, size, mode, cval,
                     origin, axes)


# --------------------------------------------------------------------------- derivatives
def _prepare_edge_filter(input, output, axis, mode, cval, smooth):
    x = _input(input)
    axis = _axis(axis, x.ndim)
    out_arr, out_dtype = _resolve_output(output, x, False)
    chain = _edge_chain(x, out_dtype, axis, mode, cval, smooth)
    return x, _chain_runner(x, chain, out_arr, out_dtype)


_SOBEL_SMOOTH, _PREWITT_SMOOTH = (1.0, 2.0, 1.0), (1.0, 1.0, 1.0)


def sobel(input, axis=-1, output=None, mode="reflect", cval=0.0):
    """Sobel derivative along ``axis`` ([-1, 0, 1], smoothed by [1, 2, 1] along every other
    axis), as ``scipy.ndimage.sobel``: each pass writes the output dtype, so integer outputs wrap
    between passes as SciPy's do."""
    return _prepared("sobel", _prepare_edge_filter, input, output, axis, mode, cval, _SOBEL_SMOOTH)


def prewitt(input, axis=-1, output=None, mode="reflect", cval=0.0):
    """Prewitt derivative along ``axis`` ([-1, 0, 1], smoothed by [1, 1, 1] along every other
    axis), as ``scipy.ndimage.prewitt``: each pass writes the output dtype, as SciPy's do."""
    return _prepared("prewitt", _prepare_edge_filter, input, output, axis, mode, cval,
                     _PREWITT_SMOOTH)


_LAPLACE_WEIGHTS = np.array([1.0, -2.0, 1.0])


def _prepare_laplace(input, output, mode, cval, axes):
    x = _input(input)

    def term(ax, dtype, m):
        return _correlate1d_runner(x, _LAPLACE_WEIGHTS, ax, None, dtype, m, cval, 0)

    return x, _sum_over_axes(x, output, mode, axes, term, False)


def laplace(input, output=None, mode="reflect", cval=0.0, *, axes=None):
    """Sum of second differences ([1, -2, 1]) along ``axes``, as ``scipy.ndimage.laplace``."""
    return _prepared("laplace", _prepare_laplace, input, output, mode, cval, axes)


def _gaussian_term(x, sigma, derivative_order, cval, kwargs):
    """term(ax, dtype, mode) of the Gaussian Laplace / gradient magnitude: the runner of
    ``gaussian_filter`` of ``x`` with ``sigma`` (as :func:`gaussian_term_sigmas` gives it, or a
    scalar), the derivative order on ``ax`` and 0 on every other dim, ``mode`` on every dim;
    ``kwargs`` (``truncate``, ``radius``) pass to it, as in SciPy."""
    unknown = set(kwargs) - {"truncate", "radius"}
    if unknown:
        raise TypeError(f"unexpected keyword arguments {sorted(unknown)}")
    truncate, radius = kwargs.get("truncate", 4.0), kwargs.get("radius")

    def term(ax, dtype, m):
        order = [0] * x.ndim
        order[ax] = derivative_order
        return _prepare_gaussian_filter(x, dtype, sigma, order, m, cval, truncate, radius,
                                        None)[1]

    return term


def _prepare_gaussian_laplace(input, output, sigma, mode, cval, axes, kwargs):
    x = _input(input)
    sigmas = gaussian_term_sigmas("gaussian_laplace", sigma, _axes(axes, x.ndim), x.ndim)
    term = _gaussian_term(x, sigmas, 2, cval, kwargs)
    return x, _sum_over_axes(x, output, mode, axes, term, False)


def gaussian_laplace(input, sigma, output=None, mode="reflect", cval=0.0, *, axes=None, **kwargs):
    """Laplace of Gaussian: the sum over ``axes`` of Gaussian second derivatives, as
    ``scipy.ndimage.gaussian_laplace``; ``sigma`` is a scalar or one per entry of ``axes`` (the
    other dims are not smoothed), ``truncate``/``radius`` pass to the Gaussian."""
    return _prepared("gaussian_laplace", _prepare_gaussian_laplace, input, output, sigma, mode,
                     cval, axes, kwargs)


def _prepare_gaussian_gradient_magnitude(input, output, sigma, mode, cval, axes, kwargs):
    x = _input(input)
    # sigma goes to every term's gaussian_filter as given (gaussian_term_sigmas): checked there
    term = _gaussian_term(x, sigma, 1, cval, kwargs)
    return x, _sum_over_axes(x, output, mode, axes, term, True)


def gaussian_gradient_magnitude(input, sigma, output=None, mode="reflect", cval=0.0, *, axes=None,
                                **kwargs):
    """Gradient magnitude with Gaussian derivatives, as ``scipy.ndimage.gaussian_gradient_magnitude``:
    sqrt of the sum over ``axes`` of squared first derivatives.  As in SciPy, each derivative is
    a ``gaussian_filter`` over every dim of the input: ``sigma`` (a scalar, or one per dim of the
    input) also smooths the dims outside ``axes``, and each term runs its entry of ``mode`` on
    every dim."""
    return _prepared("gaussian_gradient_magnitude", _prepare_gaussian_gradient_magnitude, input,
                     output, sigma, mode, cval, axes, kwargs)
