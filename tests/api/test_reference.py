"""CPU tests of the float64 NumPy reference (cupyconv.reference) against SciPy and adjoint identities."""

import itertools
import zlib

import numpy as np
import pytest
from scipy import signal

from cupyconv import reference as ref
from cupyconv._core.geometry import ConvGeometry, transpose_output_spatial
from cupyconv._core.verify import scipy_conv


def seed(*parts):
    """Deterministic per-case seed (str hashes are randomized per process)."""
    return zlib.crc32(repr(parts).encode())


def rand(rng, shape):
    return rng.standard_normal(shape)


def to_nhwc(a):
    return np.moveaxis(a, 1, -1)


def to_nchw(a):
    return np.moveaxis(a, -1, 1)


# (x shape NCHW, w shape NCHW, stride, padding, dilation, groups)
FORWARD_CASES = {
    "1d-basic": ((2, 3, 11), (4, 3, 3), 1, 0, 1, 1),
    "1d-g2-s2-d2-asym": ((2, 4, 11), (6, 2, 3), 2, ((1, 2),), 2, 2),
    "1d-depthwise-s3-same": ((1, 3, 9), (3, 1, 4), 3, "same", 1, 3),
    "1d-same-lower-s2-even": ((1, 2, 10), (2, 2, 4), 2, "same_lower", 1, 1),
    "2d-s21-d12-asym": ((2, 3, 9, 7), (4, 3, 3, 2), (2, 1), ((2, 0), (1, 3)), (1, 2), 1),
    "2d-g2-s2-same-even": ((1, 4, 8, 9), (6, 2, 2, 4), 2, "same", 1, 2),
    "2d-same-lower-s2-even": ((2, 2, 7, 10), (3, 2, 4, 2), 2, "same_lower", 1, 1),
    "2d-same-s2-d2": ((1, 2, 9, 8), (2, 2, 3, 2), 2, "same", 2, 1),
    "2d-depthwise-s3-d2": ((1, 5, 13, 11), (5, 1, 3, 3), 3, 1, 2, 5),
    "2d-depthwise-mult2": ((1, 2, 7, 7), (4, 1, 3, 3), 1, 1, 1, 2),
    "2d-valid-s3": ((1, 3, 10, 11), (2, 3, 2, 3), 3, "valid", 1, 1),
    "2d-pointwise-s2": ((2, 4, 7, 5), (3, 4, 1, 1), 2, 0, 1, 1),
    "3d-mixed": ((1, 2, 5, 6, 7), (4, 2, 2, 3, 2), (1, 2, 3), ((1, 0), (0, 2), (1, 1)), (2, 1, 1), 1),
    "3d-g2-same-s2": ((2, 4, 5, 7, 6), (4, 2, 3, 2, 3), 2, "same", 1, 2),
    "3d-depthwise-same-lower": ((1, 3, 5, 4, 6), (3, 1, 2, 2, 2), 2, "same_lower", 1, 3),
}


@pytest.mark.parametrize("case", FORWARD_CASES.values(), ids=FORWARD_CASES.keys())
def test_forward_matches_scipy(case):
    xs, ws, stride, padding, dilation, groups = case
    rng = np.random.default_rng(seed(case))
    x, w = rand(rng, xs), rand(rng, ws)
    geom = ConvGeometry.from_shapes(xs, ws, stride=stride, padding=padding, dilation=dilation,
                                    groups=groups)
    expected = scipy_conv(x, w, geom)
    y = ref.conv(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    assert y.dtype == np.float64
    assert y.shape == geom.output_shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)

    # channels-last: same numbers, moved axes
    y_nhwc = ref.conv(to_nhwc(x), to_nhwc(w), stride=stride, padding=padding, dilation=dilation,
                      groups=groups, layout="NHWC")
    assert y_nhwc.shape == to_nhwc(expected).shape
    np.testing.assert_allclose(y_nhwc, to_nhwc(expected), rtol=1e-12, atol=1e-12)


def test_same_padding_output_is_ceil():
    rng = np.random.default_rng(1)
    for size, k, s in itertools.product((5, 6, 7), (2, 3, 4), (1, 2, 3)):
        x, w = rand(rng, (1, 1, size)), rand(rng, (1, 1, k))
        for mode in ("same", "same_lower"):
            assert ref.conv(x, w, stride=s, padding=mode).shape == (1, 1, -(-size // s))


def test_bias():
    rng = np.random.default_rng(2)
    x, w, b = rand(rng, (2, 4, 6, 5)), rand(rng, (6, 2, 3, 3)), rand(rng, 6)
    y0 = ref.conv(x, w, padding=1, groups=2)
    y = ref.conv(x, w, b, padding=1, groups=2)
    np.testing.assert_allclose(y, y0 + b[None, :, None, None], rtol=1e-14)
    y_nhwc = ref.conv(to_nhwc(x), to_nhwc(w), b, padding=1, groups=2, layout="NHWC")
    np.testing.assert_allclose(y_nhwc, to_nhwc(y), rtol=1e-14)
    with pytest.raises(ValueError, match="bias"):
        ref.conv(x, w, rand(rng, 5), padding=1, groups=2)
    with pytest.raises(ValueError, match="bias"):
        ref.conv(x, w, rand(rng, (1, 6)), padding=1, groups=2)


def test_hand_computed_examples():
    x = np.arange(1, 10, dtype=np.float64).reshape(1, 1, 3, 3)   # [[1,2,3],[4,5,6],[7,8,9]]
    w = np.array([[1.0, 2.0], [3.0, 4.0]]).reshape(1, 1, 2, 2)
    np.testing.assert_array_equal(ref.conv(x, w), [[[[37, 47], [67, 77]]]])
    # padding 1, stride 2: windows at padded (0,0), (0,2), (2,0), (2,2)
    np.testing.assert_array_equal(ref.conv(x, w, stride=2, padding=1), [[[[4, 18], [36, 77]]]])
    np.testing.assert_array_equal(ref.conv(x, w, np.array([10.0])), [[[[47, 57], [77, 87]]]])
    # 1-d dilation 2: y[i] = x[i] - x[i + 2]
    x1 = np.array([[[1.0, 2.0, 3.0, 4.0, 5.0]]])
    np.testing.assert_array_equal(ref.conv(x1, [[[1, -1]]], dilation=2), [[[-2, -2, -2]]])
    # backward data of stride 2: inputs no window reads get zero
    dx = ref.conv_backward_data([[[1.0, 2.0]]], [[[1.0]]], (1, 1, 4), stride=2)
    np.testing.assert_array_equal(dx, [[[1, 0, 2, 0]]])
    # transposed conv, stride 2: [1, 2] scattered with [1, 10, 100]
    xt, wt = np.array([[[1.0, 2.0]]]), np.array([[[1.0, 10.0, 100.0]]])
    np.testing.assert_array_equal(ref.conv_transpose(xt, wt, stride=2), [[[1, 10, 102, 20, 200]]])
    np.testing.assert_array_equal(ref.conv_transpose(xt, wt, stride=2, output_padding=1),
                                  [[[1, 10, 102, 20, 200, 0]]])
    np.testing.assert_array_equal(ref.conv_transpose(xt, wt, stride=2, padding=1, output_padding=1),
                                  [[[10, 102, 20, 200]]])


def test_accepts_lists_ints_and_get():
    class FakeCupy:
        def __init__(self, a):
            self.a = a

        def get(self):
            return self.a

    rng = np.random.default_rng(3)
    x, w = rand(rng, (1, 2, 5, 5)), rand(rng, (3, 2, 2, 2))
    expected = ref.conv(x, w)
    np.testing.assert_array_equal(ref.conv(FakeCupy(x), FakeCupy(w)), expected)
    np.testing.assert_allclose(ref.conv(x.astype(np.float32).tolist(), w.astype(np.float32)),
                               ref.conv(x.astype(np.float32), w.astype(np.float32)))
    assert ref.conv(np.ones((1, 1, 3), dtype=np.int32), np.ones((1, 1, 2), dtype=np.int64)).dtype \
        == np.float64
    assert ref.conv(x + 1j, w).dtype == np.complex128  # complex: see test_reference_complex.py
    with pytest.raises(TypeError, match="numeric"):
        ref.conv(np.full(x.shape, "a"), w)


def test_shape_errors():
    rng = np.random.default_rng(4)
    x, w = rand(rng, (2, 4, 6, 6)), rand(rng, (6, 2, 3, 3))
    with pytest.raises(ValueError, match="groups"):
        ref.conv(x, w, groups=3)
    with pytest.raises(ValueError, match="dy"):
        ref.conv_backward_data(rand(rng, (2, 6, 5, 4)), w, x.shape, groups=2)
    with pytest.raises(ValueError, match="dy"):
        ref.conv_backward_weight(x, rand(rng, (2, 5, 4, 4)), w.shape, groups=2)
    with pytest.raises(ValueError, match="weight"):
        ref.conv_backward_weight(x, rand(rng, (2, 6, 4, 4)), (6, 4, 3, 3), groups=2)


# (x shape NCHW, w shape NCHW, stride, padding, dilation, groups)
ADJOINT_CASES = {
    "1d-s3-k2-stride>kernel": ((2, 3, 13), (4, 3, 2), 3, 0, 1, 1),
    "1d-s2-d3-asym": ((1, 4, 17), (2, 2, 3), 2, ((2, 1),), 3, 2),
    "1d-same-lower": ((2, 2, 9), (3, 2, 4), 2, "same_lower", 1, 1),
    "2d-s3-k1": ((2, 3, 8, 7), (5, 3, 1, 1), 3, 0, 1, 1),
    "2d-s4-k3-stride>kernel": ((1, 2, 11, 10), (3, 2, 3, 2), (4, 3), 1, 1, 1),
    "2d-d2-s2-g2": ((2, 4, 11, 9), (6, 2, 3, 3), 2, ((1, 2), (0, 3)), 2, 2),
    "2d-depthwise-same": ((1, 6, 9, 8), (6, 1, 4, 3), 2, "same", (1, 2), 6),
    "2d-asym-only": ((1, 3, 6, 5), (2, 3, 3, 3), 1, ((0, 2), (3, 1)), 1, 1),
    "3d-s2-d2-g2": ((1, 4, 7, 6, 8), (4, 2, 2, 3, 2), 2, ((1, 0), (0, 1), (2, 1)), (2, 1, 2), 2),
    "3d-same-s3": ((2, 2, 7, 5, 6), (3, 2, 2, 2, 3), 3, "same", 1, 1),
}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", ADJOINT_CASES.values(), ids=ADJOINT_CASES.keys())
def test_adjoint_identity(case, layout):
    xs, ws, stride, padding, dilation, groups = case
    geom = ConvGeometry.from_shapes(xs, ws, stride=stride, padding=padding, dilation=dilation,
                                    groups=groups)
    rng = np.random.default_rng(seed(case, layout))
    x, w, dy = rand(rng, xs), rand(rng, ws), rand(rng, geom.output_shape)
    if layout == "NHWC":
        x, w, dy = to_nhwc(x), to_nhwc(w), to_nhwc(dy)
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups, layout=layout)
    y = ref.conv(x, w, **kw)
    dx = ref.conv_backward_data(dy, w, x.shape, **kw)
    dw = ref.conv_backward_weight(x, dy, w.shape, **kw)
    assert y.shape == dy.shape and dx.shape == x.shape and dw.shape == w.shape
    lhs = np.vdot(y, dy)
    np.testing.assert_allclose(np.vdot(x, dx), lhs, rtol=1e-10)
    np.testing.assert_allclose(np.vdot(w, dw), lhs, rtol=1e-10)


def test_backward_data_unreached_inputs_are_zero():
    # stride 3 > kernel 2: every third input element is read by no window
    rng = np.random.default_rng(5)
    dy, w = rand(rng, (1, 2, 4)), rand(rng, (2, 3, 2))
    dx = ref.conv_backward_data(dy, w, (1, 3, 12), stride=3)
    assert np.all(dx[..., 2::3] == 0)
    assert np.all(dx[..., 0::3] != 0) and np.all(dx[..., 1::3] != 0)


def test_backward_weight_matches_finite_sum():
    # dw[k, c, t] = sum_{n, o} dy[n, k, o] * x_padded[n, c, o * s + t * d]
    rng = np.random.default_rng(6)
    x, dy = rand(rng, (2, 3, 10)), rand(rng, (2, 2, 4))
    dw = ref.conv_backward_weight(x, dy, (2, 3, 3), stride=2, padding=((1, 0),), dilation=2)
    xp = np.pad(x, [(0, 0), (0, 0), (1, 0)])
    expected = np.zeros((2, 3, 3))
    for k, c, t, b, o in itertools.product(range(2), range(3), range(3), range(2), range(4)):
        expected[k, c, t] += dy[b, k, o] * xp[b, c, o * 2 + t * 2]
    np.testing.assert_allclose(dw, expected, rtol=1e-12)


# ---------------------------------------------------------------------------- conv_transpose
def transpose_direct(x, w, stride, pad_lo, dilation, groups, out_spatial):
    """Per-element scatter with bounds checks: y[n, o, i*s + t*d - lo] += x[n, c, i] * w[c, o', t]."""
    n, cin = x.shape[:2]
    cog = w.shape[1]
    cig = cin // groups
    y = np.zeros((n, cog * groups) + tuple(out_spatial))
    for i in np.ndindex(*x.shape[2:]):
        for t in np.ndindex(*w.shape[2:]):
            pos = tuple(a * s + b * d - lo for a, b, s, d, lo in zip(i, t, stride, dilation, pad_lo))
            if all(0 <= p < o for p, o in zip(pos, out_spatial)):
                for g in range(groups):
                    xs = x[(slice(None), slice(g * cig, (g + 1) * cig)) + i]           # (n, cig)
                    ws = w[(slice(g * cig, (g + 1) * cig), slice(None)) + t]           # (cig, cog)
                    y[(slice(None), slice(g * cog, (g + 1) * cog)) + pos] += xs @ ws
    return y


# (x shape NCHW (N, C_in, ...), w shape (C_in, C_out/g, ...), stride, padding, output_padding,
#  dilation, groups)
TRANSPOSE_CASES = {
    "1d-s2": ((2, 3, 5), (3, 2, 3), 2, 0, 0, 1, 1),
    "1d-s3-op2-asym": ((1, 4, 4), (4, 3, 2), 3, ((1, 2),), 2, 1, 2),
    "1d-d3-op2": ((1, 2, 6), (2, 2, 3), 1, 1, 2, 3, 1),
    "2d-s2-p1-op1": ((2, 4, 4, 5), (4, 3, 3, 3), 2, 1, 1, 1, 1),
    "2d-g2-d2-s2": ((1, 4, 5, 4), (4, 2, 3, 2), 2, ((2, 1), (0, 1)), (1, 0), 2, 2),
    "2d-depthwise-s3": ((1, 3, 4, 4), (3, 1, 2, 4), (3, 2), ((0, 1), (2, 0)), (2, 1), 1, 3),
    "3d-s2-op1": ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), 2, ((1, 0), (0, 1), (1, 1)), (1, 0, 1), 1, 1),
    "3d-g2-d2": ((1, 4, 3, 3, 4), (4, 1, 2, 2, 3), (1, 2, 1), 1, 0, (2, 1, 1), 2),
}


@pytest.mark.parametrize("case", TRANSPOSE_CASES.values(), ids=TRANSPOSE_CASES.keys())
def test_conv_transpose(case):
    xs, ws, stride, padding, op, dilation, groups = case
    rng = np.random.default_rng(seed(case))
    x, w = rand(rng, xs), rand(rng, ws)
    nsp = len(xs) - 2
    per = lambda v: v if isinstance(v, tuple) else (v,) * nsp  # noqa: E731
    pads = padding if isinstance(padding, tuple) else ((padding, padding),) * nsp
    lo, hi = tuple(p[0] for p in pads), tuple(p[1] for p in pads)
    out_spatial = transpose_output_spatial(xs[2:], ws[2:], per(stride), per(dilation), lo, hi,
                                           per(op))
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    y = ref.conv_transpose(x, w, output_padding=op, **kw)
    assert y.shape == (xs[0], ws[1] * groups) + out_spatial
    np.testing.assert_allclose(
        y, transpose_direct(x, w, per(stride), lo, per(dilation), groups, out_spatial),
        rtol=1e-12, atol=1e-12)

    # output_padding 0 is backward-data of the forward conv whose output has x's shape
    y0 = ref.conv_transpose(x, w, **kw)
    fwd_in = y0.shape
    np.testing.assert_allclose(y0, ref.conv_backward_data(x, w, fwd_in, **kw), rtol=1e-12,
                               atol=1e-12)
    # output_padding only appends elements; the overlap is identical
    np.testing.assert_array_equal(y[tuple(slice(0, s) for s in y0.shape)], y0)

    # channels-last and bias
    b = rand(rng, y.shape[1])
    y_nhwc = ref.conv_transpose(to_nhwc(x), to_nhwc(w), b, output_padding=op, layout="NHWC", **kw)
    np.testing.assert_allclose(y_nhwc, to_nhwc(y + b.reshape((1, -1) + (1,) * nsp)), rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("spatial,kernel", [((7,), (3,)), ((5, 4), (3, 2)), ((3, 4, 2), (2, 3, 2))])
def test_conv_transpose_is_full_convolution(spatial, kernel):
    rng = np.random.default_rng(7)
    x, w = rand(rng, (2, 3) + spatial), rand(rng, (3, 2) + kernel)
    y = ref.conv_transpose(x, w)
    expected = np.array([[sum(signal.convolve(x[n, c], w[c, o], mode="full") for c in range(3))
                          for o in range(2)] for n in range(2)])
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)


def test_conv_transpose_errors():
    rng = np.random.default_rng(8)
    x, w = rand(rng, (1, 2, 4, 4)), rand(rng, (2, 3, 3, 3))
    with pytest.raises(ValueError, match="output_padding"):
        ref.conv_transpose(x, w, stride=2, output_padding=2)
    with pytest.raises(ValueError, match="output_padding"):
        ref.conv_transpose(x, w, stride=1, output_padding=1)
    with pytest.raises(ValueError, match="output_padding"):
        ref.conv_transpose(x, w, stride=2, output_padding=-1)
    with pytest.raises(ValueError, match="padding.*string"):
        ref.conv_transpose(x, w, padding="same")
    with pytest.raises(ValueError, match="bias"):
        ref.conv_transpose(x, w, rand(rng, 2))
    with pytest.raises(ValueError, match="x must have shape"):
        ref.conv_transpose(rand(rng, (1, 3, 4, 4)), w)
    with pytest.raises(ValueError, match="padding"):
        ref.conv_transpose(x, w, padding=3)
    with pytest.raises(ValueError, match="groups"):
        ref.conv_transpose(x, w, groups=3)


UNGROUPED = {k: v for k, v in FORWARD_CASES.items() if v[5] == 1}  # im2col itself knows no groups


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", UNGROUPED.values(), ids=UNGROUPED.keys())
def test_im2col_times_weight_is_the_convolution(case, layout):
    xs, ws, stride, padding, dilation, _ = case
    rng = np.random.default_rng(seed(case, layout))
    x, w = rand(rng, xs), rand(rng, ws)
    if layout == "NHWC":
        x, w = to_nhwc(x), to_nhwc(w)
    opts = dict(stride=stride, padding=padding, dilation=dilation, layout=layout)
    y = ref.conv(x, w, **opts)
    col = ref.im2col(x, ws[2:], **opts)
    geom = ConvGeometry.from_shapes(x.shape, w.shape, **opts)
    assert col.shape == geom.col_shape
    w2 = w.reshape(w.shape[0], -1)
    prod = (w2 @ col) if layout == "NCHW" else (col @ w2.T)
    np.testing.assert_allclose(prod.reshape(y.shape), y, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", UNGROUPED.values(), ids=UNGROUPED.keys())
def test_col2im_is_the_adjoint_of_im2col(case, layout):
    xs, ws, stride, padding, dilation, _ = case
    rng = np.random.default_rng(seed("col2im", case, layout))
    x = rand(rng, xs)
    if layout == "NHWC":
        x = to_nhwc(x)
    opts = dict(stride=stride, padding=padding, dilation=dilation, layout=layout)
    col = ref.im2col(x, ws[2:], **opts)
    c = rand(rng, col.shape)
    back = ref.col2im(c, x.shape, ws[2:], **opts)
    assert back.shape == x.shape
    np.testing.assert_allclose(np.vdot(col, c), np.vdot(x, back), rtol=1e-10)
