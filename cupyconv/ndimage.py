"""``scipy.ndimage``-compatible filtering of N-d CuPy arrays.

The same signatures, defaults, boundary modes, output dtypes and exceptions as ``scipy.ndimage``
(SciPy's docstrings describe each argument in full).  Separable filters run as one 1-d pass per
filtered axis (shared-memory tiles along the axis, the boundary applied while staging the halo),
the passes along the last two axes fused into one read of the array where the output is float32 or
float64 and that is also the compute dtype (see ``_fuse_last_two``);
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

import math
import numbers
import operator
import os
import struct
import sys
import warnings

import numpy as np

from cupyconv._core.arrays import require_array
from cupyconv._core.caches import memoized
from cupyconv._dispatch.callcache import call_key, lookup, remember
from cupyconv._ndimage import passes
from cupyconv._ndimage.boundary import CONSTANT, mode_code
from cupyconv._ndimage.dtypes import (ND_CTYPES, check_input_dtype, compute_dtype,
                                      default_output_dtype)

__all__ = ["correlate", "convolve", "correlate1d", "convolve1d", "gaussian_filter",
           "gaussian_filter1d", "uniform_filter", "uniform_filter1d", "sobel", "prewitt",
           "laplace", "gaussian_laplace", "gaussian_gradient_magnitude"]

# SciPy's N-d correlation skips taps whose weight is at most this in magnitude.
_TINY_WEIGHT = np.finfo(np.float64).eps


# --------------------------------------------------------------------------- arguments
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


_PACKAGE_DIR = os.path.dirname(__file__) + os.sep


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
    or array is refused.  Whether a pass may write that dtype is :func:`_pass`'s rule: a filter
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
    parses it (:func:`_pass`, the N-d filters' own check)."""
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


def _weights_buffer(taps: np.ndarray, cval, divisor: float, compute: str) -> np.ndarray:
    """The kernels' weight array: taps, then cval, then the divisor, in the compute dtype."""
    return np.concatenate([np.asarray(taps, compute).ravel(),
                           np.array([cval, divisor], dtype=compute)])


# --------------------------------------------------------------------------- prepared calls
# A public filter validates its arguments and plans its launches in ``_prepare_<filter>(input,
# output, *options) -> (x, run)``; ``run(x)`` only allocates and launches.  A call whose input
# (shape, strides, dtype, device, alignment), current device and options by value equal those of
# an earlier call that passed validation reuses that call's ``run`` (kept in
# cupyconv._dispatch.callcache, which clear_caches() empties): everything that can reject a call
# depends on the key alone, so warm calls raise nothing the full path would.

class _Uncacheable(Exception):
    """An option the call key cannot hold by value: the call takes the full path."""


_pack_float = struct.Struct("<d").pack
# NumPy scalars keyed by their bytes.  NumPy complex scalars are left out: float() of one (a
# complex sigma) warns on every full-path call, which a warm call would not repeat.
_NUMPY_SCALARS = frozenset(np.dtype(c).type for c in "?" + np.typecodes["AllInteger"]
                           + np.typecodes["Float"])
# the types ``output=`` may name a dtype by
_OUTPUT_TYPES = frozenset({bool, int, float, complex} | {
    np.dtype(c).type for c in "?" + np.typecodes["AllInteger"] + np.typecodes["AllFloat"]})


def _frozen(v):
    """The key of one option by value: equal keys only for options that every step of the full
    path treats alike (``1``, ``1.0``, ``True`` and ``np.float64(1)`` differ, and so do ``0.0``
    and ``-0.0``; lists and tuples by their items; NumPy arrays by dtype, shape and bytes; a
    kwargs dict by its sorted items).  Raises :class:`_Uncacheable` for anything else (a CuPy
    or foreign array, an unknown object, which may change between calls)."""
    t = type(v)
    if t is str or t is int or v is None:
        return v
    if t is float:
        return float, _pack_float(v)  # by bits: -0.0 is not 0.0, a NaN equals its own bits
    if t is tuple or t is list:
        return t, tuple(map(_frozen, v))
    if t is bool:
        return bool, v
    if t is complex:
        return complex, _pack_float(v.real), _pack_float(v.imag)
    if t in _NUMPY_SCALARS:
        return t, v.tobytes()
    if t is np.ndarray and v.dtype.kind in "biufc":
        return t, v.dtype.str, v.shape, v.tobytes()
    if isinstance(v, np.dtype):
        return np.dtype, v
    if t is type and v in _OUTPUT_TYPES:
        return type, v
    if t is dict:
        return dict, tuple((k, _frozen(e)) for k, e in sorted(v.items()))
    raise _Uncacheable


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


# --------------------------------------------------------------------------- pass chains
class _Pass:
    """One 1-d pass: correlate along ``axis`` with ``taps`` (host float64 or complex128), the
    window starting ``left`` before each output, under boundary ``mode`` (kernel code)."""

    __slots__ = ("axis", "taps", "left", "mode", "cval", "divisor")

    def __init__(self, axis, taps, left, mode, cval, divisor=1.0):
        self.axis, self.taps, self.left, self.mode = axis, taps, left, mode
        self.cval, self.divisor = cval, divisor


def _pass(x, out_dtype, axis, taps, left, mode, cval, divisor=1.0) -> _Pass:
    """The pass of a filter of ``x`` writing ``out_dtype``, its arguments checked as SciPy's
    correlate1d (and uniform_filter1d) checks them, in its order: complex data (input or taps)
    needs a complex output (SciPy's RuntimeError as the call starts: every filter of SciPy that
    chains passes hands them its output array), then the mode, then what its C routine refuses
    (``left`` not an integer, :func:`_kernel_checks`).  A filter validates its passes in the
    order they run."""
    complex_weights = np.iscomplexobj(taps)
    if (x.dtype.kind == "c" or complex_weights) and out_dtype.kind != "c":
        raise RuntimeError(f"output must have complex dtype: complex data cannot be written "
                           f"to a {out_dtype} output")
    code = mode_code(mode)
    left = operator.index(left)
    cval = _kernel_checks(x, out_dtype, complex_weights, cval)
    return _Pass(axis, taps, left, code, cval, divisor)


def _result_buffers(x, out_arr, out_dtype):
    """(where the last pass writes, whether that is the caller's array): the caller's array
    itself when it is C-contiguous and does not overlap the input."""
    cupy = _cupy()
    if (out_arr is not None and out_arr.flags.c_contiguous
            and not cupy.may_share_memory(out_arr, x)):
        return out_arr, True
    return cupy.empty(x.shape, out_dtype), False


def _finish(result, out_arr, direct: bool):
    if out_arr is not None and not direct:
        out_arr[...] = result
        return out_arr
    return result


def _fuse_last_two(chain: list, shape: tuple, in_dtype: str, out_dtype: np.dtype) -> list:
    """``chain`` with its passes along the last two axes replaced by one ``(first, second)`` pair
    that ``nd_sep2d`` runs in one pass over memory, where that computes what the two passes do:

    - real taps, a float output whose dtype is the compute dtype of both passes (the two-pass
      path casts the intermediate to the output dtype, as SciPy does: exact only then; integer
      outputs truncate it), one cval, and a tile that fits (:func:`passes.sep2d_plan`);
    - the pair adjacent in the chain, or the second movable next to the first: passes along
      different axes commute (up to rounding) unless one pads with a constant, which pads the
      other's intermediate, so no pass from the second back to the first may be in mode constant.
    """
    ndim = len(shape)
    if ndim < 2 or out_dtype.name not in ("float32", "float64"):
        return chain
    at = {p.axis: i for i, p in enumerate(chain)}
    if ndim - 1 not in at or ndim - 2 not in at:
        return chain
    i, j = sorted((at[ndim - 1], at[ndim - 2]))
    pair_in = in_dtype if i == 0 else out_dtype.name  # later passes read the output dtype
    if compute_dtype(pair_in, out_dtype.name, False) != out_dtype.name:
        return chain
    first, second = chain[i], chain[j]
    if (np.iscomplexobj(first.taps) or np.iscomplexobj(second.taps)
            or np.iscomplexobj(first.cval) or first.cval != second.cval):
        return chain
    if j > i + 1 and any(p.mode == CONSTANT for p in chain[i + 1:j + 1]):
        return chain
    px, py = (first, second) if first.axis == ndim - 1 else (second, first)
    if (passes.sep2d_plan(shape, px.taps.size, py.taps.size, out_dtype.itemsize) is None
            and _walk_pair(shape, pair_in, out_dtype.name, (first, second)) is None):
        return chain
    return chain[:i] + [(first, second)] + chain[i + 1:j] + chain[j + 1:]


def _walk_pair(shape: tuple, src_dtype: str, out_dtype: str, pair):
    """(stack, kernel2, left2) of the fused pair on the row walk (``passes.plane_launcher``,
    separable), or None where it does not apply: the walk reads and writes one float dtype, takes
    one boundary mode for both axes, and runs the last-axis pass first, which under mode constant
    differs from the other order (the second pass pads the first's output with cval)."""
    first, second = pair
    ndim = len(shape)
    if src_dtype != out_dtype or first.mode != second.mode:
        return None
    if first.mode == CONSTANT and first.axis != ndim - 1:
        return None
    px, py = (first, second) if first.axis == ndim - 1 else (second, first)
    stack = (math.prod(shape[:-2]), shape[-2], shape[-1])
    kernel2 = (py.taps.size, px.taps.size)
    if (np.iscomplexobj(px.taps) or np.iscomplexobj(py.taps)
            or passes.plane_plan(stack, kernel2, True, out_dtype) is None):
        return None
    return stack, kernel2, (py.left, px.left)


def _fused_launcher(shape: tuple, src_dtype: str, out_dtype: str, pair, compute: str):
    """The launcher of a fused pair: on the row walk where :func:`_walk_pair` allows, else
    ``nd_sep2d``."""
    first, second = pair
    x_first = first.axis == len(shape) - 1
    px, py = (first, second) if x_first else (second, first)
    weights = np.concatenate([np.asarray(px.taps, compute), np.asarray(py.taps, compute),
                              np.array([px.cval, px.divisor, py.divisor], dtype=compute)])
    walk = _walk_pair(shape, src_dtype, out_dtype, pair)
    if walk is not None:
        return passes.plane_launcher(src_dtype, weights, *walk, px.mode, separable=True)
    return passes.sep2d_launcher(shape, src_dtype, out_dtype, weights, px.taps.size,
                                 py.taps.size, px.left, py.left, px.mode, py.mode, x_first)


def _pass_launchers(shape: tuple, in_dtype: str, chain: list, out_dtype: np.dtype) -> list:
    """The launchers of ``chain`` on an array of ``shape`` and ``in_dtype``, each pass writing
    ``out_dtype`` (SciPy casts between passes too); the passes along the last two axes fused
    where :func:`_fuse_last_two` allows."""
    launchers = []
    src_dtype = in_dtype
    for p in _fuse_last_two(chain, shape, in_dtype, out_dtype):
        if isinstance(p, tuple):
            launchers.append(_fused_launcher(shape, src_dtype, out_dtype.name, p, out_dtype.name))
        else:
            compute = compute_dtype(src_dtype, out_dtype.name, np.iscomplexobj(p.taps))
            weights = _weights_buffer(p.taps, p.cval, p.divisor, compute)
            launchers.append(passes.line_launcher(shape, p.axis, src_dtype, out_dtype.name,
                                                  weights, p.left, p.mode))
        src_dtype = out_dtype.name  # later passes read the previous one's output
    return launchers


def _runner(x, build, out_arr, out_dtype):
    """``run(x)`` of a validated call on arrays shaped like ``x``: the result (the caller's
    ``out_arr`` where given) of the launchers that ``build()`` returns, built once here and only
    where ``x`` has elements.  The launchers run one after the other, each reading the previous
    one's output (the first a C-contiguous ``x``) and ping-ponging between the result and a spare
    buffer so that none reads what it writes and the last writes the result; no launchers: the
    result is a copy of ``x`` (cast to the output dtype)."""
    cupy = _cupy()
    launchers = build() if x.size else []
    count = len(launchers)

    def run(x):
        result, direct = _result_buffers(x, out_arr, out_dtype)
        if x.size == 0:
            return _finish(result, out_arr, direct)
        if not count:
            result[...] = x
            return _finish(result, out_arr, direct)
        src = cupy.ascontiguousarray(x)
        spare = cupy.empty(x.shape, out_dtype) if count > 1 else None
        for i, launch in enumerate(launchers):
            dst = result if (count - 1 - i) % 2 == 0 else spare
            launch(src, dst)
            src = dst
        return _finish(result, out_arr, direct)

    return run


def _chain_runner(x, chain: list, out_arr, out_dtype):
    """:func:`_runner` of the 1-d passes ``chain``."""
    return _runner(x, lambda: _pass_launchers(x.shape, x.dtype.name, chain, out_dtype), out_arr,
                   out_dtype)


def _zeros_runner(out_arr, out_dtype):
    """``run(x)`` of a filter without taps (weights with a dim of length 0): every output is an
    empty sum, 0, as in SciPy."""
    def run(x):
        result, direct = _result_buffers(x, out_arr, out_dtype)
        result[...] = 0
        return _finish(result, out_arr, direct)

    return run


def _correlate1d_runner(x, w, axis, out_arr, out_dtype, mode, cval, origin):
    """The runner of SciPy's correlate1d after its output is resolved: ``w`` is the host
    weights, already conjugated or reversed as the caller needs.  Checked in SciPy's order: a
    complex cval with complex weights, the weights' shape, the axis, the origin, then the pass."""
    complex_weights = w.dtype.kind == "c"
    if complex_weights:
        _refuse_complex_cval(cval, x)
    if w.ndim != 1 or w.shape[0] < 1:
        raise RuntimeError(f"no filter weights given: weights must be 1-d and non-empty, got "
                           f"shape {w.shape}")
    axis = _axis(axis, x.ndim)
    _check_origin(origin, w.shape[0])
    complex_out = x.dtype.kind == "c" or complex_weights
    taps = w.astype(np.complex128 if complex_out else np.float64)
    p = _pass(x, out_dtype, axis, taps, w.shape[0] // 2 + origin, mode, cval)
    return _chain_runner(x, [p], out_arr, out_dtype)


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

    def build():
        keep = (np.abs(taps.real) > _TINY_WEIGHT) | (np.abs(taps.imag) > _TINY_WEIGHT)
        compute = compute_dtype(x.dtype.name, out_dtype.name, complex_data)
        walk = _walk_dense(x, out_dtype, compute, taps.shape, left) if keep.all() else None
        if walk is not None:
            return [passes.plane_launcher(compute, _weights_buffer(taps, cval, 1.0, compute),
                                          *walk, code, separable=False)]
        offsets = np.argwhere(keep).astype(np.int64) - np.asarray(left, np.int64)
        return [passes.dense_launcher(x.shape, x.dtype.name, out_dtype.name,
                                      _weights_buffer(taps[keep], cval, 1.0, compute),
                                      offsets.reshape(-1, x.ndim), code)]

    return x, _runner(x, build, out_arr, out_dtype)


def _walk_dense(x, out_dtype, compute: str, wshape: tuple, left: list):
    """(stack, kernel2, left2) of the N-d correlation on the row walk (``passes.plane_launcher``,
    dense), or None where it does not apply: real float data read, written and summed in one
    dtype, 2-d, or 3-d with a filter of one plane (a stack of 2-d filters; 3-d filters run faster
    on nd_dense_tile).  (The caller keeps the staged kernels where a tap is below SciPy's skip
    threshold: the walk multiplies every tap, and 0 * inf would be NaN where SciPy skips it.)"""
    if (x.ndim not in (2, 3) or not (x.dtype.name == out_dtype.name == compute)
            or (x.ndim == 3 and wshape[0] != 1)):
        return None
    stack = (math.prod(x.shape[:-2]), *x.shape[-2:])
    kernel2 = tuple(wshape[-2:])
    if passes.plane_plan(stack, kernel2, False, compute) is None:
        return None
    return stack, kernel2, tuple(left[-2:])


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
def gaussian_kernel1d(sigma: float, order: int, radius: int) -> np.ndarray:
    """The 2 * radius + 1 taps of the ``order``-th derivative of a Gaussian of standard deviation
    ``sigma``, sampled at -radius..radius (float64), as SciPy's gaussian filters use them.

    The Gaussian is normalized to sum 1 over the samples; its derivative is p(x) * phi(x) with
    the polynomial p built by p_0 = 1, p_{m+1} = p_m' - x p_m / sigma^2.
    """
    if order < 0:
        raise ValueError(f"order must be non-negative, got {order}")
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    phi = np.exp(-0.5 / (sigma * sigma) * x * x)
    phi /= phi.sum()
    if order == 0:
        return phi
    poly = np.zeros(order + 1)  # coefficients of x^0 .. x^order
    poly[0] = 1.0
    for _ in range(order):
        nxt = np.zeros_like(poly)
        nxt[:-1] += poly[1:] * np.arange(1, order + 1)  # derivative
        nxt[1:] -= poly[:-1] / (sigma * sigma)          # times -x / sigma^2
        poly = nxt
    return (x[:, None] ** np.arange(order + 1)) @ poly * phi


def _gaussian_radius(sigma, truncate, radius) -> int:
    lw = int(truncate * float(sigma) + 0.5)
    if radius is not None:
        lw = radius
    if not isinstance(lw, numbers.Integral) or lw < 0:
        raise ValueError(f"Radius must be a nonnegative integer, got {lw!r} (radius={radius!r}, "
                         f"sigma={sigma!r}, truncate={truncate!r})")
    return int(lw)


@memoized(256)
def _gaussian_taps(sigma: float, order: int, radius: int) -> np.ndarray:
    """The correlation taps (the reversed kernel) of one Gaussian pass, read-only: cached, as a
    filter is usually applied with the same sigma again (tens of microseconds of NumPy a call)."""
    if order < 0:
        raise ValueError(f"order must be non-negative, got {order}")
    taps = np.ascontiguousarray(gaussian_kernel1d(sigma, order, radius)[::-1])
    taps.flags.writeable = False
    return taps


def _gaussian_weights(sigma, order, truncate, radius) -> tuple[np.ndarray, int]:
    """(correlation taps, radius) of one pass of SciPy's gaussian_filter1d, checked in its
    order: sigma, radius, order."""
    sigma = float(sigma)
    lw = _gaussian_radius(sigma, truncate, radius)
    return _gaussian_taps(sigma, operator.index(order), lw), lw


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


def _gaussian_chain(x, out_dtype, sigma, order, mode, cval, truncate, radius, axes) -> list:
    axes = _axes(axes, x.ndim)
    n = len(axes)
    orders, sigmas = _sequence(order, n, "order"), _sequence(sigma, n, "sigma")
    modes, radii = _sequence(mode, n, "mode"), _sequence(radius, n, "radius")
    # SciPy skips axes whose sigma is at most 1e-15 (negative ones included)
    kept = [(ax, s, o, m, r) for ax, s, o, m, r in zip(axes, sigmas, orders, modes, radii)
            if s > 1e-15]
    chain = []
    for ax, s, o, m, r in kept:
        taps, lw = _gaussian_weights(s, o, truncate, r)
        chain.append(_pass(x, out_dtype, ax, taps, lw, m, cval))
    return chain


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
def _uniform_pass(x, out_dtype, axis, size, origin, mode, cval) -> _Pass:
    """A pass of SciPy's uniform_filter1d, checked in its order: the size, the origin, the mode,
    then what its C routine refuses (a size or origin that is no integer, :func:`_pass`)."""
    if size < 1:
        raise RuntimeError(f"incorrect filter size {size}: size must be at least 1")
    if size // 2 + origin < 0 or size // 2 + origin >= size:
        raise ValueError(f"invalid origin {origin} for a uniform filter of size {size}")
    mode_code(mode)
    size = operator.index(size)
    # sum exactly (ones), then divide once, as SciPy does
    return _pass(x, out_dtype, axis, np.ones(size), size // 2 + origin, mode, cval, float(size))


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
    modes = _sequence(mode, x.ndim, "mode")
    chain = [_pass(x, out_dtype, axis, np.array([-1.0, 0.0, 1.0]), 1, modes[axis], cval)]
    chain += [_pass(x, out_dtype, ax, np.asarray(smooth, np.float64), 1, modes[ax], cval)
              for ax in range(x.ndim) if ax != axis]
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


def _sum_over_axes(x, output, mode, axes, term, square: bool):
    """The runner of SciPy's generic_laplace / generic_gradient_magnitude: the output holds
    ``term(axis, output dtype, mode)(x)`` of the first axis, then adds those of the others
    (squared first when ``square``; square root at the end).  ``term`` validates its filter
    and returns its runner; every term is validated, in order, before any runs.  No axes: a
    copy of the input."""
    out_arr, out_dtype = _resolve_output(output, x, False)
    axes = _axes(axes, x.ndim)
    if not axes:
        return _runner(x, lambda: [], out_arr, out_dtype)  # no launchers: a copy
    modes = _sequence(mode, len(axes), "mode")
    terms = [term(ax, out_dtype, m) for ax, m in zip(axes, modes)]
    cupy = _cupy()

    def run(x):
        total = terms[0](x)
        if square:
            cupy.multiply(total, total, out=total)
        for part_of in terms[1:]:
            part = part_of(x)
            if square:
                cupy.multiply(part, part, out=part)
            total += part
        if square:
            cupy.sqrt(total, out=total, casting="unsafe")
        if out_arr is not None:
            out_arr[...] = total
            return out_arr
        return total

    return run


_LAPLACE_WEIGHTS = np.array([1.0, -2.0, 1.0])


def _prepare_laplace(input, output, mode, cval, axes):
    x = _input(input)

    def term(ax, dtype, m):
        return _correlate1d_runner(x, _LAPLACE_WEIGHTS, ax, None, dtype, m, cval, 0)

    return x, _sum_over_axes(x, output, mode, axes, term, False)


def laplace(input, output=None, mode="reflect", cval=0.0, *, axes=None):
    """Sum of second differences ([1, -2, 1]) along ``axes``, as ``scipy.ndimage.laplace``."""
    return _prepared("laplace", _prepare_laplace, input, output, mode, cval, axes)


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
