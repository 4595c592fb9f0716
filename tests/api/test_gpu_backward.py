"""Backward passes, transposed convolution and col2im on the GPU: against the float64 reference,
SciPy where it has the operation, the adjoint identity, and bitwise determinism."""

import numpy as np
import pytest

import cupyconv
from cupyconv import reference
from cupyconv._core.kernels import GEMM_TILES
from cupyconv._core.verify import poison, random_array, rel_error, tolerance

from gpu_cases import CASES, LAYOUTS, assert_adjoint, case_id, rng_for, shapes, with_dtypes

pytestmark = pytest.mark.gpu


def _operands(case, layout, dtype, tag):
    rng = rng_for(tag, case_id(case), layout, dtype)
    xs, ws = shapes(case, layout)
    opts = dict(case["opts"], layout=layout)
    ys = cupyconv.output_shape(xs, ws, **opts)
    return rng, xs, ws, ys, opts


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case,dtype", with_dtypes(CASES))
def test_backward_data(case, layout, dtype):
    import cupy

    rng, xs, ws, ys, opts = _operands(case, layout, dtype, "dgrad")
    dyh, wh = random_array(rng, ys, dtype), random_array(rng, ws, dtype)
    ref = reference.conv_backward_data(dyh, wh, xs, **opts)
    dx = poison(cupy.empty(xs, dtype))
    got = cupyconv.conv_backward_data(cupy.asarray(dyh), cupy.asarray(wh), xs, out=dx, **opts)
    assert got is dx
    assert rel_error(dx, ref) <= tolerance(dtype, ref)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case,dtype", with_dtypes(CASES))
def test_backward_weight(case, layout, dtype):
    import cupy

    rng, xs, ws, ys, opts = _operands(case, layout, dtype, "wgrad")
    xh, dyh = random_array(rng, xs, dtype), random_array(rng, ys, dtype)
    ref = reference.conv_backward_weight(xh, dyh, ws, **opts)
    dw = poison(cupy.empty(ws, dtype))
    got = cupyconv.conv_backward_weight(cupy.asarray(xh), cupy.asarray(dyh), ws, out=dw, **opts)
    assert got is dw
    assert rel_error(dw, ref) <= tolerance(dtype, ref)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_adjoint_identity_on_the_gpu(case, layout):
    import cupy

    rng, xs, ws, ys, opts = _operands(case, layout, "float64", "adjoint")
    x, w, dy = (cupy.asarray(random_array(rng, s, "float64")) for s in (xs, ws, ys))
    assert_adjoint(x, w, dy, opts)


def test_backward_passes_are_bitwise_deterministic():
    import cupy

    rng = rng_for("determinism")
    # long k = N * pixels with a small weight: backward-weight splits k; stride 2: four phases
    x = cupy.asarray(random_array(rng, (16, 32, 30, 30)))
    w = cupy.asarray(random_array(rng, (48, 32, 3, 3)))
    opts = dict(stride=2, padding=1)
    dy = cupy.asarray(random_array(rng, cupyconv.output_shape(x.shape, w.shape, **opts)))
    dws = [cupyconv.conv_backward_weight(x, dy, w.shape, **opts) for _ in range(3)]
    dxs = [cupyconv.conv_backward_data(dy, w, x.shape, **opts) for _ in range(3)]
    assert all(cupy.array_equal(dws[0], d) for d in dws[1:])
    assert all(cupy.array_equal(dxs[0], d) for d in dxs[1:])
    assert rel_error(dws[0], reference.conv_backward_weight(x.get(), dy.get(), w.shape, **opts)) <= 1e-5


TRANSPOSE_CASES = [
    dict(x=(2, 4, 7, 6), w=(4, 3, 3, 3), opts=dict(stride=2, padding=1, output_padding=1)),
    dict(x=(1, 6, 5, 9), w=(6, 2, 2, 3), opts=dict(stride=(3, 2), padding=[(1, 0), (0, 2)], groups=3)),
    dict(x=(2, 3, 8), w=(3, 5, 4), opts=dict(stride=1, padding=2, dilation=2)),
    dict(x=(1, 2, 5, 5), w=(2, 2, 3, 3), opts=dict(stride=2, dilation=3, output_padding=2)),  # op >= stride
    dict(x=(1, 4, 3, 4, 5), w=(4, 2, 2, 3, 2), opts=dict(stride=(2, 1, 3), padding=(0, 1, 1),
                                                        output_padding=(1, 0, 2), groups=2)),
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case,dtype", with_dtypes(TRANSPOSE_CASES, TRANSPOSE_CASES[::2],
                                                   ids=lambda c: "x".join(map(str, c["x"]))))
def test_conv_transpose(case, dtype, layout):
    import cupy

    rng = rng_for("transpose", str(case), dtype, layout)
    xh, wh = random_array(rng, case["x"], dtype), random_array(rng, case["w"], dtype)
    groups = case["opts"].get("groups", 1)
    bh = random_array(rng, (case["w"][1] * groups,), dtype)
    if layout == "NHWC":
        xh, wh = np.ascontiguousarray(np.moveaxis(xh, 1, -1)), np.ascontiguousarray(np.moveaxis(wh, 1, -1))
    ref = reference.conv_transpose(xh, wh, bh, layout=layout, **case["opts"])
    y = cupyconv.conv_transpose(cupy.asarray(xh), cupy.asarray(wh), cupy.asarray(bh),
                                layout=layout, **case["opts"])
    assert y.shape == ref.shape
    assert rel_error(y, ref) <= tolerance(dtype, ref)


def test_conv_transpose_stride_1_is_scipy_full_convolution():
    import cupy
    from scipy import signal

    rng = rng_for("transpose-scipy")
    x, w = random_array(rng, (1, 3, 9, 7), "float64"), random_array(rng, (3, 2, 4, 3), "float64")
    y = cupyconv.conv_transpose(cupy.asarray(x), cupy.asarray(w)).get()
    expect = np.stack([sum(signal.convolve(x[0, c], w[c, o], mode="full") for c in range(3))
                       for o in range(2)])
    assert rel_error(y[0], expect) <= 1e-12


def test_conv_transpose_rejects_bad_arguments():
    import cupy

    x, w = cupy.ones((1, 2, 5, 5), cupy.float32), cupy.ones((2, 3, 3, 3), cupy.float32)
    with pytest.raises(ValueError, match="output_padding"):
        cupyconv.conv_transpose(x, w, stride=2, output_padding=2)
    with pytest.raises(ValueError, match="padding of conv_transpose"):
        cupyconv.conv_transpose(x, w, padding="same")
    with pytest.raises(ValueError, match="input channels"):
        cupyconv.conv_transpose(x, cupy.ones((3, 3, 3, 3), cupy.float32))
    with pytest.raises(ValueError, match="empty output"):
        cupyconv.conv_transpose(x, w, padding=9)
    with pytest.raises(TypeError, match="cupy.asarray"):
        cupyconv.conv_transpose(np.ones((1, 2, 5, 5), np.float32), w)


def test_backward_argument_errors():
    import cupy

    x, w = cupy.ones((1, 2, 5, 5), cupy.float32), cupy.ones((3, 2, 3, 3), cupy.float32)
    dy = cupy.ones((1, 3, 3, 3), cupy.float32)
    with pytest.raises(ValueError, match=r"dy must have the convolution's output shape \(1, 3, 5, 5\)"):
        cupyconv.conv_backward_data(dy, w, x.shape, padding=1)
    with pytest.raises(TypeError, match="dy has dtype float64"):
        cupyconv.conv_backward_weight(x, dy.astype(cupy.float64), w.shape)
    with pytest.raises(ValueError, match="out must have shape"):
        cupyconv.conv_backward_data(dy, w, x.shape, out=cupy.empty((1, 2, 4, 4), cupy.float32))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case,dtype", with_dtypes(CASES[::2]))
def test_col2im(case, layout, dtype):
    import cupy

    rng = rng_for("col2im", case_id(case), layout, dtype)
    opts = {k: v for k, v in case["opts"].items() if k != "groups"}
    xs, _ = shapes(case, layout)
    col_shape = reference.im2col(np.zeros(xs), case["ker"], layout=layout, **opts).shape
    ch = random_array(rng, col_shape, dtype)
    ref = reference.col2im(ch, xs, case["ker"], layout=layout, **opts)
    got = cupyconv.col2im(cupy.asarray(ch), xs, case["ker"], layout=layout, **opts)
    assert rel_error(got, ref) <= tolerance(dtype, ref)
    x = cupy.asarray(random_array(rng, xs, "float64"))
    c64 = cupy.asarray(ch.astype("float64"))
    col = cupyconv.im2col(x, case["ker"], layout=layout, **opts)
    back = cupyconv.col2im(c64, xs, case["ker"], layout=layout, **opts)
    assert float(cupy.vdot(col, c64)) == pytest.approx(float(cupy.vdot(x, back)), rel=1e-10)


@pytest.mark.parametrize("splits", [1, 5])
@pytest.mark.parametrize("dtype,tile", [(d, t) for d in ("float32", "float64") for t in GEMM_TILES[d]])
def test_backward_weight_every_tile_and_split(dtype, tile, splits):
    import cupy

    from cupyconv._gemm.kernel_args import ImplicitConv
    from cupyconv._gemm.launch import launch_conv_wgrad
    from cupyconv._gemm.plans import GemmPlan
    from cupyconv._core.geometry import ConvGeometry

    rng = rng_for("wgrad-tile", dtype, tile, splits)
    for xs, ws, opts in [((2, 9, 11, 12), (20, 3, 3, 12), dict(stride=2, padding=1)),
                         ((1, 7, 8, 6), (9, 3, 3, 2), dict(padding=[(0, 1), (2, 0)], dilation=2,
                                                          groups=3))]:   # Cg = 2: scalar loads
        geom = ConvGeometry.from_shapes(xs, ws, layout="NHWC", dtype=dtype, **opts)
        xh = random_array(rng, xs, dtype)
        dyh = random_array(rng, geom.output_shape, dtype)
        dw = poison(cupy.empty(ws, dtype))
        launch_conv_wgrad(ImplicitConv.from_geometry(geom), cupy.asarray(xh), cupy.asarray(dyh), dw,
                          plan=GemmPlan(tile, splits, 0.0))
        ref = reference.conv_backward_weight(xh, dyh, ws, layout="NHWC", **opts)
        assert rel_error(dw, ref) <= tolerance(dtype, ref)
