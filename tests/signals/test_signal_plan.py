"""The signal API's plans against scipy.signal, on NumPy inputs and without a GPU.

Each test builds the plan from shapes and dtypes only, checks output shape and dtype against
SciPy's result, and executes the plan with NumPy (``numpy_filter``, the same padding, alignment,
swap and conjugation the GPU paths use) to compare values.
"""

import itertools
import warnings

import numpy as np
import pytest
from scipy import signal

import cupyconv.signal as cs
from cupyconv._dispatch import signal as _signal_cost
from cupyconv._signal import fft as _signal_fft
from cupyconv._signal.dtypes import (check_fillvalue, compute_dtype, fftconvolve_dtype,
                                     result_dtype)
from cupyconv._signal.plan import FilterPlan, numpy_filter, plan_filter

DTYPES = ["float32", "float64", "complex64", "complex128", "int32", "int16", "uint8"]


def rand(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -4, 5, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) > 0.5
    a = rng.standard_normal(shape)
    if dtype.kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def close(got, ref, dtype):
    if np.dtype(dtype).kind in "iub":
        return np.array_equal(np.rint(got).astype(ref.dtype), ref)
    return got.shape == ref.shape and np.allclose(got, ref, rtol=1e-4, atol=1e-4)


SHAPES = {1: [((13,), (4,)), ((9,), (5,)), ((4,), (9,)), ((7,), (7,))],
          2: [((6, 9), (3, 4)), ((5, 7), (4, 3)), ((3, 4), (6, 7)), ((8, 5), (2, 5))],
          3: [((4, 5, 6), (2, 3, 2)), ((3, 4, 5), (3, 2, 5)), ((2, 3, 2), (3, 4, 3))]}


@pytest.mark.parametrize("func", ["correlate", "convolve"])
@pytest.mark.parametrize("mode", ["full", "valid", "same"])
@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("dtype", DTYPES)
def test_nd_plan_matches_scipy(func, mode, ndim, dtype):
    rng = np.random.default_rng([ndim, len(mode), DTYPES.index(dtype)])
    for s1, s2 in SHAPES[ndim]:
        a, b = rand(rng, s1, dtype), rand(rng, s2, dtype)
        ref = getattr(signal, func)(a, b, mode=mode, method="direct")
        for small in (False, True):
            plan = plan_filter(s1, s2, a.dtype, b.dtype, func=func, mode=mode,
                               prefer_small_kernel=small)
            assert plan.out_shape == ref.shape and plan.result_dtype == ref.dtype
            assert close(numpy_filter(plan, a, b), ref, dtype), (s1, s2, small)


@pytest.mark.parametrize("func", ["correlate2d", "convolve2d"])
@pytest.mark.parametrize("mode", ["full", "valid", "same"])
@pytest.mark.parametrize("boundary", ["fill", "wrap", "symm"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_2d_plan_matches_scipy(func, mode, boundary, dtype):
    rng = np.random.default_rng([len(func), len(mode), len(boundary), DTYPES.index(dtype)])
    fill = 2 if np.dtype(dtype).kind in "iu" else 0.75
    for s1, s2 in SHAPES[2] + [((4, 4), (9, 11)), ((2, 3), (7, 8))]:
        a, b = rand(rng, s1, dtype), rand(rng, s2, dtype)
        ref = getattr(signal, func)(a, b, mode=mode, boundary=boundary, fillvalue=fill)
        plan = plan_filter(s1, s2, a.dtype, b.dtype, func=func, mode=mode, boundary=boundary)
        assert plan.out_shape == ref.shape and plan.result_dtype == ref.dtype
        assert close(numpy_filter(plan, a, b, fill), ref, dtype), (s1, s2)


@pytest.mark.parametrize("mode", ["full", "valid", "same"])
@pytest.mark.parametrize("axes", [None, (1, 2), (-1,), 2])
def test_fftconvolve_plan_and_batching_axes(mode, axes):
    rng = np.random.default_rng(len(mode))
    cases = [((4, 9, 10), (1, 3, 4)), ((4, 9, 10), (4, 3, 4)), ((1, 12, 7), (3, 5, 2))]
    for s1, s2 in cases:
        a, b = rand(rng, s1, "float64"), rand(rng, s2, "float32")
        if mode == "valid" and axes is None and s2[0] > s1[0] and s1[0] > 1:
            continue
        try:
            ref = signal.fftconvolve(a, b, mode=mode, axes=axes)
        except ValueError:
            with pytest.raises(ValueError):
                plan_filter(s1, s2, a.dtype, b.dtype, func="fftconvolve", mode=mode, axes=axes)
            continue
        plan = plan_filter(s1, s2, a.dtype, b.dtype, func="fftconvolve", mode=mode, axes=axes)
        assert plan.out_shape == ref.shape and plan.result_dtype == ref.dtype
        assert close(numpy_filter(plan, a, b), ref, "float64")
        # correlate with axes= is fftconvolve's batching applied to correlate's semantics;
        # without axes it is SciPy's correlate (every axis correlates, none broadcasts)
        if axes is None:
            continue
        cplan = plan_filter(s1, s2, a.dtype, b.dtype, func="correlate", mode=mode, axes=axes)
        ref_c = signal.fftconvolve(a, np.flip(b, axis=plan.axes) if plan.axes else b, mode=mode,
                                   axes=axes)
        assert close(numpy_filter(cplan, a, b), ref_c, "float64")


def test_result_dtypes_follow_scipy():
    kinds = [np.bool_, np.int8, np.uint8, np.int32, np.int64, np.uint64, np.float16, np.float32,
             np.float64, np.complex64, np.complex128]
    a2 = np.ones((4, 5))
    for d1, d2 in itertools.product(kinds, repeat=2):
        x, y = a2.astype(d1), np.ones((2, 2), d2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert fftconvolve_dtype(d1, d2) == signal.fftconvolve(x, y).dtype, (d1, d2)
            assert result_dtype(d1, d2) == signal.correlate(x, y, method="fft").dtype, (d1, d2)
        if not (np.dtype(result_dtype(d1, d2)) in (np.bool_, np.float16)):
            assert result_dtype(d1, d2) == signal.correlate2d(x, y).dtype
    assert compute_dtype(np.int8) == "uint64" and compute_dtype(np.float16) == "float32"


ERRORS = [
    (dict(func="correlate", mode="bogus"), ((4,), (2,)), ValueError, "mode"),
    (dict(func="correlate2d", boundary="reflect"), ((4, 4), (2, 2)), ValueError, "boundary"),
    (dict(func="correlate"), ((4, 4), (2,)), ValueError, "same dimensionality"),
    (dict(func="correlate2d"), ((4, 4, 1), (2, 2, 1)), ValueError, "2-D"),
    (dict(func="convolve", mode="valid"), ((4, 6), (5, 2)), ValueError, "at least as large"),
    (dict(func="fftconvolve", axes=[]), ((4, 6), (5, 2)), ValueError, "cannot be empty"),
    (dict(func="fftconvolve", axes=[0, 0]), ((4, 6), (5, 2)), ValueError, "unique"),
    (dict(func="fftconvolve", axes=[2]), ((4, 6), (5, 2)), ValueError, "exceeds"),
    (dict(func="fftconvolve", axes=[1]), ((4, 6), (5, 2)), ValueError, "incompatible"),
    (dict(func="correlate"), ((0, 6), (5, 2)), ValueError, "empty"),
]


@pytest.mark.parametrize("kwargs,shapes,exc,match", ERRORS)
def test_plan_errors(kwargs, shapes, exc, match):
    with pytest.raises(exc, match=match):
        plan_filter(*shapes, np.float32, np.float32, **kwargs)


def test_fillvalue_rules_follow_scipy():
    assert check_fillvalue(1.7, np.dtype(np.int32)) == 1
    assert check_fillvalue(np.array([2.5], np.float32), np.dtype(np.float32)) == np.float32(2.5)
    with pytest.raises(ValueError, match="could not cast"):  # arrays must cast safely (SciPy)
        check_fillvalue(np.array([2.5]), np.dtype(np.float32))
    with pytest.raises(ValueError, match="fillvalue"):
        check_fillvalue([1, 2], np.dtype(np.float64))
    with pytest.raises(ValueError, match="fillvalue"):
        check_fillvalue(1 + 2j, np.dtype(np.float64))
    assert check_fillvalue(1 + 2j, np.dtype(np.complex64)) == np.complex64(1 + 2j)


def test_public_functions_validate_before_touching_arrays(monkeypatch):
    """Bad arguments raise ValueError/TypeError before any kernel is compiled or array touched.
    (fillvalue is checked once the result dtype is known, as in SciPy:
    test_signal_public_host.py.)"""
    from cupyconv._core import jit

    def boom(*args, **kwargs):
        raise AssertionError("a kernel was requested")

    monkeypatch.setattr(jit, "get_function", boom)
    a, b = np.ones((8, 8), np.float32), np.ones((3, 3), np.float32)
    for call, exc in [(lambda: cs.correlate(a, b, mode="bogus"), ValueError),
                      (lambda: cs.convolve(a, b, method="gpu"), ValueError),
                      (lambda: cs.correlate2d(a, b, boundary="nearest"), ValueError),
                      (lambda: cs.fftconvolve(a, b, mode="whole"), ValueError),
                      (lambda: cs.choose_conv_method(a, b, mode="x"), ValueError),
                      (lambda: cs.correlate(a, b), TypeError)]:  # NumPy input: move it to the GPU
        with pytest.raises(exc):
            call()


def test_next_fast_len_is_the_smallest_7_smooth_length():
    def smooth(n):
        for p in (2, 3, 5, 7):
            while n % p == 0:
                n //= p
        return n == 1

    for n in list(range(1, 400)) + [4097, 4103, 1087, 10007]:
        got = _signal_fft.next_fast_len(n)
        assert got >= n and smooth(got)
        assert all(not smooth(m) for m in range(n, got))
    assert _signal_fft.next_fast_len(4102) == 4116 and _signal_fft.next_fast_len(1) == 1


def test_cost_model_prefers_direct_for_small_and_fft_for_large_kernels():
    def plan(s1, s2, mode="same"):
        return plan_filter(s1, s2, np.float32, np.float32, func="correlate", mode=mode)

    assert _signal_cost.choose(plan((4096, 4096), (3, 3)), "float32") == "direct"
    assert _signal_cost.choose(plan((4096, 4096), (7, 7)), "float32") == "direct"
    assert _signal_cost.choose(plan((4096, 4096), (63, 63)), "float32") == "fft"
    assert _signal_cost.choose(plan((8192, 8192), (127, 127)), "float32") == "fft"
    assert _signal_cost.choose(plan((64, 64), (5, 5)), "float32") == "direct"


def test_cost_model_scales_the_direct_kernel_on_three_axes():
    """Over three axes the 2-d slope per tap is scaled per kernel: DIRECT_3D_FACTOR for
    filter_direct's 3-d tiles, DENSE_VOLUME_FACTOR for nd_dense_tile ('same' volumes only);
    2-d plans are unscaled.  128^3 with 3^3 stays direct."""
    def plan(s1, s2, mode="same"):
        return plan_filter(s1, s2, np.float32, np.float32, func="correlate", mode=mode)

    same3, full3 = plan((96, 96, 96), (15, 15, 15)), plan((96, 96, 96), (15, 15, 15), "full")
    p2 = plan((512, 512), (15, 15))
    assert _signal_cost.DIRECT_3D_FACTOR > 1 and _signal_cost.DENSE_VOLUME_FACTOR > 1
    assert _signal_cost.choose(plan((128, 128, 128), (3, 3, 3)), "float32") == "direct"
    assert _signal_cost.dense_volume_ms(full3, "float32") is None
    estimates = {"filter_direct": lambda p: _signal_cost.filter_direct_ms(p, "float32"),
                 "dense": lambda p: _signal_cost.dense_volume_ms(p, "float32") or 0.0}
    base = {(n, p.mode, len(p.axes)): f(p) for n, f in estimates.items() for p in (same3, full3, p2)}
    for name, scaled in (("DIRECT_3D_FACTOR", "filter_direct"), ("DENSE_VOLUME_FACTOR", "dense")):
        old = getattr(_signal_cost, name)
        try:
            setattr(_signal_cost, name, 1.0)
            for n, f in estimates.items():
                for p in (same3, full3, p2):
                    got, before = f(p), base[(n, p.mode, len(p.axes))]
                    if n == scaled and len(p.axes) == 3 and before:
                        assert got < before, (name, n, p.mode)
                    else:
                        assert got == before, (name, n, p.mode)
        finally:
            setattr(_signal_cost, name, old)


def test_plan_is_hashable_and_frozen():
    p = plan_filter((8, 8), (3, 3), np.float32, np.float32, func="correlate")
    assert isinstance(p, FilterPlan) and hash(p) == hash(p)
    with pytest.raises(Exception):
        p.mode = "valid"


def test_signal_sizes_beyond_the_limits():
    from cupyconv._dispatch.signal import choose
    from cupyconv._signal.plan import check_direct_sizes, direct_fits

    f4 = np.dtype(np.float32)
    # a full result over 2**48 bytes (possible with broadcast views): a named ValueError
    with pytest.raises(ValueError, match=r"the result of correlate .* 2\*\*48 bytes"):
        plan_filter((2 ** 47,), (2 ** 47,), f4, f4, func="correlate")
    # a signal longer than 2**31: the direct kernel cannot take it, auto goes to the FFT
    long = plan_filter((2 ** 31,), (3,), f4, f4, func="correlate", mode="same")
    assert not direct_fits(long) and choose(long, "float32") == "fft"
    with pytest.raises(ValueError, match=r"method='direct': .* < 2\*\*31 \(use method='fft'\)"):
        check_direct_sizes(long)
    small = plan_filter((2 ** 31 - 1,), (3,), f4, f4, func="correlate", mode="same")
    assert direct_fits(small)
    check_direct_sizes(small)
    # many planes (batch axes) beyond 2**31 also
    stack = plan_filter((2 ** 20, 2 ** 12, 8), (1, 1, 3), f4, f4, func="correlate", axes=2)
    assert not direct_fits(stack)
