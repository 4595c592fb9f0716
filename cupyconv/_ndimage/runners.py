"""The runners of validated ``cupyconv.ndimage`` calls: ``run(x)`` allocates the result (or
writes the caller's output array) and launches a plan's launchers on arrays shaped like ``x``."""

from __future__ import annotations

import numpy as np

from cupyconv._ndimage import args
from cupyconv._ndimage.args import (_axes, _axis, _check_origin, _refuse_complex_cval,
                                    _resolve_output, _sequence)
from cupyconv._ndimage.plans import _pass, _pass_launchers


def _result_buffers(x, out_arr, out_dtype):
    """(where the last pass writes, whether that is the caller's array): the caller's array
    itself when it is C-contiguous and does not overlap the input."""
    cupy = args._cupy()
    if (out_arr is not None and out_arr.flags.c_contiguous
            and not cupy.may_share_memory(out_arr, x)):
        return out_arr, True
    return cupy.empty(x.shape, out_dtype), False


def _finish(result, out_arr, direct: bool):
    if out_arr is not None and not direct:
        out_arr[...] = result
        return out_arr
    return result


def _runner(x, build, out_arr, out_dtype):
    """``run(x)`` of a validated call on arrays shaped like ``x``: the result (the caller's
    ``out_arr`` where given) of the launchers that ``build()`` returns, built once here and only
    where ``x`` has elements.  The launchers run one after the other, each reading the previous
    one's output (the first a C-contiguous ``x``) and ping-ponging between the result and a spare
    buffer so that none reads what it writes and the last writes the result; no launchers: the
    result is a copy of ``x`` (cast to the output dtype)."""
    cupy = args._cupy()
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
    cupy = args._cupy()

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
