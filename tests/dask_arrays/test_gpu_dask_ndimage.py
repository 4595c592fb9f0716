"""cupyconv.dask's ndimage filters on dask arrays of CuPy chunks (one GPU, synchronous and threaded
schedulers) against cupyconv.ndimage on the whole array, and SciPy for one case."""

import numpy as np
import pytest

pytest.importorskip("dask.array")  # "dask" alone could resolve to this folder as a namespace
import dask.array as da  # noqa: E402
import scipy.ndimage as sn  # noqa: E402
from dask_gpu_cases import CHUNKS, MODES, SCHEDULERS, check, device_input  # noqa: E402

import cupyconv.dask as cd  # noqa: E402
import cupyconv.ndimage as cn  # noqa: E402

pytestmark = pytest.mark.gpu


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
