"""cupyconv.signal's public functions end to end on the CPU (host_signal.py: NumPy for CuPy, the
direct kernels' NumPy models, the FFT path on NumPy's transforms), against scipy.signal: the
argument rules whose order and outcome depend on the operands (fillvalue, the dtypes
method='direct' takes, choose_conv_method of operands it cannot plan)."""

import itertools
import warnings

import numpy as np
import pytest
from scipy import signal

from host_signal import HostSignal, host

import cupyconv.signal as cs


@pytest.fixture
def public(monkeypatch):
    return HostSignal(monkeypatch)


def outcome(fn, *args, **kwargs):
    """The result of a call, or the exception it raised (warnings ignored)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - compared with SciPy's
            return exc


def same_outcome(ref, got, what):
    """Both raised the same exception type, or both returned the same dtype, shape and values."""
    if isinstance(ref, Exception) or isinstance(got, Exception):
        assert type(got) is type(ref), (what, ref, got)
        return
    got = np.asarray(got)
    assert got.dtype == ref.dtype and got.shape == ref.shape, (what, got.dtype, ref.dtype)
    np.testing.assert_allclose(got.astype(np.complex128), ref.astype(np.complex128), rtol=1e-6,
                               atol=1e-6, equal_nan=True, err_msg=str(what))


FILLVALUES = ["a", None, "1", b"1", 1.5, np.float64(1.5), np.array(1.5), np.array([1.5]), 1j,
              np.nan, -1, 300, 2 ** 70, object(), np.array([1]), np.array(1, np.uint8), [1, 2],
              [], (1,), True]


@pytest.mark.parametrize("func", ["correlate2d", "convolve2d"])
def test_fillvalue_as_scipy(public, func):
    """fillvalue as SciPy reads it: only for boundary 'fill', converted to the result dtype
    (None is NaN for floats, strings parse; an array casts safely), what is no number at all
    ('a', an object) raising that conversion's ValueError/TypeError naming fillvalue, anything
    else out of the dtype SciPy's "could not cast" ValueError; checked after the 2-d and boundary
    rules and before a result dtype is refused (bool, float16).  No kernel runs on an error."""
    a, b = np.arange(12.0).reshape(3, 4), np.array([[1.0, 2.0], [0.5, -1.0]])
    dtypes = ["float64", "float32", "int64", "uint8", "complex128", "float16", "bool"]
    for fv, dtype in itertools.product(FILLVALUES, dtypes):
        for boundary, mode in itertools.product(["fill", "wrap", "symm"], ["full", "same", "valid"]):
            x, y = a.astype(dtype), b.astype(dtype)
            public.kernels.clear()
            ref = outcome(getattr(signal, func), x, y, mode, boundary, fv)
            got = outcome(getattr(cs, func), host(x), host(y), mode, boundary, fv)
            what = (func, repr(fv), dtype, boundary, mode)
            same_outcome(ref, got, what)
            if isinstance(ref, Exception):
                assert public.kernels == [], what
                if "not available" not in str(ref):  # (the dtype rule names method='direct')
                    assert "fillvalue" in str(got), what
    for shape in ((3,), (2, 2, 2)):  # the 2-d rule first: ValueError, whatever the fillvalue
        ref = outcome(getattr(signal, func), np.ones(shape), np.ones(shape), fillvalue=object())
        got = outcome(getattr(cs, func), host(np.ones(shape)), host(np.ones(shape)),
                      fillvalue=object())
        assert type(ref) is type(got) is ValueError


NUMPY_LOOP_KINDS = ["bool", "float16"]
OTHER_KINDS = ["bool", "int8", "uint8", "float16", "float32", "complex64"]


def sample(rng, shape, dtype):
    a = rng.integers(0, 2, shape) if np.dtype(dtype).kind in "biu" else rng.standard_normal(shape)
    return a.astype(dtype)


@pytest.mark.parametrize("dtype", NUMPY_LOOP_KINDS)
@pytest.mark.parametrize("func", ["convolve", "correlate"])
def test_direct_float16_and_bool_as_scipy(public, func, dtype):
    """method='direct' with a float16 or bool operand and any other: SciPy's result dtype and
    values where its NumPy 1-d loops take the operands (1-d; 'same' only where in1 is the
    longer), its ValueError where its N-d loops refuse the result dtype (bool x bool, float16),
    and the N-d result where the promotion leaves them (bool x int8 -> int8, float16 x float32)."""
    rng = np.random.default_rng([len(func), NUMPY_LOOP_KINDS.index(dtype)])
    shapes = [((10,), (3,)), ((3,), (10,)), ((10,), (10,)), ((5, 6), (2, 3)), ((4, 3, 5), (2, 2, 2))]
    for other, (s1, s2), mode in itertools.product(OTHER_KINDS, shapes, ["full", "same", "valid"]):
        for d1, d2 in ((dtype, other), (other, dtype)):
            a, b = sample(rng, s1, d1), sample(rng, s2, d2)
            public.kernels.clear()
            ref = outcome(getattr(signal, func), a, b, mode, method="direct")
            got = outcome(getattr(cs, func), host(a), host(b), mode, method="direct")
            if not isinstance(ref, Exception) and ref.dtype == np.float16:
                ref, got = ref.astype(np.float64), np.asarray(got).astype(np.float64)
                np.testing.assert_allclose(got, ref, rtol=2e-3, atol=2e-3)
                continue
            same_outcome(ref, got, (d1, d2, s1, s2, mode))
            if isinstance(ref, Exception):
                assert public.kernels == []


UNPLANNABLE = [((3, 4, 5), (1, 2)), ((), (5,)), ((5,), ()), ((30, 40), (30,)), ((300, 400), (300,)),
               ((3000,), (30, 30)), ((2000,), (3, 4000)), ((1, 2), (3, 4, 5)), ((5, 3), ()),
               ((64, 64, 64), (9, 9)), ((7,), (2, 7))]


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_choose_conv_method_of_unplannable_operands_as_scipy(public, mode):
    """Operands convolve refuses (different dimensionality, a 0-d one) get SciPy's answer:
    'direct' for integers whose magnitudes could exceed a float64's integers and for bool x bool,
    else SciPy's CPU cost model on the zipped shapes, 'fft' included; SciPy's IndexError for a
    1-d in1 with a 0-d in2."""
    rng = np.random.default_rng(5)
    for (s1, s2), dtype in itertools.product(UNPLANNABLE, ["float64", "complex64", "bool", "int16",
                                                           "uint8", "int64"]):
        for scale in (1, 2 ** 40):
            if scale > 1 and np.dtype(dtype).kind not in "iu":
                continue
            a = (rng.integers(0, 3, s1) * scale).astype(dtype)
            b = (rng.integers(0, 3, s2) * scale).astype(dtype)
            ref = outcome(signal.choose_conv_method, a, b, mode)
            got = outcome(cs.choose_conv_method, host(a), host(b), mode)
            if isinstance(ref, Exception):
                assert type(got) is type(ref), (s1, s2, dtype, ref, got)
            else:
                assert got == ref, (s1, s2, dtype, scale, ref, got)
    assert public.kernels == []
