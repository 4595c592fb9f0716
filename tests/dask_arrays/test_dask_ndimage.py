"""cupyconv.dask's ndimage filters on a CPU (``cupyconv/dask/ndimage.py``): the halo each filter
needs, the rechunking of chunks thinner than the halo, and results of NumPy-chunked dask arrays
(the scipy.ndimage stand-in) equal to the whole-array call, for every mode, 1-3 dims, odd and even
sizes, uneven and thin chunks and origins."""

import numpy as np
import pytest

pytest.importorskip("dask.array")  # "dask" alone could resolve to this folder as a namespace
import dask.array as da  # noqa: E402
import scipy.ndimage as sn  # noqa: E402
from dask_cases import MODES, SHAPES, assert_same, dask_of, origins  # noqa: E402

import cupyconv.dask as cd  # noqa: E402
import cupyconv.dask.ndimage as dask_ndimage  # noqa: E402


# --------------------------------------------------------------------------- halo per filter
@pytest.mark.parametrize("call,reaches", [
    (lambda x: cd.correlate1d(x, np.ones(5), axis=0, origin=2), {0: (4, 0)}),
    (lambda x: cd.convolve1d(x, np.ones(4), axis=1), {1: (1, 2)}),
    (lambda x: cd.correlate(x, np.ones((3, 6)), origin=(1, -3)), {0: (2, 0), 1: (0, 5)}),
    (lambda x: cd.gaussian_filter(x, (1.0, 2.0)), {0: (4, 4), 1: (8, 8)}),
    (lambda x: cd.gaussian_filter(x, 2.0, truncate=2.0), {0: (4, 4), 1: (4, 4)}),
    (lambda x: cd.gaussian_filter(x, (0, 3.0), radius=2), {1: (2, 2)}),
    (lambda x: cd.gaussian_filter1d(x, 1.0, axis=0, radius=6), {0: (6, 6)}),
    (lambda x: cd.uniform_filter(x, (5, 2), origin=(0, -1)), {0: (2, 2), 1: (0, 1)}),
    (lambda x: cd.uniform_filter1d(x, 6, axis=1, origin=2), {1: (5, 0)}),
    (lambda x: cd.sobel(x, axis=0), {0: (1, 1), 1: (1, 1)}),
    (lambda x: cd.laplace(x, axes=(1,)), {1: (1, 1)}),
    (lambda x: cd.gaussian_laplace(x, 1.0, axes=(0,)), {0: (4, 4)}),
    (lambda x: cd.gaussian_gradient_magnitude(x, (1.0, 0.5)), {0: (4, 4), 1: (2, 2)}),
    # SciPy's gradient magnitude smooths the dims outside axes too (its Laplace does not)
    (lambda x: cd.gaussian_gradient_magnitude(x, 1.0, axes=(0,)), {0: (4, 4), 1: (4, 4)}),
    (lambda x: cd.gaussian_gradient_magnitude(x, (0, 0.5), axes=(0,)), {1: (2, 2)}),
])
def test_halo_per_filter(monkeypatch, call, reaches):
    """Each filter asks map_filter for the (left, right) halo its window reaches along each axis
    (asymmetric with an origin or an even size; the larger side is the symmetric depth that
    map_overlap used to be given)."""
    seen = {}

    def spy(x, name, r, modes, out_dtype, args=(), kwargs=None, gpu=None):
        seen.update({ax: tuple(v) for ax, v in r.items() if any(v)})
        return x

    monkeypatch.setattr(dask_ndimage, "_map_filter", spy)
    call(da.zeros((64, 64), chunks=16))
    assert seen == reaches


def test_thin_chunks_are_merged_in_the_graph():
    x = da.from_array(np.arange(30.0), chunks=((1,) * 30,))
    y = cd.uniform_filter1d(x, 7)
    assert min(y.chunks[0]) >= 3
    assert_same(y, sn.uniform_filter1d(np.arange(30.0), 7), exact=False)


def test_single_chunk_axes_need_no_halo():
    a = np.random.default_rng(0).standard_normal((6, 40))
    x = da.from_array(a, chunks=(6, 20))
    y = cd.gaussian_filter(x, 3.0, mode="wrap")  # radius 12 > 6 along axis 0, one chunk there
    assert y.chunks == x.chunks
    assert_same(y, sn.gaussian_filter(a, 3.0, mode="wrap"))


# --------------------------------------------------------------------------- results
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_correlate1d_convolve1d(ndim, mode):
    rng = np.random.default_rng([ndim, MODES.index(mode)])
    a = rng.standard_normal(SHAPES[ndim])
    x = dask_of(a, ndim)
    for axis in range(ndim):
        for k in (3, 4):
            w = rng.uniform(-1, 1, k)
            for origin in origins(k):
                for fn in ("correlate1d", "convolve1d"):
                    kw = dict(axis=axis, mode=mode, cval=0.5, origin=origin)
                    assert_same(getattr(cd, fn)(x, w, **kw), getattr(sn, fn)(a, w, **kw))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_correlate_convolve(ndim, mode):
    rng = np.random.default_rng([ndim, MODES.index(mode), 7])
    a = rng.standard_normal(SHAPES[ndim])
    x = dask_of(a, ndim)
    for wshape in [(3,) * ndim, (4, 3, 2)[:ndim]]:
        w = rng.uniform(-1, 1, wshape)
        for origin in [0, [origins(k)[0] for k in wshape], [origins(k)[-1] for k in wshape]]:
            for fn in ("correlate", "convolve"):
                kw = dict(mode=mode, cval=-0.25, origin=origin)
                assert_same(getattr(cd, fn)(x, w, **kw), getattr(sn, fn)(a, w, **kw))


def test_correlate_over_some_axes():
    a = np.random.default_rng(3).standard_normal(SHAPES[3])
    w = np.arange(6.0).reshape(2, 3)
    kw = dict(mode="mirror", axes=(0, 2), origin=(-1, 1))
    assert_same(cd.correlate(dask_of(a, 3), w, **kw), sn.correlate(a, w, **kw))
    # axes out of order: SciPy gives the weights' dims to the axes in increasing order and each
    # origin to its entry of axes (or, where axes names every dim, both to the dims in order)
    w = np.arange(14.0).reshape(2, 7)
    for axes, origin in [((2, 0), (-3, -1)), ((1, 0, 2), (-1, 1, -3))]:
        w3 = w if len(axes) == 2 else w[:, None, :].repeat(3, axis=1)
        for fn in ("correlate", "convolve"):
            kw = dict(mode="wrap", axes=axes, origin=origin)
            assert_same(getattr(cd, fn)(dask_of(a, 3), w3, **kw), getattr(sn, fn)(a, w3, **kw))
    w0 = np.ones((0,) + SHAPES[3])  # no taps: zeros, as in SciPy
    assert_same(cd.correlate(dask_of(a, 3), w0, origin=1), sn.correlate(a, w0, origin=1))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_separable_filters(ndim, mode):
    rng = np.random.default_rng([ndim, MODES.index(mode), 11])
    a = rng.standard_normal(SHAPES[ndim])
    x = dask_of(a, ndim)
    kw = dict(mode=mode, cval=1.5)
    assert_same(cd.gaussian_filter(x, 1.2, **kw), sn.gaussian_filter(a, 1.2, **kw))
    assert_same(cd.gaussian_filter(x, 0.8, order=1, radius=3, **kw),
                sn.gaussian_filter(a, 0.8, order=1, radius=3, **kw))
    assert_same(cd.gaussian_filter1d(x, 1.0, axis=0, order=2, **kw),
                sn.gaussian_filter1d(a, 1.0, axis=0, order=2, **kw))
    for size, origin in [(3, 0), (4, -2), (4, 1), (5, 2)]:
        assert_same(cd.uniform_filter(x, size, origin=origin, **kw),
                    sn.uniform_filter(a, size, origin=origin, **kw), exact=False)
        assert_same(cd.uniform_filter1d(x, size, axis=-1, origin=origin, **kw),
                    sn.uniform_filter1d(a, size, axis=-1, origin=origin, **kw), exact=False)
    for fn in ("sobel", "prewitt"):
        assert_same(getattr(cd, fn)(x, axis=0, **kw), getattr(sn, fn)(a, axis=0, **kw))
    assert_same(cd.laplace(x, **kw), sn.laplace(a, **kw))
    assert_same(cd.gaussian_laplace(x, 1.0, **kw), sn.gaussian_laplace(a, 1.0, **kw))
    assert_same(cd.gaussian_gradient_magnitude(x, 0.7, **kw),
                sn.gaussian_gradient_magnitude(a, 0.7, **kw))


def test_uniform_filter_float_and_small_sizes():
    """Sizes as SciPy takes them: floats truncated, sizes of at most 1 leave their axis alone."""
    a = np.random.default_rng(7).standard_normal(SHAPES[2])
    x = dask_of(a, 2)
    for size in (3.0, 2.5, (4.0, 0), (1, 5.5), 0):
        assert_same(cd.uniform_filter(x, size), sn.uniform_filter(a, size), exact=False)


def test_per_axis_modes_and_sigmas():
    a = np.random.default_rng(5).standard_normal(SHAPES[2])
    x = dask_of(a, 2)
    kw = dict(mode=("wrap", "nearest"))
    assert_same(cd.gaussian_filter(x, (1.0, 2.0), **kw), sn.gaussian_filter(a, (1.0, 2.0), **kw))
    assert_same(cd.uniform_filter(x, (3, 4), **kw), sn.uniform_filter(a, (3, 4), **kw), False)
    assert_same(cd.sobel(x, axis=1, **kw), sn.sobel(a, axis=1, **kw))
    # each Gaussian-derivative term filters every axis with its own axis's mode: wrap and
    # nearest along the same axis make both axes single chunks
    y = cd.gaussian_laplace(x, 1.0, **kw)
    assert all(len(c) == 1 for c in y.chunks)
    assert_same(y, sn.gaussian_laplace(a, 1.0, **kw))


def test_gaussian_derivatives_over_some_axes():
    """gaussian_laplace smooths only along ``axes``; gaussian_gradient_magnitude along every dim
    (SciPy's rules): the halos follow, so chunked results equal the whole-array call."""
    a = np.random.default_rng(6).standard_normal(SHAPES[3])
    x = dask_of(a, 3)
    for axes in [(0, 2), (1,), 2]:
        kw = dict(axes=axes, mode="nearest")
        assert_same(cd.gaussian_laplace(x, 0.9, **kw), sn.gaussian_laplace(a, 0.9, **kw))
        assert_same(cd.gaussian_gradient_magnitude(x, 0.9, **kw),
                    sn.gaussian_gradient_magnitude(a, 0.9, **kw))
    kw = dict(axes=(1,), mode="wrap")
    assert_same(cd.gaussian_gradient_magnitude(x, (0.6, 1.1, 0.0), **kw),
                sn.gaussian_gradient_magnitude(a, (0.6, 1.1, 0.0), **kw))


def test_dtypes_and_output():
    rng = np.random.default_rng(9)
    a = rng.integers(0, 200, SHAPES[2]).astype(np.uint8)
    x = dask_of(a, 2)
    assert_same(cd.uniform_filter(x, 3), sn.uniform_filter(a, 3), exact=False)
    assert_same(cd.gaussian_filter(x, 1.0, output=np.float32),
                sn.gaussian_filter(a, 1.0, output=np.float32))
    w = np.array([1 + 1j, 2, -1j])
    f = a.astype(np.float64)
    assert_same(cd.correlate1d(dask_of(f, 2), w), sn.correlate1d(f, w))
    c = (rng.standard_normal(SHAPES[2]) + 1j * rng.standard_normal(SHAPES[2])).astype(np.complex64)
    assert_same(cd.convolve(dask_of(c, 2), np.ones((2, 3))), sn.convolve(c, np.ones((2, 3))))


def test_threaded_scheduler():
    a = np.random.default_rng(2).standard_normal((40, 50))
    y = cd.gaussian_filter(da.from_array(a, chunks=(9, 13)), 2.0)
    np.testing.assert_array_equal(y.compute(scheduler="threads"), sn.gaussian_filter(a, 2.0))


# --------------------------------------------------------------------------- bad input
def test_bad_arguments_fail_before_compute():
    x = da.zeros((8, 8), chunks=4)
    with pytest.raises(ValueError, match="origin"):
        cd.correlate1d(x, np.ones(3), origin=2)
    with pytest.raises(ValueError, match="origin"):
        cd.correlate(x, np.ones((3, 3)), origin=(0, -2))
    with pytest.raises(RuntimeError, match="boundary mode"):
        cd.gaussian_filter(x, 1.0, mode="bogus")
    with pytest.raises(RuntimeError, match="size"):
        cd.uniform_filter1d(x, 0)  # (uniform_filter leaves axes of size 0 alone, as SciPy)
    with pytest.raises(ValueError, match="Radius"):
        cd.gaussian_filter(x, 1.0, radius=-1)
    with pytest.raises(RuntimeError, match="weights.ndim"):
        cd.correlate(x, np.ones(3))
    with pytest.raises(TypeError, match="output must be None or a dtype"):
        cd.sobel(x, output=np.zeros((8, 8)))
    with pytest.raises(TypeError, match="unexpected keyword"):
        cd.gaussian_laplace(x, 1.0, order=1)
