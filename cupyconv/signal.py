"""SciPy-compatible correlation and convolution of CuPy arrays (``scipy.signal`` semantics).

``correlate``, ``convolve``, ``correlate2d``, ``convolve2d``, ``fftconvolve``, ``oaconvolve``
and ``choose_conv_method`` take SciPy's arguments with SciPy's defaults and return SciPy's output
shapes and dtypes: ``correlate`` conjugates ``in2``; integer and bool inputs give the promoted
integer type, computed exactly (wrapping like SciPy's integer loops); 'same' centres even kernels
as SciPy does (which differs between ``correlate`` and ``correlate2d``); in 'valid' mode the
larger operand goes first, and shapes where neither is larger raise ``ValueError``.  Results are
C-contiguous.

Extensions (keyword-only): ``axes=`` on ``correlate``/``convolve`` (as on ``fftconvolve``) filters
a stack in one launch -- axes not listed broadcast between the operands; ``method=`` on
``correlate2d``/``convolve2d``.  ``method="auto"`` chooses between the shared-memory direct kernel
and the FFT path with a cost model (``cupyconv._dispatch.signal``).

Differences from SciPy (README, "Where cupyconv.signal differs from SciPy"): empty inputs raise
``ValueError`` (except in ``fftconvolve``/``oaconvolve``); a float16 result of ``correlate`` /
``convolve`` under ``method="auto"`` takes the FFT path (SciPy's N-d direct loops refuse float16);
integer inputs under ``"auto"`` always take the exact direct path; bool results through the FFT
are rounded before the cast.  bfloat16 arrays raise ``TypeError``
naming the argument (SciPy has no bfloat16; :func:`cupyconv.conv` and its siblings take it).
"""

from __future__ import annotations

import numpy as np

from cupyconv._core.arrays import require_array, same_device
from cupyconv._core.caches import memoized
from cupyconv._dispatch.callcache import call_key, lookup, prepare, remember
from cupyconv._dispatch.signal import choose, dense_volume_runner, use_dense_volume
from cupyconv._signal.direct import direct_runner, lean_plane_runner
from cupyconv._signal.fft import fft_work_dtype, overlap_add_blocks, run_fft
from cupyconv._signal.dtypes import (NUMPY_LOOP_DTYPES, check_direct_dtype, check_fillvalue,
                                     compute_dtype, numpy_direct_path)
from cupyconv._signal.plan import (axes_key, check_boundary, check_direct_sizes, check_method,
                                   check_mode, direct_fits, plan_filter, scipy_fft_faster)

__all__ = ["correlate", "convolve", "correlate2d", "convolve2d", "fftconvolve", "oaconvolve",
           "choose_conv_method"]


@memoized(512)
def _plan(shape1, shape2, dtype1, dtype2, func, mode, boundary, axes):
    return plan_filter(shape1, shape2, dtype1, dtype2, func=func, mode=mode, boundary=boundary,
                       axes=axes, prefer_small_kernel=True)


def _operands(in1, in2):
    in1, in2 = require_array(in1, "in1"), require_array(in2, "in2")
    same_device({"in1": in1, "in2": in2})
    return in1, in2


def _filter(func, in1, in2, mode, method, boundary="fill", fillvalue=0, axes=None):
    """Validate everything, then run the planned correlation by the chosen method.  A call equal
    to an earlier validated one (arrays' shape, strides, dtype, device, alignment; every option)
    goes straight to its prepared call (:mod:`cupyconv._dispatch.callcache`)."""
    key, ops = call_key("signal." + func, (in1, in2), (mode, method, boundary, fillvalue, axes))
    call = lookup(key)
    if call is not None:
        return call(ops, None)
    mode, method = check_mode(mode), check_method(method)
    check_boundary(boundary)
    axes = axes_key(axes)
    two_d = func in ("correlate2d", "convolve2d")
    in1, in2 = _operands(in1, in2)
    if in1.ndim == in2.ndim == 0 and func in ("correlate", "convolve"):
        return in1 * (in2.conj() if func == "correlate" else in2)
    plan = _plan(in1.shape, in2.shape, in1.dtype, in2.dtype, func, mode, boundary, axes)
    # SciPy reads fillvalue only where it fills (boundary 'fill'), after the 2-d and boundary
    # checks and before refusing a result dtype: cast to the result dtype by its rule
    fill = check_fillvalue(fillvalue if plan.boundary == "fill" else 0, plan.result_dtype)
    compute = compute_dtype(plan.result_dtype)
    if two_d and method == "auto" and plan.result_dtype in NUMPY_LOOP_DTYPES:
        method = "direct"  # SciPy's 2-d functions have only direct loops: refused below
    if method == "auto":
        method = choose(plan, compute)
    if method == "direct":
        check_direct_dtype(plan.result_dtype, func,
                           axes is None and numpy_direct_path(func, in1.shape, in2.shape, mode))
        check_direct_sizes(plan)

    if method == "direct" and plan.result_dtype == np.dtype(compute):
        lean = lean_plane_runner(plan, in1, in2, fill, compute)
        if lean is not None:  # one plane-kernel launch: a prepared call
            import cupy

            with in1.device:
                z = cupy.empty(plan.out_shape, compute)
                remember(key, prepare(lambda ops, z: lean(*ops, z), ("in1", "in2"), (in1, in2),
                                      z))
            return z
    direct = None
    if method == "direct":
        direct = (dense_volume_runner(plan, compute)
                  if fill == 0 and use_dense_volume(plan, compute)
                  else direct_runner(plan, in1, in2, fill, compute))

    def run(in1, in2):
        import cupy

        with in1.device:
            if method == "direct":
                z = direct(in1, in2)
            else:
                z = _fft_result(plan, in1, in2, fill)
            # C-contiguous like SciPy's results (and never a reversed or broadcast view)
            return cupy.ascontiguousarray(z.astype(plan.result_dtype, copy=False))

    z = run(in1, in2)
    remember(key, lambda inputs, out: run(*inputs))
    return z


def _fft_result(plan, in1, in2, fill, blocks=()):
    """The plan by FFT (``blocks``: overlap-add axes), rounded where the result is integer or
    bool; a plan without convolved axes is the product in the result dtype, as in SciPy."""
    if not plan.axes:
        return run_fft(plan, in1, in2, fill, plan.result_dtype.name)
    z = run_fft(plan, in1, in2, fill, fft_work_dtype(plan), blocks)
    if plan.result_dtype.kind in "iu":
        # via int64: wraps like SciPy's integer loops instead of an undefined float cast
        z = (z.real if z.dtype.kind == "c" else z).round().astype(np.int64)
    elif plan.result_dtype.kind == "b":
        z = z.round() != 0  # (SciPy casts the unrounded float: FFT noise would read True)
    return z


def correlate(in1, in2, mode="full", method="auto", *, axes=None):
    """Cross-correlate two N-d arrays: ``z[k] = sum_l in1[l] * conj(in2[l - k + ...])``.

    Parameters
    ----------
    in1, in2 : cupy.ndarray
        Same number of dimensions; bool, integer, float or complex.
    mode : {'full', 'valid', 'same'}
        'full': every overlap; 'valid': only full overlaps (the larger operand must be at least
        the other on every axis); 'same': ``in1``'s shape, centred as SciPy does.
    method : {'auto', 'direct', 'fft'}
        'direct': the shared-memory tiled kernel (exact for integers; float16 and bool x bool
        only for 1-d operands, where SciPy uses NumPy's loops); 'fft': ``cupy.fft``; 'auto': the
        faster of the two by the cost model.
    axes : int or sequence of int, optional (cupyconv extension)
        Axes to correlate over, as in ``fftconvolve``; the others broadcast, so a stack of
        signals or images is filtered in one launch.  Default: every axis.

    Returns
    -------
    cupy.ndarray
        SciPy's output shape; dtype ``numpy.result_type(in1, in2)``.
    """
    return _filter("correlate", in1, in2, mode, method, axes=axes)


def convolve(in1, in2, mode="full", method="auto", *, axes=None):
    """Convolve two N-d arrays (``correlate`` with ``in2`` reversed and not conjugated).

    Arguments, output shape and dtype as :func:`correlate`; in 'valid' mode the operands swap
    when ``in2`` is the larger (convolution is commutative).
    """
    return _filter("convolve", in1, in2, mode, method, axes=axes)


def correlate2d(in1, in2, mode="full", boundary="fill", fillvalue=0, *, method="auto"):
    """Cross-correlate two 2-d arrays with a boundary condition, as ``scipy.signal.correlate2d``.

    Parameters
    ----------
    in1, in2 : cupy.ndarray
        2-d arrays.
    mode : {'full', 'valid', 'same'}
        As :func:`correlate`; 'same' centres an even kernel one element later than
        :func:`correlate` does (SciPy's behaviour).
    boundary : {'fill', 'wrap', 'symm'}
        How ``in1`` extends past its edges: ``fillvalue``, periodic, or mirrored (edge repeated);
        aliases 'pad', 'circular', 'symmetric'.  Applied while the kernel stages its tiles.
    fillvalue : scalar
        Value outside ``in1`` for ``boundary='fill'`` (other boundaries ignore it, as SciPy),
        cast to the output dtype by SciPy's rule: None is NaN for float results, a numeric string
        parses; ``ValueError`` where it does not convert (e.g. -1 for unsigned inputs, 1j for
        real, 'a'), ``TypeError`` for an object that is no number.
    method : {'auto', 'direct', 'fft'} (cupyconv extension)
        Every boundary mode is exact on both paths.
    """
    return _filter("correlate2d", in1, in2, mode, method, boundary, fillvalue)


def convolve2d(in1, in2, mode="full", boundary="fill", fillvalue=0, *, method="auto"):
    """Convolve two 2-d arrays with a boundary condition, as ``scipy.signal.convolve2d``."""
    return _filter("convolve2d", in1, in2, mode, method, boundary, fillvalue)


def _frequency(func, in1, in2, mode, axes, overlap_add):
    """``fftconvolve`` / ``oaconvolve``: SciPy's special cases, then the plan by FFT."""
    import cupy

    mode, axes = check_mode(mode), axes_key(axes)
    in1, in2 = _operands(in1, in2)
    if in1.ndim == in2.ndim == 0:
        return in1 * in2
    if in1.ndim == in2.ndim and (in1.size == 0 or in2.size == 0):
        with in1.device:
            return cupy.asarray([], dtype=np.float64)
    plan = _plan(in1.shape, in2.shape, in1.dtype, in2.dtype, func, mode, "fill", axes)
    blocks = overlap_add_blocks(plan) if overlap_add and in1.shape != in2.shape else ()
    with in1.device:
        z = _fft_result(plan, in1, in2, 0, blocks)
        return cupy.ascontiguousarray(z.astype(plan.result_dtype, copy=False))


def fftconvolve(in1, in2, mode="full", axes=None):
    """Convolve two N-d arrays by FFT, as ``scipy.signal.fftconvolve``.

    The result is floating point (integers and bool give float64, float16 gives float32) where
    some axis is transformed; where none is (every ``axes`` entry has length 1 in an operand),
    it is the plain product in the operands' promoted dtype, as in SciPy.  ``axes`` convolve,
    the other axes broadcast.  Empty inputs give an empty float64 array.
    """
    return _frequency("fftconvolve", in1, in2, mode, axes, overlap_add=False)


def oaconvolve(in1, in2, mode="full", axes=None):
    """Convolve two N-d arrays by overlap-add, as ``scipy.signal.oaconvolve``.

    On each convolved axis where one operand is under half the other's length, the longer one
    is cut into blocks that are transformed together at a small FFT length and summed back at
    their offsets (fewer transform points than one long FFT when a long signal meets a short
    filter); other axes, and inputs of equal shape, are transformed whole as in
    :func:`fftconvolve`.  Arguments, shapes and dtypes as :func:`fftconvolve`.
    """
    return _frequency("oaconvolve", in1, in2, mode, axes, overlap_add=True)


def _scipy_choice(in1, in2, mode: str) -> str:
    """SciPy's choose_conv_method answer for operands we cannot plan: its magnitude test where an
    operand is integer (a device reduction each), its bool rule, then its CPU cost model."""
    if in1.dtype.kind in "iu" or in2.dtype.kind in "iu":
        bound = int(abs(in1).max()) * int(abs(in2).max()) * min(in1.size, in2.size)
        if bound > 2 ** 52 - 1:  # an FFT in float64 could round the integer sums
            return "direct"
    if in1.dtype.kind == in2.dtype.kind == "b":
        return "direct"
    return "fft" if scipy_fft_faster(in1.shape, in2.shape, mode) else "direct"


def choose_conv_method(in1, in2, mode="full", measure=False, *, axes=None):
    """'direct' or 'fft', whichever :func:`convolve` should use for these inputs.

    With ``measure=True`` both methods are timed on the GPU (CUDA/HIP events, median after
    warm-up) and ``(method, {'direct': seconds, 'fft': seconds})`` is returned, as in SciPy.
    Operands that ``convolve`` refuses (different dimensionality, or one 0-d) get SciPy's own
    answer, as SciPy does not refuse them here: 'direct' where an integer operand's magnitudes
    could exceed a float64's integers (SciPy's test on the data) or both are bool, else its CPU
    cost model's verdict (:func:`cupyconv._signal.plan.scipy_fft_faster`); timing them raises
    ``convolve``'s ``ValueError``.  Two 0-d operands get 'direct' (``convolve`` multiplies them).
    """
    mode = check_mode(mode)
    axes = axes_key(axes)
    in1, in2 = _operands(in1, in2)
    if in1.ndim == in2.ndim == 0:
        if not measure:
            return "direct"
        from cupyconv._core.timing import time_gpu

        t = time_gpu(lambda: in1 * in2, repeat=10) / 1e3
        return "direct", {"direct": t, "fft": t}
    if in1.ndim != in2.ndim or in1.ndim == 0 or in2.ndim == 0:
        if measure:
            convolve(in1, in2, mode)  # SciPy times convolve, which refuses these operands
        return _scipy_choice(in1, in2, mode)
    plan = _plan(in1.shape, in2.shape, in1.dtype, in2.dtype, "convolve", mode, "fill", axes)
    if not measure:
        return choose(plan, compute_dtype(plan.result_dtype))
    from cupyconv._core.timing import time_gpu

    methods = ["fft"]
    try:
        check_direct_dtype(plan.result_dtype, "convolve",
                           axes is None and numpy_direct_path("convolve", in1.shape, in2.shape,
                                                              mode))
        if len(plan.axes) <= 3 and direct_fits(plan):
            methods.append("direct")
    except ValueError:
        pass  # bool x bool and float16 beyond 1-d: only the FFT can run
    times = {m: time_gpu(lambda m=m: convolve(in1, in2, mode, m, axes=axes), repeat=10) / 1e3
             for m in methods}
    return min(times, key=times.get), times
