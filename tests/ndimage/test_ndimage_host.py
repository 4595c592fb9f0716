"""CPU checks of cupyconv.ndimage: the boundary mapping against SciPy and numpy.pad, the Gaussian
weights against SciPy's, and the kernel dtype rules.  No GPU needed."""

import numpy as np
import pytest
import scipy.ndimage as sn

from cupyconv import ndimage as cn
from cupyconv._ndimage import boundary
from cupyconv._ndimage.dtypes import compute_dtype, default_output_dtype

MODES = ["reflect", "constant", "nearest", "mirror", "wrap", "grid-wrap", "grid-constant",
         "grid-mirror"]
PAD_MODE = {"reflect": "symmetric", "grid-mirror": "symmetric", "mirror": "reflect",
            "nearest": "edge", "wrap": "wrap", "grid-wrap": "wrap"}


def _scipy_sources(n, K, origin, mode):
    """(outputs x taps) input index each output tap reads in SciPy's correlate1d (-1: cval),
    found with one-hot weights on an input of distinct values."""
    x = np.arange(1, n + 1, dtype=np.float64)
    cols = []
    for j in range(K):
        w = np.zeros(K)
        w[j] = 1.0
        y = sn.correlate1d(x, w, mode=mode, cval=-1000.0, origin=origin)
        cols.append(np.where(y == -1000.0, -1, y.astype(np.int64) - 1))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("mode", MODES)
def test_map_index_matches_scipy_correlate1d(mode):
    code = boundary.mode_code(mode)
    for n in range(1, 6):
        for K in (1, 2, 3, 4, 7, 12, 17):  # halos up to 4x the axis
            for origin in sorted({-(K // 2), 0, (K - 1) // 2}):
                left = K // 2 + origin
                pos = np.arange(n)[:, None] + np.arange(K)[None, :] - left
                got = boundary.map_index(pos, n, code)
                np.testing.assert_array_equal(got, _scipy_sources(n, K, origin, mode),
                                              err_msg=f"n={n} K={K} origin={origin}")


@pytest.mark.parametrize("mode", [m for m in MODES if m in PAD_MODE])
def test_map_index_matches_numpy_pad(mode):
    """numpy.pad repeats its pattern for pads longer than the axis, like the mapping."""
    code = boundary.mode_code(mode)
    for n in range(1, 7):
        if mode == "mirror" and n == 1:
            continue  # numpy.pad's reflect needs two values; SciPy repeats the one
        pad = 4 * n + 3
        x = np.arange(n)
        ref = np.pad(x, pad, mode=PAD_MODE[mode])
        got = boundary.map_index(np.arange(-pad, n + pad), n, code)
        np.testing.assert_array_equal(got, ref)


def test_map_index_constant_and_length_one():
    assert list(boundary.map_index([-2, -1, 0, 2, 3], 3, boundary.CONSTANT)) == [-1, -1, 0, 2, -1]
    for code in (boundary.REFLECT, boundary.MIRROR, boundary.WRAP, boundary.NEAREST):
        assert set(boundary.map_index(np.arange(-9, 10), 1, code)) == {0}


def test_mode_aliases_and_unknown():
    assert boundary.mode_code("grid-wrap") == boundary.mode_code("wrap")
    assert boundary.mode_code("grid-constant") == boundary.mode_code("constant")
    assert boundary.mode_code("grid-mirror") == boundary.mode_code("reflect")
    with pytest.raises(RuntimeError, match="mode"):
        boundary.mode_code("symmetric")


@pytest.mark.parametrize("order", [0, 1, 2, 3])
@pytest.mark.parametrize("sigma,radius", [(0.5, None), (1.0, None), (2.5, None), (2.0, 3),
                                          (1.0, 0), (5.0, None)])
def test_gaussian_weights_match_scipy(order, sigma, radius):
    """SciPy's gaussian_filter1d of a centred delta returns its kernel itself."""
    lw = radius if radius is not None else int(4.0 * sigma + 0.5)
    delta = np.zeros(2 * lw + 1)
    delta[lw] = 1.0
    ref = sn.gaussian_filter1d(delta, sigma, order=order, mode="constant", radius=radius)
    got = cn.gaussian_kernel1d(sigma, order, lw)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-15)


def test_gaussian_weights_negative_order():
    with pytest.raises(ValueError, match="order"):
        cn.gaussian_kernel1d(1.0, -1, 3)


@pytest.mark.parametrize("din", ["uint8", "int16", "int32", "float32", "float64", "complex64"])
def test_default_output_dtype_matches_scipy(din):
    x = np.ones((3, 4), din)
    assert sn.correlate1d(x, [1.0, 2.0]).dtype == default_output_dtype(din, False)
    assert sn.correlate1d(x, [1.0, 2.0j]).dtype == default_output_dtype(din, True)
    assert sn.uniform_filter(x, 3).dtype == default_output_dtype(din, din.startswith("complex"))


def test_compute_dtype():
    assert compute_dtype("float32", "float32", False) == "float32"
    assert compute_dtype("uint8", "uint8", False) == "float64"  # exact integer truncation
    assert compute_dtype("float32", "float64", False) == "float64"
    assert compute_dtype("float32", "complex64", True) == "complex64"
    assert compute_dtype("int16", "complex128", True) == "complex128"
    assert compute_dtype("complex64", "complex64", False) == "complex64"
