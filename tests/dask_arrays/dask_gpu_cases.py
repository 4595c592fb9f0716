"""Arrays and checks shared by the GPU tests of ``cupyconv.dask``: CuPy-chunked dask arrays in
uneven chunks, some thinner than the halo, against the one call on the whole array."""

import numpy as np


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
