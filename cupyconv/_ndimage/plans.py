"""The pass plans of the ``cupyconv.ndimage`` filters: 1-d passes checked as SciPy's
correlate1d checks them, the chains of the separable filters (Gaussian, uniform, Sobel/Prewitt),
the fusion of the passes along the last two axes, and the launchers of a chain or of the dense
N-d correlation (:mod:`cupyconv._ndimage.passes` builds each launch)."""

from __future__ import annotations

import math
import operator

import numpy as np

from cupyconv._ndimage import passes
from cupyconv._ndimage.args import _axes, _kernel_checks, _sequence
from cupyconv._ndimage.boundary import CONSTANT, mode_code
from cupyconv._ndimage.dtypes import compute_dtype
from cupyconv._ndimage.gaussian import _gaussian_weights


# SciPy's N-d correlation skips taps whose weight is at most this in magnitude.
_TINY_WEIGHT = np.finfo(np.float64).eps


def _weights_buffer(taps: np.ndarray, cval, divisor: float, compute: str) -> np.ndarray:
    """The kernels' weight array: taps, then cval, then the divisor, in the compute dtype."""
    return np.concatenate([np.asarray(taps, compute).ravel(),
                           np.array([cval, divisor], dtype=compute)])


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


def _edge_chain(x, out_dtype, axis: int, mode, cval, smooth) -> list:
    """The passes of SciPy's sobel/prewitt along ``axis`` (a normalized index): [-1, 0, 1]
    along it, then ``smooth`` along every other axis, ``mode`` scalar or one per dim."""
    modes = _sequence(mode, x.ndim, "mode")
    chain = [_pass(x, out_dtype, axis, np.array([-1.0, 0.0, 1.0]), 1, modes[axis], cval)]
    chain += [_pass(x, out_dtype, ax, np.asarray(smooth, np.float64), 1, modes[ax], cval)
              for ax in range(x.ndim) if ax != axis]
    return chain


def _dense_launchers(x, out_dtype, taps: np.ndarray, left: list, code: int, cval,
                     complex_data: bool) -> list:
    """The launcher of the N-d correlation of ``x`` with ``taps`` (one dim per dim of ``x``,
    several filtered), the window starting ``left`` before each output: on the row walk where
    :func:`_walk_dense` allows and no tap is below SciPy's skip threshold, else the direct N-d
    kernel over the taps SciPy does not skip."""
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
