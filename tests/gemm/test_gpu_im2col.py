"""Explicit im2col on the GPU against the NumPy im2col, and the GEMM identity it exists for."""

import numpy as np
import pytest

import cupyconv
from cupyconv import reference
from cupyconv._core.dtypes import numpy_dtype
from cupyconv._core.verify import poison, random_array, rel_error

from gpu_cases import CASES, LAYOUTS, case_id, rng_for, shapes, with_dtypes

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case,dtype", with_dtypes(CASES))
def test_im2col_matches_numpy_and_gives_the_convolution(case, layout, dtype):
    import cupy

    rng = rng_for("im2col", case_id(case), layout, dtype)
    opts = {k: v for k, v in case["opts"].items() if k != "groups"}
    xs, _ = shapes(case, layout)
    xh = random_array(rng, xs, dtype)
    expect = reference.im2col(xh, case["ker"], layout=layout, **opts)
    col = poison(cupy.empty(expect.shape, dtype))
    got = cupyconv.im2col(cupy.asarray(xh), case["ker"], layout=layout, out=col, **opts)
    assert got is col
    # a copy: must be exact, padding exactly zero
    # (compared widened: NumPy's testing helpers do not all take ml_dtypes' bfloat16)
    np.testing.assert_array_equal(col.get().astype(np.float64),
                                  expect.astype(numpy_dtype(dtype)).astype(np.float64))
    if dtype == "float64":
        wh = random_array(rng, _dense_weight(case, layout), dtype)
        y = reference.conv(xh, wh, layout=layout, **opts)
        w2 = wh.reshape(wh.shape[0], -1)
        prod = (w2 @ expect) if layout == "NCHW" else (expect @ w2.T)
        assert rel_error(prod.reshape(y.shape), y) <= 1e-12


def _dense_weight(case, layout):
    if layout == "NHWC":
        return (5, *case["ker"], case["c"])
    return (5, case["c"], *case["ker"])


def test_im2col_argument_errors():
    import cupy

    x = cupy.zeros((1, 2, 5, 5), cupy.float32)
    with pytest.raises(ValueError, match="kernel_size"):
        cupyconv.im2col(x, (3, 0))
    with pytest.raises(ValueError, match="kernel_size"):
        cupyconv.im2col(x, (3, 3, 3))
    with pytest.raises(ValueError, match="larger than the padded input"):
        cupyconv.im2col(x, 7)
    with pytest.raises(TypeError, match="cupy.asarray"):
        cupyconv.im2col(np.zeros((1, 2, 5, 5), np.float32), 3)
    with pytest.raises(ValueError, match="out must have shape"):
        cupyconv.im2col(x, 3, out=cupy.empty((1, 18, 10), cupy.float32))
