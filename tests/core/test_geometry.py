"""CPU tests of ConvGeometry and the shape rules in cupyconv._core.geometry (no GPU)."""

import itertools
import math

import numpy as np
import pytest

from cupyconv._core.geometry import (ConvGeometry, GemmShape, effective_kernel, normalize_output_padding,
                                normalize_padding, output_shape, transpose_output_spatial)


def geom(x, w, **kw):
    return ConvGeometry.from_shapes(x, w, **kw)


# ------------------------------------------------------------------------------------ output shapes
@pytest.mark.parametrize("x,w,kw,expected", [
    ((32, 3, 224, 224), (64, 3, 7, 7), dict(stride=2, padding=3), (32, 64, 112, 112)),  # ResNet conv1
    ((32, 224, 224, 3), (64, 7, 7, 3), dict(stride=2, padding=3, layout="NHWC"), (32, 112, 112, 64)),
    ((8, 64, 56, 56), (64, 64, 3, 3), dict(padding=1), (8, 64, 56, 56)),
    ((8, 64, 56, 56), (128, 64, 1, 1), dict(stride=2), (8, 128, 28, 28)),
    ((8, 64, 56, 56), (128, 64, 1, 1), dict(stride=2, layout="nchw"), (8, 128, 28, 28)),
    ((1, 32, 112, 112), (32, 1, 3, 3), dict(padding=1, groups=32), (1, 32, 112, 112)),  # depthwise
    ((2, 8, 10, 12), (12, 4, 3, 3), dict(stride=2, padding=1, groups=2), (2, 12, 5, 6)),
    ((1, 3, 9, 7), (4, 3, 3, 2), dict(stride=(2, 1), padding=((2, 0), (1, 3)), dilation=(1, 2)),
     (1, 4, 5, 9)),
    ((1, 3, 9, 7), (4, 3, 3, 2), dict(padding=[1, 2]), (1, 4, 9, 10)),
    ((1, 3, 9, 7), (4, 3, 3, 2), dict(padding="valid"), (1, 4, 7, 6)),
    ((1, 3, 10, 10), (4, 3, 3, 3), dict(dilation=2), (1, 4, 6, 6)),
    ((1, 3, 10, 10), (4, 3, 3, 3), dict(dilation=4, padding=2), (1, 4, 6, 6)),
    ((1, 3, 5, 5), (2, 3, 5, 5), {}, (1, 2, 1, 1)),   # kernel == input
    ((1, 1, 1, 1), (1, 1, 3, 3), dict(padding=1), (1, 1, 1, 1)),
    ((1, 1, 7, 7), (1, 1, 2, 2), dict(stride=5), (1, 1, 2, 2)),   # stride > kernel
    # 1-D
    ((4, 16, 100), (32, 16, 5), dict(stride=2, padding=2), (4, 32, 50)),
    ((4, 100, 16), (32, 5, 16), dict(stride=2, padding=2, layout="NHWC"), (4, 50, 32)),
    ((1, 2, 11), (4, 1, 3), dict(dilation=3, padding=((0, 1),), groups=2), (1, 4, 6)),
    # 3-D
    ((2, 3, 16, 32, 32), (8, 3, 3, 3, 3), dict(padding=1), (2, 8, 16, 32, 32)),
    ((2, 16, 32, 32, 3), (8, 3, 3, 3, 3), dict(padding=1, layout="NHWC"), (2, 16, 32, 32, 8)),
    ((1, 4, 8, 9, 10), (6, 2, 2, 3, 4), dict(stride=(1, 2, 3), groups=2), (1, 6, 7, 4, 3)),
])
def test_output_shape(x, w, kw, expected):
    assert output_shape(x, w, **kw) == expected
    g = geom(x, w, **kw)
    assert g.output_shape == expected
    assert g.input_shape == tuple(x) and g.weight_shape == tuple(w)


def test_output_shape_accepts_numpy_ints_and_lists():
    assert output_shape([1, 3, 9, 9], [2, 3, 3, 3], stride=np.int64(2), padding=(np.int32(1), 1)) \
        == (1, 2, 5, 5)
    g = geom((1, 3, 9, 9), (2, 3, 3, 3), stride=np.int64(2))
    assert g.stride == (2, 2) and all(type(s) is int for s in g.stride)


def test_fields_and_channels_last():
    g = geom((2, 10, 12, 8), (12, 3, 3, 4), stride=(2, 1), padding=((1, 0), (2, 2)), groups=2,
             layout="NHWC", dtype="float32")
    assert (g.batch, g.in_channels, g.out_channels, g.groups) == (2, 8, 12, 2)
    assert g.spatial == (10, 12) and g.kernel == (3, 3) and g.ndim == 2
    assert g.pad_lo == (1, 2) and g.pad_hi == (0, 2) and g.padded_spatial == (11, 16)
    assert g.out_spatial == (5, 14) and g.output_shape == (2, 5, 14, 12)
    assert g.channels_last and g.dtype == "float32"
    assert not geom((2, 8, 10, 12), (12, 4, 3, 3), groups=2).channels_last


# ------------------------------------------------------------------------------------ "same" padding
@pytest.mark.parametrize("stride", [1, 2, 3])
@pytest.mark.parametrize("dilation", [1, 2])
def test_same_padding(stride, dilation):
    for size, k in itertools.product(range(1, 12), range(1, 7)):
        ek = (k - 1) * dilation + 1
        want = -(-size // stride)
        same = geom((1, 1, size), (1, 1, k), stride=stride, padding="same", dilation=dilation)
        lower = geom((1, 1, size), (1, 1, k), stride=stride, padding="same_lower", dilation=dilation)
        assert same.out_spatial == lower.out_spatial == (want,), (size, k)
        total = max((want - 1) * stride + ek - size, 0)   # the least padding giving that output
        (lo,), (hi,) = same.pad_lo, same.pad_hi
        assert lo + hi == total and hi - lo == total % 2            # extra element at the end
        assert lower.pad_lo == same.pad_hi and lower.pad_hi == same.pad_lo   # ... at the start
        # 2-D and 3-D resolve each dim on its own
        g2 = geom((1, 1, size, 5), (1, 1, k, 2), stride=stride, padding="SAME", dilation=dilation)
        assert g2.out_spatial[0] == want and g2.pad_lo[0] == lo and g2.pad_hi[0] == hi


def test_same_padding_examples():
    # TensorFlow: input 7, kernel 4, stride 2 -> out 4, total pad 3 -> (1, 2); SAME_LOWER -> (2, 1)
    assert normalize_padding("same", (7,), (4,), (2,), (1,)) == ((1,), (2,))
    assert normalize_padding("same_lower", (7,), (4,), (2,), (1,)) == ((2,), (1,))
    assert normalize_padding("valid", (7, 3), (4, 1), (2, 1), (1, 1)) == ((0, 0), (0, 0))
    g = geom((1, 2, 7, 10, 5), (3, 2, 4, 2, 3), stride=2, padding="same")
    assert g.out_spatial == (4, 5, 3) and g.pad_lo == (1, 0, 1) and g.pad_hi == (2, 0, 1)


def test_normalize_padding_forms():
    args = ((5, 6), (3, 3), (1, 1), (1, 1))
    assert normalize_padding(2, *args) == ((2, 2), (2, 2))
    assert normalize_padding((1, 2), *args) == ((1, 2), (1, 2))
    assert normalize_padding(((1, 0), (0, 3)), *args) == ((1, 0), (0, 3))
    assert normalize_padding([[1, 0], 2], *args) == ((1, 2), (0, 2))


def test_effective_kernel_and_transpose_output():
    assert effective_kernel((3, 1, 4), (2, 5, 1)) == (5, 1, 4)
    # PyTorch ConvTranspose2d(k=3, s=2, p=1, output_padding=1): 4 -> 8
    assert transpose_output_spatial((4,), (3,), (2,), (1,), (1,), (1,), (1,)) == (8,)
    assert transpose_output_spatial((5, 3), (4, 2), (3, 1), (2, 1), (1, 0), (2, 0), (0, 0)) == (16, 4)
    assert normalize_output_padding(1, (2, 2), (1, 1)) == (1, 1)
    assert normalize_output_padding((0, 1), (1, 1), (1, 2)) == (0, 1)


# ------------------------------------------------------------------------------------ GEMM and cost
def test_gemm_mappings_grouped():
    g = geom((2, 8, 10, 12), (12, 4, 3, 3), stride=2, padding=1, groups=2)
    assert g.out_spatial == (5, 6)
    assert g.gemm_forward == GemmShape(m=2 * 30, n=6, k=4 * 9, batch=2)
    assert g.gemm_backward_data == GemmShape(m=2 * 120, n=4, k=6 * 9, batch=2)
    assert g.gemm_backward_weight == GemmShape(m=6, n=4 * 9, k=2 * 30, batch=2)
    assert g.flops == 2 * 60 * 6 * 36 * 2
    assert g.bytes_moved(4) == 4 * (2 * 8 * 120 + 12 * 4 * 9 + 2 * 12 * 30)
    assert g.bytes_moved(2) * 2 == g.bytes_moved(4)
    h = geom((2, 10, 12, 8), (12, 3, 3, 4), stride=2, padding=1, groups=2, layout="NHWC")
    assert (h.gemm_forward, h.gemm_backward_data, h.gemm_backward_weight, h.flops) == \
        (g.gemm_forward, g.gemm_backward_data, g.gemm_backward_weight, g.flops)
    assert h.bytes_moved(4) == g.bytes_moved(4)


def test_flops_resnet_conv1():
    g = geom((32, 3, 224, 224), (64, 3, 7, 7), stride=2, padding=3)
    assert g.flops == 2 * 32 * 112 * 112 * 64 * 3 * 49
    # forward and backward-weight do the same multiply-adds (stride 1: backward-data does too)
    assert 2 * math.prod(g.gemm_backward_weight) == g.flops
    s1 = geom((2, 6, 9, 9), (4, 3, 3, 3), padding=1, groups=2)
    assert 2 * math.prod(s1.gemm_backward_data) == 2 * math.prod(s1.gemm_backward_weight) == s1.flops


# ------------------------------------------------------------------------------------ hashing, as_3d
def test_hashable_and_equality():
    a = geom((1, 3, 9, 9), (4, 3, 3, 3), stride=2, padding=1)
    b = geom([1, 3, 9, 9], [4, 3, 3, 3], stride=(2, 2), padding=((1, 1), (1, 1)), layout="nchw")
    c = geom((1, 9, 9, 3), (4, 3, 3, 3), stride=2, padding=1, layout="NHWC")
    assert a == b and hash(a) == hash(b)
    assert a != c
    cache = {a: "plan-a"}
    assert cache[b] == "plan-a" and c not in cache
    assert len({a, b, c}) == 2
    # "same" and the explicit padding it resolves to describe one problem
    s = geom((1, 3, 9, 9), (4, 3, 3, 3), padding="same")
    assert s == geom((1, 3, 9, 9), (4, 3, 3, 3), padding=1)
    with pytest.raises(AttributeError):
        a.batch = 2


def test_as_3d():
    g = geom((2, 3, 9, 7), (4, 3, 3, 2), stride=(2, 1), padding=((2, 0), (1, 3)), dilation=(1, 2))
    assert g.as_3d() == {"spatial": (1, 9, 7), "out_spatial": (1, 5, 9), "kernel": (1, 3, 2),
                         "stride": (1, 2, 1), "dilation": (1, 1, 2), "pad_lo": (0, 2, 1)}
    g1 = geom((1, 2, 11), (4, 2, 3), stride=2, padding=1)
    assert g1.as_3d() == {"spatial": (1, 1, 11), "out_spatial": (1, 1, 6), "kernel": (1, 1, 3),
                          "stride": (1, 1, 2), "dilation": (1, 1, 1), "pad_lo": (0, 0, 1)}
    g3 = geom((1, 5, 6, 7, 2), (3, 2, 2, 2, 2), padding=1, layout="NHWC")
    assert g3.as_3d()["spatial"] == (5, 6, 7) and g3.as_3d()["out_spatial"] == g3.out_spatial


# ------------------------------------------------------------------------------------ validation
X, W = (1, 4, 8, 8), (8, 4, 3, 3)


@pytest.mark.parametrize("x,w,kw,exc,match", [
    # sizes
    ((0, 4, 8, 8), W, {}, ValueError, "input_shape"),
    ((1, 4, -8, 8), W, {}, ValueError, "input_shape"),
    (X, (8, 4, 0, 3), {}, ValueError, "weight_shape"),
    (X, (-8, 4, 3, 3), {}, ValueError, "weight_shape"),
    ((1, 4, 8.0, 8), W, {}, TypeError, "input_shape"),
    ("1, 4, 8, 8", W, {}, TypeError, "input_shape"),
    # stride, dilation
    (X, W, dict(stride=0), ValueError, "stride"),
    (X, W, dict(stride=(1, -2)), ValueError, "stride"),
    (X, W, dict(dilation=0), ValueError, "dilation"),
    (X, W, dict(dilation=(-1, 1)), ValueError, "dilation"),
    (X, W, dict(stride=(1, 2, 1)), ValueError, "stride must be an int or a sequence of 2"),
    (X, W, dict(stride=1.0), TypeError, "stride"),
    (X, W, dict(stride=(2, 2.5)), TypeError, "stride"),
    (X, W, dict(dilation=True), TypeError, "dilation"),
    # padding
    (X, W, dict(padding=-1), ValueError, "padding must be >= 0"),
    (X, W, dict(padding=((0, -1), (1, 1))), ValueError, "padding must be >= 0"),
    (X, W, dict(padding=(1, 1, 1)), ValueError, "padding must have one entry per spatial dim"),
    (X, W, dict(padding=((1, 1, 1), (1, 1))), ValueError, "padding pair"),
    (X, W, dict(padding=((1,), (1, 1))), ValueError, "padding pair"),
    (X, W, dict(padding="full"), ValueError, "padding must be"),
    (X, W, dict(padding=1.5), TypeError, "padding"),
    # kernel larger than padded input
    ((1, 4, 3, 8), W, dict(padding=((0, 0), (1, 1)), dilation=(2, 1)), ValueError,
     "kernel .*larger than the padded input"),
    ((1, 1, 3, 3), (1, 1, 5, 5), {}, ValueError, "kernel .*larger than the padded input"),
    ((1, 1, 3, 3), (1, 1, 5, 5), dict(padding=((1, 0), (1, 1))), ValueError, "spatial dim 0"),
    # groups and channels
    ((1, 3, 8, 8), (4, 1, 3, 3), dict(groups=2), ValueError, r"input channels \(3\).*groups"),
    ((1, 4, 8, 8), (3, 2, 3, 3), dict(groups=2), ValueError, r"output channels \(3.*groups"),
    (X, W, dict(groups=0), ValueError, "groups must be >= 1"),
    (X, W, dict(groups=True), TypeError, "groups"),
    (X, W, dict(groups=2.0), TypeError, "groups"),
    (X, (8, 2, 3, 3), {}, ValueError, "weight shape .* does not fit layout NCHW"),
    # NHWC weight (K, kh, kw, C) given to an NCHW problem, and NCHW weight to an NHWC problem
    (X, (8, 3, 3, 4), {}, ValueError, "weight shape .* does not fit layout NCHW: dim 1"),
    ((1, 8, 8, 4), (8, 4, 3, 3), dict(layout="NHWC"), ValueError,
     "weight shape .* does not fit layout NHWC: the last dim"),
    # dims
    ((1, 4, 8), (8, 4, 3), dict(ndim=2), ValueError, "expected a 4-d input .* 2-d convolution"),
    (X, W, dict(ndim=3), ValueError, "expected a 5-d input"),
    ((1, 4), (8, 4), {}, ValueError, "input must have 3, 4 or 5 dims"),
    ((1, 4, 2, 2, 2, 2), (8, 4, 1, 1, 1, 1), {}, ValueError, "input must have 3, 4 or 5 dims"),
    (X, (8, 4, 3), {}, ValueError, "weight must have as many dims as the input"),
    (X, (8, 4, 3, 3, 3), {}, ValueError, "weight must have as many dims as the input"),
    # layout
    (X, W, dict(layout="NCWH"), ValueError, "layout must be one of"),
    (X, W, dict(layout=None), ValueError, "layout"),
])
def test_validation_errors(x, w, kw, exc, match):
    with pytest.raises(exc, match=match):
        ConvGeometry.from_shapes(x, w, **kw)


def test_output_shape_validates():
    with pytest.raises(ValueError, match="groups"):
        output_shape((1, 3, 8, 8), (4, 1, 3, 3), groups=2)
    with pytest.raises(ValueError, match="layout"):
        output_shape(X, W, layout="CHWN")


@pytest.mark.parametrize("op,stride,dilation,exc,match", [
    (2, (2, 2), (1, 1), ValueError, "output_padding must be smaller than stride or dilation"),
    ((0, 1), (2, 1), (1, 1), ValueError, "output_padding must be smaller"),
    ((1, 2), (2, 1), (1, 2), ValueError, "output_padding must be smaller"),
    (-1, (2, 2), (1, 1), ValueError, "output_padding must be >= 0"),
    ((1, 1, 1), (2, 2), (1, 1), ValueError, "output_padding must be an int or a sequence of 2"),
    (0.5, (2, 2), (1, 1), TypeError, "output_padding"),
])
def test_output_padding_errors(op, stride, dilation, exc, match):
    with pytest.raises(exc, match=match):
        normalize_output_padding(op, stride, dilation)


# ------------------------------------------------------------------------------ size limits
# Kernels take every single extent as a 32-bit int: each must be < 2**31 (a clean ValueError
# naming the argument, never numpy's OverflowError at launch); no tensor over 2**48 bytes.
BIG = 2 ** 31
X, W = (1, 1, 10, 10), (1, 1, 3, 3)


@pytest.mark.parametrize("x,w,kw,match", [
    (X, W, dict(stride=BIG), r"stride must be < 2\*\*31"),
    (X, W, dict(stride=(1, BIG)), r"stride must be < 2\*\*31"),
    (X, W, dict(stride=2 ** 63), r"stride must be < 2\*\*31"),
    (X, W, dict(dilation=BIG), r"dilation must be < 2\*\*31"),
    (X, W, dict(padding=BIG), r"padding must be < 2\*\*31"),
    (X, W, dict(padding=2 ** 40), r"padding must be < 2\*\*31"),
    (X, W, dict(padding=((0, BIG), (0, 0))), r"padding must be < 2\*\*31.*hi="),
    (X, W, dict(padding=BIG - 1), r"padded input extent .* must be < 2\*\*31"),
    (X, W, dict(padding=2 ** 30), r"padded input extent .* must be < 2\*\*31"),
    (X, W, dict(dilation=2 ** 30), r"dilated kernel extent .* must be < 2\*\*31"),
    (X, W, dict(dilation=BIG - 1), r"dilated kernel extent .* must be < 2\*\*31"),
    ((BIG, 1, 1, 1), (1, 1, 1, 1), {}, r"input_shape .* must be < 2\*\*31"),
    ((1, BIG, 1, 1), (1, BIG, 1, 1), {}, r"input_shape .* must be < 2\*\*31"),
    ((1, 1, BIG, 1), (1, 1, 1, 1), {}, r"input_shape .* must be < 2\*\*31"),
    ((1, 1, 2 ** 40), (1, 1, 1), {}, r"input_shape .* must be < 2\*\*31"),
    ((1, 1, 4, 4), (BIG, 1, 1, 1), {}, r"weight_shape .* must be < 2\*\*31"),
    ((1, 1, 4, 4), (1, 1, 1, BIG), dict(padding=((0, 0), (0, BIG))), r"must be < 2\*\*31"),
    ((1, 4, 4, 4), (4, 1, 1, 1), dict(groups=BIG), r"groups must be < 2\*\*31"),
    ((1, 1, 10, 10), (1, 1, 3, 3), dict(stride=BIG, padding="same"), r"stride must be < 2\*\*31"),
])
def test_every_extent_beyond_32_bits_is_a_named_value_error(x, w, kw, match):
    with pytest.raises(ValueError, match=match):
        output_shape(x, w, **kw)
    with pytest.raises(ValueError, match=match):
        ConvGeometry.from_shapes(x, w, dtype="float32", **kw)


def test_extents_just_below_the_limit_are_accepted_and_fit_int32_arguments():
    from cupyconv._core.launch import spatial_args

    edge = BIG - 1
    assert output_shape(X, W, stride=edge) == (1, 1, 1, 1)
    assert output_shape(X, W, stride=(edge, 1), padding=[(0, edge - 10), 0]) == (1, 1, 1, 8)
    g = ConvGeometry.from_shapes((1, 1, edge - 2, 1), (1, 1, edge - 2, 1), dtype="float16")
    assert g.output_shape == (1, 1, 1, 1)
    g = ConvGeometry.from_shapes(X, W, stride=edge, dilation=(1, 2 ** 29),
                                 padding=((0, 0), (0, 2 ** 30)), dtype="float32")
    for v in spatial_args(g):  # the kernel-argument packing converts without OverflowError
        assert np.iinfo(np.int32).min <= int(v) <= np.iinfo(np.int32).max


@pytest.mark.parametrize("x,w,dtype,match", [
    ((2 ** 30, 1, 2 ** 15, 2 ** 15), (1, 1, 1, 1), None, r"the input .* limit of 2\*\*48 elements"),
    ((2 ** 22, 1, 2 ** 12, 2 ** 12), (1, 1, 1, 1), "float64", r"the input .* 2\*\*48 bytes"),
    ((2 ** 20, 1, 2 ** 12, 2 ** 12), (1, 1, 1, 1), "float64", None),  # 2**47 bytes: allowed
    ((1, 1, 2 ** 14, 2 ** 14), (2 ** 30, 1, 1, 1), "float32", r"the output .* 2\*\*48 bytes"),
    ((1, 2 ** 20, 32, 32), (2 ** 20, 2 ** 20, 32, 32), "float16", r"the weight .* 2\*\*48 bytes"),
    ((2 ** 30, 2 ** 30, 2 ** 30), (2 ** 30, 2 ** 30, 1), None, r"the input .* 2\*\*48"),
])
def test_tensors_beyond_2_48_bytes_are_refused(x, w, dtype, match):
    if match is None:
        assert ConvGeometry.from_shapes(x, w, dtype=dtype).output_shape == x
        return
    with pytest.raises(ValueError, match=match):
        ConvGeometry.from_shapes(x, w, dtype=dtype)


def test_transposed_output_size_is_limited():
    ones = (1, 1)
    # (in - 1) * stride + ...: 2**10 inputs at stride 2**30 would give 2**40 outputs
    with pytest.raises(ValueError, match=r"transposed convolution's output size .* < 2\*\*31"):
        transpose_output_spatial((2 ** 10, 1), (3, 3), (2 ** 30, 1), ones, (0, 0), (0, 0), (0, 0))
    with pytest.raises(ValueError, match=r"transposed convolution's output size"):
        transpose_output_spatial((2,), (BIG - 1,), (BIG - 1,), (1,), (0,), (0,), (0,))
    # a 1x1 input never moves by the stride: any stride below the limit gives a kernel-sized output
    assert transpose_output_spatial((1, 1), (3, 3), (BIG - 1,) * 2, ones, (0, 0), (0, 0),
                                    (0, 0)) == (3, 3)
    with pytest.raises(ValueError, match=r"output_padding must be < 2\*\*31"):
        normalize_output_padding(BIG, (BIG - 1,), (1,))


def test_reference_conv_transpose_names_the_limit():
    from cupyconv import reference

    x, w = np.ones((1, 1, 1, 1)), np.ones((1, 1, 1, 1))
    with pytest.raises(ValueError, match=r"stride must be < 2\*\*31"):
        reference.conv_transpose(x, w, stride=BIG)
    assert reference.conv_transpose(x, w, stride=BIG - 1).shape == (1, 1, 1, 1)
    with pytest.raises(ValueError, match=r"padding must be < 2\*\*31"):
        reference.conv_transpose(x, w, padding=2 ** 40)
    with pytest.raises(ValueError, match=r"output size"):
        reference.conv_transpose(np.ones((1, 1, 4, 1)), w, stride=(2 ** 30, 1))


def test_gemm_and_tensor_size_helpers():
    from cupyconv._core.limits import check_matrix_product, check_tensor_size

    check_matrix_product(BIG - 1, 1, 1, None, "float32")
    for m, n, k, batch, match in ((BIG, 1, 1, None, "m"), (1, BIG, 1, None, "n"),
                                  (1, 1, BIG, None, "k"), (1, 1, 1, BIG, "batch"),
                                  (2 ** 25, 2 ** 25, 1, None, "2\\*\\*48 bytes")):
        with pytest.raises(ValueError, match=f"gemm: .*{match}"):
            check_matrix_product(m, n, k, batch, "float32")
    check_tensor_size("col", (2 ** 16, 2 ** 16, 2 ** 14), "float32")
    with pytest.raises(ValueError, match=r"the im2col matrix of shape"):
        check_tensor_size("the im2col matrix", (2 ** 16, 2 ** 16, 2 ** 15), "float32")
