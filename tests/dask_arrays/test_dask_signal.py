"""cupyconv.dask's ``signal_correlate`` / ``signal_convolve`` on a CPU (``cupyconv/dask/signal.py``):
NumPy-chunked arrays (the scipy.signal stand-in) equal to SciPy on the whole array in every mode."""

import numpy as np
import pytest

pytest.importorskip("dask.array")  # "dask" alone could resolve to this folder as a namespace
import dask.array as da  # noqa: E402
from dask_cases import SHAPES, dask_of  # noqa: E402

import cupyconv.dask as cd  # noqa: E402


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
