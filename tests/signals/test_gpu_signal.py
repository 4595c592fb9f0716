"""cupyconv.signal on the GPU against scipy.signal, on fresh random inputs.

Kept fast: small arrays, and the compiled variants are one module per compute type (float32,
float64, complex64, complex128, uint64 for integers).  Every path (direct kernel, FFT) runs for
every mode x dtype x ndim; the 2-d functions for every boundary.
"""

import numpy as np
import pytest
from scipy import signal

import cupyconv.signal as cs

pytestmark = pytest.mark.gpu

DTYPES = ["float32", "float64", "complex64", "complex128", "int32", "uint8"]
METHODS = ["direct", "fft"]
# (in1 shape, in2 shape): odd and even kernels, a kernel larger than the input
SHAPES = {1: [((50,), (7,)), ((33,), (4,)), ((6,), (11,))],
          2: [((19, 23), (3, 3)), ((16, 21), (4, 6)), ((5, 6), (7, 9)), ((40, 70), (17, 40))],
          3: [((6, 9, 11), (3, 2, 3)), ((3, 4, 5), (4, 5, 6))]}


def rand(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -50, 50, shape).astype(dtype)
    a = rng.uniform(-1, 1, shape)
    if dtype.kind == "c":
        a = a + 1j * rng.uniform(-1, 1, shape)
    return a.astype(dtype)


def check(got, ref):
    got = got.get()
    assert got.shape == ref.shape and got.dtype == ref.dtype
    if ref.dtype.kind in "iub":
        assert np.array_equal(got, ref)  # exact, including SciPy's integer wrap-around
    else:
        tol = 1e-4 if ref.dtype in (np.float32, np.complex64) else 1e-10
        scale = max(np.abs(ref).max(), 1.0)
        assert np.abs(got - ref).max() <= tol * scale * np.sqrt(ref.size)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["full", "valid", "same"])
@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("func", ["correlate", "convolve"])
def test_nd_matches_scipy(func, ndim, mode, dtype, method):
    import cupy

    rng = np.random.default_rng([ndim, len(mode), DTYPES.index(dtype), len(func)])
    for s1, s2 in SHAPES[ndim]:
        a, b = rand(rng, s1, dtype), rand(rng, s2, dtype)
        ref = getattr(signal, func)(a, b, mode=mode, method="direct")
        check(getattr(cs, func)(cupy.asarray(a), cupy.asarray(b), mode=mode, method=method), ref)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", ["float32", "complex128", "int16"])
@pytest.mark.parametrize("boundary", ["fill", "wrap", "symm"])
@pytest.mark.parametrize("mode", ["full", "valid", "same"])
@pytest.mark.parametrize("func", ["correlate2d", "convolve2d"])
def test_2d_boundaries_match_scipy(func, mode, boundary, dtype, method):
    import cupy

    rng = np.random.default_rng([len(func), len(mode), len(boundary), len(dtype)])
    fill = 3 if "int" in dtype else 0.25
    for s1, s2 in SHAPES[2]:
        a, b = rand(rng, s1, dtype), rand(rng, s2, dtype)
        ref = getattr(signal, func)(a, b, mode=mode, boundary=boundary, fillvalue=fill)
        check(getattr(cs, func)(cupy.asarray(a), cupy.asarray(b), mode=mode, boundary=boundary,
                                fillvalue=fill, method=method), ref)


def test_mixed_dtypes_and_integer_wraparound():
    import cupy

    rng = np.random.default_rng(7)
    a8, b8 = rand(rng, (30, 31), "int8"), rand(rng, (5, 5), "int8")  # sums overflow int8
    check(cs.correlate(cupy.asarray(a8), cupy.asarray(b8), method="direct"),
          signal.correlate(a8, b8, method="direct"))
    a, b = rand(rng, (20, 21), "int32"), rand(rng, (3, 4), "float32")
    check(cs.convolve(cupy.asarray(a), cupy.asarray(b)), signal.convolve(a, b, method="direct"))
    c = rand(rng, (3, 4), "complex64")
    check(cs.correlate(cupy.asarray(a), cupy.asarray(c)), signal.correlate(a, c, method="direct"))


# Images large enough for filter_plane's interior tiles (32 x 128 outputs) as well as its edge
# tiles: widths with and without 4-aligned rows, so both staging paths and both store paths run.
PLANE_IMAGES = [(70, 260), (67, 261), (45, 302)]
PLANE_KERNELS = [(3, 3), (5, 5), (7, 7), (4, 6), (2, 9), (15, 15), (1, 16)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("boundary", ["fill", "wrap", "symm"])
@pytest.mark.parametrize("func", ["correlate2d", "convolve2d"])
def test_plane_kernel_tiles_match_scipy(func, boundary, dtype):
    import cupy

    rng = np.random.default_rng([len(func), len(boundary), len(dtype)])
    for s1 in PLANE_IMAGES:
        for s2 in PLANE_KERNELS:
            a, b = rand(rng, s1, dtype), rand(rng, s2, dtype)
            for mode in ("full", "valid", "same"):
                ref = getattr(signal, func)(a, b, mode=mode, boundary=boundary, fillvalue=-0.75)
                check(getattr(cs, func)(cupy.asarray(a), cupy.asarray(b), mode=mode,
                                        boundary=boundary, fillvalue=-0.75, method="direct"), ref)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_plane_kernel_unaligned_input_and_batched_planes(dtype):
    """A contiguous input that starts off a 16-byte boundary takes the scalar staging path; a stack
    of planes with a filter per plane is one launch."""
    import cupy

    rng = np.random.default_rng(len(dtype))
    a, b = rand(rng, (66, 300), dtype), rand(rng, (5, 5), dtype)
    flat = cupy.asarray(rand(rng, (66 * 300 + 1,), dtype))
    flat[1:] = cupy.asarray(a.ravel())
    view = flat[1:].reshape(66, 300)
    assert view.flags.c_contiguous and view.data.ptr % 16 != 0
    for mode in ("full", "same"):
        check(cs.correlate(view, cupy.asarray(b), mode=mode, method="direct"),
              signal.correlate(a, b, mode=mode, method="direct"))
    stack, ks = rand(rng, (3, 70, 260), dtype), rand(rng, (3, 7, 7), dtype)
    ref = np.stack([signal.convolve(s, k, mode="same", method="direct") for s, k in zip(stack, ks)])
    check(cs.convolve(cupy.asarray(stack), cupy.asarray(ks), mode="same", method="direct",
                      axes=(1, 2)), ref)


@pytest.mark.parametrize("method", ["auto"] + METHODS)
@pytest.mark.parametrize("mode", ["full", "valid", "same"])
def test_batched_stack_matches_fftconvolve_in_one_call(mode, method):
    import cupy

    rng = np.random.default_rng(len(mode))
    stack, k = rand(rng, (6, 37, 41), "float32"), rand(rng, (1, 5, 4), "float32")
    ref = signal.fftconvolve(stack.astype(np.float64), k.astype(np.float64), mode=mode,
                             axes=(1, 2)).astype(np.float32)
    check(cs.convolve(cupy.asarray(stack), cupy.asarray(k), mode=mode, method=method,
                      axes=(1, 2)), ref)
    # per-image kernels, and correlate's conjugation across a batch of complex signals
    ks = rand(rng, (6, 5, 4), "float32")
    ref = signal.fftconvolve(stack.astype(np.float64), ks.astype(np.float64), mode=mode,
                             axes=(1, 2)).astype(np.float32)
    check(cs.convolve(cupy.asarray(stack), cupy.asarray(ks), mode=mode, method=method,
                      axes=(1, 2)), ref)
    sig, taps = rand(rng, (4, 300), "complex128"), rand(rng, (4, 9), "complex128")
    ref = np.stack([signal.correlate(s, t, mode=mode) for s, t in zip(sig, taps)])
    check(cs.correlate(cupy.asarray(sig), cupy.asarray(taps), mode=mode, method=method, axes=-1),
          ref)


def test_fftconvolve_and_choose_conv_method():
    import cupy

    rng = np.random.default_rng(3)
    a, b = rand(rng, (64, 65), "float32"), rand(rng, (9, 8), "float32")
    check(cs.fftconvolve(cupy.asarray(a), cupy.asarray(b), mode="same"),
          signal.fftconvolve(a, b, mode="same"))
    ai, bi = rand(rng, (20, 20), "int32"), rand(rng, (3, 3), "int32")
    check(cs.fftconvolve(cupy.asarray(ai), cupy.asarray(bi)), signal.fftconvolve(ai, bi))
    assert cs.choose_conv_method(cupy.asarray(a), cupy.asarray(b)) in ("direct", "fft")
    method, times = cs.choose_conv_method(cupy.asarray(a), cupy.asarray(b), measure=True)
    assert method == min(times, key=times.get) and set(times) == {"direct", "fft"}


def test_large_filter_takes_several_passes_and_non_contiguous_input():
    """A 70x45 filter needs several shared-memory passes per tile (rows and column buckets)."""
    import cupy

    rng = np.random.default_rng(11)
    a, b = rand(rng, (150, 300), "float32"), rand(rng, (70, 45), "float32")
    ref = signal.correlate(a, b, mode="same", method="direct")
    check(cs.correlate(cupy.asarray(a), cupy.asarray(b), mode="same", method="direct"), ref)
    big = cupy.asarray(rand(rng, (40, 60), "float64"))
    view = big[::2, ::-3]
    check(cs.correlate2d(view, cupy.asarray(b[:5, :6]).astype(cupy.float64), boundary="symm",
                         method="direct"),
          signal.correlate2d(view.get(), b[:5, :6].astype(np.float64), boundary="symm"))


def test_errors_raise_before_launch():
    import cupy

    a, b = cupy.ones((8, 8), cupy.float32), cupy.ones((3, 3), cupy.float32)
    with pytest.raises(ValueError, match="mode"):
        cs.correlate(a, b, mode="whole")
    with pytest.raises(ValueError, match="same dimensionality"):
        cs.convolve(a, cupy.ones(3, cupy.float32))
    with pytest.raises(ValueError, match="at least as large"):
        cs.correlate(a, cupy.ones((9, 2), cupy.float32), mode="valid")
    with pytest.raises(ValueError, match="Unsupported type"):
        cs.correlate(a > 0, b > 0, method="direct")
    with pytest.raises(TypeError, match="cupy.asarray"):
        cs.correlate2d(np.ones((4, 4)), b)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("func", ["correlate", "convolve"])
def test_same_volumes_on_both_kernels(func, dtype):
    """'same' volumes on both direct kernels (filter_direct and ndimage's nd_dense_tile, the
    longest axis moved last where it is not), whichever the cost model picks, against SciPy:
    odd and even filters, a filter longer than an axis, a non-contiguous view, a result
    poisoned beforehand cannot leak (fresh outputs), and the public call from a second stream."""
    import cupy

    from cupyconv._dispatch.signal import dense_volume_layout, dense_volume_runner, use_dense_volume
    from cupyconv._signal.direct import direct_runner
    from cupyconv._signal.plan import plan_filter

    rng = np.random.default_rng([len(func), len(dtype)])
    for s1, s2 in [((37, 9, 11), (3, 4, 3)), ((12, 70, 20), (5, 5, 2)), ((9, 8, 133), (3, 3, 9)),
                   ((6, 30, 7), (7, 3, 9))]:
        a, b = rand(rng, s1, dtype), rand(rng, s2, dtype)
        ref = getattr(signal, func)(a.astype(np.float64), b.astype(np.float64), mode="same",
                                    method="direct").astype(dtype)
        plan = plan_filter(s1, s2, dtype, dtype, func=func, mode="same")
        assert dense_volume_layout(plan, dtype) is not None
        da, db = cupy.asarray(a), cupy.asarray(b)
        for run in (direct_runner(plan, da, db, np.zeros((), dtype)[()], dtype),
                    dense_volume_runner(plan, dtype)):
            cupy.full(a.shape, np.nan, dtype)  # leaves NaNs in the pool for the next allocation
            check(run(da, db), ref)
        view = cupy.asarray(np.ascontiguousarray(a[::-1, :, ::-1]))[::-1, :, ::-1]
        check(getattr(cs, func)(view, db, mode="same", method="direct"), ref)
        with cupy.cuda.Stream(non_blocking=True) as stream:
            got = getattr(cs, func)(da, db, mode="same", method="direct")
            stream.synchronize()
        check(got, ref)
        assert isinstance(use_dense_volume(plan, dtype), bool)
