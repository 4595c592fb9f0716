"""Arrays and checks shared by the CPU tests of ``cupyconv.dask``: NumPy-chunked dask arrays (the
``scipy.ndimage`` / ``cupyconv.reference`` stand-in) in uneven chunks, some thinner than any halo,
and the comparison with the whole-array call."""

import dask.array as da
import numpy as np


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
