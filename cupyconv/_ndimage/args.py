"""The arguments of the ``cupyconv.ndimage`` filters, checked and normalized as SciPy's are:
inputs, host weights, outputs and their dtypes, axes, per-axis sequences, origins, complex cvals,
and the per-axis arguments that the N-d filters (and their dask forms) derive from them."""

from __future__ import annotations

import operator
import os
import sys
import warnings

import numpy as np

from cupyconv._core.arrays import require_array
from cupyconv._ndimage.dtypes import ND_CTYPES, check_input_dtype, default_output_dtype


def _cupy():
    import cupy

    return cupy


def _input(a, name: str = "input"):
    a = require_array(a, name)
    check_input_dtype(a.dtype, name)
    return a


def _host_weights(weights, name: str = "weights") -> np.ndarray:
    """Weights as a NumPy array (they are small and shaped on the host); CuPy arrays are copied."""
    if hasattr(weights, "__cuda_array_interface__"):
        weights = _cupy().asnumpy(weights)
    w = np.asarray(weights)
    if w.dtype.kind not in "biufc":
        raise TypeError(f"{name} must be numeric, got dtype {w.dtype}")
    return w


def _host_weights_1d(weights) -> np.ndarray:
    """:func:`_host_weights` of a 1-d filter: a RuntimeError (SciPy's) unless 1-d and non-empty."""
    w = _host_weights(weights)
    if w.ndim != 1 or w.shape[0] < 1:
        raise RuntimeError(f"no filter weights given: weights must be 1-d and non-empty, got "
                           f"shape {w.shape}")
    return w

# the package: cupyconv/, one level above this module
_PACKAGE_DIR = os.path.dirname(os.path.dirname(__file__)) + os.sep


def _user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning issued by the caller of this function name the
    first frame outside cupyconv: the user's call, however deep the package's own calls go (a
    public filter, its prepared call, a Gaussian Laplace's terms)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


def _resolve_output(output, x, complex_output: bool):
    """(the caller's output array or None, the output dtype): SciPy's ``_get_output`` for
    ``output`` as None, a dtype (or type, or dtype name) or an array of the input's shape; where
    ``complex_output``, a real dtype is promoted to complex with a warning and a real dtype name
    or array is refused.  Whether a pass may write that dtype is ``plans._pass``'s rule: a filter
    that runs none copies its input into any of them, as SciPy does."""
    if output is None:
        dtype = default_output_dtype(x.dtype.name, complex_output)
        arr = None
    elif isinstance(output, (type, np.dtype)):
        dtype = np.dtype(output)
        if complex_output and dtype.kind != "c":
            warnings.warn("promoting specified output dtype to complex",
                          stacklevel=_user_stacklevel())
            dtype = np.promote_types(dtype, np.complex64)
        arr = None
    elif isinstance(output, str):
        dtype = np.dtype(output)
        if complex_output and dtype.kind != "c":
            raise RuntimeError(f"output={output!r}: output must have complex dtype")
        if not issubclass(dtype.type, np.number):
            raise RuntimeError(f"output={output!r}: output must have numeric dtype")
        arr = None
    else:
        arr = require_array(output, "output")
        if arr.shape != x.shape:
            raise RuntimeError(f"output shape not correct: output has shape {arr.shape}, the "
                               f"input {x.shape}")
        if complex_output and arr.dtype.kind != "c":
            raise RuntimeError("output must have complex dtype")
        dtype = arr.dtype
    if dtype.name not in ND_CTYPES:
        raise TypeError(f"output dtype {dtype.name} is not supported; use one of "
                        f"{', '.join(ND_CTYPES)}")
    return arr, np.dtype(dtype)


def _sequence(value, rank: int, name: str) -> list:
    """``value`` repeated ``rank`` times, or its items (SciPy's RuntimeError on a length
    mismatch)."""
    if not isinstance(value, str) and np.iterable(value):
        items = list(value)
        if len(items) != rank:
            raise RuntimeError(f"{name}: sequence argument must have length equal to input rank "
                               f"({rank}), got {len(items)}")
        return items
    return [value] * rank


def _axes(axes, ndim: int) -> tuple[int, ...]:
    """SciPy's ``axes``: None (all), an int or an iterable of ints, each in range, no repeats."""
    if axes is None:
        return tuple(range(ndim))
    if np.isscalar(axes):
        axes = (operator.index(axes),)
    elif np.iterable(axes):
        axes = tuple(operator.index(ax) for ax in axes)
        for ax in axes:
            if ax < -ndim or ax > ndim - 1:
                raise ValueError(f"axes: specified axis {ax} is out of range for {ndim} dims")
        axes = tuple(ax % ndim for ax in axes)
    else:
        raise ValueError("axes must be an integer, iterable of integers, or None")
    if len(set(axes)) != len(axes):
        raise ValueError(f"axes must be unique, got {axes}")
    return axes


def _axis(axis, ndim: int) -> int:
    return np.lib.array_utils.normalize_axis_index(operator.index(axis), ndim)


def _check_origin(origin, lenw: int, name: str = "origin") -> None:
    """SciPy's range rule for the origin of a filter of ``lenw`` taps (ValueError), checked on
    the value as given: a non-integer is refused (TypeError) later, where SciPy's C routine
    parses it (``plans._pass``, the N-d filters' own check)."""
    if origin < -(lenw // 2) or origin > (lenw - 1) // 2:
        raise ValueError(f"Invalid {name} {origin}: it must satisfy -(len(weights) // 2) <= "
                         f"{name} <= (len(weights) - 1) // 2 = {(lenw - 1) // 2} for a filter of "
                         f"length {lenw}")


def _origin(origin, lenw: int, name: str = "origin") -> int:
    """:func:`_check_origin`, then the origin as an int."""
    _check_origin(origin, lenw, name)
    return operator.index(origin)


def _refuse_complex_cval(cval, x) -> None:
    """SciPy filters with complex weights as real and imaginary parts, each with the whole cval:
    a complex cval of real data is its ValueError, raised before any check of the call but the
    output's."""
    if np.iscomplexobj(cval) and x.dtype.kind != "c":
        raise ValueError("Cannot provide a complex-valued cval when the input is real.")


def _kernel_checks(x, out_dtype, complex_weights: bool, cval):
    """The checks of SciPy's C filter routines, which run on real data only (complex data goes
    through them as real and imaginary parts): as they parse their arguments, a complex ``cval``
    of real data is a TypeError (a C double); as they run, a complex output of real data is a
    RuntimeError.  Returns cval."""
    if x.dtype.kind == "c" or complex_weights:
        return cval
    if np.iscomplexobj(cval):
        raise TypeError(f"cval={cval!r}: must be real number, not complex (the input is real)")
    if out_dtype.kind == "c":
        raise RuntimeError(f"array type {out_dtype} not supported: real data filtered with real "
                           f"weights has a real output")
    return cval


def _nd_weights(ndim: int, w: np.ndarray, origin, axes, convolution: bool):
    """(weights with one dim per dim of the input, origin per dim) of SciPy's correlate/convolve
    of an ``ndim``-d input, checked in its order.  With ``axes`` naming some dims, the weights
    have one dim per entry of ``axes`` and get a dim of length 1 at each other dim (so their dims
    go to the named dims in increasing order), while the origins (a scalar, or one per entry of
    ``axes``) go to their entry's dim (0 elsewhere); with ``axes`` covering every dim, weights
    and origins follow the input's dims, whatever the order of ``axes``.  ``convolution``
    reverses the weights and mirrors each origin (an even length shifts it by one).  Dims of
    length 0 do not count (such weights have no taps: every output is an empty sum, 0, in SciPy),
    and the origins are range-checked, as given, against the dims of nonzero length in order, as
    SciPy pairs them (SciPy's C routine refuses non-integers later: the caller's)."""
    axes = _axes(axes, ndim)
    origins = _sequence(origin, len(axes), "origin")
    if len(axes) < ndim:
        if w.ndim != len(axes):
            raise RuntimeError(f"weights.ndim ({w.ndim}) must match len(axes) ({len(axes)})")
        w = np.expand_dims(w, tuple(ax for ax in range(ndim) if ax not in axes))
        by_dim = [0] * ndim
        for o, ax in zip(origins, axes):
            by_dim[ax] = o
        origins = by_dim
    wshape = [s for s in w.shape if s > 0]
    if len(wshape) != ndim:
        raise RuntimeError(f"weights.ndim ({len(wshape)}) must match len(axes) ({len(axes)})")
    if convolution:
        w = w[(slice(None, None, -1),) * w.ndim]
        origins = [-o - (1 - s % 2) for o, s in zip(origins, w.shape)]
    for d, (o, s) in enumerate(zip(origins, wshape)):
        _check_origin(o, s, f"origin[{d}]")
    return w, origins


def uniform_axes(size, origin, mode, axes, ndim: int) -> list:
    """(axis, size, origin, mode) of each pass of SciPy's uniform_filter: ``size``, ``origin``
    and ``mode`` are scalars or one per entry of ``axes``; only axes whose size exceeds 1 are
    filtered, each with ``int(size)`` (a float size is truncated, as SciPy does)."""
    axes = _axes(axes, ndim)
    n = len(axes)
    sizes, origins = _sequence(size, n, "size"), _sequence(origin, n, "origin")
    modes = _sequence(mode, n, "mode")
    kept = [(ax, s, o, m) for ax, s, o, m in zip(axes, sizes, origins, modes) if s > 1]
    return [(ax, int(s), o, m) for ax, s, o, m in kept]


def gaussian_term_sigmas(name: str, sigma, axes: tuple, ndim: int) -> list:
    """The per-dim sigmas with which every term of ``gaussian_laplace`` or
    ``gaussian_gradient_magnitude`` runs ``gaussian_filter`` over all dims, as SciPy passes them
    (each term differentiates along its entry of ``axes`` and smooths along every dim whose sigma
    exceeds 1e-15):

    - ``gaussian_laplace``: ``sigma`` is a scalar or one per entry of ``axes``; the dims outside
      ``axes`` get 0 (no smoothing).  Where ``axes`` covers every dim, the i-th sigma is dim i's,
      whatever the order of ``axes``.
    - ``gaussian_gradient_magnitude``: ``sigma`` as given, a scalar or one per dim of the input:
      the dims outside ``axes`` are smoothed too.
    """
    if name == "gaussian_gradient_magnitude":
        return _sequence(sigma, ndim, "sigma")
    sigmas = _sequence(sigma, len(axes), "sigma")
    if len(axes) < ndim:
        full = [0] * ndim
        for s, ax in zip(sigmas, axes):
            full[ax] = s
        sigmas = full
    return sigmas
