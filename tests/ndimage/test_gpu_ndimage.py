"""cupyconv.ndimage on the GPU against scipy.ndimage on small random arrays: every mode x dtype x
ndim 1-3 x origin x even and odd sizes for the 1-d and N-d correlations, and the separable
filters.  Integers must match exactly (SciPy's truncation and wrap-around)."""

import itertools

import numpy as np
import pytest
import scipy.ndimage as sn
from nd_cases import rand

import cupyconv.ndimage as cn

pytestmark = pytest.mark.gpu

MODES = ["reflect", "constant", "nearest", "mirror", "wrap", "grid-wrap", "grid-constant",
         "grid-mirror"]
DTYPES = ["uint8", "int16", "int32", "float32", "float64", "complex64"]
SHAPES = {1: (37,), 2: (13, 40), 3: (6, 9, 35)}




def check(got, ref, truncation_slack=False):
    """``got`` equals ``ref`` (integers exactly) or is within float tolerance.  With
    ``truncation_slack`` (integer outputs of filters with non-integer weights, whose float64 sums
    are truncated after each pass): a sum a rounding error from an integer may truncate to the
    other side than in SciPy, so differences of 1 on at most 0.5 % of the elements are allowed."""
    got = got.get()
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.dtype, ref.dtype)
    if ref.dtype.kind in "iu" and truncation_slack:
        diff = np.abs(got.astype(np.int64) - ref.astype(np.int64))
        assert diff.max() <= 1 and np.count_nonzero(diff) <= max(1, diff.size // 200), diff.max()
    elif ref.dtype.kind in "iu":
        np.testing.assert_array_equal(got, ref)
    else:
        tol = 2e-5 if ref.dtype in (np.float32, np.complex64) else 1e-12
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * max(1.0, np.abs(ref).max()))


def origins(k):
    return sorted({-(k // 2), 0, (k - 1) // 2, min(1, (k - 1) // 2), max(-1, -(k // 2))})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_correlate1d_convolve1d(ndim, mode, dtype):
    import cupy

    rng = np.random.default_rng([ndim, MODES.index(mode), DTYPES.index(dtype)])
    x = rand(rng, SHAPES[ndim], dtype)
    xd = cupy.asarray(x)
    for axis in range(ndim):
        for k in (3, 4):
            w = rng.uniform(-1, 1, k)
            for origin in origins(k):
                for fn in ("correlate1d", "convolve1d"):
                    kw = dict(axis=axis, mode=mode, cval=0.5, origin=origin)
                    check(getattr(cn, fn)(xd, w, **kw), getattr(sn, fn)(x, w, **kw))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_correlate_convolve(ndim, mode, dtype):
    import cupy

    rng = np.random.default_rng([ndim, MODES.index(mode), DTYPES.index(dtype), 1])
    x = rand(rng, SHAPES[ndim], dtype)
    xd = cupy.asarray(x)
    for k in (3, 4):
        w = rng.uniform(-1, 1, (k,) * ndim)
        for o in origins(k):
            for fn in ("correlate", "convolve"):
                kw = dict(mode=mode, cval=-0.75, origin=o)
                check(getattr(cn, fn)(xd, w, **kw), getattr(sn, fn)(x, w, **kw))
    if ndim == 3:  # per-axis origins, axes
        w = rng.uniform(-1, 1, (3, 2))
        kw = dict(mode=mode, origin=(1, -1), axes=(0, 2))
        check(cn.correlate(xd, w, **kw), sn.correlate(x, w, **kw))


def test_long_filters_and_complex_weights():
    import cupy

    rng = np.random.default_rng(1)
    x = rand(rng, (5, 300), "float32")
    xd = cupy.asarray(x)
    for mode in MODES:
        w = rng.uniform(-1, 1, 23)  # halo longer than axis 0
        for axis in (0, 1):
            check(cn.correlate1d(xd, w, axis, mode=mode), sn.correlate1d(x, w, axis, mode=mode))
    w = rng.uniform(-1, 1, 5000)  # past the shared-memory tiles: direct kernel
    check(cn.correlate1d(xd, w, 1, mode="wrap"), sn.correlate1d(x, w, 1, mode="wrap"))
    wc = rng.uniform(-1, 1, (3, 3)) + 1j * rng.uniform(-1, 1, (3, 3))
    for fn in ("correlate", "convolve"):
        check(getattr(cn, fn)(xd, wc), getattr(sn, fn)(x, wc))
        xc = rand(rng, (7, 8), "complex64")
        check(getattr(cn, fn)(cupy.asarray(xc), wc, mode="constant", cval=1 + 2j),
              getattr(sn, fn)(xc, wc, mode="constant", cval=1 + 2j))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_separable_filters(ndim, dtype):
    import cupy

    rng = np.random.default_rng([ndim, DTYPES.index(dtype), 2])
    x = rand(rng, SHAPES[ndim], dtype)
    xd = cupy.asarray(x)
    for mode in ("reflect", "constant", "wrap", "mirror", "nearest"):
        for order in range(4):
            kw = dict(order=order, mode=mode, cval=1.0)
            check(cn.gaussian_filter(xd, 1.3, **kw), sn.gaussian_filter(x, 1.3, **kw), True)
        check(cn.gaussian_filter(xd, 2.0, radius=3, mode=mode),
              sn.gaussian_filter(x, 2.0, radius=3, mode=mode), True)
        check(cn.gaussian_filter1d(xd, 0.8, axis=0, order=1, mode=mode),
              sn.gaussian_filter1d(x, 0.8, axis=0, order=1, mode=mode), True)
        for size in (2, 3, 4):
            check(cn.uniform_filter(xd, size, mode=mode), sn.uniform_filter(x, size, mode=mode),
                  size == 3)  # (a sum of 3 divided by 3 is no exact float)
        check(cn.uniform_filter1d(xd, 4, axis=-1, origin=1, mode=mode),
              sn.uniform_filter1d(x, 4, axis=-1, origin=1, mode=mode))
        for fn in ("sobel", "prewitt"):
            check(getattr(cn, fn)(xd, 0, mode=mode), getattr(sn, fn)(x, 0, mode=mode))
        check(cn.laplace(xd, mode=mode), sn.laplace(x, mode=mode))
    if dtype in ("float32", "float64"):
        check(cn.gaussian_laplace(xd, 1.1), sn.gaussian_laplace(x, 1.1))
        check(cn.gaussian_gradient_magnitude(xd, 1.1), sn.gaussian_gradient_magnitude(x, 1.1))
    if ndim > 1:
        kw = dict(sigma=(1.0, 0.7), axes=(0, -1), order=(0, 2))
        check(cn.gaussian_filter(xd, **kw), sn.gaussian_filter(x, **kw))


def test_output_argument():
    import cupy

    rng = np.random.default_rng(4)
    x = rand(rng, (20, 30), "uint8")
    xd = cupy.asarray(x)
    check(cn.gaussian_filter(xd, 1.5, output=np.float32), sn.gaussian_filter(x, 1.5, output=np.float32))
    out = cupy.full((30, 20), 7, np.float64).T  # non-contiguous
    assert cn.sobel(xd, 1, output=out) is out
    check(out, sn.sobel(x, 1, output=np.float64))
    same = cupy.asarray(x.astype(np.float64))  # output overlapping the input
    ref = sn.uniform_filter(x.astype(np.float64), 5)
    assert cn.uniform_filter(same, 5, output=same) is same
    check(same, ref)


@pytest.mark.parametrize("mode", MODES)
def test_dense_tiles_and_fallback(mode):
    """The tiled dense kernel over several tiles in every direction (rows past 8, columns past
    160, planes past 4), sparse odd and even filters with origins, and filters whose tile does
    not fit in shared memory (the direct kernel: complex128 with 15 x 15 taps, 4-d arrays)."""
    import cupy

    rng = np.random.default_rng([MODES.index(mode), 3])
    x3 = rand(rng, (9, 21, 170), "float32")
    xd = cupy.asarray(x3)
    for wshape in ((3, 3, 3), (4, 2, 5), (2, 7, 6)):
        w = rng.uniform(-1, 1, wshape)
        w[rng.uniform(size=wshape) < 0.3] = 0.0
        for origin in (0, tuple(-(k // 2) for k in wshape), tuple((k - 1) // 2 for k in wshape)):
            for fn in ("correlate", "convolve"):
                kw = dict(mode=mode, cval=0.5, origin=origin)
                check(getattr(cn, fn)(xd, w, **kw), getattr(sn, fn)(x3, w, **kw))
    w2 = rng.uniform(-1, 1, (15, 15))
    check(cn.correlate(xd, w2, mode=mode, axes=(1, 2)), sn.correlate(x3, w2, mode=mode, axes=(1, 2)))
    xc = rand(rng, (19, 23), "complex64").astype(np.complex128)
    check(cn.correlate(cupy.asarray(xc), w2, mode=mode), sn.correlate(xc, w2, mode=mode))
    x4 = rand(rng, (3, 4, 5, 6), "float64")
    w4 = rng.uniform(-1, 1, (2, 3, 2, 3))
    check(cn.correlate(cupy.asarray(x4), w4, mode=mode), sn.correlate(x4, w4, mode=mode))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["reflect", "constant", "nearest", "mirror", "wrap"])
def test_fused_sep2d(monkeypatch, mode, dtype):
    """The fused two-pass kernel (nd_sep2d) on the GPU: 2-d and 3-d arrays below, at and past
    one 64 x 32 tile (interior tiles take the unmapped fast path), both pass orders, odd and even
    sizes, origins, a per-axis mode pair with constant, and a halo longer than an axis."""
    import cupy

    from cupyconv._ndimage import passes

    ran = []  # shapes nd_sep2d launchers were built for (each call here is a first call)
    real_launcher = passes.sep2d_launcher

    def counted(*args, **kwargs):
        ran.append(args[0])
        return real_launcher(*args, **kwargs)

    rng = np.random.default_rng([MODES.index(mode), len(dtype), 5])
    shapes = [(5, 7), (64, 32), (150, 101), (3, 9, 40), (2, 130, 66)]
    monkeypatch.setattr(passes, "sep2d_launcher", counted)
    for shape in shapes:
        x = rand(rng, shape, dtype)
        xd = cupy.asarray(x)
        last2 = (-2, -1)
        calls = [
            ("gaussian_filter", dict(sigma=1.3, mode=mode, cval=0.5, axes=last2)),
            ("gaussian_filter", dict(sigma=(0.8, 2.0), order=(1, 0), mode=mode, axes=last2)),
            ("gaussian_filter", dict(sigma=0.9, radius=(2, 5), mode=("constant", mode),
                                     axes=(-1, -2))),
            ("uniform_filter", dict(size=(4, 5), origin=(-2, 1), mode=mode, cval=1.5,
                                    axes=last2)),
            ("uniform_filter", dict(size=3, mode=mode)),
            ("sobel", dict(axis=-1, mode=mode, cval=0.75)),
            ("sobel", dict(axis=-2, mode=mode)),
            ("prewitt", dict(axis=-1, mode=mode)),
        ]
        for name, kw in calls:
            check(getattr(cn, name)(xd, **kw), getattr(sn, name)(x, **kw))
        check(cn.gaussian_filter(xd, 5.0, mode=mode), sn.gaussian_filter(x, 5.0, mode=mode))
    assert {len(s) for s in ran} == {2, 3}


@pytest.mark.parametrize("shape", [(13, 40), (6, 9, 35), (3, 4, 5, 6)])
def test_axes_as_scipy(shape):
    """axes= with per-axis sigma, size, origin and modes (CuPy's TestFilterFastAxes grids, fresh
    random data): gaussian_gradient_magnitude smooths every dim (SciPy hands its sigma to
    gaussian_filter as given), gaussian_laplace only the dims of axes."""
    import cupy

    rng = np.random.default_rng()
    nd = len(shape)
    for dtype in ("uint8", "float64"):
        x = rand(rng, shape, dtype)
        xd = cupy.asarray(x)
        for axes in (None, (0, -1), (1,), 0, (nd - 1, 0)):
            n = nd if axes is None else (1 if np.isscalar(axes) else len(axes))
            modes = ("reflect", "constant", "mirror", "nearest")[:n]
            for sigma in (0.5, 3.2):
                kw = dict(output=np.float64, mode=modes, cval=2.0, axes=axes)
                for fn in ("gaussian_gradient_magnitude", "gaussian_laplace"):
                    check(getattr(cn, fn)(xd, sigma, **kw), getattr(sn, fn)(x, sigma, **kw))
            kw = dict(output=np.float64, mode=modes, cval=1.5, axes=axes)
            check(cn.laplace(xd, **kw), sn.laplace(x, **kw))
            kw = dict(output=np.float64, axes=axes, sigma=(1.5, 2.25, 1.0, 3.0)[:n],
                      radius=(1, 2, 3, 4)[:n], mode=modes, truncate=2.75)
            check(cn.gaussian_filter(xd, **kw), sn.gaussian_filter(x, **kw))
            kw = dict(output=np.float64, axes=axes, size=(3, 5, 3, 5)[:n], origin=(0, 1, 1, 0)[:n],
                      mode=modes, cval=2)
            check(cn.uniform_filter(xd, **kw), sn.uniform_filter(x, **kw))
            w = rng.uniform(-1, 1, (3, 5, 3, 5)[:n])
            for fn in ("correlate", "convolve"):
                kw = dict(output=np.float64, axes=axes, origin=(0, 1, 1, 0)[:n], cval=2,
                          mode="constant")
                check(getattr(cn, fn)(xd, w, **kw), getattr(sn, fn)(x, w, **kw))
    x = rand(rng, shape, "float32")
    xd = cupy.asarray(x)
    sigma = tuple(rng.uniform(0.5, 2.0, nd))  # one per dim of the input (SciPy's rule)
    check(cn.gaussian_gradient_magnitude(xd, sigma, axes=(0,), radius=2),
          sn.gaussian_gradient_magnitude(x, sigma, axes=(0,), radius=2))


def test_output_and_cval_rules_as_scipy():
    """SciPy's output rules on the GPU (fresh random data): a real output dtype of complex data
    is promoted with a UserWarning by the direct filters and refused (RuntimeError) by those that
    chain passes; a filter that runs no pass copies into any output (complex to real with
    numpy's ComplexWarning) and takes a complex cval; complex weights of real data refuse a
    complex cval with SciPy's ValueError before any other check.  Same values, dtypes,
    exceptions and warning categories as SciPy."""
    import warnings

    import cupy

    rng = np.random.default_rng()
    xr, xc = rand(rng, (9, 12), "float32"), rand(rng, (9, 12), "complex64")
    wc = rng.uniform(-1, 1, 3) * (1 + 1j)

    def outcome(fn, x, args, kw):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            try:
                result = fn(x, *args, **kw)
            except Exception as exc:  # noqa: BLE001 - the type is compared
                result = type(exc)
        return result, [w.category.__name__ for w in record]

    calls = [("correlate1d", (wc,), {}), ("uniform_filter", (3,), {}), ("sobel", (), {}),
             ("gaussian_filter", (1.0,), {}), ("laplace", (), {}),
             ("gaussian_filter", (0,), {"cval": 1j}), ("uniform_filter", (1,), {"cval": 1j}),
             ("laplace", (), {"axes": ()}), ("gaussian_gradient_magnitude", (1.0,), {})]
    for x in (xr, xc):
        for (fn, args, kw), output in itertools.product(calls, [None, np.float32, np.complex64]):
            kw = dict(kw, output=output)
            ref, ref_warnings = outcome(getattr(sn, fn), x, args, kw)
            got, got_warnings = outcome(getattr(cn, fn), cupy.asarray(x), args, kw)
            assert got_warnings == ref_warnings, (fn, kw, got_warnings, ref_warnings)
            if isinstance(ref, type):
                assert got is ref, (fn, kw, got, ref)
            else:
                check(got, ref)
    for fn, w in (("correlate1d", np.array([], complex)), ("convolve1d", np.ones((1, 1)) * 1j),
                  ("correlate", np.ones(3) * 1j)):
        with pytest.raises(ValueError, match="cval"):
            getattr(cn, fn)(cupy.asarray(xr), w, cval=1j)


def test_weights_with_a_zero_length_dim_as_scipy():
    """Weights with a dim of length 0 (CuPy's TestSpecialWeightCases): zeros of the output dtype
    where the other dims match the input's (also into a caller's output array), else SciPy's
    RuntimeError."""
    import cupy

    rng = np.random.default_rng()
    for shape, dtype in itertools.product([(3, 3), (3, 4, 5)], ["uint8", "float64"]):
        x = rand(rng, shape, dtype)
        for fn in ("correlate", "convolve"):
            w = np.ones((0,) + shape)
            check(getattr(cn, fn)(cupy.asarray(x), w, origin=-1), getattr(sn, fn)(x, w, origin=-1))
            out = cupy.full(shape, 7, np.float32)
            assert getattr(cn, fn)(cupy.asarray(x), w, output=out) is out
            check(out, sn.correlate(x, w, output=np.float32))
            with pytest.raises(RuntimeError):
                getattr(cn, fn)(cupy.asarray(x), np.ones((0,) + shape[1:]))


def test_uniform_filter_float_sizes_as_scipy():
    """Float sizes truncated as SciPy does (3.0 -> 3, 2.5 -> 2; at most 1: the axis is left)."""
    import cupy

    rng = np.random.default_rng()
    for dtype in ("uint8", "float32", "complex64"):
        x = rand(rng, (13, 40), dtype)
        for size in (3.0, 2.5, (4.0, 1.5), np.float32(5.0)):
            check(cn.uniform_filter(cupy.asarray(x), size, mode="wrap"),
                  sn.uniform_filter(x, size, mode="wrap"), dtype == "uint8")


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64",
                                   "int64"])
def test_integer_outputs_cast_as_scipy(dtype):
    """Integer outputs as SciPy's x86-64 casts give them (GPU conversions saturate): sobel and
    prewitt differences wrap in the output dtype between passes (uint64: near 2^64, then sums
    out of range give 0), uint64 values from 2^63 up survive, values out of range and NaN give
    x86's integer indefinite; every kernel (rows, columns, fused pairs, dense)."""
    import cupy

    rng = np.random.default_rng()
    for shape in ((13, 40), (6, 9, 35)):
        x = rng.integers(0, 256 if dtype[0] == "u" else 128, shape).astype(dtype)
        xd = cupy.asarray(x)
        for fn, axis in itertools.product(("sobel", "prewitt"), range(len(shape))):
            for mode in ("reflect", "constant"):
                kw = dict(mode=mode, cval=300.5)
                check(getattr(cn, fn)(xd, axis, **kw), getattr(sn, fn)(x, axis, **kw))
        for w, cval in itertools.product(([1e10], [-1e10], [3e19], [-3e19], [1.0, -5e9]),
                                         (0.0, np.nan)):
            kw = dict(mode="constant", cval=cval)
            check(cn.correlate1d(xd, w, axis=0, **kw), sn.correlate1d(x, w, axis=0, **kw))
            check(cn.correlate1d(xd, w, **kw), sn.correlate1d(x, w, **kw))
        w2 = rng.uniform(-3, 3, (3, 3)) * 1e9
        # (non-integer weights: a float64 sum within rounding of an integer may truncate to the
        # other side than SciPy's, summed in another order)
        check(cn.correlate(xd, w2, axes=(0, 1)), sn.correlate(x, w2, axes=(0, 1)),
              truncation_slack=True)
    if dtype == "uint64":
        big = (rng.integers(0, 2 ** 40, 64).astype(np.uint64) << np.uint64(23)) | np.uint64(2 ** 63)
        for w in ([1.0], [1.0, 1.0], [-1.0, 0.0, 1.0]):
            check(cn.correlate1d(cupy.asarray(big), w), sn.correlate1d(big, w))
