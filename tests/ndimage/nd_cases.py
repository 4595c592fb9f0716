"""Inputs shared by the ndimage tests (host-compiled kernels and GPU)."""

import numpy as np


def rand(rng, shape, dtype):
    """Random ``dtype`` data: integers in [-60, 60) ([0, 60) unsigned), floats and complex parts
    uniform in [-1, 1)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -60, 60, shape).astype(dtype)
    a = rng.uniform(-1, 1, shape)
    if dtype.kind == "c":
        a = a + 1j * rng.uniform(-1, 1, shape)
    return a.astype(dtype)


# The prepared-call tests' calls (tests/ndimage/test_*callcache*.py): every public filter, its
# positional arguments after the input, keywords, and the same call with another option value.
CALLCACHE_W1 = np.array([0.5, -1.0, 0.75, 0.25])
CALLCACHE_W2 = np.array([[0.5, -1.0, 0.25], [1.0, 0.5, -0.75], [0.25, 0.0, 1.5]])
CALLCACHE_CALLS = [
    ("correlate1d", (CALLCACHE_W1,), dict(axis=0, mode="constant", cval=0.5, origin=1),
     dict(cval=-1.5)),
    ("convolve1d", (CALLCACHE_W1,), dict(axis=-1, mode="wrap"), dict(mode="mirror")),
    ("correlate", (CALLCACHE_W2,), dict(mode="nearest", origin=(0, -1)), dict(origin=(1, 0))),
    ("convolve", (CALLCACHE_W2,), dict(mode="constant", cval=-0.5), dict(cval=0.25)),
    ("gaussian_filter1d", (0.9,), dict(axis=0, order=1), dict(order=2)),
    ("gaussian_filter", (1.1,), dict(mode="reflect"), dict(mode="wrap")),
    ("gaussian_filter", ((1.1, 0.6),), dict(mode="constant", cval=0.5), dict(cval=-0.5)),
    ("uniform_filter1d", (3,), dict(axis=1, origin=-1), dict(axis=0)),
    ("uniform_filter", ((2, 3),), dict(mode="mirror"), dict(mode="constant")),
    ("sobel", (), dict(axis=0), dict(axis=1)),
    ("prewitt", (), dict(axis=-1, mode="nearest"), dict(mode="wrap")),
    ("laplace", (), dict(mode="reflect"), dict(mode="nearest")),
    ("gaussian_laplace", (0.8,), dict(mode="nearest"), dict(truncate=2.0)),
    ("gaussian_gradient_magnitude", (0.8,), dict(), dict(radius=1)),
]
