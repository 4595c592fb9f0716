"""Depthwise kernels (forward, backward-data, backward-weight) and the separable layer (fused and
unfused) on the GPU: against the float64 reference, composed cupyconv calls, the adjoint identity
and bitwise repeatability.  Channel counts that are not multiples of any tile, multipliers > 1,
kernel sizes 3/5/7, strides, dilations, every padding form, both layouts, all dtypes; the
channels-last kernels with views, misaligned outputs and the inference epilogue."""

import dataclasses
import math

import numpy as np
import pytest

import cupyconv
from cupyconv import reference
from cupyconv._depthwise import channels_last
from cupyconv._depthwise.launch import stage_channels_last
from cupyconv._depthwise.planes import (backward_data_twin, contiguous_planes, plane_launch,
                                        plane_plan, plane_wgrad_launch, plane_wgrad_plan)
from cupyconv._depthwise.tiles import tile_plan, vector_rows, wgrad_plan
from cupyconv._core.dtypes import HALF_DTYPES, numpy_dtype
from cupyconv._core.launch import element_strides
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.verify import poison, random_array, rel_error, tolerance

from gpu_cases import (ALL_DTYPES, LAYOUTS, assert_adjoint, assert_three_passes, rng_for,
                       with_dtypes)

pytestmark = pytest.mark.gpu

# (n, c, mult, spatial, kernel, options)
DW_CASES = [
    (2, 1, 1, (23, 19), (3, 3), dict(padding=1)),
    (2, 3, 2, (17, 30), (5, 5), dict(padding="same", stride=2)),
    (1, 17, 1, (33, 9), (7, 7), dict(padding=3, dilation=(2, 1))),
    (2, 144, 1, (14, 14), (3, 3), dict(padding=1)),
    (2, 960, 1, (7, 7), (3, 3), dict(padding=1)),
    (1, 5, 3, (12, 13), (3, 3), dict(stride=3, padding=[(2, 0), (0, 1)])),
    (3, 4, 1, (9, 70), (3, 1), dict(stride=(1, 3), padding="same_lower")),
    (1, 6, 1, (60, 41), (3, 3), dict(stride=2, padding="valid", dilation=3)),
    (2, 7, 2, (50,), (5,), dict(padding=4, dilation=2)),
    (1, 3, 1, (4, 9, 10), (3, 3, 3), dict(padding=1, stride=(1, 2, 1))),
    (1, 2, 2, (5, 6, 7), (2, 3, 3), dict(padding="same", dilation=(2, 1, 1))),
    # widths that are multiples of 4: the tile kernels stage rows with vector loads
    (2, 8, 1, (20, 24), (3, 3), dict(padding=1)),
    (1, 4, 2, (16, 32), (5, 5), dict(padding=2)),
    (2, 6, 1, (12, 16), (3, 3), dict(padding=(0, 3), dilation=(1, 2))),
    # a window too large for shared memory: the channels-first gather kernels
    (1, 2, 1, (9, 11), (7, 7), dict(padding=60, dilation=20)),
]


# bfloat16 on a part of the grid (float16's paths): the plane, tile and gather kernels, a channel
# multiplier, 1-d and 3-d
BF16_DW = (0, 1, 5, 8, 9, 11, 14)


def _id(case):
    n, c, m, sp, k, o = case
    return f"{len(sp)}d-c{c}m{m}-{'x'.join(map(str, k))}-" + "-".join(f"{a}{v}" for a, v in o.items())


def _shapes(case, layout):
    n, c, m, sp, k, _ = case
    if layout == "NHWC":
        return (n, *sp, c), (c * m, *k, 1)
    return (n, c, *sp), (c * m, 1, *k)


def _opts(case, layout):
    return dict(case[5], groups=case[1], layout=layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case,dtype", with_dtypes(DW_CASES, [DW_CASES[i] for i in BF16_DW], ids=_id))
def test_depthwise_passes_match_reference(case, layout, dtype):
    import cupy

    rng = rng_for("dw", _id(case), layout, dtype)
    xs, ws = _shapes(case, layout)
    opts = _opts(case, layout)
    ys = cupyconv.output_shape(xs, ws, **opts)
    xh, wh, dyh = (random_array(rng, s, dtype) for s in (xs, ws, ys))
    bh = random_array(rng, (ws[0],), dtype)
    x, w, dy = cupy.asarray(xh), cupy.asarray(wh), cupy.asarray(dyh)

    ref = reference.conv(xh, wh, bh, **opts)
    y = poison(cupy.empty(ys, dtype))
    cupyconv.conv(x, w, cupy.asarray(bh), method="depthwise", out=y, **opts)
    assert rel_error(y, ref) <= tolerance(dtype, ref)

    ref = reference.conv_backward_data(dyh, wh, xs, **opts)
    dx = poison(cupy.empty(xs, dtype))
    cupyconv.conv_backward_data(dy, w, xs, method="depthwise", out=dx, **opts)
    assert rel_error(dx, ref) <= tolerance(dtype, ref)

    ref = reference.conv_backward_weight(xh, dyh, ws, **opts)
    dw = poison(cupy.empty(ws, dtype))
    cupyconv.conv_backward_weight(x, dy, ws, method="depthwise", out=dw, **opts)
    assert rel_error(dw, ref) <= tolerance(dtype, ref)


def test_grid_reaches_every_kernel():
    """The case list runs the tile and the gather kernels of every pass, and the plane kernels
    (else a kernel would go untested on the GPU).  (Dilated, 3-d and strided problems other than
    square filters at stride 2 keep the tile kernels' forward path in use; strided backward-data
    with a channel multiplier its transposed path, the rest staging through channels-last.)"""
    kinds = set()
    for case in DW_CASES:
        for layout in LAYOUTS:
            xs, ws = _shapes(case, layout)
            g = ConvGeometry.from_shapes(xs, ws, dtype="float32", **_opts(case, layout))
            staged = stage_channels_last(g)
            kinds |= {("fwd", tile_plan(g, False) is not None),
                      ("dgrad", tile_plan(g, True) is not None and not staged),
                      ("staged", staged),
                      ("wgrad", wgrad_plan(g)[0] is not None),
                      ("plane", plane_plan(g) is not None),
                      ("plane-dgrad", (twin := backward_data_twin(g)) is not None
                       and plane_plan(twin) is not None),
                      ("plane-wgrad", plane_wgrad_plan(g) is not None)}
    passes = ("fwd", "dgrad", "staged", "wgrad", "plane", "plane-dgrad", "plane-wgrad")
    assert kinds == {(p, t) for p in passes for t in (True, False)}


# Forward problems of the plane kernel (depthwise_plane.cu): plane widths from 1 column to three
# strips, square and generic filters of every width bucket, filters taller than the plane,
# asymmetric and oversized padding, a pad with d == 0 and OW % 4 == 0 (direct vector stores),
# channel multipliers; at stride 2, square filters with every window offset E = -PW mod 4.
# (n, c, mult, (H, W), (KH, KW), padding[, stride])
PLANE_CASES = [
    (2, 5, 1, (9, 1), (3, 1), [(1, 1), (0, 0)]),
    (1, 3, 2, (7, 7), (3, 3), 1),
    (2, 4, 1, (13, 13), (5, 5), 2),
    (1, 6, 1, (56, 56), (3, 3), 1),
    (1, 2, 3, (11, 60), (7, 7), 3),
    (1, 3, 1, (20, 64), (3, 5), 4),
    (1, 2, 1, (5, 130), (3, 3), 1),
    (1, 2, 1, (6, 257), (2, 9), [(0, 2), (4, 1)]),
    (2, 3, 1, (10, 24), (1, 16), [(0, 0), (8, 7)]),
    (1, 2, 1, (4, 8), (9, 11), 6),
    (3, 1, 1, (3, 4), (4, 2), [(3, 0), (1, 2)]),
    (1, 6, 1, (56, 56), (3, 3), 1, 2),
    (2, 4, 1, (13, 13), (5, 5), 2, 2),
    (1, 2, 3, (11, 60), (7, 7), 3, 2),
    (1, 3, 1, (9, 10), (3, 3), 0, 2),
    (1, 2, 1, (5, 517), (3, 3), [(1, 1), (2, 1)], 2),
    (2, 3, 1, (112, 112), (3, 3), [(0, 1), (0, 1)], 2),
    (1, 2, 1, (3, 4), (7, 7), 3, 2),
]


def _plane_id(case):
    n, c, m, sp, k, p, *stride = case
    s = f"-s{stride[0]}" if stride else ""
    return f"c{c}m{m}-{sp[0]}x{sp[1]}-k{k[0]}x{k[1]}-p{p}{s}".replace(" ", "")


def _plane_problem(case, dtype):
    """(x shape, w shape, y shape, conv options, geometry) of a plane-kernel case."""
    n, c, m, sp, k, pad, *stride = case
    xs, ws = (n, c, *sp), (c * m, 1, *k)
    opts = dict(padding=pad, groups=c, stride=stride[0] if stride else 1)
    g = ConvGeometry.from_shapes(xs, ws, dtype=dtype, **opts)
    return xs, ws, g.output_shape, opts, g


def _misaligned(cupy, a):
    """A C-contiguous copy of ``a`` whose base is one element past a 16-byte boundary."""
    buf = cupy.empty(a.size + 1, a.dtype)
    out = buf[1:].reshape(a.shape)
    out[...] = a
    return out


@pytest.mark.parametrize("case,dtype", with_dtypes(
    PLANE_CASES, [PLANE_CASES[i] for i in (1, 3, 7, 9, 11, 12)], ids=_plane_id))
@pytest.mark.usefixtures("no_bands")  # (the band kernel would take the narrow planes)
def test_plane_kernel_forward(case, dtype):
    """conv routes these to the plane kernel; aligned and misaligned input rows and outputs, with
    and without bias, against the float64 reference."""
    import cupy

    xs, ws, ys, opts, g = _plane_problem(case, dtype)
    assert plane_plan(g) is not None
    rng = rng_for("dw-plane", _plane_id(case), dtype)
    xh, wh = random_array(rng, xs, dtype), random_array(rng, ws, dtype)
    bh = random_array(rng, (ws[0],), dtype)
    x, w, b = cupy.asarray(xh), cupy.asarray(wh), cupy.asarray(bh)
    for bias, bias_h in ((b, bh), (None, None)):
        ref = reference.conv(xh, wh, bias_h, **opts)
        misaligned = (_misaligned(cupy, x), _misaligned(cupy, cupy.empty(ys, dtype)))
        for xin, out in ((x, cupy.empty(ys, dtype)), misaligned):
            assert contiguous_planes(g, element_strides(xin, False))
            y = poison(out)
            cupyconv.conv(xin, w, bias, out=y, **opts)
            assert rel_error(y, ref) <= tolerance(dtype, ref), (bias is None, xin.data.ptr % 16)


@pytest.mark.parametrize("warps,rounds", [(4, 1), (4, 3), (8, 2), (5, 8)])
@pytest.mark.parametrize("case", [PLANE_CASES[i] for i in (1, 3, 7, 11, 15)], ids=_plane_id)
def test_plane_kernel_work_splits(case, warps, rounds):
    """Other warps per block and rounds per block than the default plan (blocks that straddle
    planes, a last block with idle groups)."""
    import cupy

    xs, ws, ys, opts, g = _plane_problem(case, "float32")
    rng = rng_for("dw-plane-split", _plane_id(case), warps, rounds)
    xh, wh, bh = random_array(rng, xs), random_array(rng, ws), random_array(rng, (ws[0],))
    x, w, b = cupy.asarray(xh), cupy.asarray(wh), cupy.asarray(bh)
    plan = plane_plan(g, True, warps=warps, rounds=rounds)
    y = poison(cupy.empty(ys, "float32"))
    plane_launch(g, plan, True, vector_rows(x, element_strides(x, False)))(x, w, b, y)
    ref = reference.conv(xh, wh, bh, **opts)
    assert rel_error(y, ref) <= tolerance("float32", ref)


# Problems of the plane backward-weight kernel, 3x3 and 5x5 at stride 1 and 2: narrow
# and wide planes (up to three strips), pads that shift the strips by every d (0 .. 3) or the
# window by every E, asymmetric pads, channel multipliers.
PLANE_WGRAD_CASES = [
    (2, 3, 1, (7, 7), (3, 3), 1),
    (1, 4, 2, (13, 9), (3, 3), [(0, 2), (2, 0)]),
    (2, 5, 1, (56, 56), (3, 3), 1),
    (1, 2, 3, (6, 60), (3, 3), 4),
    (1, 2, 1, (9, 130), (3, 3), [(1, 1), (3, 2)]),
    (1, 1, 1, (5, 257), (3, 3), [(2, 2), (2, 2)]),
    (3, 2, 1, (1, 3), (3, 3), [(1, 1), (1, 1)]),
    (2, 3, 1, (7, 7), (3, 3), 1, 2),
    (2, 5, 1, (56, 56), (3, 3), 1, 2),
    (1, 4, 2, (13, 9), (5, 5), 2, 2),
    (1, 1, 1, (5, 517), (3, 3), [(2, 2), (2, 2)], 2),
    (2, 4, 1, (28, 28), (5, 5), [(1, 2), (1, 2)], 2),
    (1, 3, 1, (10, 11), (3, 3), 0, 2),
    (2, 3, 1, (14, 14), (5, 5), 2),
    (1, 2, 2, (9, 30), (5, 5), [(1, 3), (2, 2)]),
]


@pytest.mark.parametrize("case,dtype", with_dtypes(PLANE_WGRAD_CASES, PLANE_WGRAD_CASES[::3],
                                                   ids=_plane_id))
def test_plane_kernel_backward_weight(case, dtype):
    """conv_backward_weight routes these to the plane kernel; aligned and misaligned x and dy,
    against the float64 reference, and bitwise repeatable."""
    import cupy

    xs, ws, ys, opts, g = _plane_problem(case, dtype)
    assert plane_wgrad_plan(g) is not None
    rng = rng_for("dw-plane-wgrad", _plane_id(case), dtype)
    xh, dyh = random_array(rng, xs, dtype), random_array(rng, ys, dtype)
    x, dy = cupy.asarray(xh), cupy.asarray(dyh)
    ref = reference.conv_backward_weight(xh, dyh, ws, **opts)
    results = []
    for xin, dyin in ((x, dy), (_misaligned(cupy, x), _misaligned(cupy, dy)), (x, dy)):
        dw = poison(cupy.empty(ws, dtype))
        cupyconv.conv_backward_weight(xin, dyin, ws, out=dw, **opts)
        assert rel_error(dw, ref) <= tolerance(dtype, ref), xin.data.ptr % 16
        results.append(dw)
    assert cupy.array_equal(results[0], results[2])


@pytest.mark.parametrize("warps,rounds", [(4, 1), (8, 3), (5, 2)])
@pytest.mark.parametrize("case", [PLANE_WGRAD_CASES[i] for i in (0, 2, 3, 4, 8, 9, 14)],
                         ids=_plane_id)
def test_plane_wgrad_work_splits(case, warps, rounds):
    """Other warps and rounds per block than the default plan (chunks whose last block idles)."""
    import cupy

    xs, ws, ys, opts, g = _plane_problem(case, "float32")
    rng = rng_for("dw-plane-wgrad-split", _plane_id(case), warps, rounds)
    xh, dyh = random_array(rng, xs), random_array(rng, ys)
    x, dy = cupy.asarray(xh), cupy.asarray(dyh)
    plan, _ = plane_wgrad_plan(g)
    plan = dataclasses.replace(plan, warps=warps, rounds=rounds)
    chunks = math.ceil(xs[0] * plan.cpp / plan.ipb)
    partial = poison(cupy.empty((chunks, ws[0], plan.kf ** 2), "float32"))
    plane_wgrad_launch(g, plan, chunks, vector_rows(x, element_strides(x, False)))(x, dy, partial)
    ref = reference.conv_backward_weight(xh, dyh, ws, **opts)
    dw = partial.sum(axis=0).reshape(ws)
    assert rel_error(dw, ref) <= tolerance("float32", ref)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", [DW_CASES[0], DW_CASES[5], PLANE_CASES[1]], ids=str)
def test_prepared_runners_take_each_calls_arrays(case, dtype):
    """The fast path's prepared runners (launches resolved on the first call) compute each later
    call from that call's arrays: fresh data, a transposed-view weight (copied per call) and a
    non-contiguous dy (copied per call), for all three passes."""
    import cupy

    if isinstance(case[5], dict):  # a DW_CASES entry
        xs, ws = _shapes(case, "NCHW")
        opts = _opts(case, "NCHW")
        ys = cupyconv.output_shape(xs, ws, **opts)
    else:
        xs, ws, ys, opts, _ = _plane_problem(case, dtype)
    for call in range(3):
        rng = rng_for("dw-prepared", str(case), dtype, call)
        xh, wh, dyh = (random_array(rng, s, dtype) for s in (xs, ws, ys))
        x = cupy.asarray(xh)
        # w through a view with the same strides on every call (part of the fast-path key)
        w = cupy.asarray(np.ascontiguousarray(wh.swapaxes(-1, -2))).swapaxes(-1, -2)
        dy = cupy.asarray(np.concatenate([dyh, dyh], axis=-1))[..., :ys[-1]]  # non-contiguous
        assert not w.flags.c_contiguous and not dy.flags.c_contiguous
        assert_three_passes(x, w, dy, (xh, wh, dyh), opts, dtype, call)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", DW_CASES[:6], ids=_id)
def test_depthwise_adjoint_identity(case, layout):
    import cupy

    rng = rng_for("dw-adjoint", _id(case), layout)
    xs, ws = _shapes(case, layout)
    opts = _opts(case, layout)
    ys = cupyconv.output_shape(xs, ws, **opts)
    x, w, dy = (cupy.asarray(random_array(rng, s, "float64")) for s in (xs, ws, ys))
    lhs = float(cupy.vdot(cupyconv.conv(x, w, method="depthwise", **opts), dy))
    mid = float(cupy.vdot(x, cupyconv.conv_backward_data(dy, w, xs, method="depthwise", **opts)))
    rhs = float(cupy.vdot(w, cupyconv.conv_backward_weight(x, dy, ws, method="depthwise", **opts)))
    assert mid == pytest.approx(lhs, rel=1e-10, abs=1e-10)
    assert rhs == pytest.approx(lhs, rel=1e-10, abs=1e-10)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_depthwise_is_auto_and_bitwise_repeatable(layout):
    import cupy

    case = (8, 24, 1, (40, 40), (3, 3), dict(padding=1))
    rng = rng_for("dw-repeat", layout)
    xs, ws = _shapes(case, layout)
    opts = _opts(case, layout)
    ys = cupyconv.output_shape(xs, ws, **opts)
    x, w, dy = (cupy.asarray(random_array(rng, s)) for s in (xs, ws, ys))
    dws = [cupyconv.conv_backward_weight(x, dy, ws, **opts) for _ in range(3)]
    dxs = [cupyconv.conv_backward_data(dy, w, xs, **opts) for _ in range(3)]
    assert all(cupy.array_equal(dws[0], d) for d in dws[1:])
    assert all(cupy.array_equal(dxs[0], d) for d in dxs[1:])
    # "auto" takes the depthwise kernels: same bits as asking for them
    assert cupy.array_equal(dws[0], cupyconv.conv_backward_weight(x, dy, ws, method="depthwise", **opts))
    assert cupy.array_equal(dxs[0], cupyconv.conv_backward_data(dy, w, xs, method="depthwise", **opts))
    assert cupy.array_equal(cupyconv.conv(x, w, **opts), cupyconv.conv(x, w, method="depthwise", **opts))


# ---- separable_conv ------------------------------------------------------------------------
# (n, c, mult, kp, spatial, kernel, options)
SEP_CASES = [
    (2, 1, 1, 3, (11, 13), (3, 3), dict(padding=1)),
    (2, 3, 2, 5, (20, 17), (5, 5), dict(padding="same", stride=2)),
    (1, 17, 1, 24, (15, 15), (3, 3), dict(padding=1)),
    (1, 144, 1, 24, (12, 12), (3, 3), dict(padding=1)),
    (1, 960, 1, 8, (7, 7), (3, 3), dict(padding=1)),
    (2, 12, 1, 70, (9, 10), (3, 3), dict(padding=(1, 0), dilation=2)),
    (1, 8, 1, 200, (6, 6), (7, 7), dict(padding=3)),
    (3, 5, 1, 6, (40,), (5,), dict(padding=2, stride=3)),
    (1, 4, 1, 9, (4, 5, 6), (3, 3, 3), dict(padding=1)),
    # the fused kernel's tiles: partial quads and rows (29 columns), rows too ragged for vector
    # staging (58), several tiles across (150), asymmetric padding, 1-d with many tiles
    (2, 20, 1, 24, (30, 29), (3, 3), dict(padding=1)),
    (1, 19, 1, 16, (21, 58), (3, 3), dict(padding=1)),
    (1, 6, 2, 40, (9, 150), (3, 3), dict(padding=((0, 1), (2, 1)))),
    (2, 5, 1, 7, (300,), (3,), dict(padding=1)),
]
SEP_METHODS = ("auto", "fused", "unfused")


def _sep_id(case):
    n, c, m, kp, sp, k, o = case
    return (f"{len(sp)}d-c{c}m{m}kp{kp}-{'x'.join(map(str, k))}-"
            + "-".join(f"{a}{v}" for a, v in o.items()))


def _sep_operands(case, layout, dtype, rng):
    n, c, m, kp, sp, k, o = case
    nd = len(sp)
    if layout == "NHWC":
        xs, wds, wps = (n, *sp, c), (c * m, *k, 1), (kp, *(1,) * nd, c * m)
    else:
        xs, wds, wps = (n, c, *sp), (c * m, 1, *k), (kp, c * m, *(1,) * nd)
    arrays = [random_array(rng, s, dtype) for s in (xs, wds, wps, (c * m,), (kp,))]
    return arrays, dict(o, layout=layout)


def _sep_reference(xh, wdh, wph, bdh, bph, opts, act, round_mid=None):
    layout = opts["layout"]
    channels = xh.shape[-1] if layout == "NHWC" else xh.shape[1]
    mid = reference.conv(xh, wdh, bdh, groups=channels, **opts)
    if act == "relu":
        mid = np.maximum(mid, 0)
    elif act == "relu6":
        mid = np.clip(mid, 0, 6)
    if round_mid is not None:
        mid = mid.astype(round_mid).astype(np.float64)
    return reference.conv(mid, wph, bph, layout=layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case,dtype", with_dtypes(SEP_CASES, SEP_CASES[::2], ids=_sep_id))
def test_separable_matches_reference_and_two_convs(case, layout, dtype):
    import cupy

    rng = rng_for("sep", _sep_id(case), layout, dtype)
    (xh, wdh, wph, bdh, bph), opts = _sep_operands(case, layout, dtype, rng)
    x, wd, wp, bd, bp = (cupy.asarray(a) for a in (xh, wdh, wph, bdh, bph))
    channels = case[1]
    for act in (None, "relu6"):
        ref = _sep_reference(xh, wdh, wph, bdh, bph, opts, act)
        # a 2-byte type through a buffer rounds the intermediate: judge it against that rounding
        ref16 = _sep_reference(xh, wdh, wph, bdh, bph, opts, act, numpy_dtype(dtype))
        for method in SEP_METHODS:
            if method == "fused" and len(case[4]) == 3:
                continue  # fused is 1-d/2-d; 3-d is covered by auto and unfused
            y = poison(cupy.empty(ref.shape, dtype))
            got = cupyconv.separable_conv(x, wd, wp, bd, bp, activation=act, method=method, out=y,
                                          **opts)
            assert got is y
            err = rel_error(y, ref)
            assert err <= tolerance(dtype, ref) or (
                dtype in HALF_DTYPES and rel_error(y, ref16) <= tolerance(dtype, ref16)), (method, act, err)
    # the same layer as two cupyconv calls
    mid = cupyconv.conv(x, wd, bd, groups=channels, **opts)
    two = cupyconv.conv(mid, wp, bp, layout=layout)
    ref = _sep_reference(xh, wdh, wph, bdh, bph, opts, None)
    assert rel_error(two, ref) <= tolerance(dtype, ref) or (
        dtype in HALF_DTYPES and rel_error(two, ref16) <= 2 * tolerance(dtype, ref16))
    one = cupyconv.separable_conv(x, wd, wp, bd, bp, method="unfused", **opts)
    assert rel_error(one, two) <= {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-6,
                                   "float64": 1e-13}[dtype]


def test_separable_refuses_bad_arguments_before_launch():
    import cupy

    from cupyconv import jit

    x = cupy.ones((1, 4, 8, 8), cupy.float32)
    wd, wp = cupy.ones((4, 1, 3, 3), cupy.float32), cupy.ones((6, 4, 1, 1), cupy.float32)
    out = cupy.full((1, 6, 8, 8), 7.0, cupy.float32)
    before = jit.cache_info()["misses"]
    bad = [
        (dict(activation="gelu"), ValueError, "activation"),
        (dict(method="winograd"), ValueError, "method"),
        (dict(w_pw=cupy.ones((6, 4, 3, 3), cupy.float32)), ValueError, "pointwise"),
        (dict(w_pw=cupy.ones((6, 5, 1, 1), cupy.float32)), ValueError, "w_pw"),
        (dict(w_pw=cupy.ones((6, 4, 1, 1), cupy.float64)), TypeError, "w_pw"),
        (dict(bias_dw=cupy.ones(5, cupy.float32)), ValueError, "bias_dw"),
        (dict(bias_pw=cupy.ones(4, cupy.float32)), ValueError, "bias_pw"),
        (dict(x=np.ones((1, 4, 8, 8), np.float32)), TypeError, "cupy.asarray"),
        (dict(out=cupy.empty((1, 6, 8, 7), cupy.float32)), ValueError, "out"),
        (dict(stride=0), ValueError, "stride"),
        (dict(x=cupy.ones((1, 4, 3, 4, 5), cupy.float32), w_dw=cupy.ones((4, 1, 3, 3, 3), cupy.float32),
              w_pw=cupy.ones((6, 4, 1, 1, 1), cupy.float32), method="fused", out=None),
         ValueError, "fused"),
    ]
    for change, exc, match in bad:
        args = dict(x=x, w_dw=wd, w_pw=wp, padding=1, out=out)
        args.update(change)
        with pytest.raises(exc, match=match):
            cupyconv.separable_conv(args.pop("x"), args.pop("w_dw"), args.pop("w_pw"), **args)
    assert jit.cache_info()["misses"] == before
    assert bool((out == 7.0).all())


def test_backward_method_is_checked():
    import cupy

    dy = cupy.ones((1, 4, 8, 8), cupy.float32)
    w = cupy.ones((4, 2, 3, 3), cupy.float32)
    with pytest.raises(ValueError, match="groups == input channels"):
        cupyconv.conv_backward_data(dy, w, (1, 4, 8, 8), padding=1, groups=2, method="depthwise")
    with pytest.raises(ValueError, match="method must be one of"):
        cupyconv.conv_backward_weight(dy, dy, w.shape, padding=1, groups=2, method="fft")


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_depthwise_reads_views_through_strides(dtype):
    """Offset and strided views (rows not 4-aligned in memory: no vector staging) give the same
    results as contiguous copies, in every pass."""
    import cupy

    rng = rng_for("dw-views", dtype)
    big = random_array(rng, (2, 10, 18, 33), dtype)
    xh = big[:, ::2, 1:17, 1:33]                 # (2, 5, 16, 32), offset by one element
    wh = random_array(rng, (5, 1, 3, 3), dtype)
    opts = dict(padding=1, groups=5)
    dyh = random_array(rng, (2, 5, 16, 32), dtype)
    x = cupy.asarray(big)[:, ::2, 1:17, 1:33]
    w, dy = cupy.asarray(wh), cupy.asarray(dyh)
    ref = reference.conv(xh, wh, **opts)
    assert rel_error(cupyconv.conv(x, w, method="depthwise", **opts), ref) <= tolerance(dtype, ref)
    ref = reference.conv_backward_weight(xh, dyh, wh.shape, **opts)
    got = cupyconv.conv_backward_weight(x, dy, wh.shape, method="depthwise", **opts)
    assert rel_error(got, ref) <= tolerance(dtype, ref)
    dyv = cupy.asarray(big)[:, ::2, 1:17, 1:33]  # a strided dy for backward-data
    ref = reference.conv_backward_data(xh, wh, xh.shape, **opts)
    got = cupyconv.conv_backward_data(dyv, w, xh.shape, method="depthwise", **opts)
    assert rel_error(got, ref) <= tolerance(dtype, ref)


def test_transposed_tiles_that_no_source_row_reaches_are_not_staged():
    """Stride 3 with dilation 3: some backward-data tiles read no dy row at all; staging their
    empty window looped forever (found by the fuzz, seed 7, problem 31)."""
    import cupy

    rng = np.random.default_rng(31)
    xh = rng.uniform(-1, 1, (2, 9, 6, 2, 6))
    wh = rng.uniform(-1, 1, (9, 1, 3, 1, 2))
    opts = dict(stride=3, dilation=3, padding=[(2, 0), (1, 1), (0, 1)], groups=9)
    ref = reference.conv_transpose(xh, wh, **opts)
    got = cupyconv.conv_transpose(cupy.asarray(xh), cupy.asarray(wh), method="depthwise", **opts)
    assert rel_error(got, ref) <= tolerance("float64", ref)


# ---- channels-last kernels (depthwise_cl.cu) -------------------------------------------------
# (n, c, spatial, kernel, options), one filter per channel.  The row walk (3, 5, 7 at W stride 1
# and 2, any H stride and dilation) and the any-shape variant (4x4, stride 3, W dilation,
# rectangular filters); C a multiple of 8 (16-byte vectors in every dtype), 12 (pairs in the 2-byte
# types), odd (scalars); odd widths, planes of 1-3 rows, every padding form; 1-d and 3-d; more
# channels than one block holds.
CL_CASES = [
    (2, 16, (9, 11), 3, dict(padding=1)),
    (2, 12, (8, 13), 3, dict(stride=2, padding="same")),
    (1, 8, (6, 7), 3, dict(stride=2, padding=1)),
    (1, 24, (7, 9), 5, dict(padding=2)),
    (2, 8, (10, 7), 5, dict(stride=2, padding=[(2, 1), (0, 3)])),
    (1, 17, (9, 15), 7, dict(padding=3)),
    (1, 8, (12, 17), 7, dict(stride=2, padding="same_lower")),
    (2, 10, (6, 9), 4, dict(padding="same")),
    (1, 8, (11, 12), 3, dict(stride=3, padding=1)),
    (1, 16, (9, 14), 3, dict(padding=2, dilation=2)),
    (2, 6, (5, 21), 3, dict(stride=(1, 2), dilation=(2, 1), padding=[(2, 2), (1, 0)])),
    (1, 8, (3, 5), 3, dict(padding="valid")),
    (3, 8, (1, 13), (1, 5), dict(padding=(0, 2))),
    (2, 16, (29,), 5, dict(stride=2, padding=2)),
    (1, 8, (4, 5, 7), 3, dict(padding=1, stride=(1, 2, 2))),
    (1, 520, (4, 5), 3, dict(padding=1)),
    # enough runs for several backward-weight chunks
    (4, 32, (16, 20), 3, dict(padding=1)),
]


def _cl_id(case):
    n, c, sp, k, o = case
    return f"{len(sp)}d-c{c}-{'x'.join(map(str, sp))}-k{k}-" + "-".join(f"{a}{v}" for a, v in o.items())


def _cl_problem(case, dtype):
    """(x shape, w shape, y shape, conv options, geometry) of a channels-last case."""
    n, c, sp, k, o = case
    ks = k if isinstance(k, tuple) else (k,) * len(sp)
    xs, ws = (n, *sp, c), (c, *ks, 1)
    opts = dict(o, groups=c, layout="NHWC")
    g = ConvGeometry.from_shapes(xs, ws, dtype=dtype, **opts)
    return xs, ws, g.output_shape, opts, g


def _takes_cl_kernels(g, *pairs):
    """The arrays (activation, dst) select the channels-last kernels (a width and a plan)."""
    vec = channels_last.vector_width(g, tuple((a, element_strides(a, True)) for a in pairs))
    return vec > 0 and channels_last.pass_plan(g, False, vec) is not None


@pytest.mark.parametrize("case", CL_CASES, ids=_cl_id)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_channels_last_kernels_match_reference(case, dtype):
    """Forward with and without bias, backward-data and backward-weight on the channels-last
    kernels, into NaN-poisoned outputs, against the float64 reference; backward-weight bitwise
    repeatable."""
    import cupy

    xs, ws, ys, opts, g = _cl_problem(case, dtype)
    rng = rng_for("dw-cl", _cl_id(case), dtype)
    xh, wh, dyh = (random_array(rng, s, dtype) for s in (xs, ws, ys))
    bh = random_array(rng, (ws[0],), dtype)
    x, w, dy, b = (cupy.asarray(a) for a in (xh, wh, dyh, bh))
    y = poison(cupy.empty(ys, dtype))
    assert _takes_cl_kernels(g, x, y) and _takes_cl_kernels(g, dy, x)
    for bias, bias_h in ((b, bh), (None, None)):
        ref = reference.conv(xh, wh, bias_h, **opts)
        cupyconv.conv(x, w, bias, method="depthwise", out=poison(y), **opts)
        assert rel_error(y, ref) <= tolerance(dtype, ref), bias is None

    ref = reference.conv_backward_data(dyh, wh, xs, **opts)
    dx = poison(cupy.empty(xs, dtype))
    cupyconv.conv_backward_data(dy, w, xs, method="depthwise", out=dx, **opts)
    assert rel_error(dx, ref) <= tolerance(dtype, ref)

    ref = reference.conv_backward_weight(xh, dyh, ws, **opts)
    dws = []
    for _ in range(2):
        dw = poison(cupy.empty(ws, dtype))
        cupyconv.conv_backward_weight(x, dy, ws, method="depthwise", out=dw, **opts)
        assert rel_error(dw, ref) <= tolerance(dtype, ref)
        dws.append(dw)
    assert cupy.array_equal(dws[0], dws[1])


@pytest.mark.parametrize("act", [None, "relu", "silu"])
@pytest.mark.parametrize("case", [CL_CASES[0], CL_CASES[4], CL_CASES[7]], ids=_cl_id)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_channels_last_epilogue(case, dtype, act):
    """bias, z and the activation after the channels-last forward kernel (the epilogue pass),
    "auto" and "depthwise" alike."""
    import cupy

    xs, ws, ys, opts, g = _cl_problem(case, dtype)
    rng = rng_for("dw-cl-epilogue", _cl_id(case), dtype, act)
    xh, wh = random_array(rng, xs, dtype), random_array(rng, ws, dtype)
    bh, zh = random_array(rng, (ws[0],), dtype), random_array(rng, ys, dtype)
    x, w, b, z = (cupy.asarray(a) for a in (xh, wh, bh, zh))
    ref = reference.conv(xh, wh, bh, activation=act, z=zh, **opts)
    for method in ("auto", "depthwise"):
        y = poison(cupy.empty(ys, dtype))
        cupyconv.conv(x, w, b, method=method, out=y, activation=act, z=z, **opts)
        assert rel_error(y, ref) <= tolerance(dtype, ref), method


def _cl_views(cupy, big):
    """Views of a (n, h + 2, w + 3, 3 c) array as (n, h, w, c) activations: channel-contiguous with
    an aligned offset (16-byte vectors), with an odd offset (scalars), with negative H and W
    strides (still the channels-last kernels); and two the channels-last kernels refuse: a
    negative channel stride and an NCHW array permuted to NHWC (the gather kernels)."""
    c = big.shape[-1] // 3
    h, w = big.shape[1] - 2, big.shape[2] - 3
    nchw = cupy.ascontiguousarray(big[:, 1:h + 1, 2:w + 2, c:2 * c].transpose(0, 3, 1, 2))
    return {"aligned offset": (big[:, 1:h + 1, 2:w + 2, c:2 * c], True),
            "odd offset": (big[:, 1:h + 1, 2:w + 2, 1:c + 1], True),
            "negative H, W": (big[:, h:0:-1, w + 1:1:-1, c:2 * c], True),
            "negative C": (big[:, 1:h + 1, 2:w + 2, 2 * c - 1:c - 1:-1], False),
            "permuted NCHW": (nchw.transpose(0, 2, 3, 1), False)}


@pytest.mark.parametrize("case", [CL_CASES[0], CL_CASES[4], CL_CASES[7]], ids=_cl_id)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_channels_last_views(case, dtype):
    """Views as x (forward, backward-weight) and dy (backward-data, backward-weight) give the
    reference's results; the ones with unit channel stride take the channels-last kernels, the
    others the gather kernels."""
    import cupy

    xs, ws, ys, opts, g = _cl_problem(case, dtype)
    rng = rng_for("dw-cl-views", _cl_id(case), dtype)
    wh = random_array(rng, ws, dtype)
    w = cupy.asarray(wh)
    n, *sp, c = xs
    xbig = cupy.asarray(random_array(rng, (n, *(s + 2 for s in sp[:-1]), sp[-1] + 3, 3 * c), dtype))
    ybig = cupy.asarray(random_array(rng, (n, *(s + 2 for s in ys[1:-2]), ys[-2] + 3, 3 * c), dtype))
    for (name, (x, fast)), (_, (dy, dy_fast)) in zip(_cl_views(cupy, xbig).items(),
                                                     _cl_views(cupy, ybig).items()):
        assert x.shape == xs and dy.shape == ys, name
        xh, dyh = cupy.asnumpy(x), cupy.asnumpy(dy)
        y = poison(cupy.empty(ys, dtype))
        assert _takes_cl_kernels(g, x, y) == fast and _takes_cl_kernels(g, dy, y) == dy_fast, name
        ref = reference.conv(xh, wh, **opts)
        cupyconv.conv(x, w, method="depthwise", out=y, **opts)
        assert rel_error(y, ref) <= tolerance(dtype, ref), name
        ref = reference.conv_backward_data(dyh, wh, xs, **opts)
        got = cupyconv.conv_backward_data(dy, w, xs, method="depthwise", **opts)
        assert rel_error(got, ref) <= tolerance(dtype, ref), name
        ref = reference.conv_backward_weight(xh, dyh, ws, **opts)
        got = cupyconv.conv_backward_weight(x, dy, ws, method="depthwise", **opts)
        assert rel_error(got, ref) <= tolerance(dtype, ref), name


@pytest.mark.parametrize("case", [CL_CASES[0], CL_CASES[6]], ids=_cl_id)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_channels_last_misaligned_outputs(case, dtype):
    """Outputs one element past a 16-byte boundary: narrower vectors (scalars), every element
    written."""
    import cupy

    xs, ws, ys, opts, g = _cl_problem(case, dtype)
    rng = rng_for("dw-cl-misaligned", _cl_id(case), dtype)
    xh, wh, dyh = (random_array(rng, s, dtype) for s in (xs, ws, ys))
    x, w, dy = (cupy.asarray(a) for a in (xh, wh, dyh))
    y = poison(_misaligned(cupy, cupy.empty(ys, dtype)))
    assert _takes_cl_kernels(g, x, y)
    ref = reference.conv(xh, wh, **opts)
    cupyconv.conv(x, w, method="depthwise", out=y, **opts)
    assert rel_error(y, ref) <= tolerance(dtype, ref)
    dx = poison(_misaligned(cupy, cupy.empty(xs, dtype)))
    ref = reference.conv_backward_data(dyh, wh, xs, **opts)
    cupyconv.conv_backward_data(dy, w, xs, method="depthwise", out=dx, **opts)
    assert rel_error(dx, ref) <= tolerance(dtype, ref)
    ref = reference.conv_backward_weight(xh, dyh, ws, **opts)
    got = cupyconv.conv_backward_weight(_misaligned(cupy, x), _misaligned(cupy, dy), ws,
                                        method="depthwise", **opts)
    assert rel_error(got, ref) <= tolerance(dtype, ref)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_channels_last_multiplier_and_transpose(dtype):
    """A channel multiplier of 2 in channels-last (the gather kernels) and a depthwise transposed
    conv with stride 2 and output padding (backward-data's kernel with a bias after it)."""
    import cupy

    rng = rng_for("dw-cl-mult", dtype)
    xs, ws = (2, 7, 9, 8), (16, 3, 3, 1)
    opts = dict(padding=1, stride=2, groups=8, layout="NHWC")
    ys = cupyconv.output_shape(xs, ws, **opts)
    xh, wh, dyh = (random_array(rng, s, dtype) for s in (xs, ws, ys))
    x, w, dy = (cupy.asarray(a) for a in (xh, wh, dyh))
    for got, ref in ((cupyconv.conv(x, w, method="depthwise", **opts), reference.conv(xh, wh, **opts)),
                     (cupyconv.conv_backward_data(dy, w, xs, method="depthwise", **opts),
                      reference.conv_backward_data(dyh, wh, xs, **opts)),
                     (cupyconv.conv_backward_weight(x, dy, ws, method="depthwise", **opts),
                      reference.conv_backward_weight(xh, dyh, ws, **opts))):
        assert rel_error(got, ref) <= tolerance(dtype, ref)
    topts = dict(stride=2, padding=1, output_padding=1, groups=8, layout="NHWC")
    wt, bt = random_array(rng, (8, 3, 3, 1), dtype), random_array(rng, (8,), dtype)
    ref = reference.conv_transpose(xh, wt, bt, **topts)
    got = cupyconv.conv_transpose(x, cupy.asarray(wt), cupy.asarray(bt), method="depthwise", **topts)
    assert rel_error(got, ref) <= tolerance(dtype, ref)


@pytest.mark.parametrize("case", [CL_CASES[0], CL_CASES[7]], ids=_cl_id)
def test_channels_last_adjoint_identity(case):
    import cupy

    xs, ws, ys, opts, g = _cl_problem(case, "float64")
    rng = rng_for("dw-cl-adjoint", _cl_id(case))
    x, w, dy = (cupy.asarray(random_array(rng, s, "float64")) for s in (xs, ws, ys))
    assert_adjoint(x, w, dy, opts)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_channels_last_prepared_calls_take_each_calls_arrays(dtype):
    """Warm calls (the recorded launches replayed) of the channels-last kernels compute each
    call from that call's arrays, in all three passes."""
    import cupy

    xs, ws, ys, opts, g = _cl_problem(CL_CASES[4], dtype)
    for call in range(3):
        rng = rng_for("dw-cl-prepared", dtype, call)
        xh, wh, dyh = (random_array(rng, s, dtype) for s in (xs, ws, ys))
        x, w, dy = (cupy.asarray(a) for a in (xh, wh, dyh))
        assert_three_passes(x, w, dy, (xh, wh, dyh), opts, dtype, call)


# Channels-first backward-data with a stride in H or W staged through the channels-last kernel
# (stage_channels_last): (n, c, spatial, kernel, options).  Channel counts from 16 up have both
# copies on the tiled transpose; 8 (and the 3-d case's pixels) the element-wise copy.
STAGED_CASES = [
    (2, 24, (17, 19), 3, dict(stride=2, padding=1)),
    (3, 8, (15, 13), 5, dict(stride=2, padding=2)),
    (2, 16, (13, 21), 3, dict(stride=(2, 1), padding=1)),
    (2, 16, (21, 13), 3, dict(stride=(1, 2), padding=1)),
    (2, 20, (19, 17), 3, dict(stride=2, padding=2, dilation=2)),
    (2, 12, (17, 15), 5, dict(stride=2, padding=[(2, 1), (0, 2)], dilation=(1, 2))),
    (2, 8, (5, 9, 11), 3, dict(stride=(1, 2, 2), padding=1)),
]


def _staged_id(case):
    n, c, sp, k, o = case
    return f"n{n}c{c}-{'x'.join(map(str, sp))}-k{k}-" + "-".join(f"{a}{v}" for a, v in o.items())


def _staged_problem(case, dtype):
    n, c, sp, k, o = case
    xs, ws = (n, c, *sp), (c, 1, *(k,) * len(sp))
    opts = dict(o, groups=c)
    g = ConvGeometry.from_shapes(xs, ws, dtype=dtype, **opts)
    assert stage_channels_last(g)  # (else this test would not reach the staged route)
    return xs, ws, g.output_shape, opts


# every case in the 16-bit types and float32; float64 on the first case only
STAGED_RUNS = ([(case, dtype) for dtype in ALL_DTYPES if dtype != "float64" for case in STAGED_CASES]
               + [(STAGED_CASES[0], "float64")])


@pytest.mark.parametrize("case,dtype", STAGED_RUNS,
                         ids=[f"{_staged_id(c)}-{d}" for c, d in STAGED_RUNS])
@pytest.mark.usefixtures("no_bands")  # (the band kernel would take contiguous stride-2 dy)
def test_staged_backward_data_matches_reference(case, dtype):
    """Strided channels-first backward-data through channels-last copies: poisoned dx, two calls
    with fresh data (the second replays the prepared call, scratch copies included)."""
    import cupy

    xs, ws, ys, opts = _staged_problem(case, dtype)
    for call in range(2):
        rng = rng_for("dw-staged", _staged_id(case), dtype, call)
        wh, dyh = random_array(rng, ws, dtype), random_array(rng, ys, dtype)
        ref = reference.conv_backward_data(dyh, wh, xs, **opts)
        dx = poison(cupy.empty(xs, dtype))
        cupyconv.conv_backward_data(cupy.asarray(dyh), cupy.asarray(wh), xs, method="depthwise",
                                    out=dx, **opts)
        assert rel_error(dx, ref) <= tolerance(dtype, ref), f"call {call}"


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", [STAGED_CASES[0], STAGED_CASES[1]], ids=_staged_id)
def test_staged_backward_data_reads_dy_views(case, dtype):
    """dy as an offset view with a channel step and reversed W (the first copy reads it through
    its strides), and auto picks the same route."""
    import cupy

    xs, ws, ys, opts = _staged_problem(case, dtype)
    rng = rng_for("dw-staged-views", _staged_id(case), dtype)
    wh = random_array(rng, ws, dtype)
    n, c, oh, ow = ys
    big = random_array(rng, (n, 2 * c + 1, oh, ow + 3), dtype)
    dyh = big[:, 1::2, :, 2:ow + 2][..., ::-1]
    dy = cupy.asarray(big)[:, 1::2, :, 2:ow + 2][..., ::-1]
    assert not dy.flags.c_contiguous
    ref = reference.conv_backward_data(np.ascontiguousarray(dyh), wh, xs, **opts)
    dx = poison(cupy.empty(xs, dtype))
    cupyconv.conv_backward_data(dy, cupy.asarray(wh), xs, out=dx, **opts)
    assert rel_error(dx, ref) <= tolerance(dtype, ref)


@pytest.mark.parametrize("case", [STAGED_CASES[0], STAGED_CASES[5]], ids=_staged_id)
@pytest.mark.usefixtures("no_bands")  # (the band kernel would take contiguous stride-2 dy)
def test_staged_backward_data_adjoint_identity(case):
    import cupy

    xs, ws, ys, opts = _staged_problem(case, "float64")
    rng = rng_for("dw-staged-adjoint", _staged_id(case))
    x, w, dy = (cupy.asarray(random_array(rng, s, "float64")) for s in (xs, ws, ys))
    lhs = float(cupy.vdot(cupyconv.conv(x, w, method="depthwise", **opts), dy))
    mid = float(cupy.vdot(x, cupyconv.conv_backward_data(dy, w, xs, method="depthwise", **opts)))
    assert mid == pytest.approx(lhs, rel=1e-10, abs=1e-10)


# ---- band kernel (depthwise_bands.cu) ----------------------------------------------------------
# Forward and backward-data on bands of rows staged in shared memory: MobileNet-sized narrow
# planes, odd sizes, square and rectangular filters up to 7x7, stride 1 and 2, pads beyond K - 1,
# a channel multiplier (forward only), and planes large enough to be split into bands (the
# stride-2 backward-data of a 112^2 layer).  (n, c, mult, (H, W), (KH, KW), padding, stride)
BAND_CASES = [
    (2, 960, 1, (7, 7), (3, 3), 1, 1),
    (2, 144, 1, (14, 14), (3, 3), 1, 2),
    (3, 5, 1, (14, 14), (5, 5), 2, 1),
    (1, 4, 1, (15, 13), (5, 5), 2, 2),
    (1, 3, 1, (9, 11), (7, 7), 3, 1),
    (2, 3, 1, (13, 12), (7, 7), [(3, 2), (2, 3)], 2),
    (1, 3, 2, (7, 9), (3, 3), 1, 1),
    (2, 3, 1, (8, 11), (1, 3), [(0, 0), (1, 1)], 1),
    (1, 3, 1, (6, 7), (3, 3), 3, 1),
    (1, 2, 1, (112, 112), (3, 3), [(0, 1), (0, 1)], 2),
    (1, 6, 1, (57, 43), (5, 5), 2, 2),
]


def _band_id(case):
    n, c, m, sp, k, p, s = case
    return f"n{n}c{c}m{m}-{sp[0]}x{sp[1]}-k{k[0]}x{k[1]}-p{p}-s{s}".replace(" ", "")


@pytest.mark.parametrize("case,dtype", with_dtypes(BAND_CASES, BAND_CASES[::3], ids=_band_id))
@pytest.mark.usefixtures("bands_preferred")
def test_band_kernel_forward_and_backward_data(case, dtype):
    """conv and conv_backward_data on the band kernel: with and without bias, aligned and
    misaligned x / dy and outputs, two calls with fresh data (the second replays the prepared
    call), into poisoned outputs, against the float64 reference."""
    import cupy
    from cupyconv._depthwise.bands import band_plan
    from cupyconv._depthwise.launch import band_choice

    n, c, m, sp, k, pad, stride = case
    xs, ws = (n, c, *sp), (c * m, 1, *k)
    opts = dict(padding=pad, groups=c, stride=stride)
    g = ConvGeometry.from_shapes(xs, ws, dtype=dtype, **opts)
    ys = g.output_shape
    assert band_choice(g, False, element_strides(cupy.empty(xs, dtype), False)) is not None
    assert (band_plan(g, True) is not None) == (m == 1)
    for call in range(2):
        rng = rng_for("dw-bands", _band_id(case), dtype, call)
        xh, wh, dyh = (random_array(rng, s, dtype) for s in (xs, ws, ys))
        bh = random_array(rng, (ws[0],), dtype)
        x, w, dy = cupy.asarray(xh), cupy.asarray(wh), cupy.asarray(dyh)
        for bias, bias_h in ((cupy.asarray(bh), bh), (None, None)):
            ref = reference.conv(xh, wh, bias_h, **opts)
            for xin, out in ((x, cupy.empty(ys, dtype)),
                             (_misaligned(cupy, x), _misaligned(cupy, cupy.empty(ys, dtype)))):
                y = poison(out)
                cupyconv.conv(xin, w, bias, out=y, method="depthwise", **opts)
                assert rel_error(y, ref) <= tolerance(dtype, ref), ("forward", call, bias is None)
        if m != 1:
            continue
        ref = reference.conv_backward_data(dyh, wh, xs, **opts)
        for dyin, out in ((dy, cupy.empty(xs, dtype)),
                          (_misaligned(cupy, dy), _misaligned(cupy, cupy.empty(xs, dtype)))):
            dx = poison(out)
            cupyconv.conv_backward_data(dyin, w, xs, out=dx, method="depthwise", **opts)
            assert rel_error(dx, ref) <= tolerance(dtype, ref), ("backward-data", call)


@pytest.mark.parametrize("case", [BAND_CASES[1], BAND_CASES[5], BAND_CASES[9]], ids=_band_id)
@pytest.mark.usefixtures("bands_preferred")
def test_band_kernel_adjoint_identity(case):
    """<conv(x), dy> == <x, conv_backward_data(dy)> in float64 on the band kernel."""
    import cupy

    n, c, m, sp, k, pad, stride = case
    xs, ws = (n, c, *sp), (c * m, 1, *k)
    opts = dict(padding=pad, groups=c, stride=stride)
    ys = cupyconv.output_shape(xs, ws, **opts)
    rng = rng_for("dw-bands-adjoint", _band_id(case))
    x, w, dy = (cupy.asarray(random_array(rng, s, "float64")) for s in (xs, ws, ys))
    lhs = float(cupy.vdot(cupyconv.conv(x, w, method="depthwise", **opts), dy))
    mid = float(cupy.vdot(x, cupyconv.conv_backward_data(dy, w, xs, method="depthwise", **opts)))
    assert mid == pytest.approx(lhs, rel=1e-10, abs=1e-10)


def test_band_kernel_takes_narrow_planes_and_strided_backward_data():
    """Where prefer_bands sends the default route: narrow planes (forward and backward-data), and
    stride-2 backward-data of wide ones instead of the channels-last copies; the plane row walk
    keeps wide planes."""
    import cupy
    from cupyconv._depthwise.launch import band_choice

    def choice(sp, stride, transposed):
        g = ConvGeometry.from_shapes((2, 8, *sp), (8, 1, 3, 3), groups=8, padding=1,
                                     stride=stride, dtype="float32")
        a = cupy.empty(g.output_shape if transposed else g.input_shape, "float32")
        return band_choice(g, transposed, element_strides(a, False)) is not None

    assert choice((14, 14), 1, False) and choice((7, 7), 1, True)
    assert choice((112, 112), 2, True) and not choice((112, 112), 2, False)
    assert not choice((56, 56), 1, False) and not choice((56, 56), 1, True)
