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
