"""cupyconv.dask on dask arrays of CuPy chunks (one GPU, synchronous and threaded schedulers)
against cupyconv.ndimage / cupyconv.conv on the whole array, and SciPy for one case.  Small shapes,
uneven chunks, some thinner than the halo."""

import numpy as np
import pytest

pytest.importorskip("dask.array")  # "dask" alone could resolve to this folder as a namespace
import dask.array as da  # noqa: E402
import scipy.ndimage as sn  # noqa: E402

import cupyconv  # noqa: E402
import cupyconv.dask as cd  # noqa: E402
import cupyconv.ndimage as cn  # noqa: E402
from cupyconv import reference  # noqa: E402

pytestmark = pytest.mark.gpu

SCHEDULERS = ["synchronous", "threads"]
MODES = ["reflect", "constant", "nearest", "mirror", "wrap"]
SHAPES = {1: (41,), 2: (19, 23), 3: (9, 10, 12)}
CHUNKS = {1: ((6, 2, 20, 13),), 2: ((5, 1, 13), (8, 8, 7)), 3: ((2, 7), (4, 6), (5, 1, 6))}


def device_input(ndim, dtype, seed):
    import cupy

    a = np.random.default_rng(seed).uniform(-1, 1, SHAPES[ndim]).astype(dtype)
    return a, cupy.asarray(a)


def check(lazy, whole, scheduler):
    """``lazy`` computes to a CuPy array equal to ``whole`` (the one-call result) within float
    rounding: the chunk and whole-array calls may choose different kernels (fused or not, tiled or
    direct), which sum in different orders."""
    import cupy

    got = lazy.compute(scheduler=scheduler)
    assert isinstance(got, cupy.ndarray)
    assert got.shape == whole.shape and got.dtype == whole.dtype
    tol = 2e-5 if whole.dtype in (np.float32, np.complex64) else 1e-12
    ref = cupy.asnumpy(whole)
    np.testing.assert_allclose(cupy.asnumpy(got), ref, rtol=tol,
                               atol=tol * max(1.0, float(np.abs(ref).max())))


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_filters_equal_the_whole_array_call(ndim, mode, scheduler):
    a, xd = device_input(ndim, np.float64, [ndim, MODES.index(mode)])
    x = da.from_array(xd, chunks=CHUNKS[ndim])
    rng = np.random.default_rng(ndim)
    w1 = rng.uniform(-1, 1, 4)
    wn = rng.uniform(-1, 1, (3, 4, 2)[:ndim])
    kw = dict(mode=mode, cval=0.5)
    calls = [
        ("correlate1d", (w1,), dict(axis=0, origin=1)),
        ("convolve1d", (w1,), dict(axis=-1, origin=-2)),
        ("correlate", (wn,), dict(origin=0)),
        ("convolve", (wn,), dict(origin=[-(k // 2) for k in wn.shape])),
        ("gaussian_filter", (1.5,), {}),
        ("gaussian_filter1d", (1.0,), dict(axis=0, order=1)),
        ("uniform_filter", (4,), dict(origin=1)),
        ("uniform_filter1d", (5,), dict(axis=-1)),
        ("sobel", (), dict(axis=0)),
        ("prewitt", (), dict(axis=-1)),
        ("laplace", (), {}),
        ("gaussian_laplace", (1.0,), {}),
        ("gaussian_gradient_magnitude", (0.8,), {}),
    ]
    for name, args, extra in calls:
        check(getattr(cd, name)(x, *args, **kw, **extra),
              getattr(cn, name)(xd, *args, **kw, **extra), scheduler)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_float32_gaussian_against_scipy(scheduler):
    import cupy

    a, xd = device_input(3, np.float32, 5)
    got = cd.gaussian_filter(da.from_array(xd, chunks=CHUNKS[3]), (1.0, 2.0, 0.7),
                             mode="mirror").compute(scheduler=scheduler)
    np.testing.assert_allclose(cupy.asnumpy(got),
                               sn.gaussian_filter(a, (1.0, 2.0, 0.7), mode="mirror"),
                               rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_over_batch_chunks(layout, scheduler):
    import cupy

    rng = np.random.default_rng(len(layout))
    shape = (7, 4, 12, 10) if layout == "NCHW" else (7, 12, 10, 4)
    wshape = (6, 2, 3, 3) if layout == "NCHW" else (6, 3, 3, 2)
    a = rng.uniform(-1, 1, shape).astype(np.float32)
    w = rng.uniform(-1, 1, wshape).astype(np.float32)
    b = rng.uniform(-1, 1, 6).astype(np.float32)
    xd, wd, bd = cupy.asarray(a), cupy.asarray(w), cupy.asarray(b)
    kw = dict(stride=(2, 1), padding=1, groups=2, layout=layout)
    x = da.from_array(xd, chunks=((3, 1, 3),) + tuple((s,) for s in shape[1:]))
    check(cd.conv(x, wd, bd, **kw), cupyconv.conv(xd, wd, bd, **kw), scheduler)
    # NumPy weights are accepted too (copied to the device per chunk)
    y = cd.conv(x, w, b, **kw).compute(scheduler=scheduler)
    np.testing.assert_allclose(cupy.asnumpy(y), reference.conv(a, w, b, **kw), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_signal_filters_equal_the_whole_array_call(ndim, mode, scheduler):
    import cupy
    import scipy.signal as ss

    import cupyconv.signal as cs

    a, xd = device_input(ndim, np.float32, [ndim, len(mode), 9])
    x = da.from_array(xd, chunks=CHUNKS[ndim])  # some chunks thinner than the halo
    rng = np.random.default_rng(ndim)
    for kernel in [(4, 3, 2)[:ndim], (3, 2, 5)[:ndim]]:  # even and odd along every axis
        w = rng.uniform(-1, 1, kernel).astype(np.float32)
        wd = cupy.asarray(w)
        check(cd.signal_correlate(x, w, mode), cs.correlate(xd, wd, mode), scheduler)
        check(cd.signal_convolve(x, wd, mode), cs.convolve(xd, wd, mode), scheduler)
    got = cd.signal_correlate(x, w, mode).compute(scheduler=scheduler)
    np.testing.assert_allclose(cupy.asnumpy(got), ss.correlate(a, w, mode), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_over_spatial_chunks(layout, scheduler):
    import cupy

    rng = np.random.default_rng([len(layout), 3])
    shape = (2, 4, 21, 19) if layout == "NCHW" else (2, 21, 19, 4)
    wshape = (6, 2, 3, 4) if layout == "NCHW" else (6, 3, 4, 2)
    a = rng.uniform(-1, 1, shape).astype(np.float32)
    w = rng.uniform(-1, 1, wshape).astype(np.float32)
    b = rng.uniform(-1, 1, 6).astype(np.float32)
    xd, wd, bd = cupy.asarray(a), cupy.asarray(w), cupy.asarray(b)
    spatial_chunks = ((5, 1, 15), (8, 11))
    chunks = ((1, 1), (4,)) + spatial_chunks if layout == "NCHW" else \
        ((1, 1),) + spatial_chunks + ((4,),)
    x = da.from_array(xd, chunks=chunks)
    for kw in [dict(padding=1, groups=2),
               dict(stride=(2, 3), padding=(2, 1), dilation=(1, 2), groups=2)]:
        kw["layout"] = layout
        check(cd.conv(x, wd, bd, **kw), cupyconv.conv(xd, wd, bd, **kw), scheduler)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_conv_transpose_over_batch_chunks(scheduler):
    import cupy

    rng = np.random.default_rng(12)
    a = rng.uniform(-1, 1, (5, 4, 9, 7)).astype(np.float32)
    w = rng.uniform(-1, 1, (4, 3, 3, 2)).astype(np.float32)
    b = rng.uniform(-1, 1, 6).astype(np.float32)
    xd, wd, bd = cupy.asarray(a), cupy.asarray(w), cupy.asarray(b)
    kw = dict(stride=2, padding=1, output_padding=1, groups=2)
    x = da.from_array(xd, chunks=((2, 3), 4, 9, 7))
    check(cd.conv_transpose(x, wd, bd, **kw), cupyconv.conv_transpose(xd, wd, bd, **kw),
          scheduler)
    y = cd.conv_transpose(x, w, b, **kw).compute(scheduler=scheduler)
    np.testing.assert_allclose(cupy.asnumpy(y), reference.conv_transpose(a, w, b, **kw),
                               rtol=1e-4, atol=1e-4)
