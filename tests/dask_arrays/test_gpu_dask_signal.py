"""cupyconv.dask's ``signal_correlate`` / ``signal_convolve`` on dask arrays of CuPy chunks (one
GPU) against cupyconv.signal on the whole array and SciPy."""

import numpy as np
import pytest

pytest.importorskip("dask.array")  # "dask" alone could resolve to this folder as a namespace
import dask.array as da  # noqa: E402
from dask_gpu_cases import CHUNKS, SCHEDULERS, check, device_input  # noqa: E402

import cupyconv.dask as cd  # noqa: E402

pytestmark = pytest.mark.gpu


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
