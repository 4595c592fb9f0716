"""cupyconv.dask on a CPU: the halo each filter needs, the rechunking of chunks thinner than the
halo, and results of NumPy-chunked dask arrays (the scipy.ndimage / reference stand-in) equal to
the whole-array call, for every mode, 1-3 dims, odd and even sizes, uneven and thin chunks and
origins."""

import numpy as np
import pytest

pytest.importorskip("dask.array")  # "dask" alone could resolve to this folder as a namespace
import dask.array as da  # noqa: E402
import scipy.ndimage as sn  # noqa: E402

import cupyconv.dask as cd  # noqa: E402
from cupyconv import reference  # noqa: E402

MODES = ["reflect", "constant", "nearest", "mirror", "wrap", "grid-wrap", "grid-constant",
         "grid-mirror"]
SHAPES = {1: (29,), 2: (17, 12), 3: (7, 9, 10)}
# uneven chunks, some thinner than any halo below (1 and 2 elements)
CHUNKS = {1: ((5, 1, 9, 2, 12),), 2: ((4, 1, 12), (2, 7, 3)), 3: ((1, 4, 2), (5, 4), (3, 3, 1, 3))}


def dask_of(a, ndim):
    return da.from_array(a, chunks=CHUNKS[ndim])


def assert_same(got, ref, exact=True):
    """``got`` (a dask array) computes to ``ref``: bit-exact, as every output element is computed
    from the same inputs in the same way; ``exact=False`` for SciPy's uniform filters, whose
    running sum starts at each chunk's first element (cupyconv sums each window afresh)."""
    assert got.dtype == ref.dtype
    got = got.compute(scheduler="synchronous")
    assert got.dtype == ref.dtype and got.shape == ref.shape
    if exact:
        np.testing.assert_array_equal(got, ref)
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-13 * max(1, np.abs(ref).max()))


def origins(k):
    return sorted({-(k // 2), 0, (k - 1) // 2})


# --------------------------------------------------------------------------- halo arithmetic
@pytest.mark.parametrize("size,origin,reach", [(1, 0, (0, 0)), (3, 0, (1, 1)), (4, 0, (2, 1)),
                                               (4, -2, (0, 3)), (4, 1, (3, 0)), (5, -2, (0, 4)),
                                               (7, 3, (6, 0)), (2, -1, (0, 1))])
def test_filter_reach(size, origin, reach):
    assert cd.filter_reach(size, origin) == reach
    assert sum(reach) == size - 1


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

    monkeypatch.setattr(cd, "_map_filter", spy)
    call(da.zeros((64, 64), chunks=16))
    assert seen == reaches


@pytest.mark.parametrize("chunks,depth,expected", [
    ((4, 4, 4), 3, (4, 4, 4)),        # thick enough: unchanged
    ((4, 1, 4), 3, (4, 5)),           # a thin chunk joins the next
    ((1, 1, 1, 5), 2, (2, 6)),        # thin remainder joins the last chunk
    ((2, 2), 5, (4,)),                # shorter than the halo: one chunk
    ((7,), 9, (7,)),
    ((3, 3, 1), 3, (3, 4)),
    ((5, 0, 5), 2, (5, 5)),           # empty chunks vanish
    ((2, 2, 2), 0, (2, 2, 2)),
])
def test_rechunk_for_depth(chunks, depth, expected):
    got = cd.rechunk_for_depth(chunks, depth)
    assert got == expected and sum(got) == sum(chunks)
    assert len(got) == 1 or min(got) >= depth


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


# --------------------------------------------------------------------------- conv
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_conv_over_batch_chunks(spatial, layout):
    rng = np.random.default_rng([spatial, len(layout)])
    sizes = (9, 7, 5)[:spatial]
    shape = (7, 4) + sizes if layout == "NCHW" else (7,) + sizes + (4,)
    kernel = (3, 2, 3)[:spatial]
    wshape = (6, 2) + kernel if layout == "NCHW" else (6,) + kernel + (2,)
    a, w, b = rng.standard_normal(shape), rng.standard_normal(wshape), rng.standard_normal(6)
    # batch chunks (2, 1, 4), and the other axes chunked too (they get merged)
    x = da.from_array(a, chunks=((2, 1, 4),) + tuple((s - 1, 1) for s in shape[1:]))
    kw = dict(stride=(2, 1, 1)[:spatial], padding="same" if spatial == 1 else 1, groups=2,
              layout=layout)
    y = cd.conv(x, w, b, **kw)
    ref = reference.conv(a, w, b, **kw)
    assert y.shape == ref.shape and y.chunks[0] == (2, 1, 4) and y.dtype == a.dtype
    np.testing.assert_allclose(y.compute(), ref, rtol=1e-12, atol=1e-12)


def test_conv_keeps_float32():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((5, 3, 8, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    y = cd.conv(da.from_array(a, chunks=(2, 3, 8, 8)), w, padding=1)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.compute(), reference.conv(a, w, padding=1), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- bad input
def test_not_a_dask_array():
    a = np.zeros((8, 8))
    with pytest.raises(TypeError, match="dask.array.Array.*from_array"):
        cd.gaussian_filter(a, 1.0)
    with pytest.raises(TypeError, match="x must be a dask.array.Array"):
        cd.conv(a[None, None], np.ones((1, 1, 3, 3)))


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
    with pytest.raises(ValueError, match="batched"):
        cd.conv(da.zeros((3, 8, 8), chunks=1), np.ones((2, 3, 3, 3)))
    with pytest.raises(ValueError):
        cd.conv(da.zeros((2, 3, 8, 8), chunks=1), np.ones((2, 4, 3, 3)))  # channel mismatch
    with pytest.raises(TypeError, match="concrete"):
        cd.conv(da.zeros((2, 3, 8, 8), chunks=1), da.ones((2, 3, 3, 3)))


def test_the_package_names_the_module_and_imports_no_dask():
    import subprocess
    import sys

    import cupyconv

    assert cupyconv.dask is cd and "dask" in cupyconv.__all__
    code = "import sys, cupyconv; print('dask' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_dask_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_dask(name, *args, **kwargs):
        if name == "dask" or name.startswith("dask."):
            raise ImportError("No module named 'dask'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dask)
    with pytest.raises(ImportError, match=r"pip install 'cupyconv\[dask\]'"):
        cd.gaussian_filter(np.zeros(3), 1.0)


# --------------------------------------------------------------------------- scipy.signal
SIGNAL_KERNELS = {1: [(1,), (4,), (5,), (8,)], 2: [(3, 4), (2, 1), (5, 6)],
                  3: [(2, 3, 2), (3, 1, 4)]}


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_signal_filters_equal_scipy(ndim, mode):
    import scipy.signal as ss

    rng = np.random.default_rng([ndim, len(mode)])
    a = rng.standard_normal(SHAPES[ndim])
    x = dask_of(a, ndim)  # uneven chunks, some of 1 element: thinner than every halo here
    for kernel in SIGNAL_KERNELS[ndim]:
        w = rng.standard_normal(kernel)
        for mine, scipys in [(cd.signal_correlate, ss.correlate),
                             (cd.signal_convolve, ss.convolve)]:
            got = mine(x, w, mode, method="direct")
            ref = scipys(a, w, mode, method="direct")
            assert got.shape == ref.shape and got.dtype == ref.dtype, (mine, kernel)
            np.testing.assert_allclose(got.compute(scheduler="synchronous"), ref, rtol=1e-12,
                                       atol=1e-12)


def test_signal_complex_conjugates_and_integers_are_exact():
    import scipy.signal as ss

    rng = np.random.default_rng(3)
    a = rng.standard_normal((17, 12)) + 1j * rng.standard_normal((17, 12))
    w = rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))
    for mode in ("full", "same", "valid"):
        np.testing.assert_allclose(cd.signal_correlate(dask_of(a, 2), w, mode).compute(),
                                   ss.correlate(a, w, mode), rtol=1e-10, atol=1e-10)
    ai = rng.integers(-50, 50, (29,)).astype(np.int32)
    wi = np.array([3, -1, 2, 5], np.int16)
    for mode in ("full", "same", "valid"):
        got = cd.signal_convolve(dask_of(ai, 1), wi, mode)
        ref = ss.convolve(ai, wi, mode)
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got.compute(), ref)


def test_signal_auto_method_agrees_to_rounding():
    import scipy.signal as ss

    a = np.random.default_rng(5).standard_normal((40, 33))
    w = np.random.default_rng(6).standard_normal((9, 8))
    got = cd.signal_correlate(da.from_array(a, chunks=(13, 11)), w, "same").compute()
    np.testing.assert_allclose(got, ss.correlate(a, w, "same"), rtol=1e-10, atol=1e-10)


def test_signal_bad_arguments():
    x = da.zeros((8, 8), chunks=4)
    with pytest.raises(ValueError, match="mode"):
        cd.signal_correlate(x, np.ones((3, 3)), "bogus")
    with pytest.raises(ValueError, match="method"):
        cd.signal_correlate(x, np.ones((3, 3)), method="fast")
    with pytest.raises(ValueError, match="dimensionality"):
        cd.signal_convolve(x, np.ones(3))
    with pytest.raises(ValueError, match="at least as large"):
        cd.signal_correlate(x, np.ones((9, 2)), "valid")
    with pytest.raises(ValueError, match="empty"):
        cd.signal_correlate(x, np.ones((0, 2)))
    with pytest.raises(TypeError, match="in2 must be a concrete"):
        cd.signal_correlate(x, da.ones((3, 3)))
    with pytest.raises(TypeError, match="in1 must be a dask.array.Array"):
        cd.signal_correlate(np.zeros((8, 8)), np.ones((3, 3)))
    # 'full' and 'same' accept a kernel larger than in1 (zeros around in1)
    a = np.arange(12.0).reshape(3, 4)
    import scipy.signal as ss

    w = np.arange(10.0).reshape(5, 2)
    for mode in ("full", "same"):
        got = cd.signal_correlate(da.from_array(a, chunks=(1, 3)), w, mode)
        np.testing.assert_allclose(got.compute(), ss.correlate(a, w, mode))
        got = cd.signal_convolve(da.from_array(a, chunks=(1, 3)), w, mode, method="fft")
        np.testing.assert_allclose(got.compute(), ss.convolve(a, w, mode), atol=1e-10)


# --------------------------------------------------------------------------- spatial chunks
def test_window_chunks():
    # stride 1: chunks kept where thick enough, thin ones merged
    assert cd.window_chunks((5, 5, 5), 2) == ((5, 5, 5), (5, 5, 3))
    assert cd.window_chunks((5, 1, 5), 2) == ((5, 6), (5, 4))
    # stride 3: boundaries move down onto multiples of 3 (5 -> 3, 10 -> 9)
    assert cd.window_chunks((5, 5, 5), 2, 3) == ((3, 6, 6), (1, 2, 2))
    # every chunk at least extent + 1 thick
    sizes, outs = cd.window_chunks((4, 4, 4, 4), 6, 2)
    assert min(sizes) >= 7 and sum(sizes) == 16 and sum(outs) == (16 - 7) // 2 + 1
    assert cd.window_chunks((3,), 0, 1) == ((3,), (3,))
    with pytest.raises(ValueError, match="shorter than the window"):
        cd.window_chunks((2, 1), 3)


SPATIAL_CASES = [
    # (x shape, chunks, w shape, options)
    ((2, 3, 20, 17), (1, 3, (3, 7, 10), (5, 5, 7)), (4, 3, 3, 3), dict(padding=1)),
    ((1, 2, 23, 19), (1, 2, (4, 4, 15), (2, 9, 8)), (3, 2, 3, 2),
     dict(padding=(2, 1), stride=2, dilation=(1, 2))),
    ((1, 2, 23), (1, 1, (4, 4, 15)), (3, 2, 3), dict(padding="same", stride=3)),
    ((1, 2, 23), (1, 2, (1, 2, 20)), (3, 2, 4), dict(padding="same")),  # even kernel
    ((1, 4, 9, 9, 10), (1, 4, (3, 6), (2, 7), (5, 5)), (4, 2, 2, 3, 3),
     dict(padding=((1, 0), (0, 2), (1, 1)), stride=(2, 1, 3), groups=2)),
    ((2, 20, 18, 3), (1, (5, 15), (9, 9), 3), (4, 3, 3, 3),
     dict(padding=1, stride=2, layout="NHWC")),
    ((1, 1, 30, 8), (1, 1, (10, 10, 10), 8), (1, 1, 1, 1), dict(stride=4)),  # 1x1, strided
]


@pytest.mark.parametrize("case", range(len(SPATIAL_CASES)))
def test_conv_over_spatial_chunks(case):
    shape, chunks, wshape, kw = SPATIAL_CASES[case]
    rng = np.random.default_rng(case)
    a, w = rng.standard_normal(shape), rng.standard_normal(wshape)
    b = rng.standard_normal(wshape[0])
    y = cd.conv(da.from_array(a, chunks=chunks), w, b, **kw)
    ref = reference.conv(a, w, b, **kw)
    assert y.shape == ref.shape and y.dtype == a.dtype
    np.testing.assert_allclose(y.compute(scheduler="synchronous"), ref, rtol=1e-12, atol=1e-12)


def test_conv_spatial_chunks_float32_and_activation():
    rng = np.random.default_rng(11)
    a = rng.standard_normal((1, 3, 40, 40)).astype(np.float32)
    w = rng.standard_normal((5, 3, 5, 5)).astype(np.float32)
    y = cd.conv(da.from_array(a, chunks=(1, 3, 9, 16)), w, padding=2, activation="relu")
    assert y.dtype == np.float32 and len(y.chunks[2]) > 1
    np.testing.assert_allclose(y.compute(), reference.conv(a, w, padding=2, activation="relu"),
                               rtol=1e-5, atol=1e-4)
    with pytest.raises(TypeError, match="z"):
        cd.conv(da.from_array(a, chunks=(1, 3, 9, 16)), w, padding=2, z=np.zeros(1))


# --------------------------------------------------------------------------- conv_transpose
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_conv_transpose_over_batch_chunks(spatial, layout):
    rng = np.random.default_rng([spatial, len(layout), 7])
    sizes = (6, 5, 4)[:spatial]
    shape = (5, 4) + sizes if layout == "NCHW" else (5,) + sizes + (4,)
    kernel = (3, 2, 3)[:spatial]
    wshape = (4, 3) + kernel if layout == "NCHW" else (4,) + kernel + (3,)
    a, w, b = rng.standard_normal(shape), rng.standard_normal(wshape), rng.standard_normal(6)
    x = da.from_array(a, chunks=((2, 1, 2),) + tuple((s - 1, 1) for s in shape[1:]))
    kw = dict(stride=(2, 1, 3)[:spatial], padding=1, output_padding=(1, 0, 2)[:spatial],
              dilation=(1, 2, 1)[:spatial], groups=2, layout=layout)
    y = cd.conv_transpose(x, w, b, **kw)
    ref = reference.conv_transpose(a, w, b, **kw)
    assert y.shape == ref.shape and y.chunks[0] == (2, 1, 2) and y.dtype == a.dtype
    np.testing.assert_allclose(y.compute(), ref, rtol=1e-12, atol=1e-12)


def test_conv_transpose_bad_arguments_fail_before_compute():
    x = da.zeros((2, 3, 8, 8), chunks=1)
    with pytest.raises(ValueError, match="string modes|padding"):
        cd.conv_transpose(x, np.ones((3, 2, 3, 3)), padding="same")
    with pytest.raises(ValueError, match="channels"):
        cd.conv_transpose(x, np.ones((4, 2, 3, 3)))
    with pytest.raises(ValueError, match="output_padding"):
        cd.conv_transpose(x, np.ones((3, 2, 3, 3)), stride=2, output_padding=2)
    with pytest.raises(TypeError, match="concrete"):
        cd.conv_transpose(x, da.ones((3, 2, 3, 3)))
    with pytest.raises(ValueError, match="empty"):
        cd.conv_transpose(x, np.ones((3, 2, 3, 3)), padding=6)


# --------------------------------------------------------------------------- separable_conv
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("spatial", [1, 2])
def test_separable_conv_over_batch_chunks(spatial, layout):
    rng = np.random.default_rng([spatial, len(layout), 13])
    c, m, k = 3, 2, 5
    sizes = (9, 7)[:spatial]
    kernel = (3, 5)[:spatial]
    shape = (6, c) + sizes if layout == "NCHW" else (6,) + sizes + (c,)
    wdw = (m * c, 1) + kernel if layout == "NCHW" else (m * c,) + kernel + (1,)
    ones = (1,) * spatial
    wpw = (k, m * c) + ones if layout == "NCHW" else (k,) + ones + (m * c,)
    a, w1, w2 = rng.standard_normal(shape), rng.standard_normal(wdw), rng.standard_normal(wpw)
    b1, b2 = rng.standard_normal(m * c), rng.standard_normal(k)
    x = da.from_array(a, chunks=((4, 2),) + tuple((s - 1, 1) for s in shape[1:]))
    kw = dict(stride=2, padding=1, activation="relu6", layout=layout)
    y = cd.separable_conv(x, w1, w2, b1, b2, method="fused", **kw)  # method: GPU only, dropped
    ref = reference.separable_conv(a, w1, w2, b1, b2, **kw)
    # the reference composes the two reference convolutions
    t = np.clip(reference.conv(a, w1, b1, stride=2, padding=1, groups=c, layout=layout), 0, 6)
    np.testing.assert_allclose(ref, reference.conv(t, w2, b2, layout=layout), rtol=1e-12)
    assert y.shape == ref.shape and y.chunks[0] == (4, 2) and y.dtype == a.dtype
    np.testing.assert_allclose(y.compute(), ref, rtol=1e-12, atol=1e-12)


def test_separable_conv_bad_arguments_fail_before_compute():
    x = da.zeros((2, 4, 8, 8), chunks=1)
    wdw, wpw = np.ones((4, 1, 3, 3)), np.ones((5, 4, 1, 1))
    with pytest.raises(ValueError, match="w_pw"):
        cd.separable_conv(x, wdw, np.ones((5, 3, 1, 1)))
    with pytest.raises(ValueError, match="activation"):
        cd.separable_conv(x, wdw, wpw, activation="gelu")
    with pytest.raises(TypeError, match="w_pw must be a concrete"):
        cd.separable_conv(x, wdw, da.ones((5, 4, 1, 1)))
    with pytest.raises(ValueError, match="batched"):
        cd.separable_conv(da.zeros((4, 8, 8), chunks=2), wdw, wpw)


@pytest.mark.parametrize("chunked", ["batch", "spatial"])
def test_weights_are_one_key_every_task_reads(chunked):
    """The weights and bias enter the graph once, as one key that every convolution task
    depends on (a distributed scheduler sends it to each worker once)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 3, 16, 16))
    w, b = rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)
    chunks = (2, 3, 16, 16) if chunked == "batch" else (8, 3, 6, 16)
    y = cd.conv(da.from_array(a, chunks=chunks), w, b, padding=1)
    graph = dict(y.__dask_graph__())
    weight_keys = [key for key in graph if not isinstance(key, tuple)]
    assert len(weight_keys) == 1
    conv_keys = [key for key in graph if isinstance(key, tuple) and key[0] == y.name]
    assert len(conv_keys) == y.npartitions > 1
    assert all(weight_keys[0] in graph[key].dependencies for key in conv_keys), \
        "a conv task does not read the weights key"
    np.testing.assert_allclose(y.compute(), reference.conv(a, w, b, padding=1), rtol=1e-12)


# --------------------------------------------------------------------------- gpu=
def test_every_function_takes_gpu_and_checks_it_before_compute():
    import inspect

    x = da.zeros((4, 3, 8, 8), chunks=2)
    for name in cd.__all__:
        fn = getattr(cd, name)
        if name in ("filter_reach", "rechunk_for_depth", "window_chunks", "distribute",
                    "block_owners", "chunk_owners", "halo_transfer"):  # not filters
            continue
        param = inspect.signature(fn).parameters.get("gpu")
        assert param is not None and param.kind is param.KEYWORD_ONLY and param.default is None, \
            name
    with pytest.raises(TypeError, match="gpu must be None, False or True"):
        cd.gaussian_filter(x, 1.0, gpu="yes")
    with pytest.raises(TypeError, match="gpu must be"):
        cd.conv(x, np.ones((2, 3, 3, 3)), gpu=1)
    with pytest.raises(TypeError, match="gpu must be"):
        cd.signal_correlate(x, np.ones((1, 1, 3, 3)), gpu="cuda")
    # gpu=False is the default dispatch: NumPy chunks run the CPU stand-in
    a = np.random.default_rng(2).standard_normal((9, 10))
    np.testing.assert_array_equal(cd.gaussian_filter(da.from_array(a, chunks=4), 1.0,
                                                     gpu=False).compute(),
                                  sn.gaussian_filter(a, 1.0))


# --------------------------------------------------------------------------- one task per chunk
def _tasks(y) -> int:
    return len(dict(y.__dask_graph__()))


@pytest.mark.parametrize("call", [
    lambda x: cd.gaussian_filter(x, 1.0),
    lambda x: cd.gaussian_filter(x, 1.0, mode="wrap"),
    lambda x: cd.correlate(x, np.ones((3, 2, 4)), origin=(1, 0, -2)),
    lambda x: cd.uniform_filter1d(x, 3, axis=1),
    lambda x: cd.sobel(x, axis=2, mode="mirror"),
])
def test_one_task_per_output_chunk(call):
    """The filter is one layer of one task per output chunk, and the whole graph is the input's
    tasks (those of the rechunk where thin chunks were merged) plus one task per output chunk."""
    x = da.from_array(np.zeros((12, 14, 16)), chunks=(4, (7, 7), (5, 5, 6)))
    y = call(x)
    layer = y.dask.layers[y.name]
    assert len(layer) == y.npartitions == x.npartitions
    assert set(dict(layer)) == {(y.name,) + i for i in np.ndindex(y.numblocks)}
    assert _tasks(y) == _tasks(x) + y.npartitions
    # thin chunks: the rechunk's tasks, then one per output chunk
    thin = da.from_array(np.zeros((12, 14, 16)), chunks=(1, (7, 7), (5, 1, 10)))
    y = call(thin)
    assert len(y.dask.layers[y.name]) == y.npartitions
    assert _tasks(y) == _tasks(thin.rechunk(y.chunks)) + y.npartitions


def test_a_task_reads_only_the_neighbours_its_halo_reaches():
    """The middle chunk of a 3x3x3 grid reads all 27 chunks with a halo along every axis, 3 with
    a halo along one axis, 2 with a halo on one side of one axis; corner chunks fewer."""
    x = da.from_array(np.zeros((12, 12, 12)), chunks=4)
    cases = [(cd.gaussian_filter(x, 1.0), 27, 8),
             (cd.gaussian_filter1d(x, 1.0, axis=1), 3, 2),
             (cd.correlate1d(x, np.ones(3), axis=0, origin=1), 2, 1)]  # reach (2, 0)
    for y, middle, corner in cases:
        layer = dict(y.dask.layers[y.name])
        assert len(layer[(y.name, 1, 1, 1)].dependencies) == middle
        assert len(layer[(y.name, 0, 0, 0)].dependencies) == corner
        assert all(dep[0] == x.name for task in layer.values() for dep in task.dependencies)


def test_windows_are_one_task_per_chunk_and_read_the_weights_key():
    rng = np.random.default_rng(8)
    a, w = rng.standard_normal((29, 31)), rng.standard_normal((4, 3))
    y = cd.signal_correlate(da.from_array(a, chunks=(8, 10)), w, "same")
    layer = dict(y.dask.layers[y.name])
    assert len(layer) == y.npartitions
    weights = [k for k in dict(y.__dask_graph__()) if not isinstance(k, tuple)]
    assert len(weights) == 1 and all(weights[0] in t.dependencies for t in layer.values())
    import scipy.signal as ss

    np.testing.assert_allclose(y.compute(), ss.correlate(a, w, "same"), rtol=1e-12, atol=1e-12)


def _expected_block(a, starts, sizes, present, periodic):
    """The block of the chunk at ``starts`` with halo ``present`` cut straight from ``a``."""
    index = []
    for ax, (s, c, (lo, hi)) in enumerate(zip(starts, sizes, present)):
        i = np.arange(s - lo, s + c + hi)
        if periodic[ax]:
            i %= a.shape[ax]
        assert i.min() >= 0 and i.max() < a.shape[ax]
        index.append(i)
    return a[np.ix_(*index)]


def _assembled_blocks(a, chunks, reach, boundary):
    """Every chunk's (plan, block assembled from the NumPy chunks of ``a``)."""
    axes = [cd._axis_pieces(c, r, b) for c, r, b in zip(chunks, reach, boundary)]
    bounds = [np.cumsum((0,) + c) for c in chunks]
    blocks = {}
    for idx in np.ndindex(*(len(c) for c in chunks)):
        sources, cuts, shape, present = cd._block_plan(idx, axes, chunks, remote=lambda nb: False)
        neighbours = tuple(nb for nb, _ in sources)
        pieces = [a[tuple(slice(bounds[ax][j], bounds[ax][j + 1]) for ax, j in enumerate(nb))]
                  for nb in neighbours]
        blocks[idx] = (neighbours, cuts, present, cd.assemble_halo(pieces, cuts, shape))
    return blocks, bounds


@pytest.mark.parametrize("chunks,reach,boundary", [
    # asymmetric reach, array edges (no halo there), corners
    (((4, 5, 3), (6, 6)), ((3, 1), (0, 2)), ("none", "none")),
    # periodic along an axis of 2 chunks (both halos from the other chunk) and of 3 chunks
    (((6, 6), (4, 4, 4)), ((2, 3), (1, 2)), ("periodic", "periodic")),
    # periodic with one chunk: no halo (the wrap mode does it); an axis with reach 0
    (((12,), (3, 5, 4), (5, 5)), ((4, 4), (0, 2), (0, 0)), ("periodic", "none", "none")),
    # 3 chunks periodic next to none, one-sided reaches
    (((4, 4, 4), (7, 5)), ((0, 3), (2, 0)), ("periodic", "none")),
])
def test_assemble_halo_cuts_exactly_the_reach(chunks, reach, boundary):
    rng = np.random.default_rng(len(chunks[0]))
    a = rng.standard_normal(tuple(sum(c) for c in chunks))
    periodic = [b == "periodic" for b in boundary]
    blocks, bounds = _assembled_blocks(a, chunks, reach, boundary)
    for idx, (neighbours, cuts, present, block) in blocks.items():
        sizes = [chunks[ax][i] for ax, i in enumerate(idx)]
        for ax, i in enumerate(idx):
            n, (left, right), size = len(chunks[ax]), reach[ax], sizes[ax]
            lo, hi = present[ax]
            if n == 1:
                assert (lo, hi) == (0, 0)
            elif periodic[ax]:
                assert (lo, hi) == (left, right)
            else:  # an edge chunk's inward halo also covers what the mode reflects
                assert lo == (0 if i == 0 else max(left, right + 1 - size) if i == n - 1
                              else left)
                assert hi == (0 if i == n - 1 else max(right, left + 1 - size) if i == 0
                              else right)
        starts = [bounds[ax][i] for ax, i in enumerate(idx)]
        np.testing.assert_array_equal(block, _expected_block(a, starts, sizes, present, periodic))
        # each distinct neighbour once among the task's inputs, one cut per piece
        assert len(set(neighbours)) == len(neighbours)
        pieces_per_axis = [1 + (lo > 0) + (hi > 0) for lo, hi in present]
        assert len(cuts) == int(np.prod(pieces_per_axis))


def test_periodic_two_chunks_read_one_neighbour_twice():
    a = np.arange(10.0)
    blocks, _ = _assembled_blocks(a, ((5, 5),), ((2, 3),), ("periodic",))
    neighbours, cuts, present, block = blocks[(0,)]
    assert neighbours == ((0,), (1,)) and len(cuts) == 3 and present == ((2, 3),)
    np.testing.assert_array_equal(block, [8, 9, 0, 1, 2, 3, 4, 5, 6, 7])


def test_edge_chunk_takes_the_halo_its_mode_reflects():
    """A 2-element edge chunk of a filter reaching (2, 0): mirror mode reads element 2 for the
    first output, so the chunk takes a right halo of 1 though the filter reaches 0 to the
    right."""
    assert cd._axis_pieces((2, 3, 4), (2, 0), "none") == [
        (((0, 0, 2), (1, 0, 1)), 0, 1), (((0, 0, 2), (1, 0, 3)), 2, 0),
        (((1, 1, 3), (2, 0, 4)), 2, 0)]
    # and mirrored: the last chunk of a filter reaching (0, 3) takes a left halo of 1
    assert cd._axis_pieces((3, 3), (0, 3), "none")[1] == (((0, 2, 3), (1, 0, 3)), 1, 0)
    with pytest.raises(ValueError, match="rechunk_for_depth"):
        cd._axis_pieces((1, 5), (2, 2), "none")


def test_no_halo_block_is_the_chunk_and_wide_halos_are_trimmed_by_copy():
    chunk = np.arange(12.0).reshape(3, 4)
    assert cd.assemble_halo([chunk], ((0, ((0, 3), (0, 4)), ((0, 3), (0, 4))),), (3, 4)) is chunk
    padded = np.arange(30.0).reshape(5, 6)
    cuts = ((0, ((0, 5), (0, 6)), ((0, 5), (0, 6))),)
    # the halo doubles the block (30 of 12 elements): copied, so it does not pin the block
    got = cd._halo_task(lambda b: b * 2, cuts, (5, 6), (slice(1, 4), slice(2, 6)), padded[:, :6])
    np.testing.assert_array_equal(got, 2 * padded[1:4, 2:6])
    assert got.base is None and got.flags.c_contiguous
    untrimmed = cd._halo_task(lambda b: b + 1, cuts, (5, 6), None, padded)
    assert untrimmed.shape == (5, 6)
    # a thin halo (20 x 20 around 18 x 20: 1.11x) stays a view of the block's result
    big = np.arange(400.0).reshape(20, 20)
    cuts = ((0, ((0, 20), (0, 20)), ((0, 20), (0, 20))),)
    view = cd._halo_task(lambda b: b * 2, cuts, (20, 20), (slice(1, 19), slice(0, 20)), big)
    np.testing.assert_array_equal(view, 2 * big[1:19])
    assert view.base is not None and view.base.shape == (20, 20)


@pytest.mark.parametrize("scheduler", ["synchronous", "threads", "distributed"])
def test_schedulers(scheduler):
    rng = np.random.default_rng(17)
    a = rng.standard_normal((13, 11, 9))
    x = da.from_array(a, chunks=(4, (5, 6), 3))
    img, w = rng.standard_normal((2, 3, 17, 15)), rng.standard_normal((4, 3, 3, 3))
    lazy = [(cd.gaussian_filter(x, 1.0, mode=("wrap", "mirror", "nearest")),
             sn.gaussian_filter(a, 1.0, mode=("wrap", "mirror", "nearest"))),
            (cd.correlate(x, np.ones((2, 3, 4)), origin=(0, 1, -2)),
             sn.correlate(a, np.ones((2, 3, 4)), origin=(0, 1, -2))),
            (cd.conv(da.from_array(img, chunks=(1, 3, 6, 7)), w, stride=2, padding=1),
             reference.conv(img, w, stride=2, padding=1))]
    if scheduler == "distributed":
        distributed = pytest.importorskip("distributed")
        with distributed.Client(processes=False, n_workers=1, threads_per_worker=2,
                                dashboard_address=None) as client:
            got = client.compute([y for y, _ in lazy], sync=True)
    else:
        got = [y.compute(scheduler=scheduler) for y, _ in lazy]
    for g, (_, ref) in zip(got, lazy):
        np.testing.assert_allclose(g, ref, rtol=1e-12, atol=1e-12)


def test_names_are_deterministic():
    x = da.from_array(np.zeros((20, 20)), chunks=7)
    assert cd.gaussian_filter(x, 1.0).name == cd.gaussian_filter(x, 1.0).name
    assert cd.gaussian_filter(x, 1.0).name != cd.gaussian_filter(x, 1.5).name
    assert cd.gaussian_filter(x, 1.0).name != cd.gaussian_filter(x, 1.0, mode="wrap").name
    assert cd.correlate(x, np.ones((3, 3))).name == cd.correlate(x, np.ones((3, 3))).name
    assert cd.correlate(x, np.ones((3, 3))).name != cd.correlate(x, np.full((3, 3), 2.0)).name
    assert cd.gaussian_filter(x, 1.0).name != cd.gaussian_filter(x, 1.0, gpu=True).name
    w = np.ones((2, 1, 3, 3))
    img = da.from_array(np.zeros((1, 1, 20, 20)), chunks=(1, 1, 7, 7))
    assert cd.conv(img, w, padding=1).name == cd.conv(img, w, padding=1).name
    assert cd.conv(img, w, padding=1).name != cd.conv(img, 2 * w, padding=1).name


def test_untrimmed_windows_take_exactly_their_reach():
    """Without trimming (the 'valid' windows of signal/conv) no mode reads past the block, so an
    edge chunk takes no extra halo: each result's shape stays what out_chunks says."""
    assert cd._axis_pieces((2, 3), (2, 0), "none", edge_mode=False)[0] == (((0, 0, 2),), 0, 0)
    assert cd._axis_pieces((2, 3), (2, 0), "none")[0] == (((0, 0, 2), (1, 0, 1)), 0, 1)


def test_slices_cull_the_graph():
    a = np.random.default_rng(4).standard_normal((30, 28))
    y = cd.gaussian_filter(da.from_array(a, chunks=(6, 7)), 1.0, mode="wrap")
    x_name = next(iter(y.dask.dependencies[y.name]))
    part = y[:6, 7:14]
    culled = dict(part.dask.cull({k for row in part.__dask_keys__() for k in row}))
    # the one chunk's task and the 9 input chunks around it (wrapping at the top), no more
    assert [k for k in culled if k[0] == y.name] == [(y.name, 0, 1)]
    assert sorted(k[1:] for k in culled if k[0] == x_name) == [
        (r, c) for r in (0, 1, 4) for c in (0, 1, 2)]
    np.testing.assert_array_equal(part.compute(), sn.gaussian_filter(a, 1.0, mode="wrap")[:6, 7:14])


# --------------------------------------------------------------------------- halo transfer modes
def _both_transfers(make):
    """``make()`` built under halo transfer "chunks" and "slabs", computed: the two results."""
    import dask

    out = []
    for transfer in ("chunks", "slabs"):
        with dask.config.set({"cupyconv.halo-transfer": transfer}):
            assert cd.halo_transfer() == transfer
            out.append(make().compute(scheduler="synchronous"))
    return out


@pytest.mark.parametrize("mode", ["reflect", "wrap", "constant", "mirror"])
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_slab_transfer_equals_chunk_transfer(ndim, mode):
    """Filter tasks fed by their neighbours' slab exports compute what tasks reading the whole
    neighbour chunks compute, bit for bit: thin chunks, asymmetric reaches (origins), periodic
    axes (a two-chunk axis takes both halos from the one neighbour), 'valid' windows."""
    rng = np.random.default_rng([ndim, 23])
    a = rng.standard_normal(SHAPES[ndim])
    x = dask_of(a, ndim)
    two = da.from_array(a, chunks=tuple((n // 2, n - n // 2) for n in a.shape))
    w = rng.standard_normal((3,) * ndim)
    makes = [lambda: cd.gaussian_filter(x, 1.1, mode=mode),
             lambda: cd.uniform_filter(x, 4, origin=1, mode=mode),
             lambda: cd.correlate(x, w, mode=mode, origin=-1),
             lambda: cd.gaussian_filter(two, 0.9, mode=mode),
             lambda: cd.signal_correlate(x, w, "same")]
    for make in makes:
        chunks, slabs = _both_transfers(make)
        np.testing.assert_array_equal(slabs, chunks)


def test_slab_graph_reads_slabs_not_chunks():
    """Under "slabs" a filter task reads its own chunk and one export per neighbour; an export
    holds only face slabs as thick as the halo (here 2 of a chunk's 4 rows per face)."""
    import dask

    a = np.random.default_rng(5).standard_normal((12, 12, 12))
    x = da.from_array(a, chunks=4)
    with dask.config.set({"cupyconv.halo-transfer": "slabs"}):
        y = cd.gaussian_filter(x, 0.5)  # radius 2
    layer = dict(y.dask.layers[y.name])
    tasks = {k: t for k, t in layer.items() if k[0] == y.name}
    exports = {k: t for k, t in layer.items() if k[0] != y.name}
    assert len(tasks) == y.npartitions == len(exports) == 27
    middle = tasks[(y.name, 1, 1, 1)].dependencies
    assert (x.name, 1, 1, 1) in middle and len(middle) == 27
    assert sum(dep[0] == x.name for dep in middle) == 1  # the rest are exports
    g = dict(y.__dask_graph__())
    export = dask.get(g, next(iter(exports)))
    assert export and all(min(s.shape) == 2 and max(s.shape) == 4 for s in export.values())
    np.testing.assert_array_equal(y.compute(scheduler="synchronous"),
                                  sn.gaussian_filter(a, 0.5))


def test_halo_transfer_setting():
    import dask

    assert cd.halo_transfer() == "chunks"  # no distributed client here
    with dask.config.set({"cupyconv.halo-transfer": "both"}):
        with pytest.raises(ValueError, match="halo-transfer"):
            cd.halo_transfer()
