"""SciPy's and CuPy's own signal test cases, re-expressed over cupyconv.signal, SciPy as the oracle.

The cases follow scipy/signal/tests/test_signaltools.py (TestConvolve, TestConvolve2d,
TestFFTConvolve, TestOAConvolve, TestAllFreqConvolves, TestCorrelateReal/Complex,
TestCorrelate2d, test_choose_conv_method) and CuPy's
tests/cupyx_tests/scipy_tests/signal_tests/test_signaltools.py (TestConvolveCorrelate,
TestFFTConvolve, TestFFTConvolveFastShape, TestOAConvolve, TestConvolveCorrelate2D,
TestConvolve2DEdgeCase, TestChooseConvMethod): where those suites hold hand-computed values the
values are checked; everywhere SciPy on the CPU is the oracle, with CuPy's rules: same dtype and
shape, values within a per-dtype tolerance, a C-contiguous result, and where SciPy raises
``ValueError`` we raise it too.  Inputs are CuPy arrays (cupyconv refuses lists and NumPy arrays by
design).  The grids loop inside each test to keep pytest's per-test overhead down.
"""

import itertools
import warnings

import numpy as np
import pytest
from scipy import signal

import cupyconv.signal as cs

pytestmark = pytest.mark.gpu

ALL_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
              "float16", "float32", "float64", "complex64", "complex128"]
FLOAT_DTYPES = ["float16", "float32", "float64", "complex64", "complex128"]  # CuPy's 'efdFD'


def sample(rng, shape, dtype):
    """CuPy's shaped_random: bool 0/1, other types uniform [0, 10) cast (integers 0..9)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return np.asarray(rng.integers(0, 2, shape).astype(bool))
    a = rng.random(shape) * 10
    if dtype.kind == "c":
        a = a + 1j * rng.random(shape) * 10
    return np.asarray(a.astype(dtype))  # (a 0-d array, not a NumPy scalar, for shape ())


def tolerance(dtype, table):
    return table.get(np.dtype(dtype).name, table["default"])


def gpu(*arrays):
    import cupy

    return [cupy.asarray(a) for a in arrays]


def compare(func, args, kwargs=None, tol=1e-10, exact_bool=True):
    """cupyconv.signal.<func> against scipy.signal.<func> on the same arguments (NumPy arrays
    moved to the GPU for ours, the rest as given): both raise ValueError, or same dtype, shape
    and values, and ours is C-contiguous."""
    import cupy

    kwargs = kwargs or {}
    ours = [cupy.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ref = np.asarray(getattr(signal, func)(*args, **kwargs))
        except ValueError:
            with pytest.raises(ValueError):
                getattr(cs, func)(*ours, **kwargs)
            return
    got = getattr(cs, func)(*ours, **kwargs)
    assert isinstance(got, cupy.ndarray) and got.flags.c_contiguous, (func, kwargs)
    got = cupy.asnumpy(got)
    assert got.dtype == ref.dtype and got.shape == ref.shape, (func, kwargs, got.dtype, ref.dtype,
                                                               got.shape, ref.shape)
    if ref.dtype.kind in "biu" and exact_bool:
        np.testing.assert_array_equal(got, ref, err_msg=f"{func} {kwargs}")
    else:
        with np.errstate(invalid="ignore"):
            np.testing.assert_allclose(got.astype(np.complex128), ref.astype(np.complex128),
                                       rtol=tol, atol=tol, err_msg=f"{func} {kwargs}")


# --------------------------------------------------------------------------- CuPy's suite
CUPY_SIZES1 = [(10,), (5, 10), (10, 3), (3, 4, 10)]
CUPY_SIZES2 = [3, 4, 5, 10]
MODES = ["full", "same", "valid"]
DIRECT_TOLS = {"float32": 1e-5, "complex64": 1e-5, "float16": 1e-3, "default": 1e-10}
FFT_TOLS = {"float32": 1e-3, "complex64": 1e-3, "float16": 1e-3, "default": 1e-8}


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("func", ["convolve", "correlate"])
def test_cupy_convolve_correlate_direct(func, dtype):
    rng = np.random.default_rng([len(func), ALL_DTYPES.index(dtype)])
    for size1, size2, mode in itertools.product(CUPY_SIZES1, CUPY_SIZES2, MODES):
        a, b = sample(rng, size1, dtype), sample(rng, (size2,) * len(size1), dtype)
        compare(func, (a, b, mode), {"method": "direct"}, tolerance(dtype, DIRECT_TOLS))


# (CuPy's suite leaves bool out of convolve/correlate with method='fft')
@pytest.mark.parametrize("func,dtype", [(f, d) for f in ("fftconvolve", "convolve", "correlate")
                                        for d in ALL_DTYPES
                                        if d != "bool" or f == "fftconvolve"])
def test_cupy_fft_paths(func, dtype):
    kwargs = {} if func == "fftconvolve" else {"method": "fft"}
    rng = np.random.default_rng([len(func), ALL_DTYPES.index(dtype), 1])
    for size1, size2, mode in itertools.product(CUPY_SIZES1, CUPY_SIZES2, MODES):
        a, b = sample(rng, size1, dtype), sample(rng, (size2,) * len(size1), dtype)
        compare(func, (a, b, mode), kwargs, tolerance(dtype, FFT_TOLS))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("func", ["convolve", "correlate"])
def test_fft_precision_of_mixed_dtypes(func, mode):
    """method='fft' of a single-precision operand with an integer or bool one (float32 x uint16
    -> float32, as in SciPy's test_convolve_method) transforms in double, as SciPy does, and casts
    the result: within 2 ulps of the exact sum in every element, and of SciPy's result within
    SciPy's own fft-to-direct tolerance (fresh random data, 1-d to 3-d)."""
    rng = np.random.default_rng()
    singles, others = ["float32", "complex64", "float16"], ["bool", "int8", "uint8", "int16",
                                                           "uint16"]
    pairs = [(a, b) for a in singles for b in others] + [(b, a) for a in singles for b in others]
    for (d1, d2), (s1, s2) in itertools.product(pairs, [((100,), (37,)), ((9, 12), (4, 3)),
                                                        ((5, 6, 7), (3, 2, 4))]):
        a = rng.choice([0, 1], s1) if d1 in others else rng.standard_normal(s1) * (
            1 + 0.5j if d1 == "complex64" else 1)
        b = rng.choice([0, 1], s2) if d2 in others else rng.standard_normal(s2) * (
            1 + 0.5j if d2 == "complex64" else 1)
        a, b = a.astype(d1), b.astype(d2)
        got = cupy_get(getattr(cs, func)(*gpu(a, b), mode=mode, method="fft"))
        wide = [v.astype(np.complex128 if v.dtype.kind == "c" else np.float64) for v in (a, b)]
        exact = getattr(signal, func)(*wide, mode=mode, method="direct")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = getattr(signal, func)(a, b, mode=mode, method="fft")
        assert got.dtype == ref.dtype and got.shape == ref.shape, (d1, d2, s1)
        expected = exact.astype(ref.dtype)
        ulp = np.spacing(np.maximum(np.abs(expected.real), np.abs(expected.imag)))
        assert (np.abs(got - expected) <= 2 * ulp + 1e-12 * np.abs(exact).max()).all(), (d1, d2)
        # (SciPy's own single-precision FFT is off by ~1e-6 of the result's scale: near-zero
        # elements of fresh data missed an absolute 1e-6 by its error alone, 1.2e-6 once)
        scale = max(1.0, float(np.abs(exact).max()))
        tol = (dict(rtol=1e-3, atol=1e-3 * scale) if "float16" in (d1, d2)
               else dict(rtol=1e-4, atol=1e-6 * scale))
        np.testing.assert_allclose(got, ref, **tol)


def cupy_get(z):
    import cupy

    assert isinstance(z, cupy.ndarray) and z.flags.c_contiguous
    return cupy.asnumpy(z)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_cupy_fftconvolve_fast_shapes(dtype):
    """Axes of length 1 broadcast (no transform), 0-d operands, axes= with broadcasting."""
    rng = np.random.default_rng(FLOAT_DTYPES.index(dtype))
    shapes = [((1,), (7,)), ((3,), (1,)), ((5, 4), (3, 1)), ((1, 1), (2, 4)), ((), ()),
              ((5, 1, 1), (1, 4, 1))]
    for (s1, s2), mode in itertools.product(shapes, MODES):
        compare("fftconvolve", (sample(rng, s1, dtype), sample(rng, s2, dtype)), {"mode": mode},
                1e-3)
    for (s1, s2), mode in itertools.product([((5, 1), (1, 4)), ((5, 1, 1), (1, 4, 1))],
                                            ["full", "same"]):
        compare("fftconvolve", (sample(rng, s1, dtype), sample(rng, s2, dtype)), {"mode": mode},
                1e-3)
    with_axes = [((1, 4), (2, 4), (0,)), ((2, 5, 5), (2, 1, 3), (1, 2)),
                 ((2, 5, 5), (2, 1, 1), (1, 2)), ((1, 5, 5), (2, 1, 3), (1, 2))]
    for (s1, s2, axes), mode in itertools.product(with_axes, MODES):
        compare("fftconvolve", (sample(rng, s1, dtype), sample(rng, s2, dtype)),
                {"mode": mode, "axes": axes}, 1e-3)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_cupy_oaconvolve(dtype):
    rng = np.random.default_rng([ALL_DTYPES.index(dtype), 2])
    for size1, size2, mode in itertools.product([(10,), (5, 10), (10, 3), (3, 10, 15)],
                                                CUPY_SIZES2 + [None], MODES):
        shape2 = size1 if size2 is None else (size2,) * len(size1)
        a, b = sample(rng, size1, dtype), sample(rng, shape2, dtype)
        compare("oaconvolve", (a, b, mode), {}, tolerance(dtype, FFT_TOLS))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("func", ["convolve2d", "correlate2d"])
def test_cupy_convolve_correlate_2d(func, dtype):
    """Every boundary with SciPy's fill values, including a negative fill for unsigned inputs
    (SciPy: "could not cast fillvalue"; CuPy's suite skips those, we match SciPy)."""
    rng = np.random.default_rng([len(func), ALL_DTYPES.index(dtype), 3])
    tols = {"float32": 5e-4, "complex64": 5e-4, "float16": 1e-3, "default": 1e-10}
    options = [("fill", fv) for fv in (0, 1, -1)] + [("wrap", 0), ("symm", 0)]
    for size1, size2, mode, (boundary, fill) in itertools.product(
            [(5, 10), (10, 7)], [(3, 2), (3, 3), (2, 2), (10, 10), (11, 11)], MODES, options):
        a, b = sample(rng, size1, dtype), sample(rng, size2, dtype)
        compare(func, (a, b, mode, boundary, fill), {}, tolerance(dtype, tols))


def test_cupy_convolve2d_edge_cases():
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, (64, 64)).astype(np.uint8)
    scharr = np.array([[-3 - 3j, 0 - 10j, 3 - 3j], [-10 + 0j, 0 + 0j, 10 + 0j],
                       [-3 + 3j, 0 + 10j, 3 + 3j]])
    compare("convolve2d", (image, scharr), {"boundary": "symm", "mode": "same"}, 1e-5)
    a, b = np.array([[257]], np.uint64), np.array([[1]], np.uint8)
    compare("convolve2d", (a, b), {"mode": "same"})
    compare("convolve2d", (b, a), {"mode": "same"})


@pytest.mark.parametrize("mode", MODES)
def test_cupy_choose_conv_method(mode):
    import cupy

    for dtype in ALL_DTYPES[1:9]:  # integers: always the exact direct path
        a, b = cupy.arange(10, dtype=dtype), cupy.arange(5, dtype=dtype)
        assert cs.choose_conv_method(a, b, mode=mode) == "direct"
    for dtype in ALL_DTYPES:
        # CuPy raises NotImplementedError here; SciPy answers 'direct', and so do we
        assert cs.choose_conv_method(cupy.ones((3, 4, 5), dtype), cupy.ones((1, 2), dtype),
                                     mode=mode) == "direct"
        assert cs.choose_conv_method(cupy.ones((), dtype), cupy.ones((5,), dtype),
                                     mode=mode) == "direct"
    for dtype in FLOAT_DTYPES:
        # CuPy asserts 'fft' for its own cost model; ours answers for our kernels
        long, short = cupy.arange(10000, dtype=dtype), cupy.arange(5000, dtype=dtype)
        assert cs.choose_conv_method(long, short, mode=mode) in ("direct", "fft")
        assert cs.choose_conv_method(short, long, mode=mode) in ("direct", "fft")


# --------------------------------------------------------------------------- SciPy's suite
def check_values(got, expected, tol=0.0):
    import cupy

    assert got.flags.c_contiguous
    got = cupy.asnumpy(got)
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


def test_scipy_convolve_values():
    import cupy

    a, b = gpu(np.array([3, 4, 5, 6, 5, 4]), np.array([1, 2, 3]))
    check_values(cs.convolve(a, b), [3, 10, 22, 28, 32, 32, 23, 12])
    a, b = gpu(np.array([3, 4, 5]), np.array([1, 2, 3, 4]))
    check_values(cs.convolve(a, b, mode="same"), [10, 22, 34])
    check_values(cs.convolve(a, b[:3], mode="same"), [10, 22, 22])
    x, y = gpu(np.array([1 + 1j, 2 + 1j, 3 + 1j]), np.array([1 + 1j, 2 + 1j]))
    check_values(cs.convolve(x, y), [2j, 2 + 6j, 5 + 8j, 5 + 5j])
    a0, b0 = cupy.asarray(1289), cupy.asarray(4567)
    assert int(cs.convolve(a0, b0)) == 1289 * 4567 and cs.convolve(a0, b0).ndim == 0
    a1, b1 = gpu(np.array([4967]), np.array([3920]))
    check_values(cs.convolve(a1, b1), [4967 * 3920])
    a, b = gpu(np.array([[1, 2, 3], [3, 4, 5]]), np.array([[2, 3, 4], [4, 5, 6]]))
    check_values(cs.convolve(a, b), [[2, 7, 16, 17, 12], [10, 30, 62, 58, 38],
                                     [12, 31, 58, 49, 30]])
    a, b = gpu(np.array([1, 2, 3, 6, 5, 3]), np.array([2, 3, 4, 5, 3, 4, 2, 2, 1]))
    check_values(cs.convolve(a, b, "valid"), [70, 78, 73, 65])
    check_values(cs.convolve(b, a, "valid"), [70, 78, 73, 65])
    a, b = gpu(np.array([1 + 5j, 2 - 1j, 3 + 0j]), np.array([2 - 3j, 1 + 0j]))
    check_values(cs.convolve(a, b, "valid"), [2 - 3j, 8 - 10j])
    check_values(cs.convolve(b, a, "valid"), [2 - 3j, 8 - 10j])
    a, b = gpu(np.array([1, 2, 3, 3, 1, 2]), np.array([1, 4, 3, 4, 5, 6, 7, 4, 3, 2, 1, 1, 3]))
    check_values(cs.convolve(a, b, "same"), [57, 61, 63, 57, 45, 36])


@pytest.mark.parametrize("method", ["auto", "direct", "fft"])
def test_scipy_convolve_broadcastable_and_input_swapping(method):
    a = np.arange(27).reshape(3, 3, 3)
    for i in range(3):
        shape = [1, 1, 1]
        shape[i] = 3
        compare("convolve", (a, np.arange(3).reshape(shape)), {"method": method})
    small = np.arange(8).reshape(2, 2, 2)
    big = 1j * np.arange(27, dtype=np.complex128).reshape(3, 3, 3) + \
        np.arange(27, dtype=np.complex128)[::-1].reshape(3, 3, 3)
    for mode, (x, y) in itertools.product(MODES, [(small, big), (big, small)]):
        compare("convolve", (x, y, mode), {"method": method}, 1e-9)


def test_scipy_convolve_errors():
    import cupy

    a, b = gpu(np.array([3, 4, 5]), np.array([1, 2, 3]))
    for func in (cs.convolve, cs.correlate):
        for mode, method in [("spam", "auto"), ("eggs", "fft"), ("ham", "direct"),
                             ("full", "bacon"), ("same", "bacon")]:
            with pytest.raises(ValueError):
                func(a, b, mode=mode, method=method)
        x, y = gpu(np.arange(1, 7).reshape(2, 3), np.arange(-6, 0).reshape(3, 2))
        for p, q in [(x, y), (y, x)]:
            with pytest.raises(ValueError):
                func(p, q, mode="valid")
        for p, q, method in [([1], 2, "direct"), (1, [2], "direct"), ([1], 2, "fft"),
                             (1, [2], "fft"), ([1], [[2]], "auto"), ([3], 2, "auto")]:
            with pytest.raises(ValueError):
                func(cupy.asarray(p), cupy.asarray(q), method=method)
    for func in (cs.convolve2d, cs.correlate2d):
        for p, q in [(x, y), (y, x)]:
            with pytest.raises(ValueError):
                func(p, q, mode="valid")
        for p, q in [(3, 4), ([3], [4]), ([[[3]]], [[[4]]])]:
            with pytest.raises(ValueError):
                func(cupy.asarray(p), cupy.asarray(q))


def test_scipy_convolve_method_every_dtype_pair():
    """SciPy's test_convolve_method: fft and direct agree in dtype and (within SciPy's
    tolerances) in value for every pair of dtypes; both match SciPy's own results."""
    import cupy

    rng = np.random.default_rng(42)
    n = 20
    base = {"i": rng.choice([0, 1], size=n), "f": rng.standard_normal(n)}
    base["b"] = base["u"] = base["i"]
    base["c"] = base["f"] + 0.5j * base["f"]
    for t1, t2, mode in itertools.product(ALL_DTYPES, ALL_DTYPES, MODES):
        x1 = base[np.dtype(t1).kind].astype(t1)
        x2 = base[np.dtype(t2).kind].astype(t2)[:7]
        got = {m: cs.convolve(*gpu(x1, x2), method=m, mode=mode) for m in ("fft", "direct")}
        assert got["fft"].dtype == got["direct"].dtype
        if t1 == t2 == "bool":
            assert cs.choose_conv_method(*gpu(x1, x2)) == "direct"
            continue
        if "complex64" in (t1, t2) or "float32" in (t1, t2):
            tol = dict(rtol=1e-4, atol=1e-6)
        elif "float16" in (t1, t2):
            tol = dict(rtol=1e-3, atol=1e-3)
        else:
            tol = dict(rtol=1e-5, atol=1e-8)
        f, d = cupy.asnumpy(got["fft"]), cupy.asnumpy(got["direct"])
        np.testing.assert_allclose(f.astype(complex), d.astype(complex), **tol)
        compare("convolve", (x1, x2), {"mode": mode, "method": "direct"},
                1e-3 if "float16" in (t1, t2) else 1e-5)


def test_scipy_convolve_large_integers():
    import cupy

    for n in [10, 20, 50, 51, 52, 53, 54, 60, 62]:
        z = cupy.asarray([2 ** n], dtype=cupy.int64)
        fft, direct = cs.convolve(z, z, method="fft"), cs.convolve(z, z, method="direct")
        assert fft.dtype == direct.dtype == np.int64
        if n < 50:
            assert int(fft[0]) == int(direct[0]) == 2 ** (2 * n)
    x = cupy.asarray([2 ** 51], dtype=cupy.int64)
    for mode in MODES:
        assert cs.choose_conv_method(x, x, mode=mode) == "direct"


def test_scipy_convolve2d_values():
    a, b = gpu(np.array([[1, 2, 3], [3, 4, 5]]), np.array([[2, 3, 4], [4, 5, 6]]))
    check_values(cs.convolve2d(a, b), [[2, 7, 16, 17, 12], [10, 30, 62, 58, 38],
                                       [12, 31, 58, 49, 30]])
    check_values(cs.convolve2d(a, b, "full", "fill", 1), [[24, 26, 31, 34, 32],
                                                          [28, 40, 62, 64, 52],
                                                          [32, 46, 67, 62, 48]])
    check_values(cs.convolve2d(a, b, "full", "wrap"), [[80, 80, 74, 80, 80], [68, 68, 62, 68, 68],
                                                       [80, 80, 74, 80, 80]])
    check_values(cs.convolve2d(a, b, "full", "symm"), [[34, 30, 44, 62, 66], [52, 48, 62, 80, 84],
                                                       [82, 78, 92, 110, 114]])
    e = np.array([[2, 3, 4, 5, 6, 7, 8], [4, 5, 6, 7, 8, 9, 10]])
    f = np.array([[1, 2, 3], [3, 4, 5]])
    fc = f.astype(complex) + 1j
    for p, q in [(e, f), (f, e)]:
        check_values(cs.convolve2d(*gpu(p, q), "valid"), [[62, 80, 98, 116, 134]])
    for p, q in [(e, fc), (fc, e)]:
        check_values(cs.convolve2d(*gpu(p, q), "valid"),
                     [[62 + 24j, 80 + 30j, 98 + 36j, 116 + 42j, 134 + 48j]], 1e-12)
    check_values(cs.convolve2d(*gpu(f, e), "same"), [[22, 28, 34], [80, 98, 116]])
    e2 = np.array([[1 + 1j, 2 - 3j], [3 + 1j, 4 + 0j]])
    f2 = np.array([[2 - 1j, 3 + 2j, 4 + 0j], [4 - 0j, 5 + 1j, 6 - 3j]])
    check_values(cs.convolve2d(*gpu(e2, f2), "valid"), [[27 - 1j, 46. + 2j]])
    check_values(cs.convolve2d(*gpu(f2, e2), "valid"), [[27 - 1j, 46. + 2j]])


@pytest.mark.parametrize("method", ["auto", "direct", "fft"])
def test_scipy_convolve2d_boundaries(method):
    image, kernel = gpu(np.array([[2.0, -1.0, 3.0, 4.0]]), np.ones((1, 21)))
    for func in (cs.convolve2d, cs.correlate2d):
        check_values(func(image, kernel, mode="same", boundary="symm", method=method),
                     [[37.0, 42.0, 44.0, 45.0]], 1e-12)
        check_values(func(image, kernel, mode="same", boundary="wrap", method=method),
                     [[43.0, 44.0, 42.0, 39.0]], 1e-12)
    a = np.arange(1, 31, dtype=float).reshape(10, 3)
    b = np.arange(1, 101, dtype=float).reshape(10, 10)
    compare("convolve2d", (a, b), {"mode": "same", "boundary": "wrap"}, 1e-12)
    a = np.arange(1, 10, dtype=float).reshape(3, 3)
    b = np.arange(1, 37, dtype=float).reshape(6, 6)
    compare("convolve2d", (a, b), {"mode": "full", "boundary": "wrap"}, 1e-12)


def test_scipy_convolve2d_fillvalue_errors_and_consistency():
    a, b = gpu(np.array([[1]]), np.array([[1, 2]]))
    with pytest.raises(ValueError, match="could not cast `fillvalue` directly to the output"):
        cs.convolve2d(a, b, fillvalue=1j)
    with pytest.raises(ValueError, match="`fillvalue` must be scalar or an array with"):
        cs.convolve2d(a, b, fillvalue=[1, 2])
    with pytest.raises(ValueError):
        cs.convolve2d(a, b, fillvalue=[])
    u, v = gpu(np.ones((4, 4), np.uint8), np.ones((2, 2), np.uint8))
    with pytest.raises(ValueError, match="could not cast"):  # SciPy's rule, not a wrap-around
        cs.correlate2d(u, v, fillvalue=-1)
    x, k = np.arange(5), np.array([3.2, 1.4, 3])
    for mode in MODES:
        ref = np.convolve(x, k, mode=mode)
        check_values(cs.convolve(*gpu(x, k), mode=mode), ref, 1e-12)
        check_values(cs.convolve2d(*gpu(x[None], k[None]), mode=mode)[0], ref, 1e-12)
        ref = np.correlate(x, k, mode=mode)
        check_values(cs.correlate(*gpu(x, k), mode=mode), ref, 1e-12)
        check_values(cs.correlate2d(*gpu(x[None], k[None]), mode=mode)[0], ref, 1e-12)
    check_values(cs.correlate(*gpu(k, x), mode="valid"), np.correlate(k, x, mode="valid"), 1e-12)
    check_values(cs.correlate2d(*gpu(k[None], x[None]), mode="valid")[0],
                 np.squeeze(signal.correlate2d([k], [x], mode="valid")), 1e-12)
    for p, q, expected in [([[1]], [[2j]], -2j), ([[2j]], [[3j]], 6 + 0j), ([[3j]], [[4]], 12j)]:
        check_values(cs.correlate2d(*gpu(np.array(p), np.array(q))), [[expected]])


@pytest.mark.parametrize("func", ["correlate2d", "convolve2d"])
def test_fillvalue_as_scipy(func):
    """fillvalue read as SciPy reads it (fresh random data): only for boundary 'fill', None is
    NaN for float results, strings parse, a string that is no number raises ValueError naming
    fillvalue; the same results, dtypes and exception types as SciPy."""
    import cupy

    rng = np.random.default_rng()
    for dtype in ("float64", "float32", "int64", "uint8", "complex128"):
        a, b = sample(rng, (7, 9), dtype), sample(rng, (3, 2), dtype)
        for fv, boundary, mode in itertools.product(["a", None, "1.5", 2.5, [3], object()],
                                                    ["fill", "wrap", "symm"], MODES):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    ref = getattr(signal, func)(a, b, mode, boundary, fv)
                except (TypeError, ValueError) as exc:
                    with pytest.raises(type(exc), match="fillvalue|not available|direct"):
                        getattr(cs, func)(*gpu(a, b), mode, boundary, fv)
                    continue
            got = cupy.asnumpy(getattr(cs, func)(*gpu(a, b), mode, boundary, fv))
            assert got.dtype == ref.dtype and got.shape == ref.shape
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, equal_nan=True,
                                       err_msg=f"{func} {fv!r} {boundary} {mode} {dtype}")


AXES_1D = [None, 0, (0,), -1, (-1,)]
AXES_ROWS = [1, (1,), -1, (-1,)]


@pytest.mark.parametrize("func", ["fftconvolve", "oaconvolve"])
def test_scipy_fftconvolve_values_and_axes(func):
    conv = getattr(cs, func)
    for dtype, a, expected in [("int", [1, 2, 3], [1, 4, 10, 12, 9.]),
                               ("complex", [1 + 1j, 2 + 2j, 3 + 3j],
                                [2j, 8j, 20j, 24j, 18j])]:
        a, expected = np.array(a), np.array(expected)
        for axes in AXES_1D:
            check_values(conv(*gpu(a, a), axes=axes), expected, 1.5e-6)
        for axes in AXES_ROWS:
            a2 = np.tile(a, [2, 1])
            check_values(conv(*gpu(a2, a2), axes=axes), np.tile(expected, [2, 1]), 1.5e-6)
    real2 = np.array([[1.0, 2, 3], [4, 5, 6]])
    real2_full = [[1.0, 4, 10, 12, 9], [8, 26, 56, 54, 36], [16, 40, 73, 60, 36]]
    cplx2 = np.array([[1 + 2j, 3 + 4j, 5 + 6j], [2 + 1j, 4 + 3j, 6 + 5j]])
    cplx2_full = [[-3 + 4j, -10 + 20j, -21 + 56j, -18 + 76j, -11 + 60j],
                  [10j, 44j, 118j, 156j, 122j], [3 + 4j, 10 + 20j, 21 + 56j, 18 + 76j, 11 + 60j]]
    for a, expected in [(real2, real2_full), (real2.astype(int), real2_full),
                        (cplx2, cplx2_full)]:
        for axes in [None, (0, 1), (1, 0), (0, -1), (-1, 0), (-2, 1), (1, -2), (-2, -1),
                     (-1, -2)]:
            check_values(conv(*gpu(a, a), axes=axes), expected, 1.5e-6)
        a3 = np.tile(a, [2, 1, 1])
        for axes in [(1, 2), (2, 1), (1, -1), (-1, 1), (-2, 2), (2, -2), (-2, -1), (-1, -2)]:
            check_values(conv(*gpu(a3, a3), axes=axes), np.tile(expected, [2, 1, 1]), 1.5e-6)
    a, b = np.array([1, 2, 3]), np.array([3, 3, 5, 6, 8, 7, 9, 0, 1])
    for axes in AXES_1D:
        check_values(conv(*gpu(a, b), "same", axes=axes), [35., 41., 47.], 1.5e-6)
        check_values(conv(*gpu(b, a), "same", axes=axes),
                     [9., 20., 25., 35., 41., 47., 39., 28., 2.], 1.5e-6)
    for axes in AXES_ROWS:
        a2, b2 = np.tile(a, [2, 1]), np.tile(b, [2, 1])
        check_values(conv(*gpu(a2, b2), "same", axes=axes), np.tile([35., 41., 47.], [2, 1]),
                     1.5e-6)
    valid = [24., 31., 41., 43., 49., 25., 12.]
    a = np.array([3, 2, 1])
    for axes in AXES_1D:
        check_values(conv(*gpu(a, b), "valid", axes=axes), valid, 1.5e-6)
        check_values(conv(*gpu(b, a), "valid", axes=axes), valid, 1.5e-6)
    for axes in (1, (1,)):
        check_values(conv(*gpu(np.tile(a, [2, 1]), np.tile(b, [2, 1])), "valid", axes=axes),
                     np.tile(valid, [2, 1]), 1.5e-6)
    # non-convolved axes broadcast even in 'valid' mode
    check_values(conv(*gpu(np.tile(a, [2, 1]), b[None]), "valid", axes=1),
                 np.tile(valid, [2, 1]), 1.5e-6)
    a = np.array([3 - 1j, 2 + 7j, 1 + 0j])
    b = np.array([3 + 2j, 3 - 3j, 5 + 0j, 6 - 1j, 8 + 0j])
    for axes in AXES_1D:
        check_values(conv(*gpu(a, b), "valid", axes=axes), [45. + 12.j, 30. + 23.j, 48 + 32.j],
                     1.5e-6)
        check_values(conv(*gpu(b, a), "valid", axes=axes), [45. + 12.j, 30. + 23.j, 48 + 32.j],
                     1.5e-6)


@pytest.mark.parametrize("func", ["fftconvolve", "oaconvolve"])
def test_scipy_fftconvolve_special_inputs(func):
    import cupy

    conv = getattr(cs, func)
    for a, b in [([], []), ([5, 6], []), ([], [7])]:
        z = conv(cupy.asarray(a, dtype=float), cupy.asarray(b, dtype=float))
        assert z.shape == (0,) and z.dtype == np.float64
    a0, b0 = cupy.asarray(4967), cupy.asarray(3920)
    assert conv(a0, b0).ndim == 0 and int(conv(a0, b0)) == 4967 * 3920
    # no axis needs a transform: SciPy returns the product in the input dtype
    z = conv(cupy.asarray([4967]), cupy.asarray([3920]))
    assert z.dtype == np.int64 and int(z[0]) == 4967 * 3920
    for dtype in ("float16", "int64", "bool", "uint8"):
        compare(func, (np.ones((3, 1), dtype), np.ones((1, 4), dtype)), {"mode": "full"})


@pytest.mark.parametrize("axes", [None, 0, (0,), -1, (-1,)])
def test_scipy_fftconvolve_random_data(axes):
    rng = np.random.default_rng(1234)
    a = rng.random(1233) + 1j * rng.random(1233)
    b = rng.random(1321) + 1j * rng.random(1321)
    expected = np.convolve(a, b, "full")
    for func in (cs.fftconvolve, cs.oaconvolve):
        check_values(func(*gpu(a, b), "full", axes=axes), expected, 1e-9)
        if axes is not None and np.ndim(axes) == 0:
            check_values(func(*gpu(np.tile(a, [2, 1]), np.tile(b, [2, 1])), "full", axes=1),
                         np.tile(expected, [2, 1]), 1e-9)


@pytest.mark.parametrize("axes", [(1, 4), (4, 1), (1, -1), (-1, 1), (-4, 4), (4, -4), (-4, -1),
                                  (-1, -4)])
def test_scipy_fftconvolve_multidim_axes(axes):
    rng = np.random.default_rng(1234)
    a = rng.random((123, 22)) + 1j * rng.random((123, 22))
    b = rng.random((132, 11)) + 1j * rng.random((132, 11))
    expected = signal.convolve2d(a, b, "full")

    def spread(x):  # (m, n) -> (1, m, 1, 1, n), then tiled (and broadcast) on the other axes
        return np.moveaxis(x[:, :, None, None, None].swapaxes(0, 2), 1, 4)

    a = np.tile(spread(a), [2, 1, 3, 1, 1])
    b = np.tile(spread(b), [2, 1, 1, 4, 1])
    expected = np.tile(spread(expected), [2, 1, 3, 4, 1])
    for func in (cs.fftconvolve, cs.oaconvolve):
        check_values(func(*gpu(a, b), "full", axes=axes), expected, 1e-9)


def _oa_shapes(sizes):
    return [(a, b) for a, b in itertools.product(sizes, repeat=2) if abs(a - b) > 3]


def _oa_shapes_2d(sizes):
    pairs = _oa_shapes(sizes)
    out = []
    for (a0, b0), (a1, b1) in zip(pairs, pairs):
        for mode in MODES:
            if mode != "valid" or (a0 > b0 and a1 > b1) or (a0 < b0 and a1 < b1):
                out.append((a0, b0, a1, b1, mode))
    return out


def _random(rng, shape, is_complex):
    a = rng.random(shape)
    return a + 1j * rng.random(shape) if is_complex else a


@pytest.mark.parametrize("is_complex", [False, True])
def test_scipy_oaconvolve_against_fftconvolve(is_complex):
    """SciPy's TestOAConvolve grids (1-d and 2-d, with and without axes and broadcast extra
    axes): oaconvolve equals SciPy's fftconvolve to 6 decimals."""
    rng = np.random.default_rng(int(is_complex))
    cases = []
    for (s1, s2), mode in itertools.product(_oa_shapes([50, 47, 6, 4, 1]), MODES):
        cases.append(((s1,), (s2,), mode, None))
    for axis, (s1, s2), ea, eb, mode in itertools.product(
            [0, 1], _oa_shapes([50, 47, 6, 4]), [1, 3], [1, 3], MODES):
        sa, sb = [ea] * 2, [eb] * 2
        sa[axis], sb[axis] = s1, s2
        cases.append((tuple(sa), tuple(sb), mode, axis))
    for a0, b0, a1, b1, mode in _oa_shapes_2d([50, 47, 6, 4]):
        cases.append(((a0, a1), (b0, b1), mode, None))
        for axes, ea, eb in itertools.product([(0, 1), (0, 2), (1, 2)], [1, 3], [1, 3]):
            sa, sb = [ea] * 3, [eb] * 3
            (sa[axes[0]], sb[axes[0]]), (sa[axes[1]], sb[axes[1]]) = (a0, b0), (a1, b1)
            cases.append((tuple(sa), tuple(sb), mode, axes))
    for s1, s2, mode, axes in cases:
        a, b = _random(rng, s1, is_complex), _random(rng, s2, is_complex)
        try:
            expected = signal.fftconvolve(a, b, mode=mode, axes=axes)
        except ValueError:
            with pytest.raises(ValueError):
                cs.oaconvolve(*gpu(a, b), mode=mode, axes=axes)
            continue
        check_values(cs.oaconvolve(*gpu(a, b), mode=mode, axes=axes), expected, 1e-6)


@pytest.mark.parametrize("func", ["fftconvolve", "oaconvolve"])
def test_scipy_all_freq_convolves_errors(func):
    import cupy

    conv = getattr(cs, func)
    a, b = gpu(np.arange(1, 7).reshape(2, 3), np.arange(-6, 0).reshape(3, 2))
    with pytest.raises(ValueError, match="one must be at least as large as the other in every"):
        conv(a, b, mode="valid")
    with pytest.raises(ValueError, match=r"incompatible shapes for in1 and in2: \(5, 6, 2, 1\) "
                                         r"and \(5, 6, 3, 1\)"):
        conv(cupy.zeros((5, 6, 2, 1)), cupy.zeros((5, 6, 3, 1)), axes=[0, 1])
    for p, q in [([1], 2), (1, [2]), ([3], [[2]])]:
        with pytest.raises(ValueError, match="should have the same dimensionality"):
            conv(cupy.asarray(p), cupy.asarray(q))
    one, two = cupy.asarray([1]), cupy.asarray([2])
    for kwargs, match in [({"mode": "chips"}, "'valid', 'same', or 'full'"),
                          ({"axes": []}, "when provided, axes cannot be empty"),
                          ({"axes": [[1, 2], [3, 4]]}, "axes must be a scalar or iterable of "
                                                       "integers"),
                          ({"axes": [1., 2., 3., 4.]}, "axes must be a scalar or iterable of "
                                                       "integers"),
                          ({"axes": [1]}, "axes exceeds dimensionality of input"),
                          ({"axes": [-2]}, "axes exceeds dimensionality of input"),
                          ({"axes": [0, 0]}, "all axes must be unique")]:
        with pytest.raises(ValueError, match=match):
            conv(one, two, **kwargs)


CORRELATE_REAL_DTYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
                         "float32", "float64"]


@pytest.mark.parametrize("dt", CORRELATE_REAL_DTYPES)
@pytest.mark.parametrize("method", ["auto", "direct", "fft"])
def test_scipy_correlate_real(dt, method):
    a = np.linspace(0, 3, 4).astype(dt)
    b = np.linspace(1, 2, 2).astype(dt)
    y_r = np.array([0, 2, 5, 8, 3], dtype=dt)
    for x, y, mode, expected in [(a, b, "valid", y_r[1:4]), (b, a, "valid", y_r[1:4][::-1]),
                                 (a, b, "same", y_r[:-1]), (a, b, "full", y_r)]:
        got = cs.correlate(*gpu(x, y), mode, method=method)
        assert got.dtype == np.dtype(dt)
        check_values(got, expected, 1e-5 if dt == "float32" else 1e-9)
    a3 = np.linspace(0, 39, 40).reshape((2, 4, 5), order="F").astype(dt)
    b3 = np.linspace(0, 23, 24).reshape((2, 3, 4), order="F").astype(dt)
    for mode, (x, y) in itertools.product(MODES, [(a3, b3), (b3, a3)]):
        compare("correlate", (x, y, mode), {"method": "direct" if method == "direct" else "auto"},
                1e-4 if dt == "float32" else 1e-10)


@pytest.mark.parametrize("dt", ["complex64", "complex128"])
@pytest.mark.parametrize("method", ["auto", "direct", "fft"])
def test_scipy_correlate_complex(dt, method):
    rng = np.random.default_rng(9)
    decimal_tol = 1e-4 if dt == "complex64" else 1e-9
    a = (rng.standard_normal(10) + 1j * rng.standard_normal(10)).astype(dt)
    b = (rng.standard_normal(8) + 1j * rng.standard_normal(8)).astype(dt)
    for mode in MODES:
        y_r = np.correlate(a, b, mode) if mode != "same" else signal.correlate(a, b, "same")
        got = cs.correlate(*gpu(a, b), mode, method=method)
        assert got.dtype == np.dtype(dt)
        check_values(got, y_r, decimal_tol)
    y_r = np.correlate(a, b, "valid")
    check_values(cs.correlate(*gpu(b, a), "valid", method=method), np.conj(y_r[::-1]), decimal_tol)
    d = np.array([0, 1 + 1j, 2 + 2j], dtype=dt)
    k = np.array([1 + 3j, 2 + 4j, 3 + 5j, 4 + 6j], dtype=dt)
    check_values(cs.correlate(*gpu(d, k), method=method),
                 [0, 10 - 2j, 28 - 6j, 22 - 6j, 16 - 6j, 8 - 4j], 1e-5)
    check_values(cs.correlate(*gpu(d, k), mode="same", method=method),
                 [10 - 2j, 28 - 6j, 22 - 6j], 1e-5)
    a3 = (rng.standard_normal((10, 8, 6)) + 1j * rng.standard_normal((10, 8, 6))).astype(dt)
    b3 = (rng.standard_normal((8, 6, 4)) + 1j * rng.standard_normal((8, 6, 4))).astype(dt)
    compare("correlate", (a3, b3), {"method": "direct" if method == "direct" else "auto"},
            1e-3 if dt == "complex64" else 1e-9)
    for p, q in [(1, 2j), (2j, 3j), (3j, 4)]:
        import cupy

        got = cs.correlate(cupy.asarray(np.array(p, dt)), cupy.asarray(np.array(q, dt)))
        assert got.ndim == 0 and complex(got) == p * np.conj(q)
        check_values(cs.correlate(*gpu(np.array([p], dt), np.array([q], dt)), method=method),
                     [p * np.conj(q)], 1e-6)


def test_scipy_choose_conv_method():
    import cupy

    rng = np.random.default_rng(0)
    for mode, ndim in itertools.product(MODES, [1, 2]):
        x, h = gpu(rng.standard_normal((8,) * ndim), rng.standard_normal((6,) * ndim))
        assert cs.choose_conv_method(x, h, mode=mode) == "direct"
        method, times = cs.choose_conv_method(x, h, mode=mode, measure=True)
        assert method in ("fft", "direct") and set(times) == {"fft", "direct"}
        assert method == min(times, key=times.get)
    a, b = cupy.asarray(2.0), cupy.asarray(3.0)
    assert cs.choose_conv_method(a, b) == "direct"
    method, times = cs.choose_conv_method(a, b, measure=True)
    assert method == "direct" and set(times) == {"fft", "direct"}
    with pytest.raises(ValueError, match="same dimensionality"):  # SciPy times convolve: refused
        cs.choose_conv_method(cupy.ones(3), cupy.ones((3, 3)), measure=True)


@pytest.mark.parametrize("dtype", ["float16", "bool"])
def test_numpy_loop_dtypes_direct_in_1d(dtype):
    """SciPy's method='direct' hands 1-d float16 and bool x bool to np.convolve/np.correlate:
    same result dtype and values; 2-d and 1-d 'same' with a longer in2 raise as in SciPy."""
    rng = np.random.default_rng(1)
    for func, (s1, s2), mode in itertools.product(
            ["convolve", "correlate"], [((10,), (3,)), ((3,), (10,)), ((5, 10), (3, 3)),
                                        ((10,), (10,))], MODES):
        a, b = sample(rng, s1, dtype), sample(rng, s2, dtype)
        compare(func, (a, b, mode), {"method": "direct"}, 1e-3)
        if len(s1) == 2:  # the 2-d functions have no FFT path in SciPy: refused under 'auto'
            compare(func + "2d", (a, b, mode), {}, 1e-3)


@pytest.mark.parametrize("dtype", ["float16", "bool"])
def test_numpy_loop_dtypes_direct_mixed(dtype):
    """method='direct' with a float16 or bool operand and another dtype (fresh random data):
    SciPy's dtype and values where its NumPy 1-d loops or its N-d loops take the promoted dtype,
    its ValueError where the N-d loops refuse it (bool x bool, float16 results beyond 1-d)."""
    rng = np.random.default_rng()
    shapes = [((10,), (3,)), ((3,), (10,)), ((5, 6), (2, 3)), ((4, 3, 5), (2, 2, 2))]
    for other, func, (s1, s2), mode in itertools.product(
            ["bool", "int8", "uint8", "float16", "float32", "complex64"], ["convolve", "correlate"],
            shapes, MODES):
        for d1, d2 in ((dtype, other), (other, dtype)):
            a, b = sample(rng, s1, d1), sample(rng, s2, d2)
            compare(func, (a, b, mode), {"method": "direct"},
                    1e-2 if "float16" in (d1, d2) else 1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_choose_conv_method_unplannable_as_scipy(mode):
    """Operands convolve refuses (different dimensionality, a 0-d one): SciPy's answer from the
    data (integer magnitudes, read on the GPU) and its CPU cost model ('fft' for (300, 400) with
    (300,) in 'full'), SciPy's IndexError for a 1-d in1 with a 0-d in2."""
    import cupy

    rng = np.random.default_rng()
    shapes = [((3, 4, 5), (1, 2)), ((), (5,)), ((5,), ()), ((300, 400), (300,)),
              ((3000,), (30, 30)), ((2000,), (3, 4000)), ((64, 64, 64), (9, 9))]
    for (s1, s2), dtype, scale in itertools.product(shapes, ["float32", "bool", "int64", "uint16"],
                                                    [1, 2 ** 30]):
        a = (rng.integers(0, 3, s1) * scale).astype(dtype)
        b = (rng.integers(0, 3, s2) * scale).astype(dtype)
        try:
            ref = signal.choose_conv_method(a, b, mode)
        except IndexError:
            with pytest.raises(IndexError):
                cs.choose_conv_method(cupy.asarray(a), cupy.asarray(b), mode)
            continue
        assert cs.choose_conv_method(cupy.asarray(a), cupy.asarray(b), mode) == ref, \
            (s1, s2, dtype, scale)
