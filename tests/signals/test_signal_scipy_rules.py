"""SciPy's argument and dtype rules for the signal API, checked on the CPU against scipy.signal.

The rules decided before any GPU work: ``axes=`` validation (scipy.fft's), the ``fillvalue`` cast
of correlate2d/convolve2d, which float16 / bool problems ``method='direct'`` takes (SciPy sends
1-d ones to NumPy's loops), the dtype of FFT convolutions that transform no axis, and the
overlap-add block plan of ``oaconvolve``.  The GPU side of the same cases is
tests/signals/test_gpu_signal_scipy_cases.py.
"""

import itertools
import warnings

import numpy as np
import pytest
from scipy import signal

import cupyconv.signal as cs
from cupyconv._signal import fft as _signal_fft
from cupyconv._signal.dtypes import check_direct_dtype, check_fillvalue, numpy_direct_path
from cupyconv._signal.plan import axes_key, plan_filter

BAD_AXES = [[[1, 2], [3, 4]], [1., 2.], 1.0, [0.5], "a", [None], [[0]]]


@pytest.mark.parametrize("axes", BAD_AXES, ids=repr)
def test_bad_axes_raise_value_error_as_scipy(axes):
    with pytest.raises(ValueError, match="axes must be a scalar or iterable of integers"):
        signal.fftconvolve(np.ones(3), np.ones(3), axes=axes)
    with pytest.raises(ValueError, match="axes must be a scalar or iterable of integers"):
        axes_key(axes)
    # raised by the public functions before they look at the operands (NumPy inputs here)
    a = np.ones(3)
    for call in (lambda: cs.fftconvolve(a, a, axes=axes), lambda: cs.oaconvolve(a, a, axes=axes),
                 lambda: cs.convolve(a, a, axes=axes), lambda: cs.correlate(a, a, axes=axes),
                 lambda: cs.choose_conv_method(a, a, axes=axes)):
        with pytest.raises(ValueError, match="axes must be a scalar"):
            call()


def test_axes_accepted_as_scipy():
    assert axes_key(None) is None
    assert axes_key(1) == (1,) and axes_key(np.int64(-1)) == (-1,)
    assert axes_key([0, np.int32(1)]) == (0, 1) and axes_key(range(2)) == (0, 1)
    assert axes_key(True) == (1,)  # operator.index(True) == 1, as scipy.fft takes it
    for axes, match in [([], "cannot be empty"), ([1], "exceeds"), ([-2], "exceeds"),
                        ([0, 0], "unique"), ([0, -1], "unique")]:
        for func in ("fftconvolve", "oaconvolve", "convolve"):
            with pytest.raises(ValueError, match=match):
                plan_filter((3,), (2,), np.float64, np.float64, func=func, axes=axes)
        with pytest.raises(ValueError, match=match):
            signal.fftconvolve(np.ones(3), np.ones(2), axes=axes)


FILL_DTYPES = ["uint8", "uint16", "uint64", "int8", "int16", "int64", "float32", "complex64"]
FILL_VALUES = [0, 1, -1, 1.5, -1.5, 255, 256, -129, 1e300, np.float32(-1.0), np.array(-1),
               np.array([2.5]), np.array([2.5], np.float32), 2 ** 63, np.nan, True, 1j, 0j,
               np.uint8(200), np.int64(-1), [3], [1, 2], []]


@pytest.mark.parametrize("dtype", FILL_DTYPES)
def test_fillvalue_cast_follows_scipy(dtype):
    """SciPy casts fillvalue to the result dtype: arrays by the safe rule, scalars as NumPy
    converts them (Python ints out of range, NaN or negative floats for unsigned results and
    complex values for real results fail) and raises ValueError; else the cast value fills."""
    a, b = np.ones((1, 1), dtype), np.ones((1, 2), dtype)
    for fv in FILL_VALUES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                ref = signal.convolve2d(a, b, fillvalue=fv)
            except ValueError:
                with pytest.raises(ValueError, match="fillvalue"):
                    check_fillvalue(fv, np.dtype(dtype))
                continue
            got = check_fillvalue(fv, np.dtype(dtype))
            assert got.dtype == np.dtype(dtype)
            if not np.isfinite(got):
                continue  # (accepted by both; inf * 1 reads inf + nan j in SciPy's complex loop)
            # full mode of a 1x1 with a 1x2: out[0, 0] = a * b[0, 0] + fill * b[0, 1]
            assert ref[0, 0] == np.array(1, dtype) + got, (fv, got, ref)


def test_fillvalue_of_unsigned_inputs_refused_before_any_work():
    a, b = np.ones((4, 4), np.uint8), np.ones((2, 2), np.uint8)
    with pytest.raises(ValueError, match="could not cast `fillvalue` directly to the output"):
        signal.correlate2d(a, b, fillvalue=-1)
    plan = plan_filter(a.shape, b.shape, a.dtype, b.dtype, func="correlate2d")
    with pytest.raises(ValueError, match="could not cast `fillvalue` directly to the output"):
        check_fillvalue(-1, plan.result_dtype)
    assert check_fillvalue(-1, np.dtype(np.int16)) == -1  # uint8 x int8 -> int16 takes it


@pytest.mark.parametrize("dtype", ["float16", "bool"])
def test_direct_float16_and_bool_where_scipy_takes_them(dtype):
    """method='direct' takes 1-d float16 and bool x bool (SciPy: np.convolve/np.correlate) and
    refuses them elsewhere, exactly where SciPy does."""
    for func, (s1, s2), mode in itertools.product(
            ["convolve", "correlate"],
            [((10,), (3,)), ((3,), (10,)), ((10,), (10,)), ((5, 10), (3, 3)),
             ((4, 5, 6), (2, 2, 2))],
            ["full", "same", "valid"]):
        a, b = np.ones(s1, dtype), np.ones(s2, dtype)
        plan = plan_filter(s1, s2, a.dtype, b.dtype, func=func, mode=mode)
        ok = numpy_direct_path(func, s1, s2, mode)
        try:
            ref = getattr(signal, func)(a, b, mode=mode, method="direct")
        except ValueError:
            assert not ok, (func, s1, s2, mode)
            with pytest.raises(ValueError, match="method='direct'"):
                check_direct_dtype(plan.result_dtype, func, ok)
            continue
        assert ok, (func, s1, s2, mode)
        check_direct_dtype(plan.result_dtype, func, ok)
        assert plan.result_dtype == ref.dtype and plan.out_shape == ref.shape
    for func in ("correlate2d", "convolve2d"):
        with pytest.raises(ValueError):
            getattr(signal, func)(np.ones((4, 4), dtype), np.ones((2, 2), dtype))
        assert not numpy_direct_path(func, (4,), (2,), "full")


KINDS = ["bool", "int8", "uint8", "int64", "uint64", "float16", "float32", "complex64"]


@pytest.mark.parametrize("func", ["fftconvolve", "oaconvolve"])
def test_frequency_dtypes_follow_scipy(func):
    """Floats where some axis is transformed; the operands' promoted dtype where none is."""
    for d1, d2 in itertools.product(KINDS, repeat=2):
        for s1, s2, axes in [((3, 4), (2, 3), None), ((3, 1), (1, 4), None), ((1,), (1,), None),
                             ((2, 5), (2, 1), 1), ((4, 5), (2, 5), 0)]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = getattr(signal, func)(np.ones(s1, d1), np.ones(s2, d2), axes=axes)
            plan = plan_filter(s1, s2, d1, d2, func=func, axes=axes)
            assert plan.result_dtype == ref.dtype and plan.out_shape == ref.shape, \
                (d1, d2, s1, s2, axes)


def test_overlap_add_block_lengths():
    for long in list(range(2, 120)) + [1000, 4097, 10 ** 6]:
        for short in range(1, min(long, 70)):
            n = _signal_fft.block_length(long, short)
            if 2 * short >= long or short == 1:
                assert n is None  # SciPy's fallbacks: no blocks where they cannot pay
                continue
            if n is None:
                continue
            step = n - short + 1
            assert n >= 2 * short - 1 and step >= short - 1  # a tail reaches one block only
            assert -(-long // step) > 1  # more than one block
            assert n == _signal_fft.next_fast_len(n)  # a 2,3,5,7-smooth transform length
            full = _signal_fft.next_fast_len(long + short - 1)
            blocks = -(-long // step)
            assert blocks * n * np.log2(n) < full * np.log2(full)
    assert _signal_fft.smooth_lengths(10, 30) == [10, 12, 14, 15, 16, 18, 20, 21, 24, 25, 27, 28,
                                                 30]


@pytest.mark.parametrize("s1,s2,axes,split", [
    ((50,), (4,), None, (0,)), ((4,), (50,), None, (0,)), ((50, 6), (4, 47), None, (0, 1)),
    ((3, 50, 47), (1, 4, 6), (1, 2), (1, 2)), ((50,), (47,), None, ()), ((6,), (6,), None, ()),
    ((1000, 40), (37, 40), None, (0,)), ((3, 1), (1, 4), None, ())])
def test_overlap_add_plan_splits_the_long_axes(s1, s2, axes, split):
    plan = plan_filter(s1, s2, np.float64, np.float64, func="oaconvolve", axes=axes)
    blocks = _signal_fft.overlap_add_blocks(plan)
    assert tuple(ax for ax, _, _ in blocks) == split
