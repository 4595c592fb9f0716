"""Forward convolution on the GPU against the float64 reference and the SciPy oracle."""

import numpy as np
import pytest

import cupyconv
from cupyconv import reference
from cupyconv._core.geometry import ConvGeometry
from cupyconv._dispatch.forward import FORWARD
from cupyconv._core.verify import poison, random_array, rel_error, scipy_conv, tolerance

from gpu_cases import BF16_CASES, CASES, LAYOUTS, case_id, dtypes_for, rng_for, shapes

pytestmark = pytest.mark.gpu
METHODS = ("auto",) + tuple(FORWARD)
DEPTHWISE_CASES = [
    dict(n=2, c=6, k=6, sp=(19, 21), ker=(5, 5), opts=dict(padding="same", groups=6)),
    dict(n=1, c=5, k=10, sp=(40, 37), ker=(7, 7), opts=dict(stride=2, padding=3, dilation=2, groups=5)),
    dict(n=3, c=4, k=4, sp=(9, 70), ker=(3, 1), opts=dict(stride=(1, 3), padding=[(0, 2), (0, 0)], groups=4)),
    dict(n=1, c=3, k=3, sp=(4, 9, 10), ker=(3, 3, 3), opts=dict(padding=1, stride=(1, 2, 1), groups=3)),
    dict(n=2, c=7, k=7, sp=(50,), ker=(5,), opts=dict(padding=4, dilation=2, groups=7)),
]


def _applicable(case, layout, method):
    """Only (problem, method) pairs the method can run: no test is skipped on the GPU."""
    if method == "auto":
        return True
    xs, ws = shapes(case, layout)
    return FORWARD[method].applicable(ConvGeometry.from_shapes(xs, ws, layout=layout,
                                                               dtype="float32", **case["opts"]))


BF16 = BF16_CASES + DEPTHWISE_CASES[:2]
GRID = [pytest.param(case, layout, method, dtype, id=f"{case_id(case)}-{layout}-{method}-{dtype}")
        for case in CASES + DEPTHWISE_CASES for layout in LAYOUTS for method in METHODS
        if _applicable(case, layout, method) for dtype in dtypes_for(case, BF16)]


@pytest.mark.parametrize("case,layout,method,dtype", GRID)
def test_forward_matches_reference_and_scipy(case, layout, dtype, method):
    import cupy

    rng = rng_for(case_id(case), layout, dtype, method)
    xs, ws = shapes(case, layout)
    opts = dict(case["opts"], layout=layout)
    xh, wh = random_array(rng, xs, dtype), random_array(rng, ws, dtype)
    bh = random_array(rng, (case["k"],), dtype)
    ref = reference.conv(xh, wh, bh, **opts)
    y = poison(cupy.empty(ref.shape, dtype))
    got = cupyconv.conv(cupy.asarray(xh), cupy.asarray(wh), cupy.asarray(bh), method=method,
                        out=y, **opts)
    assert got is y and got.dtype == dtype
    tol = tolerance(dtype, ref)
    assert rel_error(y, ref) <= tol
    geom = ConvGeometry.from_shapes(xs, ws, **opts)
    assert rel_error(y, scipy_conv(xh, wh, geom) + _channel_bias(bh, geom)) <= tol


def _channel_bias(b, geom):
    return b.astype(np.float64) if geom.channels_last else \
        b.astype(np.float64).reshape((-1,) + (1,) * geom.ndim)


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_fixed_ndim_entry_points(ndim):
    import cupy

    rng = rng_for("ndim", ndim)
    x = cupy.asarray(random_array(rng, (2, 3) + (6,) * ndim))
    w = cupy.asarray(random_array(rng, (4, 3) + (3,) * ndim))
    f = getattr(cupyconv, f"conv{ndim}d")
    y = f(x, w, padding=1)
    assert rel_error(y, reference.conv(x.get(), w.get(), padding=1)) <= 1e-5
    other = getattr(cupyconv, f"conv{ndim % 3 + 1}d")
    with pytest.raises(ValueError, match="spatial dims"):
        other(x, w)


def test_non_contiguous_inputs_are_read_through_strides():
    import cupy

    rng = rng_for("views")
    xb = cupy.asarray(random_array(rng, (3, 7, 20, 15)))
    x = xb[::2, 1::2, :, ::-1]                       # strided, reversed view
    w = cupy.asarray(random_array(rng, (5, 3, 3, 4))).transpose(0, 1, 3, 2)[:, :, ::-1]
    assert not x.flags.c_contiguous and not w.flags.c_contiguous
    y = cupyconv.conv(x, w, padding=(1, 2), stride=(2, 1))
    ref = reference.conv(x.get(), w.get(), padding=(1, 2), stride=(2, 1))
    assert rel_error(y, ref) <= 1e-5
    # channels-last view of a channels-first buffer
    xl = xb.transpose(0, 2, 3, 1)
    wl = cupy.asarray(random_array(rng, (4, 3, 3, 7)))
    yl = cupyconv.conv(xl, wl, padding="same", layout="NHWC")
    assert rel_error(yl, reference.conv(xl.get(), wl.get(), padding="same", layout="NHWC")) <= 1e-5


def test_large_batch_and_repeat_is_deterministic():
    import cupy

    rng = rng_for("batch")
    x = cupy.asarray(random_array(rng, (64, 8, 33, 35)))
    w = cupy.asarray(random_array(rng, (16, 8, 3, 3)))
    y1 = cupyconv.conv(x, w, stride=2, padding="same")
    y2 = cupyconv.conv(x, w, stride=2, padding="same")
    assert cupy.array_equal(y1, y2)
    assert rel_error(y1, reference.conv(x.get(), w.get(), stride=2, padding="same")) <= 1e-5
